//! Operator actions on takedown requests: filing one, setting its legal
//! hold, withdrawing it, and driving its denial work to its end. Each is
//! the plugin's guarded plan, an operator audit record, the plugin's own
//! audit entries and the request's timer, committed in one transaction,
//! so a request never exists without its timer and nothing takes effect
//! unaudited.

mod first_step;

pub use first_step::{FirstSteps, Held};

use std::sync::Arc;

use super::PolicyError;
use super::takedown::{KIND, Request, TakedownPolicy};
use crate::{CallContext, CallError};
use custodian_base::error::ErrorKind;
use custodian_contract::lock::RequestLock;
use custodian_core::audit::{self, Record};
use custodian_core::timers::{self, StepCommit, TimerError, TimerState};
use custodian_kv::{Batch, Kv, KvError, Outcome, Partition, Precondition, Write};

/// Attempts of an action before giving up on a request that keeps moving
/// under it: each loss means a step (or another request's denial)
/// committed in between, so a few rounds settle it unless something is
/// badly wrong.
const ATTEMPTS: u32 = 4;

/// How long a filing or a withdrawal drives its denial work before it
/// answers anyway (saying the work is pending): a request naming a pack
/// of a million files takes ~40,000 commits to deny, longer than a client
/// waits; the request's steps finish it, before any other work of theirs.
pub const SETTLE_WITHIN: std::time::Duration = std::time::Duration::from_secs(20);

/// Why an operator action did not take effect.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The policy refused (its answer says why).
    #[error("the takedown policy refused: {0}")]
    Refused(#[source] PolicyError),
    /// The plugin could not be called to completion.
    #[error("the takedown plugin failed")]
    Call(#[from] CallError),
    /// The KV failed.
    #[error("the KV failed")]
    Kv(#[from] KvError),
    /// The timer row could not be read or planned.
    #[error("the request's timer")]
    Timer(#[from] TimerError),
    /// The request already exists.
    #[error("a request with id {0} already exists")]
    Exists(String),
    /// Concurrent steps kept changing the request.
    #[error("the request kept changing under the operation; retry")]
    Contention,
    /// The plugin that planned the action was swapped out before it could
    /// commit; nothing changed, and a retry is planned by the new plugin.
    #[error("the takedown plugin was swapped while the action was planned; retry")]
    Swapped,
    /// The request has no lock to extend: no such request, or one filed
    /// before locks whose first step has not written its lock yet.
    #[error("takedown request {0} has no lock (no such request, or its first step is pending)")]
    NoLock(String),
    /// The extension is not one: purging has begun, or the new
    /// retain-until is not later than the one in force.
    #[error("{0}")]
    NotExtended(String),
    /// The plugin planned a commit outside the host's bounds (too many
    /// operations or audit entries); nothing changed.
    #[error("the takedown plugin planned {0}")]
    Invalid(String),
}

impl RequestError {
    /// What kind of failure this is (see [`ErrorKind`]). The policy's
    /// refusal is the kind it answered; everything the action passes
    /// below (the plugin's input, the batch, the timer's kind and
    /// reference) is built by the host, so a refused argument there is
    /// the host's fault. Contention and a swap mid-action are a retry
    /// away.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Refused(policy) => policy.kind(),
            Self::Call(call) => call.kind().host_built(),
            Self::Kv(kv) => kv.kind().host_built(),
            Self::Timer(timer) => timer.kind().host_built(),
            Self::Exists(_) => ErrorKind::Conflict,
            Self::Contention | Self::Swapped => ErrorKind::Unavailable,
            Self::NoLock(_) => ErrorKind::NotFound,
            Self::NotExtended(_) => ErrorKind::PreconditionFailed,
            // The deployment's plugin is broken, as when it traps.
            Self::Invalid(_) => ErrorKind::Internal,
        }
    }
}

fn record(now_ms: u64, actor: &str, event: &str, targets: Vec<String>, detail: String) -> Record {
    Record {
        at_ms: now_ms,
        actor: actor.to_owned(),
        event: event.into(),
        targets,
        detail: Some(detail),
    }
}

/// Adds the operator's record and the plugin's entries to `batch`, under
/// keys derived from `unique` (so a retried plan cannot duplicate them).
fn add_audit(batch: &mut Batch, records: Vec<Record>, unique: &[u8]) -> Result<(), RequestError> {
    for (i, record) in records.iter().enumerate() {
        // A plan's records are bounded (`plugin_records`), but an index
        // past a byte must fail, never wrap onto another record's key.
        let i = u8::try_from(i)
            .map_err(|_| RequestError::Invalid(format!("{} audit records", records.len())))?;
        let (guard, write) = audit::plan(record, unique, i)?;
        batch.preconditions.push(guard);
        batch.writes.push(write);
    }
    Ok(())
}

/// The plugin's audit entries as records, once its commit is checked
/// against the host's bounds: every path that commits a plugin's plan
/// passes here first.
fn plugin_records(
    commit: &StepCommit,
    now_ms: u64,
    actor: &str,
) -> Result<Vec<Record>, RequestError> {
    commit.check().map_err(RequestError::Invalid)?;
    Ok(commit
        .audit
        .iter()
        .map(|entry| Record {
            at_ms: now_ms,
            actor: actor.to_owned(),
            event: entry.event.clone(),
            targets: entry.targets.clone(),
            detail: entry.detail.clone(),
        })
        .collect())
}

/// What an operator action commits with, beyond its own guards.
#[derive(Debug, Clone, Copy)]
pub struct Action<'a> {
    /// Who is acting, as the audit log names them: `principal:NAME` for
    /// an authenticated API caller, `operator:NAME` for a command run on
    /// the data directory.
    pub actor: &'a str,
    /// "Now", ms since the epoch.
    pub now_ms: u64,
    /// Preconditions the commit must also hold, checked first: a server
    /// passes its plugin-swap guard
    /// ([`custodian_core::fence::Coordinator::epoch_guard`]), so an action planned
    /// by a plugin swapped out meanwhile cannot commit.
    pub guard: &'a [Precondition],
}

