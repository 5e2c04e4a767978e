//! `custodian:host/objects` over the [`custodian_object::ObjectStore`]
//! mechanism, restricted to the plugin's granted stores.

use std::sync::Arc;

use bytes::Bytes;

use super::HostView;
use crate::bindings::HostError;
use crate::bindings::host::custodian::host::objects as wit;
use crate::bindings::host::custodian::host::types::Error;
use custodian_base::checksum;
use custodian_base::error::ErrorKind;
use custodian_core::audit::{self, Record};
use custodian_object::ObjectStoreExt;
use custodian_object::{
    ListPage, ListedObject, ListedVersion, Metadata, ObjectError, ObjectKey, ObjectMeta,
    ObjectStore, PutCondition,
};

// Larger objects are read in ranges of at most this.
use custodian_contract::limits::MAX_BODY_BYTES;

fn object_error(error: ObjectError) -> HostError {
    HostError::Guest(super::guest_error(error.kind(), error.into_message()))
}

impl HostView<'_> {
    /// `outcome` of a destructive call on `key` in `store`, as the guest
    /// sees it; a lock's refusal is also audited under this plugin, so a
    /// plugin that tries to destroy evidence leaves a record of trying.
    /// The audit's own failure is only logged: the refusal stands.
    fn destroyed<T>(
        &self,
        store: &str,
        key: &str,
        outcome: Result<T, ObjectError>,
    ) -> Result<T, HostError> {
        if let Err(error) = &outcome
            && error.kind() == ErrorKind::Retained
        {
            let record = Record {
                at_ms: self.call.services.clock.now_ms(),
                actor: self.call.actor.clone(),
                event: "lock/refused".into(),
                targets: vec![format!("store:{store}"), format!("key:{key}")],
                detail: Some(error.to_string()),
            };
            let kv = self.call.services.kv.clone();
            if let Ok(Err(e)) = self.wait(async move { audit::append(kv.as_ref(), &record).await })
            {
                tracing::warn!(error = %e, "cannot audit a lock's refusal of a plugin");
            }
        }
        outcome.map_err(object_error)
    }
}

fn invalid(message: String) -> HostError {
    HostError::Guest(Error::InvalidArgument(message))
}

fn meta(meta: ObjectMeta) -> wit::ObjectMeta {
    wit::ObjectMeta {
        key: meta.key,
        version_id: meta.version_id,
        etag: meta.etag,
        size: meta.size,
        crc64: meta.crc64,
        last_modified_ms: meta.last_modified_ms,
        metadata: meta.metadata.into_iter().collect(),
    }
}

fn metadata(pairs: Vec<(String, String)>) -> Result<Metadata, HostError> {
    let count = pairs.len();
    let map: Metadata = pairs.into_iter().collect();
    if map.len() == count {
        Ok(map)
    } else {
        Err(invalid("metadata names a key twice".into()))
    }
}

fn condition(condition: wit::PutCondition) -> PutCondition {
    match condition {
        wit::PutCondition::IfMatch(etag) => PutCondition::IfMatch(etag),
        wit::PutCondition::IfNoneMatchAny => PutCondition::IfNoneMatchAny,
        wit::PutCondition::Unconditional => PutCondition::Unconditional,
    }
}

fn range(offset: u64, length: u64) -> Result<std::ops::Range<u64>, HostError> {
    if length > MAX_BODY_BYTES {
        return Err(invalid(format!(
            "a range of {length} bytes exceeds {MAX_BODY_BYTES}"
        )));
    }
    Ok(offset..offset.saturating_add(length))
}

impl HostView<'_> {
    /// The store named `name`, if it is granted to this plugin for reading.
    fn store(&self, name: &str) -> Result<Arc<dyn ObjectStore>, HostError> {
        if !self.call.grants.may_read_store(name) {
            return Err(HostError::Guest(Error::AccessDenied(format!(
                "object store {name:?} is not granted to this plugin"
            ))));
        }
        self.configured(name)
    }

    /// The store named `name`, if it is granted to this plugin for writing.
    fn writable_store(&self, name: &str) -> Result<Arc<dyn ObjectStore>, HostError> {
        if !self.call.grants.stores.contains(name) {
            return Err(HostError::Guest(Error::AccessDenied(
                if self.call.grants.read_stores.contains(name) {
                    format!("object store {name:?} is granted to this plugin for reading only")
                } else {
                    format!("object store {name:?} is not granted to this plugin")
                },
            )));
        }
        self.configured(name)
    }

    fn configured(&self, name: &str) -> Result<Arc<dyn ObjectStore>, HostError> {
        self.call.services.stores.get(name).cloned().ok_or_else(|| {
            HostError::Guest(Error::Unavailable(format!(
                "object store {name:?} is granted but not configured on this host"
            )))
        })
    }
}

