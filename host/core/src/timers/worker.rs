//! The timer worker: scans due timers in order, fires each through the
//! handler of its kind, and commits the handler's batch together with the
//! timer's reschedule or deletion and the step's audit records, guarded on
//! the timer row (and the worker's fence) being unchanged.

use std::collections::BTreeMap;
use std::sync::Arc;

/// The target of the worker's log events, for filters: a command that
/// reports each step itself can quiet the worker's own warnings.
pub const LOG_TARGET: &str = module_path!();

use async_trait::async_trait;
use serde::Serialize;

use super::carry::{Carried, Carry, MAX_AGE_MS, Row};
use super::claim::{self, ClaimConfig, Claimed};
use super::governor::{self, Governor, Quarantine};
use super::in_flight::{Firing, InFlight, Noted};
use super::{
    Timer, TimerError, TimerState, display_reference, due_end, due_key, due_start, index_key,
    parse_due, parse_due_key, partition,
};
use crate::audit::{self, Record};
use crate::budget::SliceBudget;
use crate::fence::{Coordinator, Fence, Namespace, ShardId};
use custodian_base::clock::Clock;
use custodian_kv::{Batch, Kv, Outcome, Precondition, Write, validate_caller_batch};

/// Audit entries one step may add: each is a guarded row in the step's
/// transaction, and the host reserves room for this many (see
/// [`custodian_kv::HOST_RESERVED_OPS`]).
pub const MAX_STEP_AUDIT: usize = 8;

/// Most claims of later rows a worker reads beside a timer's own (see
/// `in_flight`): a default page's worth. With the timer's two rows the
/// read stays far within the KV's limit on keys per read
/// ([`custodian_kv::MAX_PAGE_ENTRIES`]), and the claims' bytes (under a
/// hundred each) stay a small read.
const CLAIMS_READ_AHEAD: usize = 64;

/// A timer that is due, as a handler sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueTimer {
    /// The kind it was scheduled under.
    pub kind: String,
    /// What it is about.
    pub reference: Vec<u8>,
    /// When it was due.
    pub due_ms: u64,
    /// Steps committed for it before this one.
    pub steps: u64,
    /// Failed attempts since the last committed step.
    pub failures: u32,
}

/// What a policy reports about a step, written in the step's transaction.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AuditEntry {
    /// A stable event name.
    pub event: String,
    /// What it is about.
    pub targets: Vec<String>,
    /// Context for a human reader.
    pub detail: Option<String>,
}

/// The effects of one step.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct StepCommit {
    /// The policy's guarded writes, within the caller bounds.
    pub batch: Batch,
    /// At most [`MAX_STEP_AUDIT`] entries.
    pub audit: Vec<AuditEntry>,
}

impl StepCommit {
    /// Checks what a policy planned against the bounds the host commits
    /// it within: the caller's batch bounds and [`MAX_STEP_AUDIT`]. Every
    /// count here is the plugin's, so it is checked before the host adds
    /// its own rows (and before any arithmetic on it).
    ///
    /// # Errors
    /// What is out of bounds, for the operator.
    pub fn check(&self) -> Result<(), String> {
        validate_caller_batch(&self.batch).map_err(|e| format!("an invalid batch: {e}"))?;
        if self.audit.len() > MAX_STEP_AUDIT {
            return Err(format!(
                "{} audit entries; at most {MAX_STEP_AUDIT} are allowed",
                self.audit.len()
            ));
        }
        Ok(())
    }
}

/// How a step ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fired {
    /// Commit, and fire again at `due_ms` (moved to the step's now plus
    /// the worker's least step interval if it is not later).
    Reschedule {
        /// When to fire next.
        due_ms: u64,
        /// The step's effects.
        commit: StepCommit,
    },
    /// Commit, and delete the timer.
    Done(StepCommit),
}

/// A step that did not produce a commit (a trap, a timeout, a spent
/// budget, an unavailable backend, the policy's own error). Nothing of it
/// is committed; the timer is retried with back-off.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct StepFailure {
    /// What went wrong, for the operator.
    pub message: String,
    /// Which kind of failure, for metrics and alerts.
    pub cause: FailureCause,
    /// The plugin that failed, when it is not the one that ran the step
    /// (a retention plugin the step asked, which trapped): errors and
    /// metrics name it, not the step's plugin.
    pub plugin: Option<String>,
}

/// Why a step failed, coarsely: what an operator's alert distinguishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureCause {
    /// The policy answered with its own error.
    Policy,
    /// The plugin trapped (a panic, a bad memory access).
    Trap,
    /// The plugin hit its time limit.
    Timeout,
    /// The plugin hit a limit other than time (memory, host calls).
    Limit,
    /// The step used up its budget of store calls.
    Budget,
    /// The step's own guard failed at commit: what it read changed
    /// while it ran (an operator's action, another request's step). Not
    /// a fault of the step: the first such failure in a row is retried
    /// after the least step interval, not backed off.
    Contention,
    /// Anything else: a backend, the host, an invalid commit.
    Other,
}

impl FailureCause {
    /// The cause's name, as metrics label it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Policy => "policy",
            Self::Trap => "trap",
            Self::Timeout => "timeout",
            Self::Limit => "limit",
            Self::Budget => "budget",
            Self::Contention => "contention",
            Self::Other => "other",
        }
    }
}

impl StepFailure {
    /// A failure with this message, of cause [`FailureCause::Other`].
    pub fn new(message: impl Into<String>) -> Self {
        Self::because(FailureCause::Other, message)
    }

    /// A failure with this message and cause.
    pub fn because(cause: FailureCause, message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            cause,
            plugin: None,
        }
    }

    /// The same failure, blamed on `plugin` (see [`StepFailure::plugin`]).
    #[must_use]
    pub fn blaming(mut self, plugin: String) -> Self {
        self.message = format!("{plugin} failed: {}", self.message);
        self.plugin = Some(plugin);
        self
    }
}

