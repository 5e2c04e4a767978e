//! Group commit without a writer thread: the caller that finds the commit
//! lock free leads, committing every batch queued so far in one write
//! transaction with one fsync; the others find their answers waiting.
//!
//! `submit` queues the batch, then takes the (async) leader lock. If a
//! previous leader already committed the batch, its answer is there;
//! otherwise this caller leads: it drains the queue in arrival order (up
//! to a bound), opens one write transaction, and evaluates the batches in
//! order: a batch's preconditions are checked against the transaction's
//! current state — the last commit plus the earlier batches of the group
//! that passed — and only if all hold are its writes applied, so the next
//! batch sees them. Then one commit, one fsync, and every batch of the
//! group gets its answer. Since only the leader writes, this is exactly
//! the serial order in which the batches were queued.
//!
//! A lone caller therefore commits on its own thread with no hand-off
//! (the cost of a thread hop per commit was a third of a commit on the
//! build machine), and concurrent callers still share fsyncs: everything
//! queued while one leader waits for the disk goes into the next group.
//! The leader does the blocking work under `block_in_place` on a
//! multi-threaded runtime, so the runtime moves its other tasks elsewhere
//! instead of stalling them behind the fsync.
//!
//! A partition has a table exactly when it holds a row: a guard on an
//! unknown partition opens (creates) its table, and a group drops every
//! table it leaves empty before committing, so failed guards and deleted
//! last rows leave nothing behind.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use ::redb::{Database, Durability, ReadableTable, ReadableTableMetadata, Table, WriteTransaction};

use super::error::{describe_panic, redb_error};
use super::{Rows, table_name};
use crate::{Batch, KvError, MAX_COMMIT_BYTES, Outcome, Partition, Precondition, Write};

/// Groups that wrote anything, committed by every store of this process
/// (a group whose guards all failed commits nothing): read by
/// [`super::commits`].
pub(super) static COMMITS: AtomicU64 = AtomicU64::new(0);
use custodian_base::clock::Clock;

/// Most batches in one group. Past a few dozen, one fsync is already
/// shared so widely that a larger group adds latency (every batch of a
/// group waits for the whole group) without adding throughput.
const MAX_GROUP_BATCHES: usize = 64;
/// Most key and value bytes in one group: four of the largest batches. A
/// write transaction keeps its dirty pages in memory until it commits:
/// this bounds that memory, and how long a small batch can wait behind
/// large ones.
const MAX_GROUP_BYTES: usize = 4 * MAX_COMMIT_BYTES;

type Answer = Result<Outcome, KvError>;

/// One batch waiting to be committed.
struct Request {
    batch: Batch,
    /// Key and value bytes, for [`MAX_GROUP_BYTES`].
    bytes: usize,
    answer: Mutex<Option<Answer>>,
    /// Its caller stopped waiting before any leader took it: never commit
    /// it (a cancelled step must not take effect later, behind its back).
    abandoned: AtomicBool,
}

impl Request {
    fn take_answer(&self) -> Option<Answer> {
        lock(&self.answer).take()
    }
}

/// Marks a request abandoned if its caller's future is dropped before
/// the answer was taken.
struct Abandon<'a>(&'a Request);

impl Drop for Abandon<'_> {
    fn drop(&mut self) {
        self.0.abandoned.store(true, Ordering::Release);
    }
}

/// A poisoned lock only means a panic elsewhere; the queue and answers
/// are plain data that a panic cannot leave half-written.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The queue of batches and the leader lock.
pub(super) struct Writer {
    db: Arc<Database>,
    clock: Arc<dyn Clock>,
    path: PathBuf,
    queue: Mutex<VecDeque<Arc<Request>>>,
    /// Held by the caller committing a group; async, so waiting for it
    /// never blocks a runtime worker.
    leader: tokio::sync::Mutex<()>,
}

impl Writer {
    /// A writer committing to `db` (the file at `path`), reading `clock`
    /// for `NotAfter`.
    pub(super) fn new(db: Arc<Database>, clock: Arc<dyn Clock>, path: PathBuf) -> Self {
        Self {
            db,
            clock,
            path,
            queue: Mutex::new(VecDeque::new()),
            leader: tokio::sync::Mutex::new(()),
        }
    }

