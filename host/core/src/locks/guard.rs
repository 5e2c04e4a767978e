//! The lock guard on the KV: every batch that writes the lock partition,
//! whoever sends it, commits only as a legal step of the locks it writes.
//!
//! A batch that writes no lock row passes straight through: no read, no
//! copy. One that does is checked against the rows as read (one
//! `get_many`) and committed with a guard on each row checked, appended
//! after the caller's preconditions. If one of those guards fails, a
//! concurrent writer moved a lock between the read and the commit: the
//! batch is read and checked again (the caller's preconditions all held,
//! so nothing of its outcome is lost), at most [`MAX_ATTEMPTS`] times.
//!
//! # Fitting the guards into one commit
//!
//! A guard per row written rides in the same transaction as the batch, so
//! it must fit the commit bound ([`MAX_COMMIT_OPS`], [`MAX_COMMIT_BYTES`]),
//! not only the caller's ([`MAX_BATCH_OPS`]). The host reserves
//! [`HOST_RESERVED_OPS`] (32) operations beyond a caller's batch: a
//! plugin's own `apply` carries no host rows, so 32 lock rows always fit
//! it; a step's commit uses at most 24 of them for timer, fence and audit
//! rows, so at least 8 lock rows always fit a step (the takedown writes at
//! most two per commit). Each guard costs one key (at most 1 KiB) and a
//! 17-byte value, well inside the bytes reserved. Only the rows that need
//! one get a guard (see `writes::check`), and a guard the caller already
//! set is not repeated. A batch whose guards would not fit is refused
//! whole with `InvalidArgument`, as an oversized batch is, before anything
//! is written.
//!
//! This decorator forwards the trait by hand rather than through
//! [`custodian_kv::intercept`]: it must change the batch it passes on,
//! which a hook cannot.
//!
//! [`MAX_COMMIT_OPS`]: custodian_kv::MAX_COMMIT_OPS
//! [`MAX_COMMIT_BYTES`]: custodian_kv::MAX_COMMIT_BYTES
//! [`MAX_BATCH_OPS`]: custodian_kv::MAX_BATCH_OPS
//! [`HOST_RESERVED_OPS`]: custodian_kv::HOST_RESERVED_OPS

use std::sync::Arc;

use async_trait::async_trait;
use custodian_base::clock::Clock;
use custodian_kv::{Answer, Batch, Kv, KvError, Outcome, Page, Partition, Read, validate_batch};

use super::writes::{self, Rows};

/// How many times a batch is checked and committed before a lock that
/// keeps moving under it makes it give up: every retry follows another
/// writer's commit of the same lock rows, which only the takedown makes,
/// a few times per request.
pub const MAX_ATTEMPTS: u32 = 4;

/// A KV whose lock partition only ever moves as the lock rules allow.
pub struct LockGuard {
    inner: Arc<dyn Kv>,
    clock: Arc<dyn Clock>,
    partition: Partition,
}

impl LockGuard {
    /// Guards `inner`, judging "now" (when a lock may begin purging) by
    /// `clock`.
    pub fn new(inner: Arc<dyn Kv>, clock: Arc<dyn Clock>) -> Self {
        Self {
            inner,
            clock,
            partition: super::partition(),
        }
    }

    /// The unguarded store.
    pub fn inner(&self) -> &Arc<dyn Kv> {
        &self.inner
    }
}

#[async_trait]
impl Kv for LockGuard {
    async fn get(&self, partition: &Partition, key: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        self.inner.get(partition, key).await
    }

    async fn get_many(
        &self,
        partition: &Partition,
        keys: &[Vec<u8>],
    ) -> Result<Vec<Option<Vec<u8>>>, KvError> {
        self.inner.get_many(partition, keys).await
    }

    async fn scan(
        &self,
        partition: &Partition,
        start: &[u8],
        end: Option<&[u8]>,
        cursor: Option<&[u8]>,
        limit: u32,
    ) -> Result<Page, KvError> {
        self.inner.scan(partition, start, end, cursor, limit).await
    }

    async fn read(&self, reads: &[Read]) -> Result<Vec<Answer>, KvError> {
        self.inner.read(reads).await
    }

    async fn apply(&self, batch: &Batch) -> Result<Outcome, KvError> {
        let Some(lock_writes) = writes::lock_writes(batch)? else {
            return self.inner.apply(batch).await;
        };
        // The bounds first, as every backend checks them: a batch too big
        // to commit is refused before anything is read.
        validate_batch(batch)?;
        // At most two rows per write of a batch within the commit bound:
        // well under `get_many`'s page bound.
        let keys = writes::rows_to_read(&lock_writes);
        let ours = batch.preconditions.len();
        for _ in 0..MAX_ATTEMPTS {
            let values = self.inner.get_many(&self.partition, &keys).await?;
            let read: Rows = keys.iter().cloned().zip(values).collect();
            let now = self.clock.now_ms();
            let guards = writes::check(&lock_writes, &read, now, &self.partition)?;
            let guarded = writes::guarded(batch, guards);
            validate_batch(&guarded).map_err(|e| {
                KvError::InvalidArgument(
                    format!(
                        "the batch with a guard on each lock row it writes does not fit one \
                         commit ({}); write fewer lock rows per batch",
                        e.detail().message()
                    )
                    .into(),
                )
            })?;
            match self.inner.apply(&guarded).await? {
                Outcome::PreconditionFailed { index } if index as usize >= ours => {}
                outcome => return Ok(outcome),
            }
        }
        Err(KvError::Unavailable(
            format!(
                "the lock rows this batch writes changed under it {MAX_ATTEMPTS} times; \
                 nothing was written"
            )
            .into(),
        ))
    }
}