/// Puts `guard` first among `batch`'s preconditions.
fn guarded(mut batch: Batch, guard: &[Precondition]) -> Batch {
    batch.preconditions.splice(0..0, guard.iter().cloned());
    batch
}

/// Files `request`: the policy's plan, the audit and the request's timer
/// in one transaction. The plan may deny some of what the request names
/// already; [`settle`] does the rest, and then the first step may run. A
/// blocking call: it runs the plugin on this thread and waits for the KV
/// on `io`.
///
/// With `held` (a serving host's filing, see [`FirstSteps`]) the first
/// step is due at once, kept from every worker until the filer releases
/// it. Without, it is due [`SETTLE_WITHIN`] after `now_ms`, and [`start`]
/// makes it due once [`settle`] is over: a step does the same denial work
/// as [`settle`], so a step racing the filing's parts lost at commit and
/// backed off (with ten filings at once, four or five of them did). A
/// filer that dies before [`start`] leaves the steps to begin when its
/// settling would have given up anyway.
///
/// A plan whose guard fails is planned again: the policy guards its plan
/// on what it read (the request's absence, the denial rows it extends),
/// so a failure means the same request was just filed (its new plan says
/// so) or another request changed a row it read.
///
/// # Errors
/// See [`RequestError`]; a refused plan or an existing id changes nothing.
pub fn create(
    policy: &TakedownPolicy,
    call: impl Fn() -> Arc<CallContext>,
    io: &tokio::runtime::Handle,
    kv: &dyn Kv,
    request: &Request,
    action: Action<'_>,
    held: Option<&Held>,
) -> Result<(), RequestError> {
    let Action {
        actor,
        now_ms,
        guard,
    } = action;
    let id = hex(&request.id);
    for _ in 0..ATTEMPTS {
        let context = call();
        let plugin_actor = context.actor.clone();
        let commit = match policy.plan_create(context, request, now_ms)? {
            Ok(commit) => commit,
            Err(PolicyError::PreconditionFailed(_)) => return Err(RequestError::Exists(id)),
            Err(refused) => return Err(RequestError::Refused(refused)),
        };
        let mut records = vec![record(
            now_ms,
            actor,
            "takedown/create",
            vec![
                format!("takedown:{id}"),
                format!("repo:{}", request.repository),
            ],
            match &request.pack {
                Some(pack) => format!("pack {}", hex(pack)),
                None => format!("{} object(s)", request.objects.len()),
            },
        )];
        records.extend(plugin_records(&commit, now_ms, &plugin_actor)?);
        let mut batch = commit.batch;
        add_audit(&mut batch, records, &request.id)?;
        let due = match held {
            Some(_) => now_ms,
            None => first_step_due(now_ms),
        };
        let timer = timers::plan_schedule(KIND, &request.id, due, None, &TimerState::default())?;
        batch.preconditions.extend(timer.preconditions);
        batch.writes.extend(timer.writes);
        if let Some(held) = held {
            held.claim(&mut batch, &request.id, now_ms);
        }
        if apply(io, kv, batch, guard)? == Applied::Committed {
            return Ok(());
        }
    }
    Err(RequestError::Contention)
}

