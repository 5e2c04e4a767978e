//! The listener: accepts connections and serves HTTP/1.1 on each, within
//! bounds a stranger cannot stretch.
//!
//! - **Header timeout.** A connection must send a request's headers
//!   within [`ListenLimits::header_timeout`] of opening, and of going
//!   idle after a response (hyper times the wait for the next request's
//!   headers the same way), or it is closed: a client that trickles
//!   partial headers (slowloris), or keeps a connection open without
//!   using it, holds it for that long at most.
//! - **Unauthenticated connections.** A connection counts as
//!   unauthenticated from its accept until one of its requests presents a
//!   valid credential ([`Connection::authenticated`]). At most
//!   [`ListenLimits::unauthenticated_per_ip`] such connections per peer
//!   address and [`ListenLimits::unauthenticated`] in all are open at
//!   once; a connection beyond either is closed as soon as it is
//!   accepted, before a byte of it is read. An authenticated client's
//!   connections do not count, so a flood of strangers cannot shut it
//!   out, and the probes (`/healthz`) of a peer that is not flooding stay
//!   answerable.
//!
//! On shutdown the listener stops accepting, asks every connection to
//! close once its request in flight is answered, and finishes when the
//! last one has.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tower::ServiceExt as _;

use crate::serve::metrics::{Metrics, Refusal};

/// The listener's bounds (`[server]` `header_timeout_ms`,
/// `max_unauthenticated_connections`, `max_unauthenticated_per_ip`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenLimits {
    /// How long a connection may take to send a request's headers, from
    /// its accept or from the end of its previous response.
    pub header_timeout: Duration,
    /// Most unauthenticated connections open at once, in all.
    pub unauthenticated: u32,
    /// Most unauthenticated connections open at once from one address.
    pub unauthenticated_per_ip: u32,
}

impl Default for ListenLimits {
    fn default() -> Self {
        Self {
            // Ample for any client on any network to send a few kilobytes
            // of headers; a slow connection is gone within it.
            header_timeout: Duration::from_secs(10),
            // Well under the usual 1024 open files, with room for the
            // data directory's files and the authenticated clients.
            unauthenticated: 512,
            // A browser opens 6 per origin, a proxy or NAT many more: a
            // tenth of the whole, so ten flooding peers cannot fill it.
            unauthenticated_per_ip: 64,
        }
    }
}

/// The unauthenticated connections open now, in all and by peer address.
#[derive(Debug)]
struct Admission {
    limits: ListenLimits,
    open: Mutex<Open>,
}

#[derive(Debug, Default)]
struct Open {
    total: u32,
    by_ip: HashMap<IpAddr, u32>,
}

impl Admission {
    /// Counts one more unauthenticated connection from `ip`, if both caps
    /// have room for it.
    fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<Arc<Connection>> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let from_ip = open.by_ip.get(&ip).copied().unwrap_or(0);
        if open.total >= self.limits.unauthenticated
            || from_ip >= self.limits.unauthenticated_per_ip
        {
            return None;
        }
        open.total += 1;
        open.by_ip.insert(ip, from_ip + 1);
        Some(Arc::new(Connection {
            admission: self.clone(),
            ip,
            counted: Mutex::new(true),
        }))
    }

    /// Stops counting one connection from `ip`.
    fn release(&self, ip: IpAddr) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.total -= 1;
        match open.by_ip.get_mut(&ip) {
            Some(n) if *n > 1 => *n -= 1,
            // The last one: the map holds only peers with connections
            // open, so it cannot grow with every address ever seen.
            _ => {
                open.by_ip.remove(&ip);
            }
        }
    }
}

/// One accepted connection, in every request's extensions: the auth
/// middleware tells it when a request authenticated.
#[derive(Debug)]
pub struct Connection {
    admission: Arc<Admission>,
    ip: IpAddr,
    /// Whether it still counts against the unauthenticated caps.
    counted: Mutex<bool>,
}

impl Connection {
    /// A request on this connection presented a valid credential: it no
    /// longer counts against the unauthenticated caps.
    pub fn authenticated(&self) {
        self.uncount();
    }

