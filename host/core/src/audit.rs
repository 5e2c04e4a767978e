//! The append-only audit log, kept in the host-reserved KV partition
//! `custodian.audit`.
//!
//! Key layout: `at_ms` (8 bytes, big-endian) then a sequence number (8
//! bytes, big-endian), so a scan reads records in time order. The value is
//! the record as JSON. Each append is guarded on its key being absent, so
//! two writers (threads or hosts) never overwrite each other's records; a
//! collision moves to the next sequence number.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use custodian_kv::{Batch, Detail, Kv, KvError, Outcome, Partition, Precondition, Write};

/// The partition holding the audit log.
pub const PARTITION: &str = "custodian.audit";

/// Longest event name.
pub const MAX_EVENT_BYTES: usize = 128;
/// Most targets per record.
pub const MAX_TARGETS: usize = 64;
/// Longest target.
pub const MAX_TARGET_BYTES: usize = 256;
/// Longest detail.
pub const MAX_DETAIL_BYTES: usize = 4096;
/// Appends retried on key collisions before giving up; collisions need two
/// writers in the same millisecond with the same sequence number.
const MAX_ATTEMPTS: u64 = 8;

/// One audit record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// When, ms since the epoch.
    pub at_ms: u64,
    /// Who: `plugin:<world>@<content hash>`, `operator:<name>`, `system:timer`.
    pub actor: String,
    /// What happened, a stable event name.
    pub event: String,
    /// What it happened to.
    pub targets: Vec<String>,
    /// Context for a human reader.
    pub detail: Option<String>,
}

/// `text` cut to at most `max` bytes, on a character boundary: how a
/// target or detail longer than its bound is kept.
pub fn truncated(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// Which records a reader wants: every given condition must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// The event starts with this (`decision/` for the decision log).
    pub event_prefix: Option<String>,
    /// The actor is exactly this.
    pub actor: Option<String>,
    /// One of the targets is exactly this (`plugin:HASH`, `key:a.txt`).
    pub target: Option<String>,
}

impl Filter {
    /// Whether `record` passes.
    pub fn matches(&self, record: &Record) -> bool {
        self.event_prefix
            .as_ref()
            .is_none_or(|prefix| record.event.starts_with(prefix.as_str()))
            && self
                .actor
                .as_ref()
                .is_none_or(|actor| &record.actor == actor)
            && self
                .target
                .as_ref()
                .is_none_or(|target| record.targets.contains(target))
    }
}

impl Record {
    /// Checks the record's bounds.
    ///
    /// # Errors
    /// A message naming the bound exceeded.
    pub fn validate(&self) -> Result<(), String> {
        if self.event.is_empty() || self.event.len() > MAX_EVENT_BYTES {
            return Err(format!("an audit event is 1..={MAX_EVENT_BYTES} bytes"));
        }
        if self.targets.len() > MAX_TARGETS
            || self.targets.iter().any(|t| t.len() > MAX_TARGET_BYTES)
        {
            return Err(format!(
                "an audit record has at most {MAX_TARGETS} targets of at most {MAX_TARGET_BYTES} bytes"
            ));
        }
        if self
            .detail
            .as_ref()
            .is_some_and(|d| d.len() > MAX_DETAIL_BYTES)
        {
            return Err(format!(
                "an audit detail is at most {MAX_DETAIL_BYTES} bytes"
            ));
        }
        Ok(())
    }
}

fn partition() -> Partition {
    Partition::new(PARTITION).expect("the audit partition name is valid")
}

fn key(at_ms: u64, sequence: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(16);
    key.extend_from_slice(&at_ms.to_be_bytes());
    key.extend_from_slice(&sequence.to_be_bytes());
    key
}

