//! Buckets and listings: ListBuckets, HeadBucket, CreateBucket (for the
//! configured stores only), GetBucketLocation, GetBucketVersioning,
//! ListObjects (v1 and v2, with `delimiter`), ListObjectVersions and
//! DeleteObjects.
//!
//! A listing reads the store a page at a time and folds keys under a
//! delimiter into common prefixes as S3 does. One request reads at most
//! [`MAX_SCAN_PAGES`] store pages: a listing whose keys mostly fold into
//! few prefixes answers with fewer entries than asked and a continuation
//! (S3 may do the same), so no request scans without bound. Continuation
//! tokens are opaque to clients: the last key read and the common prefix
//! being skipped, if any, so a prefix is never listed twice across pages.
//!
//! `encoding-type=url` (which the AWS CLI and boto3 send by default)
//! percent-encodes every key and prefix in the answer.

use std::sync::Arc;

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::Response;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use custodian_core::decisions::access::{Action, Target};
use custodian_object::{ListedObject, ListedVersion, MAX_LIST_PAGE, ObjectStore};
use custodian_s3_wire::date;
use custodian_s3_wire::error::{Code, S3Error};
use custodian_s3_wire::xml::{self, DeleteEntry, KEY_ENCODE, Writer};
use percent_encoding::utf8_percent_encode;

use super::objects::{delete_one, object_key_of};
use super::{Call, body, errors, etag, xml as xml_response};

/// Most store pages one listing request reads.
const MAX_SCAN_PAGES: usize = 8;

/// Most entries one listing answers (S3's `max-keys` ceiling).
const MAX_KEYS: usize = 1000;

/// ListBuckets: the stores the caller may list.
pub(super) async fn list_buckets(call: &Call) -> Result<Response, S3Error> {
    let mut w = Writer::document();
    w.open_root("ListAllMyBucketsResult");
    w.open("Owner");
    w.text_element("ID", &call.principal.name);
    w.text_element("DisplayName", &call.principal.name);
    w.close("Owner");
    w.open("Buckets");
    let created = date::timestamp(call.host.clock.now_ms());
    for name in call.host.stores.keys() {
        let target = Target {
            store: Some(name.clone()),
            ..Target::default()
        };
        // A bucket the caller may not list is left out, not an error.
        match call.judge(Action::List, target).await {
            Ok(_) => {}
            Err(e) if e.code == Code::AccessDenied => continue,
            Err(e) => return Err(e),
        }
        w.open("Bucket");
        w.text_element("Name", name);
        w.text_element("CreationDate", &created);
        w.close("Bucket");
    }
    w.close("Buckets");
    w.close("ListAllMyBucketsResult");
    Ok(xml_response(StatusCode::OK, w.finish()))
}

/// HeadBucket.
pub(super) fn head_bucket(call: &Call) -> Result<Response, S3Error> {
    call.store()?;
    let mut response = Response::new(Body::empty());
    response.headers_mut().insert(
        "x-amz-bucket-region",
        axum::http::HeaderValue::from_static("us-east-1"),
    );
    Ok(response)
}

/// CreateBucket: buckets are the configured stores, so creating one that
/// exists is S3's `BucketAlreadyOwnedByYou` (which clients such as rclone
/// take as success), and any other is refused.
pub(super) fn create_bucket(call: &Call) -> Result<Response, S3Error> {
    let name = call.addressed.bucket.clone().unwrap_or_default();
    if call.host.stores.contains_key(&name) {
        return Err(S3Error::new(
            Code::BucketAlreadyOwnedByYou,
            "Your previous request to create the named bucket succeeded and you already own it \
             (it is one of the host's configured stores).",
        ));
    }
    Err(S3Error::new(
        Code::AccessDenied,
        "buckets are the host's configured stores ([stores] in the configuration); none is \
         created over S3",
    ))
}

/// GetBucketLocation: the endpoint has no regions; it answers as S3's
/// `us-east-1` does (an empty constraint), which every client accepts.
pub(super) fn location(call: &Call) -> Result<Response, S3Error> {
    call.store()?;
    let mut w = Writer::document();
    w.open_root("LocationConstraint");
    w.close("LocationConstraint");
    Ok(xml_response(StatusCode::OK, w.finish()))
}