/// Runs the steps of one timer kind.
#[async_trait]
pub trait TimerHandler: Send + Sync {
    /// The kind of timer this handler runs.
    fn kind(&self) -> &str;

    /// Who commits the steps, for audit records (e.g.
    /// `plugin:takedown@<hash>`).
    fn actor(&self) -> String;

    /// Most timers of this kind fired per tick; `None` for no limit. Lets
    /// an expensive kind share a tick with the others.
    fn max_per_tick(&self) -> Option<u32> {
        None
    }

    /// Preconditions every commit of this handler's steps carries, beside
    /// the worker's own (the plugin set its host installed it under, so a
    /// step of a plugin swapped out anywhere cannot commit). A step whose
    /// handler guard fails is [`FireOutcome::Fenced`].
    fn guards(&self) -> &[Precondition] {
        &[]
    }

    /// The decision-log record of a step that answered `fired`, committed
    /// with the step beside the policy's own entries (and not counted
    /// against [`MAX_STEP_AUDIT`], which bounds the policy); `None` logs
    /// nothing. Called only for steps that will be committed.
    fn decision(&self, _timer: &DueTimer, _fired: &Fired, _now_ms: u64) -> Option<Record> {
        None
    }

    /// Runs one step of `timer` at `now_ms`, charging every store call the
    /// step makes to `budget` (wrap the stores in [`crate::budget`]'s
    /// budgeted wrappers). The worker commits nothing of a step whose
    /// budget ran out, whatever it returns.
    ///
    /// # Errors
    /// A [`StepFailure`] commits nothing and is retried with back-off.
    async fn fire(
        &self,
        timer: &DueTimer,
        now_ms: u64,
        budget: &SliceBudget,
    ) -> Result<Fired, StepFailure>;
}

/// A worker's tuning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerConfig {
    /// Due rows read per scan page.
    pub page: u32,
    /// Most steps in one tick, over all kinds; bounds how long a tick
    /// holds the worker.
    pub max_steps_per_tick: u32,
    /// Delay after the first failure of a timer; doubles per failure.
    pub base_backoff_ms: u64,
    /// Longest delay between retries: a broken step is retried at least
    /// this often, so it recovers on its own once its cause is fixed.
    pub max_backoff_ms: u64,
    /// Store calls one step may make (the seed's slice budget): a step is
    /// a bounded checkpoint, not a job.
    pub step_store_calls: u32,
    /// Store calls all the steps of one tick may make together: the
    /// parent of every step's budget.
    pub tick_store_calls: u32,
    /// Least time between two steps of one timer, ms (at least 1): a step
    /// asking to run again sooner, or in the past, runs this much later.
    /// Bounds how fast one timer can spin whatever its plugin answers.
    pub min_step_interval_ms: u64,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            page: 64,
            max_steps_per_tick: 256,
            base_backoff_ms: 1_000,
            max_backoff_ms: 3_600_000,
            step_store_calls: 256,
            tick_store_calls: 8_192,
            // One step of a takedown with work takes ~5 ms on the
            // reference machine; 1 ms never slows one down.
            min_step_interval_ms: 1,
        }
    }
}

/// What became of one fired timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FireOutcome {
    /// The step committed and the timer fires again later.
    Rescheduled,
    /// The step committed and the timer is gone.
    Done,
    /// The step failed; nothing of it committed; the timer is retried.
    Failed,
    /// Another worker changed the timer first; nothing was committed.
    Lost,
    /// This worker's fence no longer holds (its lease was revoked or
    /// expired); nothing was committed and the tick stopped.
    Fenced,
    /// The tick's budget ran out during the step; nothing was committed,
    /// the timer is still due, and the tick stopped.
    Deferred,
}

/// One fired timer in a [`TickReport`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FiredTimer {
    /// Its kind.
    pub kind: String,
    /// Its reference, as text or `0x` hex.
    pub reference: String,
    /// When it was due.
    pub due_ms: u64,
    /// The step's number (1 for the first step of this timer).
    pub step: u64,
    /// What happened.
    pub outcome: FireOutcome,
    /// When it fires next, if it does.
    pub next_due_ms: Option<u64>,
    /// Why it failed, if it did.
    pub error: Option<String>,
    /// The failure's kind, if it failed.
    pub cause: Option<FailureCause>,
    /// The plugin the failure is blamed on, when not `actor` (see
    /// [`StepFailure::plugin`]).
    pub failed_plugin: Option<String>,
    /// Who ran the step (the handler's actor when the step began).
    pub actor: String,
    /// Time spent in the handler's step, in microseconds.
    pub step_us: u64,
    /// A digest of what the step committed (the plugin's guards, writes
    /// and audit entries), for the governor to tell a step that commits
    /// exactly what its timer's last step did; `None` when the step's
    /// commit did not land or no governor counts this worker's steps.
    #[serde(skip)]
    pub commit_digest: Option<u64>,
}

/// What one tick did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TickReport {
    /// Every timer fired, in due order.
    pub fired: Vec<FiredTimer>,
    /// Due timers were left for a later tick (a per-kind or per-tick cap).
    pub more_due: bool,
    /// Due timers of kinds no handler is registered for.
    pub unhandled: u64,
    /// The tick stopped because the worker's fence no longer holds.
    pub fenced: bool,
    /// Due timers skipped because another worker holds a live claim on
    /// them (only for a worker that claims steps).
    pub claimed_elsewhere: u64,
    /// Due timers skipped because their plugin is quarantined.
    pub paused: u64,
    /// Due timers skipped because another worker of this host is firing
    /// them (only for a worker sharing an [`InFlight`] set).
    pub busy: u64,
    /// Quarantines this tick declared (a plugin passed a step ceiling).
    pub quarantined: Vec<Quarantine>,
}

