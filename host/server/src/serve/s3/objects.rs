//! One object: PutObject, GetObject and HeadObject, DeleteObject and
//! CopyObject.
//!
//! - **Writes** are S3's: without a condition a PutObject replaces the
//!   object (last writer wins; a new version on a versioned store);
//!   `If-None-Match: *` creates only, `If-Match: "<etag>"` replaces only
//!   that generation (412 `PreconditionFailed` otherwise). The body is
//!   checked against every claim (see [`body`](super::body)) before the
//!   store is asked, and the store checks the CRC-64/NVME again.
//! - **Reads** stream the object in windows of [`WINDOW_BYTES`], every
//!   window after the first pinned to the first one's etag, so all the
//!   bytes come from one generation and no read holds more than a window.
//!   A whole read is checked against the CRC-64/NVME the object was
//!   published with; a mismatch found after the headers went out ends the
//!   connection before the last byte, so no client takes corrupt bytes
//!   for the object. `Range` (one range; a malformed one is ignored, as S3
//!   does), `versionId`, `If-Match`, `If-None-Match`, `If-Modified-Since`
//!   and `If-Unmodified-Since` are honoured; the whole-object
//!   `x-amz-checksum-crc64nvme` is sent on whole reads.
//! - **Taken-down content** (a `content/<id>` key of the `serving` store
//!   that a takedown withholds) is 451 for every read and write of its
//!   key, checked before the store is asked.

use std::ops::Range;
use std::sync::Arc;

use axum::body::Body;
use axum::http::header::{
    ACCEPT_RANGES, CONTENT_LENGTH, CONTENT_RANGE, ETAG, IF_MATCH, IF_MODIFIED_SINCE, IF_NONE_MATCH,
    IF_UNMODIFIED_SINCE, LAST_MODIFIED, RANGE,
};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use custodian_base::checksum::{self, Crc64Nvme};
use custodian_core::content::{self, denial};
use custodian_core::decisions::access::{Action, Target};
use custodian_object::{
    CopyOptions, DeleteOptions, GetOptions, HeadOptions, Metadata, ObjectError, ObjectKey,
    ObjectMeta, ObjectStore, PutCondition, PutOptions,
};
use custodian_s3_wire::checksum::Claim;
use custodian_s3_wire::date;
use custodian_s3_wire::error::{Code, S3Error};
use custodian_s3_wire::xml::Writer;
use percent_encoding::percent_decode_str;

use super::{Call, body, errors, etag, xml as xml_response};
use crate::serve::http::byte_range::{ByteRange, parse_range};
use crate::serve::user_metadata;
use custodian_s3_wire::date::{http_date, parse_http_date};

/// Bytes read from the store at once when streaming an object: a read
/// holds at most this much (and the client's socket buffer), whatever
/// the object's size.
pub(super) const WINDOW_BYTES: u64 = 8 << 20;

/// The store's key for `key`.
pub(super) fn object_key_of(key: &str) -> Result<ObjectKey, S3Error> {
    ObjectKey::new(key).map_err(|e| errors::of_store(e, false))
}

/// 451 if `key` of `store` is content a takedown withholds.
pub(super) async fn refuse_withheld(call: &Call, store: &str, key: &str) -> Result<(), S3Error> {
    if store != content::SERVING_STORE {
        return Ok(());
    }
    let Some(object) = content::object_of_key(key) else {
        return Ok(());
    };
    match denial::check(call.host.kv.as_ref(), &object).await {
        Ok(None) => Ok(()),
        Ok(Some(withheld)) => Err(S3Error::new(
            Code::UnavailableForLegalReasons,
            format!(
                "A takedown withholds this content (request {}, in force since {} ms); see \
                 /v1/takedowns/{}",
                withheld.request.to_hex(),
                withheld.since_ms,
                withheld.request.to_hex()
            ),
        )),
        Err(error) => Err(errors::of_api(error.into())),
    }
}

/// The `x-amz-meta-*` headers as user metadata (see
/// [`user_metadata::from_headers`]), and the `Content-Type` to keep with
/// the object.
pub(super) fn user_metadata(call: &Call) -> Result<Metadata, S3Error> {
    let headers = &call.parts.headers;
    let mut metadata = user_metadata::from_headers(headers)
        .map_err(|why| S3Error::new(Code::InvalidArgument, why))?;
    user_metadata::keep_content_type(headers, &mut metadata)
        .map_err(|why| S3Error::new(Code::InvalidArgument, why))?;
    Ok(metadata)
}

