//! Purge and version-verification jobs run by the server, with progress.
//!
//! A job is the work of `custodian versions verify` or `custodian purge
//! delete`, started by an API call and run as a task on the server's
//! runtime, so a client gets an id at once and polls for progress and the
//! report instead of holding a request open for the length of a purge.
//!
//! A job runs on the host that started it. With a [`Board`] (as `serve`
//! runs them) every host publishes its jobs to the KV, so any host sharing
//! the KV answers for any job and a finished job outlives a restart (see
//! [`board`]). A job running when its host stops or dies is abandoned
//! where it stands. Nothing is lost by that: a verification reads and
//! changes nothing, and a purge carries out a plan whose every deletion is
//! an exact version re-decided on each run (a version already gone is
//! reported `already_absent`), so the client starts the same job again.
//!
//! The registry is bounded twice: at most [`JobLimits::max_running`] jobs
//! run at once (a start beyond is refused `busy`, so a client cannot
//! queue unbounded store traffic and plugin calls), and finished jobs are
//! forgotten oldest first beyond [`JobLimits::max_finished`] jobs or
//! [`JobLimits::max_result_bytes`] bytes of reports, since each report is
//! held in memory until it is forgotten.

pub mod board;
mod inputs;

pub use board::Board;
pub use inputs::{
    ManifestFormat, ManifestText, PurgeInputs, PurgeRequest, VerifyInputs, VerifyRequest,
};

use std::collections::{BTreeMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures::FutureExt;
use serde_json::{Value, json};

use custodian_base::clock::Clock;
use custodian_base::error::ErrorKind;
use custodian_core::decisions::purge::PurgeJudge;
use custodian_core::purge::run::purge_observed;
use custodian_core::purge::{PurgeError, PurgeFailure};
use custodian_core::versions::hops::HopPolicy;
use custodian_core::versions::verify::{VerifyOptions, verify_observed};
use custodian_object::ObjectStore;
use custodian_runtime::policy::retention::RetentionOracle;

/// Jobs running at once by default: each runs up to 16 store calls and
/// its plugin calls at a time, so a few saturate a store without starving
/// the API's own requests.
pub const MAX_RUNNING: usize = 4;

/// Finished jobs kept by default: enough for a client to read the report
/// of a job it started a while ago, few enough that the registry's memory
/// stays small.
pub const MAX_FINISHED: usize = 256;

/// Bytes of finished jobs' reports kept by default: a report lists every
/// pin or version, so a few large runs would otherwise hold hundreds of
/// megabytes until 256 newer jobs push them out.
pub const MAX_RESULT_BYTES: usize = 64 << 20;

/// How many jobs the registry runs and remembers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobLimits {
    /// Jobs running at once; a start beyond is refused `busy`.
    pub max_running: usize,
    /// Finished jobs remembered; older ones are forgotten first.
    pub max_finished: usize,
    /// Bytes of reports remembered; older jobs are forgotten first, but
    /// the newest finished job is always kept so its client can read it.
    pub max_result_bytes: usize,
}

impl Default for JobLimits {
    fn default() -> Self {
        Self {
            max_running: MAX_RUNNING,
            max_finished: MAX_FINISHED,
            max_result_bytes: MAX_RESULT_BYTES,
        }
    }
}

/// What a job does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobKind {
    /// `custodian versions verify`.
    Verify,
    /// `custodian purge delete`.
    Purge,
}

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Still working.
    Running,
    /// Done, and the CLI would have exited 0.
    Succeeded,
    /// Done, and the CLI would have exited non-zero: a pin failed, the
    /// plan was refused, a store or plugin call failed, or the job was
    /// abandoned. The report, when there is one, is still the result.
    Failed,
}

/// A job's id: 24 lowercase hex digits, the start time in ms (12 digits)
/// and 48 random bits, so ids sort by start and do not repeat across the
/// hosts sharing a KV. Not a secret: who may read jobs is the
/// read-access setting's decision.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct JobId(String);

impl JobId {
    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Where the API shows the job.
    pub fn href(&self) -> String {
        format!("/v1/jobs/{}", self.0)
    }
}

