//! What the handlers take from a request, checked, with every refusal in
//! the API's error shape ([`ApiError`]) rather than axum's plain-text
//! rejections: bodies read within a bound, JSON bodies, path and query
//! parameters, the operator's name, and the audit log's cursor.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query};
use axum::http::header::CONTENT_LENGTH;
use axum::http::{HeaderMap, StatusCode};
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use serde::de::DeserializeOwned;

use super::ApiError;
use crate::serve::metrics::{Metrics, Refusal};
use custodian_base::error::ErrorKind;

/// How large one request's body may be.
#[derive(Debug, Clone, Copy)]
pub(super) struct BodyLimit {
    /// The most bytes the body may have.
    pub bytes: u64,
    /// What one body is, for the 413's message ("the body is larger than
    /// this server's limit of N bytes per object"); it may end with what
    /// to do instead.
    pub per: &'static str,
}

impl BodyLimit {
    fn refusal(self) -> ApiError {
        ApiError::too_large(format!(
            "the body is larger than this server's limit of {} bytes per {}",
            self.bytes, self.per
        ))
    }
}

/// How the server reads request bodies, across all requests: a body read
/// whole is held in memory until its handler is done with it (an
/// object's is checked against its CRC before anything is published), and
/// an S3 body streamed into the store holds a fixed reservation while it
/// arrives, so the bytes held at once are bounded here, not only per
/// request. Without this
/// bound, 16 connections each holding an unfinished 60 MiB upload took a
/// server from 81 MB to over 1 GB of memory.
pub struct Bodies {
    /// The most body bytes held at once (`[server] bodies_in_flight_mib`).
    budget: u64,
    /// Body bytes held now: reserved before they are read, released when
    /// the handler drops its [`Received`].
    held: AtomicU64,
    /// The longest pause between two pieces of one body
    /// (`[server] body_timeout_ms`): a client that stops sending midway
    /// gives its reservation back when this passes, not never.
    pause: Duration,
    /// Where refusals are counted.
    metrics: Arc<Metrics>,
}

impl Bodies {
    /// At most `budget` body bytes held at once, each body pausing at most
    /// `pause` between two pieces; refusals counted in `metrics`.
    pub fn new(budget: u64, pause: Duration, metrics: Arc<Metrics>) -> Self {
        Self {
            budget,
            held: AtomicU64::new(0),
            pause,
            metrics,
        }
    }

    /// Body bytes held now.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Acquire)
    }

    /// Reserves `bytes` for a body its caller reads itself (the S3
    /// endpoint decodes `aws-chunked` bodies as they arrive), to grow as
    /// it reads.
    ///
    /// # Errors
    /// 503 `busy` when they do not fit the budget now.
    pub(crate) fn reserve(&self, bytes: u64) -> Result<Reservation<'_>, ApiError> {
        let mut held = Reservation {
            bodies: self,
            bytes: 0,
        };
        held.grow(bytes)?;
        Ok(held)
    }

    /// The longest pause between two pieces of one body.
    pub(crate) fn pause(&self) -> Duration {
        self.pause
    }

    /// Counts a body that paused for longer than [`Bodies::pause`].
    pub(crate) fn timed_out(&self) {
        self.metrics.refused(Refusal::BodyTimeout);
    }
}

/// Body bytes reserved from [`Bodies`], given back when dropped.
pub(crate) struct Reservation<'a> {
    bodies: &'a Bodies,
    bytes: u64,
}

impl Reservation<'_> {
    /// Reserves `more` bytes, if they fit the budget.
    pub(crate) fn grow(&mut self, more: u64) -> Result<(), ApiError> {
        let bodies = self.bodies;
        bodies
            .held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(more)
                    .filter(|total| *total <= bodies.budget)
            })
            .map_err(|_| {
                bodies.metrics.refused(Refusal::BodyBudget);
                ApiError::of_kind(
                    ErrorKind::Busy,
                    format!(
                        "the server holds as many request bodies as it may ({} bytes across \
                         all requests); retry in a moment",
                        bodies.budget
                    ),
                )
            })?;
        self.bytes += more;
        Ok(())
    }
}

impl std::fmt::Debug for Reservation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reservation")
            .field("bytes", &self.bytes)
            .finish_non_exhaustive()
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.bodies.held.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// A body read whole, with its bytes' reservation: keep `held` alive for
/// as long as `bytes` (or a clone of them) are in use.
#[derive(Debug)]
pub(super) struct Received<'a> {
    /// The body.
    pub bytes: Bytes,
    /// Its reservation from [`Bodies`].
    pub held: Reservation<'a>,
}