/// One strong entity-tag from a condition header, quoted as the stores
/// spell etags.
fn entity_tag(name: &HeaderName, value: &str) -> Result<String, S3Error> {
    let inner = value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(value);
    if inner.is_empty() || value.starts_with("W/") || inner.contains(['"', ',']) {
        return Err(S3Error::new(
            Code::InvalidArgument,
            format!("{name}: expected one strong entity-tag, not {value:?}"),
        ));
    }
    Ok(format!("\"{inner}\""))
}

/// The store's guard for a write of `object`: S3's conditional writes
/// (an `If-Match` carried to the store's etag, see [`etag`]), else none.
pub(super) async fn write_condition(
    call: &Call,
    store: &dyn ObjectStore,
    object: &ObjectKey,
) -> Result<PutCondition, S3Error> {
    etag::store_condition(store, object, asked_condition(call)?).await
}

/// The guard a write's headers ask for, as the client spelled it; checked
/// before any body is read.
fn asked_condition(call: &Call) -> Result<PutCondition, S3Error> {
    match (
        call.header(IF_NONE_MATCH.as_str())?,
        call.header(IF_MATCH.as_str())?,
    ) {
        (Some(_), Some(_)) => Err(S3Error::new(
            Code::InvalidArgument,
            "If-Match and If-None-Match cannot both guard a write",
        )),
        (Some("*"), None) => Ok(PutCondition::IfNoneMatchAny),
        (Some(other), None) => Err(S3Error::new(
            Code::NotImplemented,
            format!("a write supports only If-None-Match: *, not {other:?}"),
        )),
        (None, Some(etag)) => Ok(PutCondition::IfMatch(entity_tag(&IF_MATCH, etag)?)),
        // S3's plain PutObject: last writer wins.
        (None, None) => Ok(PutCondition::Unconditional),
    }
}

/// The headers describing a written version.
fn written_headers(meta: &ObjectMeta) -> Result<HeaderMap, S3Error> {
    let mut headers = HeaderMap::new();
    headers.insert(ETAG, value(&etag::of_meta(meta))?);
    if let Some(version) = &meta.version_id {
        headers.insert("x-amz-version-id", value(version)?);
    }
    if let Some(crc) = meta.crc64 {
        headers.insert("x-amz-checksum-crc64nvme", value(&checksum::to_wire(crc))?);
    }
    Ok(headers)
}

/// A header value from text the server made.
pub(super) fn value(text: &str) -> Result<HeaderValue, S3Error> {
    HeaderValue::from_str(text).map_err(|_| {
        S3Error::new(
            Code::InternalError,
            format!("{text:?} cannot be sent as a header value"),
        )
    })
}

/// PutObject. A body longer than [`body::STREAM_ABOVE`] (or of unknown
/// length) is streamed into the store as it arrives; a shorter one is
/// read whole first.
pub(super) async fn put(call: &Call, body: Body) -> Result<Response, S3Error> {
    let (store_name, store) = call.store()?;
    let key = call.key()?;
    let object = object_key_of(key)?;
    let asked = asked_condition(call)?;
    let metadata = user_metadata(call)?;
    refuse_withheld(call, &store_name, key).await?;
    let limit = call.host.limits.max_object_bytes;
    if body::should_stream(call, store.as_ref())? {
        let incoming = body::Incoming::new(call, body, limit, true)?;
        // Before the body, unlike below: a streamed publish is guarded on
        // the object current when it began (a publish meanwhile is 412).
        let condition = etag::store_condition(store.as_ref(), &object, asked).await?;
        let options = PutOptions {
            condition: &condition,
            metadata: &metadata,
            crc64: 0,
            content_md5: None,
        };
        let (finished, meta) = body::stream_into(incoming, |streamed| {
            store.put_stream(&object, streamed, limit, options)
        })
        .await?;
        return put_answer(meta, finished.crc64, &finished.claims);
    }
    let received = body::read(call, body, limit, true).await?;
    // After the body: an `If-Match` is carried to the store's etag of the
    // object current now, not when the upload began.
    let condition = etag::store_condition(store.as_ref(), &object, asked).await?;
    let options = PutOptions {
        condition: &condition,
        metadata: &metadata,
        crc64: received.crc64,
        content_md5: received.md5,
    };
    let meta = store
        .put_opts(&object, received.bytes.clone(), options)
        .await
        .map_err(|e| errors::of_store(e, false))?;
    put_answer(meta, received.crc64, &received.claims)
}