impl std::fmt::Display for JobId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// How far a job has come, as its library reports it: pins decided for
/// a verification, archive prefixes and keys retired for a purge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Progress {
    /// Items done.
    pub done: u64,
    /// Items in all; `None` until the library has counted them.
    pub total: Option<u64>,
}

/// Written by the job's task, read by the API without taking the
/// registry's lock on every update.
#[derive(Debug, Default)]
struct ProgressCell {
    done: AtomicU64,
    /// `u64::MAX` until the total is known.
    total: AtomicU64,
}

impl ProgressCell {
    fn new() -> Self {
        Self {
            done: AtomicU64::new(0),
            total: AtomicU64::new(u64::MAX),
        }
    }

    fn set(&self, done: usize, total: usize) {
        self.total.store(total as u64, Ordering::Release);
        self.done.fetch_max(done as u64, Ordering::AcqRel);
    }

    fn read(&self) -> Progress {
        let total = self.total.load(Ordering::Acquire);
        Progress {
            done: self.done.load(Ordering::Acquire),
            total: (total != u64::MAX).then_some(total),
        }
    }
}

/// A job as the API shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobView {
    /// Its id.
    pub id: JobId,
    /// What it does.
    pub kind: JobKind,
    /// Where it is.
    pub state: JobState,
    /// The server's name of the store it works on.
    pub store: String,
    /// The host running it, when jobs are shared.
    pub node: Option<String>,
    /// When it started, ms since the epoch.
    pub started_ms: u64,
    /// When it finished.
    pub finished_ms: Option<u64>,
    /// How far it has come.
    pub progress: Progress,
    /// Why it failed.
    pub error: Option<String>,
    /// The report the CLI prints with `--json`, once finished (a failed
    /// purge's partial report included).
    pub result: Option<Value>,
}

impl JobView {
    /// The job with its result (`GET /v1/jobs/{id}`).
    pub fn to_json(&self) -> Value {
        let mut document = self.summary_json();
        if let Value::Object(fields) = &mut document {
            fields.insert("result".into(), self.result.clone().unwrap_or(Value::Null));
        }
        document
    }

    /// The job without its result (`GET /v1/jobs`): a list of reports
    /// could be hundreds of megabytes.
    pub fn summary_json(&self) -> Value {
        json!({
            "id": self.id,
            "kind": self.kind,
            "state": self.state,
            "store": self.store,
            "node": self.node,
            "started_ms": self.started_ms,
            "finished_ms": self.finished_ms,
            "progress": self.progress,
            "error": self.error,
            "href": self.id.href(),
        })
    }
}

/// What a verification runs against: fetched when it starts, so a plugin
/// swapped meanwhile does not change a job under way.
#[derive(Clone)]
pub struct VerifyDeps {
    /// The store named by the inputs.
    pub store: Arc<dyn ObjectStore>,
    /// Where a missing version moved (the archive plugin).
    pub archive: Arc<dyn HopPolicy>,
    /// For the job's times.
    pub clock: Arc<dyn Clock>,
}

/// What a purge runs against: fetched when it starts, so a plugin swapped
/// meanwhile does not change a job under way.
#[derive(Clone)]
pub struct PurgeDeps {
    /// The store named by the inputs.
    pub store: Arc<dyn ObjectStore>,
    /// Which versions may go (the purge plugin).
    pub purge: Arc<dyn PurgeJudge>,
    /// Which versions must stay (the retention plugin, with the server's
    /// settings).
    pub retention: Arc<dyn RetentionOracle>,
    /// "Now" for the policies, read once when the job starts (a client
    /// cannot choose it, unlike the CLI's `--now`: that would let a
    /// caller step past retention), and the job's times.
    pub clock: Arc<dyn Clock>,
}

/// How a job ended.
struct Outcome {
    result: Option<Value>,
    error: Option<String>,
}

