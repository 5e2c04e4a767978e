//! Building and committing the guarded batches every fencing write uses.

use super::{Coordinator, FenceError};
use custodian_kv::{Batch, Outcome, Partition, Precondition, Write};

/// The guard that a row still holds what was read: `Absent` if it was
/// absent, else `Equals` the exact bytes read.
pub(super) fn observed(partition: &Partition, key: &[u8], value: Option<&Vec<u8>>) -> Precondition {
    match value {
        None => Precondition::Absent {
            partition: partition.clone(),
            key: key.to_vec(),
        },
        Some(value) => Precondition::Equals {
            partition: partition.clone(),
            key: key.to_vec(),
            value: value.clone(),
        },
    }
}

pub(super) fn put(partition: &Partition, key: &[u8], value: Vec<u8>) -> Write {
    Write::Put {
        partition: partition.clone(),
        key: key.to_vec(),
        value,
    }
}

pub(super) fn delete(partition: &Partition, key: &[u8]) -> Write {
    Write::Delete {
        partition: partition.clone(),
        key: key.to_vec(),
    }
}

impl Coordinator {
    /// Applies `batch`: `true` if it committed, `false` if a guard failed.
    ///
    /// # Errors
    /// The backend's error, or [`FenceError::Internal`] for a passed
    /// deadline: fencing's own batches carry none.
    pub(super) async fn commit(&self, what: &str, batch: &Batch) -> Result<bool, FenceError> {
        match self.kv.apply(batch).await? {
            Outcome::Committed => Ok(true),
            Outcome::PreconditionFailed { .. } => Ok(false),
            Outcome::DeadlinePassed => Err(FenceError::Internal(format!(
                "the {what} batch has no deadline, yet one passed"
            ))),
        }
    }
}
