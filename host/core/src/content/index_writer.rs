//! Index rows written in bounded, guarded batches.
//!
//! A push writes far more rows than one KV batch may hold, so rows are
//! buffered and committed in batches within the caller bounds
//! ([`MAX_BATCH_OPS`], [`MAX_BATCH_BYTES`]), in the order they were
//! buffered: a row is never committed before a row buffered ahead of it.
//!
//! Two kinds of row:
//! - *created* rows (`o`, `h`, `s`) are written only where absent, each
//!   guarded by `Absent`, so the first writer's value stays (a pack's seal
//!   time is when it was first sealed). An existing object row must agree
//!   with the new one on size and CRC: both describe the same bytes, so a
//!   disagreement means the index is corrupt. (The kind may differ: bytes
//!   pushed as a file can equal a pack's; the first kind recorded stays.)
//! - *replaced* rows (`r`) are written unconditionally: a path's entry is
//!   whatever was pushed to it last.

use std::collections::HashSet;

use super::index::{OBJECT_TAG, ObjectRow};
use super::{ContentError, ObjectId, partition};
use custodian_kv::{
    Batch, Kv, MAX_BATCH_BYTES, MAX_BATCH_OPS, Outcome, Partition, Precondition, Write,
};

/// Attempts at one batch when concurrent writers create the same rows
/// between our read and our commit. Each retry re-reads, so it makes
/// progress unless rows keep appearing; a bound keeps a pathological race
/// from spinning forever.
const MAX_ATTEMPTS: usize = 8;

/// Buffers index rows and commits them in bounded batches.
pub(super) struct IndexWriter<'a> {
    kv: &'a dyn Kv,
    partition: Partition,
    created: Vec<(Vec<u8>, Vec<u8>)>,
    replaced: Vec<(Vec<u8>, Vec<u8>)>,
    /// Keys of `created`, so a row buffered twice is written once.
    pending: HashSet<Vec<u8>>,
    ops: usize,
    bytes: usize,
}

impl<'a> IndexWriter<'a> {
    pub(super) fn new(kv: &'a dyn Kv) -> Self {
        Self {
            kv,
            partition: partition(),
            created: Vec::new(),
            replaced: Vec::new(),
            pending: HashSet::new(),
            ops: 0,
            bytes: 0,
        }
    }

    /// Buffers a row written only if `key` is absent.
    pub(super) async fn create(
        &mut self,
        key: Vec<u8>,
        value: Vec<u8>,
    ) -> Result<(), ContentError> {
        if self.pending.contains(&key) {
            return Ok(());
        }
        // An `Absent` guard and a put, each carrying the key.
        self.make_room(2, 2 * key.len() + value.len()).await?;
        self.pending.insert(key.clone());
        self.created.push((key, value));
        Ok(())
    }

    /// Buffers a row written whatever `key` holds.
    pub(super) async fn replace(
        &mut self,
        key: Vec<u8>,
        value: Vec<u8>,
    ) -> Result<(), ContentError> {
        self.make_room(1, key.len() + value.len()).await?;
        self.replaced.push((key, value));
        Ok(())
    }

    async fn make_room(&mut self, ops: usize, bytes: usize) -> Result<(), ContentError> {
        if self.ops + ops > MAX_BATCH_OPS || self.bytes + bytes > MAX_BATCH_BYTES {
            self.flush().await?;
        }
        self.ops += ops;
        self.bytes += bytes;
        Ok(())
    }

    /// Commits every buffered row.
    ///
    /// # Errors
    /// [`ContentError::Corrupt`] when an existing object row disagrees
    /// with the bytes; [`ContentError::Conflict`] when concurrent writers
    /// kept winning; [`ContentError::Index`] if the KV fails. Nothing of
    /// the failed batch is written.
    pub(super) async fn flush(&mut self) -> Result<(), ContentError> {
        if self.created.is_empty() && self.replaced.is_empty() {
            return Ok(());
        }
        for _ in 0..MAX_ATTEMPTS {
            let keys: Vec<Vec<u8>> = self.created.iter().map(|(k, _)| k.clone()).collect();
            let current = if keys.is_empty() {
                Vec::new()
            } else {
                self.kv.get_many(&self.partition, &keys).await?
            };
            let mut batch = Batch::default();
            for ((key, value), current) in self.created.iter().zip(current) {
                match current {
                    Some(current) => agree(key, value, &current)?,
                    None => {
                        batch.preconditions.push(Precondition::Absent {
                            partition: self.partition.clone(),
                            key: key.clone(),
                        });
                        batch.writes.push(Write::Put {
                            partition: self.partition.clone(),
                            key: key.clone(),
                            value: value.clone(),
                        });
                    }
                }
            }
            batch
                .writes
                .extend(self.replaced.iter().map(|(key, value)| Write::Put {
                    partition: self.partition.clone(),
                    key: key.clone(),
                    value: value.clone(),
                }));
            let committed = batch.writes.is_empty()
                || match self.kv.apply(&batch).await? {
                    Outcome::Committed => true,
                    // Someone created one of the rows since we read: read
                    // again, and keep theirs.
                    Outcome::PreconditionFailed { .. } => false,
                    Outcome::DeadlinePassed => {
                        return Err(ContentError::Conflict(
                            "an index batch without a deadline reported one".into(),
                        ));
                    }
                };
            if committed {
                self.created.clear();
                self.replaced.clear();
                self.pending.clear();
                self.ops = 0;
                self.bytes = 0;
                return Ok(());
            }
        }
        Err(ContentError::Conflict(format!(
            "index rows kept being created by another writer through {MAX_ATTEMPTS} attempts"
        )))
    }
}

/// Whether an existing created row may stand for the one we would write.
fn agree(key: &[u8], ours: &[u8], theirs: &[u8]) -> Result<(), ContentError> {
    if key.first() != Some(&OBJECT_TAG) || ours == theirs {
        return Ok(());
    }
    let (ours, theirs) = (ObjectRow::decode(ours)?, ObjectRow::decode(theirs)?);
    if (ours.size, ours.crc64) == (theirs.size, theirs.crc64) {
        return Ok(());
    }
    let id = ObjectId::from_slice(&key[1..])?;
    Err(ContentError::Corrupt(format!(
        "the index records object {id} with {} bytes and CRC {:016x}, but its bytes have {} and \
         {:016x}",
        theirs.size, theirs.crc64, ours.size, ours.crc64
    )))
}