/// A PutObject's answer: the written headers and the claims echoed.
fn put_answer(mut meta: ObjectMeta, crc64: u64, claims: &[Claim]) -> Result<Response, S3Error> {
    meta.crc64.get_or_insert(crc64);
    let mut headers = written_headers(&meta)?;
    for claim in claims {
        headers.insert(claim.algorithm.header(), value(&claim.value)?);
    }
    Ok((StatusCode::OK, headers).into_response())
}

/// What a read's conditions decide, given the object's metadata.
fn check_read_conditions(call: &Call, meta: &ObjectMeta) -> Result<(), S3Error> {
    let modified = meta.last_modified_ms.map(|ms| ms / 1000);
    let seen = etag::of_meta(meta);
    if let Some(want) = call.header(IF_MATCH.as_str())? {
        let matches = want == "*" || entity_tag(&IF_MATCH, want)? == seen;
        if !matches {
            return Err(S3Error::new(
                Code::PreconditionFailed,
                "At least one of the pre-conditions you specified did not hold (If-Match)",
            ));
        }
    } else if let (Some(since), Some(modified)) = (http_time(call, &IF_UNMODIFIED_SINCE)?, modified)
        && modified > since
    {
        return Err(S3Error::new(
            Code::PreconditionFailed,
            "At least one of the pre-conditions you specified did not hold (If-Unmodified-Since)",
        ));
    }
    if let Some(tags) = call.header(IF_NONE_MATCH.as_str())? {
        let hit = tags
            .split(',')
            .map(str::trim)
            .any(|tag| tag == "*" || entity_tag(&IF_NONE_MATCH, tag).is_ok_and(|t| t == seen));
        if hit {
            return Err(S3Error::new(Code::NotModified, "Not Modified"));
        }
    } else if let (Some(since), Some(modified)) = (http_time(call, &IF_MODIFIED_SINCE)?, modified)
        && modified <= since
    {
        return Err(S3Error::new(Code::NotModified, "Not Modified"));
    }
    Ok(())
}

/// An HTTP-date header as seconds since the epoch; an unparsable one is
/// ignored, as HTTP asks.
fn http_time(call: &Call, name: &HeaderName) -> Result<Option<u64>, S3Error> {
    Ok(call.header(name.as_str())?.and_then(parse_http_date))
}

