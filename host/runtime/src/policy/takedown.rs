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
use super::warm::WarmInstances;
use crate::bindings::policy::takedown::custodian::policy::steps as steps_wit;
use crate::bindings::policy::takedown::exports::custodian::policy::takedown_steps as wit;
use crate::bindings::policy::takedown::{Takedown, TakedownPre};
use crate::bindings::v0_1::Convert;
use crate::bindings::v0_1::policy::takedown::TakedownPre as TakedownPreV0_1;
use crate::bindings::v0_1::policy::takedown::exports::custodian::policy::takedown_steps as wit_v0_1;
use crate::host::CallState;
use crate::host::kv::convert_batch;
use crate::{
    CallContext, CallError, Grants, LimitExceeded, Limits, LoadError, Plugin, Services, World,
};
use custodian_core::audit::{self, Record};
use custodian_core::budget::{SliceBudget, budgeted_kv, budgeted_store};
use custodian_core::decisions::log::{self, Sampling};
use custodian_core::timers::{
    AuditEntry, DueTimer, FailureCause, Fired, StepCommit, StepFailure, TimerHandler,
};
use custodian_kv::Precondition;
use custodian_object::ObjectStore;

/// The timer kind takedown steps run under.
pub const KIND: &str = "takedown";
/// The KV partition a takedown plugin owns (read and write).
pub const PARTITION: &str = "takedown";
/// The host's content index, which a takedown plugin reads.
pub const CONTENT_PARTITION: &str = custodian_core::content::PARTITION;
/// The store users' content is served from, which a takedown plugin
/// reads, removes copies from once preserved, and restores them to.
pub const SERVING_STORE: &str = custodian_core::content::SERVING_STORE;
/// The separately provisioned store only the takedown policy writes to.
pub const PRESERVED_STORE: &str = "preserved";
/// Which objects a takedown withholds: the takedown plugin decides and
/// writes (read and write), the host checks every read and push.
pub const DENIAL_PARTITION: &str = custodian_core::content::denial::PARTITION;
/// The object locks over preserved pieces: the takedown plugin writes
/// them (read and write) in its commits, the host refuses any write that
/// weakens one and any delete or overwrite of a locked object.
pub const LOCK_PARTITION: &str = custodian_contract::lock::PARTITION;
/// The outbox of cache invalidations: the takedown plugin plans one entry
/// per holder repository it discovers (read and write), the host delivers
/// them.
pub const INVALIDATION_PARTITION: &str = custodian_contract::invalidation::PARTITION;

/// A takedown request as an operator files it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// 32 bytes; the timer's reference.
    pub id: [u8; 32],
    /// `namespace/name`.
    pub repository: String,
    /// When it was filed, ms since the epoch.
    pub created_ms: u64,
    /// Objects to take down; empty when `pack` is given.
    pub objects: Vec<[u8; 32]>,
    /// A pack whose whole inventory is taken down.
    pub pack: Option<[u8; 32]>,
}

impl Request {
    /// A request whose id is derived from its contents: filing the same
    /// request twice in the same millisecond names the same request
    /// (and the second is refused as existing), never two.
    pub fn new(
        repository: String,
        created_ms: u64,
        objects: Vec<[u8; 32]>,
        pack: Option<[u8; 32]>,
    ) -> Self {
        let context = "custodian takedown request v1";
        let when = created_ms.to_le_bytes();
        Self::hashed(context, &when, repository, created_ms, objects, pack)
    }

    /// A request filed under a client's idempotency key: its id derives
    /// from the key and its contents, not the time, so a client that
    /// retries after an answer it never got (a timeout, a dead host) names
    /// the same request and cannot file it twice. `created_ms` is kept as
    /// the first filing's time.
    pub fn keyed(
        key: &str,
        repository: String,
        created_ms: u64,
        objects: Vec<[u8; 32]>,
        pack: Option<[u8; 32]>,
    ) -> Self {
        let context = "custodian keyed takedown request v1";
        let named = [&(key.len() as u64).to_le_bytes()[..], key.as_bytes()].concat();
        Self::hashed(context, &named, repository, created_ms, objects, pack)
    }

