//! A step in progress: what it read and the commit it builds, with how a
//! step is loaded and finished. Every phase works on a [`Step`];
//! [`crate::step`] loads one, runs the phase and finishes it.

use custodian_sdk::audit::Entry;
use custodian_sdk::kv::Page;
use custodian_sdk::steps::{StepResult, Timer};
use custodian_sdk::{Batch, Commit, Error, kv};

use crate::codec::{Id, encode, hex};
use crate::denial::DenialState;
use crate::keys::{self, PARTITION};
use crate::lock;
use crate::reads::Reads;
use crate::request::{self, APPLY_WINDOW_MS, Request};
use crate::state::{self, Phase, State};

/// Most audit entries one commit may carry (the host's bound).
pub const MAX_AUDIT: usize = 8;
/// Rows a step takes at most from each queue of its request that a phase
/// works through (the acquisition queue `todo`, the discovery queue
/// `discover`, pending removals `remove`), and so the page of each the
/// step's first read fetches. Eight objects a step share its fixed costs
/// (its rows, its commit, the host's timer and claim) and keep the audit
/// bound: a phase audits at most one entry an object ([`MAX_AUDIT`]).
pub const QUEUE_PAGE: u32 = 8;
/// The queues the step's first read fetches a page of.
const QUEUES: [&str; 3] = [keys::TODO, keys::DISCOVER, keys::REMOVE];
/// Most operations [`finish`] adds to a step's commit: the lock's guard
/// and write, the state's and the `denial` row's guards, the deadline,
/// the state and the `denial` row (7), rounded up.
const FINISH_OPS: usize = 8;
/// The soonest a waiting request is stepped again: a retain-until a
/// moment away is not worth a step per millisecond.
const MIN_WAIT_MS: u64 = 1_000;
/// The longest a waiting request sleeps between steps (the seed's hour):
/// a clock jump, a lock extended by an operator or a lost wake-up is
/// noticed within this.
const MAX_WAIT_MS: u64 = 3_600_000;

/// A step in progress: what was read, and the commit being built.
#[derive(Debug)]
pub struct Step {
    /// The request id.
    pub id: Id,
    /// The host's now for this step.
    pub now: u64,
    /// The request.
    pub request: Request,
    /// The state, as the step changes it.
    pub state: State,
    /// The state row as read, for the guards.
    pub old: Option<Vec<u8>>,
    /// The `denial` row as read (settled; `None` for a request filed
    /// before denial existed): every step is guarded on it, so no step
    /// lands after a withdrawal it did not see.
    pub denial: Option<Vec<u8>>,
    /// The `denial` row decoded (`None` with no row); a step that changes
    /// it (a removal's count) writes it with its commit.
    pub denial_state: Option<DenialState>,
    /// The request's lock row as read; the step's commit writes the lock
    /// its new state calls for, when that differs.
    pub lock: lock::Loaded,
    /// The first page of each of [`QUEUES`], read with the rows above
    /// and not yet taken ([`Step::queue`]).
    queues: Vec<(&'static str, Page)>,
    denial_dirty: bool,
    batch: Batch,
    audit: Vec<Entry>,
}

impl Step {
    /// Adds a write to the commit.
    pub fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.batch = std::mem::take(&mut self.batch).put(PARTITION, key, value);
    }

    /// Adds a write to another partition the policy is granted.
    pub fn put_in(&mut self, partition: &str, key: Vec<u8>, value: Vec<u8>) {
        self.batch = std::mem::take(&mut self.batch).put(partition, key, value);
    }

    /// Adds a delete to the commit.
    pub fn delete(&mut self, key: Vec<u8>) {
        self.batch = std::mem::take(&mut self.batch).delete(PARTITION, key);
    }

    /// Guards the commit on `key` still holding `observed` (`None`:
    /// absent).
    pub fn require_observed(&mut self, key: Vec<u8>, observed: Option<&[u8]>) {
        self.batch = std::mem::take(&mut self.batch).require_observed(PARTITION, key, observed);
    }