struct Entry {
    id: JobId,
    kind: JobKind,
    store: String,
    state: JobState,
    started_ms: u64,
    finished_ms: Option<u64>,
    progress: Arc<ProgressCell>,
    error: Option<String>,
    /// Kept as text: a tree of JSON values is several times larger.
    result: Option<String>,
}

impl Entry {
    fn view(&self, node: Option<&str>) -> JobView {
        JobView {
            id: self.id.clone(),
            kind: self.kind,
            state: self.state,
            store: self.store.clone(),
            node: node.map(str::to_owned),
            started_ms: self.started_ms,
            finished_ms: self.finished_ms,
            progress: self.progress.read(),
            error: self.error.clone(),
            result: self
                .result
                .as_deref()
                .and_then(|text| serde_json::from_str(text).ok()),
        }
    }
}

#[derive(Default)]
struct Registry {
    next_seq: u64,
    running: usize,
    /// By start order; a few hundred entries at most, so finding one by
    /// id is a scan.
    entries: BTreeMap<u64, Entry>,
    /// Finished jobs in the order they finished, for forgetting.
    finished: VecDeque<u64>,
    result_bytes: usize,
}

struct Shared {
    limits: JobLimits,
    registry: Mutex<Registry>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Registry> {
        // Every critical section leaves the registry consistent, so a
        // panic elsewhere while holding the lock loses nothing.
        self.registry.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn finish(&self, seq: u64, finished_ms: u64, outcome: Outcome) {
        let mut registry = self.lock();
        let result = outcome.result.map(|value| value.to_string());
        let bytes = result.as_ref().map_or(0, String::len);
        let Some(entry) = registry.entries.get_mut(&seq) else {
            return;
        };
        if entry.state != JobState::Running {
            return;
        }
        entry.state = if outcome.error.is_some() {
            JobState::Failed
        } else {
            JobState::Succeeded
        };
        entry.finished_ms = Some(finished_ms);
        entry.error = outcome.error;
        entry.result = result;
        registry.running -= 1;
        registry.result_bytes += bytes;
        registry.finished.push_back(seq);
        while registry.finished.len() > 1
            && (registry.finished.len() > self.limits.max_finished
                || registry.result_bytes > self.limits.max_result_bytes)
        {
            let Some(oldest) = registry.finished.pop_front() else {
                break;
            };
            if let Some(forgotten) = registry.entries.remove(&oldest) {
                registry.result_bytes -= forgotten.result.as_ref().map_or(0, String::len);
            }
        }
    }
}

/// Records the job's end even if its task panics or is dropped (the
/// runtime shutting down), so the running count always comes back down.
struct Finisher {
    shared: Arc<Shared>,
    clock: Arc<dyn Clock>,
    seq: u64,
}

impl Finisher {
    fn finish(self, outcome: Outcome) {
        self.shared.finish(self.seq, self.clock.now_ms(), outcome);
    }
}

impl Drop for Finisher {
    fn drop(&mut self) {
        // After `finish` the job is no longer running, and this is a no-op.
        self.shared.finish(
            self.seq,
            self.clock.now_ms(),
            Outcome {
                result: None,
                error: Some("the job was abandoned: the server is shutting down".into()),
            },
        );
    }
}

/// The server's jobs: started here, run as tasks on the server's runtime,
/// read back by id. In memory only, so a restart forgets them; the work
/// is safe to start again (a verification changes nothing, a purge
/// re-decides every exact version of its plan). See the module doc for
/// the bounds.
pub struct Jobs {
    shared: Arc<Shared>,
    board: Option<Arc<Board>>,
}

impl Default for Jobs {
    fn default() -> Self {
        Self::with_limits(JobLimits::default())
    }
}

/// A job as the KV shows it must be published: `view` with its report.
fn published(shared: &Shared, seq: u64, node: Option<&str>) -> Option<(JobView, Option<String>)> {
    let registry = shared.lock();
    let entry = registry.entries.get(&seq)?;
    Some((entry.view(node), entry.result.clone()))
}

/// Publishes job `seq` of `shared` to `board`, logging a failure (the
/// next publication tries again; readers elsewhere see older progress
/// meanwhile).
async fn publish(board: &Board, shared: &Shared, seq: u64) {
    let Some((mut view, report)) = published(shared, seq, Some(board.node())) else {
        return;
    };
    view.result = None;
    if let Err(error) = board.publish(&view, report.as_deref()).await {
        tracing::warn!(job = %view.id, "cannot publish the job's record: {error}");
    }
}

impl Jobs {
    /// No jobs yet, with the default limits.
    pub fn new() -> Self {
        Self::default()
    }