/// When the first step of a request filed at `now_ms` is due until its
/// filer calls [`start`].
fn first_step_due(now_ms: u64) -> u64 {
    let settle_ms = u64::try_from(SETTLE_WITHIN.as_millis()).expect("seconds fit in u64");
    now_ms.saturating_add(settle_ms)
}

/// Makes the first step of request `id`, filed by [`create`] under an
/// [`Action`] whose `now_ms` was `filed_ms` (not the request's own
/// `created_ms`, which a caller may have read off the clock at another
/// millisecond), due at `filed_ms`: the filer's denial work ([`settle`])
/// is over, so the steps can begin. Only the timer [`create`] deferred
/// moves (its index still names that due time); a timer already stepped
/// or moved by an operator's action stays where it is.
///
/// # Errors
/// The KV's, or a corrupt timer row.
pub fn start(
    io: &tokio::runtime::Handle,
    kv: &dyn Kv,
    id: &[u8; 32],
    filed_ms: u64,
) -> Result<(), RequestError> {
    let deferred = first_step_due(filed_ms);
    let Some(timer) = io.block_on(timers::get_due_at(kv, KIND, id, deferred))? else {
        return Ok(());
    };
    let batch = timers::plan_move(&timer, filed_ms)?;
    // Lost: a step or an action moved the timer meanwhile; it is theirs.
    apply(io, kv, batch, &[])?;
    Ok(())
}

/// Lets the steps of request `id` begin once its filer's denial work
/// ([`settle`]) is over: a serving host's filing that `committed` with
/// its first step `held` hands that step to the host's workers
/// ([`Held::release_filed`]); any other filer (the CLI, or a retry
/// answered "exists", whose committed filing may have deferred the step)
/// moves a deferred first step to `filed_ms` ([`start`]).
///
/// # Errors
/// As [`start`].
pub fn begin_steps(
    io: &tokio::runtime::Handle,
    kv: &dyn Kv,
    id: &[u8; 32],
    filed_ms: u64,
    held: Option<Held>,
    committed: bool,
    now_ms: u64,
) -> Result<(), RequestError> {
    match held {
        Some(held) if committed => {
            held.release_filed(filed_ms, now_ms);
            Ok(())
        }
        // Released (with no note) only once the step is moved.
        _ => start(io, kv, id, filed_ms),
    }
}

/// How a request's denial work ended: [`settle`]'s answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// Nothing is left: every object the request names is denied (or,
    /// after a withdrawal, every denial is lifted).
    Done,
    /// [`SETTLE_WITHIN`] passed first, or the policy waits on another
    /// request's work (`unavailable`); the request's steps finish it.
    Pending,
}

/// Drives request `id`'s denial work (activation after a filing, lifting
/// after a withdrawal) to its end: the policy's next part, committed, then
/// the next, until it plans none — so a filing or a withdrawal answers
/// only once its effect holds. Each part carries its own audit entries;
/// a part whose guard failed (a step or another host did that part
/// meanwhile) is planned again. Stops after [`SETTLE_WITHIN`] and says
/// so: the request's steps do the rest, the denial work before any other.
///
/// # Errors
/// See [`RequestError`]; what committed before an error stays.
pub fn settle(
    policy: &TakedownPolicy,
    call: impl Fn() -> Arc<CallContext>,
    io: &tokio::runtime::Handle,
    kv: &dyn Kv,
    id: &[u8; 32],
    action: Action<'_>,
) -> Result<Settled, RequestError> {
    let started = std::time::Instant::now();
    // Tells this drive's audit keys from another's at the same `now_ms`
    // (a filing's and a withdrawal's, or two hosts' drives): each part's
    // commit is guarded by the policy, so the keys need only be unique,
    // not replayable; a collision fails the guard and the next attempt
    // (its count is in the key too) draws another key.
    let drive = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
        .to_be_bytes();
    let mut lost: u32 = 0;
    let mut part = 0u64;
    loop {
        part += 1;
        if started.elapsed() > SETTLE_WITHIN {
            return Ok(Settled::Pending);
        }
        let context = call();
        let plugin_actor = context.actor.clone();
        let commit = match policy.plan_denial(context, id, action.now_ms)? {
            Ok(Some(commit)) => commit,
            Ok(None) => return Ok(Settled::Done),
            // The policy waits on something another request does first
            // (its removal of a copy this one restores): its steps go on.
            Err(PolicyError::Unavailable(_)) => return Ok(Settled::Pending),
            Err(refused) => return Err(RequestError::Refused(refused)),
        };
        let records = plugin_records(&commit, action.now_ms, &plugin_actor)?;
        let mut batch = commit.batch;
        let unique = [
            id.as_slice(),
            b"denial",
            &drive,
            &part.to_be_bytes(),
            &lost.to_be_bytes(),
        ]
        .concat();
        add_audit(&mut batch, records, &unique)?;
        match apply(io, kv, batch, action.guard)? {
            Applied::Committed => lost = 0,
            Applied::Lost => {
                lost += 1;
                if lost == ATTEMPTS {
                    return Err(RequestError::Contention);
                }
            }
        }
    }
}

