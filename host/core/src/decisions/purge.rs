//! Who decides whether an exact version may be permanently deleted: the
//! purge policy (the purge plugin, through [`PurgeJudge`]). The host
//! establishes the facts — which registry governs the key, whether it maps
//! the version — and performs and verifies the deletions.

use async_trait::async_trait;

use crate::decisions::PolicyError;

/// One exact version (or delete marker) found under a managed key.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Candidate {
    /// The key.
    pub key: String,
    /// The version id.
    pub version_id: String,
    /// Its etag (empty for a delete marker).
    pub etag: String,
    /// Its size.
    pub size: u64,
    /// A delete marker rather than bytes.
    pub is_delete_marker: bool,
    /// When it was written.
    pub last_modified_ms: Option<u64>,
}

/// A published registry row: where a version's bytes now live.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Mapping {
    /// The key the version was moved from.
    pub source_key: String,
    /// The version that was moved.
    pub source_version_id: String,
    /// Its etag, when recorded.
    pub source_etag: Option<String>,
    /// Where it was moved to.
    pub destination_key: String,
    /// The destination version.
    pub destination_version_id: String,
    /// The destination version's etag.
    pub destination_etag: String,
    /// Its size.
    pub size: u64,
}

/// What governs a candidate's key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Governance {
    /// No archive registry covers the key.
    Unarchived,
    /// The published registry maps this exact version.
    Mapped(Mapping),
    /// The registry of this prefix covers the key but not this version.
    Unmapped(String),
}

/// The decision for one candidate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Delete this exact version now.
    Delete,
    /// Keep it, for this reason.
    Retain(String),
}

/// Decides whether one exact version may be deleted.
#[async_trait]
pub trait PurgeJudge: Send + Sync {
    /// The policy's verdict on `candidate` under `governance` at `now_ms`.
    ///
    /// # Errors
    /// The policy's answer: a mapping that does not describe the candidate
    /// is [`PolicyError::InvalidArgument`]; a policy that could not be
    /// asked is [`PolicyError::Unavailable`].
    async fn judge(
        &self,
        candidate: &Candidate,
        governance: &Governance,
        now_ms: u64,
    ) -> Result<Verdict, PolicyError>;

    /// The deciding plugin's content hash, for the decision log, when the
    /// judge is a plugin.
    fn plugin_hash(&self) -> Option<String> {
        None
    }
}
