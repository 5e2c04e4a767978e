//! Jobs as every host sees them: each host publishes its jobs' records to
//! the KV (state and progress while they run, the report once finished),
//! so a client polling through a load balancer finds its job on any host
//! sharing the KV, and a finished job's record outlives a restart.
//!
//! # Layout (partition [`PARTITION`])
//! - `job/<id>`: the job's [`Record`], JSON. Only the host running a job
//!   writes its record, from one task, so writes need no guard.
//! - `result/<id>/<index>`: the report, in chunks of at most
//!   [`CHUNK_BYTES`], written before the record that names them.
//!
//! # Bounds
//! - A running job's record is refreshed every [`PROGRESS_EVERY`]; one not
//!   refreshed for [`STALE_MS`] lost its host (killed, or stopped while
//!   the job ran) and reads as failed, "abandoned".
//! - Reports up to [`MAX_SHARED_RESULT`] are shared; a larger one stays
//!   in the memory of the host that ran it (its record says which).
//! - The newest [`MAX_RECORDS`] records are kept; each finish forgets the
//!   oldest beyond, with their reports.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{JobId, JobKind, JobState, JobView, Progress};
use custodian_base::clock::Clock;
use custodian_kv::{Batch, Detail, Kv, KvError, MAX_PAGE_ENTRIES, Partition, Write};

/// The partition jobs are published in.
pub const PARTITION: &str = "custodian.jobs";

/// How often a running job's record is refreshed: progress a client sees
/// through another host is at most this old.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// A running job's record older than this lost its host: many refresh
/// periods, so a slow KV write or a busy host is not mistaken for death.
pub const STALE_MS: u64 = 15_000;

/// Largest report shared through the KV: 44 chunks, small beside the KV's
/// room, while a purge of a large plan can report tens of megabytes.
pub const MAX_SHARED_RESULT: usize = 8 << 20;

/// Bytes per report chunk: under the KV's largest value
/// ([`custodian_kv::MAX_VALUE_BYTES`]).
pub const CHUNK_BYTES: usize = 192 * 1024;

/// Records kept, as the in-memory registry keeps finished jobs.
pub const MAX_RECORDS: usize = super::MAX_FINISHED;

/// Where a finished job's report is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "at")]
pub enum ResultAt {
    /// No report (still running, or failed before one).
    None,
    /// In the KV: `bytes` of JSON text.
    Shared {
        /// Its length.
        bytes: u64,
    },
    /// Too large to share: only the host that ran the job holds it.
    OnNode,
}

/// A job's published record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The job's id.
    pub id: String,
    /// What it does.
    pub kind: JobKind,
    /// Its state when last written.
    pub state: JobState,
    /// The store it works on.
    pub store: String,
    /// The host running it.
    pub node: String,
    /// When it started.
    pub started_ms: u64,
    /// When it finished.
    pub finished_ms: Option<u64>,
    /// When its host last wrote this record.
    pub heartbeat_ms: u64,
    /// How far it had come.
    pub progress: Progress,
    /// Why it failed.
    pub error: Option<String>,
    /// Where its report is.
    pub result: ResultAt,
}

impl Record {
    /// The job as a reader at `now_ms` sees it (without its report): a
    /// running record nobody refreshed for [`STALE_MS`] is abandoned.
    fn view(&self, now_ms: u64) -> JobView {
        let mut view = JobView {
            id: JobId(self.id.clone()),
            kind: self.kind,
            state: self.state,
            store: self.store.clone(),
            node: Some(self.node.clone()),
            started_ms: self.started_ms,
            finished_ms: self.finished_ms,
            progress: self.progress,
            error: self.error.clone(),
            result: None,
        };
        if self.state == JobState::Running && now_ms.saturating_sub(self.heartbeat_ms) > STALE_MS {
            view.state = JobState::Failed;
            view.error = Some(format!(
                "the job was abandoned: node {} stopped reporting on it at {} (it stopped or \
                 died); start it again",
                self.node, self.heartbeat_ms
            ));
        }
        view
    }
}

/// The shared board of jobs.
pub struct Board {
    kv: Arc<dyn Kv>,
    node: String,
    clock: Arc<dyn Clock>,
}

fn partition() -> Partition {
    Partition::new(PARTITION).expect("a valid partition name")
}

fn record_key(id: &str) -> Vec<u8> {
    format!("job/{id}").into_bytes()
}

fn chunk_key(id: &str, index: usize) -> Vec<u8> {
    format!("result/{id}/{index:05}").into_bytes()
}

fn chunk_count(bytes: u64) -> usize {
    usize::try_from(bytes)
        .unwrap_or(usize::MAX)
        .div_ceil(CHUNK_BYTES)
}

impl Board {
    /// A board in `kv`, written as `node`, timed by `clock`.
    pub fn new(kv: Arc<dyn Kv>, node: String, clock: Arc<dyn Clock>) -> Self {
        Self { kv, node, clock }
    }