/// Sets (`enabled`) or clears the legal hold of request `id`, and moves its
/// timer to `now_ms` so the next step sees the change at once.
///
/// # Errors
/// See [`RequestError`]; placing a hold once purging has begun is
/// [`RequestError::Refused`] with [`PolicyError::PreconditionFailed`].
pub fn hold(
    policy: &TakedownPolicy,
    call: impl Fn() -> Arc<CallContext>,
    io: &tokio::runtime::Handle,
    kv: &dyn Kv,
    id: &[u8; 32],
    enabled: bool,
    action: Action<'_>,
) -> Result<(), RequestError> {
    let (event, detail) = if enabled {
        ("takedown/hold", "legal hold on")
    } else {
        ("takedown/release", "legal hold off")
    };
    let planned = Planned {
        event,
        detail,
        tag: u8::from(enabled),
    };
    let plan = |context| policy.plan_hold(context, id, enabled, action.now_ms);
    act_on(call, io, kv, id, action, planned, plan)
}

/// Withdraws request `id` (its denials are then lifted: call [`settle`])
/// and moves its timer to `now_ms`, so its next step lifts what
/// [`settle`] leaves. A legal hold does not block it: the hold keeps the
/// preserved copy, which follows retention as any other.
///
/// # Errors
/// See [`RequestError`]; once purging has begun, or when withdrawn
/// already, [`RequestError::Refused`] with
/// [`PolicyError::PreconditionFailed`].
pub fn withdraw(
    policy: &TakedownPolicy,
    call: impl Fn() -> Arc<CallContext>,
    io: &tokio::runtime::Handle,
    kv: &dyn Kv,
    id: &[u8; 32],
    action: Action<'_>,
) -> Result<(), RequestError> {
    let planned = Planned {
        event: "takedown/withdraw",
        detail: "withdrawn: its denials are lifted",
        tag: 2,
    };
    let plan = |context| policy.plan_withdraw(context, id, action.now_ms);
    act_on(call, io, kv, id, action, planned, plan)
}

