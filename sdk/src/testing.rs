//! Controls of the native in-memory host, for unit tests of policies.
//!
//! Each thread has its own host; call [`reset`] at the start of a test that
//! depends on an empty one.

use crate::audit::Entry;
use crate::log::Level;
// Defined in the native host, whose state holds the installed one.
pub use crate::native::retention_oracle::RetentionOracle;
// Likewise held by the host state.
pub use crate::native::KvCalls;
pub use crate::native::guard::{Guard, ObjectWrite};

/// Empties the host and sets its clock to `now_ms`.
pub fn reset(now_ms: u64) {
    crate::native::with(|host| {
        *host = Default::default();
        host.now_ms = now_ms;
    });
}

/// Routes `retention-oracle` calls to `oracle` (until the next [`reset`]).
pub fn set_retention(oracle: RetentionOracle) {
    crate::native::with(|host| host.retention = Some(oracle));
}

/// Shows every batch and object write to `guard` before it is made
/// (until the next [`reset`]): a test's stand-in for the host's own
/// enforcement below the plugin, such as its lock rules.
pub fn set_guard(guard: Guard) {
    crate::native::with(|host| host.guard = Some(guard));
}

/// Sets the host clock.
pub fn set_now(now_ms: u64) {
    crate::native::with(|host| host.now_ms = now_ms);
}

/// The KV calls made since the last [`reset`]: a policy's round trips on
/// a networked KV, which a test can hold a step to.
pub fn kv_calls() -> KvCalls {
    crate::native::with(|host| host.kv_calls)
}

/// Every audit entry appended so far.
pub fn audit_entries() -> Vec<Entry> {
    crate::native::with(|host| host.audit.clone())
}

/// Every log line so far.
pub fn logs() -> Vec<(Level, String)> {
    crate::native::with(|host| host.logs.clone())
}

/// Every key and value of `partition`, ascending.
pub fn partition(partition: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    crate::native::with(|host| {
        host.kv
            .get(partition)
            .map(|rows| rows.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default()
    })
}
