//! The object routes' headers, both ways: a request's text headers, its
//! claimed CRC-64/NVME and `x-amz-meta-*` user metadata; a response's
//! `ETag`, `x-amz-version-id`, `x-amz-checksum-crc64nvme`, user metadata
//! and `Last-Modified` (an HTTP date).

use axum::http::header::{ACCEPT_RANGES, ETAG, LAST_MODIFIED};
use axum::http::{HeaderMap, HeaderName, HeaderValue};

use crate::serve::http::ApiError;
use crate::serve::user_metadata;
use custodian_base::checksum;
use custodian_object::{Metadata, ObjectMeta};

/// S3's header for a full-object CRC-64/NVME, in its wire form.
pub(in crate::serve::http) const CHECKSUM: HeaderName =
    HeaderName::from_static("x-amz-checksum-crc64nvme");
/// S3's header for the version a response describes.
pub(super) const VERSION_ID: HeaderName = HeaderName::from_static("x-amz-version-id");
/// A header's value as text, if present.
pub(in crate::serve::http) fn header_text<'h>(
    headers: &'h HeaderMap,
    name: &HeaderName,
) -> Result<Option<&'h str>, ApiError> {
    headers
        .get(name)
        .map(|value| {
            value
                .to_str()
                .map(str::trim)
                .map_err(|_| ApiError::invalid(format!("the {name} header is not visible ASCII")))
        })
        .transpose()
}

/// The CRC the caller claims for the body, if it names one.
pub(super) fn claimed_crc(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    header_text(headers, &CHECKSUM)?
        .map(|wire| {
            checksum::from_wire(wire).map_err(|e| ApiError::invalid(format!("{CHECKSUM}: {e}")))
        })
        .transpose()
}

/// The `x-amz-meta-*` headers as user metadata (see
/// [`user_metadata::from_headers`]).
pub(super) fn user_metadata(headers: &HeaderMap) -> Result<Metadata, ApiError> {
    user_metadata::from_headers(headers).map_err(ApiError::invalid)
}

/// A header value from text the server made.
pub(in crate::serve::http) fn value(text: &str) -> Result<HeaderValue, ApiError> {
    HeaderValue::from_str(text)
        .map_err(|_| ApiError::internal(format!("{text:?} cannot be sent as a header value")))
}

/// The headers describing `meta`; the whole-object CRC only when
/// `whole` (it does not describe a part).
pub(super) fn meta_headers(meta: &ObjectMeta, whole: bool) -> Result<HeaderMap, ApiError> {
    let mut headers = HeaderMap::new();
    headers.insert(ETAG, value(&meta.etag)?);
    if let Some(version) = &meta.version_id {
        headers.insert(VERSION_ID, value(version)?);
    }
    if let (true, Some(crc)) = (whole, meta.crc64) {
        headers.insert(CHECKSUM, value(&checksum::to_wire(crc))?);
    }
    Ok(headers)
}

/// The headers of a read of `meta`: [`meta_headers`] plus what an HTTP
/// client of bytes expects, and the user metadata.
pub(super) fn read_headers(meta: &ObjectMeta, whole: bool) -> Result<HeaderMap, ApiError> {
    let mut headers = meta_headers(meta, whole)?;
    headers.insert(ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    if let Some(ms) = meta.last_modified_ms {
        headers.insert(LAST_MODIFIED, value(&http_date(ms / 1000))?);
    }
    user_metadata::answer(&meta.metadata, "application/octet-stream", &mut headers)
        .map_err(ApiError::internal)?;
    Ok(headers)
}

pub(crate) use custodian_s3_wire::date::http_date;

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::header::{CONTENT_LENGTH, ETAG, LAST_MODIFIED};
    use axum::http::{Method, StatusCode};

    use super::super::test_client::{app, create, get, put, request, send};
    use super::*;
    use custodian_base::checksum::crc64_nvme;

    #[tokio::test]
    async fn a_whole_get_has_the_headers_and_the_crc_and_user_metadata_round_trips() {
        let app = app().await;
        let reply = put(
            &app,
            "k",
            &[("if-none-match", "*"), ("x-amz-meta-purpose", "test run")],
            b"0123456789",
        )
        .await;
        let etag = reply.header(ETAG).to_owned();
        let read = get(&app, "/v1/stores/serving/objects/k", &[]).await;
        assert_eq!(read.status, StatusCode::OK);
        assert_eq!(read.body, "0123456789");
        assert_eq!(read.header(ETAG), etag);
        assert_eq!(read.header(CONTENT_LENGTH), "10");
        assert_eq!(
            read.header(&CHECKSUM),
            checksum::to_wire(crc64_nvme(b"0123456789"))
        );
        assert_eq!(read.header("x-amz-meta-purpose"), "test run");
        assert!(read.header(LAST_MODIFIED).ends_with(" GMT"));
        assert!(!read.header(&VERSION_ID).is_empty());
    }

    #[tokio::test]
    async fn a_put_naming_a_publish_stamp_is_refused_and_stores_nothing() {
        let app = app().await;
        for name in ["x-amz-meta-custodian-gen", "x-amz-meta-custodian-epoch"] {
            let headers = [("if-none-match", "*"), (name, "7")];
            let reply = put(&app, "forged", &headers, b"bytes").await;
            let body = String::from_utf8_lossy(&reply.body);
            assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{body}");
            assert!(body.contains("reserved"), "{body}");
        }
        let read = get(&app, "/v1/stores/serving/objects/forged", &[]).await;
        assert_eq!(read.status, StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn head_has_the_headers_of_a_whole_get_and_an_empty_body() {
        let app = app().await;
        create(&app, "k", b"0123456789").await;
        let uri = "/v1/stores/serving/objects/k";
        let whole = get(&app, uri, &[]).await;
        let head = send(&app, request(Method::HEAD, uri, &[], Body::empty())).await;
        assert_eq!(head.status, StatusCode::OK);
        assert!(head.body.is_empty());
        for name in [
            ETAG.as_str(),
            "content-length",
            "x-amz-checksum-crc64nvme",
            "x-amz-version-id",
            "last-modified",
        ] {
            assert_eq!(head.header(name), whole.header(name), "{name}");
        }
        let missing = send(
            &app,
            request(
                Method::HEAD,
                "/v1/stores/serving/objects/absent",
                &[],
                Body::empty(),
            ),
        )
        .await;
        assert_eq!(missing.status, StatusCode::NOT_FOUND);
    }

    #[test]
    fn http_dates_are_imf_fixdates() {
        assert_eq!(http_date(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(http_date(951_782_400), "Tue, 29 Feb 2000 00:00:00 GMT");
    }
}