/// Extends request `id`'s retention to `until_ms`: its lock's
/// retain-until grows (the host's lock rules let it only grow), with the
/// operator's record, in one guarded transaction, and its timer moves to
/// `now_ms` so its next step schedules itself by the new retain-until.
///
/// The retain-until a request keeps its evidence until is the retention
/// policy's answer when it was filed; a later change of the retention
/// settings governs new requests, and this is how an existing one is
/// kept longer: explicitly, by an operator, audited. The host does this
/// itself, on the lock it enforces; the policy reads the lock's
/// retain-until as the one in force.
///
/// # Errors
/// [`RequestError::NoLock`] when the request has no lock;
/// [`RequestError::NotExtended`] once purging has begun or when
/// `until_ms` is not later than the retain-until in force;
/// [`RequestError::Contention`] when the lock kept changing.
pub fn extend(
    io: &tokio::runtime::Handle,
    kv: &dyn Kv,
    id: &[u8; 32],
    until_ms: u64,
    action: Action<'_>,
) -> Result<(), RequestError> {
    let partition = Partition::new(custodian_contract::lock::PARTITION)
        .expect("the lock partition's name is valid");
    let key = custodian_contract::lock::request_key(id);
    for attempt in 0..ATTEMPTS {
        let raw = io
            .block_on(kv.get(&partition, &key))?
            .ok_or_else(|| RequestError::NoLock(hex(id)))?;
        let current = RequestLock::decode(&raw).map_err(|e| {
            RequestError::Kv(KvError::Corrupt(
                format!("the lock of takedown request {}: {e}", hex(id)).into(),
            ))
        })?;
        if current.purging {
            return Err(RequestError::NotExtended(format!(
                "takedown request {} has begun purging: its retention can no longer be extended",
                hex(id)
            )));
        }
        if until_ms <= current.retain_until_ms {
            return Err(RequestError::NotExtended(format!(
                "takedown request {} is retained until {}; an extension must be later",
                hex(id),
                current.retain_until_ms
            )));
        }
        let next = RequestLock {
            retain_until_ms: until_ms,
            ..current
        };
        let mut batch = Batch {
            preconditions: vec![Precondition::Equals {
                partition: partition.clone(),
                key: key.clone(),
                value: raw,
            }],
            writes: vec![Write::Put {
                partition: partition.clone(),
                key: key.clone(),
                value: next.encode().to_vec(),
            }],
        };
        let records = vec![record(
            action.now_ms,
            action.actor,
            "takedown/extend",
            vec![format!("takedown:{}", hex(id))],
            format!("retain-until {} -> {until_ms}", current.retain_until_ms),
        )];
        let unique = [id.as_slice(), &[3, attempt as u8]].concat();
        add_audit(&mut batch, records, &unique)?;
        let timer = io.block_on(timers::get(kv, KIND, id))?;
        if let Some(timer) = timer {
            let schedule = timers::plan_move(&timer, action.now_ms)?;
            batch.preconditions.extend(schedule.preconditions);
            batch.writes.extend(schedule.writes);
        }
        if apply(io, kv, batch, action.guard)? == Applied::Committed {
            return Ok(());
        }
    }
    Err(RequestError::Contention)
}

/// What an operator action on an existing request records.
struct Planned {
    /// The operator record's event.
    event: &'static str,
    /// Its detail.
    detail: &'static str,
    /// Tells this action's audit keys from another's at the same instant.
    tag: u8,
}

/// An operator action on request `id`: the policy's plan (`plan`), the
/// operator's record, the plugin's entries and the timer moved to now, in
/// one transaction, planned again while steps keep moving the request.
fn act_on(
    call: impl Fn() -> Arc<CallContext>,
    io: &tokio::runtime::Handle,
    kv: &dyn Kv,
    id: &[u8; 32],
    action: Action<'_>,
    planned: Planned,
    plan: impl Fn(Arc<CallContext>) -> Result<Result<StepCommit, PolicyError>, CallError>,
) -> Result<(), RequestError> {
    let Action {
        actor,
        now_ms,
        guard,
    } = action;
    for attempt in 0..ATTEMPTS {
        let context = call();
        let plugin_actor = context.actor.clone();
        let commit = plan(context)?.map_err(RequestError::Refused)?;
        let timer = io.block_on(timers::get(kv, KIND, id))?;
        let mut records = vec![record(
            now_ms,
            actor,
            planned.event,
            vec![format!("takedown:{}", hex(id))],
            planned.detail.to_owned(),
        )];
        records.extend(plugin_records(&commit, now_ms, &plugin_actor)?);
        let mut batch = commit.batch;
        let unique = [id.as_slice(), &[planned.tag, attempt as u8]].concat();
        add_audit(&mut batch, records, &unique)?;
        let schedule = match &timer {
            Some(timer) => timers::plan_move(timer, now_ms)?,
            None => timers::plan_schedule(KIND, id, now_ms, None, &TimerState::default())?,
        };
        batch.preconditions.extend(schedule.preconditions);
        batch.writes.extend(schedule.writes);
        if apply(io, kv, batch, guard)? == Applied::Committed {
            return Ok(());
        }
    }
    Err(RequestError::Contention)
}

/// How an action's commit went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Applied {
    Committed,
    /// A guard of the plan failed (a step, another request or host moved
    /// what it read) or its deadline passed: nothing was written; plan
    /// again.
    Lost,
}

/// Commits an action's `batch` under `guard` (checked first). The swap
/// guard failing is [`RequestError::Swapped`]: the plugin that planned the
/// batch is no longer the current one.
fn apply(
    io: &tokio::runtime::Handle,
    kv: &dyn Kv,
    batch: Batch,
    guard: &[Precondition],
) -> Result<Applied, RequestError> {
    match io.block_on(kv.apply(&guarded(batch, guard)))? {
        Outcome::Committed => Ok(Applied::Committed),
        Outcome::PreconditionFailed { index } if (index as usize) < guard.len() => {
            Err(RequestError::Swapped)
        }
        Outcome::PreconditionFailed { .. } | Outcome::DeadlinePassed => Ok(Applied::Lost),
    }
}