/// The headers of a read of `meta`, before the body's own.
fn read_headers(meta: &ObjectMeta) -> Result<HeaderMap, S3Error> {
    let mut headers = HeaderMap::new();
    headers.insert(ETAG, value(&etag::of_meta(meta))?);
    if let Some(version) = &meta.version_id {
        headers.insert("x-amz-version-id", value(version)?);
    }
    headers.insert(ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    if let Some(ms) = meta.last_modified_ms {
        headers.insert(LAST_MODIFIED, value(&http_date(ms / 1000))?);
    }
    if let Some(class) = &meta.storage_class {
        headers.insert("x-amz-storage-class", value(class)?);
    }
    user_metadata::answer(&meta.metadata, "binary/octet-stream", &mut headers)
        .map_err(|why| S3Error::new(Code::InternalError, why))?;
    Ok(headers)
}

/// GetObject, or HeadObject when `head`.
pub(super) async fn get(call: &Call, head: bool) -> Result<Response, S3Error> {
    let (store_name, store) = call.store()?;
    let key = call.key()?;
    let object = object_key_of(key)?;
    let version = call.addressed.param("versionId").map(str::to_owned);
    if version.as_deref() == Some("") {
        return Err(S3Error::new(Code::InvalidArgument, "versionId is empty"));
    }
    if call.addressed.param("partNumber").is_some() {
        return Err(S3Error::new(
            Code::NotImplemented,
            "reading one part (partNumber) is not implemented; read a Range instead",
        ));
    }
    refuse_withheld(call, &store_name, key).await?;
    let versioned = version.is_some();
    let range = call
        .header(RANGE.as_str())?
        // A malformed or multi-range header is ignored (the whole object
        // is sent), as S3 does.
        .and_then(|text| parse_range(text).ok());
    if head {
        let meta = metadata(store.as_ref(), &object, version.as_deref()).await?;
        check_read_conditions(call, &meta)?;
        let mut headers = read_headers(&meta)?;
        let (status, length) = match range.map(|r| r.resolve(meta.size)) {
            None => {
                if let Some(crc) = meta.crc64 {
                    headers.insert("x-amz-checksum-crc64nvme", value(&checksum::to_wire(crc))?);
                }
                (StatusCode::OK, meta.size)
            }
            Some(Some(span)) => {
                headers.insert(CONTENT_RANGE, content_range(&span, meta.size)?);
                (StatusCode::PARTIAL_CONTENT, span.end - span.start)
            }
            Some(None) => return Err(invalid_range(meta.size)),
        };
        headers.insert(CONTENT_LENGTH, HeaderValue::from(length));
        return Ok((status, headers).into_response());
    }
    // The first window: the object's metadata comes with it.
    let first_span = match range {
        Some(ByteRange::From(first, last)) => {
            let end = last.map_or(u64::MAX, |l| l.saturating_add(1));
            first..end.min(first.saturating_add(WINDOW_BYTES))
        }
        // A suffix needs the size first.
        Some(ByteRange::Suffix(_)) => 0..0,
        None => 0..WINDOW_BYTES,
    };
    let first = if first_span.is_empty() {
        None
    } else {
        Some(
            store
                .get_opts(
                    &object,
                    GetOptions {
                        version_id: version.as_deref(),
                        range: Some(first_span.clone()),
                        if_match: None,
                    },
                )
                .await,
        )
    };
    let (meta, first_bytes) = match first {
        Some(Ok(read)) => {
            let (meta, bytes) = read.bytes();
            (meta, Some(bytes))
        }
        // A range that starts past the end: the store refuses it; the
        // metadata says how large the object is.
        Some(Err(ObjectError::InvalidArgument(_))) | None => {
            let meta = metadata(store.as_ref(), &object, version.as_deref()).await?;
            (meta, None)
        }
        Some(Err(error)) => return Err(errors::of_store(error, versioned)),
    };
    check_read_conditions(call, &meta)?;
    let span = match range {
        None => 0..meta.size,
        Some(range) => range
            .resolve(meta.size)
            .ok_or_else(|| invalid_range(meta.size))?,
    };
    let whole = range.is_none();
    let mut headers = read_headers(&meta)?;
    headers.insert(CONTENT_LENGTH, HeaderValue::from(span.end - span.start));
    let status = if whole {
        if let Some(crc) = meta.crc64 {
            headers.insert("x-amz-checksum-crc64nvme", value(&checksum::to_wire(crc))?);
        }
        StatusCode::OK
    } else {
        headers.insert(CONTENT_RANGE, content_range(&span, meta.size)?);
        StatusCode::PARTIAL_CONTENT
    };
    // The first window's bytes, when they are where the span starts.
    let first_bytes = first_bytes.filter(|_| first_span.start == span.start);
    let covered = first_bytes
        .as_ref()
        .map_or(span.start, |b| span.start + b.len() as u64);
    let expected_crc = if whole { meta.crc64 } else { None };
    if covered >= span.end {
        let bytes = first_bytes.unwrap_or_default();
        let bytes = bytes.slice(..(span.end - span.start) as usize);
        if let Some(want) = expected_crc
            && checksum::crc64_nvme(&bytes) != want
        {
            return Err(corrupt(key));
        }
        return Ok((status, headers, Body::from(bytes)).into_response());
    }
    let stream = Windows {
        store,
        object,
        version,
        etag: meta.etag.clone(),
        next: covered,
        end: span.end,
        crc: expected_crc.map(|want| (want, Crc64Nvme::new())),
    }
    .stream(first_bytes);
    Ok((status, headers, Body::from_stream(stream)).into_response())
}

/// The metadata of `object` (or of its exact `version`).
async fn metadata(
    store: &dyn ObjectStore,
    object: &ObjectKey,
    version: Option<&str>,
) -> Result<ObjectMeta, S3Error> {
    store
        .head_opts(
            object,
            HeadOptions {
                version_id: version,
            },
        )
        .await
        .map_err(|e| errors::of_store(e, version.is_some()))
}

/// The rest of a read, window by window.
struct Windows {
    store: Arc<dyn ObjectStore>,
    object: ObjectKey,
    version: Option<String>,
    etag: String,
    next: u64,
    end: u64,
    crc: Option<(u64, Crc64Nvme)>,
}

impl Windows {
    fn stream(
        mut self,
        first: Option<Bytes>,
    ) -> impl futures::Stream<Item = Result<Bytes, ObjectError>> + Send {
        if let (Some((_, crc)), Some(first)) = (&mut self.crc, &first) {
            crc.update(first);
        }
        let head = futures::stream::iter(first.map(Ok));
        let rest = futures::stream::try_unfold(self, |mut w| async move {
            if w.next >= w.end {
                if let Some((want, crc)) = &w.crc
                    && crc.clone().finalize() != *want
                {
                    tracing::error!(key = %w.object.as_str(), "an object read back does not have its CRC; the response is cut short");
                    return Err(ObjectError::Corrupt(
                        format!(
                            "{:?} does not have the CRC-64/NVME it was published with",
                            w.object.as_str()
                        )
                        .into(),
                    ));
                }
                return Ok(None);
            }
            let span = w.next..w.end.min(w.next.saturating_add(WINDOW_BYTES));
            let read = w
                .store
                .get_opts(
                    &w.object,
                    GetOptions {
                        version_id: w.version.as_deref(),
                        range: Some(span.clone()),
                        if_match: Some(&w.etag),
                    },
                )
                .await?;
            let (_, bytes) = read.bytes();
            if bytes.is_empty() {
                return Err(ObjectError::Corrupt(
                    format!("{:?} ended early", w.object.as_str()).into(),
                ));
            }
            if let Some((_, crc)) = &mut w.crc {
                crc.update(&bytes);
            }
            w.next += bytes.len() as u64;
            Ok(Some((bytes, w)))
        });
        futures::StreamExt::chain(head, rest)
    }
}

fn content_range(span: &Range<u64>, size: u64) -> Result<HeaderValue, S3Error> {
    value(&format!("bytes {}-{}/{size}", span.start, span.end - 1))
}

fn invalid_range(size: u64) -> S3Error {
    S3Error::new(
        Code::InvalidRange,
        format!("The requested range is not satisfiable (the object is {size} bytes)."),
    )
}

fn corrupt(key: &str) -> S3Error {
    S3Error::new(
        Code::InternalError,
        format!("{key:?} does not have the CRC-64/NVME it was published with; not served"),
    )
}

/// DeleteObject.
pub(super) async fn delete(call: &Call) -> Result<Response, S3Error> {
    let (_, store) = call.store()?;
    let key = call.key()?;
    let object = object_key_of(key)?;
    let version = call.addressed.param("versionId");
    if call.parts.headers.contains_key(IF_MATCH) {
        return Err(S3Error::new(
            Code::NotImplemented,
            "a conditional DeleteObject: the store cannot guard a delete by etag",
        ));
    }
    let (action, target) = call.operation.access(&call.addressed, None);
    delete_one(call, store.as_ref(), &object, version, action, target).await?;
    let mut headers = HeaderMap::new();
    if let Some(version) = version {
        headers.insert("x-amz-version-id", value(version)?);
    } else if store.versioned() {
        headers.insert("x-amz-delete-marker", HeaderValue::from_static("true"));
    }
    Ok((StatusCode::NO_CONTENT, headers).into_response())
}

/// Deletes one object or version, auditing a lock's refusal under the
/// caller (as the `/v1` routes do).
pub(super) async fn delete_one(
    call: &Call,
    store: &dyn ObjectStore,
    object: &ObjectKey,
    version: Option<&str>,
    action: Action,
    target: Target,
) -> Result<(), S3Error> {
    let result = store
        .delete_opts(
            object,
            DeleteOptions {
                version_id: version,
            },
        )
        .await;
    match result {
        Ok(()) => Ok(()),
        Err(ObjectError::Retained(reason)) => {
            let reason = reason.to_string();
            let record = crate::serve::http::access::refusal_record(
                &call.host,
                &call.principal,
                action,
                &target,
                "lock/refused",
                &reason,
            );
            if let Err(error) = custodian_core::audit::append(call.host.kv.as_ref(), &record).await
            {
                tracing::warn!(%error, "cannot audit a lock's refusal");
            }
            Err(S3Error::new(Code::AccessDenied, reason))
        }
        Err(error) => Err(errors::of_store(error, version.is_some())),
    }
}

/// The source an `x-amz-copy-source` header names: bucket, key, version.
pub(super) fn copy_source(call: &Call) -> Result<(String, String, Option<String>), S3Error> {
    let raw = call.header("x-amz-copy-source")?.unwrap_or("");
    let (path, query) = raw.split_once('?').unwrap_or((raw, ""));
    let path = percent_decode_str(path.trim_start_matches('/'))
        .decode_utf8()
        .map_err(|_| S3Error::new(Code::InvalidArgument, "x-amz-copy-source is not UTF-8"))?;
    let (bucket, key) = path
        .split_once('/')
        .filter(|(b, k)| !b.is_empty() && !k.is_empty())
        .ok_or_else(|| {
            S3Error::new(
                Code::InvalidArgument,
                "x-amz-copy-source must be bucket/key, optionally with ?versionId=",
            )
        })?;
    let mut version = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("versionId", v)) if !v.is_empty() => version = Some(v.to_owned()),
            _ => {
                return Err(S3Error::new(
                    Code::InvalidArgument,
                    format!("x-amz-copy-source: unexpected {pair:?}"),
                ));
            }
        }
    }
    Ok((bucket.to_owned(), key.to_owned(), version))
}

