//! Routes: one object, and listings of a store's objects and versions.
//!
//! | route | what |
//! |---|---|
//! | `PUT /v1/stores/{store}/objects/{key…}` | publish; a guard is required |
//! | `GET /v1/stores/{store}/objects/{key…}` | read, whole or one byte range |
//! | `HEAD /v1/stores/{store}/objects/{key…}` | the headers of a whole read |
//! | `DELETE /v1/stores/{store}/objects/{key…}` | delete (a marker, or one version) |
//! | `GET /v1/stores/{store}/objects?prefix=&cursor=&limit=` | current objects |
//! | `GET /v1/stores/{store}/versions?prefix=&cursor=&limit=` | every version |
//!
//! `?version_id=V` makes `GET`, `HEAD` and `DELETE` address that exact
//! version. The key is the rest of the path, slashes included; the store
//! checks it with its own rules (a bad key is 400 `invalid_argument`).
//!
//! # Publishing
//!
//! A `PUT` names its guard, as the store contract requires:
//! `If-None-Match: *` creates (201), `If-Match: "<etag>"` replaces that
//! generation (200). Neither is 428 `precondition_required`, unless the
//! caller says `x-custodian-unconditional: true`, the store's one
//! unguarded publish, meant for content-addressed keys where every writer
//! writes the same bytes. A failed guard is 412 `precondition_failed`.
//!
//! The body is read into memory, up to the host's `max_object_bytes` (413
//! `payload_too_large` beyond), and its CRC-64/NVME is computed as it
//! arrives. An `x-amz-checksum-crc64nvme` header (S3's wire form: base64 of
//! the 8 big-endian bytes) must match it, or the publish is refused with
//! 400 `checksum_mismatch` and nothing is stored. `x-amz-meta-<name>`
//! headers are the object's user metadata.
//!
//! The response is the object's metadata as JSON, with `ETag`,
//! `x-amz-checksum-crc64nvme` and (on a versioned store) `x-amz-version-id`
//! headers.
//!
//! # Entity tags
//!
//! Every backend's etags are already HTTP entity-tags (quoted strings), so
//! the `ETag` header and the JSON `etag` are the store's etag verbatim, and
//! an `If-Match` value is passed back to the store as sent. An unquoted
//! value is quoted first, for people typing etags by hand; a weak tag
//! (`W/"…"`) or a list of tags is refused: neither can guard bytes.
//!
//! # Reading
//!
//! `Range: bytes=a-b`, `bytes=a-` and `bytes=-n` (one range) read part of
//! the object: 206 with `Content-Range`, or 416 `range_not_satisfiable`
//! (with `Content-Range: bytes */<size>` when the size is known). A range
//! read pins the generation it measured, so its bytes all come from one
//! publish. `If-Match` on a read is 412 unless the object has that etag.
//! The whole-object `x-amz-checksum-crc64nvme` is sent on whole reads only:
//! it does not describe a part.
//!
//! # Taken-down content
//!
//! In the `serving` store, a content object (`content/<id>`) a takedown
//! withholds is 451 `taken_down` for `GET`, `HEAD` (any version) and
//! `PUT` (no re-upload under its address), checked before the store is
//! asked; a listing of the store's objects or versions marks it
//! (`"taken_down": {"request", "since_ms"}`). See [`custodian_core::content::denial`].

mod conditions;
pub(crate) mod headers;
mod range;
#[cfg(test)]
mod test_client;

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::header::{CONTENT_LENGTH, IF_MATCH, IF_NONE_MATCH, RANGE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use serde::{Deserialize, Serialize};

use super::ApiError;
use super::byte_range::{parse_range, unsatisfiable};
use super::extract::{BodyLimit, Received, path, query, read_body_inspecting};
use super::withheld::TakenDown;
use crate::serve::Host;
use conditions::{check_guard, put_condition, read_guard};
use custodian_base::checksum::{self, Crc64Nvme};
use custodian_core::content::{self, ObjectId, Withheld, denial};
use custodian_object::ObjectStoreExt;
use custodian_object::{
    ListedObject, ListedVersion, MAX_LIST_PAGE, Metadata, ObjectError, ObjectMeta, PutCondition,
};
use headers::{CHECKSUM, claimed_crc, header_text, meta_headers, read_headers, user_metadata};
use range::read_range;

/// The objects routes.
pub(super) fn routes() -> Router<Arc<Host>> {
    Router::new()
        .route(
            "/v1/stores/{store}/objects/{*key}",
            put(put_object)
                .get(get_object)
                // Explicit, so a HEAD asks the store for metadata only
                // instead of running the GET handler and dropping a body.
                .head(head_object)
                .delete(delete_object),
        )
        .route("/v1/stores/{store}/objects", get(list_objects))
        .route("/v1/stores/{store}/versions", get(list_versions))
}

// ---------------------------------------------------------------------------
// Requests

/// `?version_id=V` on a single-object route. Unknown parameters are
/// refused, so a misspelt `versionId` cannot silently read the current
/// object instead of the version asked for.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct VersionQuery {
    version_id: Option<String>,
}

