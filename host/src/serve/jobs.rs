//! Purge and version-verification jobs run by the server, with progress.
//!
//! A job is the work of `custodian versions verify` or `custodian purge
//! delete`, started by an API call and run as a task on the server's
//! runtime, so a client gets an id at once and polls for progress and the
//! report instead of holding a request open for the length of a purge.
//!
//! Jobs live in memory only: a restart forgets them, and a job running at
//! shutdown is abandoned where it stands. Nothing is lost by that: a
//! verification reads and changes nothing, and a purge carries out a plan
//! whose every deletion is an exact version re-decided on each run (a
//! version already gone is reported `already_absent`), so the client
//! starts the same job again.
//!
//! The registry is bounded twice: at most [`JobLimits::max_running`] jobs
//! run at once (a start beyond is refused `busy`, so a client cannot
//! queue unbounded store traffic and plugin calls), and finished jobs are
//! forgotten oldest first beyond [`JobLimits::max_finished`] jobs or
//! [`JobLimits::max_result_bytes`] bytes of reports, since each report is
//! held in memory until it is forgotten.

use std::collections::{BTreeMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use axum::http::StatusCode;
use futures::FutureExt;
use serde::Deserialize;
use serde_json::{Value, json};

use super::http::ApiError;
use crate::clock::Clock;
use crate::object::ObjectStore;
use crate::policy::retention::RetentionOracle;
use crate::purge::judge::PurgeJudge;
use crate::purge::plan::Plan;
use crate::purge::run::purge_observed;
use crate::purge::{PurgeError, PurgeFailure};
use crate::versions::aliases::Aliases;
use crate::versions::hops::HopPolicy;
use crate::versions::pins::{Pin, parse_dvc, parse_json};
use crate::versions::verify::{VerifyOptions, verify_observed};

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
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JobKind {
    /// `custodian versions verify`.
    Verify,
    /// `custodian purge delete`.
    Purge,
}

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
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

/// A job's id: 16 lowercase hex digits, the start time in ms and a
/// counter, so ids sort by start and do not repeat within a process. Not
/// a secret: who may read jobs is the read-access setting's decision.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
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
            "started_ms": self.started_ms,
            "finished_ms": self.finished_ms,
            "progress": self.progress,
            "error": self.error,
            "href": self.id.href(),
        })
    }
}

/// One manifest of a verify request, sent inline.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestText {
    /// Its name: the `manifest` reports give its pins, and (without
    /// `format`) its format, as the CLI tells them by file name.
    pub name: String,
    /// Its contents.
    pub text: String,
    /// `json` or `dvc`; default: `dvc` for a name ending `.dvc`, `json`
    /// for `.json`, else `json` when the text starts with `{`.
    #[serde(default)]
    pub format: Option<ManifestFormat>,
    /// For DVC: the directory its outputs' keys are under (the `.dvc`
    /// file's directory relative to the DVC repository root, as the CLI's
    /// `--root` computes it); default: none, the key is the `path` alone.
    #[serde(default)]
    pub key_dir: Option<String>,
}

/// A pin manifest's format (see [`crate::versions::pins`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ManifestFormat {
    /// Custodian's JSON pins.
    Json,
    /// A DVC pointer file.
    Dvc,
}

/// The body of `POST /v1/jobs/verify`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyRequest {
    /// The server's name of the store.
    pub store: String,
    /// The pin manifests (at least one).
    pub pins: Vec<ManifestText>,
    /// The DVC remote whose `cloud:` entry to use, as `--dvc-remote`.
    #[serde(default)]
    pub dvc_remote: Option<String>,
    /// Archive task receipts, as `--receipts` (a receipt's `store` is the
    /// server's name of the store).
    #[serde(default)]
    pub receipts: Option<Vec<Value>>,
}

/// A verification's inputs, checked.
#[derive(Debug, Clone)]
pub struct VerifyInputs {
    store: String,
    pins: Vec<Pin>,
    aliases: Aliases,
}

