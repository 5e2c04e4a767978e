//! What can go wrong retiring versions: one semantic enum for the
//! mechanism (the failure that carries what was already done is
//! [`super::report::PurgeFailure`]).

use crate::decisions::PolicyError;
use crate::versions::VersionsError;
use custodian_object::ObjectError;

/// Why a purge was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum PurgeError {
    /// The plan (or a pin manifest) is malformed: nothing was done.
    #[error("invalid purge plan: {0}")]
    Plan(String),
    /// A pin manifest cannot be read or is invalid.
    #[error(transparent)]
    Manifest(VersionsError),
    /// The store keeps no versions.
    #[error("the store {0} does not have versioning enabled: exact versions cannot be purged")]
    Unversioned(String),
    /// The facts do not allow the deletion (the registry differs from the
    /// coordinated receipt, a candidate is not mapped, …): nothing is
    /// deleted after a refusal is detected.
    #[error("refused: {0}")]
    Refused(String),
    /// The store failed a call about `object`.
    #[error("{object}: {error}")]
    Store {
        /// The key (and version) the call was about.
        object: String,
        /// The store's error.
        error: ObjectError,
    },
    /// An archive registry is malformed or cannot be read.
    #[error(transparent)]
    Registry(VersionsError),
    /// The purge policy could not answer.
    #[error("{object}: the purge policy failed: {error}")]
    Judge {
        /// The version asked about.
        object: String,
        /// The policy's error.
        error: PolicyError,
    },
    /// The retention policy could not answer (a zero retention is its
    /// refusal too).
    #[error("{object}: the retention policy failed: {error}")]
    Retention {
        /// The version asked about.
        object: String,
        /// The policy's error.
        error: PolicyError,
    },
    /// Deleted versions are still listed after their deletion.
    #[error("{object}: versions still exist after permanent deletion: {}", versions.join(", "))]
    StillPresent {
        /// The key.
        object: String,
        /// The versions still listed.
        versions: Vec<String>,
    },
    /// A registry row's destination copy is not what the registry
    /// recorded (missing, or another size, etag or CRC): the source
    /// version it maps would be lost for good, so it is not deleted.
    #[error("refused: the history of {registry} does not hold: {row}: {reason}")]
    History {
        /// The registry object.
        registry: String,
        /// The row, `SOURCE@VERSION -> DESTINATION@VERSION`.
        row: String,
        /// What is wrong with the destination.
        reason: String,
    },
    /// Too many versions under one prefix or key to hold in memory.
    #[error("{prefix:?} lists more than {limit} versions: split the plan")]
    TooManyVersions {
        /// The prefix listed.
        prefix: String,
        /// The bound.
        limit: usize,
    },
}

impl PurgeError {
    /// A short, stable name of the kind of failure, for JSON reports.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Plan(_) => "plan",
            Self::Manifest(_) => "manifest",
            Self::Unversioned(_) => "unversioned",
            Self::Refused(_) => "refused",
            Self::Store { .. } => "store",
            Self::Registry(_) => "corrupt-registry",
            Self::Judge { .. } => "purge-policy",
            Self::Retention { .. } => "retention-policy",
            Self::StillPresent { .. } => "still-present",
            Self::History { .. } => "history",
            Self::TooManyVersions { .. } => "too-many-versions",
        }
    }

    /// Bad input (the plan or a manifest), as opposed to a refusal or a
    /// failure of the run.
    pub fn is_usage(&self) -> bool {
        matches!(self, Self::Plan(_) | Self::Manifest(_))
    }

    pub(crate) fn store(object: impl Into<String>, error: ObjectError) -> Self {
        Self::Store {
            object: object.into(),
            error,
        }
    }
}