/// A [`TickReport`]'s counts of due timers skipped: unhandled, claimed
/// elsewhere, paused, busy.
type Skipped = [u64; 4];

impl TickReport {
    fn skipped(&self) -> Skipped {
        [
            self.unhandled,
            self.claimed_elsewhere,
            self.paused,
            self.busy,
        ]
    }

    fn set_skipped(&mut self, [unhandled, claimed_elsewhere, paused, busy]: Skipped) {
        self.unhandled = unhandled;
        self.claimed_elsewhere = claimed_elsewhere;
        self.paused = paused;
        self.busy = busy;
    }
}

/// The handlers of each timer kind, shared by the workers of a host.
///
/// Replacing a kind's handler takes effect at the next step: a step holds
/// the handler it began with until it ends, so its commit and its audit
/// name the plugin that actually ran it (a hot swap relies on this).
#[derive(Default)]
pub struct Handlers {
    by_kind: std::sync::RwLock<BTreeMap<String, Arc<dyn TimerHandler>>>,
}

impl Handlers {
    /// No handlers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers the handler for its kind, replacing any earlier one.
    pub fn register(&self, handler: Arc<dyn TimerHandler>) {
        self.by_kind
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(handler.kind().to_owned(), handler);
    }

    /// The handler of `kind`, if one is registered.
    pub fn get(&self, kind: &str) -> Option<Arc<dyn TimerHandler>> {
        self.by_kind
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(kind)
            .cloned()
    }
}

/// Fires due timers.
pub struct Worker {
    kv: Arc<dyn Kv>,
    clock: Arc<dyn Clock>,
    handlers: Arc<Handlers>,
    config: WorkerConfig,
    fencing: Option<Fencing>,
    claims: Option<ClaimConfig>,
    governor: Option<Arc<Governor>>,
    in_flight: Option<InFlight>,
    /// Due rows a tick's caps left, for the next ticks (see
    /// [`super::carry`]).
    carried: Carried,
}

/// The worker's shard lease under epoch fencing: every step it commits
/// carries the lease's guard, so once an epoch bump's revocation completes
/// no step of this worker from before the bump can commit.
struct Fencing {
    coordinator: Arc<Coordinator>,
    namespace: Namespace,
    shard: ShardId,
    /// The lease in force, renewed when half its life is gone and dropped
    /// when a step finds it fenced, so the next tick asks for a new one.
    lease: tokio::sync::Mutex<Option<Fence>>,
}

impl Fencing {
    /// The guard for this tick's commits, and the authority generation
    /// it holds at (recorded with each step, so an audit shows which
    /// plugin generation a commit was fenced under).
    async fn guard(&self, now: u64) -> Result<(Vec<Precondition>, u64), TimerError> {
        let mut lease = self.lease.lock().await;
        let ttl = self.coordinator.config().epoch_lease_ms;
        let fresh = lease
            .as_ref()
            .is_some_and(|fence| now.saturating_add(ttl / 2) < fence.expires_at_ms());
        if !fresh {
            *lease = Some(
                self.coordinator
                    .grant_lease(&self.namespace, &self.shard, ttl)
                    .await?,
            );
        }
        Ok(lease
            .as_ref()
            .map(|fence| (fence.guard(), fence.authority_generation()))
            .unwrap_or_default())
    }

    async fn forget(&self) {
        *self.lease.lock().await = None;
    }
}

/// The due row (key and value) a committed step `step` of the timer of
/// `kind` and `reference` writes for its next step, due at `next_ms`: its
/// failures cleared.
fn next_row(kind: &str, reference: &[u8], step: u64, next_ms: u64) -> (Vec<u8>, Vec<u8>) {
    let state = TimerState {
        steps: step,
        ..TimerState::default()
    };
    (due_key(next_ms, kind, reference), state.encode())
}

/// Where a failed precondition of a step's batch came from, by index.
struct GuardLayout {
    /// The timer row's guard is index 0; the fence's follow.
    host: usize,
}

impl Worker {
    /// A worker over `kv` reading `clock`, with no handlers yet.
    pub fn new(kv: Arc<dyn Kv>, clock: Arc<dyn Clock>, config: WorkerConfig) -> Self {
        Self::sharing(kv, clock, config, Arc::new(Handlers::new()))
    }

    /// A worker using `handlers`, which other workers may share.
    pub fn sharing(
        kv: Arc<dyn Kv>,
        clock: Arc<dyn Clock>,
        config: WorkerConfig,
        handlers: Arc<Handlers>,
    ) -> Self {
        Self {
            kv,
            clock,
            handlers,
            config,
            fencing: None,
            claims: None,
            governor: None,
            in_flight: None,
            carried: Carried::default(),
        }
    }

    /// Shares the timers with the other workers holding a clone of
    /// `in_flight` (a host's workers): each due timer is fired by
    /// whichever of them takes it first, never by two at once (see
    /// [`super::in_flight`]).
    pub fn share_in_flight(&mut self, in_flight: InFlight) {
        self.in_flight = Some(in_flight);
    }

    /// Counts this worker's committed steps against `governor`'s ceilings
    /// (share one governor among a host's workers) and skips the timers
    /// of quarantined plugins (see [`super::governor`]).
    pub fn govern(&mut self, governor: Arc<Governor>) {
        self.governor = Some(governor);
    }

    /// Registers the handler for its kind, replacing any earlier one.
    pub fn register(&self, handler: Arc<dyn TimerHandler>) {
        self.handlers.register(handler);
    }

