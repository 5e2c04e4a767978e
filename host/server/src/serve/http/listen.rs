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
//! - **Unread bodies close the connection.** An answer given before its
//!   request's body was read to the end (a refusal, say) carries
//!   `Connection: close`, and the connection closes after it. Otherwise
//!   the connection's next bytes are ambiguous: a client that sent
//!   `Expect: 100-continue` and got a final status sends no body (boto3
//!   does this), so draining the announced length would eat the start of
//!   its next request, which then arrives with a mangled method and
//!   fails its signature; a client that did send the body would have it
//!   parsed as a request. RFC 9110 §10.1.1 asks a server answering early
//!   to say which it does: closing is the one both kinds of client
//!   handle.
//!
//! On shutdown the listener stops accepting, asks every connection to
//! close once its request in flight is answered, and finishes when the
//! last one has.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderValue, header};
use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
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
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let (mut head, body) = request.into_parts();
        head.extensions.insert(connection.clone());
        let (body, read) = Tracked::new(body);
        let answered = router.clone().oneshot(Request::from_parts(head, body));
        async move {
            let mut response = answered.await?;
            if read.is_some_and(|read| !read.load(Ordering::Acquire)) {
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            Ok::<_, std::convert::Infallible>(response)
        }
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

/// A request body that records when it has been read to its end.
struct Tracked {
    inner: Incoming,
    /// True once the body has no more frames; `None` for a request
    /// without a body (most reads), which has nothing to track and
    /// costs no allocation.
    read: Option<Arc<AtomicBool>>,
}

impl Tracked {
    fn new(inner: Incoming) -> (Self, Option<Arc<AtomicBool>>) {
        let read = (!inner.is_end_stream()).then(|| Arc::new(AtomicBool::new(false)));
        let tracked = Self {
            inner,
            read: read.clone(),
        };
        (tracked, read)
    }
}

impl Body for Tracked {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        // A reader may stop at the last frame without polling for the
        // end: a body of known length ends with its last byte.
        if (matches!(polled, Poll::Ready(None)) || self.inner.is_end_stream())
            && let Some(read) = &self.read
        {
            read.store(true, Ordering::Release);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
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

    /// Serves a router on a free port: `/refuse` answers 403 without
    /// reading the body, `/read` reads it and answers 200.
    async fn serving() -> SocketAddr {
        use axum::routing::put;
        let router = Router::new()
            .route(
                "/refuse",
                put(|| async { axum::http::StatusCode::FORBIDDEN }),
            )
            .route("/read", put(|body: String| async move { body }));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(serve(
            listener,
            router,
            ListenLimits::default(),
            Arc::new(Metrics::new()),
            std::future::pending(),
        ));
        address
    }

    /// Sends `request` and reads one whole response (headers and a
    /// `content-length` body), or `None` at the end of the stream.
    async fn exchange(stream: &mut TcpStream, request: &str) -> Option<String> {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        // The peer may have closed already: the read below tells.
        let _ = stream.write_all(request.as_bytes()).await;
        let mut seen = Vec::new();
        let mut buffer = [0u8; 4096];
        loop {
            let text = String::from_utf8_lossy(&seen).into_owned();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length: ")
                            .map(str::to_owned)
                    })
                    .map_or(0, |n| n.trim().parse::<usize>().unwrap());
                if body.len() >= length {
                    return Some(text);
                }
            }
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => {
                    return (!seen.is_empty()).then(|| String::from_utf8_lossy(&seen).into_owned());
                }
                Ok(n) => seen.extend_from_slice(&buffer[..n]),
            }
        }
    }

    #[tokio::test]
    async fn an_answer_before_the_body_was_read_closes_the_connection_so_the_next_request_is_not_misread()
     {
        let address = serving().await;
        let mut stream = TcpStream::connect(address).await.unwrap();
        // As boto3 does: it announces a body, waits for `100 Continue`,
        // and on a final status sends no body but its next request.
        let refused = exchange(
            &mut stream,
            "PUT /refuse HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\nexpect: 100-continue\r\n\r\n",
        )
        .await
        .unwrap();
        assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
        assert!(
            refused.to_ascii_lowercase().contains("connection: close"),
            "{refused}"
        );
        let next = exchange(
            &mut stream,
            "PUT /read HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\nok",
        )
        .await;
        assert_eq!(next, None, "the connection is closed, not reused");
    }

    #[tokio::test]
    async fn a_connection_whose_bodies_were_read_stays_open_for_the_next_request() {
        let address = serving().await;
        let mut stream = TcpStream::connect(address).await.unwrap();
        for body in ["one", "two"] {
            let request = format!(
                "PUT /read HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            let answer = exchange(&mut stream, &request).await.unwrap();
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
            assert!(answer.ends_with(body), "{answer}");
            assert!(
                !answer.to_ascii_lowercase().contains("connection: close"),
                "{answer}"
            );
        }
        // A request with no body at all is read to its end at once.
        let refused = exchange(&mut stream, "PUT /refuse HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        assert!(
            !refused.to_ascii_lowercase().contains("connection: close"),
            "{refused}"
        );
    }

    #[test]
    fn a_mapped_ipv4_peer_counts_as_itself() {
        let mapped: SocketAddr = "[::ffff:10.0.0.1]:80".parse().unwrap();
        assert_eq!(canonical(mapped), ip("10.0.0.1"));
    }
}