    /// Adds an audit entry; its targets start with the request id.
    pub fn event(&mut self, event: &str, targets: &[String], detail: Option<String>) {
        let mut all = vec![hex(&self.id)];
        all.extend_from_slice(targets);
        self.audit.push(Entry {
            event: event.to_owned(),
            targets: all,
            detail,
        });
    }

    /// Adds an audit entry built for a commit of its own as well
    /// ([`crate::copy`]'s intents); its targets start with the request id.
    pub fn audit(&mut self, entry: Entry) {
        self.audit.push(entry);
    }

    /// Operations a phase may still add to the commit: the bound of a
    /// commit's own rows ([`crate::denial::COMMIT_OPS`], which leaves the
    /// host its headroom), less what the commit holds and what [`finish`]
    /// will add.
    pub fn room(&self) -> usize {
        crate::denial::COMMIT_OPS.saturating_sub(self.batch.len() + FINISH_OPS)
    }

    /// Audit entries added so far.
    pub fn audit_len(&self) -> usize {
        self.audit.len()
    }

    /// The state row's key.
    pub fn state_key(&self) -> Vec<u8> {
        state::key(&self.id)
    }

    /// Whether this request may remove serving copies now: its denial is
    /// settled and not withdrawn (a request filed before denial existed
    /// denies nothing, so removes nothing).
    pub fn removing(&self) -> bool {
        self.denial_state
            .as_ref()
            .is_some_and(|d| d.settled && d.withdrawn_ms.is_none())
    }

    /// The first [`QUEUE_PAGE`] rows of the request's queue `tag` (one of
    /// `todo`, `discover`, `remove`): the page the step's first read
    /// fetched, or, once taken, a scan of it now.
    pub fn queue(&mut self, tag: &str) -> Result<Page, Error> {
        if let Some(at) = self.queues.iter().position(|(queue, _)| *queue == tag) {
            return Ok(self.queues.swap_remove(at).1);
        }
        let (start, end) = keys::range(tag, &self.id);
        kv::scan(PARTITION, &start, Some(&end), None, QUEUE_PAGE)
    }

    /// Counts a serving copy removed (in the `denial` row, written with
    /// the step's commit).
    pub fn count_removed(&mut self) {
        if let Some(denial) = &mut self.denial_state {
            denial.removed += 1;
            self.denial_dirty = true;
        }
    }
}

