//! The retention plugin, bound late: the stores are built before the
//! plugin set (which is given them), yet must ask the set's retention
//! plugin. Until it is bound every question fails, so a destructive
//! request that needs retention's answer is refused (fail closed).

use std::sync::{Arc, PoisonError, RwLock};

use crate::decisions::PolicyError;
use crate::decisions::retention::{Assessment, Item, RetentionOracle};

/// A [`RetentionOracle`] that answers through whatever was last
/// [`bind`](LateRetention::bind)ed, and refuses before.
#[derive(Default)]
pub struct LateRetention {
    bound: RwLock<Option<Arc<dyn RetentionOracle>>>,
}

impl LateRetention {
    /// Nothing bound yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Answers through `oracle` from now on. Bind one that follows the
    /// current plugin (the plugin set's route does), not a plugin: a
    /// swapped-in retention plugin must be the one asked.
    pub fn bind(&self, oracle: Arc<dyn RetentionOracle>) {
        *self.bound.write().unwrap_or_else(PoisonError::into_inner) = Some(oracle);
    }

    fn bound(&self) -> Result<Arc<dyn RetentionOracle>, PolicyError> {
        self.bound
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or_else(|| {
                PolicyError::Unavailable(
                    "no retention plugin is loaded in this process to ask".into(),
                )
            })
    }
}

impl RetentionOracle for LateRetention {
    fn assess(&self, item: Item, now_ms: u64) -> Result<Assessment, PolicyError> {
        self.bound()?.assess(item, now_ms)
    }

    fn set_hold(&self, item: Item, enabled: bool) -> Result<Item, PolicyError> {
        self.bound()?.set_hold(item, enabled)
    }

    fn assess_by(
        &self,
        item: Item,
        now_ms: u64,
    ) -> (Result<Assessment, PolicyError>, Option<String>) {
        match self.bound() {
            Ok(bound) => bound.assess_by(item, now_ms),
            Err(unbound) => (Err(unbound), None),
        }
    }
}