impl VersionQuery {
    /// The version asked for, refusing an empty one.
    fn version(self) -> Result<Option<String>, ApiError> {
        match self.version_id {
            Some(v) if v.is_empty() => Err(ApiError::invalid("`version_id` is empty")),
            other => Ok(other),
        }
    }
}

/// A listing page request.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    #[serde(default)]
    prefix: String,
    cursor: Option<String>,
    limit: Option<u32>,
}

impl ListQuery {
    /// The page size to ask the store for. A page is held in memory and
    /// serialized whole, so its size bounds what one request costs; the
    /// bound is the stores' own [`MAX_LIST_PAGE`] (S3's page size), so
    /// every backend pages alike. A larger ask is clamped, not refused, as
    /// S3 does with `max-keys`: `next_cursor` says there is more.
    fn limit(&self) -> u32 {
        self.limit.unwrap_or(MAX_LIST_PAGE).min(MAX_LIST_PAGE)
    }
}

// ---------------------------------------------------------------------------
// Responses

/// An object's metadata as the API shows it.
#[derive(Debug, Serialize)]
struct MetaBody<'a> {
    key: &'a str,
    version_id: Option<&'a str>,
    etag: &'a str,
    size: u64,
    /// The CRC-64/NVME as 16 hex digits.
    crc64: Option<String>,
    /// The same CRC in S3's wire form, as `x-amz-checksum-crc64nvme`.
    crc64_wire: Option<String>,
    last_modified_ms: Option<u64>,
    metadata: &'a Metadata,
    storage_class: Option<&'a str>,
}

impl<'a> From<&'a ObjectMeta> for MetaBody<'a> {
    fn from(meta: &'a ObjectMeta) -> Self {
        Self {
            key: &meta.key,
            version_id: meta.version_id.as_deref(),
            etag: &meta.etag,
            size: meta.size,
            crc64: meta.crc64.map(|crc| format!("{crc:016x}")),
            crc64_wire: meta.crc64.map(checksum::to_wire),
            last_modified_ms: meta.last_modified_ms,
            metadata: &meta.metadata,
            storage_class: meta.storage_class.as_deref(),
        }
    }
}

// ---------------------------------------------------------------------------
// Handlers

/// `PUT`: publish the body under the guard the caller names.
async fn put_object(
    State(host): State<Arc<Host>>,
    params: Result<Path<(String, String)>, PathRejection>,
    version: Result<Query<VersionQuery>, QueryRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let (store_name, key) = path(params)?;
    let store = host.store(&store_name)?;
    if query(version)?.version()?.is_some() {
        return Err(ApiError::invalid(
            "a PUT publishes a new version; `version_id` names an existing one",
        ));
    }
    // Everything the headers can refuse is refused before the body is
    // read.
    let condition = put_condition(&headers)?;
    let claimed = claimed_crc(&headers)?;
    let metadata = user_metadata(&headers)?;
    refuse_withheld(&host, &store_name, &key).await?;
    let limit = BodyLimit {
        bytes: host.limits.max_object_bytes,
        per: "object",
    };
    let mut crc = Crc64Nvme::new();
    // Held until the store is done with the bytes.
    let Received { bytes, held: _held } =
        read_body_inspecting(&host.bodies, body, &headers, limit, |chunk| {
            crc.update(chunk)
        })
        .await?;
    let crc = crc.finalize();
    if let Some(claimed) = claimed.filter(|claimed| *claimed != crc) {
        return Err(ObjectError::ChecksumMismatch(
            format!(
                "{key:?}: the body's CRC-64/NVME is {} ({crc:016x}), {CHECKSUM} says {} \
             ({claimed:016x}); nothing was stored",
                checksum::to_wire(crc),
                checksum::to_wire(claimed),
            )
            .into(),
        )
        .into());
    }
    let created = condition == PutCondition::IfNoneMatchAny;
    let mut meta = store
        .put_whole(&key, bytes, &condition, &metadata, crc)
        .await?;
    // The store validated this CRC; say it even if the backend's answer
    // leaves it out.
    meta.crc64.get_or_insert(crc);
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let headers = meta_headers(&meta, true)?;
    Ok((status, headers, Json(MetaBody::from(&meta))).into_response())
}

