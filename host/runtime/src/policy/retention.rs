//! The retention world's driver: asks a retention plugin what may be
//! deleted or purged, and when to look again.

use std::sync::Arc;

use super::PolicyError;
use super::warm::WarmInstances;
use crate::bindings::policy::retention::exports::custodian::policy::retention_rules as wit;
use crate::bindings::policy::retention::{Retention, RetentionPre};
use crate::bindings::v0_1::policy::retention::RetentionPre as RetentionPreV0_1;
use crate::host::CallState;
use crate::{CallContext, CallError, LoadError, Plugin, World};
use crate::{Limits, Services};
pub use custodian_core::decisions::retention::{
    Assessment, Item, RetentionOracle, Settings, Stage, Verdict,
};

/// A loaded retention plugin, ready to be asked.
///
/// Questions run on warm instances (see `super::warm` for what that keeps
/// and what it does not): one is asked before every destructive operation
/// on a locked store, and a fresh instance costs more than the answer (a
/// thousand times more for a component carrying a language runtime). A
/// plugin built against contract 0.1 gets a fresh instance per question,
/// as it was promised.
pub struct RetentionPolicy {
    plugin: Arc<Plugin>,
    pre: super::Linked<RetentionPre<CallState>, RetentionPreV0_1<CallState>>,
    warm: WarmInstances<Retention>,
}

impl RetentionPolicy {
    /// Wraps `plugin`, which must implement the retention world.
    ///
    /// # Errors
    /// [`LoadError::WrongWorld`], or [`LoadError::Link`] if its exports do
    /// not have the retention world's types.
    pub fn new(plugin: Arc<Plugin>) -> Result<Self, LoadError> {
        let pre = super::link_either(
            &plugin,
            World::Retention,
            RetentionPre::new,
            RetentionPreV0_1::new,
        )?;
        Ok(Self {
            plugin,
            pre,
            warm: WarmInstances::new(),
        })
    }

    /// The plugin asked.
    pub fn plugin(&self) -> &Plugin {
        &self.plugin
    }

    /// Assesses `item` at `now_ms`.
    ///
    /// # Errors
    /// The outer error is the call failing (a trap, a limit); the inner one
    /// is the policy's own answer (e.g. invalid settings).
    pub fn assess(
        &self,
        call: Arc<CallContext>,
        settings: Settings,
        item: Item,
        now_ms: u64,
    ) -> Result<Result<Assessment, PolicyError>, CallError> {
        let (settings, item) = (wit::Settings::from(settings), wit::Item::from(item));
        let plugin = &self.plugin;
        // `retention-types` is the 0.2 one in both generations: only the
        // error is converted.
        let answer = call_export!(warm: self.warm; &self.pre, plugin, call, |i, s| i
            .custodian_policy_retention_rules()
            .call_assess(s, settings, item, now_ms));
        Ok(answer.map(Assessment::from).map_err(PolicyError::from))
    }

    /// Sets or clears the legal hold on `item`.
    ///
    /// # Errors
    /// As for [`RetentionPolicy::assess`]; placing a hold once purging has
    /// begun is the policy's [`PolicyError::PreconditionFailed`].
    pub fn set_hold(
        &self,
        call: Arc<CallContext>,
        item: Item,
        enabled: bool,
    ) -> Result<Result<Item, PolicyError>, CallError> {
        let item = wit::Item::from(item);
        let plugin = &self.plugin;
        let answer = call_export!(warm: self.warm; &self.pre, plugin, call, |i, s| i
            .custodian_policy_retention_rules()
            .call_set_hold(s, item, enabled));
        Ok(answer.map(Item::from).map_err(PolicyError::from))
    }
}

/// Routes retention questions to a loaded retention plugin with one class
/// of item's settings. Each question is a call of its own: no grants, the
/// route's limits, on a warm or fresh instance of the plugin.
pub struct RetentionRoute {
    policy: Arc<RetentionPolicy>,
    settings: Settings,
    call: Arc<CallContext>,
}

impl RetentionRoute {
    /// Routes to `policy` with `settings`; its calls run with `limits` and
    /// reach nothing (`services` only supplies the clock and I/O runtime).
    pub fn new(
        policy: Arc<RetentionPolicy>,
        settings: Settings,
        services: Arc<Services>,
        limits: Limits,
    ) -> Self {
        let call = super::isolated_call(policy.plugin(), services, limits);
        Self {
            policy,
            settings,
            call,
        }
    }
}

impl RetentionRoute {
    /// A call that did not answer, blamed on this plugin (see
    /// [`crate::blame`]).
    fn unanswered(&self, error: CallError) -> PolicyError {
        crate::blame::failed(&self.call.actor);
        PolicyError::Unavailable(format!(
            "the retention plugin {} did not answer: {error}",
            self.call.actor
        ))
    }
}