/// GetBucketVersioning: `Enabled` for a versioned store, else never
/// configured (an empty document, as S3 answers for a bucket that never
/// had versioning).
pub(super) fn versioning(call: &Call) -> Result<Response, S3Error> {
    let (_, store) = call.store()?;
    let mut w = Writer::document();
    w.open_root("VersioningConfiguration");
    if store.versioned() {
        w.text_element("Status", "Enabled");
    }
    w.close("VersioningConfiguration");
    Ok(xml_response(StatusCode::OK, w.finish()))
}

/// Where a listing resumes: strictly after `after`, skipping every key
/// under `skip` (a common prefix already answered).
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Token {
    #[serde(rename = "a")]
    after: Option<String>,
    #[serde(rename = "s")]
    skip: Option<String>,
}

impl Token {
    fn encode(&self) -> String {
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(self).unwrap_or_default())
    }

    fn decode(text: &str) -> Result<Self, S3Error> {
        URL_SAFE_NO_PAD
            .decode(text)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .ok_or_else(|| {
                S3Error::new(
                    Code::InvalidArgument,
                    "The continuation token provided is incorrect",
                )
            })
    }
}

/// The listing parameters every listing shares.
struct Listing {
    prefix: String,
    delimiter: Option<String>,
    max_keys: usize,
    encode: bool,
}

impl Listing {
    fn of(call: &Call) -> Result<Self, S3Error> {
        let max_keys = match call.addressed.param("max-keys") {
            None => MAX_KEYS,
            Some(text) => text
                .parse::<usize>()
                .map_err(|_| S3Error::new(Code::InvalidArgument, "max-keys is not a number"))?
                .min(MAX_KEYS),
        };
        let encode = match call.addressed.param("encoding-type") {
            None => false,
            Some("url") => true,
            Some(other) => {
                return Err(S3Error::new(
                    Code::InvalidArgument,
                    format!("Invalid Encoding Method specified in Request: {other:?}"),
                ));
            }
        };
        Ok(Self {
            prefix: call.addressed.param("prefix").unwrap_or("").to_owned(),
            delimiter: call
                .addressed
                .param("delimiter")
                .filter(|d| !d.is_empty())
                .map(str::to_owned),
            max_keys,
            encode,
        })
    }

    /// `text` as the answer writes it.
    fn out(&self, text: &str) -> String {
        if self.encode {
            utf8_percent_encode(text, KEY_ENCODE).to_string()
        } else {
            text.to_owned()
        }
    }

    /// The common prefix `key` folds into, if any.
    fn folds(&self, key: &str) -> Option<String> {
        let delimiter = self.delimiter.as_deref()?;
        let rest = key.strip_prefix(&self.prefix)?;
        let at = rest.find(delimiter)?;
        Some(format!("{}{}", self.prefix, &rest[..at + delimiter.len()]))
    }
}

/// One entry of a listing's answer.
enum Entry<T> {
    Item(T),
    Prefix(String),
}

/// A folded page: entries, and where to resume when there are more.
struct Folded<T> {
    entries: Vec<Entry<T>>,
    next: Option<Token>,
}

/// Reads `store`'s current objects from `token` on, folding by the
/// listing's delimiter, until `max_keys` entries or the scan bound.
async fn fold_objects(
    store: &dyn ObjectStore,
    listing: &Listing,
    mut token: Token,
) -> Result<Folded<ListedObject>, S3Error> {
    let mut entries = Vec::new();
    if listing.max_keys == 0 {
        return Ok(Folded {
            entries,
            next: None,
        });
    }
    for _ in 0..MAX_SCAN_PAGES {
        let page = store
            .list(&listing.prefix, token.after.as_deref(), MAX_LIST_PAGE)
            .await
            .map_err(|e| errors::of_store(e, false))?;
        let complete = page.next.is_none();
        for item in page.items {
            token.after = Some(item.key.clone());
            if let Some(skip) = &token.skip
                && item.key.starts_with(skip.as_str())
            {
                continue;
            }
            token.skip = None;
            let entry = match listing.folds(&item.key) {
                Some(prefix) => {
                    token.skip = Some(prefix.clone());
                    Entry::Prefix(prefix)
                }
                None => Entry::Item(item),
            };
            entries.push(entry);
            if entries.len() == listing.max_keys {
                // The next page may hold nothing more; S3 says "truncated"
                // only when it knows there is more, and clients cope with
                // an empty last page either way.
                return Ok(Folded {
                    entries,
                    next: Some(token),
                });
            }
        }
        if complete {
            return Ok(Folded {
                entries,
                next: None,
            });
        }
    }
    Ok(Folded {
        entries,
        next: Some(token),
    })
}