/// The content object `key` of store `store` is, if it is one: only the
/// `serving` store holds content.
fn content_object(store: &str, key: &str) -> Option<ObjectId> {
    (store == content::SERVING_STORE)
        .then(|| content::object_of_key(key))
        .flatten()
}

/// 451 if `key` of `store` is content a takedown withholds.
async fn refuse_withheld(host: &Host, store: &str, key: &str) -> Result<(), ApiError> {
    let Some(object) = content_object(store, key) else {
        return Ok(());
    };
    denial::refuse_withheld(host.kv.as_ref(), &object)
        .await
        .map_err(ApiError::from)
}

/// `GET`: the object (or one version), whole or one range.
async fn get_object(
    State(host): State<Arc<Host>>,
    params: Result<Path<(String, String)>, PathRejection>,
    version: Result<Query<VersionQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (store_name, key) = path(params)?;
    let store = host.store(&store_name)?;
    let version = query(version)?.version()?;
    let guard = read_guard(&headers)?;
    refuse_withheld(&host, &store_name, &key).await?;
    let range = match header_text(&headers, &RANGE)? {
        None => None,
        Some(text) => match parse_range(text) {
            Ok(range) => Some(range),
            Err(message) => return Ok(unsatisfiable(message, None)),
        },
    };
    let Some(range) = range else {
        let (meta, bytes) = match &version {
            Some(version) => {
                let (meta, bytes) = store.get_version(&key, version).await?;
                check_guard(&meta, guard.as_deref())?;
                (meta, bytes)
            }
            None => store.get_whole(&key, guard.as_deref()).await?,
        };
        let mut headers = read_headers(&meta, true)?;
        headers.insert(CONTENT_LENGTH, HeaderValue::from(bytes.len()));
        return Ok((StatusCode::OK, headers, Body::from(bytes)).into_response());
    };
    read_range(
        store.as_ref(),
        &key,
        version.as_deref(),
        guard.as_deref(),
        range,
    )
    .await
}

/// `HEAD`: the headers of a whole `GET`, from the store's metadata alone.
async fn head_object(
    State(host): State<Arc<Host>>,
    params: Result<Path<(String, String)>, PathRejection>,
    version: Result<Query<VersionQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (store_name, key) = path(params)?;
    let store = host.store(&store_name)?;
    let version = query(version)?.version()?;
    let guard = read_guard(&headers)?;
    refuse_withheld(&host, &store_name, &key).await?;
    let meta = match &version {
        Some(version) => store.head_version(&key, version).await?,
        None => store.head(&key).await?,
    };
    check_guard(&meta, guard.as_deref())?;
    let mut headers = read_headers(&meta, true)?;
    headers.insert(CONTENT_LENGTH, HeaderValue::from(meta.size));
    Ok((StatusCode::OK, headers).into_response())
}

/// `DELETE`: a delete marker (or removal) of the current object, or the
/// permanent removal of one version. Absent keys and versions are fine.
async fn delete_object(
    State(host): State<Arc<Host>>,
    params: Result<Path<(String, String)>, PathRejection>,
    version: Result<Query<VersionQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    let (store_name, key) = path(params)?;
    let store = host.store(&store_name)?;
    let version = query(version)?.version()?;
    // The store has no guarded delete: honouring the header is
    // impossible, and ignoring it would delete what the caller meant to
    // protect.
    if headers.contains_key(IF_MATCH) || headers.contains_key(IF_NONE_MATCH) {
        return Err(ObjectError::Unsupported(
            "a conditional DELETE: the store cannot guard a delete by etag".into(),
        )
        .into());
    }
    match &version {
        Some(version) => store.delete_version(&key, version).await?,
        None => store.delete(&key).await?,
    }
    Ok(StatusCode::NO_CONTENT)
}

