//! Ordered key-value storage in granted partitions, with guarded batches.
//!
//! Build batches with [`crate::Batch`]; lay out keys with [`crate::key`].
//! Several gets and scans a call needs before it can decide go in one
//! [`read`] (a list of [`ReadOp`]s, answered from one snapshot): on a
//! networked KV each host call is a round trip, so a policy step's reads
//! are most of its cost.

pub use crate::bindings::host::custodian::host::kv::{
    Batch as WitBatch, Entry, KeyRef, Outcome, Page, Precondition, ReadAnswer, ReadOp, ScanRange,
    Write,
};

#[cfg(target_arch = "wasm32")]
pub use crate::bindings::host::custodian::host::kv::{apply, get, get_many, read, scan};
#[cfg(not(target_arch = "wasm32"))]
pub use crate::native::kv::{apply, get, get_many, read, scan};

pub use custodian_contract::limits::{
    MAX_BATCH_BYTES, MAX_BATCH_OPS, MAX_KEY_BYTES, MAX_PAGE_ENTRIES, MAX_READS, MAX_VALUE_BYTES,
};