impl VerifyInputs {
    /// Parses every manifest and receipt of `request`, as the CLI does.
    ///
    /// # Errors
    /// 400 `invalid_argument` naming the manifest, pin or receipt at fault.
    pub fn parse(request: VerifyRequest) -> Result<Self, ApiError> {
        if request.pins.is_empty() {
            return Err(ApiError::invalid(
                "pins: give at least one manifest ({\"name\", \"text\"})",
            ));
        }
        let mut pins = Vec::new();
        for manifest in &request.pins {
            if manifest.name.is_empty() {
                return Err(ApiError::invalid("pins: a manifest has an empty name"));
            }
            let format = manifest.format.unwrap_or_else(|| {
                if manifest.name.ends_with(".dvc") {
                    ManifestFormat::Dvc
                } else if manifest.name.ends_with(".json")
                    || manifest.text.trim_start().starts_with('{')
                {
                    ManifestFormat::Json
                } else {
                    ManifestFormat::Dvc
                }
            });
            let parsed = match format {
                ManifestFormat::Json => {
                    if manifest.key_dir.is_some() {
                        return Err(ApiError::invalid(format!(
                            "pins: {}: key_dir is for DVC manifests",
                            manifest.name
                        )));
                    }
                    parse_json(&manifest.text, &manifest.name)
                }
                ManifestFormat::Dvc => {
                    let mut key_dir = manifest.key_dir.clone().unwrap_or_default();
                    if !key_dir.is_empty() && !key_dir.ends_with('/') {
                        key_dir.push('/');
                    }
                    parse_dvc(
                        &manifest.text,
                        &manifest.name,
                        &key_dir,
                        request.dvc_remote.as_deref(),
                    )
                }
            };
            pins.extend(parsed.map_err(|e| ApiError::invalid(e.to_string()))?);
        }
        let aliases = match &request.receipts {
            Some(receipts) => {
                Aliases::from_receipts(receipts, &request.store, "the request's receipts")
                    .map_err(|e| ApiError::invalid(e.to_string()))?
            }
            None => Aliases::none(),
        };
        Ok(Self {
            store: request.store,
            pins,
            aliases,
        })
    }

    /// The server's name of the store.
    pub fn store(&self) -> &str {
        &self.store
    }

    /// The pins, in manifest order.
    pub fn pins(&self) -> &[Pin] {
        &self.pins
    }
}

/// The body of `POST /v1/jobs/purge`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PurgeRequest {
    /// The server's name of the store.
    pub store: String,
    /// The plan, as `purge delete --plan` reads it: the JSON document
    /// itself, or its text as a string.
    pub plan: Value,
}

/// A purge's inputs, checked.
#[derive(Debug, Clone)]
pub struct PurgeInputs {
    store: String,
    plan: Plan,
}

impl PurgeInputs {
    /// Validates `request`'s plan, as the CLI does.
    ///
    /// # Errors
    /// 400 `invalid_argument` saying what is wrong with the plan.
    pub fn parse(request: PurgeRequest) -> Result<Self, ApiError> {
        let parsed = match &request.plan {
            Value::String(text) => Plan::parse(text),
            document => Plan::parse(&document.to_string()),
        };
        let plan = parsed.map_err(|e| ApiError::invalid(e.to_string()))?;
        Ok(Self {
            store: request.store,
            plan,
        })
    }