    /// Fences this worker: each tick holds (granting or renewing) a lease
    /// on `shard` of `namespace`, and every step commit carries its guard.
    /// After an epoch bump of `namespace` completes its revocation, a step
    /// begun under the old lease cannot commit; the tick reports it
    /// [`FireOutcome::Fenced`] and stops, and the next tick takes a lease
    /// at the new epoch.
    pub fn fence(&mut self, coordinator: Arc<Coordinator>, namespace: Namespace, shard: ShardId) {
        self.fencing = Some(Fencing {
            coordinator,
            namespace,
            shard,
            lease: tokio::sync::Mutex::new(None),
        });
    }

    /// Makes this worker claim each step before firing it (see
    /// [`super::claim`]), so workers on several hosts sharing one KV do not
    /// run the same step. Correctness never depends on it; a worker alone
    /// on its KV needs no claims.
    ///
    /// # Errors
    /// [`TimerError::InvalidArgument`] for an empty or overlong holder or a
    /// zero time to live.
    pub fn claim_steps(&mut self, config: ClaimConfig) -> Result<(), TimerError> {
        if config.holder.is_empty() || config.holder.len() > claim::MAX_HOLDER_BYTES {
            return Err(TimerError::InvalidArgument(format!(
                "a claim holder must be 1..={} bytes",
                claim::MAX_HOLDER_BYTES
            )));
        }
        if config.ttl_ms == 0 {
            return Err(TimerError::InvalidArgument(
                "a claim must live at least 1 ms".into(),
            ));
        }
        self.claims = Some(config);
        Ok(())
    }