impl wit::Host for HostView<'_> {
    fn head(&mut self, store: String, key: String) -> Result<wit::ObjectMeta, HostError> {
        self.charge()?;
        let store = self.store(&store)?;
        self.wait(store.head(&key))?.map(meta).map_err(object_error)
    }

    fn get(
        &mut self,
        store: String,
        key: String,
        if_match: Option<String>,
    ) -> Result<(wit::ObjectMeta, Vec<u8>), HostError> {
        self.charge()?;
        let store = self.store(&store)?;
        let (found, body) = self
            .wait(store.get_whole(&key, if_match.as_deref()))?
            .map_err(object_error)?;
        if found.size > MAX_BODY_BYTES {
            return Err(invalid(format!(
                "{key} is {} bytes, over the {MAX_BODY_BYTES} a call may move; read it with get-range",
                found.size
            )));
        }
        Ok((meta(found), body.to_vec()))
    }

    fn get_range(
        &mut self,
        store: String,
        key: String,
        offset: u64,
        length: u64,
        if_match: Option<String>,
    ) -> Result<Vec<u8>, HostError> {
        self.charge()?;
        let store = self.store(&store)?;
        let range = range(offset, length)?;
        // A range read is always pinned to one generation; without the
        // guest's etag, pin the current one.
        let etag = match if_match {
            Some(etag) => etag,
            None => self.wait(store.head(&key))?.map_err(object_error)?.etag,
        };
        self.wait(store.get_range(&key, range, &etag))?
            .map(|b| b.to_vec())
            .map_err(object_error)
    }

    fn put(
        &mut self,
        store: String,
        key: String,
        body: Vec<u8>,
        put_condition: wit::PutCondition,
        crc64: Option<u64>,
        pairs: Vec<(String, String)>,
    ) -> Result<wit::ObjectMeta, HostError> {
        self.charge()?;
        let name = store;
        let store = self.writable_store(&name)?;
        if body.len() as u64 > MAX_BODY_BYTES {
            return Err(invalid(format!(
                "a body of {} bytes exceeds {MAX_BODY_BYTES}",
                body.len()
            )));
        }
        let crc64 = crc64.unwrap_or_else(|| checksum::crc64_nvme(&body));
        let metadata = metadata(pairs)?;
        let condition = condition(put_condition);
        let outcome =
            self.wait(store.put_whole(&key, Bytes::from(body), &condition, &metadata, crc64))?;
        self.destroyed(&name, &key, outcome.map(meta))
    }

    fn copy(
        &mut self,
        store: String,
        source: String,
        source_if_match: Option<String>,
        destination: String,
        put_condition: wit::PutCondition,
        pairs: Vec<(String, String)>,
    ) -> Result<wit::ObjectMeta, HostError> {
        self.charge()?;
        let name = store;
        let store = self.writable_store(&name)?;
        let metadata = metadata(pairs)?;
        let condition = condition(put_condition);
        let outcome = self.wait(store.copy_object(
            &source,
            source_if_match.as_deref(),
            &destination,
            &condition,
            &metadata,
        ))?;
        self.destroyed(&name, &destination, outcome.map(meta))
    }

    fn delete(&mut self, store: String, key: String) -> Result<(), HostError> {
        self.charge()?;
        let name = store;
        let store = self.writable_store(&name)?;
        let outcome = self.wait(store.delete(&key))?;
        self.destroyed(&name, &key, outcome)
    }

    fn list(
        &mut self,
        store: String,
        prefix: String,
        cursor: Option<String>,
        limit: u32,
    ) -> Result<wit::ObjectPage, HostError> {
        self.charge()?;
        let store = self.store(&store)?;
        let page = self
            .wait(store.list(&prefix, cursor.as_deref(), limit))?
            .map_err(object_error)?;
        Ok(wit::ObjectPage {
            objects: page
                .items
                .into_iter()
                .map(|o: ListedObject| wit::ListedObject {
                    key: o.key,
                    size: o.size,
                    etag: o.etag,
                    last_modified_ms: o.last_modified_ms,
                })
                .collect(),
            next: page.next,
        })
    }

    fn head_version(
        &mut self,
        store: String,
        key: String,
        version_id: String,
    ) -> Result<wit::ObjectMeta, HostError> {
        self.charge()?;
        let store = self.store(&store)?;
        self.wait(store.head_version(&key, &version_id))?
            .map(meta)
            .map_err(object_error)
    }

    fn get_version_range(
        &mut self,
        store: String,
        key: String,
        version_id: String,
        offset: u64,
        length: u64,
    ) -> Result<Vec<u8>, HostError> {
        self.charge()?;
        let store = self.store(&store)?;
        let range = range(offset, length)?;
        self.wait(store.get_version_range(&key, &version_id, range))?
            .map(|b| b.to_vec())
            .map_err(object_error)
    }

    fn delete_version(
        &mut self,
        store: String,
        key: String,
        version_id: String,
    ) -> Result<(), HostError> {
        self.charge()?;
        let name = store;
        let store = self.writable_store(&name)?;
        let outcome = self.wait(store.delete_version(&key, &version_id))?;
        self.destroyed(&name, &key, outcome)
    }

    fn list_versions(
        &mut self,
        store: String,
        prefix: String,
        cursor: Option<String>,
        limit: u32,
    ) -> Result<wit::VersionPage, HostError> {
        self.charge()?;
        let store = self.store(&store)?;
        self.wait(store.list_versions(&prefix, cursor.as_deref(), limit))?
            .map(version_page)
            .map_err(object_error)
    }

    fn list_key_versions(
        &mut self,
        store: String,
        key: String,
        cursor: Option<String>,
        limit: u32,
    ) -> Result<wit::VersionPage, HostError> {
        self.charge()?;
        let store = self.store(&store)?;
        let key = ObjectKey::new(key).map_err(object_error)?;
        self.wait(store.list_key_versions(&key, cursor.as_deref(), limit))?
            .map(version_page)
            .map_err(object_error)
    }
}

fn version_page(page: ListPage<ListedVersion>) -> wit::VersionPage {
    wit::VersionPage {
        versions: page
            .items
            .into_iter()
            .map(|v| wit::ListedVersion {
                key: v.key,
                version_id: v.version_id,
                etag: v.etag,
                size: v.size,
                is_current: v.is_current,
                is_delete_marker: v.is_delete_marker,
                last_modified_ms: v.last_modified_ms,
            })
            .collect(),
        next: page.next,
    }
}
