//! Reading a repository's files by path: the serving path end users read
//! through.
//!
//! | route | answer |
//! |---|---|
//! | `GET /v1/repos/{ns}/{name}/files/{path…}` | 200 the file, or 206 one `Range` of it |
//! | `HEAD` of the same | the same headers, no body |
//!
//! A file is reassembled from the `serving` store as it was pushed: a
//! blob as itself, a manifest's chunks in order. The body is streamed a
//! span at a time ([`read::READ_SPAN_BYTES`]), so a reader holds at most
//! one span of it, whatever the file's size.
//!
//! Headers: `ETag` is the file's object id, quoted (content-addressed:
//! the same bytes have the same etag in every repository, and a path
//! pushed again with other bytes has another); `If-None-Match` with it is
//! 304. `x-amz-checksum-crc64nvme` is the whole file's CRC-64/NVME (not
//! sent with a range, which it does not describe); `Accept-Ranges: bytes`.
//!
//! Errors: 404 `not_found` when the path names no file; 400
//! `invalid_argument` for a bad repository name or path, or a path that
//! names a directory (list the repository instead); 416 for a range that
//! selects no byte; the index's and the store's failures as for the other
//! content routes.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::header::{
    ACCEPT_RANGES, CONTENT_LENGTH, CONTENT_RANGE, CONTENT_TYPE, ETAG, IF_NONE_MATCH, RANGE,
};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::put;
use futures::{StreamExt, TryStreamExt};

use super::ApiError;
use super::byte_range::{parse_range, unsatisfiable};
use super::content::push_file;
use super::extract::path;
use super::objects::headers::{CHECKSUM, header_text, value};
use crate::serve::Host;
use custodian_base::checksum;
use custodian_core::content::{self, RepoName, read};
use custodian_object::ObjectStore;

/// The content model's kind of the object the path names.
const KIND: HeaderName = HeaderName::from_static("x-custodian-object-kind");

/// A file's route: pushed (`PUT`, see [`push_file`]) and read here.
pub(super) fn routes() -> Router<Arc<Host>> {
    // Bodies are bounded in the handlers: a PUT's by the host's
    // `max_object_bytes`.
    Router::new().route(
        "/v1/repos/{ns}/{name}/files/{*path}",
        put(push_file).get(read_file),
    )
}