    /// Fires every timer due now (up to the caps), in due order: from the
    /// rows an earlier tick's caps left, while they are fresh and one of
    /// them fires (the `carry` module), else from a scan. A worker sharing
    /// its host's in-flight set that fired from the first page of due rows
    /// reads past it only for the host's deep pass, made at most once
    /// every idle poll ([`super::IDLE_POLL_MS`]; the `carry` module);
    /// other ticks leave those rows to it.
    ///
    /// # Errors
    /// A KV failure, or a corrupt timer row; steps that fail are not
    /// errors (they are reported and retried).
    pub async fn tick(&self) -> Result<TickReport, TimerError> {
        let now = self.clock.now_ms();
        let (fence, authority) = match &self.fencing {
            Some(fencing) => {
                let (guard, authority) = fencing.guard(now).await?;
                (guard, Some(authority))
            }
            None => (Vec::new(), None),
        };
        if let Some(governor) = &self.governor {
            governor.refresh(self.kv.as_ref(), now).await?;
        }
        let mut report = TickReport::default();
        let mut per_kind: BTreeMap<String, u32> = BTreeMap::new();
        let mut steps = 0u32;
        let tick_budget = SliceBudget::new(self.config.tick_store_calls);
        let (start, end) = (due_start(), due_end(now));
        let mut cursor: Option<Vec<u8>> = None;
        let mut carried = self.carried.take(now);
        // The host's latest first page is looked at once a tick, so that a
        // tick it fires nothing from scans (see the `carry` module).
        let mut latest_looked_at = false;
        // What this tick's caps leave, for the next.
        let mut left = Carry::default();
        loop {
            let shared = match (&carried, &cursor, &self.in_flight) {
                (None, None, Some(in_flight)) if !latest_looked_at => {
                    latest_looked_at = true;
                    in_flight.latest_page().fresh(now)
                }
                _ => None,
            };
            let (rows, next_page, from_carry) = match (carried.take(), shared) {
                (Some(carry), _) => (carry.rows, None, true),
                (None, Some((page, read_at))) => {
                    (Row::read(page.entries, read_at), page.next, true)
                }
                (None, None) => {
                    let page = self
                        .kv
                        .scan(
                            &partition(),
                            &start,
                            Some(&end),
                            cursor.as_deref(),
                            self.config.page,
                        )
                        .await?;
                    if let (None, Some(in_flight)) = (&cursor, &self.in_flight) {
                        in_flight.latest_page().publish(&page, now);
                    }
                    (Row::read(page.entries, now), page.next, false)
                }
            };
            // The rows a pass over carried rows skipped, which the scan
            // after it sees again if it fires nothing: counted once.
            let skipped_before = report.skipped();
            for (index, row) in rows.iter().enumerate() {
                let (key, value) = (&row.key, &row.value);
                let timer = parse_due(key, value)?;
                let Some(handler) = self.handlers.get(&timer.kind) else {
                    report.unhandled += 1;
                    continue;
                };
                if let Some(governor) = &self.governor
                    && governor.paused(&timer.kind, || handler.actor())
                {
                    report.paused += 1;
                    continue;
                }
                // Stepped by another worker of the host since the carried
                // row was read: the row has moved.
                if from_carry
                    && self.in_flight.as_ref().is_some_and(|in_flight| {
                        in_flight.stepped_since(&timer.kind, &timer.reference, row.read_at_ms)
                    })
                {
                    continue;
                }
                // A row this worker's step wrote, due a little later.
                if timer.due_ms > now {
                    left.push(row.clone());
                    continue;
                }
                let fired_of_kind = per_kind.entry(timer.kind.clone()).or_default();
                if handler
                    .max_per_tick()
                    .is_some_and(|max| *fired_of_kind >= max)
                    || steps >= self.config.max_steps_per_tick
                    || tick_budget.remaining() == 0
                {
                    report.more_due = true;
                    left.push(row.clone());
                    continue;
                }
                // Held until the step ends, whichever way it ends.
                let firing = match &self.in_flight {
                    Some(in_flight) => {
                        let Some(firing) = in_flight.take(&timer.kind, &timer.reference) else {
                            report.busy += 1;
                            continue;
                        };
                        Some(firing)
                    }
                    None => None,
                };
                let noted = match (&self.claims, &firing) {
                    (Some(_), Some(firing)) => firing.noted_claim(timer.due_ms),
                    _ => None,
                };
                // Another host's live claim on this timer, read by this
                // host before (at this due row or an earlier one): reading
                // it again could not let it fire (see `in_flight`).
                if let Some(Noted::Elsewhere { until_ms }) = noted
                    && until_ms > now
                {
                    report.claimed_elsewhere += 1;
                    continue;
                }
                // This host's own claim on this very due row, carried by
                // its last step of the timer and still held: the row and
                // the claim are as that commit left them (see `in_flight`).
                let own_claim = self.claims.as_ref().is_some_and(|claims| {
                    matches!(noted, Some(Noted::Ours { until_ms })
                        if claim::still_held(claims, until_ms, now))
                });
                // A row this worker's own step wrote, on a host alone on its
                // KV: as that commit left it, since no worker of the host
                // stepped the timer since (checked above).
                let as_written = row.written && self.claims.is_none();
                if !own_claim && !as_written {
                    let later = &rows[index + 1..];
                    let (current, claim_row) = self.reread(&timer, key, later, now).await?;
                    // The page was read before this worker's earlier steps
                    // of the tick; another worker may have stepped the
                    // timer since. Firing a stale row would only lose at
                    // commit, after a wasted plugin call.
                    if current.is_some_and(|row| row.as_deref() != Some(value.as_slice())) {
                        continue;
                    }
                    if let Some(claims) = &self.claims
                        && let Claimed::Elsewhere { until_ms, .. } =
                            claim::claim(self.kv.as_ref(), claims, &timer, claim_row, now).await?
                    {
                        if let (Some(firing), Some(until_ms)) = (&firing, until_ms) {
                            firing.remember_claim_elsewhere(timer.due_ms, until_ms, now);
                        }
                        report.claimed_elsewhere += 1;
                        continue;
                    }
                }
                *fired_of_kind += 1;
                steps += 1;
                let budget =
                    SliceBudget::with_parent(self.config.step_store_calls, tick_budget.clone());
                let counted = (timer.kind.clone(), timer.reference.clone());
                let fired = self
                    .fire(
                        handler.as_ref(),
                        (&fence, authority),
                        (timer, firing.as_ref()),
                        key,
                        value,
                        &budget,
                    )
                    .await?;
                let ended = self.clock.now_ms();
                if let Some(firing) = &firing {
                    firing.note_stepped(ended);
                }
                if let (FireOutcome::Rescheduled, Some(next)) = (fired.outcome, fired.next_due_ms)
                    && next <= ended.saturating_add(MAX_AGE_MS)
                {
                    let (key, value) = next_row(&counted.0, &counted.1, fired.step, next);
                    left.push(Row {
                        key,
                        value,
                        read_at_ms: ended.saturating_add(1),
                        written: true,
                    });
                }
                let outcome = fired.outcome;
                if let Some(governor) = &self.governor
                    && let Some(commit) = fired.commit_digest
                    && let Some(reason) =
                        governor.count(&counted.0, &fired.actor, &counted.1, commit, now)
                    && let Some(quarantine) = governor
                        .quarantine(self.kv.as_ref(), &counted.0, &fired.actor, reason, now)
                        .await?
                {
                    tracing::error!(
                        target: LOG_TARGET,
                        kind = %quarantine.kind,
                        plugin = %quarantine.actor,
                        "plugin quarantined, its timers are paused: {}",
                        quarantine.reason
                    );
                    report.quarantined.push(quarantine);
                }
                report.fired.push(fired);
                match outcome {
                    FireOutcome::Fenced => {
                        if let Some(fencing) = &self.fencing {
                            fencing.forget().await;
                        }
                        report.fenced = true;
                        return Ok(report);
                    }
                    FireOutcome::Deferred => {
                        report.more_due = true;
                        return Ok(report);
                    }
                    _ => {}
                }
            }
            match next_page {
                // Fired from the first page: the pages past it are read by
                // the host's deep pass alone (see `carry`).
                Some(_)
                    if cursor.is_none()
                        && steps > 0
                        && self.in_flight.as_ref().is_some_and(|in_flight| {
                            !in_flight.deep_passes().begin(self.clock.now_ms())
                        }) =>
                {
                    self.carried.keep(left);
                    return Ok(report);
                }
                Some(next) => cursor = Some(next),
                // Nothing carried could fire (all stepped, taken or
                // claimed elsewhere): what is due now is elsewhere in the
                // table, so it is scanned after all, and the scan decides
                // afresh what to leave.
                None if from_carry && steps == 0 => {
                    left.keep_written();
                    report.set_skipped(skipped_before);
                }
                None => {
                    self.carried.keep(left);
                    return Ok(report);
                }
            }
        }
    }

    /// What a worker reads of `timer` before firing it, in one snapshot
    /// read: its due row `key` as it is now (`Some(None)` once it is gone)
    /// when other workers of the host may have stepped it since the page
    /// was read, and its claim row when this worker claims steps. `None`
    /// for what it need not read. A claiming worker also reads the claims
    /// of the timers due at the `later` rows of its page that its host
    /// knows nothing of, and remembers those other hosts hold (see
    /// `in_flight`).
    async fn reread(
        &self,
        timer: &Timer,
        key: &[u8],
        later: &[Row],
        now_ms: u64,
    ) -> Result<(Option<Option<Vec<u8>>>, Option<Vec<u8>>), TimerError> {
        let (due, claimed) = (self.in_flight.is_some(), self.claims.is_some());
        let ahead = self.claims_ahead(later, now_ms);
        let mut keys = Vec::with_capacity(2 + ahead.len());
        if due {
            keys.push(key.to_vec());
        }
        if claimed {
            keys.push(claim::claim_key(&timer.kind, &timer.reference));
        }
        if keys.is_empty() {
            return Ok((None, None));
        }
        keys.extend(
            ahead
                .iter()
                .map(|(_, kind, reference)| claim::claim_key(kind, reference)),
        );
        let mut rows = self.kv.get_many(&partition(), &keys).await?.into_iter();
        let due = due.then(|| rows.next().flatten());
        let claim = claimed.then(|| rows.next().flatten()).flatten();
        if let (Some(claims), Some(in_flight)) = (&self.claims, &self.in_flight) {
            for ((due_ms, kind, reference), row) in ahead.into_iter().zip(rows) {
                if let Some(until_ms) =
                    row.and_then(|bytes| claim::live_elsewhere(claims, &bytes, due_ms, now_ms))
                {
                    in_flight.remember_claim_elsewhere(kind, reference, due_ms, until_ms, now_ms);
                }
            }
        }
        Ok((due, claim))
    }

