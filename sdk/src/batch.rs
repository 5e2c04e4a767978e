//! Builders for guarded batches and step commits.
//!
//! ```
//! use custodian_sdk::Batch;
//! let batch = Batch::new()
//!     .require_absent("takedown", b"state/1".to_vec())
//!     .not_after(1_700_000_060_000)
//!     .put("takedown", b"state/1".to_vec(), b"seeded".to_vec());
//! assert_eq!(batch.len(), 3);
//! ```

use crate::audit::Entry;
use crate::kv::{Entry as KvEntry, KeyRef, Outcome, Precondition, WitBatch, Write};
use crate::steps::{Reschedule, StepResult, WitCommit};
use crate::{Error, TimestampMs};

/// Preconditions and writes, committed all-or-nothing by [`Batch::apply`]
/// or as part of a step's [`Commit`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch(WitBatch);

impl Default for Batch {
    fn default() -> Self {
        Self(WitBatch {
            preconditions: Vec::new(),
            writes: Vec::new(),
        })
    }
}

impl Batch {
    /// An empty batch: no guards, no writes.
    pub fn new() -> Self {
        Self::default()
    }

    /// Require that `key` has no value.
    pub fn require_absent(mut self, partition: &str, key: Vec<u8>) -> Self {
        self.0.preconditions.push(Precondition::Absent(KeyRef {
            partition: partition.to_owned(),
            key,
        }));
        self
    }

    /// Require that `key` holds exactly `value`.
    pub fn require_equals(mut self, partition: &str, key: Vec<u8>, value: Vec<u8>) -> Self {
        self.0.preconditions.push(Precondition::Equals(KvEntry {
            partition: partition.to_owned(),
            key,
            value,
        }));
        self
    }

    /// Require that `key` still holds what was read from it: `Some(value)`
    /// guards on equality, `None` on absence. The usual guard of a
    /// read-modify-write step.
    pub fn require_observed(self, partition: &str, key: Vec<u8>, observed: Option<&[u8]>) -> Self {
        match observed {
            Some(value) => self.require_equals(partition, key, value.to_vec()),
            None => self.require_absent(partition, key),
        }
    }

    /// Refuse to commit after `deadline_ms` on the host clock.
    pub fn not_after(mut self, deadline_ms: TimestampMs) -> Self {
        self.0
            .preconditions
            .push(Precondition::NotAfter(deadline_ms));
        self
    }

    /// Set `key` to `value`.
    pub fn put(mut self, partition: &str, key: Vec<u8>, value: Vec<u8>) -> Self {
        self.0.writes.push(Write::Put(KvEntry {
            partition: partition.to_owned(),
            key,
            value,
        }));
        self
    }

    /// Remove `key` (absent keys are fine).
    pub fn delete(mut self, partition: &str, key: Vec<u8>) -> Self {
        self.0.writes.push(Write::Delete(KeyRef {
            partition: partition.to_owned(),
            key,
        }));
        self
    }

    /// Append `other`'s preconditions and writes after this batch's.
    pub fn extend(mut self, other: Batch) -> Self {
        self.0.preconditions.extend(other.0.preconditions);
        self.0.writes.extend(other.0.writes);
        self
    }

    /// Preconditions plus writes, the count the host bounds.
    pub fn len(&self) -> usize {
        self.0.preconditions.len() + self.0.writes.len()
    }

    /// No preconditions and no writes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Commits the batch now.
    ///
    /// # Errors
    /// Bounds or grants violated; the backend unavailable. A failed guard
    /// is an [`Outcome`], not an error.
    pub fn apply(&self) -> Result<Outcome, Error> {
        crate::kv::apply(&self.0)
    }

    /// Commits the batch now with `entries` in the audit log, in the same
    /// transaction (at most 8): for something a policy commits mid-step,
    /// such as an intent recorded before bytes are written.
    ///
    /// # Errors
    /// As [`Batch::apply`]; an entry out of its bounds.
    pub fn apply_audited(&self, entries: &[crate::audit::Entry]) -> Result<Outcome, Error> {
        crate::audit::apply_with(&self.0, entries)
    }

    /// The WIT record, for callers that build their own results.
    pub fn into_wit(self) -> WitBatch {
        self.0
    }
}

/// The effects of one timer step: a batch plus audit entries, committed
/// atomically with the timer's own update.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Commit {
    batch: Batch,
    audit: Vec<Entry>,
}

impl Commit {
    /// A commit of `batch` with no audit entries yet.
    pub fn new(batch: Batch) -> Self {
        Self {
            batch,
            audit: Vec::new(),
        }
    }

    /// Adds an audit entry, written in the same transaction.
    pub fn audit(mut self, entry: Entry) -> Self {
        self.audit.push(entry);
        self
    }

    /// The WIT record.
    pub fn into_wit(self) -> WitCommit {
        WitCommit {
            batch: self.batch.into_wit(),
            audit: self.audit,
        }
    }

    /// Ends the step: commit, then fire again at `due_at_ms`.
    pub fn reschedule(self, due_at_ms: TimestampMs) -> StepResult {
        StepResult::Reschedule(Reschedule {
            due_at_ms,
            commit: self.into_wit(),
        })
    }

    /// Ends the step and the timer: commit, and delete the timer.
    pub fn done(self) -> StepResult {
        StepResult::Done(self.into_wit())
    }
}