    /// No jobs yet, with `limits` (each at least 1).
    pub fn with_limits(limits: JobLimits) -> Self {
        let limits = JobLimits {
            max_running: limits.max_running.max(1),
            max_finished: limits.max_finished.max(1),
            max_result_bytes: limits.max_result_bytes,
        };
        Self {
            shared: Arc::new(Shared {
                limits,
                registry: Mutex::new(Registry::default()),
            }),
            board: None,
        }
    }

    /// No jobs yet, with `limits`, publishing every job to `board`.
    pub fn shared(limits: JobLimits, board: Board) -> Self {
        Self {
            board: Some(Arc::new(board)),
            ..Self::with_limits(limits)
        }
    }

    fn node(&self) -> Option<&str> {
        self.board.as_deref().map(Board::node)
    }

    /// Starts verifying `inputs`' pins against `deps.store`.
    ///
    /// # Errors
    /// 400 `invalid_argument` when the store does not keep versions; 503
    /// `busy` when [`JobLimits::max_running`] jobs are running; 500 when
    /// called outside the server's runtime.
    pub fn start_verify(&self, inputs: VerifyInputs, deps: VerifyDeps) -> Result<JobId, JobError> {
        require_versioned(deps.store.as_ref(), &inputs.store)?;
        let VerifyInputs {
            store: name,
            pins,
            aliases,
        } = inputs;
        let VerifyDeps {
            store,
            archive,
            clock,
        } = deps;
        self.start(JobKind::Verify, name, clock, move |progress| async move {
            let report = verify_observed(
                store.as_ref(),
                &pins,
                &aliases,
                archive.as_ref(),
                VerifyOptions::default(),
                &move |done, total| progress.set(done, total),
            )
            .await;
            match report {
                Ok(report) => {
                    let failed = report.problems.len();
                    Outcome {
                        result: Some(report.to_json()),
                        // The CLI's exit status: 1 when a pin failed.
                        error: (failed > 0)
                            .then(|| format!("{failed} of {} pins failed", pins.len())),
                    }
                }
                Err(error) => Outcome {
                    result: None,
                    error: Some(error.to_string()),
                },
            }
        })
    }

    /// Starts carrying out `inputs`' plan on `deps.store`, asking the
    /// policies as of `deps.clock` now.
    ///
    /// # Errors
    /// As [`Jobs::start_verify`].
    pub fn start_purge(&self, inputs: PurgeInputs, deps: PurgeDeps) -> Result<JobId, JobError> {
        require_versioned(deps.store.as_ref(), &inputs.store)?;
        let PurgeInputs { store: name, plan } = inputs;
        let PurgeDeps {
            store,
            purge,
            retention,
            clock,
        } = deps;
        let now_ms = clock.now_ms();
        let remote = name.clone();
        self.start(JobKind::Purge, name, clock, move |progress| async move {
            let outcome = purge_observed(
                store.as_ref(),
                &plan,
                purge.as_ref(),
                retention.as_ref(),
                now_ms,
                &move |done, total| progress.set(done, total),
            )
            .await;
            purge_outcome(outcome, remote)
        })
    }

    /// Every job this host remembers, newest first.
    pub fn list(&self) -> Vec<JobView> {
        let registry = self.shared.lock();
        let node = self.node();
        registry
            .entries
            .values()
            .rev()
            .map(|e| e.view(node))
            .collect()
    }

    /// The job `id`, if this host remembers it.
    pub fn get(&self, id: &str) -> Option<JobView> {
        let registry = self.shared.lock();
        registry
            .entries
            .values()
            .find(|entry| entry.id.as_str() == id)
            .map(|entry| entry.view(self.node()))
    }