/// One current object in a listing.
#[derive(Debug, Serialize)]
struct ObjectItem<'a> {
    key: &'a str,
    size: u64,
    etag: &'a str,
    last_modified_ms: Option<u64>,
    /// Content a takedown withholds (listed, never served).
    #[serde(skip_serializing_if = "Option::is_none")]
    taken_down: Option<TakenDown>,
}

impl<'a> ObjectItem<'a> {
    fn new(item: &'a ListedObject, withheld: Option<Withheld>) -> Self {
        Self {
            key: &item.key,
            size: item.size,
            etag: &item.etag,
            last_modified_ms: item.last_modified_ms,
            taken_down: withheld.map(TakenDown::from),
        }
    }
}

/// Which of `keys` of store `store` a takedown withholds, in one read.
async fn withheld_keys<'k>(
    host: &Host,
    store: &str,
    keys: impl Iterator<Item = &'k str>,
) -> Result<Vec<Option<Withheld>>, ApiError> {
    let objects: Vec<Option<ObjectId>> = keys.map(|key| content_object(store, key)).collect();
    let ids: Vec<ObjectId> = objects.iter().flatten().copied().collect();
    let mut found = denial::check_many(host.kv.as_ref(), &ids)
        .await
        .map_err(ApiError::from)?
        .into_iter();
    Ok(objects
        .iter()
        .map(|object| object.and_then(|_| found.next().flatten()))
        .collect())
}

/// One version or delete marker in a listing.
#[derive(Debug, Serialize)]
struct VersionItem<'a> {
    key: &'a str,
    version_id: &'a str,
    /// Empty for a delete marker.
    etag: &'a str,
    size: u64,
    is_current: bool,
    is_delete_marker: bool,
    last_modified_ms: Option<u64>,
    /// Content a takedown withholds (listed, never served).
    #[serde(skip_serializing_if = "Option::is_none")]
    taken_down: Option<TakenDown>,
}

impl<'a> VersionItem<'a> {
    fn new(item: &'a ListedVersion, withheld: Option<Withheld>) -> Self {
        Self {
            key: &item.key,
            version_id: &item.version_id,
            etag: &item.etag,
            size: item.size,
            is_current: item.is_current,
            is_delete_marker: item.is_delete_marker,
            last_modified_ms: item.last_modified_ms,
            taken_down: withheld.map(TakenDown::from),
        }
    }
}

/// A page of current objects.
#[derive(Debug, Serialize)]
struct ObjectPage<'a> {
    objects: Vec<ObjectItem<'a>>,
    /// Pass as `cursor` for the next page; `null` when complete.
    next_cursor: Option<&'a str>,
}

/// A page of versions.
#[derive(Debug, Serialize)]
struct VersionPage<'a> {
    versions: Vec<VersionItem<'a>>,
    /// Pass as `cursor` for the next page; `null` when complete. Opaque:
    /// its form is the store's.
    next_cursor: Option<&'a str>,
}

/// `GET …/objects?prefix=`: a page of current objects.
async fn list_objects(
    State(host): State<Arc<Host>>,
    params: Result<Path<String>, PathRejection>,
    list: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let store_name = path(params)?;
    let store = host.store(&store_name)?;
    let list = query(list)?;
    let page = store
        .list(&list.prefix, list.cursor.as_deref(), list.limit())
        .await?;
    let withheld = withheld_keys(
        &host,
        &store_name,
        page.items.iter().map(|i| i.key.as_str()),
    )
    .await?;
    let body = ObjectPage {
        objects: page
            .items
            .iter()
            .zip(withheld)
            .map(|(item, withheld)| ObjectItem::new(item, withheld))
            .collect(),
        next_cursor: page.next.as_deref(),
    };
    // Serialized here, while the page it borrows is alive.
    Ok(Json(body).into_response())
}

