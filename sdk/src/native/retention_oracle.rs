//! The native host's `retention-oracle`: answers with the oracle a test
//! installed through [`crate::testing::set_retention`].

use crate::Error;
use crate::bindings::retention::exports::custodian::policy::retention_rules::{Assessment, Item};

/// The retention policy the native host routes `retention-oracle` calls
/// to: typically a retention plugin's own functions with fixed settings,
/// e.g. `|item, now| Policy::assess(settings, item, now)`. Install one with
/// [`crate::testing::set_retention`].
//
// Defined here rather than in `testing` (which re-exports it as
// `testing::RetentionOracle`) because the host state holds one, and
// `native` must not import from the modules above it.
#[derive(Clone, Copy)]
pub struct RetentionOracle {
    /// Answers `retention-oracle.assess`.
    pub assess: fn(Item, u64) -> Result<Assessment, Error>,
    /// Answers `retention-oracle.set-hold`.
    pub set_hold: fn(Item, bool) -> Result<Item, Error>,
}

impl std::fmt::Debug for RetentionOracle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RetentionOracle")
    }
}

/// The native host's `retention-oracle.assess`.
pub fn assess(item: Item, now_ms: u64) -> Result<Assessment, Error> {
    let oracle = super::with(|host| host.retention);
    match oracle {
        Some(oracle) => (oracle.assess)(item, now_ms),
        None => Err(Error::Unavailable(
            "no retention plugin is configured (testing::set_retention)".into(),
        )),
    }
}

/// The native host's `retention-oracle.set-hold`.
pub fn set_hold(item: Item, enabled: bool) -> Result<Item, Error> {
    let oracle = super::with(|host| host.retention);
    match oracle {
        Some(oracle) => (oracle.set_hold)(item, enabled),
        None => Err(Error::Unavailable(
            "no retention plugin is configured (testing::set_retention)".into(),
        )),
    }
}