/// ListObjects (v1) or ListObjectsV2.
pub(super) async fn list_objects(call: &Call, v2: bool) -> Result<Response, S3Error> {
    let (name, store) = call.store()?;
    let listing = Listing::of(call)?;
    let (token, start_after, marker) = if v2 {
        let start_after = call.addressed.param("start-after").map(str::to_owned);
        let token = match call.addressed.param("continuation-token") {
            Some(text) => Token::decode(text)?,
            None => Token {
                after: start_after.clone(),
                skip: None,
            },
        };
        (token, start_after, None)
    } else {
        let marker = call.addressed.param("marker").map(str::to_owned);
        // A marker that is a common prefix (a client passing back the
        // last entry it saw) skips that prefix's keys too.
        let skip = marker
            .as_ref()
            .filter(|m| {
                listing
                    .delimiter
                    .as_ref()
                    .is_some_and(|d| m.ends_with(d.as_str()))
            })
            .cloned();
        (
            Token {
                after: marker.clone(),
                skip,
            },
            None,
            marker,
        )
    };
    let folded = fold_objects(store.as_ref(), &listing, token).await?;
    let mut w = Writer::document();
    w.open_root("ListBucketResult");
    w.text_element("Name", &name);
    w.text_element("Prefix", &listing.out(&listing.prefix));
    if let Some(delimiter) = &listing.delimiter {
        w.text_element("Delimiter", &listing.out(delimiter));
    }
    w.text_element("MaxKeys", &listing.max_keys.to_string());
    if listing.encode {
        w.text_element("EncodingType", "url");
    }
    w.text_element(
        "IsTruncated",
        if folded.next.is_some() {
            "true"
        } else {
            "false"
        },
    );
    if v2 {
        w.text_element("KeyCount", &folded.entries.len().to_string());
        if let Some(token) = call.addressed.param("continuation-token") {
            w.text_element("ContinuationToken", token);
        }
        if let Some(start_after) = &start_after {
            w.text_element("StartAfter", &listing.out(start_after));
        }
        if let Some(next) = &folded.next {
            w.text_element("NextContinuationToken", &next.encode());
        }
    } else {
        w.text_element("Marker", &listing.out(marker.as_deref().unwrap_or("")));
        if folded.next.is_some() {
            // The last entry answered: a key, or a common prefix whose
            // keys the next request skips (see `marker` above).
            let last = folded.entries.last().map(|e| match e {
                Entry::Item(item) => item.key.clone(),
                Entry::Prefix(prefix) => prefix.clone(),
            });
            if let Some(last) = last {
                w.text_element("NextMarker", &listing.out(&last));
            }
        }
    }
    for entry in &folded.entries {
        if let Entry::Item(item) = entry {
            w.open("Contents");
            w.text_element("Key", &listing.out(&item.key));
            w.text_element(
                "LastModified",
                &date::timestamp(item.last_modified_ms.unwrap_or(0)),
            );
            w.text_element("ETag", &etag::of(&item.etag, item.content_md5));
            w.text_element("Size", &item.size.to_string());
            w.text_element("StorageClass", "STANDARD");
            w.close("Contents");
        }
    }
    for entry in &folded.entries {
        if let Entry::Prefix(prefix) = entry {
            w.open("CommonPrefixes");
            w.text_element("Prefix", &listing.out(prefix));
            w.close("CommonPrefixes");
        }
    }
    w.close("ListBucketResult");
    Ok(xml_response(StatusCode::OK, w.finish()))
}