    /// The server's name of the store.
    pub fn store(&self) -> &str {
        &self.store
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
    fn view(&self) -> JobView {
        JobView {
            id: self.id.clone(),
            kind: self.kind,
            state: self.state,
            store: self.store.clone(),
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
}

impl Default for Jobs {
    fn default() -> Self {
        Self::with_limits(JobLimits::default())
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
        }
    }

    /// Starts verifying `inputs`' pins against `deps.store`.
    ///
    /// # Errors
    /// 400 `invalid_argument` when the store does not keep versions; 503
    /// `busy` when [`JobLimits::max_running`] jobs are running; 500 when
    /// called outside the server's runtime.
    pub fn start_verify(&self, inputs: VerifyInputs, deps: VerifyDeps) -> Result<JobId, ApiError> {
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
    pub fn start_purge(&self, inputs: PurgeInputs, deps: PurgeDeps) -> Result<JobId, ApiError> {
        require_versioned(deps.store.as_ref(), &inputs.store)?;
        let PurgeInputs { store: name, plan } = inputs;
        let PurgeDeps {
            store,
            purge,
            retention,
            clock,
        } = deps;
        let now_ms = clock.now_ms();
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
            purge_outcome(outcome)
        })
    }

    /// Every job remembered, newest first.
    pub fn list(&self) -> Vec<JobView> {
        let registry = self.shared.lock();
        registry.entries.values().rev().map(Entry::view).collect()
    }

    /// The job `id`, if remembered.
    pub fn get(&self, id: &str) -> Option<JobView> {
        let registry = self.shared.lock();
        registry
            .entries
            .values()
            .find(|entry| entry.id.as_str() == id)
            .map(Entry::view)
    }

    /// The job `id`.
    ///
    /// # Errors
    /// 404 `not_found` when no such job is remembered.
    pub fn find(&self, id: &str) -> Result<JobView, ApiError> {
        self.get(id).ok_or_else(|| {
            ApiError::not_found(format!(
                "no job {id:?}: jobs are kept in memory (a restart forgets them) and only the \
                 last {} finished are remembered",
                self.shared.limits.max_finished
            ))
        })
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
    ) -> Result<JobId, ApiError>
    where
        W: FnOnce(Arc<ProgressCell>) -> F,
        F: Future<Output = Outcome> + Send + 'static,
    {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| ApiError::internal("jobs can only be started on the server's runtime"))?;
        let started_ms = clock.now_ms();
        let progress = Arc::new(ProgressCell::new());
        let (seq, id) = {
            let mut registry = self.shared.lock();
            if registry.running >= self.shared.limits.max_running {
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "busy",
                    format!(
                        "{} jobs are running, the most the server runs at once: retry when one \
                         has finished",
                        registry.running
                    ),
                ));
            }
            let seq = registry.next_seq;
            registry.next_seq += 1;
            let id = JobId(format!("{:016x}", (started_ms << 16) | (seq & 0xffff)));
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
        runtime.spawn(async move {
            let outcome = match AssertUnwindSafe(work).catch_unwind().await {
                Ok(outcome) => outcome,
                Err(panic) => Outcome {
                    result: None,
                    error: Some(format!("the job panicked: {}", panic_message(&*panic))),
                },
            };
            finisher.finish(outcome);
        });
        Ok(id)
    }
}

/// Refuses a store without versions before a job starts (the libraries
/// would refuse it too, but only once the job is running).
fn require_versioned(store: &dyn ObjectStore, name: &str) -> Result<(), ApiError> {
    if store.versioned() {
        Ok(())
    } else {
        Err(ApiError::invalid(format!(
            "the store {name:?} does not have versioning enabled: exact versions cannot be \
             verified or purged"
        )))
    }
}

