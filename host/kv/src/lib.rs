//! Ordered key-value storage: partitions, point reads, paged scans, and
//! batches of writes guarded by preconditions, committed all-or-nothing.
//!
//! # Model
//!
//! A partition is a named, ordered map from byte keys to byte values. Keys
//! compare bytewise. A [`Batch`] is a list of [`Precondition`]s and a list
//! of [`Write`]s, which may span partitions; [`Kv::apply`] checks the
//! preconditions in order against one consistent state and, only if all
//! hold, applies the writes in order (a later write to a key wins). The
//! first failing precondition decides the [`Outcome`]; nothing is written.
//!
//! # Invariants every backend keeps
//!
//! 1. A batch is atomic: after `apply` returns, either all its writes are
//!    visible or none is, whatever happens to the process.
//! 2. Batches are serializable: the preconditions of a batch are evaluated
//!    against the state produced by exactly the batches committed before
//!    it, so two batches guarded on the same row cannot both commit.
//! 3. `NotAfter(t)` holds iff the backend's clock reads `<= t` at commit.
//! 4. Argument bounds are checked before anything is read, identically on
//!    every backend (see [`validate_batch`]); a valid batch on one backend
//!    is valid on all.
//!
//! # Mapping onto etcd (the [`etcd`] backend)
//!
//! A partition is a key prefix `<partition>\0`; a batch is one `Txn`:
//! `Absent(k)` is `create_revision(k) == 0`, `Equals(k, v)` is
//! `value(k) == v`, puts and deletes go in the success branch, and when
//! the compares fail the guarded keys are read at the failed `Txn`'s
//! revision to find the first failed index. etcd has no clock compare, so
//! `NotAfter` is evaluated by the host immediately before the `Txn` is
//! sent. etcd accepts at most 128 operations per transaction and 1.5 MiB
//! per request by default, hence
//! [`MAX_COMMIT_OPS`] and [`MAX_COMMIT_BYTES`]: a caller's batch is held
//! to [`MAX_BATCH_OPS`] / [`MAX_BATCH_BYTES`] and the host adds at most
//! [`HOST_RESERVED_OPS`] / [`HOST_RESERVED_BYTES`] of its own rows, so
//! every valid batch fits one `Txn` and an oversized one is refused whole.
//!
//! # Wrapping a store
//!
//! [`intercept::Intercepted`] is the one decorator: it shows each call to
//! a hook before and after the store answers it. Budgets, metrics and
//! tests hang their hooks on it rather than forwarding the trait by hand.

pub mod etcd;
pub mod memory;
pub mod redb;

/// The conformance suite every backend runs (`cargo test` of a third
/// party's backend can run it too, with the `conformance` feature).
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
pub mod intercept;

use std::sync::Arc;

use async_trait::async_trait;
use custodian_base::error::ErrorKind;

pub use custodian_base::detail::Detail;

// The bounds a plugin's calls are held to are contract facts, shared with
// the SDK; the commit bounds below add the host's own rows to them.
pub use custodian_contract::limits::{
    HOST_PARTITION_PREFIX, MAX_BATCH_BYTES, MAX_BATCH_OPS, MAX_KEY_BYTES, MAX_PAGE_ENTRIES,
    MAX_PARTITION_BYTES, MAX_READS, MAX_VALUE_BYTES,
};

/// Operations the host reserves for its own rows when it commits a step:
/// the timer guard, delete, and reschedule or removal of its due and index
/// rows (4), the fence guard and deadline (2), the step claim's release or
/// its carry to the next due row (1), the plugin set's guard (1), and the
/// step's own audit record, up to 8 of the policy's and one decision
/// record, each with its guard (20): 28, with room.
pub const HOST_RESERVED_OPS: usize = 32;
/// Bytes the host reserves for its own rows: 10 audit records at their
/// bounds (about 21 KiB each as JSON) plus timer and fence rows.
pub const HOST_RESERVED_BYTES: usize = 256 * 1024;
/// Most operations a backend accepts in one [`Kv::apply`]: 128, etcd's
/// default per-transaction limit, so every valid batch fits one `Txn`.
pub const MAX_COMMIT_OPS: usize = MAX_BATCH_OPS + HOST_RESERVED_OPS;
/// Most key and value bytes a backend accepts in one [`Kv::apply`]:
/// 1.25 MiB, which with etcd's framing stays under its 1.5 MiB request
/// limit.
pub const MAX_COMMIT_BYTES: usize = MAX_BATCH_BYTES + HOST_RESERVED_BYTES;

