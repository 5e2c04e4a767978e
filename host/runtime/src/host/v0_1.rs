//! The host interfaces at `custodian:host@0.1.0` (and the
//! `retention-oracle` of `custodian:policy@0.1.0`), for plugins built
//! against the 0.1 contract (see `crate::bindings::v0_1` for why there are
//! two generations and when this one may go).
//!
//! Each function delegates to the 0.2 implementation on the same
//! [`HostView`], converting its arguments and result between the two
//! generations' same-shaped types; its error is the 0.2 implementation's,
//! converted once, in [`old::types::Host::convert_error`], by
//! [`super::error_v0_1`]. No capability is implemented twice.

use super::{HostData, HostView, stop, view};
use crate::bindings::HostError;
use crate::bindings::host::custodian::host as new;
use crate::bindings::policy::retention::custodian::policy::retention_types;
use crate::bindings::policy::takedown::custodian::policy::retention_oracle as new_oracle;
use crate::bindings::v0_1::Convert;
use crate::bindings::v0_1::host::custodian::host as old;
use crate::bindings::v0_1::policy::takedown::custodian::policy::retention_oracle as old_oracle;
use crate::host::CallState;

impl old::types::Host for HostView<'_> {
    fn convert_error(&mut self, error: HostError) -> wasmtime::Result<old::types::Error> {
        match error {
            HostError::Guest(error) => Ok(super::error_v0_1(error)),
            HostError::Stop(limit) => Err(stop(self.stopped_by, limit)),
        }
    }
}

/// Implements the 0.1 `$interface::Host` by calling the 0.2 one: every
/// argument and the result go through [`Convert`].
macro_rules! delegate {
    ($interface:ident { $(fn $name:ident($($arg:ident: $ty:ty),*) -> $result:ty;)* }) => {
        impl old::$interface::Host for HostView<'_> {
            $(fn $name(&mut self, $($arg: $ty),*) -> $result {
                new::$interface::Host::$name(self, $($arg.convert()),*).map(Convert::convert)
            })*
        }
    };
}

delegate!(kv {
    fn get(partition: String, key: Vec<u8>) -> Result<Option<Vec<u8>>, HostError>;
    fn get_many(partition: String, keys: Vec<Vec<u8>>) -> Result<Vec<Option<Vec<u8>>>, HostError>;
    fn scan(
        partition: String,
        start: Vec<u8>,
        end: Option<Vec<u8>>,
        cursor: Option<Vec<u8>>,
        limit: u32
    ) -> Result<old::kv::Page, HostError>;
    fn apply(batch: old::kv::Batch) -> Result<old::kv::Outcome, HostError>;
});

delegate!(objects {
    fn head(store: String, key: String) -> Result<old::objects::ObjectMeta, HostError>;
    fn get(
        store: String,
        key: String,
        if_match: Option<String>
    ) -> Result<(old::objects::ObjectMeta, Vec<u8>), HostError>;
    fn get_range(
        store: String,
        key: String,
        offset: u64,
        length: u64,
        if_match: Option<String>
    ) -> Result<Vec<u8>, HostError>;
    fn put(
        store: String,
        key: String,
        body: Vec<u8>,
        condition: old::objects::PutCondition,
        crc64: Option<u64>,
        metadata: Vec<(String, String)>
    ) -> Result<old::objects::ObjectMeta, HostError>;
    fn copy(
        store: String,
        source: String,
        source_if_match: Option<String>,
        destination: String,
        condition: old::objects::PutCondition,
        metadata: Vec<(String, String)>
    ) -> Result<old::objects::ObjectMeta, HostError>;
    fn delete(store: String, key: String) -> Result<(), HostError>;
    fn list(
        store: String,
        prefix: String,
        cursor: Option<String>,
        limit: u32
    ) -> Result<old::objects::ObjectPage, HostError>;
    fn head_version(
        store: String,
        key: String,
        version_id: String
    ) -> Result<old::objects::ObjectMeta, HostError>;
    fn get_version_range(
        store: String,
        key: String,
        version_id: String,
        offset: u64,
        length: u64
    ) -> Result<Vec<u8>, HostError>;
    fn delete_version(store: String, key: String, version_id: String) -> Result<(), HostError>;
    fn list_versions(
        store: String,
        prefix: String,
        cursor: Option<String>,
        limit: u32
    ) -> Result<old::objects::VersionPage, HostError>;
});

delegate!(checksum {
    fn crc64_nvme(data: Vec<u8>) -> wasmtime::Result<u64>;
    fn combine(crc_a: u64, crc_b: u64, len_b: u64) -> wasmtime::Result<u64>;
    fn to_wire(crc: u64) -> wasmtime::Result<String>;
    fn from_wire(wire: String) -> Result<u64, HostError>;
});

delegate!(clock {
    fn now_ms() -> wasmtime::Result<u64>;
});

delegate!(audit {
    fn append(entry: old::audit::Entry) -> Result<(), HostError>;
});

delegate!(log {
    fn log(level: old::log::Level, message: String) -> wasmtime::Result<()>;
});

// `retention-types` is the 0.2 one in both generations (`with`), so only
// the error differs.
impl old_oracle::Host for HostView<'_> {
    fn assess(
        &mut self,
        item: retention_types::Item,
        now_ms: u64,
    ) -> Result<retention_types::Assessment, HostError> {
        new_oracle::Host::assess(self, item, now_ms)
    }

    fn set_hold(
        &mut self,
        item: retention_types::Item,
        enabled: bool,
    ) -> Result<retention_types::Item, HostError> {
        new_oracle::Host::set_hold(self, item, enabled)
    }
}

/// Registers the 0.1 interfaces on the linker, beside the 0.2 ones.
pub(super) fn add_to_linker(
    linker: &mut wasmtime::component::Linker<CallState>,
) -> wasmtime::Result<()> {
    old::types::add_to_linker::<_, HostData>(linker, view)?;
    old::kv::add_to_linker::<_, HostData>(linker, view)?;
    old::objects::add_to_linker::<_, HostData>(linker, view)?;
    old::checksum::add_to_linker::<_, HostData>(linker, view)?;
    old::clock::add_to_linker::<_, HostData>(linker, view)?;
    old::audit::add_to_linker::<_, HostData>(linker, view)?;
    old::log::add_to_linker::<_, HostData>(linker, view)?;
    old_oracle::add_to_linker::<_, HostData>(linker, view)?;
    for interface in custodian_contract::version::POLICY_TYPE_INTERFACES {
        linker.instance(&format!("custodian:policy/{interface}@0.1.0"))?;
    }
    Ok(())
}