    /// The timers due at the `later` rows of a page whose claims a
    /// claiming worker reads ahead: those of a kind it fires whose claim
    /// its host does not know, at most [`CLAIMS_READ_AHEAD`].
    fn claims_ahead<'a>(&self, later: &'a [Row], now_ms: u64) -> Vec<(u64, &'a str, &'a [u8])> {
        let (Some(_), Some(in_flight)) = (&self.claims, &self.in_flight) else {
            return Vec::new();
        };
        later
            .iter()
            // A corrupt key is reported when the worker reaches its row.
            .filter_map(|row| parse_due_key(&row.key).ok())
            .filter(|(_, kind, reference)| {
                self.handlers.get(kind).is_some() && !in_flight.knows_claim(kind, reference, now_ms)
            })
            .take(CLAIMS_READ_AHEAD)
            .collect()
    }

    /// When this worker may next find a step to fire after `now_ms`, for
    /// an idle worker to sleep until: the first due row after it, where a
    /// row counts from when the claim this worker's host noted another
    /// host holding on its timer lapses, if that is later (the holder
    /// fires it meanwhile, see `in_flight`), and rows of kinds this worker
    /// has no handler for do not count. `None` when nothing is due later.
    ///
    /// Without the later of the two, an idle worker of a host sharing its
    /// KV woke for each row another host's step rescheduled (due at once),
    /// found it claimed, and slept again: two reads each time, and reads
    /// per step grew with the idle loops of every host (`scale_out`).
    ///
    /// # Errors
    /// A KV failure, or a corrupt due key.
    pub async fn next_due_after(&self, now_ms: u64) -> Result<Option<u64>, TimerError> {
        let Some(in_flight) = self.in_flight.as_ref().filter(|_| self.claims.is_some()) else {
            return super::next_due_after(self.kv.as_ref(), now_ms).await;
        };
        let page = super::due_after(self.kv.as_ref(), now_ms, self.config.page).await?;
        let mut next: Option<u64> = None;
        let mut last_due = None;
        for (key, _) in &page.entries {
            let (due_ms, kind, reference) = parse_due_key(key)?;
            last_due = Some(due_ms);
            if self.handlers.get(kind).is_none() {
                continue;
            }
            let from = in_flight
                .claimed_elsewhere_until(kind, reference)
                .map_or(due_ms, |until_ms| until_ms.max(due_ms));
            next = Some(next.map_or(from, |next| next.min(from)));
        }
        // Rows past the page are due no sooner than its last.
        if page.next.is_some()
            && let Some(last_due) = last_due
        {
            next = Some(next.map_or(last_due, |next| next.min(last_due)));
        }
        Ok(next)
    }

    /// When the earliest of the due rows this worker's own steps wrote and
    /// it carries is due (see `carry`): a step rescheduled for the next
    /// millisecond is carried, not yet due, by a tick that then fires
    /// nothing, and the KV's rows due after a later now no longer include
    /// it. An idle loop sleeps no longer than this.
    pub fn next_written_due(&self) -> Option<u64> {
        self.carried.earliest_written_due()
    }

    /// Ticks until a tick fires nothing and leaves nothing due for later,
    /// or `max_ticks` ticks ran, or the fence fails; `on_tick` sees each
    /// tick's report as it ends (progress for long runs). Returns the
    /// number of ticks.
    ///
    /// # Errors
    /// As [`Worker::tick`].
    pub async fn run_until_idle(
        &self,
        max_ticks: u32,
        mut on_tick: impl FnMut(&TickReport),
    ) -> Result<u32, TimerError> {
        let mut ticks = 0;
        while ticks < max_ticks {
            let report = self.tick().await?;
            ticks += 1;
            on_tick(&report);
            if (report.fired.is_empty() && !report.more_due) || report.fenced {
                break;
            }
        }
        Ok(ticks)
    }

    async fn fire(
        &self,
        handler: &dyn TimerHandler,
        (fence, authority): (&[Precondition], Option<u64>),
        (timer, firing): (Timer, Option<&Firing>),
        key: &[u8],
        value: &[u8],
        budget: &SliceBudget,
    ) -> Result<FiredTimer, TimerError> {
        let due = DueTimer {
            kind: timer.kind.clone(),
            reference: timer.reference.clone(),
            due_ms: timer.due_ms,
            steps: timer.state.steps,
            failures: timer.state.failures,
        };
        let now = self.clock.now_ms();
        let actor = handler.actor();
        let started = std::time::Instant::now();
        let answer = handler.fire(&due, now, budget).await;
        let ran = Ran {
            actor,
            step_us: u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
        };
        if budget.exhausted() {
            if budget.remaining() > 0 {
                // The step's own budget had room: the tick's ran out. Not
                // the step's fault; leave the timer due for the next tick.
                return Ok(ran.report(&timer, FireOutcome::Deferred));
            }
            let failure = StepFailure::because(
                FailureCause::Budget,
                format!(
                    "the step used up its budget of {} store calls; nothing of it was committed",
                    budget.limit()
                ),
            );
            return self
                .record_failure(&timer, key, value, now, failure, ran)
                .await;
        }
        let fired = match answer {
            Ok(fired) => fired,
            Err(failure) => {
                return self
                    .record_failure(&timer, key, value, now, failure, ran)
                    .await;
            }
        };
        let decision = handler.decision(&due, &fired, now);
        let (commit, next_due) = match fired {
            Fired::Reschedule { due_ms, commit } => {
                let soonest = now.saturating_add(self.config.min_step_interval_ms.max(1));
                (commit, Some(due_ms.max(soonest)))
            }
            Fired::Done(commit) => (commit, None),
        };
        let commit_digest = self.governor.is_some().then(|| governor::digest(&commit));
        let host_guards: Vec<Precondition> =
            fence.iter().chain(handler.guards()).cloned().collect();
        let step = PlannedStep {
            actor: &ran.actor,
            worker: self.fencing.as_ref().map(|f| f.shard.as_str()),
            claims: self.claims.as_ref(),
            fence: &host_guards,
            authority,
            timer: &timer,
            key,
            value,
            now,
        };
        let (batch, layout) = match step.batch(commit, next_due, decision) {
            Ok(planned) => planned,
            Err(failure) => {
                return self
                    .record_failure(&timer, key, value, now, failure, ran)
                    .await;
            }
        };
        let outcome = self.kv.apply(&batch).await?;
        let mut fired = ran.report(&timer, FireOutcome::Failed);
        match outcome {
            Outcome::Committed => {
                // The claim the commit carried, noted for the host's next
                // step of the timer (the note it was fired on, if any, was
                // used up when it was read).
                if let (Some(claims), Some(firing), Some(next)) = (&self.claims, firing, next_due)
                    && let Some(until_ms) = claim::carried_until(claims, next, now)
                {
                    firing.remember_own_claim(next, until_ms, now);
                }
                fired.outcome = match next_due {
                    Some(_) => FireOutcome::Rescheduled,
                    None => FireOutcome::Done,
                };
                fired.next_due_ms = next_due;
                fired.commit_digest = commit_digest;
                Ok(fired)
            }
            Outcome::PreconditionFailed { index: 0 } => {
                fired.outcome = FireOutcome::Lost;
                Ok(fired)
            }
            Outcome::PreconditionFailed { index } if (index as usize) < layout.host => {
                fired.outcome = FireOutcome::Fenced;
                Ok(fired)
            }
            Outcome::PreconditionFailed { index } => {
                let failure = StepFailure::because(
                    FailureCause::Contention,
                    format!(
                        "the step's precondition {} did not hold at commit: its state changed \
                         concurrently",
                        index as usize - layout.host
                    ),
                );
                self.record_failure(&timer, key, value, now, failure, ran)
                    .await
            }
            Outcome::DeadlinePassed => {
                if fence_expired(fence, self.clock.now_ms()) {
                    fired.outcome = FireOutcome::Fenced;
                    return Ok(fired);
                }
                let failure = StepFailure::new("the step's deadline passed before it could commit");
                self.record_failure(&timer, key, value, now, failure, ran)
                    .await
            }
        }
    }

    /// Moves a failed timer to its back-off time with the error recorded,
    /// guarded like a step; nothing of the step itself is written.
    async fn record_failure(
        &self,
        timer: &Timer,
        key: &[u8],
        value: &[u8],
        now: u64,
        failure: StepFailure,
        ran: Ran,
    ) -> Result<FiredTimer, TimerError> {
        let failures = timer.state.failures.saturating_add(1);
        // A race lost once is retried at once: an operator's filing or
        // hold commits beside the request's first steps as a rule. Twice
        // in a row backs off like any failure, so a step whose guard can
        // never hold does not spin.
        let delay = if failure.cause == FailureCause::Contention && failures == 1 {
            self.config.min_step_interval_ms.max(1)
        } else {
            self.backoff_ms(&timer.reference, failures)
        };
        let next = now.saturating_add(delay);
        tracing::warn!(
            kind = %timer.kind,
            reference = %display_reference(&timer.reference),
            failures,
            retry_at_ms = next,
            "timer step failed: {}",
            failure.message
        );
        let state = TimerState {
            steps: timer.state.steps,
            failures,
            last_error: Some(truncate(&failure.message)),
            last_error_at_ms: Some(now),
        };
        let partition = partition();
        let batch = Batch {
            preconditions: vec![Precondition::Equals {
                partition: partition.clone(),
                key: key.to_vec(),
                value: value.to_vec(),
            }],
            writes: vec![
                Write::Delete {
                    partition: partition.clone(),
                    key: key.to_vec(),
                },
                Write::Put {
                    partition: partition.clone(),
                    key: due_key(next, &timer.kind, &timer.reference),
                    value: state.encode(),
                },
                Write::Put {
                    partition,
                    key: index_key(&timer.kind, &timer.reference),
                    value: next.to_be_bytes().to_vec(),
                },
            ],
        };
        let mut fired = ran.report(timer, FireOutcome::Failed);
        match self.kv.apply(&batch).await? {
            Outcome::Committed => {
                fired.next_due_ms = Some(next);
                fired.error = Some(failure.message);
                fired.cause = Some(failure.cause);
                fired.failed_plugin = failure.plugin;
            }
            Outcome::PreconditionFailed { .. } | Outcome::DeadlinePassed => {
                fired.outcome = FireOutcome::Lost;
            }
        }
        Ok(fired)
    }

    /// `base · 2^(failures-1)`, capped, plus up to a quarter more spread by
    /// the reference, so timers that failed together do not all retry in
    /// the same millisecond.
    fn backoff_ms(&self, reference: &[u8], failures: u32) -> u64 {
        let doublings = failures.saturating_sub(1).min(40);
        let delay = self
            .config
            .base_backoff_ms
            .saturating_mul(1 << doublings)
            .min(self.config.max_backoff_ms);
        let spread = blake3::hash(&[reference, &failures.to_be_bytes()].concat());
        let fraction = u64::from(spread.as_bytes()[0]);
        delay.saturating_add(delay / 4 * fraction / 255)
    }
}

