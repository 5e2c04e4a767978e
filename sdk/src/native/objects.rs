//! The native host's `objects`: unversioned in-memory stores with the
//! host's rules, which `tests/object_conformance.rs` holds to the host's
//! object conformance suite. The rules a plugin plans by (keys, metadata,
//! bounds) are the contract's ([`custodian_contract`]), the ones the host
//! checks, never a copy of them.

use super::StoredObject;
use super::guard::ObjectWrite;
use crate::Error;
use crate::bindings::host::custodian::host::objects::{
    ListedObject, ObjectMeta, ObjectPage, PutCondition, VersionPage,
};
use custodian_contract::limits::{MAX_BODY_BYTES, MAX_PAGE_ENTRIES};
use custodian_contract::{object_key, object_metadata};

fn unversioned() -> Error {
    Error::Unsupported("the native test host's stores are unversioned".into())
}

/// The host's key rule, worded as the host words it.
fn check_key(key: &str) -> Result<(), Error> {
    object_key::check(key)
        .map_err(|why| Error::InvalidArgument(format!("object key {key:?}: {why}")))
}

/// Metadata as the host takes it from the WIT list: a map, so a key named
/// twice is refused (as the runtime's conversion refuses it, before the
/// key is checked), and sorted by key, the order in which the host hands a
/// map's entries back. The contract's rule comes later
/// ([`check_metadata_rule`]).
fn as_map(pairs: &[(String, String)]) -> Result<Vec<(String, String)>, Error> {
    let mut sorted = pairs.to_vec();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    if sorted.windows(2).any(|w| w[0].0 == w[1].0) {
        return Err(Error::InvalidArgument("metadata names a key twice".into()));
    }
    Ok(sorted)
}

