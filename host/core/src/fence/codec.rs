//! Stored records and their versioned encoding.
//!
//! Every value is [`FORMAT_V1`] followed by the record as JSON. Decoding
//! checks the size bound before parsing and rejects unknown fields, so a
//! value written by a newer format, a truncated write or a stray row
//! surfaces as [`FenceError::Corrupt`] rather than as a misread field.
//! Encoding is deterministic (struct fields in declaration order), which
//! matters: guards compare stored bytes.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::FenceError;
use custodian_kv::MAX_KEY_BYTES;

/// The leading byte of every value this module writes.
const FORMAT_V1: u8 = 1;

/// Bound on a coordinator, lease or epoch-lease row: a handful of
/// integers. Anything longer was not written by this module.
pub(super) const MAX_ROW_BYTES: usize = 4096;

/// Bound on a revocation checkpoint: a cursor of at most
/// [`MAX_KEY_BYTES`] bytes as a JSON array stays far below it.
pub(super) const MAX_CHECKPOINT_BYTES: usize = 32_768;

/// One coordinator epoch (grant epoch or authority generation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EpochRow {
    pub generation: u64,
}

/// Namespace configuration as fencing sees it. Written by whatever owns
/// the namespace's configuration; fencing only reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NamespaceRecord {
    pub config_version: u64,
}

/// A declared lease-table recovery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LeaseRecovery {
    /// When the recovered table started serving, ms since the epoch.
    pub recovered_at_ms: u64,
    /// How many recoveries have been declared. Each declaration changes
    /// the marker even at an unchanged clock, so every checkpoint saved
    /// before it is invalidated.
    pub declarations: u64,
}

/// A namespace's lease on one shard, as the coordinator records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LeasedShard {
    /// The grant epoch the lease was last granted or renewed at.
    pub epoch: u64,
    /// The grant epoch the shard's `el` is known to be fenced at.
    pub acked_epoch: u64,
    /// The authority generation the lease was last granted or renewed at.
    pub authority_generation: u64,
    /// The authority generation the shard's `el` is known to be fenced at.
    pub acked_authority_generation: u64,
    /// When the lease ends, ms since the epoch.
    pub expires_at_ms: u64,
}

/// A shard's epoch lease: what every writer's guard compares against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EpochLease {
    /// The grant epoch the shard's writes are fenced at.
    pub epoch: u64,
    /// The authority generation the shard's writes are fenced at.
    pub authority_generation: u64,
    /// The authority generation the holder loaded its policy for when it
    /// was last granted; pushes preserve it, so `authority_generation >
    /// authority_ready` tells the holder its policy is stale. `None` when
    /// revocation created the row without a holder.
    pub authority_ready: Option<u64>,
    /// When the lease ends, ms since the epoch.
    pub expires_at_ms: u64,
    /// The namespace configuration version the row was written under.
    pub config_version: u64,
}

/// Where a revocation slice resumes. Only an optimization: it is honoured
/// only at the same epoch and the same recovery marker it was saved at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RevokeCheckpoint {
    pub generation: u64,
    pub recovery: Option<LeaseRecovery>,
    pub cursor: Vec<u8>,
}

pub(super) fn encode<T: Serialize>(what: &str, record: &T) -> Result<Vec<u8>, FenceError> {
    let mut bytes = vec![FORMAT_V1];
    serde_json::to_writer(&mut bytes, record)
        .map_err(|e| FenceError::Internal(format!("cannot encode a {what}: {e}")))?;
    Ok(bytes)
}

pub(super) fn decode<T: DeserializeOwned>(
    what: &str,
    bytes: &[u8],
    max_bytes: usize,
) -> Result<T, FenceError> {
    // Check the bound first: a corrupt row must not cost an unbounded parse.
    if bytes.len() > max_bytes {
        return Err(FenceError::Corrupt(format!(
            "a {what} of {} bytes exceeds {max_bytes}",
            bytes.len()
        )));
    }
    let Some((&FORMAT_V1, json)) = bytes.split_first() else {
        return Err(FenceError::Corrupt(format!(
            "a {what} does not start with format byte {FORMAT_V1}"
        )));
    };
    serde_json::from_slice(json).map_err(|e| FenceError::Corrupt(format!("a {what}: {e}")))
}

pub(super) fn decode_row<T: DeserializeOwned>(what: &str, bytes: &[u8]) -> Result<T, FenceError> {
    decode(what, bytes, MAX_ROW_BYTES)
}

/// Decodes an optional epoch row; an absent row is generation 0.
pub(super) fn epoch_of(value: Option<&Vec<u8>>) -> Result<u64, FenceError> {
    value.map_or(Ok(0), |bytes| {
        decode_row::<EpochRow>("coordinator epoch", bytes).map(|row| row.generation)
    })
}

/// Decodes a checkpoint, including the bound on its cursor (a scan cursor
/// longer than any key cannot have come from a scan).
pub(super) fn decode_checkpoint(bytes: &[u8]) -> Result<RevokeCheckpoint, FenceError> {
    let checkpoint: RevokeCheckpoint =
        decode("revocation checkpoint", bytes, MAX_CHECKPOINT_BYTES)?;
    if checkpoint.cursor.len() > MAX_KEY_BYTES {
        return Err(FenceError::Corrupt(format!(
            "a revocation cursor of {} bytes exceeds {MAX_KEY_BYTES}",
            checkpoint.cursor.len()
        )));
    }
    Ok(checkpoint)
}
