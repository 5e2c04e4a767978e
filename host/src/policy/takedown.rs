//! The takedown world's driver: runs a takedown plugin's `step` for the
//! timer worker, and its `status` and `plan-hold` for operators.
//!
//! The plugin decides; the host commits. A step's commit comes back as WIT
//! values and is converted here, its partitions checked against the
//! plugin's grants, before the timer worker adds the timer, fence and audit
//! rows and applies it in one transaction.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;

use super::PolicyError;
use crate::budget::{BudgetedKv, BudgetedStore, SliceBudget};
use crate::object::ObjectStore;
use crate::runtime::host::CallState;
use crate::runtime::host::kv::convert_batch;
use crate::runtime::policy::takedown::custodian::policy::steps as steps_wit;
use crate::runtime::policy::takedown::exports::custodian::policy::takedown_steps as wit;
use crate::runtime::policy::takedown::{Takedown, TakedownPre};
use crate::runtime::{CallContext, CallError, Grants, Limits, LoadError, Plugin, Services, World};
use crate::timers::{AuditEntry, DueTimer, Fired, StepCommit, StepFailure, TimerHandler};

/// The timer kind takedown steps run under.
pub const KIND: &str = "takedown";

/// A request's state as an operator sees it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RequestStatus {
    /// The phase: `seed`, `acquire`, `closure`, `discover`, `retain`,
    /// `purging` or `purged`.
    pub phase: String,
    /// How far verification got.
    pub verification: String,
    /// Objects verified so far.
    pub verified_objects: u64,
    /// Kept at least until then.
    pub retain_until_ms: u64,
    /// A legal hold is set.
    pub hold: bool,
    /// The preserved copies have been purged.
    pub purged: bool,
    /// The last error the policy recorded.
    pub last_error: Option<String>,
}

/// A loaded takedown plugin.
pub struct TakedownPolicy {
    plugin: Arc<Plugin>,
    pre: TakedownPre<CallState>,
}

impl TakedownPolicy {
    /// Wraps `plugin`, which must implement the takedown world.
    ///
    /// # Errors
    /// [`LoadError::WrongWorld`], or [`LoadError::Link`] if its exports do
    /// not have the takedown world's types.
    pub fn new(plugin: Arc<Plugin>) -> Result<Self, LoadError> {
        let pre = super::link(&plugin, World::Takedown, TakedownPre::new)?;
        Ok(Self { plugin, pre })
    }

    /// The plugin.
    pub fn plugin(&self) -> &Plugin {
        &self.plugin
    }

    fn instance(
        &self,
        call: Arc<CallContext>,
    ) -> Result<(wasmtime::Store<CallState>, Takedown), CallError> {
        super::instantiate(&self.plugin, call, |store| self.pre.instantiate(store))
    }

    /// Runs one step of `timer` at `now_ms`. The commit's partitions are
    /// checked against the call's grants and its size against the caller
    /// bounds; a commit that breaks either is the policy's
    /// [`PolicyError::InvalidArgument`] or [`PolicyError::AccessDenied`].
    ///
    /// # Errors
    /// The outer error is the call failing (a trap, a limit); the inner one
    /// is the policy's own answer.
    pub fn step(
        &self,
        call: Arc<CallContext>,
        timer: &DueTimer,
        now_ms: u64,
    ) -> Result<Result<Fired, PolicyError>, CallError> {
        let grants = call.grants.clone();
        let (mut store, instance) = self.instance(call)?;
        let answer = instance
            .custodian_policy_takedown_steps()
            .call_step(
                &mut store,
                &steps_wit::Timer {
                    kind: timer.kind.clone(),
                    reference: timer.reference.clone(),
                    due_at_ms: timer.due_ms,
                    now_ms,
                },
            )
            .map_err(|e| crate::runtime::classify(e, store.data()))?;
        Ok(answer.map_err(PolicyError::from).and_then(|result| {
            Ok(match result {
                steps_wit::StepResult::Reschedule(r) => Fired::Reschedule {
                    due_ms: r.due_at_ms,
                    commit: commit(&grants, r.commit)?,
                },
                steps_wit::StepResult::Done(c) => Fired::Done(commit(&grants, c)?),
            })
        }))
    }

    /// The request's current state.
    ///
    /// # Errors
    /// As for [`TakedownPolicy::step`]; an unknown request is the policy's
    /// [`PolicyError::NotFound`].
    pub fn status(
        &self,
        call: Arc<CallContext>,
        request: &[u8],
    ) -> Result<Result<RequestStatus, PolicyError>, CallError> {
        let (mut store, instance) = self.instance(call)?;
        let answer = instance
            .custodian_policy_takedown_steps()
            .call_status(&mut store, request)
            .map_err(|e| crate::runtime::classify(e, store.data()))?;
        Ok(answer.map(RequestStatus::from).map_err(PolicyError::from))
    }