    /// Commits `batch` (already validated), alone or in a group, and
    /// answers its outcome. Dropping the call before a leader took the
    /// batch withdraws it; after, it may still commit.
    pub(super) async fn submit(&self, batch: Batch) -> Answer {
        let request = Arc::new(Request {
            bytes: batch_bytes(&batch),
            batch,
            answer: Mutex::new(None),
            abandoned: AtomicBool::new(false),
        });
        lock(&self.queue).push_back(request.clone());
        let abandon = Abandon(&request);
        let _leading = self.leader.lock().await;
        loop {
            if let Some(answer) = request.take_answer() {
                std::mem::forget(abandon);
                return answer;
            }
            // Our batch is still queued: lead. Each group takes the oldest
            // batches first, so ours is reached after finitely many.
            let group = self.take_group();
            run_blocking(|| self.commit(&group));
        }
    }

    /// The oldest queued batches, up to the group bounds, skipping
    /// abandoned ones.
    fn take_group(&self) -> Vec<Arc<Request>> {
        let mut queue = lock(&self.queue);
        let mut group: Vec<Arc<Request>> = Vec::new();
        let mut bytes = 0;
        while group.len() < MAX_GROUP_BATCHES {
            let Some(next) = queue.front() else { break };
            if next.abandoned.load(Ordering::Acquire) {
                queue.pop_front();
                continue;
            }
            if !group.is_empty() && bytes + next.bytes > MAX_GROUP_BYTES {
                break;
            }
            bytes += next.bytes;
            group.extend(queue.pop_front());
        }
        group
    }

    /// Commits one group and leaves every batch its answer.
    fn commit(&self, group: &[Arc<Request>]) {
        let batches: Vec<&Batch> = group.iter().map(|r| &r.batch).collect();
        let answers = catch_unwind(AssertUnwindSafe(|| {
            commit_group(&self.db, &*self.clock, &self.path, &batches)
        }))
        .unwrap_or_else(|panic| {
            let error = KvError::Corrupt(
                format!(
                    "committing to {} made redb panic (the file may be damaged; the batch may \
                 or may not have been applied): {}",
                    self.path.display(),
                    describe_panic(&*panic)
                )
                .into(),
            );
            vec![Err(error); batches.len()]
        });
        for (request, answer) in group.iter().zip(answers) {
            *lock(&request.answer) = Some(answer);
        }
    }

    /// Holds the leader lock, so batches submitted meanwhile queue up and
    /// are committed as groups once it is released.
    #[cfg(test)]
    pub(super) async fn hold(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.leader.lock().await
    }
}

/// Runs blocking work from async code: under `block_in_place` on a
/// multi-threaded runtime's worker, so its other tasks move elsewhere;
/// inline anywhere else (a current-thread runtime has nowhere to move them,
/// and a plain or blocking-pool thread blocks nobody).
fn run_blocking<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        _ => work(),
    }
}

/// Key and value bytes of a batch.
fn batch_bytes(batch: &Batch) -> usize {
    let guards = batch.preconditions.iter().map(|p| match p {
        Precondition::Absent { key, .. } => key.len(),
        Precondition::Equals { key, value, .. } => key.len() + value.len(),
        Precondition::NotAfter(_) => 0,
    });
    let writes = batch.writes.iter().map(|w| match w {
        Write::Put { key, value, .. } => key.len() + value.len(),
        Write::Delete { key, .. } => key.len(),
    });
    guards.chain(writes).sum()
}

