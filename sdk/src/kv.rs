//! Ordered key-value storage in granted partitions, with guarded batches.
//!
//! Build batches with [`crate::Batch`]; lay out keys with [`crate::key`].

pub use crate::bindings::host::custodian::host::kv::{
    Batch as WitBatch, Entry, KeyRef, Outcome, Page, Precondition, Write,
};

#[cfg(target_arch = "wasm32")]
pub use crate::bindings::host::custodian::host::kv::{apply, get, get_many, scan};
#[cfg(not(target_arch = "wasm32"))]
pub use crate::native::kv::{apply, get, get_many, scan};

pub use custodian_contract::limits::{
    MAX_BATCH_BYTES, MAX_BATCH_OPS, MAX_KEY_BYTES, MAX_PAGE_ENTRIES, MAX_VALUE_BYTES,
};