/// CopyObject: the source is read (asked about as a read of it), the
/// destination written (asked about as a write). Within one bucket, the
/// current version is copied by the store; another bucket or an exact
/// version is read and written, within the per-object body limit.
pub(super) async fn copy(call: &Call) -> Result<Response, S3Error> {
    let (store_name, store) = call.store()?;
    let key = call.key()?.to_owned();
    let object = object_key_of(&key)?;
    let (source_bucket, source_key, source_version) = copy_source(call)?;
    let source_store = call
        .host
        .stores
        .get(&source_bucket)
        .cloned()
        .ok_or_else(|| super::no_such_bucket(&source_bucket))?;
    let source = object_key_of(&source_key)?;
    judge_copy(
        call,
        (&source_bucket, &source_key, source_version.as_deref()),
        (&store_name, &key),
    )
    .await?;
    let condition = write_condition(call, store.as_ref(), &object).await?;
    let source_meta = source_store
        .head_opts(
            &source,
            HeadOptions {
                version_id: source_version.as_deref(),
            },
        )
        .await
        .map_err(|e| errors::of_store(e, source_version.is_some()))?;
    check_copy_conditions(call, &source_meta)?;
    let metadata = match call.header("x-amz-metadata-directive")? {
        None | Some("COPY") => source_meta.metadata.clone(),
        Some("REPLACE") => user_metadata(call)?,
        Some(other) => {
            return Err(S3Error::new(
                Code::InvalidArgument,
                format!("x-amz-metadata-directive is COPY or REPLACE, not {other:?}"),
            ));
        }
    };
    let same_store = Arc::ptr_eq(&store, &source_store);
    let meta = if same_store && source_version.is_none() {
        store
            .copy_opts(
                &source,
                &object,
                CopyOptions {
                    source_if_match: Some(&source_meta.etag),
                    condition: &condition,
                    metadata: &metadata,
                },
            )
            .await
            .map_err(|e| errors::of_store(e, false))?
    } else {
        if source_meta.size > call.host.limits.max_object_bytes {
            return Err(S3Error::new(
                Code::InvalidRequest,
                format!(
                    "copying {} bytes across buckets or from a version goes through this \
                     server's memory, which takes at most {} bytes per object; use \
                     UploadPartCopy",
                    source_meta.size, call.host.limits.max_object_bytes
                ),
            ));
        }
        let held = call
            .host
            .bodies
            .reserve(source_meta.size)
            .map_err(errors::of_api)?;
        let read = source_store
            .get_opts(
                &source,
                GetOptions {
                    version_id: source_version.as_deref(),
                    range: None,
                    if_match: Some(&source_meta.etag),
                },
            )
            .await
            .map_err(|e| errors::of_store(e, source_version.is_some()))?;
        let (_, bytes) = read.bytes();
        let crc64 = checksum::crc64_nvme(&bytes);
        let meta = store
            .put_opts(
                &object,
                bytes,
                PutOptions {
                    condition: &condition,
                    metadata: &metadata,
                    crc64,
                    // The bytes read are the source's, checked against its
                    // CRC on the way.
                    content_md5: source_meta.content_md5,
                },
            )
            .await
            .map_err(|e| errors::of_store(e, false))?;
        drop(held);
        meta
    };
    let mut w = Writer::document();
    w.open_root("CopyObjectResult");
    w.text_element("ETag", &etag::of_meta(&meta));
    w.text_element(
        "LastModified",
        &date::timestamp(
            meta.last_modified_ms
                .unwrap_or_else(|| call.host.clock.now_ms()),
        ),
    );
    if let Some(crc) = meta.crc64 {
        w.text_element("ChecksumCRC64NVME", &checksum::to_wire(crc));
    }
    w.close("CopyObjectResult");
    let mut response = xml_response(StatusCode::OK, w.finish());
    if let Some(version) = &meta.version_id {
        response
            .headers_mut()
            .insert("x-amz-version-id", value(version)?);
    }
    if let Some(version) = &source_meta.version_id {
        response
            .headers_mut()
            .insert("x-amz-copy-source-version-id", value(version)?);
    }
    Ok(response)
}