/// Why a KV call failed.
///
/// Each variant carries a [`Detail`]: a message, and the backend's own
/// error (redb's, etcd's status, an I/O or decoding error) as the
/// [`std::error::Error::source`] when one caused it, so a cause chain
/// reads `kv unavailable: writing kv.redb` then `caused by: <redb's
/// error>`. Equality compares kinds and messages only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvError {
    /// An argument is outside its documented bounds.
    InvalidArgument(Detail),
    /// The backend cannot serve the call now; it may later.
    Unavailable(Detail),
    /// Stored data cannot be decoded.
    Corrupt(Detail),
    /// The caller's budget of store calls is spent (see
    /// the core crate's `budget`); nothing was read or written.
    BudgetExhausted(Detail),
    /// The store is held by another process (an embedded engine admits
    /// one at a time).
    InUse(Detail),
    /// The batch writes a lock row (partition `lock`) in a way the lock
    /// rules forbid: shortening a retain-until, lifting a purge, handing a
    /// piece to another request, deleting a row. Nothing was written.
    Retained(Detail),
}

impl KvError {
    /// What kind of failure this is (see [`ErrorKind`]).
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::InvalidArgument(_) => ErrorKind::InvalidArgument,
            Self::Unavailable(_) => ErrorKind::Unavailable,
            Self::Corrupt(_) => ErrorKind::Corrupt,
            Self::BudgetExhausted(_) => ErrorKind::BudgetExhausted,
            Self::InUse(_) => ErrorKind::Busy,
            Self::Retained(_) => ErrorKind::Retained,
        }
    }

    /// The variant's detail: its message and underlying error.
    pub fn detail(&self) -> &Detail {
        match self {
            Self::InvalidArgument(d)
            | Self::Unavailable(d)
            | Self::Corrupt(d)
            | Self::BudgetExhausted(d)
            | Self::InUse(d)
            | Self::Retained(d) => d,
        }
    }

    /// What went wrong, without the kind's prefix but with the causes
    /// (`message: cause…`): one line for a reader that sees no chain (a
    /// guest).
    pub fn into_message(self) -> String {
        self.detail().to_line()
    }

    /// The whole error on one line, its causes after it, for a reader
    /// that sees no chain (an API answer).
    pub fn to_line(&self) -> String {
        let mut line = self.to_string();
        let mut cause = std::error::Error::source(self);
        while let Some(error) = cause {
            line = format!("{line}: {error}");
            cause = error.source();
        }
        line
    }
}

// Written by hand, not derived: the source is inside the detail, and
// thiserror's `#[source]` would make the detail itself a link of the chain,
// printing its message twice.
impl std::fmt::Display for KvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::InvalidArgument(d) => write!(f, "invalid argument: {d}"),
            Self::Unavailable(d) => write!(f, "kv unavailable: {d}"),
            Self::Corrupt(d) => write!(f, "kv data corrupt: {d}"),
            Self::BudgetExhausted(d) => write!(f, "budget exhausted: {d}"),
            Self::InUse(d) => write!(f, "{d}"),
            Self::Retained(d) => write!(f, "retained: {d}"),
        }
    }
}

impl std::error::Error for KvError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.detail()
            .source()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// A validated partition name: 1..=64 bytes of `[a-z0-9._-]`.
///
/// Shared, not owned: every write, precondition and stored row of a batch
/// names its partition, so a clone is a reference count, not an
/// allocation (a plugin step's commit clones one per row).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Partition(Arc<str>);