    /// Every job this host remembers or any host published, newest
    /// first; this host's own are as it knows them now.
    ///
    /// # Errors
    /// 503 `unavailable` when the board cannot be read.
    pub async fn list_everywhere(&self) -> Result<Vec<JobView>, JobError> {
        let mut jobs = self.list();
        if let Some(board) = &self.board {
            let published = board.list().await.map_err(board_error)?;
            let known: std::collections::BTreeSet<JobId> =
                jobs.iter().map(|job| job.id.clone()).collect();
            jobs.extend(published.into_iter().filter(|job| !known.contains(&job.id)));
            // Ids sort by start time.
            jobs.sort_by(|a, b| b.id.as_str().cmp(a.id.as_str()));
        }
        Ok(jobs)
    }

    /// The job `id`, from this host or the board.
    ///
    /// # Errors
    /// 404 `not_found` when no host remembers it; 503 `unavailable` when
    /// the board cannot be read.
    pub async fn find(&self, id: &str) -> Result<JobView, JobError> {
        if let Some(job) = self.get(id) {
            return Ok(job);
        }
        if let Some(board) = &self.board
            && let Some(job) = board.get(id).await.map_err(board_error)?
        {
            return Ok(job);
        }
        Err(JobError::NotFound(format!(
            "no job {id:?}: only the last {} finished jobs are remembered{}",
            self.shared.limits.max_finished,
            if self.board.is_some() {
                ""
            } else {
                ", in this server's memory (a restart forgets them)"
            }
        )))
    }

    /// Jobs running now.
    pub fn running(&self) -> usize {
        self.shared.lock().running
    }

    /// Registers a job and spawns `work` with its progress cell.
    fn start<W, F>(
        &self,
        kind: JobKind,
        store: String,
        clock: Arc<dyn Clock>,
        work: W,
    ) -> Result<JobId, JobError>
    where
        W: FnOnce(Arc<ProgressCell>) -> F,
        F: Future<Output = Outcome> + Send + 'static,
    {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            JobError::Internal("jobs can only be started on the server's runtime".into())
        })?;
        let started_ms = clock.now_ms();
        let progress = Arc::new(ProgressCell::new());
        let (seq, id) = {
            let mut registry = self.shared.lock();
            if registry.running >= self.shared.limits.max_running {
                return Err(JobError::Busy(format!(
                    "{} jobs are running, the most the server runs at once: retry when one has \
                     finished",
                    registry.running
                )));
            }
            let seq = registry.next_seq;
            registry.next_seq += 1;
            let id = new_id(started_ms)?;
            registry.running += 1;
            registry.entries.insert(
                seq,
                Entry {
                    id: id.clone(),
                    kind,
                    store,
                    state: JobState::Running,
                    started_ms,
                    finished_ms: None,
                    progress: progress.clone(),
                    error: None,
                    result: None,
                },
            );
            (seq, id)
        };
        let finisher = Finisher {
            shared: self.shared.clone(),
            clock,
            seq,
        };
        let work = work(progress);
        let board = self.board.clone();
        let shared = self.shared.clone();
        runtime.spawn(async move {
            let work = AssertUnwindSafe(work).catch_unwind();
            tokio::pin!(work);
            // One task writes the job's record, so a progress write can
            // never land after the final one.
            let caught = match &board {
                None => work.await,
                Some(board) => {
                    let mut refresh = tokio::time::interval(board::PROGRESS_EVERY);
                    loop {
                        tokio::select! {
                            caught = &mut work => break caught,
                            _ = refresh.tick() => publish(board, &shared, seq).await,
                        }
                    }
                }
            };
            let outcome = match caught {
                Ok(outcome) => outcome,
                Err(panic) => Outcome {
                    result: None,
                    error: Some(format!("the job panicked: {}", panic_message(&*panic))),
                },
            };
            finisher.finish(outcome);
            if let Some(board) = &board {
                publish(board, &shared, seq).await;
                if let Err(error) = board.forget_old().await {
                    tracing::warn!("cannot forget old job records: {error}");
                }
            }
        });
        Ok(id)
    }
}