    /// The guarded commit that sets or clears the legal hold of `request`.
    ///
    /// # Errors
    /// As for [`TakedownPolicy::step`]; placing a hold once purging has
    /// begun is the policy's [`PolicyError::PreconditionFailed`].
    pub fn plan_hold(
        &self,
        call: Arc<CallContext>,
        request: &[u8],
        enabled: bool,
        now_ms: u64,
    ) -> Result<Result<StepCommit, PolicyError>, CallError> {
        let grants = call.grants.clone();
        let (mut store, instance) = self.instance(call)?;
        let answer = instance
            .custodian_policy_takedown_steps()
            .call_plan_hold(&mut store, request, enabled, now_ms)
            .map_err(|e| crate::runtime::classify(e, store.data()))?;
        Ok(answer
            .map_err(PolicyError::from)
            .and_then(|c| commit(&grants, c)))
    }
}

fn commit(grants: &Grants, commit: steps_wit::Commit) -> Result<StepCommit, PolicyError> {
    let batch = convert_batch(grants, commit.batch).map_err(|e| {
        // The plugin handed back a batch it could not have applied itself.
        match PolicyError::from(e) {
            PolicyError::AccessDenied(m) => {
                PolicyError::AccessDenied(format!("the step's commit: {m}"))
            }
            other => PolicyError::InvalidArgument(format!("the step's commit: {other}")),
        }
    })?;
    Ok(StepCommit {
        batch,
        audit: commit
            .audit
            .into_iter()
            .map(|e| AuditEntry {
                event: e.event,
                targets: e.targets,
                detail: e.detail,
            })
            .collect(),
    })
}

impl From<wit::RequestStatus> for RequestStatus {
    fn from(s: wit::RequestStatus) -> Self {
        Self {
            phase: s.phase,
            verification: s.verification,
            verified_objects: s.verified_objects,
            retain_until_ms: s.retain_until_ms,
            hold: s.hold,
            purged: s.purged,
            last_error: s.last_error,
        }
    }
}

/// Runs a takedown plugin's steps for the timer worker.
///
/// Each step gets a fresh instance, the plugin's grants and limits, and
/// the KV and object stores behind budgeted wrappers charging the step's
/// [`SliceBudget`]; it runs on a blocking thread because a plugin call is
/// synchronous.
pub struct TakedownHandler {
    policy: Arc<TakedownPolicy>,
    services: Arc<Services>,
    grants: Grants,
    limits: Limits,
}

impl TakedownHandler {
    /// A handler running `policy` with `services`, reaching only `grants`.
    pub fn new(
        policy: Arc<TakedownPolicy>,
        services: Arc<Services>,
        grants: Grants,
        limits: Limits,
    ) -> Self {
        Self {
            policy,
            services,
            grants,
            limits,
        }
    }

    fn budgeted(&self, budget: &SliceBudget) -> Arc<Services> {
        let stores: BTreeMap<String, Arc<dyn ObjectStore>> = self
            .services
            .stores
            .iter()
            .filter(|(name, _)| self.grants.stores.contains(*name))
            .map(|(name, store)| {
                let wrapped: Arc<dyn ObjectStore> =
                    Arc::new(BudgetedStore::new(store.clone(), budget.clone()));
                (name.clone(), wrapped)
            })
            .collect();
        Arc::new(Services {
            kv: Arc::new(BudgetedKv::new(self.services.kv.clone(), budget.clone())),
            stores,
            clock: self.services.clock.clone(),
            io: self.services.io.clone(),
        })
    }
}

#[async_trait]
impl TimerHandler for TakedownHandler {
    fn kind(&self) -> &str {
        KIND
    }

    fn actor(&self) -> String {
        self.policy.plugin().info().actor()
    }

    fn max_per_tick(&self) -> Option<u32> {
        // The seed fires one takedown step per tick: each moves bytes, and
        // one request must not starve the other kinds.
        Some(1)
    }

    async fn fire(
        &self,
        timer: &DueTimer,
        now_ms: u64,
        budget: &SliceBudget,
    ) -> Result<Fired, StepFailure> {
        let call = Arc::new(CallContext {
            services: self.budgeted(budget),
            grants: self.grants.clone(),
            limits: self.limits.clone(),
            actor: self.actor(),
        });
        let policy = self.policy.clone();
        let timer = timer.clone();
        let answer = tokio::task::spawn_blocking(move || policy.step(call, &timer, now_ms))
            .await
            .map_err(|e| StepFailure::new(format!("the step's thread failed: {e}")))?;
        match answer {
            Ok(Ok(fired)) => Ok(fired),
            Ok(Err(policy)) => Err(StepFailure::new(format!("the policy answered {policy}"))),
            Err(call) => Err(StepFailure::new(call.to_string())),
        }
    }
}