    /// This host's node name.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Publishes `view` (a job of this host) with its report text, if it
    /// has one.
    ///
    /// # Errors
    /// The KV failed; the next publication of the job tries again.
    pub async fn publish(&self, view: &JobView, report: Option<&str>) -> Result<(), KvError> {
        let result = match report {
            None => ResultAt::None,
            Some(text) if text.len() > MAX_SHARED_RESULT => ResultAt::OnNode,
            Some(text) => {
                for (index, chunk) in text.as_bytes().chunks(CHUNK_BYTES).enumerate() {
                    self.put(chunk_key(view.id.as_str(), index), chunk.to_vec())
                        .await?;
                }
                ResultAt::Shared {
                    bytes: text.len() as u64,
                }
            }
        };
        let record = Record {
            id: view.id.as_str().to_owned(),
            kind: view.kind,
            state: view.state,
            store: view.store.clone(),
            node: self.node.clone(),
            started_ms: view.started_ms,
            finished_ms: view.finished_ms,
            heartbeat_ms: self.clock.now_ms(),
            progress: view.progress,
            error: view.error.clone(),
            result,
        };
        let value = serde_json::to_vec(&record).expect("a record serializes");
        self.put(record_key(view.id.as_str()), value).await
    }

    async fn put(&self, key: Vec<u8>, value: Vec<u8>) -> Result<(), KvError> {
        let batch = Batch {
            preconditions: Vec::new(),
            writes: vec![Write::Put {
                partition: partition(),
                key,
                value,
            }],
        };
        self.kv.apply(&batch).await.map(drop)
    }

    async fn record(&self, id: &str) -> Result<Option<Record>, KvError> {
        let Some(bytes) = self.kv.get(&partition(), &record_key(id)).await? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| KvError::Corrupt(Detail::caused_by(format!("the record of job {id}"), e)))
    }

    /// The job `id` with its report, if any host published it.
    ///
    /// # Errors
    /// The KV failed, or the record or report does not decode.
    pub async fn get(&self, id: &str) -> Result<Option<JobView>, KvError> {
        let Some(record) = self.record(id).await? else {
            return Ok(None);
        };
        let mut view = record.view(self.clock.now_ms());
        match record.result {
            ResultAt::None => {}
            ResultAt::OnNode => {
                view.error = Some(
                    match view.error {
                        Some(error) => format!("{error}; "),
                        None => String::new(),
                    } + &format!(
                        "the report is over {MAX_SHARED_RESULT} bytes: only node {} holds it (ask \
                     that host until it restarts)",
                        record.node
                    ),
                );
            }
            ResultAt::Shared { bytes } => {
                let keys: Vec<Vec<u8>> = (0..chunk_count(bytes))
                    .map(|index| chunk_key(id, index))
                    .collect();
                let mut text = Vec::with_capacity(usize::try_from(bytes).unwrap_or(0));
                for group in keys.chunks(4) {
                    for value in self.kv.get_many(&partition(), group).await? {
                        text.extend(value.ok_or_else(|| {
                            KvError::Corrupt(
                                format!("a chunk of job {id}'s report is missing").into(),
                            )
                        })?);
                    }
                }
                let report: Value = serde_json::from_slice(&text).map_err(|e| {
                    KvError::Corrupt(Detail::caused_by(format!("job {id}'s report"), e))
                })?;
                view.result = Some(report);
            }
        }
        Ok(Some(view))
    }

    /// Every published job without its report, newest first.
    ///
    /// # Errors
    /// The KV failed, or a record does not decode.
    pub async fn list(&self) -> Result<Vec<JobView>, KvError> {
        let now = self.clock.now_ms();
        Ok(self
            .records()
            .await?
            .iter()
            .rev()
            .map(|record| record.view(now))
            .collect())
    }

    /// Every record, oldest first (ids sort by start time).
    async fn records(&self) -> Result<Vec<Record>, KvError> {
        let mut records = Vec::new();
        let mut cursor: Option<Vec<u8>> = None;
        loop {
            let page = self
                .kv
                .scan(
                    &partition(),
                    b"job/",
                    Some(b"job0"),
                    cursor.as_deref(),
                    MAX_PAGE_ENTRIES,
                )
                .await?;
            for (key, value) in &page.entries {
                let record = serde_json::from_slice(value).map_err(|e| {
                    KvError::Corrupt(Detail::caused_by(String::from_utf8_lossy(key), e))
                })?;
                records.push(record);
            }
            match page.next {
                Some(next) => cursor = Some(next),
                None => return Ok(records),
            }
        }
    }

    /// Forgets the oldest records (and their reports) beyond
    /// [`MAX_RECORDS`].
    ///
    /// # Errors
    /// The KV failed; the next finish tries again.
    pub async fn forget_old(&self) -> Result<(), KvError> {
        let records = self.records().await?;
        let excess = records.len().saturating_sub(MAX_RECORDS);
        for record in &records[..excess] {
            let mut writes = vec![Write::Delete {
                partition: partition(),
                key: record_key(&record.id),
            }];
            if let ResultAt::Shared { bytes } = record.result {
                writes.extend((0..chunk_count(bytes)).map(|index| Write::Delete {
                    partition: partition(),
                    key: chunk_key(&record.id, index),
                }));
            }
            // Record first in the batch: a reader never finds a record
            // whose report is gone. Batches stay within the KV's bounds.
            for batch in writes.chunks(64) {
                self.kv
                    .apply(&Batch {
                        preconditions: Vec::new(),
                        writes: batch.to_vec(),
                    })
                    .await?;
            }
        }
        Ok(())
    }
}