/// A server-side copy's gates, for CopyObject and UploadPartCopy: a read
/// of the source (`bucket`, `key`, version) and a write of the
/// destination (`bucket`, `key`), each asked of the access policy; and
/// neither may be content a takedown withholds.
pub(super) async fn judge_copy(
    call: &Call,
    (source_bucket, source_key, source_version): (&str, &str, Option<&str>),
    (bucket, key): (&str, &str),
) -> Result<(), S3Error> {
    let target = |bucket: &str, key: &str, version: Option<&str>| Target {
        store: Some(bucket.to_owned()),
        key: Some(key.to_owned()),
        version: version.map(str::to_owned),
        ..Target::default()
    };
    call.judge(
        Action::Read,
        target(source_bucket, source_key, source_version),
    )
    .await?;
    call.judge(Action::Write, target(bucket, key, None)).await?;
    refuse_withheld(call, source_bucket, source_key).await?;
    refuse_withheld(call, bucket, key).await
}

/// The `x-amz-copy-source-if-*` conditions on the source.
fn check_copy_conditions(call: &Call, meta: &ObjectMeta) -> Result<(), S3Error> {
    let failed = || {
        S3Error::new(
            Code::PreconditionFailed,
            "At least one of the pre-conditions you specified did not hold (copy source)",
        )
    };
    let seen = etag::of_meta(meta);
    if let Some(want) = call.header("x-amz-copy-source-if-match")?
        && entity_tag(&IF_MATCH, want)? != seen
    {
        return Err(failed());
    }
    if let Some(tag) = call.header("x-amz-copy-source-if-none-match")?
        && (tag == "*" || entity_tag(&IF_NONE_MATCH, tag)? == seen)
    {
        return Err(failed());
    }
    let modified = meta.last_modified_ms.map(|ms| ms / 1000);
    if let (Some(since), Some(modified)) = (
        call.header("x-amz-copy-source-if-unmodified-since")?
            .and_then(parse_http_date),
        modified,
    ) && modified > since
    {
        return Err(failed());
    }
    if let (Some(since), Some(modified)) = (
        call.header("x-amz-copy-source-if-modified-since")?
            .and_then(parse_http_date),
        modified,
    ) && modified <= since
    {
        return Err(failed());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imf_fixdates_parse_to_their_seconds_and_other_forms_are_ignored() {
        assert_eq!(
            parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(784_111_777)
        );
        assert_eq!(
            parse_http_date(&http_date(1_700_000_000)),
            Some(1_700_000_000)
        );
        assert_eq!(parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT"), None);
        assert_eq!(parse_http_date("Sun, 06 Nov 1994 25:49:37 GMT"), None);
        assert_eq!(parse_http_date("garbage"), None);
    }
}
