//! Named object stores granted to the plugin: conditional publish with a
//! CRC-64/NVME checked at publish, and exact versions.

pub use crate::bindings::host::custodian::host::objects::{
    ListedObject, ListedVersion, ObjectMeta, ObjectPage, PutCondition, VersionPage,
};

#[cfg(target_arch = "wasm32")]
pub use crate::bindings::host::custodian::host::objects::{
    copy, delete, delete_version, get, get_range, get_version_range, head, head_version, list,
    list_versions, put,
};
#[cfg(not(target_arch = "wasm32"))]
pub use crate::native::objects::{
    copy, delete, delete_version, get, get_range, get_version_range, head, head_version, list,
    list_versions, put,
};

/// Largest body moved through one plugin call, in bytes.
pub const MAX_BODY_BYTES: u64 = 16 * 1024 * 1024;
