use std::ops::Bound;

use crate::Error;
use crate::bindings::host::custodian::host::kv::{
    Batch as WitBatch, Entry, KeyRef, Outcome, Page, Precondition, ReadAnswer, ReadOp, Write,
};
use custodian_contract::limits::{
    HOST_PARTITION_PREFIX, MAX_BATCH_BYTES, MAX_BATCH_OPS, MAX_KEY_BYTES, MAX_PAGE_ENTRIES,
    MAX_VALUE_BYTES,
};

fn invalid(message: String) -> Error {
    Error::InvalidArgument(message)
}

/// Every valid partition is granted (a unit test is its own deployer),
/// except the host's own, which no deployer can grant: the host answers
/// `access-denied` for them, so the native host does too.
fn check_partition(partition: &str) -> Result<(), Error> {
    if !custodian_contract::name::is_name(
        partition,
        custodian_contract::limits::MAX_PARTITION_BYTES,
    ) {
        Err(invalid(format!("{partition:?} is not a partition name")))
    } else if partition.starts_with(HOST_PARTITION_PREFIX) {
        Err(Error::AccessDenied(format!(
            "partition {partition} is reserved for the host and cannot be granted"
        )))
    } else {
        Ok(())
    }
}

fn check_key(key: &[u8]) -> Result<(), Error> {
    if (1..=MAX_KEY_BYTES).contains(&key.len()) {
        Ok(())
    } else {
        Err(invalid(format!(
            "a key of {} bytes is outside 1..={MAX_KEY_BYTES}",
            key.len()
        )))
    }
}

/// Counts one host call of the KV (see [`crate::testing::kv_calls`]).
fn count(call: impl FnOnce(&mut super::KvCalls) -> &mut u64) {
    super::with(|host| *call(&mut host.kv_calls) += 1);
}

/// The native host's `kv.get`; see `wit/deps/host/kv.wit`.
pub fn get(partition: &str, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
    count(|calls| &mut calls.gets);
    get_row(partition, key)
}

/// A `get` as a part of a larger call (not counted on its own).
fn get_row(partition: &str, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
    check_partition(partition)?;
    check_key(key)?;
    Ok(super::with(|host| {
        host.kv.get(partition).and_then(|p| p.get(key)).cloned()
    }))
}

