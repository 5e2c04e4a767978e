//! The redb backend: the durable, embedded default KV store. One file;
//! every acknowledged batch is on disk; one process at a time.
//!
//! # Why redb
//!
//! - **One writer.** redb runs one write transaction at a time, so a batch
//!   whose preconditions are checked and whose writes are applied inside
//!   one write transaction is serializable (the trait's invariant 2) with
//!   no conflict detection of our own.
//! - **One fsync per commit.** A commit with `Durability::Immediate` is
//!   on disk when it returns, at the price of one `fdatasync` (two when
//!   the commit grows the file: redb makes the new length durable first).
//!   (fjall, the
//!   LSM alternative, by default acknowledges a write once it reaches the
//!   OS's buffers: a power cut could lose acknowledged batches.)
//! - **Crash-safe.** Pages are copy-on-write and a commit publishes the
//!   new root by flipping between two checksummed commit slots, so a
//!   crash at any moment leaves the last commit or the one before it,
//!   never a mixture (the trait's invariant 1).
//!
//! # On disk
//!
//! One redb file (the caller picks its path, e.g. `<data dir>/kv.redb`).
//! Partition `x` is the table `p/x`, keys and values `&[u8] -> &[u8]`,
//! so redb's bytewise key order is the trait's order. A partition has a
//! table exactly while it holds a row (see `writer`); one without reads as
//! empty. No other table exists.
//!
//! # How calls run
//!
//! - Reads (`get`, `get_many`, `scan`) run inline on the caller's thread in
//!   a read transaction: a snapshot of the last commit, so they see every
//!   batch whose `apply` has returned, and never block on the writer.
//! - Batches are committed in groups by whichever caller holds the
//!   leader lock (see `writer`): every batch queued so far, checked in
//!   arrival order inside one write transaction, committed with one fsync.
//!   A lone caller commits on its own thread with no hand-off; N concurrent
//!   batches cost one fsync, not N; the fsync runs under `block_in_place`
//!   on a multi-threaded runtime, so it does not stall the worker's other
//!   tasks. Dropping a pending `apply` withdraws its batch unless a leader
//!   has already taken it, in which case it may still commit.
//! - The file is closed and unlocked when the last clone of the
//!   [`RedbKv`] is dropped.
//!
//! # Invariants
//!
//! 1. A batch is evaluated against the state left by exactly the batches
//!    committed before it, including earlier batches of its own group.
//! 2. A batch that fails a precondition writes nothing; a group in which
//!    no batch passed is aborted rather than committed (no fsync).
//! 3. `apply` answers `Committed` only after the group's commit returned,
//!    i.e. after its fsync.
//! 4. If the transaction fails before its commit, it is aborted and every
//!    batch of the group gets the error (`Unavailable`, or `Corrupt` for a
//!    damaged file) with nothing applied.
//!    If the commit itself fails, redb applies the group whole or not at
//!    all but cannot say which, so each batch is answered `Unavailable`
//!    saying that the outcome is unknown; a reader (or a reopen) tells.
//! 5. Several processes never share the file: redb locks it, and a second
//!    open (in this or another process) is refused with `InUse`.
//!
//! # Costs and limits
//!
//! - A crash (of the process or the machine) makes the next open walk the
//!   whole file to verify checksums and rebuild the allocator: time
//!   proportional to the file's size. redb's quick-repair avoids that but
//!   costs a second fsync per commit; commits are the hot path.
//! - After a storage error redb refuses further writes until the file is
//!   reopened, so every later `apply` answers `Unavailable` until the
//!   process reopens the store (restarts).
//! - redb verifies page checksums only when it repairs a file, not on
//!   reads: a bit flipped on disk inside a value is read back as is. A
//!   damaged tree is noticed, but redb may panic rather than report it;
//!   `open`, reads and the writer catch such a panic and answer `Corrupt`
//!   (this needs `panic = "unwind"`, the default).
//! - redb keeps up to a set number of bytes of pages in memory
//!   ([`DEFAULT_CACHE_BYTES`] unless [`RedbKv::open_with_cache`] says
//!   otherwise): every page it writes or reads stays cached until that
//!   bound, so without one the process grows with the file. redb's own
//!   default, 1 GiB, is too much for a host that bounds its other memory.

