//! Bounds the host enforces on what a plugin asks of it. Each bounds what
//! one guest call can make the host hold or copy; a plugin that plans
//! within them is never refused for size.

/// Longest KV key, in bytes. Bounds what a guest can make the host copy
/// and index per row; generous for any structured key layout.
pub const MAX_KEY_BYTES: usize = 1024;
/// Largest KV value, in bytes: a row is state, not content (content goes
/// to an object store), and etcd's request limit must hold a batch of
/// them.
pub const MAX_VALUE_BYTES: usize = 256 * 1024;
/// Most preconditions and writes in one caller's batch (a plugin's, or a
/// step's commit before the host adds its rows).
pub const MAX_BATCH_OPS: usize = 96;
/// Most key and value bytes in one caller's batch.
pub const MAX_BATCH_BYTES: usize = 1024 * 1024;
/// Most entries in one page or `get-many`: bounds one call's memory and
/// the time a scan holds the backend.
pub const MAX_PAGE_ENTRIES: u32 = 1000;
/// Longest KV partition name.
pub const MAX_PARTITION_BYTES: usize = 64;
/// Partitions whose names start with this belong to the host (audit,
/// timers); no plugin can be granted one.
pub const HOST_PARTITION_PREFIX: &str = "custodian.";
/// Largest object body moved through one plugin call, in bytes: a body
/// crosses the component boundary whole, so this bounds the memory one
/// call pins on both sides.
pub const MAX_BODY_BYTES: u64 = 16 * 1024 * 1024;