    fn uncount(&self) {
        let mut counted = self.counted.lock().unwrap_or_else(PoisonError::into_inner);
        if std::mem::replace(&mut *counted, false) {
            self.admission.release(self.ip);
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.uncount();
    }
}

/// How long the accept loop waits after a failure of `accept` itself
/// (out of file descriptors, say) before it tries again: retrying at once
/// would spin a core while nothing has changed.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Serves `router` on `listener` within `limits` until `shutdown`
/// completes, then drains: no new connection is accepted, each open one
/// closes once its request in flight is answered, and this returns when
/// the last has closed.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ListenLimits,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()>,
) {
    let admission = Arc::new(Admission {
        limits,
        open: Mutex::default(),
    });
    let (stop, stopped) = watch::channel(false);
    // Every connection task holds a sender; `recv` answers `None` once
    // they have all ended.
    let (alive, mut all_closed) = mpsc::channel::<()>(1);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "cannot accept a connection");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Some(connection) = admission.admit(canonical(peer)) else {
            metrics.refused(Refusal::ConnectionCap);
            // Dropped: closed before a byte of it is read.
            continue;
        };
        tokio::spawn(serve_connection(
            stream,
            connection,
            router.clone(),
            Parts {
                header_timeout: limits.header_timeout,
                metrics: metrics.clone(),
                stopped: stopped.clone(),
                _alive: alive.clone(),
            },
        ));
    }
    drop(listener);
    let _ = stop.send(true);
    drop(alive);
    let _ = all_closed.recv().await;
}

/// The peer's address, an IPv4 address mapped into IPv6 as itself: one
/// peer counts once whichever way it reached a dual-stack socket.
fn canonical(peer: SocketAddr) -> IpAddr {
    peer.ip().to_canonical()
}

/// What a connection's task shares with the listener.
struct Parts {
    header_timeout: Duration,
    metrics: Arc<Metrics>,
    /// Turns true when the server shuts down.
    stopped: watch::Receiver<bool>,
    /// Held until the connection ends: the listener's drain waits for it.
    _alive: mpsc::Sender<()>,
}

async fn serve_connection(
    stream: TcpStream,
    connection: Arc<Connection>,
    router: Router,
    mut parts: Parts,
) {
    // Answers are written whole or streamed in large pieces: no reason to
    // hold back small writes.
    let _ = stream.set_nodelay(true);
    let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
        request.extensions_mut().insert(connection.clone());
        router.clone().oneshot(request)
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(parts.header_timeout)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(served);
    let stopping = async {
        // An error is the listener gone: stop all the same.
        let _ = parts.stopped.wait_for(|stopped| *stopped).await;
    };
    let outcome = tokio::select! {
        outcome = served.as_mut() => outcome,
        () = stopping => {
            served.as_mut().graceful_shutdown();
            served.await
        }
    };
    match outcome {
        Ok(()) => {}
        Err(error) if error.is_timeout() => parts.metrics.refused(Refusal::HeaderTimeout),
        // A client that went away, or sent something that is not HTTP:
        // nothing for the server to do.
        Err(error) => tracing::debug!(%error, "a connection ended in error"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admission(unauthenticated: u32, unauthenticated_per_ip: u32) -> Arc<Admission> {
        Arc::new(Admission {
            limits: ListenLimits {
                unauthenticated,
                unauthenticated_per_ip,
                ..ListenLimits::default()
            },
            open: Mutex::default(),
        })
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn each_cap_refuses_the_connection_beyond_it_until_one_closes() {
        let admission = admission(3, 2);
        let a1 = admission.admit(ip("10.0.0.1")).unwrap();
        let _a2 = admission.admit(ip("10.0.0.1")).unwrap();
        assert!(admission.admit(ip("10.0.0.1")).is_none(), "per address");
        let _b1 = admission.admit(ip("10.0.0.2")).unwrap();
        assert!(admission.admit(ip("10.0.0.3")).is_none(), "in all");
        drop(a1);
        assert!(admission.admit(ip("10.0.0.3")).is_some());
    }

    #[test]
    fn an_authenticated_connection_stops_counting_once_and_the_map_forgets_idle_peers() {
        let admission = admission(2, 1);
        let a = admission.admit(ip("10.0.0.1")).unwrap();
        a.authenticated();
        a.authenticated();
        let a2 = admission.admit(ip("10.0.0.1")).unwrap();
        let _b = admission.admit(ip("10.0.0.2")).unwrap();
        drop(a);
        assert!(
            admission.admit(ip("10.0.0.3")).is_none(),
            "dropping an authenticated connection frees nothing"
        );
        drop(a2);
        let open = admission.open.lock().unwrap();
        assert_eq!(open.total, 1);
        assert_eq!(open.by_ip.len(), 1);
    }

    #[test]
    fn a_mapped_ipv4_peer_counts_as_itself() {
        let mapped: SocketAddr = "[::ffff:10.0.0.1]:80".parse().unwrap();
        assert_eq!(canonical(mapped), ip("10.0.0.1"));
    }
}