impl Partition {
    /// Validates `name`.
    ///
    /// # Errors
    /// [`KvError::InvalidArgument`] if the name is empty, too long, or uses
    /// other characters.
    pub fn new(name: impl Into<String>) -> Result<Self, KvError> {
        let name = name.into();
        if custodian_contract::name::is_name(&name, MAX_PARTITION_BYTES) {
            Ok(Self(name.into()))
        } else {
            Err(KvError::InvalidArgument(format!(
                "{name:?} is not a partition name (1..={MAX_PARTITION_BYTES} bytes of [a-z0-9._-])"
            ).into()))
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the host reserves this partition for itself.
    pub fn is_host_reserved(&self) -> bool {
        self.0.starts_with(HOST_PARTITION_PREFIX)
    }
}

/// Lets a set of partitions be searched by name without building one.
impl std::borrow::Borrow<str> for Partition {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Partition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A condition that must hold when a batch commits.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Precondition {
    /// The key has no value.
    Absent {
        /// Where.
        partition: Partition,
        /// Which key.
        key: Vec<u8>,
    },
    /// The key holds exactly `value`.
    Equals {
        /// Where.
        partition: Partition,
        /// Which key.
        key: Vec<u8>,
        /// The value it must hold.
        value: Vec<u8>,
    },
    /// The backend's clock reads at most this many ms since the epoch.
    NotAfter(u64),
}

/// One write of a batch.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Write {
    /// Set `key` to `value`.
    Put {
        /// Where.
        partition: Partition,
        /// Which key.
        key: Vec<u8>,
        /// The new value.
        value: Vec<u8>,
    },
    /// Remove `key`; absent keys are fine.
    Delete {
        /// Where.
        partition: Partition,
        /// Which key.
        key: Vec<u8>,
    },
}

/// Preconditions and writes applied together or not at all.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Batch {
    /// Checked in order; the first failure decides the outcome.
    pub preconditions: Vec<Precondition>,
    /// Applied in order if every precondition holds.
    pub writes: Vec<Write>,
}

/// What became of a valid batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// All preconditions held; every write is visible (and durable, on a
    /// durable backend).
    Committed,
    /// The precondition at `index` did not hold; nothing was written.
    PreconditionFailed {
        /// Index into [`Batch::preconditions`].
        index: u32,
    },
    /// A `NotAfter` deadline had passed; nothing was written.
    DeadlinePassed,
}

/// One page of a scan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Page {
    /// Keys and values, ascending.
    pub entries: Vec<(Vec<u8>, Vec<u8>)>,
    /// Resume strictly after this key; `None` when the range is exhausted.
    pub next: Option<Vec<u8>>,
}

/// One read of a snapshot [`Kv::read`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read {
    /// The value of one key, as [`Kv::get`].
    Get {
        /// The partition read.
        partition: Partition,
        /// The key.
        key: Vec<u8>,
    },
    /// One page of a range, as [`Kv::scan`].
    Scan {
        /// The partition scanned.
        partition: Partition,
        /// The first key of the range.
        start: Vec<u8>,
        /// The end of the range (exclusive); `None`: the partition's end.
        end: Option<Vec<u8>>,
        /// Resume strictly after this key.
        cursor: Option<Vec<u8>>,
        /// Most entries of the page.
        limit: u32,
    },
}

impl Read {
    /// The partition it reads.
    pub fn partition(&self) -> &Partition {
        match self {
            Read::Get { partition, .. } | Read::Scan { partition, .. } => partition,
        }
    }
}

/// The answer to one [`Read`], in the order asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// A [`Read::Get`]'s value, `None` if absent.
    Value(Option<Vec<u8>>),
    /// A [`Read::Scan`]'s page.
    Page(Page),
}

/// Ordered, partitioned key-value storage with guarded batches.
#[async_trait]
pub trait Kv: Send + Sync {
    /// The value of `key`, `None` if absent.
    async fn get(&self, partition: &Partition, key: &[u8]) -> Result<Option<Vec<u8>>, KvError>;