/// The native host's `kv.get-many`; see `wit/deps/host/kv.wit`.
pub fn get_many(partition: &str, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>, Error> {
    count(|calls| &mut calls.get_manys);
    // The partition first, as the host does, even when no key is asked.
    check_partition(partition)?;
    if keys.len() > MAX_PAGE_ENTRIES as usize {
        return Err(invalid(format!(
            "{} keys exceed {MAX_PAGE_ENTRIES}",
            keys.len()
        )));
    }
    keys.iter().map(|key| get_row(partition, key)).collect()
}

/// The native host's `kv.read`; see `wit/deps/host/kv.wit`. The native
/// host is one thread's, so its reads in turn are one snapshot.
pub fn read(reads: &[ReadOp]) -> Result<Vec<ReadAnswer>, Error> {
    count(|calls| &mut calls.snapshots);
    let entries = reads
        .iter()
        .map(|read| match read {
            ReadOp::Get(_) => 1,
            ReadOp::Scan(range) => u64::from(range.limit),
        })
        .sum();
    custodian_contract::limits::check_reads(reads.len(), entries).map_err(invalid)?;
    reads
        .iter()
        .map(|read| match read {
            ReadOp::Get(at) => get_row(&at.partition, &at.key).map(ReadAnswer::Value),
            ReadOp::Scan(range) => scan_page(
                &range.partition,
                &range.start,
                range.end.as_deref(),
                range.cursor.as_deref(),
                range.limit,
            )
            .map(ReadAnswer::Page),
        })
        .collect()
}

/// The native host's `kv.scan`; see `wit/deps/host/kv.wit`.
pub fn scan(
    partition: &str,
    start: &[u8],
    end: Option<&[u8]>,
    cursor: Option<&[u8]>,
    limit: u32,
) -> Result<Page, Error> {
    count(|calls| &mut calls.scans);
    scan_page(partition, start, end, cursor, limit)
}

/// A `scan` as a part of a larger call (not counted on its own).
fn scan_page(
    partition: &str,
    start: &[u8],
    end: Option<&[u8]>,
    cursor: Option<&[u8]>,
    limit: u32,
) -> Result<Page, Error> {
    check_partition(partition)?;
    if limit == 0 || limit > MAX_PAGE_ENTRIES {
        return Err(invalid(format!(
            "limit {limit} is outside 1..={MAX_PAGE_ENTRIES}"
        )));
    }
    for bound in [Some(start), end, cursor].into_iter().flatten() {
        if bound.len() > MAX_KEY_BYTES {
            return Err(invalid(format!(
                "a scan bound of {} bytes exceeds {MAX_KEY_BYTES}",
                bound.len()
            )));
        }
    }
    let lower = match cursor {
        Some(cursor) if cursor < start || end.is_some_and(|end| cursor >= end) => {
            return Err(invalid("the cursor is outside the scanned range".into()));
        }
        Some(cursor) => Bound::Excluded(cursor.to_vec()),
        None => Bound::Included(start.to_vec()),
    };
    let upper = end.map_or(Bound::Unbounded, |end| Bound::Excluded(end.to_vec()));
    if end.is_some_and(|end| end <= start) {
        return Ok(Page {
            entries: Vec::new(),
            next: None,
        });
    }
    super::with(|host| {
        let Some(rows) = host.kv.get(partition) else {
            return Ok(Page {
                entries: Vec::new(),
                next: None,
            });
        };
        let mut range = rows.range((lower, upper));
        let entries: Vec<Entry> = range
            .by_ref()
            .take(limit as usize)
            .map(|(key, value)| Entry {
                partition: partition.to_owned(),
                key: key.clone(),
                value: value.clone(),
            })
            .collect();
        let next = if range.next().is_some() {
            entries.last().map(|last| last.key.clone())
        } else {
            None
        };
        Ok(Page { entries, next })
    })
}

fn check_batch(batch: &WitBatch) -> Result<(), Error> {
    // Every partition first, as the host checks its grants before the bounds.
    for precondition in &batch.preconditions {
        match precondition {
            Precondition::Absent(KeyRef { partition, .. })
            | Precondition::Equals(Entry { partition, .. }) => check_partition(partition)?,
            Precondition::NotAfter(_) => {}
        }
    }
    for write in &batch.writes {
        match write {
            Write::Put(Entry { partition, .. }) | Write::Delete(KeyRef { partition, .. }) => {
                check_partition(partition)?;
            }
        }
    }
    let ops = batch.preconditions.len() + batch.writes.len();
    if ops > MAX_BATCH_OPS {
        return Err(invalid(format!("{ops} operations exceed {MAX_BATCH_OPS}")));
    }
    let mut bytes = 0usize;
    let mut check_ref = |key: &[u8], value: Option<&[u8]>| {
        check_key(key)?;
        if let Some(value) = value {
            if value.len() > MAX_VALUE_BYTES {
                return Err(invalid(format!(
                    "a value of {} bytes exceeds {MAX_VALUE_BYTES}",
                    value.len()
                )));
            }
            bytes += value.len();
        }
        bytes += key.len();
        Ok(())
    };
    for precondition in &batch.preconditions {
        match precondition {
            Precondition::Absent(KeyRef { key, .. }) => check_ref(key, None)?,
            Precondition::Equals(Entry { key, value, .. }) => check_ref(key, Some(value))?,
            Precondition::NotAfter(_) => {}
        }
    }
    for write in &batch.writes {
        match write {
            Write::Put(Entry { key, value, .. }) => check_ref(key, Some(value))?,
            Write::Delete(KeyRef { key, .. }) => check_ref(key, None)?,
        }
    }
    if bytes > MAX_BATCH_BYTES {
        return Err(invalid(format!(
            "{bytes} batch bytes exceed {MAX_BATCH_BYTES}"
        )));
    }
    Ok(())
}

/// The native host's `kv.apply`; see `wit/deps/host/kv.wit`.
pub fn apply(batch: &WitBatch) -> Result<Outcome, Error> {
    count(|calls| &mut calls.applies);
    check_batch(batch)?;
    super::guard::batch(batch)?;
    super::with(|host| {
        for (index, precondition) in batch.preconditions.iter().enumerate() {
            let current =
                |partition: &str, key: &[u8]| host.kv.get(partition).and_then(|p| p.get(key));
            let holds = match precondition {
                Precondition::Absent(r) => current(&r.partition, &r.key).is_none(),
                Precondition::Equals(e) => current(&e.partition, &e.key) == Some(&e.value),
                Precondition::NotAfter(deadline) => {
                    if host.now_ms > *deadline {
                        return Ok(Outcome::DeadlinePassed);
                    }
                    true
                }
            };
            if !holds {
                let index = u32::try_from(index).expect("batch size is bounded");
                return Ok(Outcome::PreconditionFailed(index));
            }
        }
        for write in &batch.writes {
            match write {
                Write::Put(e) => {
                    host.kv
                        .entry(e.partition.clone())
                        .or_default()
                        .insert(e.key.clone(), e.value.clone());
                }
                Write::Delete(r) => {
                    if let Some(rows) = host.kv.get_mut(&r.partition) {
                        rows.remove(&r.key);
                    }
                }
            }
        }
        Ok(Outcome::Committed)
    })
}
