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

/// Longest key the host accepts, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;
/// Largest value the host accepts, in bytes.
pub const MAX_VALUE_BYTES: usize = 256 * 1024;
/// Most preconditions and writes one batch may hold together.
pub const MAX_BATCH_OPS: usize = 96;
/// Most key and value bytes one batch may hold.
pub const MAX_BATCH_BYTES: usize = 1024 * 1024;
/// Most entries one page (or one `get-many`) may hold.
pub const MAX_PAGE_ENTRIES: u32 = 1000;
