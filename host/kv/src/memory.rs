//! The in-memory backend: the reference model every other backend is
//! compared against. Not durable; one mutex makes every batch trivially
//! serializable.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;

use super::{
    Answer, Batch, Kv, KvError, Outcome, Page, Partition, Precondition, Read, Write, scan_range,
    validate_batch, validate_get_many, validate_key, validate_reads, validate_scan,
};
use custodian_base::clock::Clock;

type Rows = BTreeMap<Vec<u8>, Vec<u8>>;

/// Partitions held in process memory.
pub struct MemoryKv {
    partitions: Mutex<BTreeMap<Partition, Rows>>,
    clock: Arc<dyn Clock>,
}

impl MemoryKv {
    /// An empty store whose `NotAfter` preconditions read `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            partitions: Mutex::new(BTreeMap::new()),
            clock,
        }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<Partition, Rows>> {
        // A panic while holding the lock cannot leave a half-applied batch:
        // writes are applied only after every check, and BTreeMap inserts do
        // not panic midway. So the data behind a poisoned lock is consistent.
        self.partitions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// One page of `rows` (a partition's, `None` when it has none) over a
/// validated range `(start, end, cursor)`.
fn page_of(
    rows: Option<&Rows>,
    (start, end, cursor): (&[u8], Option<&[u8]>, Option<&[u8]>),
    limit: u32,
) -> Page {
    let (Some(rows), Some((lower, upper))) = (rows, scan_range(start, end, cursor)) else {
        return Page::default();
    };
    let mut range = rows.range::<[u8], _>((lower, upper));
    let entries: Vec<_> = range
        .by_ref()
        .take(limit as usize)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let next = match range.next() {
        Some(_) => entries.last().map(|(k, _)| k.clone()),
        None => None,
    };
    Page { entries, next }
}

#[async_trait]
impl Kv for MemoryKv {
    async fn get(&self, partition: &Partition, key: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        validate_key(key)?;
        Ok(self
            .lock()
            .get(partition)
            .and_then(|rows| rows.get(key))
            .cloned())
    }

    async fn get_many(
        &self,
        partition: &Partition,
        keys: &[Vec<u8>],
    ) -> Result<Vec<Option<Vec<u8>>>, KvError> {
        validate_get_many(keys)?;
        let partitions = self.lock();
        let rows = partitions.get(partition);
        Ok(keys
            .iter()
            .map(|key| rows.and_then(|rows| rows.get(key)).cloned())
            .collect())
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
        Ok(page_of(
            self.lock().get(partition),
            (start, end, cursor),
            limit,
        ))
    }

    async fn read(&self, reads: &[Read]) -> Result<Vec<Answer>, KvError> {
        validate_reads(reads)?;
        // One lock held over every read: the snapshot.
        let partitions = self.lock();
        Ok(reads
            .iter()
            .map(|read| match read {
                Read::Get { partition, key } => Answer::Value(
                    partitions
                        .get(partition)
                        .and_then(|rows| rows.get(key))
                        .cloned(),
                ),
                Read::Scan {
                    partition,
                    start,
                    end,
                    cursor,
                    limit,
                } => Answer::Page(page_of(
                    partitions.get(partition),
                    (start, end.as_deref(), cursor.as_deref()),
                    *limit,
                )),
            })
            .collect())
    }

    async fn apply(&self, batch: &Batch) -> Result<Outcome, KvError> {
        validate_batch(batch)?;
        let mut partitions = self.lock();
        for (index, precondition) in batch.preconditions.iter().enumerate() {
            let current = |partition: &Partition, key: &[u8]| {
                partitions.get(partition).and_then(|rows| rows.get(key))
            };
            let holds = match precondition {
                Precondition::Absent { partition, key } => current(partition, key).is_none(),
                Precondition::Equals {
                    partition,
                    key,
                    value,
                } => current(partition, key) == Some(value),
                Precondition::NotAfter(deadline) => {
                    if self.clock.now_ms() > *deadline {
                        return Ok(Outcome::DeadlinePassed);
                    }
                    true
                }
            };
            if !holds {
                // Bounded by MAX_COMMIT_OPS, so it fits.
                let index = u32::try_from(index).unwrap_or(u32::MAX);
                return Ok(Outcome::PreconditionFailed { index });
            }
        }
        for write in &batch.writes {
            match write {
                Write::Put {
                    partition,
                    key,
                    value,
                } => {
                    partitions
                        .entry(partition.clone())
                        .or_default()
                        .insert(key.clone(), value.clone());
                }
                Write::Delete { partition, key } => {
                    if let Some(rows) = partitions.get_mut(partition) {
                        rows.remove(key);
                    }
                }
            }
        }
        Ok(Outcome::Committed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use custodian_base::clock::FixedClock;

    crate::kv_conformance_tests!(|clock: Arc<FixedClock>| MemoryKv::new(clock));
}