    /// The id over the contents, with `what` (the time, or the key)
    /// after the repository: every field is length-prefixed or fixed-size
    /// under its own derivation context, so no two requests hash the same
    /// input.
    fn hashed(
        context: &str,
        what: &[u8],
        repository: String,
        created_ms: u64,
        objects: Vec<[u8; 32]>,
        pack: Option<[u8; 32]>,
    ) -> Self {
        let mut hasher = blake3::Hasher::new_derive_key(context);
        hasher.update(&(repository.len() as u64).to_le_bytes());
        hasher.update(repository.as_bytes());
        hasher.update(what);
        hasher.update(&(objects.len() as u64).to_le_bytes());
        for object in &objects {
            hasher.update(object);
        }
        if let Some(pack) = &pack {
            hasher.update(b"pack");
            hasher.update(pack);
        }
        Self {
            id: *hasher.finalize().as_bytes(),
            repository,
            created_ms,
            objects,
            pack,
        }
    }
}

/// Running totals of a request.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    /// Objects queued for acquisition.
    pub objects: u64,
    /// Objects preserved and verified.
    pub verified: u64,
    /// Objects that could not be preserved whole (a corrupt source, a
    /// manifest that does not reassemble).
    pub corrupt: u64,
    /// Pieces recorded.
    pub pieces: u64,
    /// Bytes preserved.
    pub bytes: u64,
    /// Holder repositories discovered.
    pub holders: u64,
    /// Preserved pieces deleted by purge passes.
    pub purged_pieces: u64,
}

/// What a takedown plugin reaches: its own partition, the denial rows,
/// the lock rows and the invalidation outbox, the content index to read, the serving copies to remove (once
/// preserved) and restore (on a withdrawal), and the preserved store.
pub fn grants() -> Grants {
    Grants::none()
        .partition(PARTITION)
        .and_then(|g| g.partition(DENIAL_PARTITION))
        .and_then(|g| g.partition(LOCK_PARTITION))
        .and_then(|g| g.partition(INVALIDATION_PARTITION))
        .and_then(|g| g.read_partition(CONTENT_PARTITION))
        .expect("the takedown partitions are valid, grantable names")
        .store(SERVING_STORE)
        .store(PRESERVED_STORE)
}

/// A request's state as an operator sees it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RequestStatus {
    /// `namespace/name`.
    pub repository: String,
    /// When it was filed.
    pub created_ms: u64,
    /// The phase: `seed`, `acquire`, `closure`, `discover`, `remove`,
    /// `retain`, `purging` or `purged`.
    pub phase: String,
    /// How far verification got.
    pub verification: String,
    /// Running totals.
    pub counts: Counts,
    /// Kept at least until then.
    pub retain_until_ms: u64,
    /// A legal hold is set.
    pub hold: bool,
    /// The preserved copies have been purged.
    pub purged: bool,
    /// When the next purge pass (a re-sweep, once purged) may start.
    pub next_purge_ms: Option<u64>,
    /// The last error the policy recorded.
    pub last_error: Option<String>,
    /// What the request does to the content it names; `None` from a
    /// plugin built against contract 0.1, which predates denial.
    pub denial: Option<Denial>,
}

/// What a request does to the content it names.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Denial {
    /// When the denial took effect: the filing.
    pub since_ms: u64,
    /// Every object the request names is denied (or, once withdrawn,
    /// every denial is lifted); false while that work is under way.
    pub settled: bool,
    /// Objects the request denies now.
    pub denied: u64,
    /// Serving copies the request removed once preserved.
    pub removed: u64,
    /// Serving copies the request restored on its withdrawal.
    pub restored: u64,
    /// When the request was withdrawn.
    pub withdrawn_ms: Option<u64>,
}