/// A 32-byte id as it is shown.
fn hex(id: &[u8; 32]) -> String {
    custodian_core::content::ObjectId(*id).to_hex()
}

#[cfg(test)]
mod kind_tests {
    use super::*;

    #[test]
    fn a_refusal_keeps_the_policys_kind_and_a_refused_host_built_argument_is_internal() {
        let cases = [
            (
                RequestError::Refused(PolicyError::InvalidArgument("x".into())),
                ErrorKind::InvalidArgument,
            ),
            (
                RequestError::Refused(PolicyError::PreconditionFailed("x".into())),
                ErrorKind::PreconditionFailed,
            ),
            (RequestError::Call(CallError::Busy), ErrorKind::Busy),
            (
                RequestError::Call(CallError::Input("x".into())),
                ErrorKind::Internal,
            ),
            (
                RequestError::Kv(KvError::Unavailable("x".into())),
                ErrorKind::Unavailable,
            ),
            (
                RequestError::Kv(KvError::InvalidArgument("x".into())),
                ErrorKind::Internal,
            ),
            (
                RequestError::Timer(TimerError::InvalidArgument("x".into())),
                ErrorKind::Internal,
            ),
            (
                RequestError::Timer(TimerError::Contention),
                ErrorKind::Unavailable,
            ),
            (RequestError::Exists("x".into()), ErrorKind::Conflict),
            (RequestError::Contention, ErrorKind::Unavailable),
            (RequestError::Swapped, ErrorKind::Unavailable),
        ];
        for (error, kind) in cases {
            assert_eq!(error.kind(), kind, "{error:?}");
        }
    }
}

#[cfg(test)]
mod bound_tests {
    use super::*;
    use custodian_core::timers::{AuditEntry, MAX_STEP_AUDIT};
    use custodian_kv::MAX_BATCH_OPS;

    fn entries(n: usize) -> Vec<AuditEntry> {
        (0..n)
            .map(|i| AuditEntry {
                event: "E".into(),
                targets: vec![format!("t:{i}")],
                detail: None,
            })
            .collect()
    }

    fn writes(n: usize) -> Batch {
        let partition = custodian_kv::Partition::new("takedown").unwrap();
        Batch {
            preconditions: Vec::new(),
            writes: (0..n)
                .map(|i| Write::Put {
                    partition: partition.clone(),
                    key: (i as u64).to_be_bytes().to_vec(),
                    value: vec![1],
                })
                .collect(),
        }
    }

    #[test]
    fn a_plan_with_any_count_of_audit_entries_is_refused_past_the_bound_and_never_panics() {
        // Around every byte and batch boundary an index or a sum could
        // cross, and far past them.
        for n in [
            0,
            1,
            MAX_STEP_AUDIT,
            MAX_STEP_AUDIT + 1,
            61,
            62,
            253,
            254,
            255,
            256,
            257,
            10_000,
        ] {
            let commit = StepCommit {
                batch: Batch::default(),
                audit: entries(n),
            };
            let got = plugin_records(&commit, 1, "plugin:takedown@x");
            if n <= MAX_STEP_AUDIT {
                assert_eq!(got.unwrap().len(), n);
            } else {
                let error = got.unwrap_err();
                assert!(matches!(error, RequestError::Invalid(_)), "{n}: {error:?}");
                assert_eq!(error.kind(), ErrorKind::Internal);
                assert!(error.to_string().contains(&n.to_string()), "{error}");
            }
        }
    }

    #[test]
    fn a_plan_with_too_many_operations_is_the_plugins_fault_not_the_kvs() {
        for n in [MAX_BATCH_OPS + 1, 4 * MAX_BATCH_OPS, 100_000] {
            let commit = StepCommit {
                batch: writes(n),
                audit: Vec::new(),
            };
            let error = plugin_records(&commit, 1, "plugin:takedown@x").unwrap_err();
            assert!(matches!(error, RequestError::Invalid(_)), "{n}: {error:?}");
        }
    }

    #[test]
    fn more_audit_records_than_a_byte_indexes_fail_instead_of_wrapping() {
        let records: Vec<Record> = (0..300)
            .map(|i| record(1, "operator:x", "E", vec![format!("t:{i}")], String::new()))
            .collect();
        let mut batch = Batch::default();
        let error = add_audit(&mut batch, records, b"unique").unwrap_err();
        assert!(matches!(error, RequestError::Invalid(_)), "{error:?}");
    }
}
