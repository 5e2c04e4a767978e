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
//!
//! An object's row and an entry naming an object may be buffered with a
//! guard on that object not being taken down (its denial row absent),
//! in the same batch: a takedown filed between a push's check of an
//! object and the commit of those rows fails that commit, and the push
//! answers [`ContentError::TakenDown`] rather than indexing or entering
//! withheld content.

use std::collections::HashSet;

use super::index::{OBJECT_TAG, ObjectRow};
use super::{ContentError, ObjectId, denial, partition};
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
    /// Objects the next batch is guarded on not being taken down.
    objects: Vec<ObjectId>,
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
            objects: Vec::new(),
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
        self.create_unless_withheld(key, value, None).await
    }

    /// [`IndexWriter::create`], in a batch guarded on `object` (when
    /// given) not being taken down.
    pub(super) async fn create_unless_withheld(
        &mut self,
        key: Vec<u8>,
        value: Vec<u8>,
        object: Option<ObjectId>,
    ) -> Result<(), ContentError> {
        if self.pending.contains(&key) {
            return Ok(());
        }
        // An `Absent` guard and a put, each carrying the key.
        self.make_room(
            2 + guard_ops(object),
            2 * key.len() + value.len() + GUARD_BYTES,
        )
        .await?;
        self.pending.insert(key.clone());
        self.created.push((key, value));
        self.objects.extend(object);
        Ok(())
    }

    /// Buffers a row written whatever `key` holds, in a batch guarded on
    /// `object` (when given) not being taken down.
    pub(super) async fn replace_unless_withheld(
        &mut self,
        key: Vec<u8>,
        value: Vec<u8>,
        object: Option<ObjectId>,
    ) -> Result<(), ContentError> {
        self.make_room(1 + guard_ops(object), key.len() + value.len() + GUARD_BYTES)
            .await?;
        self.replaced.push((key, value));
        self.objects.extend(object);
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
    /// with the bytes; [`ContentError::TakenDown`] when a takedown denied
    /// one of the batch's objects since it was checked;
    /// [`ContentError::Conflict`] when concurrent writers kept winning; [`ContentError::Index`] if the KV fails. Nothing of
    /// the failed batch is written.
    pub(super) async fn flush(&mut self) -> Result<(), ContentError> {
        if self.created.is_empty() && self.replaced.is_empty() && self.objects.is_empty() {
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
            batch
                .preconditions
                .extend(self.objects.iter().map(|object| Precondition::Absent {
                    partition: denial::partition(),
                    key: custodian_contract::denial::key(&object.0),
                }));
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
                    // A takedown denied one of the objects since it was
                    // checked: none of the batch is written.
                    Outcome::PreconditionFailed { index }
                        if (index as usize) < self.objects.len() =>
                    {
                        let object = self.objects[index as usize];
                        return Err(match denial::check(self.kv, &object).await? {
                            Some(withheld) => ContentError::TakenDown(withheld),
                            None => ContentError::Conflict(format!(
                                "object {object} was taken down and withdrawn while it was pushed"
                            )),
                        });
                    }
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
                self.objects.clear();
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

/// Bytes a not-withheld guard may carry: the denial partition's name and
/// a denial key (tag and id); counted whether or not there is one, which
/// only errs towards smaller batches.
const GUARD_BYTES: usize = 6 + 33;

/// Operations of a not-withheld guard on `object`, if any.
fn guard_ops(object: Option<ObjectId>) -> usize {
    usize::from(object.is_some())
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
