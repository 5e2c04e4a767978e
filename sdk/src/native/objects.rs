use super::StoredObject;
use crate::Error;
use crate::bindings::host::custodian::host::objects::{
    ListedObject, ObjectMeta, ObjectPage, PutCondition, VersionPage,
};
use custodian_contract::limits::MAX_BODY_BYTES;

fn unversioned() -> Error {
    Error::Unsupported("the native test host's stores are unversioned".into())
}

fn check_key(key: &str) -> Result<(), Error> {
    if (1..=1024).contains(&key.len()) {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "object key of {} bytes",
            key.len()
        )))
    }
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
            "{store}/{key} is no longer {etag}"
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
            "{store}/{key} exceeds {MAX_BODY_BYTES} bytes; read it in ranges"
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
    if length > MAX_BODY_BYTES {
        return Err(Error::InvalidArgument(format!("a range of {length} bytes")));
    }
    let object = current(store, key, if_match)?;
    let size = object.body.len() as u64;
    let start = offset.min(size) as usize;
    let end = offset.saturating_add(length).min(size) as usize;
    Ok(object.body[start..end].to_vec())
}

fn publish(
    store: &str,
    key: &str,
    body: Vec<u8>,
    crc64: u64,
    condition: &PutCondition,
    metadata: &[(String, String)],
) -> Result<ObjectMeta, Error> {
    check_key(key)?;
    super::with(|host| {
        let existing = host.stores.get(store).and_then(|s| s.get(key));
        match (condition, existing) {
            (PutCondition::IfNoneMatchAny, Some(_)) => {
                return Err(Error::PreconditionFailed(format!("{store}/{key} exists")));
            }
            (PutCondition::IfMatch(etag), Some(object)) if *etag != object.etag => {
                return Err(Error::PreconditionFailed(format!(
                    "{store}/{key} is not {etag}"
                )));
            }
            (PutCondition::IfMatch(etag), None) => {
                return Err(Error::PreconditionFailed(format!(
                    "{store}/{key} is not {etag}"
                )));
            }
            _ => {}
        }
        host.publishes += 1;
        let object = StoredObject {
            etag: format!("\"{crc64:016x}-{}\"", host.publishes),
            body,
            crc64,
            modified_ms: host.now_ms,
            metadata: metadata.to_vec(),
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
            "a body of {} bytes",
            body.len()
        )));
    }
    let actual = super::checksum::crc64_nvme(body);
    if crc64.is_some_and(|claimed| claimed != actual) {
        return Err(Error::ChecksumMismatch(format!(
            "{store}/{key}: the body's CRC-64/NVME is {actual:016x}"
        )));
    }
    publish(store, key, body.to_vec(), actual, condition, metadata)
}

/// The native host's `objects.copy`; see `wit/deps/host/objects.wit`.
pub fn copy(
    store: &str,
    source: &str,
    source_if_match: Option<&str>,
    destination: &str,
    condition: &PutCondition,
    metadata: &[(String, String)],
) -> Result<ObjectMeta, Error> {
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
    if limit == 0 || limit > 1000 {
        return Err(Error::InvalidArgument(format!(
            "limit {limit} is outside 1..=1000"
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

/// The native host's `objects.head-version`; see `wit/deps/host/objects.wit`.
pub fn head_version(_store: &str, _key: &str, _version_id: &str) -> Result<ObjectMeta, Error> {
    Err(unversioned())
}

/// The native host's `objects.get-version-range`; see `wit/deps/host/objects.wit`.
pub fn get_version_range(
    _store: &str,
    _key: &str,
    _version_id: &str,
    _offset: u64,
    _length: u64,
) -> Result<Vec<u8>, Error> {
    Err(unversioned())
}

/// The native host's `objects.delete-version`; see `wit/deps/host/objects.wit`.
pub fn delete_version(_store: &str, _key: &str, _version_id: &str) -> Result<(), Error> {
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
