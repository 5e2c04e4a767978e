//! The native host's `retention-oracle`: answers with the oracle a test
//! installed through [`crate::testing::set_retention`].

use crate::Error;
use crate::retention::{Assessment, Item};

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