impl RetentionOracle for RetentionRoute {
    fn assess(&self, item: Item, now_ms: u64) -> Result<Assessment, PolicyError> {
        self.policy
            .assess(self.call.clone(), self.settings, item, now_ms)
            .map_err(|e| self.unanswered(e))?
    }

    fn set_hold(&self, item: Item, enabled: bool) -> Result<Item, PolicyError> {
        self.policy
            .set_hold(self.call.clone(), item, enabled)
            .map_err(|e| self.unanswered(e))?
    }
    fn assess_by(
        &self,
        item: Item,
        now_ms: u64,
    ) -> (Result<Assessment, PolicyError>, Option<String>) {
        let hash = self.policy.plugin().info().hash.clone();
        (self.assess(item, now_ms), Some(hash))
    }
}

impl From<Settings> for wit::Settings {
    fn from(s: Settings) -> Self {
        Self {
            retention_ms: s.retention_ms,
            noncurrent_retention_ms: s.noncurrent_retention_ms,
        }
    }
}

impl From<Stage> for wit::Stage {
    fn from(stage: Stage) -> Self {
        match stage {
            Stage::Active => Self::Active,
            Stage::Retaining => Self::Retaining,
            Stage::Purging => Self::Purging,
            Stage::Purged => Self::Purged,
        }
    }
}

impl From<wit::Stage> for Stage {
    fn from(stage: wit::Stage) -> Self {
        match stage {
            wit::Stage::Active => Self::Active,
            wit::Stage::Retaining => Self::Retaining,
            wit::Stage::Purging => Self::Purging,
            wit::Stage::Purged => Self::Purged,
        }
    }
}

impl From<Item> for wit::Item {
    fn from(item: Item) -> Self {
        Self {
            created_ms: item.created_ms,
            noncurrent_since_ms: item.noncurrent_since_ms,
            hold: item.hold,
            stage: item.stage.into(),
        }
    }
}

impl From<wit::Item> for Item {
    fn from(item: wit::Item) -> Self {
        Self {
            created_ms: item.created_ms,
            noncurrent_since_ms: item.noncurrent_since_ms,
            hold: item.hold,
            stage: item.stage.into(),
        }
    }
}

impl From<wit::Verdict> for Verdict {
    fn from(verdict: wit::Verdict) -> Self {
        match verdict {
            wit::Verdict::Allow => Self::Allow,
            wit::Verdict::Deny(reason) => Self::Deny(reason),
        }
    }
}

impl From<Verdict> for wit::Verdict {
    fn from(verdict: Verdict) -> Self {
        match verdict {
            Verdict::Allow => Self::Allow,
            Verdict::Deny(reason) => Self::Deny(reason),
        }
    }
}

impl From<Assessment> for wit::Assessment {
    fn from(a: Assessment) -> Self {
        Self {
            retain_until_ms: a.retain_until_ms,
            may_delete: a.may_delete.into(),
            may_purge: a.may_purge.into(),
            next_check_ms: a.next_check_ms,
        }
    }
}

impl From<wit::Assessment> for Assessment {
    fn from(a: wit::Assessment) -> Self {
        Self {
            retain_until_ms: a.retain_until_ms,
            may_delete: a.may_delete.into(),
            may_purge: a.may_purge.into(),
            next_check_ms: a.next_check_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{Item, RetentionPolicy, Settings, Stage};
    use crate::{Limits, Services, World};
    use custodian_base::clock::SystemClock;

    #[test]
    fn questions_are_answered_on_a_warm_instance() {
        let plugin = crate::test_guests::runtime()
            .load_bytes(crate::bundled::plugin(World::Retention).unwrap(), "bundled")
            .unwrap();
        let policy = RetentionPolicy::new(Arc::new(plugin)).unwrap();
        let io = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let call = super::super::isolated_call(
            policy.plugin(),
            Services::isolated(Arc::new(SystemClock), io.handle().clone()),
            Limits::default(),
        );
        let settings = Settings {
            retention_ms: 1_000,
            noncurrent_retention_ms: 0,
        };
        let item = Item {
            created_ms: 0,
            noncurrent_since_ms: None,
            hold: false,
            stage: Stage::Retaining,
        };
        for now_ms in [10, 5_000] {
            let assessed = policy
                .assess(call.clone(), settings, item, now_ms)
                .unwrap()
                .unwrap();
            assert_eq!(assessed.retain_until_ms, 1_000);
            assert_eq!(policy.warm.idle_count(), 1);
        }
        let held = policy.set_hold(call, item, true).unwrap().unwrap();
        assert!(held.hold);
        assert_eq!(policy.warm.idle_count(), 1);
    }
}