/// A loaded takedown plugin.
///
/// Steps run on warm instances (see `super::warm` for what that keeps and
/// what it does not): a step of a small object costs about as much as
/// making a fresh instance of a takedown component, so reusing one takes
/// that cost off every step. A plugin built against contract 0.1 gets a
/// fresh instance per step, as it was promised.
pub struct TakedownPolicy {
    plugin: Arc<Plugin>,
    pre: super::Linked<TakedownPre<CallState>, TakedownPreV0_1<CallState>>,
    warm: WarmInstances<Takedown>,
}

impl TakedownPolicy {
    /// Wraps `plugin`, which must implement the takedown world.
    ///
    /// # Errors
    /// [`LoadError::WrongWorld`], or [`LoadError::Link`] if its exports do
    /// not have the takedown world's types.
    pub fn new(plugin: Arc<Plugin>) -> Result<Self, LoadError> {
        let pre = super::link_either(
            &plugin,
            World::Takedown,
            TakedownPre::new,
            TakedownPreV0_1::new,
        )?;
        Ok(Self {
            plugin,
            pre,
            warm: WarmInstances::new(),
        })
    }

    /// The plugin.
    pub fn plugin(&self) -> &Plugin {
        &self.plugin
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
        let timer = steps_wit::Timer {
            kind: timer.kind.clone(),
            reference: timer.reference.clone(),
            due_at_ms: timer.due_ms,
            now_ms,
        };
        let plugin = &self.plugin;
        // `steps` is the 0.2 one in both generations.
        let answer: Result<steps_wit::StepResult, _> = call_export!(warm: self.warm; &self.pre, plugin, call, |i, s| i
                .custodian_policy_takedown_steps()
                .call_step(s, &timer));
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

    /// The guarded commit that records `request` (the caller adds its
    /// timer).
    ///
    /// # Errors
    /// As for [`TakedownPolicy::step`]; the policy refuses a malformed
    /// request, objects the repository does not hold, and an existing id.
    pub fn plan_create(
        &self,
        call: Arc<CallContext>,
        request: &Request,
        now_ms: u64,
    ) -> Result<Result<StepCommit, PolicyError>, CallError> {
        let grants = call.grants.clone();
        let request = wit::Request::from(request);
        let plugin = &self.plugin;
        let answer: Result<steps_wit::Commit, _> = call_export!(
            &self.pre,
            plugin,
            call,
            |i, s| i
                .custodian_policy_takedown_steps()
                .call_plan_create(s, &request, now_ms),
            v0_1: i.custodian_policy_takedown_steps().call_plan_create(
                s,
                &request.convert(),
                now_ms,
            )
        );
        Ok(answer
            .map_err(PolicyError::from)
            .and_then(|c| commit(&grants, c)))
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
        let plugin = &self.plugin;
        Ok(match &self.pre {
            super::Linked::Current(pre) => super::call(
                plugin,
                call,
                |s| pre.instantiate(s),
                |i, s| i.custodian_policy_takedown_steps().call_status(s, request),
            )?
            .map(RequestStatus::from),
            super::Linked::V0_1(pre) => super::call(
                plugin,
                call,
                |s| pre.instantiate(s),
                |i, s| i.custodian_policy_takedown_steps().call_status(s, request),
            )?
            .map(RequestStatus::from_v0_1)
            .map_err(Convert::convert),
        }
        .map_err(PolicyError::from))
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
        let plugin = &self.plugin;
        let answer: Result<steps_wit::Commit, _> = call_export!(&self.pre, plugin, call, |i, s| i
            .custodian_policy_takedown_steps()
            .call_plan_hold(s, request, enabled, now_ms));
        Ok(answer
            .map_err(PolicyError::from)
            .and_then(|c| commit(&grants, c)))
    }
}

impl TakedownPolicy {
    /// The next bounded part of the request's denial work (activation
    /// after a filing, lifting after a withdrawal) as a guarded commit;
    /// `None` when there is none. A plugin built against contract 0.1
    /// predates denial: it has none to do.
    ///
    /// # Errors
    /// As for [`TakedownPolicy::step`]; an unknown request is the policy's
    /// [`PolicyError::NotFound`].
    pub fn plan_denial(
        &self,
        call: Arc<CallContext>,
        request: &[u8],
        now_ms: u64,
    ) -> Result<Result<Option<StepCommit>, PolicyError>, CallError> {
        let super::Linked::Current(pre) = &self.pre else {
            return Ok(Ok(None));
        };
        let grants = call.grants.clone();
        let answer = super::call(
            &self.plugin,
            call,
            |s| pre.instantiate(s),
            |i, s| {
                i.custodian_policy_takedown_steps()
                    .call_plan_denial(s, request, now_ms)
            },
        )?;
        Ok(answer
            .map_err(PolicyError::from)
            .and_then(|c| c.map(|c| commit(&grants, c)).transpose()))
    }

