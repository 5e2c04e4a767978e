//! The decisions vocabulary the policy worlds share: the host asks, a
//! policy answers, and these are the host-side types of both. Mechanisms
//! below the runtime (versions, purge, the content model) speak in these
//! types, so they never depend on the runtime that calls the plugins.
//!
//! - [`PolicyError`]: a policy's own error answer;
//! - [`access`]: who may do what on the data plane;
//! - [`retention`]: retain-until, legal hold and may-delete decisions;
//! - [`purge`]: whether one exact version may be permanently deleted.

pub mod access;
pub mod log;
pub mod purge;
pub mod retention;

use custodian_base::error::ErrorKind;

/// A policy's own error answer (the WIT `error` it returned), as opposed to
/// a failure of the call itself (the runtime's `CallError`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// See the WIT `error` type.
    #[error("not found: {0}")]
    NotFound(String),
    /// See the WIT `error` type.
    #[error("precondition failed: {0}")]
    PreconditionFailed(String),
    /// See the WIT `error` type.
    #[error("conflict: {0}")]
    Conflict(String),
    /// See the WIT `error` type.
    #[error("checksum mismatch: {0}")]
    ChecksumMismatch(String),
    /// See the WIT `error` type.
    #[error("corrupt: {0}")]
    Corrupt(String),
    /// See the WIT `error` type.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// See the WIT `error` type.
    #[error("budget exhausted: {0}")]
    BudgetExhausted(String),
    /// See the WIT `error` type.
    #[error("access denied: {0}")]
    AccessDenied(String),
    /// See the WIT `error` type.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl PolicyError {
    /// What kind of failure this is (see [`ErrorKind`]).
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::NotFound(_) => ErrorKind::NotFound,
            Self::PreconditionFailed(_) => ErrorKind::PreconditionFailed,
            Self::Conflict(_) => ErrorKind::Conflict,
            Self::ChecksumMismatch(_) => ErrorKind::ChecksumMismatch,
            Self::Corrupt(_) => ErrorKind::Corrupt,
            Self::Unavailable(_) => ErrorKind::Unavailable,
            Self::BudgetExhausted(_) => ErrorKind::BudgetExhausted,
            Self::AccessDenied(_) => ErrorKind::AccessDenied,
            Self::InvalidArgument(_) => ErrorKind::InvalidArgument,
        }
    }

    /// A policy's answer of `kind`. The WIT `error` has no case for
    /// `Unsupported`, `Busy` or `Internal`, so a policy never answers them;
    /// they arrive as the cases a guest sees them as (invalid argument,
    /// unavailable).
    pub fn from_kind(kind: ErrorKind, message: String) -> Self {
        match kind {
            ErrorKind::NotFound => Self::NotFound(message),
            ErrorKind::PreconditionFailed => Self::PreconditionFailed(message),
            ErrorKind::Conflict => Self::Conflict(message),
            ErrorKind::ChecksumMismatch => Self::ChecksumMismatch(message),
            ErrorKind::Corrupt => Self::Corrupt(message),
            ErrorKind::Unavailable | ErrorKind::Busy | ErrorKind::Internal => {
                Self::Unavailable(message)
            }
            ErrorKind::BudgetExhausted => Self::BudgetExhausted(message),
            ErrorKind::AccessDenied | ErrorKind::TakenDown | ErrorKind::Retained => {
                Self::AccessDenied(message)
            }
            ErrorKind::InvalidArgument | ErrorKind::Unsupported => Self::InvalidArgument(message),
        }
    }
}
