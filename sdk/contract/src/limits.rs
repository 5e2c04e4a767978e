//! Bounds the host enforces on what a plugin asks of it. Each bounds what
//! one guest call can make the host hold or copy; a plugin that plans
//! within them is never refused for size.

use alloc::format;
use alloc::string::String;

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
/// Most reads in one snapshot `read` (gets and scans together): one etcd
/// transaction holds them all (etcd's default limit is 128 operations),
/// so the whole call is one round trip and one revision.
pub const MAX_READS: usize = 64;

/// Checks a snapshot `read` of `reads` reads that may answer `entries`
/// entries (a get one, a scan its limit): at most [`MAX_READS`] reads and
/// [`MAX_PAGE_ENTRIES`] entries, so one read holds no more than one page
/// does. The reason it is refused otherwise. Each read is also held to
/// its own call's bounds, which its caller checks.
pub fn check_reads(reads: usize, entries: u64) -> Result<(), String> {
    if reads > MAX_READS {
        return Err(format!("{reads} reads exceed the limit of {MAX_READS}"));
    }
    if entries > u64::from(MAX_PAGE_ENTRIES) {
        return Err(format!(
            "the reads may answer {entries} entries, more than the limit of {MAX_PAGE_ENTRIES}"
        ));
    }
    Ok(())
}
/// Longest KV partition name.
pub const MAX_PARTITION_BYTES: usize = 64;
/// Partitions whose names start with this belong to the host (audit,
/// timers); no plugin can be granted one.
pub const HOST_PARTITION_PREFIX: &str = "custodian.";
/// Largest object body moved through one plugin call, in bytes: a body
/// crosses the component boundary whole, so this bounds the memory one
/// call pins on both sides.
pub const MAX_BODY_BYTES: u64 = 16 * 1024 * 1024;
/// Longest object key, in bytes (S3's limit); see
/// [`object_key`](crate::object_key) for the rest of the key rule.
pub const MAX_OBJECT_KEY_BYTES: usize = 1024;
/// Most bytes of user metadata on one object, keys and values together:
/// S3's limit, so a publish that passes on one backend passes on S3.
pub const MAX_METADATA_BYTES: usize = 2048;
/// Most user metadata entries on one object. On S3 every entry comes back
/// as a response header, and the AWS SDK's HTTP client refuses a response
/// with more than 100 headers, of which S3 uses up to ~36 itself: an
/// object with more entries could be written but never read. One more is
/// kept for the S3 backend's own CRC record.
pub const MAX_METADATA_ENTRIES: usize = 63;