/// Reads a body of at most `limit` bytes, refusing more (413
/// `payload_too_large`) before holding them: a declared length over the
/// limit is refused before anything is read, and a body without one is
/// stopped as soon as it passes the limit, so one request pins at most
/// `limit` bytes. Its bytes are reserved from `bodies` before they are
/// held (503 `busy` when they do not fit: the whole declared length at
/// once, else chunk by chunk), and a pause longer than the bodies' bound
/// is 408 `request_timeout`.
pub(super) async fn read_body<'a>(
    bodies: &'a Bodies,
    body: Body,
    headers: &HeaderMap,
    limit: BodyLimit,
) -> Result<Received<'a>, ApiError> {
    read_body_inspecting(bodies, body, headers, limit, |_| ()).await
}

/// [`read_body`], showing `inspect` each chunk as it arrives, while its
/// bytes are still in cache (the object routes compute the CRC-64/NVME
/// this way).
pub(super) async fn read_body_inspecting<'a>(
    bodies: &'a Bodies,
    body: Body,
    headers: &HeaderMap,
    limit: BodyLimit,
    mut inspect: impl FnMut(&[u8]),
) -> Result<Received<'a>, ApiError> {
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit.bytes) {
        return Err(limit.refusal());
    }
    let mut held = Reservation { bodies, bytes: 0 };
    // A declared length is allocated up front below, so it is reserved up
    // front: a body that cannot fit is refused before it is read.
    held.grow(declared.unwrap_or(0))?;
    // At most `limit`, checked above.
    let mut buffer = BytesMut::with_capacity(declared.unwrap_or(0) as usize);
    let mut chunks = body.into_data_stream();
    loop {
        let next = tokio::time::timeout(bodies.pause, chunks.next())
            .await
            .map_err(|_| {
                bodies.metrics.refused(Refusal::BodyTimeout);
                ApiError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    "request_timeout",
                    format!(
                        "the body paused for more than {} ms; nothing was done",
                        bodies.pause.as_millis()
                    ),
                )
            })?;
        let Some(chunk) = next else { break };
        let chunk =
            chunk.map_err(|e| ApiError::invalid(format!("reading the request body: {e}")))?;
        let len = (buffer.len() + chunk.len()) as u64;
        if len > limit.bytes {
            return Err(limit.refusal());
        }
        if len > held.bytes {
            let more = len - held.bytes;
            held.grow(more)?;
        }
        inspect(&chunk);
        buffer.extend_from_slice(&chunk);
    }
    Ok(Received {
        bytes: buffer.freeze(),
        held,
    })
}

/// A JSON body of at most `limit` bytes as `T` (`what` names it in the
/// 400), read within `bodies` as [`read_body`] reads. Read as bytes, so a
/// missing `Content-Type` is no reason to refuse it.
pub(super) async fn json_body<T: DeserializeOwned>(
    bodies: &Bodies,
    body: Body,
    headers: &HeaderMap,
    limit: BodyLimit,
    what: &str,
) -> Result<T, ApiError> {
    let received = read_body(bodies, body, headers, limit).await?;
    serde_json::from_slice(&received.bytes)
        .map_err(|e| ApiError::invalid(format!("the body is not {what}: {e}")))
}

/// A route's path parameters, a rejection being 400 `invalid_argument`.
pub(super) fn path<T>(path: Result<Path<T>, PathRejection>) -> Result<T, ApiError> {
    path.map(|Path(p)| p)
        .map_err(|e| ApiError::invalid(e.body_text()))
}

/// A route's query, a rejection being 400 `invalid_argument`.
pub(super) fn query<T>(query: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    query
        .map(|Query(q)| q)
        .map_err(|e| ApiError::invalid(e.body_text()))
}

/// Longest cursor taken back, in bytes. A cursor is a KV key the server
/// handed out, far shorter; the bound stops a client from making the
/// server decode megabytes of hex into a scan's start.
const MAX_CURSOR_BYTES: usize = 1024;

/// A KV cursor as it travels in a query string: lowercase hex, so any
/// key's bytes pass unescaped.
pub(super) fn cursor_to_hex(key: &[u8]) -> String {
    hex::encode(key)
}