    /// The values of `keys` in the order asked, `None` for absent ones; at
    /// most [`MAX_PAGE_ENTRIES`] keys.
    async fn get_many(
        &self,
        partition: &Partition,
        keys: &[Vec<u8>],
    ) -> Result<Vec<Option<Vec<u8>>>, KvError>;

    /// Keys in `[start, end)` ascending (`end = None`: to the end of the
    /// partition), at most `limit` (1..=[`MAX_PAGE_ENTRIES`]), resuming
    /// strictly after `cursor` if given. A cursor outside the range is
    /// invalid.
    async fn scan(
        &self,
        partition: &Partition,
        start: &[u8],
        end: Option<&[u8]>,
        cursor: Option<&[u8]>,
        limit: u32,
    ) -> Result<Page, KvError>;

    /// Answers several gets and scans, over any partitions, from one
    /// snapshot: every answer sees exactly the batches committed before
    /// one instant, as one `get` or `scan` would. A caller that needs
    /// several rows before it can decide pays one round trip instead of
    /// one per row. At most [`MAX_READS`] reads, whose keys and scan
    /// limits together stay within [`MAX_PAGE_ENTRIES`] entries (see
    /// [`validate_reads`]); each read is held to its own call's bounds.
    async fn read(&self, reads: &[Read]) -> Result<Vec<Answer>, KvError>;

    /// Applies `batch` atomically; see the module documentation.
    async fn apply(&self, batch: &Batch) -> Result<Outcome, KvError>;
}

/// Checks a key's length.
///
/// # Errors
/// [`KvError::InvalidArgument`] outside `1..=MAX_KEY_BYTES`.
pub fn validate_key(key: &[u8]) -> Result<(), KvError> {
    if (1..=MAX_KEY_BYTES).contains(&key.len()) {
        Ok(())
    } else {
        Err(KvError::InvalidArgument(
            format!(
                "a key of {} bytes is outside 1..={MAX_KEY_BYTES}",
                key.len()
            )
            .into(),
        ))
    }
}

/// Checks the arguments of a `get_many`.
///
/// # Errors
/// [`KvError::InvalidArgument`] for too many keys or a bad key.
pub fn validate_get_many(keys: &[Vec<u8>]) -> Result<(), KvError> {
    if keys.len() > MAX_PAGE_ENTRIES as usize {
        return Err(KvError::InvalidArgument(
            format!("{} keys exceed the limit of {MAX_PAGE_ENTRIES}", keys.len()).into(),
        ));
    }
    keys.iter().try_for_each(|key| validate_key(key))
}

/// Checks the arguments of a scan.
///
/// # Errors
/// [`KvError::InvalidArgument`] for a limit outside `1..=MAX_PAGE_ENTRIES`
/// or a cursor outside `[start, end)`.
pub fn validate_scan(
    start: &[u8],
    end: Option<&[u8]>,
    cursor: Option<&[u8]>,
    limit: u32,
) -> Result<(), KvError> {
    if limit == 0 || limit > MAX_PAGE_ENTRIES {
        return Err(KvError::InvalidArgument(
            format!("limit {limit} is outside 1..={MAX_PAGE_ENTRIES}").into(),
        ));
    }
    for bound in [Some(start), end, cursor].into_iter().flatten() {
        if bound.len() > MAX_KEY_BYTES {
            return Err(KvError::InvalidArgument(
                format!(
                    "a scan bound of {} bytes exceeds {MAX_KEY_BYTES}",
                    bound.len()
                )
                .into(),
            ));
        }
    }
    if let Some(cursor) = cursor
        && (cursor < start || end.is_some_and(|end| cursor >= end))
    {
        return Err(KvError::InvalidArgument(
            "the cursor is outside the scanned range".into(),
        ));
    }
    Ok(())
}

