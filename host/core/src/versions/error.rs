//! What can go wrong reading exact versions: one semantic enum for the
//! whole mechanism, so the CLI and the report can say which thing failed.

use crate::decisions::PolicyError;
use custodian_object::ObjectError;

/// Why a manifest, a receipt, a registry or one pinned object failed.
#[derive(Debug, thiserror::Error)]
pub enum VersionsError {
    /// A pin manifest cannot be read or parsed, or a row of it is invalid.
    #[error("pin manifest {path}: {reason}")]
    Manifest {
        /// The manifest file.
        path: String,
        /// What is wrong, naming the row or key.
        reason: String,
    },
    /// A pin names no exact version (`""`, `"null"` or nothing).
    #[error("pin manifest {path}: {key:?} has no exact version id")]
    NoExactVersion {
        /// The manifest file.
        path: String,
        /// The pinned key.
        key: String,
    },
    /// A receipt of `--receipts` is invalid.
    #[error("receipt {receipt}: {reason}")]
    Receipt {
        /// Which receipt (its index and task prefixes, when known).
        receipt: String,
        /// What is wrong.
        reason: String,
    },
    /// The store keeps no versions, so no pin can be checked.
    #[error("the store {0} does not have versioning enabled: exact versions cannot be read")]
    Unversioned(String),
    /// The store failed a call about `object`.
    #[error("{object}: {source}")]
    Store {
        /// The object (key and version) the call was about.
        object: String,
        /// The store's error.
        source: ObjectError,
    },
    /// An archive registry object cannot be read or is malformed.
    #[error("archive registry {key}: {reason}")]
    CorruptRegistry {
        /// The registry's key.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// The version does not exist and nothing moves it.
    #[error("missing version: {object}: {reason}")]
    MissingVersion {
        /// The object (key and version) wanted.
        object: String,
        /// Why no hop could be followed.
        reason: String,
    },
    /// The version is a delete marker, which has no bytes.
    #[error("{object} is a delete marker, not a version with bytes")]
    DeleteMarker {
        /// The object (key and version).
        object: String,
    },
    /// Following archive hops took more than the limit.
    #[error(
        "{object}: following archive hops exceeds the limit of {limit} (a cycle, or an attack on the reader)"
    )]
    HopLimit {
        /// The pinned object.
        object: String,
        /// The limit ([`super::hops::MAX_ARCHIVE_HOPS`]).
        limit: usize,
    },
    /// Following archive hops came back to a version already visited.
    #[error("{object}: the archive hops form a cycle back to {revisited}")]
    HopCycle {
        /// The pinned object.
        object: String,
        /// The version reached twice.
        revisited: String,
    },
    /// The version found differs from the pin.
    #[error("{object} has mismatched {}", fields.join(", "))]
    Mismatch {
        /// The pinned object (and where it was found, after hops).
        object: String,
        /// Which fields differ: `version id`, `size`, `etag`, `crc64nvme`.
        fields: Vec<&'static str>,
    },
    /// Downloaded or cached bytes do not have the pinned digest.
    #[error("{object}: content {algorithm} is {actual}, the pin says {expected}")]
    DigestMismatch {
        /// The pinned object.
        object: String,
        /// `md5`, `md5-dos2unix` or `crc64nvme`.
        algorithm: &'static str,
        /// The pinned digest.
        expected: String,
        /// The digest of the bytes.
        actual: String,
    },
    /// The hop policy could not decide.
    #[error("{object}: the archive hop policy failed: {source}")]
    Policy {
        /// The object whose hop was asked for.
        object: String,
        /// The policy's error.
        source: PolicyError,
    },
    /// Reading pin manifests from git history failed: a bad revision, a
    /// path that is not a regular file there, or git itself.
    #[error("git: {what}: {reason}")]
    Git {
        /// What was being read (a revision, `REV:PATH`, the repository).
        what: String,
        /// Why it failed (git's message, or the bound crossed).
        reason: String,
    },
    /// A local file (manifest, receipt, cache) cannot be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
}

impl VersionsError {
    /// A short, stable name of the kind of failure, for JSON reports.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Manifest { .. } => "manifest",
            Self::NoExactVersion { .. } => "no-exact-version",
            Self::Receipt { .. } => "receipt",
            Self::Unversioned(_) => "unversioned",
            Self::Store { .. } => "store",
            Self::CorruptRegistry { .. } => "corrupt-registry",
            Self::MissingVersion { .. } => "missing-version",
            Self::DeleteMarker { .. } => "delete-marker",
            Self::HopLimit { .. } => "hop-limit",
            Self::HopCycle { .. } => "hop-cycle",
            Self::Mismatch { .. } => "mismatch",
            Self::DigestMismatch { .. } => "digest-mismatch",
            Self::Policy { .. } => "policy",
            Self::Io { .. } => "io",
            Self::Git { .. } => "git",
        }
    }

    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.display().to_string(),
            source,
        }
    }
}

/// `key@version`, how errors name one object version.
pub(crate) fn object_name(key: &str, version_id: &str) -> String {
    format!("{key}@{version_id}")
}