fn fence_expired(fence: &[Precondition], now: u64) -> bool {
    fence
        .iter()
        .any(|p| matches!(p, Precondition::NotAfter(deadline) if now > *deadline))
}

/// One fired timer's step, as the worker commits it.
struct PlannedStep<'a> {
    /// Who ran the step: the handler's actor when the step began.
    actor: &'a str,
    /// The fenced worker's shard (named after its host), so the audit
    /// shows where each step ran.
    worker: Option<&'a str>,
    /// How the worker claims steps, if it does: its last step removes the
    /// claim row, and a step that reschedules soon carries the claim to
    /// the next due row.
    claims: Option<&'a ClaimConfig>,
    /// The worker's fence and the handler's guards: a failure of any is
    /// the step being fenced off, not a failure of the step.
    fence: &'a [Precondition],
    /// The fence's authority generation, if the worker is fenced.
    authority: Option<u64>,
    timer: &'a Timer,
    /// The due row as read: the step is guarded on it.
    key: &'a [u8],
    value: &'a [u8],
    now: u64,
}

impl PlannedStep<'_> {
    /// The step's whole transaction: the timer guard and the fence first,
    /// then the policy's preconditions, then the audit guards; the
    /// policy's writes, the audit rows, then the timer's own move.
    fn batch(
        &self,
        commit: StepCommit,
        next_due: Option<u64>,
        decision: Option<Record>,
    ) -> Result<(Batch, GuardLayout), StepFailure> {
        let Self {
            actor,
            worker,
            claims,
            fence,
            authority,
            timer,
            key,
            value,
            now,
        } = *self;
        commit
            .check()
            .map_err(|e| StepFailure::new(format!("the step returned {e}")))?;
        let partition = partition();
        let step = timer.state.steps + 1;
        let mut batch = Batch::default();
        batch.preconditions.push(Precondition::Equals {
            partition: partition.clone(),
            key: key.to_vec(),
            value: value.to_vec(),
        });
        batch.preconditions.extend(fence.iter().cloned());
        let layout = GuardLayout {
            host: batch.preconditions.len(),
        };
        batch.preconditions.extend(commit.batch.preconditions);
        batch.writes.extend(commit.batch.writes);

        let reference = display_reference(&timer.reference);
        let fenced = authority.map_or(String::new(), |g| format!(" under authority {g}"));
        let on = worker.map_or(String::new(), |w| format!(" on {w}"));
        let mut records = vec![Record {
            at_ms: now,
            actor: "system:timer".into(),
            event: match next_due {
                Some(_) => "timer/step".into(),
                None => "timer/done".into(),
            },
            targets: vec![
                format!("timer:{}/{reference}", timer.kind),
                format!("step:{step}"),
            ],
            detail: Some(match next_due {
                Some(next) => format!("step {step} by {actor}{on}{fenced}; next due at {next}"),
                None => format!("step {step} by {actor}{on}{fenced}; timer finished"),
            }),
        }];
        records.extend(commit.audit.into_iter().map(|entry| Record {
            at_ms: now,
            actor: actor.to_owned(),
            event: entry.event,
            targets: entry.targets,
            detail: entry.detail,
        }));
        records.extend(decision);
        let unique = [key, value].concat();
        for (i, record) in (0u8..).zip(&records) {
            let (guard, write) = audit::plan(record, &unique, i)
                .map_err(|e| StepFailure::new(format!("the step's audit entry {i}: {e}")))?;
            batch.preconditions.push(guard);
            batch.writes.push(write);
        }

        batch.writes.push(Write::Delete {
            partition: partition.clone(),
            key: key.to_vec(),
        });
        let index = index_key(&timer.kind, &timer.reference);
        match next_due {
            Some(next) => {
                let (key, value) = next_row(&timer.kind, &timer.reference, step, next);
                batch.writes.push(Write::Put {
                    partition: partition.clone(),
                    key,
                    value,
                });
                batch.writes.push(Write::Put {
                    partition,
                    key: index,
                    value: next.to_be_bytes().to_vec(),
                });
                if let Some(carried) = claims.and_then(|c| claim::carry(c, timer, next, now)) {
                    batch.writes.push(carried);
                }
            }
            None => {
                batch.writes.push(Write::Delete {
                    partition,
                    key: index,
                });
                if claims.is_some() {
                    batch.writes.push(claim::release(timer));
                }
            }
        }
        Ok((batch, layout))
    }
}

/// Who ran a step and for how long, for its report.
struct Ran {
    actor: String,
    step_us: u64,
}

impl Ran {
    fn report(&self, timer: &Timer, outcome: FireOutcome) -> FiredTimer {
        FiredTimer {
            kind: timer.kind.clone(),
            reference: display_reference(&timer.reference),
            due_ms: timer.due_ms,
            step: timer.state.steps + 1,
            outcome,
            next_due_ms: None,
            error: None,
            cause: None,
            failed_plugin: None,
            actor: self.actor.clone(),
            step_us: self.step_us,
            commit_digest: None,
        }
    }
}

fn truncate(message: &str) -> String {
    if message.len() <= super::MAX_ERROR_BYTES {
        return message.to_owned();
    }
    let mut end = super::MAX_ERROR_BYTES;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &message[..end])
}
