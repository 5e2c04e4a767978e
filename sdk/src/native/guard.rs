//! Checks a test installs below the policy, as the host's own enforcement
//! (its lock rules, say) sits below a plugin: every KV batch and every
//! object write or delete is shown to them before it is made, and one
//! they refuse is not made at all. Install one with
//! [`crate::testing::set_guard`].

use crate::Error;
use crate::bindings::host::custodian::host::kv::Batch;

/// What an object call is about to do to a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectWrite {
    /// A put or copy publishing it (whether or not an object is there).
    Put,
    /// A delete of it.
    Delete,
}

/// The checks the native host runs before it applies a batch or writes an
/// object; an error refuses the call with that error, nothing changed.
//
// Defined here rather than in `testing` (which re-exports it) because the
// host state holds one, and `native` must not import from the modules
// above it.
#[derive(Clone, Copy)]
pub struct Guard {
    /// Sees every batch `kv.apply` is given, once its bounds are checked.
    pub batch: fn(&Batch) -> Result<(), Error>,
    /// Sees every object write: store, key, and what it does.
    pub object: fn(&str, &str, ObjectWrite) -> Result<(), Error>,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Guard")
    }
}

/// Runs the installed guard's batch check (called outside the host's
/// borrow, so the check may read the host).
pub(crate) fn batch(batch: &Batch) -> Result<(), Error> {
    match super::with(|host| host.guard) {
        Some(guard) => uncounted(|| (guard.batch)(batch)),
        None => Ok(()),
    }
}

/// Runs the installed guard's object check (outside the host's borrow).
pub(crate) fn object(store: &str, key: &str, write: ObjectWrite) -> Result<(), Error> {
    match super::with(|host| host.guard) {
        Some(guard) => uncounted(|| (guard.object)(store, key, write)),
        None => Ok(()),
    }
}

/// Runs `check` without counting the KV calls it makes in
/// [`super::KvCalls`]: the host's own enforcement is not the plugin's.
fn uncounted<T>(check: impl FnOnce() -> T) -> T {
    let calls = super::with(|host| host.kv_calls);
    let out = check();
    super::with(|host| host.kv_calls = calls);
    out
}