/// The key of a cursor [`cursor_to_hex`] wrote (hex of either case);
/// `None` for anything else, or one over [`MAX_CURSOR_BYTES`].
pub(super) fn cursor_from_hex(text: &str) -> Option<Vec<u8>> {
    if text.len() > 2 * MAX_CURSOR_BYTES {
        return None;
    }
    hex::decode(text).ok()
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use axum::http::HeaderValue;

    use super::*;

    /// Room for every test body, with a pause no test reaches.
    fn roomy() -> Bodies {
        Bodies::new(1 << 20, Duration::from_secs(60), Arc::default())
    }

    const LIMIT: BodyLimit = BodyLimit {
        bytes: 10,
        per: "test",
    };

    fn declaring(len: usize) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_LENGTH, HeaderValue::from(len));
        headers
    }

    /// A body without a declared length, arriving in chunks of 3 bytes.
    fn streamed(bytes: &[u8]) -> Body {
        let chunks: Vec<Result<Bytes, Infallible>> = bytes
            .chunks(3)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        Body::from_stream(futures::stream::iter(chunks))
    }

    #[tokio::test]
    async fn a_body_up_to_the_limit_is_read_whole_and_every_chunk_is_inspected() {
        let mut seen = Vec::new();
        let bodies = roomy();
        let body = streamed(b"0123456789");
        let received = read_body_inspecting(&bodies, body, &HeaderMap::new(), LIMIT, |c| {
            seen.push(c.len());
        })
        .await
        .unwrap();
        assert_eq!(received.bytes, "0123456789");
        assert_eq!(bodies.held(), 10);
        drop(received);
        assert_eq!(bodies.held(), 0);
        assert_eq!(seen, [3, 3, 3, 1]);
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_413_whether_declared_or_streamed() {
        for (body, headers) in [
            (Body::from("01234567890"), declaring(11)),
            (streamed(b"01234567890"), HeaderMap::new()),
        ] {
            let bodies = roomy();
            let error = read_body(&bodies, body, &headers, LIMIT).await.unwrap_err();
            assert_eq!(bodies.held(), 0);
            assert_eq!(error.status, StatusCode::PAYLOAD_TOO_LARGE);
            assert_eq!(error.code, "payload_too_large");
            assert_eq!(
                error.message,
                "the body is larger than this server's limit of 10 bytes per test"
            );
        }
    }

    #[tokio::test]
    async fn a_body_that_is_not_the_json_asked_for_is_invalid_argument_naming_the_problem() {
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Wanted {
            store: String,
        }
        let limit = BodyLimit {
            bytes: 100,
            per: "test",
        };
        let right = Body::from(r#"{"store": "s"}"#);
        let wanted = json_body::<Wanted>(&roomy(), right, &HeaderMap::new(), limit, "a wanted")
            .await
            .unwrap();
        assert_eq!(wanted.store, "s");
        let wrong_type = Body::from(r#"{"store": 1}"#);
        let error = json_body::<Wanted>(&roomy(), wrong_type, &HeaderMap::new(), limit, "a wanted")
            .await
            .unwrap_err();
        assert_eq!(error.code, "invalid_argument");
        assert!(
            error.message.starts_with("the body is not a wanted: ")
                && error.message.contains("expected a string"),
            "{}",
            error.message
        );
        let typo = Body::from(r#"{"store": "s", "stroe": "t"}"#);
        let error = json_body::<Wanted>(&roomy(), typo, &HeaderMap::new(), limit, "x")
            .await
            .unwrap_err();
        assert!(error.message.contains("stroe"), "{}", error.message);
    }

    #[tokio::test]
    async fn bodies_over_the_shared_budget_are_503_busy_and_a_dropped_body_gives_its_bytes_back() {
        let bodies = Bodies::new(15, Duration::from_secs(60), Arc::default());
        let first = read_body(&bodies, Body::from("0123456789"), &declaring(10), LIMIT)
            .await
            .unwrap();
        assert_eq!(bodies.held(), 10);
        // Declared: refused before a byte is read.
        let declared = read_body(&bodies, Body::from("012345"), &declaring(6), LIMIT)
            .await
            .unwrap_err();
        // Streamed: refused at the chunk that would overflow.
        let streamed = read_body(&bodies, streamed(b"012345"), &HeaderMap::new(), LIMIT)
            .await
            .unwrap_err();
        for error in [declared, streamed] {
            assert_eq!(
                (error.status, error.code),
                (StatusCode::SERVICE_UNAVAILABLE, "busy")
            );
            assert!(error.message.contains("15 bytes"), "{}", error.message);
        }
        assert_eq!(bodies.held(), 10, "a refused body holds nothing");
        drop(first);
        let second = read_body(&bodies, Body::from("012345"), &declaring(6), LIMIT)
            .await
            .unwrap();
        assert_eq!(second.bytes, "012345");
    }

    #[tokio::test]
    async fn a_body_that_pauses_longer_than_the_bound_is_408_and_holds_nothing() {
        let bodies = Bodies::new(100, Duration::from_millis(50), Arc::default());
        let stalled = Body::from_stream(
            futures::stream::iter([Ok::<_, Infallible>(Bytes::from_static(b"012"))])
                .chain(futures::stream::pending()),
        );
        let error = read_body(&bodies, stalled, &HeaderMap::new(), LIMIT)
            .await
            .unwrap_err();
        assert_eq!(
            (error.status, error.code),
            (StatusCode::REQUEST_TIMEOUT, "request_timeout")
        );
        assert_eq!(bodies.held(), 0);
    }
}