/// The purge's outcome as the CLI prints it with `--json`: the report
/// (partial after a failure), `ok`, and the error and its kind.
fn purge_outcome(outcome: Result<crate::purge::report::PurgeReport, PurgeFailure>) -> Outcome {
    let (report, error): (_, Option<PurgeError>) = match outcome {
        Ok(report) => (report, None),
        Err(PurgeFailure { error, partial }) => (partial, Some(error)),
    };
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
mod tests {
    use std::sync::OnceLock;
    use std::time::Duration;

    use async_trait::async_trait;
    use bytes::Bytes;
    use tokio::sync::Semaphore;

    use super::*;
    use crate::bundled;
    use crate::clock::FixedClock;
    use crate::kv::memory::MemoryKv;
    use crate::object::memory::MemoryStore;
    use crate::object::{Metadata, ObjectMeta, PutCondition};
    use crate::policy::PolicyError;
    use crate::policy::archive::ArchivePolicy;
    use crate::policy::purge::PurgePolicy;
    use crate::policy::retention::{RetentionPolicy, RetentionRoute, Settings};
    use crate::purge::judge::{Candidate, Governance, Verdict};
    use crate::purge::plan::registry_key;
    use crate::runtime::{Limits, Plugin, Runtime, RuntimeConfig, Services, World};
    use crate::versions::digest::Digest;
    use crate::versions::verify::verify;

    /// When the test objects are written.
    const T0: u64 = 1_700_000_000_000;
    /// When the jobs run: a day later, past the retention below.
    const NOW: u64 = T0 + 86_400_000;
    const HOUR: u64 = 3_600_000;

    /// The bundled plugin of `world`, compiled once per test binary
    /// (compiling is the slow part; the runtime's ticker lives on in the
    /// plugins).
    fn plugin(world: World) -> Arc<Plugin> {
        static LOADED: OnceLock<BTreeMap<&'static str, Arc<Plugin>>> = OnceLock::new();
        let loaded = LOADED.get_or_init(|| {
            let runtime = Runtime::new(&RuntimeConfig {
                cache_dir: None,
                concurrent_calls: 32,
            })
            .unwrap();
            [World::Archive, World::Purge, World::Retention]
                .into_iter()
                .map(|world| {
                    let bytes = bundled::plugin(world).unwrap();
                    let plugin = runtime.load_bytes(bytes, &bundled::name(world)).unwrap();
                    (world.name(), Arc::new(plugin))
                })
                .collect()
        });
        loaded[world.name()].clone()
    }

    /// What a plugin granted nothing gets: a clock and the I/O runtime.
    fn services() -> Arc<Services> {
        let clock: Arc<dyn Clock> = Arc::new(FixedClock::new(NOW));
        Arc::new(Services {
            kv: Arc::new(MemoryKv::new(clock.clone())),
            stores: BTreeMap::new(),
            clock,
            io: tokio::runtime::Handle::current(),
            retention: None,
        })
    }

    fn archive() -> Arc<ArchivePolicy> {
        Arc::new(ArchivePolicy::new(plugin(World::Archive), services(), Limits::default()).unwrap())
    }

    fn purge_policy() -> Arc<PurgePolicy> {
        Arc::new(PurgePolicy::new(plugin(World::Purge), services(), Limits::default()).unwrap())
    }

    fn retention() -> Arc<RetentionRoute> {
        let policy = RetentionPolicy::new(plugin(World::Retention)).unwrap();
        let settings = Settings {
            retention_ms: HOUR,
            noncurrent_retention_ms: HOUR,
        };
        Arc::new(RetentionRoute::new(
            Arc::new(policy),
            settings,
            services(),
            Limits::default(),
        ))
    }

    fn store() -> Arc<dyn ObjectStore> {
        Arc::new(MemoryStore::versioned(Arc::new(FixedClock::new(T0))))
    }

    fn verify_deps(store: &Arc<dyn ObjectStore>) -> VerifyDeps {
        VerifyDeps {
            store: store.clone(),
            archive: archive(),
            clock: Arc::new(FixedClock::new(NOW)),
        }
    }

    fn purge_deps(store: &Arc<dyn ObjectStore>, judge: Arc<dyn PurgeJudge>) -> PurgeDeps {
        PurgeDeps {
            store: store.clone(),
            purge: judge,
            retention: retention(),
            clock: Arc::new(FixedClock::new(NOW)),
        }
    }

    async fn put(store: &dyn ObjectStore, key: &str, bytes: &[u8]) -> ObjectMeta {
        store
            .put_whole(
                key,
                Bytes::copy_from_slice(bytes),
                &PutCondition::Unconditional,
                &Metadata::new(),
                crate::checksum::crc64_nvme(bytes),
            )
            .await
            .unwrap_or_else(|e| panic!("publishing {key}: {e}"))
    }

    fn version(meta: &ObjectMeta) -> String {
        meta.version_id.clone().unwrap()
    }

    fn md5(bytes: &[u8]) -> String {
        Digest::Md5(String::new()).of(bytes)
    }

    fn manifest(name: &str, text: String) -> ManifestText {
        ManifestText {
            name: name.into(),
            text,
            format: None,
            key_dir: None,
        }
    }

    fn verify_request(manifests: Vec<ManifestText>) -> VerifyRequest {
        VerifyRequest {
            store: "serving".into(),
            pins: manifests,
            dvc_remote: None,
            receipts: None,
        }
    }

    /// One good pin in a JSON manifest, for jobs whose report is not the
    /// point.
    async fn one_good_pin(store: &dyn ObjectStore) -> VerifyInputs {
        let meta = put(store, "data/one.csv", b"1\n").await;
        let text = json!({"pins": [{"key": meta.key, "version_id": version(&meta),
                                    "md5": md5(b"1\n")}]});
        VerifyInputs::parse(verify_request(vec![manifest("one.json", text.to_string())])).unwrap()
    }

    /// The job once it has finished.
    async fn finished(jobs: &Jobs, id: &JobId) -> JobView {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        loop {
            let view = jobs.find(id.as_str()).unwrap();
            if view.state != JobState::Running {
                return view;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "still running: {view:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The bundled purge policy, made to wait at `key` until the gate
    /// opens: a job that is reliably still running.
    struct Gated {
        inner: Arc<PurgePolicy>,
        key: String,
        gate: Arc<Semaphore>,
    }

    #[async_trait]
    impl PurgeJudge for Gated {
        async fn judge(
            &self,
            candidate: &Candidate,
            governance: &Governance,
            now_ms: u64,
        ) -> Result<Verdict, PolicyError> {
            if candidate.key == self.key {
                let _open = self
                    .gate
                    .acquire()
                    .await
                    .map_err(|e| PolicyError::Unavailable(e.to_string()))?;
            }
            self.inner.judge(candidate, governance, now_ms).await
        }
    }

    /// A plan retiring the generic keys `keys` (each written once); the
    /// judge waits at `keys[last]` until the returned gate opens.
    async fn gated_purge(
        store: &Arc<dyn ObjectStore>,
        keys: &[&str],
    ) -> (PurgeInputs, PurgeDeps, Arc<Semaphore>) {
        let mut candidates = Vec::new();
        for key in keys {
            let meta = put(store.as_ref(), key, key.as_bytes()).await;
            candidates.push(json!({"pointer": "pins.json", "object": key,
                                   "version_id": version(&meta)}));
        }
        let inputs = PurgeInputs::parse(PurgeRequest {
            store: "serving".into(),
            plan: json!({ "candidates": candidates }),
        })
        .unwrap();
        let gate = Arc::new(Semaphore::new(0));
        let judge = Arc::new(Gated {
            inner: purge_policy(),
            key: keys[keys.len() - 1].into(),
            gate: gate.clone(),
        });
        (inputs, purge_deps(store, judge), gate)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_verify_job_over_good_and_bad_pins_finishes_with_the_counts_the_library_reports() {
        let store = store();
        let a = put(store.as_ref(), "data/a.csv", b"a,b\n1,2\n").await;
        let b = put(store.as_ref(), "data/b.csv", b"c,d\n3,4\n").await;
        let model = put(store.as_ref(), "model.bin", b"weights").await;
        let pins = json!({"pins": [
            {"key": "data/a.csv", "version_id": version(&a), "etag": a.etag,
             "size": a.size, "md5": md5(b"a,b\n1,2\n"), "hash": "md5"},
            {"key": "data/b.csv", "version_id": version(&b), "size": b.size + 1,
             "md5": md5(b"c,d\n3,4\n")},
            {"key": "data/c.csv", "version_id": "never-written", "md5": md5(b"")},
        ]});
        let dvc = format!(
            "outs:\n- md5: {}\n  size: {}\n  hash: md5\n  path: model.bin\n  cloud:\n    \
             store:\n      version_id: {}\n      etag: '{}'\n",
            md5(b"weights"),
            model.size,
            version(&model),
            model.etag
        );
        let inputs = VerifyInputs::parse(verify_request(vec![
            manifest("pins.json", pins.to_string()),
            manifest("models/model.bin.dvc", dvc),
        ]))
        .unwrap();
        assert_eq!(inputs.pins().len(), 4);
        let expected = verify(
            store.as_ref(),
            inputs.pins(),
            &Aliases::none(),
            archive().as_ref(),
        )
        .await
        .unwrap();
        assert_eq!((expected.checked.len(), expected.problems.len()), (2, 2));

        let jobs = Jobs::new();
        let id = jobs.start_verify(inputs, verify_deps(&store)).unwrap();
        let job = finished(&jobs, &id).await;

        assert_eq!(job.kind, JobKind::Verify);
        assert_eq!(job.store, "serving");
        // Pins failed: the CLI would exit 1, so the job failed, with the
        // report as its result.
        assert_eq!(job.state, JobState::Failed);
        assert_eq!(job.error.as_deref(), Some("2 of 4 pins failed"));
        assert_eq!(job.result, Some(expected.to_json()));
        assert_eq!(
            job.progress,
            Progress {
                done: 4,
                total: Some(4)
            }
        );
        assert!(job.finished_ms.is_some_and(|at| at >= job.started_ms));
        assert_eq!(job.started_ms, NOW);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_verify_job_over_good_pins_succeeds() {
        let store = store();
        let inputs = one_good_pin(store.as_ref()).await;
        let jobs = Jobs::new();
        let id = jobs.start_verify(inputs, verify_deps(&store)).unwrap();
        let job = finished(&jobs, &id).await;
        assert_eq!(job.state, JobState::Succeeded, "{job:?}");
        assert_eq!(job.error, None);
        let result = job.result.unwrap();
        assert_eq!(result["ok"], true);
        assert_eq!(result["checked"].as_array().unwrap().len(), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_purge_job_deletes_what_its_plan_allows_and_reports_it() {
        let store = store();
        let s = store.as_ref();
        let a1 = put(s, "gone/a", b"a one").await;
        let a2 = put(s, "gone/a", b"a two").await;
        let b1 = put(s, "gone/b", b"b one").await;
        let x1 = put(s, "src/x", b"x one").await;
        let x2 = put(s, "src/x", b"x two").await;
        // The archive registry of src/ maps x1 only: x2's bytes live
        // nowhere else, so it must stay.
        let registry = json!({"schema_version": 1, "status": "copied", "source": "src",
            "destination": "archive/src", "versions": [
                {"source_object": "src/x", "source_version_id": version(&x1),
                 "source_etag": x1.etag, "destination_object": "archive/src/x",
                 "destination_version_id": "w", "destination_etag": "f",
                 "size": x1.size, "delete_marker": false}]});
        let published = put(s, &registry_key("src"), registry.to_string().as_bytes()).await;
        let candidate = |object: &str, version_id: &str| json!({"pointer": "pins.json", "object": object, "version_id": version_id});
        let plan = json!({
            "candidates": [candidate("gone/a", &version(&a1)),
                           candidate("gone/b", &version(&b1)),
                           candidate("gone/b", "already-gone"),
                           candidate("src/x", &version(&x1))],
            "coordination": [{"receipt": registry, "coordination": {
                "registry_version_id": version(&published),
                "registry_etag": published.etag}}],
        });
        // Sent as text, as a client reading the plan file would.
        let inputs = PurgeInputs::parse(PurgeRequest {
            store: "serving".into(),
            plan: Value::String(plan.to_string()),
        })
        .unwrap();

        let jobs = Jobs::new();
        let id = jobs
            .start_purge(inputs, purge_deps(&store, purge_policy()))
            .unwrap();
        let job = finished(&jobs, &id).await;

        assert_eq!(job.kind, JobKind::Purge);
        assert_eq!(job.state, JobState::Succeeded, "{job:?}");
        let result = job.result.unwrap();
        assert_eq!(result["ok"], true);
        let sorted = |ids: [&ObjectMeta; 2]| {
            let mut ids = ids.map(version);
            ids.sort();
            ids.to_vec()
        };
        assert_eq!(
            result["deleted"],
            json!([
                {"pointer": "pins.json", "object": "gone/a", "version_id": version(&a1),
                 "deleted_version_ids": sorted([&a1, &a2])},
                {"pointer": "pins.json", "object": "gone/b", "version_id": version(&b1),
                 "deleted_version_ids": [version(&b1)]},
                {"pointer": "pins.json", "object": "src/x", "version_id": version(&x1),
                 "deleted_version_ids": [version(&x1)]},
            ])
        );
        assert_eq!(
            result["already_absent"],
            json!([candidate("gone/b", "already-gone")])
        );
        assert_eq!(
            result["retained_unmapped"],
            json!([{"pointer": registry_key("src"), "object": "src/x",
                    "version_id": version(&x2)}])
        );
        assert_eq!(result["retained"], json!([]));
        assert_eq!(
            job.progress,
            Progress {
                done: 3,
                total: Some(3)
            }
        );

        let left: Vec<(String, String)> = s
            .list_versions("", None, 1000)
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|v| (v.key, v.version_id))
            .collect();
        assert_eq!(
            left,
            [
                (registry_key("src"), version(&published)),
                ("src/x".to_owned(), version(&x2)),
            ]
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_refused_purge_fails_with_its_partial_report_and_deletes_nothing() {
        let store = store();
        let x1 = put(store.as_ref(), "src/x", b"x one").await;
        let registry = json!({"schema_version": 1, "status": "copied", "source": "src",
            "destination": "archive/src", "versions": []});
        put(
            store.as_ref(),
            &registry_key("src"),
            registry.to_string().as_bytes(),
        )
        .await;
        // The proof names a registry version that was never published.
        let plan = json!({
            "candidates": [{"pointer": "pins.json", "object": "src/x", "version_id": version(&x1)}],
            "coordination": [{"receipt": registry, "coordination": {
                "registry_version_id": "stale", "registry_etag": "stale"}}],
        });
        let inputs = PurgeInputs::parse(PurgeRequest {
            store: "serving".into(),
            plan,
        })
        .unwrap();
        let jobs = Jobs::new();
        let id = jobs
            .start_purge(inputs, purge_deps(&store, purge_policy()))
            .unwrap();
        let job = finished(&jobs, &id).await;
        assert_eq!(job.state, JobState::Failed);
        let error = job.error.unwrap();
        assert!(
            error.starts_with("the purge deleted nothing: ") && error.contains("registry"),
            "{error}"
        );
        let result = job.result.unwrap();
        assert_eq!(result["ok"], false);
        assert_eq!(result["deleted"], json!([]));
        assert!(result["kind"].is_string(), "{result}");
        let page = store.list_versions("src/x", None, 10).await.unwrap();
        assert_eq!(page.items.len(), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn progress_is_visible_while_a_job_runs_and_complete_when_it_ends() {
        let store = store();
        let (inputs, deps, gate) = gated_purge(&store, &["k/a", "k/b"]).await;
        let jobs = Jobs::new();
        let id = jobs.start_purge(inputs, deps).unwrap();

        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        let midway = loop {
            let view = jobs.find(id.as_str()).unwrap();
            if view.progress.done == 1 {
                break view;
            }
            assert!(tokio::time::Instant::now() < deadline, "{view:?}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        assert_eq!(midway.state, JobState::Running);
        assert_eq!(midway.progress.total, Some(2));
        assert_eq!(midway.result, None);
        assert_eq!(midway.finished_ms, None);
        assert_eq!(jobs.running(), 1);

        gate.add_permits(1);
        let job = finished(&jobs, &id).await;
        assert_eq!(job.state, JobState::Succeeded, "{job:?}");
        assert_eq!(
            job.progress,
            Progress {
                done: 2,
                total: Some(2)
            }
        );
        assert_eq!(jobs.running(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_start_beyond_the_running_bound_is_refused_busy() {
        let store = store();
        let jobs = Jobs::with_limits(JobLimits {
            max_running: 1,
            ..JobLimits::default()
        });
        let (inputs, deps, gate) = gated_purge(&store, &["k/a"]).await;
        let held = jobs.start_purge(inputs, deps).unwrap();

        let verify = one_good_pin(store.as_ref()).await;
        let refused = jobs
            .start_verify(verify.clone(), verify_deps(&store))
            .unwrap_err();
        assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(refused.code, "busy");
        assert_eq!(jobs.list().len(), 1, "a refused start leaves no job");

        gate.add_permits(1);
        finished(&jobs, &held).await;
        let id = jobs.start_verify(verify, verify_deps(&store)).unwrap();
        assert_eq!(finished(&jobs, &id).await.state, JobState::Succeeded);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unknown_id_is_not_found() {
        let store = store();
        let jobs = Jobs::new();
        let id = jobs
            .start_verify(one_good_pin(store.as_ref()).await, verify_deps(&store))
            .unwrap();
        finished(&jobs, &id).await;
        for unknown in ["0000000000000000", "", "../jobs"] {
            assert!(jobs.get(unknown).is_none());
            let error = jobs.find(unknown).unwrap_err();
            assert_eq!(error.status, StatusCode::NOT_FOUND);
            assert_eq!(error.code, "not_found");
        }
        assert_eq!(jobs.find(id.as_str()).unwrap().id, id);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn finished_jobs_beyond_the_bound_are_forgotten_oldest_first() {
        let store = store();
        let jobs = Jobs::with_limits(JobLimits {
            max_finished: 2,
            ..JobLimits::default()
        });
        let inputs = one_good_pin(store.as_ref()).await;
        let mut ids = Vec::new();
        for _ in 0..3 {
            let id = jobs
                .start_verify(inputs.clone(), verify_deps(&store))
                .unwrap();
            finished(&jobs, &id).await;
            ids.push(id);
        }
        let listed: Vec<JobId> = jobs.list().into_iter().map(|job| job.id).collect();
        assert_eq!(listed, [ids[2].clone(), ids[1].clone()], "newest first");
        assert_eq!(jobs.find(ids[0].as_str()).unwrap_err().code, "not_found");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reports_beyond_the_byte_bound_are_forgotten_but_the_newest_is_kept() {
        let store = store();
        let jobs = Jobs::with_limits(JobLimits {
            max_result_bytes: 1,
            ..JobLimits::default()
        });
        let inputs = one_good_pin(store.as_ref()).await;
        let first = jobs
            .start_verify(inputs.clone(), verify_deps(&store))
            .unwrap();
        finished(&jobs, &first).await;
        let second = jobs.start_verify(inputs, verify_deps(&store)).unwrap();
        let job = finished(&jobs, &second).await;
        assert!(job.result.is_some());
        assert!(jobs.get(first.as_str()).is_none());
        assert_eq!(jobs.list().len(), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bad_inputs_are_refused_before_any_job_starts() {
        let invalid = |result: Result<VerifyInputs, ApiError>| {
            let error = result.unwrap_err();
            assert_eq!(
                (error.status, error.code),
                (StatusCode::BAD_REQUEST, "invalid_argument")
            );
            error.message
        };
        let no_version = json!({"pins": [{"key": "data/a.csv", "md5": md5(b"")}]});
        let message = invalid(VerifyInputs::parse(verify_request(vec![manifest(
            "pins.json",
            no_version.to_string(),
        )])));
        assert!(
            message.contains("pins.json") && message.contains("data/a.csv"),
            "{message}"
        );
        let message = invalid(VerifyInputs::parse(verify_request(vec![])));
        assert!(message.contains("at least one manifest"), "{message}");
        let message = invalid(VerifyInputs::parse(verify_request(vec![manifest(
            "x.dvc",
            "outs: 3".into(),
        )])));
        assert!(message.contains("x.dvc"), "{message}");
        let mut with_receipt =
            verify_request(vec![manifest("pins.json", json!({"pins": []}).to_string())]);
        with_receipt.receipts = Some(vec![json!({"status": "planned", "schema_version": 1,
                                                  "store": "elsewhere"})]);
        let message = invalid(VerifyInputs::parse(with_receipt));
        assert!(message.contains("elsewhere"), "{message}");

        for (plan, says) in [
            (
                json!([{"pointer": "p", "object": "k", "version_id": "null"}]),
                "no exact version id",
            ),
            (json!({"candidates": [], "extra": 1}), "extra"),
            (json!("not json"), "not JSON"),
        ] {
            let error = PurgeInputs::parse(PurgeRequest {
                store: "serving".into(),
                plan,
            })
            .unwrap_err();
            assert_eq!(error.code, "invalid_argument");
            assert!(error.message.contains(says), "{}", error.message);
        }

        let unversioned: Arc<dyn ObjectStore> =
            Arc::new(MemoryStore::unversioned(Arc::new(FixedClock::new(T0))));
        let jobs = Jobs::new();
        let good = one_good_pin(store().as_ref()).await;
        let error = jobs
            .start_verify(good, verify_deps(&unversioned))
            .unwrap_err();
        assert_eq!(error.code, "invalid_argument");
        assert!(error.message.contains("versioning"), "{}", error.message);
        let plan = PurgeInputs::parse(PurgeRequest {
            store: "serving".into(),
            plan: json!([]),
        })
        .unwrap();
        let error = jobs
            .start_purge(plan, purge_deps(&unversioned, purge_policy()))
            .unwrap_err();
        assert_eq!(error.code, "invalid_argument");
        assert!(jobs.list().is_empty());
        assert_eq!(jobs.running(), 0);
    }
}