/// ListObjectVersions. On an unversioned store every current object is
/// listed as its one version, `null`, as S3 lists a bucket that never had
/// versioning.
pub(super) async fn list_versions(call: &Call) -> Result<Response, S3Error> {
    let (name, store) = call.store()?;
    let listing = Listing::of(call)?;
    let key_marker = call.addressed.param("key-marker").map(str::to_owned);
    let version_marker = call
        .addressed
        .param("version-id-marker")
        .filter(|v| !v.is_empty())
        .map(str::to_owned);
    let (entries, next) = if store.versioned() {
        fold_versions(
            store.as_ref(),
            &listing,
            key_marker.clone(),
            version_marker.clone(),
        )
        .await?
    } else {
        let token = Token {
            after: key_marker.clone(),
            skip: None,
        };
        let folded = fold_objects(store.as_ref(), &listing, token).await?;
        let entries = folded
            .entries
            .into_iter()
            .map(|e| match e {
                Entry::Item(item) => Entry::Item(ListedVersion {
                    key: item.key,
                    version_id: "null".into(),
                    etag: item.etag,
                    content_md5: item.content_md5,
                    size: item.size,
                    is_current: true,
                    is_delete_marker: false,
                    last_modified_ms: item.last_modified_ms,
                }),
                Entry::Prefix(p) => Entry::Prefix(p),
            })
            .collect::<Vec<_>>();
        let next = folded.next.map(|t| (t.after.unwrap_or_default(), None));
        (entries, next)
    };
    let mut w = Writer::document();
    w.open_root("ListVersionsResult");
    w.text_element("Name", &name);
    w.text_element("Prefix", &listing.out(&listing.prefix));
    if let Some(delimiter) = &listing.delimiter {
        w.text_element("Delimiter", &listing.out(delimiter));
    }
    w.text_element(
        "KeyMarker",
        &listing.out(key_marker.as_deref().unwrap_or("")),
    );
    w.text_element("VersionIdMarker", version_marker.as_deref().unwrap_or(""));
    w.text_element("MaxKeys", &listing.max_keys.to_string());
    if listing.encode {
        w.text_element("EncodingType", "url");
    }
    w.text_element("IsTruncated", if next.is_some() { "true" } else { "false" });
    if let Some((key, version)) = &next {
        w.text_element("NextKeyMarker", &listing.out(key));
        if let Some(version) = version {
            w.text_element("NextVersionIdMarker", version);
        }
    }
    for entry in &entries {
        match entry {
            Entry::Item(v) => {
                let element = if v.is_delete_marker {
                    "DeleteMarker"
                } else {
                    "Version"
                };
                w.open(element);
                w.text_element("Key", &listing.out(&v.key));
                w.text_element("VersionId", &v.version_id);
                w.text_element("IsLatest", if v.is_current { "true" } else { "false" });
                w.text_element(
                    "LastModified",
                    &date::timestamp(v.last_modified_ms.unwrap_or(0)),
                );
                if !v.is_delete_marker {
                    w.text_element("ETag", &etag::of(&v.etag, v.content_md5));
                    w.text_element("Size", &v.size.to_string());
                    w.text_element("StorageClass", "STANDARD");
                }
                w.close(element);
            }
            Entry::Prefix(prefix) => {
                w.open("CommonPrefixes");
                w.text_element("Prefix", &listing.out(prefix));
                w.close("CommonPrefixes");
            }
        }
    }
    w.close("ListVersionsResult");
    Ok(xml_response(StatusCode::OK, w.finish()))
}

/// A folded page of versions, and where the next one starts: the key
/// marker, and the store's own cursor as the version-id marker.
type FoldedVersions = (Vec<Entry<ListedVersion>>, Option<(String, Option<String>)>);