    /// The guarded commit that withdraws `request` (its denials are then
    /// lifted through [`TakedownPolicy::plan_denial`]).
    ///
    /// # Errors
    /// As for [`TakedownPolicy::step`]; once purging has begun, or when
    /// withdrawn already, the policy's [`PolicyError::PreconditionFailed`];
    /// a plugin built against contract 0.1 cannot withdraw
    /// ([`PolicyError::InvalidArgument`], saying so).
    pub fn plan_withdraw(
        &self,
        call: Arc<CallContext>,
        request: &[u8],
        now_ms: u64,
    ) -> Result<Result<StepCommit, PolicyError>, CallError> {
        let super::Linked::Current(pre) = &self.pre else {
            return Ok(Err(PolicyError::InvalidArgument(
                "unsupported: the takedown plugin is built against contract 0.1, which has no \
                 withdrawal"
                    .into(),
            )));
        };
        let grants = call.grants.clone();
        let answer = super::call(
            &self.plugin,
            call,
            |s| pre.instantiate(s),
            |i, s| {
                i.custodian_policy_takedown_steps()
                    .call_plan_withdraw(s, request, now_ms)
            },
        )?;
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
        let denial = Denial {
            since_ms: s.denial.since_ms,
            settled: s.denial.settled,
            denied: s.denial.denied,
            removed: s.denial.removed,
            restored: s.denial.restored,
            withdrawn_ms: s.denial.withdrawn_ms,
        };
        let c = s.counts;
        Self {
            denial: Some(denial),
            repository: s.repository,
            created_ms: s.created_ms,
            phase: s.phase,
            verification: s.verification,
            counts: Counts {
                objects: c.objects,
                verified: c.verified,
                corrupt: c.corrupt,
                pieces: c.pieces,
                bytes: c.bytes,
                holders: c.holders,
                purged_pieces: c.purged_pieces,
            },
            retain_until_ms: s.retain_until_ms,
            hold: s.hold,
            purged: s.purged,
            next_purge_ms: s.next_purge_ms,
            last_error: s.last_error,
        }
    }
}

impl RequestStatus {
    /// A status from a plugin built against contract 0.1: the same
    /// fields, and no denial (0.1 predates it).
    fn from_v0_1(s: wit_v0_1::RequestStatus) -> Self {
        let counts: wit::Counts = s.counts.convert();
        Self {
            denial: None,
            ..Self::from(wit::RequestStatus {
                repository: s.repository,
                created_ms: s.created_ms,
                phase: s.phase,
                verification: s.verification,
                counts,
                retain_until_ms: s.retain_until_ms,
                hold: s.hold,
                purged: s.purged,
                next_purge_ms: s.next_purge_ms,
                last_error: s.last_error,
                denial: wit::Denial {
                    since_ms: 0,
                    settled: true,
                    denied: 0,
                    removed: 0,
                    restored: 0,
                    withdrawn_ms: None,
                },
            })
        }
    }
}

impl From<&Request> for wit::Request {
    fn from(r: &Request) -> Self {
        Self {
            id: r.id.to_vec(),
            repository: r.repository.clone(),
            created_ms: r.created_ms,
            objects: r.objects.iter().map(|o| o.to_vec()).collect(),
            pack: r.pack.map(|p| p.to_vec()),
        }
    }
}

/// Runs a takedown plugin's steps for the timer worker.
///
/// Each step gets an instance of its own while it runs (a warm one, see
/// [`TakedownPolicy`]), the plugin's grants and limits, and
/// the KV and object stores behind budgeted wrappers charging the step's
/// [`SliceBudget`]; it runs on a blocking thread because a plugin call is
/// synchronous.
pub struct TakedownHandler {
    policy: Arc<TakedownPolicy>,
    services: Arc<Services>,
    grants: Grants,
    limits: Limits,
    guards: Vec<Precondition>,
    /// How many routine steps the decision log keeps.
    sampling: Sampling,
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
            guards: Vec::new(),
            sampling: Sampling::default(),
        }
    }

    /// This handler logging its routine steps as `sampling` says (see
    /// [`custodian_core::decisions::log::step_decision`]).
    #[must_use]
    pub fn logging(mut self, sampling: Sampling) -> Self {
        self.sampling = sampling;
        self
    }

    /// Who decides, for the decision log: the world and the plugin's hash.
    fn decider(&self) -> (&str, &str) {
        ("takedown", self.policy.plugin().info().hash.as_str())
    }

    /// This handler with `guards` on every step commit (see
    /// [`TimerHandler::guards`]).
    #[must_use]
    pub fn guarded(mut self, guards: Vec<Precondition>) -> Self {
        self.guards = guards;
        self
    }

    fn budgeted(&self, budget: &SliceBudget) -> Arc<Services> {
        let stores: BTreeMap<String, Arc<dyn ObjectStore>> = self
            .services
            .stores
            .iter()
            .filter(|(name, _)| self.grants.may_read_store(name))
            .map(|(name, store)| (name.clone(), budgeted_store(store.clone(), budget.clone())))
            .collect();
        Arc::new(Services {
            kv: budgeted_kv(self.services.kv.clone(), budget.clone()),
            stores,
            clock: self.services.clock.clone(),
            io: self.services.io.clone(),
            retention: self.services.retention.clone(),
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

    fn guards(&self) -> &[Precondition] {
        &self.guards
    }

    fn decision(&self, timer: &DueTimer, fired: &Fired, now_ms: u64) -> Option<Record> {
        log::step_decision(self.sampling, self.decider(), timer, fired, now_ms)
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
        let owned = timer.clone();
        let (answer, blamed) = tokio::task::spawn_blocking(move || {
            // Off the runtime's workers already: the stores it calls
            // block here rather than on yet another thread.
            custodian_object::fs::on_blocking_thread(|| {
                crate::blame::watch(|| policy.step(call, &owned, now_ms))
            })
        })
        .await
        .map_err(|e| StepFailure::new(format!("the step's thread failed: {e}")))?;
        let failure = match answer {
            Ok(Ok(fired)) => return Ok(fired),
            Ok(Err(policy)) => StepFailure::because(
                FailureCause::Policy,
                format!("the policy answered {policy}"),
            ),
            Err(call) => {
                let cause = match &call {
                    CallError::Trap(_) => FailureCause::Trap,
                    CallError::Limit(LimitExceeded::Time(_)) => FailureCause::Timeout,
                    CallError::Limit(_) => FailureCause::Limit,
                    _ => FailureCause::Other,
                };
                StepFailure::because(cause, call.to_string())
            }
        };
        // A plugin the step asked that failed to answer (the retention
        // plugin) is blamed, not this one that passed its failure on.
        let failure = match blamed {
            Some(plugin) => failure.blaming(plugin),
            None => failure,
        };
        let record = log::step_failure(self.decider(), timer, &failure, now_ms);
        if let Err(error) = audit::append(self.services.kv.as_ref(), &record).await {
            tracing::warn!(%error, "cannot log a failed takedown step");
        }
        Err(failure)
    }
}

#[cfg(test)]
mod tests;