/// What every step reads first, in one snapshot read (a step's host
/// calls are its cost on a networked KV): the request a timer steps, its
/// `denial` row, its state row, its lock row, and the first page of each
/// queue a phase may work through, so the phase finds its work without a
/// read of its own (a page a step does not need is a few small rows more
/// in the same round trip).
pub struct Read {
    /// The request id.
    pub id: Id,
    /// The request.
    pub request: Request,
    /// Its denial state.
    pub denial: crate::denial::Loaded,
    /// Its state row as read, for [`load`].
    state: Option<Vec<u8>>,
    /// Its lock row as read, for [`load`].
    lock: Option<Vec<u8>>,
    /// The first page of each of [`QUEUES`].
    queues: Vec<(&'static str, Page)>,
}

/// Reads the rows every step of a timer's request needs ([`Read`]).
pub fn read(timer: &Timer) -> Result<Read, Error> {
    let id = Id::try_from(timer.reference.as_slice()).map_err(|_| {
        Error::InvalidArgument("a takedown timer's reference is a 32-byte request id".into())
    })?;
    let mut reads = Reads::new();
    let rows = [
        reads.get(PARTITION, request::key(&id)),
        reads.get(PARTITION, crate::denial::state_key(&id)),
        reads.get(PARTITION, state::key(&id)),
        reads.get(lock::PARTITION, lock::key(&id)),
    ];
    let pages = QUEUES.map(|tag| {
        (
            tag,
            reads.scan(PARTITION, keys::range(tag, &id), None, QUEUE_PAGE),
        )
    });
    let mut answers = reads.run()?;
    let [request, denial, state, lock] = rows.map(|at| answers.value(at));
    let (request, denial, state, lock) = (request?, denial?, state?, lock?);
    let queues = pages
        .into_iter()
        .map(|(tag, at)| Ok((tag, answers.page(at)?)))
        .collect::<Result<Vec<_>, Error>>()?;
    let request = request::decode_record(&request.ok_or_else(|| request::not_found(&id))?)?;
    let denial = crate::denial::loaded(denial, &request)?;
    Ok(Read {
        id,
        request,
        denial,
        state,
        lock,
        queues,
    })
}

/// The step of a timer whose request `read` holds, once its denial is
/// settled: decodes the state and the lock it read.
pub fn load(timer: &Timer, read: Read) -> Result<Step, Error> {
    let Read {
        id,
        request,
        denial,
        state,
        lock,
        queues,
    } = read;
    let (denial, denial_state) = (denial.raw, denial.state);
    let now = timer.now_ms;
    let loaded = state::loaded(state, &request, now)?;
    let lock = lock::loaded(&id, &request, lock)?;
    Ok(Step {
        id,
        now,
        request,
        state: loaded.state,
        old: loaded.raw,
        denial_state: denial.is_some().then_some(denial_state),
        denial,
        lock,
        queues,
        denial_dirty: false,
        batch: Batch::new(),
        audit: Vec::new(),
    })
}

/// When the request is stepped next. While it has work (seeding,
/// acquiring, verifying, discovering, removing, purging), at once: each
/// step is bounded by its own budgets, and the host's workers share out
/// due steps, so no delay is needed to keep one request from hogging a
/// host. Delays are for waiting: until the lock's retain-until in the
/// retain phase, for an hour under a legal hold (placing or clearing one
/// moves the timer to now), until the next re-sweep once purged. The
/// retention policy decides when retention ends (the retain-until it
/// answered at the filing), never this pace.
fn next_due(step: &Step) -> u64 {
    let now = step.now;
    let wait_until = |until: u64| {
        until.clamp(
            now.saturating_add(MIN_WAIT_MS),
            now.saturating_add(MAX_WAIT_MS),
        )
    };
    let state = &step.state;
    match state.phase {
        Phase::Retain if state.hold || step.lock.hold() => now.saturating_add(MAX_WAIT_MS),
        Phase::Retain => wait_until(step.lock.retain_until(state)),
        Phase::Purged => wait_until(state.next_purge_at),
        Phase::Seed
        | Phase::Acquire
        | Phase::Closure
        | Phase::Discover
        | Phase::Remove
        | Phase::Purging => now,
    }
}

/// Checks the stepped state and returns the commit: the new state guarded
/// on the old one, the lock it calls for (guarded on the lock as read),
/// the step's writes and audit entries, and when to step again.
pub fn finish(mut step: Step) -> Result<StepResult, Error> {
    if step.audit.is_empty() {
        let phase = step.state.phase.name().to_owned();
        step.event("PreservationCheckpoint", &[], Some(phase));
    }
    // A bug here must fail the step, not write a state no step can read.
    step.state.check(&step.request)?;
    let due = next_due(&step);
    if step.denial_dirty
        && let Some(denial) = &mut step.denial_state
    {
        denial.revision += 1;
        let value = encode(denial)?;
        step.put(crate::denial::state_key(&step.id), value);
    }
    let key = step.state_key();
    let value = encode(&step.state)?;
    let lock = step.lock.next(&step.request, &step.state);
    let batch = step
        .lock
        .write(std::mem::take(&mut step.batch), &step.id, &lock)
        .require_observed(PARTITION, key.clone(), step.old.as_deref())
        .require_observed(
            PARTITION,
            crate::denial::state_key(&step.id),
            step.denial.as_deref(),
        )
        .not_after(step.now.saturating_add(APPLY_WINDOW_MS))
        .put(PARTITION, key, value);
    if batch.len() > kv::MAX_BATCH_OPS || step.audit.len() > MAX_AUDIT {
        return Err(Error::InvalidArgument(format!(
            "a takedown step planned {} operations and {} audit entries",
            batch.len(),
            step.audit.len()
        )));
    }
    let mut commit = Commit::new(batch);
    for entry in step.audit {
        commit = commit.audit(entry);
    }
    // Never `done`: a purged request keeps being re-swept for late writes.
    Ok(commit.reschedule(due))
}
