//! One delivery to a webhook: an HTTP/1.1 `POST` of the entry as JSON,
//!
//! ```json
//! {"idempotency_key": "takedown:<request hex>:ns/name", "request": "<64 hex>",
//!  "repository": "ns/name", "objects": ["<64 hex>", …], "requested_ms": 1700000000000}
//! ```
//!
//! with `Content-Type: application/json` and `Idempotency-Key: <the
//! key>`, on a connection of its own, the whole exchange bounded by a
//! timeout. A 2xx status is a delivery; anything else — no connection, a
//! timeout, another status — is a failure naming why.
//!
//! Plain `http://` only: receivers are expected on loopback or a private
//! network (or behind a local TLS-terminating proxy).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use axum::body::Body;
use axum::http::header::{CONTENT_TYPE, HOST};
use axum::http::{Request, Uri};
use futures::StreamExt;
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::TcpStream;

use super::Entry;

/// Most bytes of a failed answer's body kept in its error: enough for a
/// receiver's one-line reason, not enough to bloat the delivery state.
const SNIPPET_BYTES: usize = 200;

/// How long a failed answer's body is read for its snippet: the status
/// already decided the failure, so a receiver that stalls its body must
/// not turn it into a timeout.
const SNIPPET_WAIT: Duration = Duration::from_millis(500);

/// Where a webhook is: an `http://host[:port][/path][?query]` URL, checked
/// when the configuration is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    url: String,
    /// The name or address to connect to (an IPv6 address unbracketed).
    host: String,
    port: u16,
    /// `host[:port]`, sent as `Host`.
    authority: String,
    /// The path and query, sent as the request target.
    target: String,
}

impl FromStr for Endpoint {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let uri: Uri = text
            .parse()
            .map_err(|e| format!("{text:?} is not a URL: {e}"))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => {
                return Err(format!(
                    "{text:?}: https is not supported; use an http:// receiver on loopback or a \
                     private network, or a local TLS-terminating proxy"
                ));
            }
            Some(other) => return Err(format!("{text:?}: the scheme must be http, not {other}")),
            None => return Err(format!("{text:?} is not an http://host:port/path URL")),
        }
        let authority = uri
            .authority()
            .ok_or_else(|| format!("{text:?} names no host"))?;
        if authority.as_str().contains('@') {
            return Err(format!(
                "{text:?}: credentials do not belong in the URL (the file is not a secret store)"
            ));
        }
        // A port that does not fit 16 bits parses as none at all: refuse
        // it rather than fall back to 80.
        let port = match authority.port_u16() {
            Some(port) => port,
            None if authority.as_str().len() > authority.host().len() => {
                return Err(format!("{text:?} is not a URL: its port is out of range"));
            }
            None => 80,
        };
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']');
        if host.is_empty() {
            return Err(format!("{text:?} names no host"));
        }
        let target = match uri.path_and_query().map(|p| p.as_str()) {
            None | Some("") => "/".to_owned(),
            Some(target) => target.to_owned(),
        };
        Ok(Self {
            url: text.to_owned(),
            host: host.to_owned(),
            port,
            authority: authority.as_str().to_owned(),
            target,
        })
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.url)
    }
}