/// Evaluates and commits one group; one answer per batch, in order.
fn commit_group(db: &Database, clock: &dyn Clock, path: &Path, group: &[&Batch]) -> Vec<Answer> {
    let all = |error: KvError| vec![Err(error); group.len()];
    let mut txn = match db.begin_write() {
        Ok(txn) => txn,
        Err(e) => {
            return all(redb_error(
                "starting a write transaction on",
                path,
                e.into(),
            ));
        }
    };
    if let Err(e) = txn.set_durability(Durability::Immediate) {
        return all(redb_error("asking for durable commits on", path, e.into()));
    }
    let outcomes = match evaluate(&txn, clock, group) {
        Ok(outcomes) => outcomes,
        Err(e) => {
            // Dropping the transaction would abort it as well; an abort
            // that fails still commits nothing.
            let _ = txn.abort();
            return all(redb_error(
                "applying a batch (nothing was applied) to",
                path,
                e,
            ));
        }
    };
    if !outcomes.contains(&Outcome::Committed) {
        // Nothing to make durable: the guards read committed state, so
        // the outcomes stand without a commit (and its fsync).
        let _ = txn.abort();
        return outcomes.into_iter().map(Ok).collect();
    }
    // A statistic that orders nothing: relaxed is enough.
    COMMITS.fetch_add(1, Ordering::Relaxed);
    match txn.commit() {
        Ok(()) => outcomes.into_iter().map(Ok).collect(),
        // redb commits a failed commit whole or not at all, but cannot say
        // which: the caller must read to find out.
        Err(e) => all(redb_error(
            "committing (the batch may or may not have been applied) to",
            path,
            e.into(),
        )),
    }
}

/// Checks and applies each batch of the group inside `txn`.
fn evaluate(
    txn: &WriteTransaction,
    clock: &dyn Clock,
    group: &[&Batch],
) -> Result<Vec<Outcome>, ::redb::Error> {
    let mut tables = Tables::new(txn);
    let mut outcomes = Vec::with_capacity(group.len());
    for batch in group {
        let outcome = check(&mut tables, clock, batch)?;
        if outcome == Outcome::Committed {
            for write in &batch.writes {
                match write {
                    Write::Put {
                        partition,
                        key,
                        value,
                    } => {
                        tables
                            .get(partition)?
                            .insert(key.as_slice(), value.as_slice())?;
                    }
                    Write::Delete { partition, key } => {
                        tables.get(partition)?.remove(key.as_slice())?;
                    }
                }
            }
        }
        outcomes.push(outcome);
    }
    tables.close()?;
    Ok(outcomes)
}

/// The first failing precondition of `batch`, or `Committed` if all hold.
fn check(
    tables: &mut Tables<'_>,
    clock: &dyn Clock,
    batch: &Batch,
) -> Result<Outcome, ::redb::Error> {
    for (index, precondition) in batch.preconditions.iter().enumerate() {
        let holds = match precondition {
            Precondition::Absent { partition, key } => {
                tables.get(partition)?.get(key.as_slice())?.is_none()
            }
            Precondition::Equals {
                partition,
                key,
                value,
            } => tables
                .get(partition)?
                .get(key.as_slice())?
                .is_some_and(|current| current.value() == value.as_slice()),
            Precondition::NotAfter(deadline) => {
                if clock.now_ms() > *deadline {
                    return Ok(Outcome::DeadlinePassed);
                }
                true
            }
        };
        if !holds {
            // Bounded by MAX_BATCH_OPS, so it fits.
            let index = u32::try_from(index).unwrap_or(u32::MAX);
            return Ok(Outcome::PreconditionFailed { index });
        }
    }
    Ok(Outcome::Committed)
}

/// The tables a group has opened, kept open across its batches: redb
/// allows one open handle per table, and reopening per operation would
/// repeat the lookup in the table directory.
struct Tables<'txn> {
    txn: &'txn WriteTransaction,
    open: HashMap<Partition, Table<'txn, &'static [u8], &'static [u8]>>,
}

impl<'txn> Tables<'txn> {
    fn new(txn: &'txn WriteTransaction) -> Self {
        Self {
            txn,
            open: HashMap::new(),
        }
    }

    /// `partition`'s table, created if missing.
    fn get(
        &mut self,
        partition: &Partition,
    ) -> Result<&mut Table<'txn, &'static [u8], &'static [u8]>, ::redb::Error> {
        Ok(match self.open.entry(partition.clone()) {
            Entry::Occupied(open) => open.into_mut(),
            Entry::Vacant(slot) => {
                let name = table_name(partition);
                slot.insert(self.txn.open_table(Rows::new(&name))?)
            }
        })
    }

    /// Closes every table, deleting those left empty (see the module
    /// documentation).
    fn close(self) -> Result<(), ::redb::Error> {
        for (partition, table) in self.open {
            let empty = table.is_empty()?;
            // A table must be closed before it can be deleted.
            drop(table);
            if empty {
                self.txn.delete_table(Rows::new(&table_name(&partition)))?;
            }
        }
        Ok(())
    }
}
