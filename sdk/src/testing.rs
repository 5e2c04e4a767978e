//! Controls of the native in-memory host, for unit tests of policies.
//!
//! Each thread has its own host; call [`reset`] at the start of a test that
//! depends on an empty one.

use crate::audit::Entry;
use crate::log::Level;
// Defined in the native host, whose state holds the installed one.
pub use crate::native::retention_oracle::RetentionOracle;

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

/// Sets the host clock.
pub fn set_now(now_ms: u64) {
    crate::native::with(|host| host.now_ms = now_ms);
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