/// Process-wide sequence, so records of one millisecond get distinct keys
/// without a read.
static SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// Appends `record` durably (as durable as the KV backend).
///
/// # Errors
/// The backend's error; [`KvError::Unavailable`] if every attempted key
/// was taken.
pub async fn append(kv: &dyn Kv, record: &Record) -> Result<(), KvError> {
    let value = serde_json::to_vec(record)
        .map_err(|e| KvError::InvalidArgument(format!("audit record: {e}").into()))?;
    for _ in 0..MAX_ATTEMPTS {
        let key = key(record.at_ms, SEQUENCE.fetch_add(1, Ordering::Relaxed));
        let batch = Batch {
            preconditions: vec![Precondition::Absent {
                partition: partition(),
                key: key.clone(),
            }],
            writes: vec![Write::Put {
                partition: partition(),
                key,
                value: value.clone(),
            }],
        };
        match kv.apply(&batch).await? {
            Outcome::Committed => return Ok(()),
            Outcome::PreconditionFailed { .. } | Outcome::DeadlinePassed => continue,
        }
    }
    Err(KvError::Unavailable(
        "could not find a free audit key; the log is under heavy contention".into(),
    ))
}

/// The guard and write that append `record` as part of a larger batch.
///
/// The key's sequence part is 7 bytes of a hash of `unique` (bytes that
/// identify the batch, e.g. the timer row a step consumed) followed by
/// `index`, so the records of one batch stay together and in order, the
/// same step always plans the same keys, and two different batches collide
/// only with probability 2^-56 per millisecond — in which case the guard
/// fails the batch rather than overwriting a record.
///
/// # Errors
/// [`KvError::InvalidArgument`] if the record is out of bounds.
pub fn plan(record: &Record, unique: &[u8], index: u8) -> Result<(Precondition, Write), KvError> {
    record
        .validate()
        .map_err(|m| KvError::InvalidArgument(m.into()))?;
    let value = serde_json::to_vec(record)
        .map_err(|e| KvError::InvalidArgument(format!("audit record: {e}").into()))?;
    let digest = blake3::hash(unique);
    let mut sequence = [0u8; 8];
    sequence[..7].copy_from_slice(&digest.as_bytes()[..7]);
    sequence[7] = index;
    let key = key(record.at_ms, u64::from_be_bytes(sequence));
    Ok((
        Precondition::Absent {
            partition: partition(),
            key: key.clone(),
        },
        Write::Put {
            partition: partition(),
            key,
            value,
        },
    ))
}

/// Up to `limit` records at or after `since_ms`, in time order, resuming
/// after `cursor` (the `next` of a previous page); the key of each record
/// comes with it.
///
/// # Errors
/// The backend's error; [`KvError::Corrupt`] for an undecodable record.
pub async fn read(
    kv: &dyn Kv,
    since_ms: u64,
    cursor: Option<&[u8]>,
    limit: u32,
) -> Result<(Vec<Record>, Option<Vec<u8>>), KvError> {
    read_between(kv, since_ms, None, cursor, limit).await
}

