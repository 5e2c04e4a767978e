//! Named object stores granted to the plugin: conditional publish with a
//! CRC-64/NVME checked at publish, and exact versions.

pub use crate::bindings::host::custodian::host::objects::{
    ListedObject, ListedVersion, ObjectMeta, ObjectPage, PutCondition, VersionPage,
};

#[cfg(target_arch = "wasm32")]
pub use crate::bindings::host::custodian::host::objects::{
    copy, delete, delete_version, get, get_range, get_version_range, head, head_version, list,
    list_key_versions, list_versions, put,
};
#[cfg(not(target_arch = "wasm32"))]
pub use crate::native::objects::{
    copy, delete, delete_version, get, get_range, get_version_range, head, head_version, list,
    list_key_versions, list_versions, put,
};

pub use custodian_contract::limits::MAX_BODY_BYTES;