/// Checks the arguments of a snapshot [`Kv::read`]: at most
/// [`MAX_READS`] reads, each valid as its own call would be, answering at
/// most [`MAX_PAGE_ENTRIES`] entries in all (a get counts one, a scan its
/// limit), so one read holds no more than one page does.
///
/// # Errors
/// [`KvError::InvalidArgument`] naming the first bound exceeded.
pub fn validate_reads(reads: &[Read]) -> Result<(), KvError> {
    let entries = reads
        .iter()
        .map(|read| match read {
            Read::Get { .. } => 1,
            Read::Scan { limit, .. } => u64::from(*limit),
        })
        .sum();
    custodian_contract::limits::check_reads(reads.len(), entries)
        .map_err(|why| KvError::InvalidArgument(why.into()))?;
    reads.iter().try_for_each(|read| match read {
        Read::Get { key, .. } => validate_key(key),
        Read::Scan {
            start,
            end,
            cursor,
            limit,
            ..
        } => validate_scan(start, end.as_deref(), cursor.as_deref(), *limit),
    })
}

/// A range of keys, as `BTreeMap::range` and redb take it.
pub type KeyRange<'a> = (std::ops::Bound<&'a [u8]>, std::ops::Bound<&'a [u8]>);

/// The key range of a scan whose arguments [`validate_scan`] accepted:
/// from `start` (or strictly after `cursor`) to `end` (exclusive) or the
/// partition's end; `None` when the range is empty (`end <= start`).
pub fn scan_range<'a>(
    start: &'a [u8],
    end: Option<&'a [u8]>,
    cursor: Option<&'a [u8]>,
) -> Option<KeyRange<'a>> {
    use std::ops::Bound;
    if end.is_some_and(|end| end <= start) {
        return None;
    }
    let lower = cursor.map_or(Bound::Included(start), Bound::Excluded);
    let upper = end.map_or(Bound::Unbounded, Bound::Excluded);
    Some((lower, upper))
}

/// Checks a batch against every bound a backend enforces
/// ([`MAX_COMMIT_OPS`], [`MAX_COMMIT_BYTES`]), before anything is read.
///
/// # Errors
/// [`KvError::InvalidArgument`] naming the first bound exceeded.
pub fn validate_batch(batch: &Batch) -> Result<(), KvError> {
    validate_within(batch, MAX_COMMIT_OPS, MAX_COMMIT_BYTES)
}

/// Checks a caller's batch (a plugin's, or a step's commit) against the
/// caller bounds [`MAX_BATCH_OPS`] and [`MAX_BATCH_BYTES`], which leave the
/// host room for its own rows.
///
/// # Errors
/// [`KvError::InvalidArgument`] naming the first bound exceeded.
pub fn validate_caller_batch(batch: &Batch) -> Result<(), KvError> {
    validate_within(batch, MAX_BATCH_OPS, MAX_BATCH_BYTES)
}

fn validate_within(batch: &Batch, max_ops: usize, max_bytes: usize) -> Result<(), KvError> {
    let ops = batch.preconditions.len() + batch.writes.len();
    if ops > max_ops {
        return Err(KvError::InvalidArgument(
            format!("a batch of {ops} operations exceeds {max_ops}").into(),
        ));
    }
    let mut bytes = 0usize;
    let mut account = |key: &[u8], value: Option<&[u8]>| {
        validate_key(key)?;
        if let Some(value) = value
            && value.len() > MAX_VALUE_BYTES
        {
            return Err(KvError::InvalidArgument(
                format!("a value of {} bytes exceeds {MAX_VALUE_BYTES}", value.len()).into(),
            ));
        }
        bytes += key.len() + value.map_or(0, <[u8]>::len);
        Ok(())
    };
    for precondition in &batch.preconditions {
        match precondition {
            Precondition::Absent { key, .. } => account(key, None)?,
            Precondition::Equals { key, value, .. } => account(key, Some(value))?,
            Precondition::NotAfter(_) => {}
        }
    }
    for write in &batch.writes {
        match write {
            Write::Put { key, value, .. } => account(key, Some(value))?,
            Write::Delete { key, .. } => account(key, None)?,
        }
    }
    if bytes > max_bytes {
        return Err(KvError::InvalidArgument(
            format!("a batch of {bytes} key and value bytes exceeds {max_bytes}").into(),
        ));
    }
    Ok(())
}