/// As [`read`], of the records written before `until_ms` (when given)
/// only: how a reader walks back through the log a window at a time.
///
/// # Errors
/// As for [`read`].
pub async fn read_between(
    kv: &dyn Kv,
    since_ms: u64,
    until_ms: Option<u64>,
    cursor: Option<&[u8]>,
    limit: u32,
) -> Result<(Vec<Record>, Option<Vec<u8>>), KvError> {
    let start = since_ms.to_be_bytes();
    let end = until_ms.map(u64::to_be_bytes);
    // A cursor from before `since` (a caller that changed its mind) starts
    // at `since` instead of being refused.
    let cursor = cursor.filter(|c| *c >= start.as_slice());
    let page = kv
        .scan(
            &partition(),
            &start,
            end.as_ref().map(<[u8; 8]>::as_slice),
            cursor,
            limit,
        )
        .await?;
    let records = page
        .entries
        .iter()
        .map(|(key, value)| {
            serde_json::from_slice(value).map_err(|e| {
                KvError::Corrupt(Detail::caused_by(
                    format!("audit record {}", hex::encode(key)),
                    e,
                ))
            })
        })
        .collect::<Result<_, _>>()?;
    Ok((records, page.next))
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_filter_passes_the_records_every_given_condition_holds_for() {
        let record = Record {
            at_ms: 1,
            actor: "plugin:retention@ab12".into(),
            event: "decision/retention/assess".into(),
            targets: vec!["outcome:deny".into(), "key:a".into()],
            detail: None,
        };
        let filter = |event: Option<&str>, actor: Option<&str>, target: Option<&str>| Filter {
            event_prefix: event.map(str::to_owned),
            actor: actor.map(str::to_owned),
            target: target.map(str::to_owned),
        };
        assert!(Filter::default().matches(&record));
        assert!(filter(Some("decision/"), None, None).matches(&record));
        assert!(!filter(Some("access/"), None, None).matches(&record));
        assert!(filter(None, Some("plugin:retention@ab12"), Some("key:a")).matches(&record));
        assert!(
            !filter(None, Some("plugin:retention"), None).matches(&record),
            "actors match whole"
        );
        assert!(
            !filter(Some("decision/"), None, Some("key:")).matches(&record),
            "targets match whole"
        );
    }
    use std::sync::Arc;

    use super::*;
    use custodian_base::clock::FixedClock;
    use custodian_kv::memory::MemoryKv;

    fn record(at_ms: u64, event: &str) -> Record {
        Record {
            at_ms,
            actor: "operator:test".into(),
            event: event.into(),
            targets: vec!["t".into()],
            detail: None,
        }
    }

    #[tokio::test]
    async fn records_of_the_same_millisecond_are_all_kept_in_time_order() {
        let kv = MemoryKv::new(Arc::new(FixedClock::new(0)));
        for (at, event) in [(5, "a"), (5, "b"), (3, "c"), (5, "d")] {
            append(&kv, &record(at, event)).await.unwrap();
        }
        let (records, next) = read(&kv, 0, None, 10).await.unwrap();
        let events: Vec<_> = records
            .iter()
            .map(|r| (r.at_ms, r.event.as_str()))
            .collect();
        assert_eq!(events, vec![(3, "c"), (5, "a"), (5, "b"), (5, "d")]);
        assert_eq!(next, None);
    }

    #[tokio::test]
    async fn reading_since_a_time_skips_older_records_and_pages_resume() {
        let kv = MemoryKv::new(Arc::new(FixedClock::new(0)));
        for (at, event) in [(3, "old"), (5, "a"), (6, "b"), (7, "c")] {
            append(&kv, &record(at, event)).await.unwrap();
        }
        let (first, next) = read(&kv, 4, None, 2).await.unwrap();
        assert_eq!(
            first.iter().map(|r| r.event.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        let (rest, next) = read(&kv, 4, next.as_deref(), 2).await.unwrap();
        assert_eq!(
            rest.iter().map(|r| r.event.as_str()).collect::<Vec<_>>(),
            ["c"]
        );
        assert_eq!(next, None);
    }

    #[tokio::test]
    async fn planned_records_of_one_batch_keep_their_order() {
        let kv = MemoryKv::new(Arc::new(FixedClock::new(0)));
        let mut batch = Batch::default();
        for (i, event) in (0u8..).zip(["first", "second", "third"]) {
            let (guard, write) = plan(&record(9, event), b"step-1", i).unwrap();
            batch.preconditions.push(guard);
            batch.writes.push(write);
        }
        assert_eq!(kv.apply(&batch).await, Ok(Outcome::Committed));
        assert_eq!(
            kv.apply(&batch).await,
            Ok(Outcome::PreconditionFailed { index: 0 }),
            "planning the same step again never overwrites its records"
        );
        let (records, _) = read(&kv, 0, None, 10).await.unwrap();
        assert_eq!(
            records.iter().map(|r| r.event.as_str()).collect::<Vec<_>>(),
            ["first", "second", "third"]
        );
    }

    #[test]
    fn out_of_bounds_records_are_refused() {
        let mut r = record(1, "");
        assert!(r.validate().is_err());
        r.event = "x".repeat(MAX_EVENT_BYTES + 1);
        assert!(r.validate().is_err());
        r.event = "ok".into();
        r.targets = vec!["t".into(); MAX_TARGETS + 1];
        assert!(r.validate().is_err());
        r.targets = vec![];
        r.detail = Some("d".repeat(MAX_DETAIL_BYTES + 1));
        assert!(r.validate().is_err());
        r.detail = None;
        assert!(r.validate().is_ok());
    }
}