mod error;
mod writer;

#[cfg(test)]
mod fault_tests;
#[cfg(test)]
mod process_tests;
#[cfg(test)]
mod test_backend;
#[cfg(test)]
mod tests;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ::redb::{Database, ReadOnlyTable, ReadTransaction, ReadableDatabase, TableError};
use async_trait::async_trait;

use super::{
    Answer, Batch, Detail, Kv, KvError, Outcome, Page, Partition, Read, scan_range, validate_batch,
    validate_get_many, validate_key, validate_reads, validate_scan,
};
use custodian_base::clock::Clock;

use self::error::{describe_panic, redb_error};
use self::writer::Writer;

/// The table of a partition.
type Rows<'a> = ::redb::TableDefinition<'a, &'static [u8], &'static [u8]>;

/// The name of `partition`'s table.
fn table_name(partition: &Partition) -> String {
    format!("p/{partition}")
}

/// A KV store in one redb file. Cheap to clone; every clone shares the
/// file and the commit queue. See the module documentation.
#[derive(Clone)]
pub struct RedbKv {
    inner: Arc<Inner>,
}

/// What the clones share. The file is closed, and unlocked, once `Inner`
/// (with both handles on the database) is gone.
struct Inner {
    db: Arc<Database>,
    path: PathBuf,
    writer: Writer,
    /// Keeps a test store's directory alive until the file is closed.
    #[cfg(test)]
    temp: Option<tempfile::TempDir>,
}

impl std::fmt::Debug for RedbKv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbKv")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