/// Why a job could not be started or found. The API answers each with
/// its own status (see `http::jobs`); the jobs themselves report failure
/// in their outcome, not here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    /// The request is malformed, or names a store jobs cannot run on.
    #[error("{0}")]
    InvalidArgument(String),
    /// No host remembers the job.
    #[error("{0}")]
    NotFound(String),
    /// As many jobs as the server runs at once are running.
    #[error("{0}")]
    Busy(String),
    /// The shared job records cannot be read.
    #[error("{0}")]
    Unavailable(String),
    /// The server cannot start a job at all (no runtime, no randomness).
    #[error("{0}")]
    Internal(String),
}

impl JobError {
    /// What kind of failure this is (see [`ErrorKind`]).
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::InvalidArgument(_) => ErrorKind::InvalidArgument,
            Self::NotFound(_) => ErrorKind::NotFound,
            Self::Busy(_) => ErrorKind::Busy,
            Self::Unavailable(_) => ErrorKind::Unavailable,
            Self::Internal(_) => ErrorKind::Internal,
        }
    }

    /// What went wrong.
    pub fn into_message(self) -> String {
        match self {
            Self::InvalidArgument(m)
            | Self::NotFound(m)
            | Self::Busy(m)
            | Self::Unavailable(m)
            | Self::Internal(m) => m,
        }
    }
}

/// A fresh job id for a job started at `started_ms` (see [`JobId`]).
fn new_id(started_ms: u64) -> Result<JobId, JobError> {
    let mut random = [0u8; 6];
    getrandom::fill(&mut random)
        .map_err(|e| JobError::Internal(format!("no randomness for a job id: {e}")))?;
    // 48 bits of milliseconds last until the year 10889.
    Ok(JobId(format!(
        "{:012x}{}",
        started_ms & 0xffff_ffff_ffff,
        hex::encode(random)
    )))
}

/// The board could not be read. Whatever the KV's kind, a job's client
/// can only wait for the records to be readable again: `JobError` names
/// no corrupt or internal board, so every board failure is unavailable
/// (the message carries the KV's causes).
fn board_error(error: custodian_kv::KvError) -> JobError {
    JobError::Unavailable(format!(
        "cannot read the shared job records: {}",
        error.to_line()
    ))
}

/// Refuses a store without versions before a job starts (the libraries
/// would refuse it too, but only once the job is running).
fn require_versioned(store: &dyn ObjectStore, name: &str) -> Result<(), JobError> {
    if store.versioned() {
        Ok(())
    } else {
        Err(JobError::InvalidArgument(format!(
            "the store {name:?} does not have versioning enabled: exact versions cannot be \
             verified or purged"
        )))
    }
}

/// The purge's outcome as the CLI prints it with `--json`: the report
/// (partial after a failure), `ok`, and the error and its kind.
fn purge_outcome(
    outcome: Result<custodian_core::purge::report::PurgeReport, PurgeFailure>,
    remote: String,
) -> Outcome {
    let (mut report, error): (_, Option<PurgeError>) = match outcome {
        Ok(report) => (report, None),
        Err(PurgeFailure { error, partial }) => (partial, Some(error)),
    };
    report.remote = remote;
    let mut document = report.to_json();
    if let Value::Object(fields) = &mut document {
        fields.insert("ok".into(), json!(error.is_none()));
        if let Some(error) = &error {
            fields.insert("error".into(), json!(error.to_string()));
            fields.insert("kind".into(), json!(error.kind()));
        }
    }
    let error = error.map(|error| {
        let deleted: usize = report
            .deleted
            .iter()
            .map(|d| d.deleted_version_ids.len())
            .sum();
        if deleted > 0 {
            format!("the purge stopped after deleting {deleted} versions (listed in the result): {error}")
        } else {
            format!("the purge deleted nothing: {error}")
        }
    });
    Outcome {
        result: Some(document),
        error,
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

#[cfg(test)]
mod tests;