/// Why a delivery failed.
#[derive(Debug, thiserror::Error)]
pub enum PostError {
    /// No connection to the receiver.
    #[error("cannot connect to {endpoint}: {source}")]
    Connect {
        /// The webhook.
        endpoint: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The exchange took longer than the timeout.
    #[error("no answer within {} ms", .0.as_millis())]
    Timeout(Duration),
    /// The connection failed mid-exchange.
    #[error("the exchange failed: {0}")]
    Exchange(#[source] hyper::Error),
    /// The request could not be built (a header the receiver's URL or the
    /// entry made invalid).
    #[error("the request cannot be built: {0}")]
    Request(String),
    /// The receiver answered, without a 2xx.
    #[error("HTTP {status}{}", if body.is_empty() { String::new() } else { format!(": {body}") })]
    Status {
        /// The status code.
        status: u16,
        /// The start of the answer's body, control characters blanked.
        body: String,
    },
}

/// The JSON body delivered for `entry`.
pub fn body(entry: &Entry) -> Vec<u8> {
    json!({
        "idempotency_key": entry.idempotency_key(),
        "request": hex::encode(entry.request),
        "repository": entry.repository,
        "objects": entry.objects.iter().map(hex::encode).collect::<Vec<_>>(),
        "requested_ms": entry.requested_ms,
    })
    .to_string()
    .into_bytes()
}

/// POSTs `entry` to `endpoint` within `timeout`; the 2xx status it got.
///
/// # Errors
/// [`PostError`]: the delivery failed, and the entry must stay.
pub async fn post(endpoint: &Endpoint, timeout: Duration, entry: &Entry) -> Result<u16, PostError> {
    tokio::time::timeout(timeout, exchange(endpoint, entry))
        .await
        .map_err(|_| PostError::Timeout(timeout))?
}

async fn exchange(endpoint: &Endpoint, entry: &Entry) -> Result<u16, PostError> {
    let stream = TcpStream::connect((endpoint.host.as_str(), endpoint.port))
        .await
        .map_err(|source| PostError::Connect {
            endpoint: endpoint.to_string(),
            source,
        })?;
    // One small request, then the answer: no point batching it.
    let _ = stream.set_nodelay(true);
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(PostError::Exchange)?;
    let request = Request::post(endpoint.target.as_str())
        .header(HOST, endpoint.authority.as_str())
        .header(CONTENT_TYPE, "application/json")
        .header("idempotency-key", entry.idempotency_key())
        .body(Body::from(body(entry)))
        .map_err(|e| PostError::Request(e.to_string()))?;
    let answer = async move {
        let response = sender
            .send_request(request)
            .await
            .map_err(PostError::Exchange)?;
        let status = response.status();
        if status.is_success() {
            return Ok(status.as_u16());
        }
        Err(PostError::Status {
            status: status.as_u16(),
            body: snippet(response.into_body()).await,
        })
    };
    tokio::pin!(answer, connection);
    // The connection is driven here rather than spawned, so nothing of a
    // delivery outlives it (a timeout drops both). Once it ends, the
    // answer has arrived or failed: await whichever it is.
    tokio::select! {
        biased;
        answered = &mut answer => answered,
        _ = &mut connection => answer.await,
    }
}

/// The start of `body`, lossily decoded, control characters blanked.
async fn snippet(body: hyper::body::Incoming) -> String {
    let mut bytes = Vec::new();
    let mut chunks = Body::new(body).into_data_stream();
    let read = async {
        while bytes.len() < SNIPPET_BYTES {
            match chunks.next().await {
                Some(Ok(chunk)) => bytes.extend_from_slice(&chunk),
                _ => break,
            }
        }
    };
    let _ = tokio::time::timeout(SNIPPET_WAIT, read).await;
    bytes.truncate(SNIPPET_BYTES);
    String::from_utf8_lossy(&bytes)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .trim()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http_url_with_host_port_and_path_is_an_endpoint() {
        let endpoint: Endpoint = "http://cache.internal:8080/purge?src=custodian"
            .parse()
            .unwrap();
        assert_eq!(endpoint.host, "cache.internal");
        assert_eq!(endpoint.port, 8080);
        assert_eq!(endpoint.authority, "cache.internal:8080");
        assert_eq!(endpoint.target, "/purge?src=custodian");
        let bare: Endpoint = "http://127.0.0.1".parse().unwrap();
        assert_eq!((bare.port, bare.target.as_str()), (80, "/"));
        let v6: Endpoint = "http://[::1]:9000/x".parse().unwrap();
        assert_eq!(
            (v6.host.as_str(), v6.authority.as_str()),
            ("::1", "[::1]:9000")
        );
        assert_eq!(v6.to_string(), "http://[::1]:9000/x");
    }

    #[test]
    fn other_schemes_credentials_and_relative_urls_are_refused_saying_why() {
        for (url, why) in [
            ("https://cache/purge", "https is not supported"),
            ("ftp://cache/purge", "the scheme must be http"),
            ("/purge", "not an http://host:port/path URL"),
            ("http://user:secret@cache/purge", "credentials"),
            ("http://cache:99999/", "not a URL"),
            ("not a url", "not a URL"),
        ] {
            let error = url.parse::<Endpoint>().unwrap_err();
            assert!(error.contains(why), "{url}: {error}");
        }
    }

    #[test]
    fn the_body_names_the_key_the_request_the_repository_and_the_objects() {
        let entry = Entry {
            requested_ms: 42,
            request: [0xab; 32],
            repository: "acme/site".into(),
            objects: vec![[1; 32], [2; 32]],
        };
        let body: serde_json::Value = serde_json::from_slice(&body(&entry)).unwrap();
        assert_eq!(
            body,
            json!({
                "idempotency_key": format!("takedown:{}:acme/site", "ab".repeat(32)),
                "request": "ab".repeat(32),
                "repository": "acme/site",
                "objects": ["01".repeat(32), "02".repeat(32)],
                "requested_ms": 42,
            })
        );
    }

    #[test]
    fn a_failed_status_names_its_code_and_the_receivers_reason() {
        let error = PostError::Status {
            status: 503,
            body: "draining".into(),
        };
        assert_eq!(error.to_string(), "HTTP 503: draining");
        let bare = PostError::Status {
            status: 404,
            body: String::new(),
        };
        assert_eq!(bare.to_string(), "HTTP 404");
    }
}