/// Write transactions the redb stores of this process have committed
/// since it began: one per group commit that wrote anything, each one
/// durable write however many batches it carried, so applies ÷ commits
/// is about how many batches a sync served. Process-wide: the stores
/// share the device.
#[must_use]
pub fn commits() -> u64 {
    // A statistic that orders nothing: relaxed is enough.
    writer::COMMITS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Bytes of pages a store keeps in memory unless its opener says
/// otherwise: enough for the working set of a host's own rows (requests,
/// timers, locks, the content index of a few hundred thousand objects),
/// small next to the request-body and plugin-memory bounds.
pub const DEFAULT_CACHE_BYTES: usize = 64 << 20;

impl RedbKv {
    /// Opens the store in the file `path`, creating it (and its parent
    /// directory) if missing, and repairing it if the last process using
    /// it crashed. `NotAfter` preconditions read `clock`.
    ///
    /// # Errors
    /// `InUse` when another `RedbKv` (in this or another process) has the
    /// file open; `Unavailable` on an I/O error; `Corrupt` when the file is
    /// not a redb database, or not one this version reads.
    pub fn open(path: &Path, clock: Arc<dyn Clock>) -> Result<Self, KvError> {
        Self::open_with_cache(path, clock, DEFAULT_CACHE_BYTES)
    }

    /// As [`RedbKv::open`], keeping at most `cache_bytes` of pages in
    /// memory.
    ///
    /// # Errors
    /// As for [`RedbKv::open`].
    pub fn open_with_cache(
        path: &Path,
        clock: Arc<dyn Clock>,
        cache_bytes: usize,
    ) -> Result<Self, KvError> {
        let io = |doing: &str, e: std::io::Error| {
            KvError::Unavailable(Detail::caused_by(format!("{doing} {}", path.display()), e))
        };
        let parent = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        create_dirs(parent).map_err(|e| io("creating the directory of", e))?;
        let opened = catch_unwind(|| Database::builder().set_cache_size(cache_bytes).create(path))
            .map_err(|panic| {
                KvError::Corrupt(
                    format!(
                        "opening {} made redb panic: {}",
                        path.display(),
                        describe_panic(&*panic)
                    )
                    .into(),
                )
            })?;
        let db = opened.map_err(|e| open_error(path, e))?;
        // redb fsyncs the file, never its directory: a file created just
        // now must have its name on disk before any commit in it is
        // acknowledged, or a crash could lose the whole store.
        sync_dir(parent).map_err(|e| io("syncing the directory of", e))?;
        Self::from_database(db, path.to_owned(), clock)
    }

    /// Wraps an open database; `path` is for messages.
    fn from_database(db: Database, path: PathBuf, clock: Arc<dyn Clock>) -> Result<Self, KvError> {
        let db = Arc::new(db);
        let writer = Writer::new(db.clone(), clock, path.clone());
        Ok(Self {
            inner: Arc::new(Inner {
                db,
                path,
                writer,
                #[cfg(test)]
                temp: None,
            }),
        })
    }

    /// The file this store lives in.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Runs `read` on `partition`'s table in a fresh snapshot; `None` when
    /// the partition has no table (holds no row).
    fn read_table<T>(
        &self,
        partition: &Partition,
        read: impl FnOnce(&Table) -> Result<T, ::redb::Error>,
    ) -> Result<Option<T>, KvError> {
        self.in_snapshot(
            || format!("reading partition {partition}"),
            |txn| {
                open_table(txn, partition)?
                    .map(|table| read(&table))
                    .transpose()
            },
        )
    }

    /// Runs `run` in a fresh snapshot. A panic inside redb, which only a
    /// damaged file causes, is answered `Corrupt`.
    fn in_snapshot<T>(
        &self,
        doing: impl Fn() -> String,
        run: impl FnOnce(&ReadTransaction) -> Result<T, ::redb::Error>,
    ) -> Result<T, KvError> {
        let attempt = || -> Result<T, ::redb::Error> {
            let txn: ReadTransaction = self.inner.db.begin_read()?;
            run(&txn)
        };
        match catch_unwind(AssertUnwindSafe(attempt)) {
            Ok(result) => result.map_err(|e| redb_error(&doing(), &self.inner.path, e)),
            Err(panic) => Err(KvError::Corrupt(
                format!(
                    "{} in {} made redb panic: {}",
                    doing(),
                    self.inner.path.display(),
                    describe_panic(&*panic)
                )
                .into(),
            )),
        }
    }
}

/// A partition's table as a snapshot reads it.
type Table = ReadOnlyTable<&'static [u8], &'static [u8]>;

/// `partition`'s table in `txn`; `None` when it has none (holds no row).
fn open_table(
    txn: &ReadTransaction,
    partition: &Partition,
) -> Result<Option<Table>, ::redb::Error> {
    let name = table_name(partition);
    match txn.open_table(Rows::new(&name)) {
        Ok(table) => Ok(Some(table)),
        Err(TableError::TableDoesNotExist(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// One page of `table` over a validated range `(start, end, cursor)`.
fn page_of(
    table: &Table,
    (start, end, cursor): (&[u8], Option<&[u8]>, Option<&[u8]>),
    limit: u32,
) -> Result<Page, ::redb::Error> {
    let Some((lower, upper)) = scan_range(start, end, cursor) else {
        return Ok(Page::default());
    };
    let mut range = table.range::<&[u8]>((lower, upper))?;
    let mut entries = Vec::new();
    for entry in range.by_ref().take(limit as usize) {
        let (key, value) = entry?;
        entries.push((key.value().to_vec(), value.value().to_vec()));
    }
    // Only a row beyond the page earns a cursor, so the last page has
    // none (as the trait requires).
    let next = match range.next().transpose()? {
        Some(_) => entries.last().map(|(key, _)| key.clone()),
        None => None,
    };
    Ok(Page { entries, next })
}

/// Creates `dir` and its missing ancestors, each made durable in its
/// parent, as the store's file will be in `dir`.
fn create_dirs(dir: &Path) -> std::io::Result<()> {
    let missing: Vec<&Path> = dir.ancestors().take_while(|d| !d.exists()).collect();
    std::fs::create_dir_all(dir)?;
    // Outermost first, so each name is synced into a directory whose own
    // name already is.
    for created in missing.iter().rev() {
        if let Some(parent) = created.parent().filter(|p| !p.as_os_str().is_empty()) {
            sync_dir(parent)?;
        }
    }
    Ok(())
}

/// Makes the entries of directory `dir` durable.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Maps a failed open, naming the file.
fn open_error(path: &Path, error: ::redb::DatabaseError) -> KvError {
    match error {
        ::redb::DatabaseError::DatabaseAlreadyOpen => KvError::InUse(Detail::caused_by(
            format!(
                "the data directory's KV file {} is already in use by another custodian process",
                path.display()
            ),
            error,
        )),
        ::redb::DatabaseError::LockProtocolMismatch => KvError::InUse(Detail::caused_by(
            format!(
                "the data directory's KV file {} is in use by a process running another version",
                path.display()
            ),
            error,
        )),
        other => redb_error("opening", path, other.into()),
    }
}

#[async_trait]
impl Kv for RedbKv {
    async fn get(&self, partition: &Partition, key: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        validate_key(key)?;
        let found = self.read_table(partition, |table| {
            Ok(table.get(key)?.map(|value| value.value().to_vec()))
        })?;
        Ok(found.flatten())
    }

    async fn get_many(
        &self,
        partition: &Partition,
        keys: &[Vec<u8>],
    ) -> Result<Vec<Option<Vec<u8>>>, KvError> {
        validate_get_many(keys)?;
        let found = self.read_table(partition, |table| {
            keys.iter()
                .map(|key| Ok(table.get(key.as_slice())?.map(|v| v.value().to_vec())))
                .collect::<Result<Vec<_>, ::redb::Error>>()
        })?;
        Ok(found.unwrap_or_else(|| vec![None; keys.len()]))
    }

    async fn scan(
        &self,
        partition: &Partition,
        start: &[u8],
        end: Option<&[u8]>,
        cursor: Option<&[u8]>,
        limit: u32,
    ) -> Result<Page, KvError> {
        validate_scan(start, end, cursor, limit)?;
        let page = self.read_table(partition, |table| {
            page_of(table, (start, end, cursor), limit)
        })?;
        Ok(page.unwrap_or_default())
    }

    async fn read(&self, reads: &[Read]) -> Result<Vec<Answer>, KvError> {
        validate_reads(reads)?;
        self.in_snapshot(
            || "reading a snapshot".to_owned(),
            |txn| {
                // Each partition's table opened once, however many reads
                // name it (a read holds at most MAX_READS of them).
                let mut tables: Vec<(&Partition, Option<Table>)> = Vec::new();
                let mut answers = Vec::with_capacity(reads.len());
                for read in reads {
                    let partition = read.partition();
                    let at = match tables.iter().position(|(p, _)| *p == partition) {
                        Some(at) => at,
                        None => {
                            tables.push((partition, open_table(txn, partition)?));
                            tables.len() - 1
                        }
                    };
                    let table = tables[at].1.as_ref();
                    answers.push(match (read, table) {
                        (Read::Get { .. }, None) => Answer::Value(None),
                        (Read::Get { key, .. }, Some(table)) => {
                            Answer::Value(table.get(key.as_slice())?.map(|v| v.value().to_vec()))
                        }
                        (Read::Scan { .. }, None) => Answer::Page(Page::default()),
                        (
                            Read::Scan {
                                start,
                                end,
                                cursor,
                                limit,
                                ..
                            },
                            Some(table),
                        ) => Answer::Page(page_of(
                            table,
                            (start, end.as_deref(), cursor.as_deref()),
                            *limit,
                        )?),
                    });
                }
                Ok(answers)
            },
        )
    }

    async fn apply(&self, batch: &Batch) -> Result<Outcome, KvError> {
        validate_batch(batch)?;
        self.inner.writer.submit(batch.clone()).await
    }
}