/// Reads `store`'s versions: from the store's cursor `version_marker`
/// when the client passes one back, else after every version of
/// `key_marker`.
async fn fold_versions(
    store: &dyn ObjectStore,
    listing: &Listing,
    key_marker: Option<String>,
    version_marker: Option<String>,
) -> Result<FoldedVersions, S3Error> {
    let mut entries: Vec<Entry<ListedVersion>> = Vec::new();
    let mut cursor = version_marker;
    let mut skip_key = if cursor.is_none() { key_marker } else { None };
    let mut skip_prefix: Option<String> = None;
    if listing.max_keys == 0 {
        return Ok((entries, None));
    }
    for _ in 0..MAX_SCAN_PAGES {
        let page = store
            .list_versions(&listing.prefix, cursor.as_deref(), MAX_LIST_PAGE)
            .await
            .map_err(|e| errors::of_store(e, false))?;
        let complete = page.next.is_none();
        let count = page.items.len();
        for (i, item) in page.items.into_iter().enumerate() {
            // Skip up to and including the key marker's versions.
            if let Some(marker) = &skip_key {
                if item.key.as_str() <= marker.as_str() {
                    continue;
                }
                skip_key = None;
            }
            if let Some(skip) = &skip_prefix
                && item.key.starts_with(skip.as_str())
            {
                continue;
            }
            skip_prefix = None;
            let key = item.key.clone();
            match listing.folds(&item.key) {
                Some(prefix) => {
                    skip_prefix = Some(prefix.clone());
                    entries.push(Entry::Prefix(prefix));
                }
                None => entries.push(Entry::Item(item)),
            }
            if entries.len() == listing.max_keys {
                if i + 1 == count && complete {
                    return Ok((entries, None));
                }
                // Resume after this entry's key: its remaining versions
                // would otherwise need a cursor into the middle of a
                // page, which only the store can make.
                let resume = match entries.last() {
                    Some(Entry::Prefix(p)) => p.clone(),
                    _ => key,
                };
                return Ok((entries, Some((resume, None))));
            }
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => return Ok((entries, None)),
        }
    }
    Ok((entries, cursor.map(|c| (String::new(), Some(c)))))
}

/// DeleteObjects: each key asked about and deleted on its own; the answer
/// lists what was deleted (unless quiet) and every key that failed, with
/// its S3 error.
pub(super) async fn delete_objects(call: &Call, body: Body) -> Result<Response, S3Error> {
    let (name, store) = call.store()?;
    if call.header("content-md5")?.is_none()
        && !call
            .parts
            .headers
            .keys()
            .any(|n| n.as_str().starts_with("x-amz-checksum-"))
        && call.header("x-amz-sdk-checksum-algorithm")?.is_none()
    {
        return Err(S3Error::new(
            Code::InvalidRequest,
            "Missing required header for this request: Content-MD5 (or an x-amz-checksum-*)",
        ));
    }
    let received = body::read(call, body, xml::MAX_BODY_BYTES as u64, false).await?;
    let delete = xml::parse_delete(&received.bytes)?;
    drop(received);
    let mut w = Writer::document();
    w.open_root("DeleteResult");
    for DeleteEntry { key, version_id } in &delete.objects {
        match delete_entry(call, &name, &store, key, version_id.as_deref()).await {
            Ok(()) => {
                if !delete.quiet {
                    w.open("Deleted");
                    w.text_element("Key", key);
                    w.optional("VersionId", version_id.as_deref());
                    if version_id.is_none() && store.versioned() {
                        w.text_element("DeleteMarker", "true");
                    }
                    w.close("Deleted");
                }
            }
            Err(error) => {
                w.open("Error");
                w.text_element("Key", key);
                w.optional("VersionId", version_id.as_deref());
                w.text_element("Code", error.code.as_str());
                w.text_element("Message", &error.message);
                w.close("Error");
            }
        }
    }
    w.close("DeleteResult");
    Ok(xml_response(StatusCode::OK, w.finish()))
}

async fn delete_entry(
    call: &Call,
    store_name: &str,
    store: &Arc<dyn ObjectStore>,
    key: &str,
    version: Option<&str>,
) -> Result<(), S3Error> {
    let object = object_key_of(key)?;
    let action = if version.is_some() {
        Action::DeleteVersion
    } else {
        Action::Delete
    };
    let target = Target {
        store: Some(store_name.to_owned()),
        key: Some(key.to_owned()),
        version: version.map(str::to_owned),
        ..Target::default()
    };
    let target = call.judge(action, target).await?;
    delete_one(call, store.as_ref(), &object, version, action, target).await
}