/// The contract's metadata rule, after the keys are checked (the host
/// checks keys where they enter, metadata in the store).
fn check_metadata_rule(metadata: &[(String, String)]) -> Result<(), Error> {
    object_metadata::check(metadata.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .map_err(|why| Error::InvalidArgument(why.to_string()))
}

fn meta(key: &str, object: &StoredObject) -> ObjectMeta {
    ObjectMeta {
        key: key.to_owned(),
        version_id: None,
        etag: object.etag.clone(),
        size: object.body.len() as u64,
        crc64: Some(object.crc64),
        last_modified_ms: Some(object.modified_ms),
        metadata: object.metadata.clone(),
    }
}

fn current(store: &str, key: &str, if_match: Option<&str>) -> Result<StoredObject, Error> {
    check_key(key)?;
    let object = super::with(|host| host.stores.get(store).and_then(|s| s.get(key)).cloned())
        .ok_or_else(|| Error::NotFound(format!("{store}/{key}")))?;
    match if_match {
        Some(etag) if etag != object.etag => Err(Error::PreconditionFailed(format!(
            "{store}/{key} has etag {}, not {etag}",
            object.etag
        ))),
        _ => Ok(object),
    }
}

/// The native host's `objects.head`; see `wit/deps/host/objects.wit`.
pub fn head(store: &str, key: &str) -> Result<ObjectMeta, Error> {
    current(store, key, None).map(|object| meta(key, &object))
}

/// The native host's `objects.get`; see `wit/deps/host/objects.wit`.
pub fn get(store: &str, key: &str, if_match: Option<&str>) -> Result<(ObjectMeta, Vec<u8>), Error> {
    let object = current(store, key, if_match)?;
    if object.body.len() as u64 > MAX_BODY_BYTES {
        return Err(Error::InvalidArgument(format!(
            "{key} is {} bytes, over the {MAX_BODY_BYTES} a call may move; read it with get-range",
            object.body.len()
        )));
    }
    Ok((meta(key, &object), object.body))
}

/// The native host's `objects.get-range`; see `wit/deps/host/objects.wit`.
pub fn get_range(
    store: &str,
    key: &str,
    offset: u64,
    length: u64,
    if_match: Option<&str>,
) -> Result<Vec<u8>, Error> {
    // The length first, before the key is looked at, as the host does.
    if length > MAX_BODY_BYTES {
        return Err(Error::InvalidArgument(format!(
            "a range of {length} bytes exceeds {MAX_BODY_BYTES}"
        )));
    }
    let object = current(store, key, if_match)?;
    let size = object.body.len() as u64;
    let start = offset.min(size) as usize;
    let end = offset.saturating_add(length).min(size) as usize;
    Ok(object.body[start..end].to_vec())
}

/// Publishes `body` under `key` (already checked) if `condition` holds
/// against the current object: the host's `PutCondition::check`.
fn publish(
    store: &str,
    key: &str,
    body: Vec<u8>,
    crc64: u64,
    condition: &PutCondition,
    metadata: Vec<(String, String)>,
) -> Result<ObjectMeta, Error> {
    super::guard::object(store, key, ObjectWrite::Put)?;
    super::with(|host| {
        let existing = host.stores.get(store).and_then(|s| s.get(key));
        let refused = match (condition, existing) {
            (PutCondition::Unconditional, _) | (PutCondition::IfNoneMatchAny, None) => None,
            (PutCondition::IfNoneMatchAny, Some(object)) => Some(format!(
                "{store}/{key} already exists with etag {}",
                object.etag
            )),
            (PutCondition::IfMatch(want), Some(object)) if *want == object.etag => None,
            (PutCondition::IfMatch(want), Some(object)) => Some(format!(
                "{store}/{key} has etag {}, not {want}",
                object.etag
            )),
            (PutCondition::IfMatch(want), None) => Some(format!(
                "{store}/{key} has no current object to match {want}"
            )),
        };
        if let Some(refused) = refused {
            return Err(Error::PreconditionFailed(refused));
        }
        host.publishes += 1;
        let object = StoredObject {
            etag: format!("\"{crc64:016x}-{}\"", host.publishes),
            body,
            crc64,
            modified_ms: host.now_ms,
            metadata,
        };
        let meta = meta(key, &object);
        host.stores
            .entry(store.to_owned())
            .or_default()
            .insert(key.to_owned(), object);
        Ok(meta)
    })
}

/// The native host's `objects.put`; see `wit/deps/host/objects.wit`.
///
/// Checks in the host's order: the body's size, the metadata's keys being
/// distinct, the key, the metadata rule, the CRC, then the condition; so a
/// call with several faults is refused for the same one.
pub fn put(
    store: &str,
    key: &str,
    body: &[u8],
    condition: &PutCondition,
    crc64: Option<u64>,
    metadata: &[(String, String)],
) -> Result<ObjectMeta, Error> {
    if body.len() as u64 > MAX_BODY_BYTES {
        return Err(Error::InvalidArgument(format!(
            "a body of {} bytes exceeds {MAX_BODY_BYTES}",
            body.len()
        )));
    }
    let metadata = as_map(metadata)?;
    check_key(key)?;
    check_metadata_rule(&metadata)?;
    let actual = super::checksum::crc64_nvme(body);
    if let Some(claimed) = crc64.filter(|claimed| *claimed != actual) {
        return Err(Error::ChecksumMismatch(format!(
            "{store}/{key}: the body's CRC-64/NVME is {actual:016x}, the caller claimed {claimed:016x}"
        )));
    }
    publish(store, key, body.to_vec(), actual, condition, metadata)
}

/// The native host's `objects.copy`; see `wit/deps/host/objects.wit`.
///
/// Both keys and the metadata are checked before the source is looked up,
/// as on the host.
pub fn copy(
    store: &str,
    source: &str,
    source_if_match: Option<&str>,
    destination: &str,
    condition: &PutCondition,
    metadata: &[(String, String)],
) -> Result<ObjectMeta, Error> {
    let metadata = as_map(metadata)?;
    check_key(source)?;
    check_key(destination)?;
    check_metadata_rule(&metadata)?;
    // The CRC travels with the bytes, which it describes; the metadata
    // describes a publish, so it comes only from the caller.
    let object = current(store, source, source_if_match)?;
    publish(
        store,
        destination,
        object.body,
        object.crc64,
        condition,
        metadata,
    )
}

/// The native host's `objects.delete`; see `wit/deps/host/objects.wit`.
pub fn delete(store: &str, key: &str) -> Result<(), Error> {
    check_key(key)?;
    super::guard::object(store, key, ObjectWrite::Delete)?;
    super::with(|host| {
        if let Some(objects) = host.stores.get_mut(store) {
            objects.remove(key);
        }
    });
    Ok(())
}

/// The native host's `objects.list`; see `wit/deps/host/objects.wit`.
pub fn list(
    store: &str,
    prefix: &str,
    cursor: Option<&str>,
    limit: u32,
) -> Result<ObjectPage, Error> {
    if !(1..=MAX_PAGE_ENTRIES).contains(&limit) {
        return Err(Error::InvalidArgument(format!(
            "limit {limit} is outside 1..={MAX_PAGE_ENTRIES}"
        )));
    }
    super::with(|host| {
        let Some(objects) = host.stores.get(store) else {
            return Ok(ObjectPage {
                objects: Vec::new(),
                next: None,
            });
        };
        let mut matching = objects
            .iter()
            .filter(|(key, _)| key.starts_with(prefix))
            .filter(|(key, _)| cursor.is_none_or(|after| key.as_str() > after));
        let page: Vec<ListedObject> = matching
            .by_ref()
            .take(limit as usize)
            .map(|(key, object)| ListedObject {
                key: key.clone(),
                size: object.body.len() as u64,
                etag: object.etag.clone(),
                last_modified_ms: Some(object.modified_ms),
            })
            .collect();
        let next = if matching.next().is_some() {
            page.last().map(|last| last.key.clone())
        } else {
            None
        };
        Ok(ObjectPage {
            objects: page,
            next,
        })
    })
}

// The stores are unversioned, so every version-scoped call is
// `unsupported`, but only after the checks the host makes before it reaches
// a store (the range's length, the key): a bad argument is refused the same
// way on every store.

/// The native host's `objects.head-version`; see `wit/deps/host/objects.wit`.
pub fn head_version(_store: &str, key: &str, _version_id: &str) -> Result<ObjectMeta, Error> {
    check_key(key)?;
    Err(unversioned())
}

/// The native host's `objects.get-version-range`; see `wit/deps/host/objects.wit`.
pub fn get_version_range(
    _store: &str,
    key: &str,
    _version_id: &str,
    _offset: u64,
    length: u64,
) -> Result<Vec<u8>, Error> {
    if length > MAX_BODY_BYTES {
        return Err(Error::InvalidArgument(format!(
            "a range of {length} bytes exceeds {MAX_BODY_BYTES}"
        )));
    }
    check_key(key)?;
    Err(unversioned())
}

/// The native host's `objects.delete-version`; see `wit/deps/host/objects.wit`.
pub fn delete_version(_store: &str, key: &str, _version_id: &str) -> Result<(), Error> {
    check_key(key)?;
    Err(unversioned())
}

/// The native host's `objects.list-versions`; see `wit/deps/host/objects.wit`.
pub fn list_versions(
    _store: &str,
    _prefix: &str,
    _cursor: Option<&str>,
    _limit: u32,
) -> Result<VersionPage, Error> {
    Err(unversioned())
}

/// The native host's `objects.list-key-versions`; see
/// `wit/deps/host/objects.wit`.
pub fn list_key_versions(
    _store: &str,
    key: &str,
    _cursor: Option<&str>,
    _limit: u32,
) -> Result<VersionPage, Error> {
    check_key(key)?;
    Err(unversioned())
}