/// `GET`/`HEAD /v1/repos/{ns}/{name}/files/{path…}`.
async fn read_file(
    State(host): State<Arc<Host>>,
    params: Result<Path<(String, String, String)>, PathRejection>,
    request: HeaderMap,
) -> Result<Response, ApiError> {
    let (namespace, name, file_path) = path(params)?;
    let repo = RepoName::new(&namespace, &name).map_err(ApiError::from)?;
    content::index::validate_path(&file_path).map_err(ApiError::from)?;
    let serving = host.store(content::SERVING_STORE)?.clone();
    let file = read::open_file(host.kv.as_ref(), serving.as_ref(), &repo, &file_path)
        .await
        .map_err(ApiError::from)?;
    let etag = format!("\"{}\"", file.entry.id);
    let mut headers = HeaderMap::new();
    headers.insert(ETAG, value(&etag)?);
    headers.insert(ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    headers.insert(KIND, HeaderValue::from_static(file.entry.kind.name()));
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    if none_match(&request, &etag)? {
        return Ok((StatusCode::NOT_MODIFIED, headers).into_response());
    }
    let len = file.len();
    let (status, span) = match header_text(&request, &RANGE)? {
        None => {
            headers.insert(CHECKSUM, value(&checksum::to_wire(file.crc64))?);
            (StatusCode::OK, 0..len)
        }
        Some(range) => {
            let Some(span) = parse_range(range).ok().and_then(|r| r.resolve(len)) else {
                let message = format!("the range selects no byte of a file of {len} bytes");
                return Ok(unsatisfiable(message, Some(len)));
            };
            let content_range = format!("bytes {}-{}/{len}", span.start, span.end - 1);
            headers.insert(CONTENT_RANGE, value(&content_range)?);
            (StatusCode::PARTIAL_CONTENT, span)
        }
    };
    headers.insert(CONTENT_LENGTH, HeaderValue::from(span.end - span.start));
    Ok((status, headers, stream(serving, file.spans(span))).into_response())
}

/// The file's bytes, read one span after the other as the client takes
/// them. A failure midway ends the body early: the status is already
/// sent, so the client sees a body shorter than its `Content-Length`.
fn stream(
    serving: Arc<dyn ObjectStore>,
    spans: Vec<(content::ObjectId, std::ops::Range<u64>)>,
) -> Body {
    let segments = futures::stream::iter(spans)
        .then(move |(piece, span)| {
            let serving = serving.clone();
            async move { read::read_span(serving.as_ref(), &piece, span).await }
        })
        .map_ok(|segments| {
            futures::stream::iter(segments.into_iter().map(Ok::<_, content::ContentError>))
        })
        .try_flatten();
    Body::from_stream(segments)
}

/// Whether `If-None-Match` names `etag` (or is `*`): the client has the
/// file already.
fn none_match(request: &HeaderMap, etag: &str) -> Result<bool, ApiError> {
    Ok(header_text(request, &IF_NONE_MATCH)?.is_some_and(|value| {
        value
            .split(',')
            .map(str::trim)
            .any(|tag| tag == "*" || tag.trim_start_matches("W/") == etag)
    }))
}

#[cfg(test)]
mod tests {
    use axum::http::Method;
    use axum::http::header::{CONTENT_LENGTH, CONTENT_RANGE, ETAG};

    use super::super::test_client::{get, send};
    use super::*;
    use crate::serve::test_host::test_host;
    use custodian_core::content::{CHUNK_BYTES, ObjectId};

    const URI: &str = "/v1/repos/alpha/one/files/dir/data.bin";

    /// Pushes `bytes` to `uri`; the entry's object id.
    async fn push(host: &Arc<Host>, uri: &str, bytes: Vec<u8>) -> String {
        let pushed = send(host, Method::PUT, uri, &[], bytes)
            .await
            .expect(StatusCode::OK);
        pushed.json()["id"].as_str().unwrap().to_owned()
    }

    /// A file over two chunks, so a manifest and three chunks.
    fn large() -> Vec<u8> {
        let len = usize::try_from(2 * CHUNK_BYTES + 1234).unwrap();
        (0..len).map(|i| (i % 251) as u8).collect()
    }

    #[tokio::test]
    async fn a_pushed_file_reads_back_by_its_path_with_its_etag_and_crc() {
        let host = test_host().await;
        push(&host, URI, b"hello, file".to_vec()).await;
        let read = get(&host, URI).await.expect(StatusCode::OK);
        assert_eq!(read.body, "hello, file");
        let id = ObjectId::of(b"hello, file");
        assert_eq!(read.header(ETAG), format!("\"{id}\""));
        assert_eq!(
            read.header(&CHECKSUM),
            checksum::to_wire(checksum::crc64_nvme(b"hello, file"))
        );
        assert_eq!(read.header(&KIND), "blob");
        assert_eq!(read.header(ACCEPT_RANGES), "bytes");
    }

    #[tokio::test]
    async fn a_file_of_several_chunks_is_reassembled_in_order() {
        let host = test_host().await;
        let bytes = large();
        let id = push(&host, URI, bytes.clone()).await;
        let read = get(&host, URI).await.expect(StatusCode::OK);
        assert_eq!(read.header(&KIND), "manifest");
        assert_eq!(read.header(CONTENT_LENGTH), bytes.len().to_string());
        assert_eq!(read.header(ETAG), format!("\"{id}\""));
        assert_eq!(
            read.header(&CHECKSUM),
            checksum::to_wire(checksum::crc64_nvme(&bytes))
        );
        assert!(read.body == bytes, "the reassembled file differs");
    }

    #[tokio::test]
    async fn a_range_crossing_chunks_is_206_with_exactly_its_bytes_and_no_whole_file_crc() {
        let host = test_host().await;
        let bytes = large();
        push(&host, URI, bytes.clone()).await;
        let len = bytes.len();
        let start = usize::try_from(CHUNK_BYTES).unwrap() - 10;
        let end = usize::try_from(2 * CHUNK_BYTES).unwrap() + 5;
        let range = format!("bytes={start}-{end}");
        let read = send(&host, Method::GET, URI, &[("range", &range)], Vec::new())
            .await
            .expect(StatusCode::PARTIAL_CONTENT);
        assert!(read.body == bytes[start..=end], "the range's bytes differ");
        assert_eq!(
            read.header(CONTENT_RANGE),
            format!("bytes {start}-{end}/{len}")
        );
        assert!(read.headers.get(&CHECKSUM).is_none());
        let past = send(
            &host,
            Method::GET,
            URI,
            &[("range", "bytes=999999999-")],
            Vec::new(),
        )
        .await
        .expect(StatusCode::RANGE_NOT_SATISFIABLE);
        assert_eq!(past.header(CONTENT_RANGE), format!("bytes */{len}"));
    }

    #[tokio::test]
    async fn head_answers_the_headers_and_a_known_etag_is_304() {
        let host = test_host().await;
        push(&host, URI, b"cached".to_vec()).await;
        let head = send(&host, Method::HEAD, URI, &[], Vec::new())
            .await
            .expect(StatusCode::OK);
        assert!(head.body.is_empty());
        assert_eq!(head.header(CONTENT_LENGTH), "6");
        let etag = head.header(ETAG).to_owned();
        send(
            &host,
            Method::GET,
            URI,
            &[("if-none-match", &etag)],
            Vec::new(),
        )
        .await
        .expect(StatusCode::NOT_MODIFIED);
        send(
            &host,
            Method::GET,
            URI,
            &[("if-none-match", "\"other\"")],
            Vec::new(),
        )
        .await
        .expect(StatusCode::OK);
    }

    #[tokio::test]
    async fn a_missing_path_is_404_and_bad_names_or_paths_are_400() {
        let host = test_host().await;
        push(&host, URI, b"x".to_vec()).await;
        let missing = get(&host, "/v1/repos/alpha/one/files/nothing/here").await;
        assert_eq!(
            (missing.status, missing.code().as_str()),
            (StatusCode::NOT_FOUND, "not_found")
        );
        let other_repo = get(&host, "/v1/repos/beta/two/files/dir/data.bin").await;
        assert_eq!(other_repo.status, StatusCode::NOT_FOUND);
        for bad in [
            "/v1/repos/Alpha/one/files/dir/data.bin",
            "/v1/repos/alpha/one/files/dir/../data.bin",
            "/v1/repos/alpha/one/files/dir//data.bin",
        ] {
            let read = get(&host, bad).await;
            assert_eq!(read.status, StatusCode::BAD_REQUEST, "{bad}");
        }
    }

    #[tokio::test]
    async fn encoded_traversal_overlong_paths_and_other_methods_are_refused() {
        let host = test_host().await;
        push(&host, URI, b"x".to_vec()).await;
        for bad in [
            "/v1/repos/alpha/one/files/dir/%2e%2e/data.bin",
            "/v1/repos/alpha/one/files/dir%2F..%2Fdata.bin",
            "/v1/repos/alpha/one/files/dir/%00data.bin",
        ] {
            let read = get(&host, bad).await;
            assert_eq!(read.status, StatusCode::BAD_REQUEST, "{bad}");
        }
        let long = format!("/v1/repos/alpha/one/files/{}", "a".repeat(8 << 10));
        let read = get(&host, &long).await;
        assert!(read.status.is_client_error(), "{}", read.status);
        for method in [Method::POST, Method::DELETE, Method::PATCH] {
            let read = send(&host, method.clone(), URI, &[], Vec::new()).await;
            assert_eq!(read.status, StatusCode::METHOD_NOT_ALLOWED, "{method}");
        }
        // Still there, unchanged.
        assert_eq!(get(&host, URI).await.expect(StatusCode::OK).body, "x");
    }

    #[tokio::test]
    async fn reading_a_file_needs_the_token() {
        let host = test_host().await;
        push(&host, URI, b"secret".to_vec()).await;
        let read = send(
            &host,
            Method::GET,
            URI,
            &[("authorization", "")],
            Vec::new(),
        )
        .await;
        assert_eq!(read.status, StatusCode::UNAUTHORIZED);
    }
}
