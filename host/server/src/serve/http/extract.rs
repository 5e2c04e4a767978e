//! What the handlers take from a request, checked, with every refusal in
//! the API's error shape ([`ApiError`]) rather than axum's plain-text
//! rejections: bodies read within a bound, JSON bodies, path and query
//! parameters, the operator's name, and the audit log's cursor.

use axum::body::Body;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query};
use axum::http::HeaderMap;
use axum::http::header::CONTENT_LENGTH;
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use serde::de::DeserializeOwned;

use super::ApiError;

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

/// Reads a body of at most `limit` bytes, refusing more (413
/// `payload_too_large`) before holding them: a declared length over the
/// limit is refused before anything is read, and a body without one is
/// stopped as soon as it passes the limit, so one request pins at most
/// `limit` bytes.
pub(super) async fn read_body(
    body: Body,
    headers: &HeaderMap,
    limit: BodyLimit,
) -> Result<Bytes, ApiError> {
    read_body_inspecting(body, headers, limit, |_| ()).await
}

/// [`read_body`], showing `inspect` each chunk as it arrives, while its
/// bytes are still in cache (the object routes compute the CRC-64/NVME
/// this way).
pub(super) async fn read_body_inspecting(
    body: Body,
    headers: &HeaderMap,
    limit: BodyLimit,
    mut inspect: impl FnMut(&[u8]),
) -> Result<Bytes, ApiError> {
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit.bytes) {
        return Err(limit.refusal());
    }
    // At most `limit`, checked above.
    let mut buffer = BytesMut::with_capacity(declared.unwrap_or(0) as usize);
    let mut chunks = body.into_data_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk =
            chunk.map_err(|e| ApiError::invalid(format!("reading the request body: {e}")))?;
        if (buffer.len() + chunk.len()) as u64 > limit.bytes {
            return Err(limit.refusal());
        }
        inspect(&chunk);
        buffer.extend_from_slice(&chunk);
    }
    Ok(buffer.freeze())
}

/// A JSON body of at most `limit` bytes as `T` (`what` names it in the
/// 400). Read as bytes, so a missing `Content-Type` is no reason to
/// refuse it.
pub(super) async fn json_body<T: DeserializeOwned>(
    body: Body,
    headers: &HeaderMap,
    limit: BodyLimit,
    what: &str,
) -> Result<T, ApiError> {
    let bytes = read_body(body, headers, limit).await?;
    serde_json::from_slice(&bytes)
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

    use axum::http::{HeaderValue, StatusCode};

    use super::*;

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
        let bytes = read_body_inspecting(streamed(b"0123456789"), &HeaderMap::new(), LIMIT, |c| {
            seen.push(c.len());
        })
        .await
        .unwrap();
        assert_eq!(bytes, "0123456789");
        assert_eq!(seen, [3, 3, 3, 1]);
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_413_whether_declared_or_streamed() {
        for (body, headers) in [
            (Body::from("01234567890"), declaring(11)),
            (streamed(b"01234567890"), HeaderMap::new()),
        ] {
            let error = read_body(body, &headers, LIMIT).await.unwrap_err();
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
        let wanted = json_body::<Wanted>(right, &HeaderMap::new(), limit, "a wanted")
            .await
            .unwrap();
        assert_eq!(wanted.store, "s");
        let wrong_type = Body::from(r#"{"store": 1}"#);
        let error = json_body::<Wanted>(wrong_type, &HeaderMap::new(), limit, "a wanted")
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
        let error = json_body::<Wanted>(typo, &HeaderMap::new(), limit, "x")
            .await
            .unwrap_err();
        assert!(error.message.contains("stroe"), "{}", error.message);
    }
}
