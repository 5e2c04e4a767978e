//! Range reads of the object routes (the `Range` header itself is
//! [`byte_range`](crate::serve::http::byte_range)'s): answered 206 with
//! `Content-Range`, or 416. A range read pins the generation it measured,
//! so its bytes all come from one publish.

use std::convert::Infallible;

use axum::body::Body;
use axum::http::header::{CONTENT_LENGTH, CONTENT_RANGE};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::conditions::check_guard;
use super::headers::{read_headers, value};
use crate::serve::http::ApiError;
use crate::serve::http::byte_range::{ByteRange, unsatisfiable};
use custodian_object::ObjectStoreExt;
use custodian_object::{GetOptions, ObjectError, ObjectKey, ObjectStore};

/// How often a range read measures the current object again when it was
/// replaced between the measurement and the read. A writer replacing one
/// key continuously could otherwise keep a reader looping; after this many
/// tries the reader gets the 412 and decides.
const RANGE_READ_ATTEMPTS: usize = 3;

/// Measures the object (or version), resolves `range` against its size,
/// and reads that span of that same generation: 206 with the span, or 416
/// when the range selects no byte of it.
pub(super) async fn read_range(
    store: &dyn ObjectStore,
    key: &str,
    version: Option<&str>,
    guard: Option<&str>,
    range: ByteRange,
) -> Result<Response, ApiError> {
    let mut attempt = 0;
    let (meta, span, segments) = loop {
        attempt += 1;
        let meta = match version {
            Some(version) => store.head_version(key, version).await?,
            None => store.head(key).await?,
        };
        check_guard(&meta, guard)?;
        let Some(span) = range.resolve(meta.size) else {
            let message = format!(
                "the range selects no byte of {key:?}, which has {} bytes",
                meta.size
            );
            return Ok(unsatisfiable(message, Some(meta.size)));
        };
        // A version never changes: nothing to pin. The current object is
        // pinned to the generation just measured.
        let options = GetOptions {
            version_id: version,
            range: Some(span.clone()),
            if_match: version.is_none().then_some(meta.etag.as_str()),
        };
        let read = store
            .get_opts(&ObjectKey::new(key)?, options)
            .await
            .map(|got| got.body);
        match read {
            Ok(segments) => break (meta, span, segments),
            // Replaced between the measurement and the read: the span may
            // not fit the new generation, so measure again. A caller's own
            // guard already held at the measurement; its failure now is
            // the answer.
            Err(ObjectError::PreconditionFailed(_))
                if version.is_none() && guard.is_none() && attempt < RANGE_READ_ATTEMPTS => {}
            Err(error) => return Err(error.into()),
        }
    };
    let mut headers = read_headers(&meta, false)?;
    headers.insert(
        CONTENT_RANGE,
        value(&format!(
            "bytes {}-{}/{}",
            span.start,
            span.end - 1,
            meta.size
        ))?,
    );
    headers.insert(CONTENT_LENGTH, HeaderValue::from(span.end - span.start));
    // The segments go out as they are: a streaming backend's buffers are
    // not copied into one.
    let body = Body::from_stream(futures::stream::iter(
        segments.into_iter().map(Ok::<_, Infallible>),
    ));
    Ok((StatusCode::PARTIAL_CONTENT, headers, body).into_response())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::Router;
    use axum::http::header::{CONTENT_LENGTH, CONTENT_RANGE};

    use super::super::headers::CHECKSUM;
    use super::super::routes;
    use super::super::test_client::{app, create, get};
    use super::*;
    use crate::serve::RequestLimits;
    use crate::serve::test_host::test_host_with;
    use custodian_base::clock::SystemClock;

    #[tokio::test]
    async fn ranges_are_206_with_content_range_and_no_whole_object_crc() {
        let app = app().await;
        create(&app, "k", b"0123456789").await;
        let uri = "/v1/stores/serving/objects/k";
        for (range, bytes, content_range) in [
            ("bytes=2-4", "234", "bytes 2-4/10"),
            ("bytes=7-", "789", "bytes 7-9/10"),
            ("bytes=-3", "789", "bytes 7-9/10"),
            ("bytes=8-100", "89", "bytes 8-9/10"),
            ("bytes=-100", "0123456789", "bytes 0-9/10"),
        ] {
            let read = get(&app, uri, &[("range", range)]).await;
            assert_eq!(read.status, StatusCode::PARTIAL_CONTENT, "{range}");
            assert_eq!(read.body, bytes, "{range}");
            assert_eq!(read.header(CONTENT_RANGE), content_range, "{range}");
            assert_eq!(read.header(CONTENT_LENGTH), bytes.len().to_string());
            assert!(read.headers.get(&CHECKSUM).is_none(), "{range}");
        }
    }

    #[tokio::test]
    async fn an_unsatisfiable_or_malformed_range_is_416() {
        let app = app().await;
        create(&app, "k", b"0123456789").await;
        let uri = "/v1/stores/serving/objects/k";
        for range in [
            "bytes=10-",
            "bytes=-0",
            "bytes=5-2",
            "bytes=0-1,3-4",
            "items=0-1",
            "bytes=+1-2",
        ] {
            let read = get(&app, uri, &[("range", range)]).await;
            assert_eq!(read.status, StatusCode::RANGE_NOT_SATISFIABLE, "{range}");
            assert_eq!(read.code(), "range_not_satisfiable");
        }
        let past_end = get(&app, uri, &[("range", "bytes=10-")]).await;
        assert_eq!(past_end.header(CONTENT_RANGE), "bytes */10");
    }

    #[tokio::test]
    async fn a_range_read_measures_again_when_the_object_is_replaced_midway_but_not_forever() {
        use std::sync::atomic::{AtomicUsize, Ordering};

        use custodian_object::observed::{Call, Observed};

        // `serving`'s pinned reads fail as if a writer replaced the object
        // between the measurement and the read, `refusals` times.
        async fn app_refusing(refusals: usize) -> (Router, Arc<AtomicUsize>) {
            let limits = RequestLimits::default();
            let host = test_host_with(Arc::new(SystemClock), limits).await;
            let mut host = Arc::try_unwrap(host).ok().expect("no other holder yet");
            let reads = Arc::new(AtomicUsize::new(0));
            let seen = reads.clone();
            let inner = host.stores["serving"].clone();
            let observed = Observed::before(inner, move |call| match call {
                Call::Get { range: Some(_), .. } => {
                    if seen.fetch_add(1, Ordering::SeqCst) < refusals {
                        return Err(ObjectError::PreconditionFailed("replaced".into()));
                    }
                    Ok(())
                }
                _ => Ok(()),
            });
            host.stores.insert("serving".into(), Arc::new(observed));
            (routes().with_state(Arc::new(host)), reads)
        }
        let uri = "/v1/stores/serving/objects/k";

        let (app, reads) = app_refusing(1).await;
        create(&app, "k", b"0123456789").await;
        let read = get(&app, uri, &[("range", "bytes=0-1")]).await;
        assert_eq!(read.status, StatusCode::PARTIAL_CONTENT);
        assert_eq!(read.body, "01");
        assert_eq!(reads.load(Ordering::SeqCst), 2);

        let (app, reads) = app_refusing(usize::MAX).await;
        create(&app, "k", b"0123456789").await;
        let read = get(&app, uri, &[("range", "bytes=0-1")]).await;
        assert_eq!(read.status, StatusCode::PRECONDITION_FAILED);
        assert_eq!(reads.load(Ordering::SeqCst), RANGE_READ_ATTEMPTS);
    }
}