/// `GET …/versions?prefix=`: a page of versions and delete markers, keys
/// ascending and newest first within a key.
async fn list_versions(
    State(host): State<Arc<Host>>,
    params: Result<Path<String>, PathRejection>,
    list: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let store_name = path(params)?;
    let store = host.store(&store_name)?;
    let list = query(list)?;
    let page = store
        .list_versions(&list.prefix, list.cursor.as_deref(), list.limit())
        .await?;
    let withheld = withheld_keys(
        &host,
        &store_name,
        page.items.iter().map(|i| i.key.as_str()),
    )
    .await?;
    let body = VersionPage {
        versions: page
            .items
            .iter()
            .zip(withheld)
            .map(|(item, withheld)| VersionItem::new(item, withheld))
            .collect(),
        next_cursor: page.next.as_deref(),
    };
    // Serialized here, while the page it borrows is alive.
    Ok(Json(body).into_response())
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use axum::http::Method;
    use axum::http::header::ETAG;
    use bytes::Bytes;
    use serde_json::Value;

    use super::headers::VERSION_ID;
    use super::test_client::{LIMIT, app, create, get, put, request, send};
    use super::*;
    use custodian_base::checksum::crc64_nvme;

    #[tokio::test]
    async fn a_create_with_if_none_match_is_201_with_the_meta_and_a_second_create_is_412() {
        let app = app().await;
        let body = b"hello, object";
        let reply = put(
            &app,
            "dir/a.txt",
            &[("if-none-match", "*"), ("x-amz-meta-owner", "alice")],
            body,
        )
        .await;
        assert_eq!(reply.status, StatusCode::CREATED);
        let crc = crc64_nvme(body);
        let meta = reply.json();
        assert_eq!(meta["key"], "dir/a.txt");
        assert_eq!(meta["size"], body.len());
        assert_eq!(meta["crc64"], format!("{crc:016x}"));
        assert_eq!(meta["crc64_wire"], checksum::to_wire(crc));
        assert_eq!(meta["metadata"]["owner"], "alice");
        assert_eq!(reply.header(ETAG), meta["etag"]);
        assert_eq!(reply.header(&CHECKSUM), checksum::to_wire(crc));
        assert_eq!(reply.header(&VERSION_ID), meta["version_id"]);

        let again = put(&app, "dir/a.txt", &[("if-none-match", "*")], b"other").await;
        assert_eq!(again.status, StatusCode::PRECONDITION_FAILED);
        assert_eq!(again.code(), "precondition_failed");
        let read = get(&app, "/v1/stores/serving/objects/dir/a.txt", &[]).await;
        assert_eq!(read.body, &body[..]);
    }

    #[tokio::test]
    async fn a_wrong_checksum_header_is_400_checksum_mismatch_and_the_key_stays_absent() {
        let app = app().await;
        let wrong = checksum::to_wire(crc64_nvme(b"other bytes"));
        let reply = put(
            &app,
            "k",
            &[("if-none-match", "*"), ("x-amz-checksum-crc64nvme", &wrong)],
            b"these bytes",
        )
        .await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST);
        assert_eq!(reply.code(), "checksum_mismatch");
        let read = get(&app, "/v1/stores/serving/objects/k", &[]).await;
        assert_eq!(read.status, StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn a_matching_checksum_header_is_accepted_and_a_malformed_one_is_invalid() {
        let app = app().await;
        let right = checksum::to_wire(crc64_nvme(b"bytes"));
        let reply = put(
            &app,
            "k",
            &[("if-none-match", "*"), ("x-amz-checksum-crc64nvme", &right)],
            b"bytes",
        )
        .await;
        assert_eq!(reply.status, StatusCode::CREATED);
        assert_eq!(reply.header(&CHECKSUM), right);
        let malformed = put(
            &app,
            "j",
            &[
                ("if-none-match", "*"),
                ("x-amz-checksum-crc64nvme", "not-base64"),
            ],
            b"bytes",
        )
        .await;
        assert_eq!(malformed.status, StatusCode::BAD_REQUEST);
        assert_eq!(malformed.code(), "invalid_argument");
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_413_whether_declared_or_streamed_and_nothing_is_stored() {
        let app = app().await;
        let big = vec![7u8; LIMIT as usize + 1];
        let declared = put(&app, "big", &[("if-none-match", "*")], &big).await;
        assert_eq!(declared.status, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(declared.code(), "payload_too_large");

        // No Content-Length: the limit is found while reading.
        let chunks: Vec<Result<Bytes, Infallible>> = big
            .chunks(100)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        let body = Body::from_stream(futures::stream::iter(chunks));
        let streamed = send(
            &app,
            request(
                Method::PUT,
                "/v1/stores/serving/objects/big",
                &[("if-none-match", "*")],
                body,
            ),
        )
        .await;
        assert_eq!(streamed.status, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(streamed.code(), "payload_too_large");

        let read = get(&app, "/v1/stores/serving/objects/big", &[]).await;
        assert_eq!(read.status, StatusCode::NOT_FOUND);
        let exact = put(&app, "big", &[("if-none-match", "*")], &big[1..]).await;
        assert_eq!(exact.status, StatusCode::CREATED);
    }

    #[tokio::test]
    async fn a_head_on_the_wire_declares_the_length_and_sends_no_body() {
        use std::io::{Read, Write};

        let app = app().await;
        create(&app, "k", b"0123456789").await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let server = tokio::spawn(async move { axum::serve(listener, app).await });
        let reply = tokio::task::spawn_blocking(move || {
            let mut stream = std::net::TcpStream::connect(address).unwrap();
            stream
                .write_all(
                    b"HEAD /v1/stores/serving/objects/k HTTP/1.1\r\n\
                      Host: test\r\nConnection: close\r\n\r\n",
                )
                .unwrap();
            let mut reply = String::new();
            stream.read_to_string(&mut reply).unwrap();
            reply
        })
        .await
        .unwrap();
        server.abort();
        let (head, body) = reply.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(
            head.to_ascii_lowercase().contains("content-length: 10\r\n"),
            "{head}"
        );
        assert_eq!(body, "");
    }

    #[tokio::test]
    async fn two_writes_are_listed_as_versions_and_each_version_reads_back_exactly() {
        let app = app().await;
        let first = put(&app, "k", &[("if-none-match", "*")], b"first")
            .await
            .json();
        let etag = first["etag"].as_str().unwrap();
        let second = put(&app, "k", &[("if-match", etag)], b"second!")
            .await
            .json();

        let listing = get(&app, "/v1/stores/serving/versions?prefix=k", &[]).await;
        assert_eq!(listing.status, StatusCode::OK);
        let listing = listing.json();
        let versions = listing["versions"].as_array().unwrap();
        assert_eq!(versions.len(), 2);
        // Newest first within a key.
        assert_eq!(versions[0]["version_id"], second["version_id"]);
        assert_eq!(versions[0]["is_current"], true);
        assert_eq!(versions[1]["version_id"], first["version_id"]);
        assert_eq!(versions[1]["is_current"], false);
        assert_eq!(listing["next_cursor"], Value::Null);

        for (meta, bytes) in [(&first, "first"), (&second, "second!")] {
            let version = meta["version_id"].as_str().unwrap();
            let uri = format!("/v1/stores/serving/objects/k?version_id={version}");
            let read = get(&app, &uri, &[]).await;
            assert_eq!(read.status, StatusCode::OK);
            assert_eq!(read.body, bytes);
            assert_eq!(read.header(&VERSION_ID), version);
            let part = get(&app, &uri, &[("range", "bytes=-2")]).await;
            assert_eq!(part.status, StatusCode::PARTIAL_CONTENT);
            assert_eq!(part.body, bytes[bytes.len() - 2..]);
            let head = send(&app, request(Method::HEAD, &uri, &[], Body::empty())).await;
            assert_eq!(head.header(CONTENT_LENGTH), bytes.len().to_string());
        }
    }

    #[tokio::test]
    async fn version_listings_page_with_the_cursor_they_return() {
        let app = app().await;
        let etag = create(&app, "k", b"1").await;
        put(&app, "k", &[("if-match", &etag)], b"2").await;
        create(&app, "l", b"3").await;
        let mut seen = Vec::new();
        let mut uri = "/v1/stores/serving/versions?limit=1".to_owned();
        loop {
            let page = get(&app, &uri, &[]).await.json();
            let versions = page["versions"].as_array().unwrap();
            assert_eq!(versions.len(), 1);
            seen.push(versions[0]["key"].as_str().unwrap().to_owned());
            let Some(cursor) = page["next_cursor"].as_str() else {
                break;
            };
            let cursor: String = cursor
                .bytes()
                .map(|b| match b {
                    b'a'..=b'z' | b'0'..=b'9' => (b as char).to_string(),
                    _ => format!("%{b:02X}"),
                })
                .collect();
            uri = format!("/v1/stores/serving/versions?limit=1&cursor={cursor}");
        }
        assert_eq!(seen, ["k", "k", "l"]);
    }

    #[tokio::test]
    async fn object_listings_page_by_prefix_and_a_limit_over_the_bound_is_clamped() {
        let app = app().await;
        for key in ["a/1", "a/2", "a/3", "b/1"] {
            create(&app, key, b"x").await;
        }
        let page = get(&app, "/v1/stores/serving/objects?prefix=a/&limit=2", &[])
            .await
            .json();
        let keys: Vec<_> = page["objects"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["key"].clone())
            .collect();
        assert_eq!(keys, ["a/1", "a/2"]);
        let cursor = page["next_cursor"].as_str().unwrap().to_owned();
        let rest = get(
            &app,
            &format!("/v1/stores/serving/objects?prefix=a/&cursor={cursor}"),
            &[],
        )
        .await
        .json();
        assert_eq!(rest["objects"].as_array().unwrap().len(), 1);
        assert_eq!(rest["objects"][0]["key"], "a/3");
        assert_eq!(rest["next_cursor"], Value::Null);

        let huge = get(&app, "/v1/stores/serving/objects?limit=999999", &[]).await;
        assert_eq!(huge.status, StatusCode::OK);
        assert_eq!(huge.json()["objects"].as_array().unwrap().len(), 4);
        let zero = get(&app, "/v1/stores/serving/objects?limit=0", &[]).await;
        assert_eq!(zero.status, StatusCode::BAD_REQUEST);
        let unknown = get(&app, "/v1/stores/serving/objects?max-keys=2", &[]).await;
        assert_eq!(unknown.status, StatusCode::BAD_REQUEST);
        assert_eq!(unknown.code(), "invalid_argument");
    }

    #[tokio::test]
    async fn delete_then_get_is_404_with_code_not_found_while_the_old_version_remains() {
        let app = app().await;
        let meta = put(&app, "k", &[("if-none-match", "*")], b"bytes")
            .await
            .json();
        let uri = "/v1/stores/serving/objects/k";
        let deleted = send(&app, request(Method::DELETE, uri, &[], Body::empty())).await;
        assert_eq!(deleted.status, StatusCode::NO_CONTENT);
        let read = get(&app, uri, &[]).await;
        assert_eq!(read.status, StatusCode::NOT_FOUND);
        assert_eq!(read.code(), "not_found");

        let version = meta["version_id"].as_str().unwrap();
        let versioned = format!("{uri}?version_id={version}");
        assert_eq!(get(&app, &versioned, &[]).await.body, "bytes");
        let purged = send(
            &app,
            request(Method::DELETE, &versioned, &[], Body::empty()),
        )
        .await;
        assert_eq!(purged.status, StatusCode::NO_CONTENT);
        let gone = get(&app, &versioned, &[]).await;
        assert_eq!(gone.status, StatusCode::NOT_FOUND);
        assert_eq!(gone.code(), "not_found");
    }

    #[tokio::test]
    async fn a_conditional_delete_is_refused_as_unsupported_and_deletes_nothing() {
        let app = app().await;
        let etag = create(&app, "k", b"bytes").await;
        let uri = "/v1/stores/serving/objects/k";
        let reply = send(
            &app,
            request(Method::DELETE, uri, &[("if-match", &etag)], Body::empty()),
        )
        .await;
        assert_eq!(reply.status, StatusCode::NOT_IMPLEMENTED);
        assert_eq!(reply.code(), "unsupported");
        assert_eq!(get(&app, uri, &[]).await.status, StatusCode::OK);
    }

    #[tokio::test]
    async fn a_key_the_store_refuses_is_400_and_an_unknown_store_is_404() {
        let app = app().await;
        let bad = put(&app, "a//b", &[("if-none-match", "*")], b"x").await;
        assert_eq!(bad.status, StatusCode::BAD_REQUEST);
        assert_eq!(bad.code(), "invalid_argument");
        let nowhere = get(&app, "/v1/stores/nope/objects/k", &[]).await;
        assert_eq!(nowhere.status, StatusCode::NOT_FOUND);
        assert_eq!(nowhere.code(), "not_found");
        let message = nowhere.json()["error"]["message"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(
            message.contains("the stores are: preserved, serving"),
            "{message}"
        );
    }
}
