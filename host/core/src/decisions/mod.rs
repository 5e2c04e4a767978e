//! The decisions vocabulary the policy worlds share: the host asks, a
//! policy answers, and these are the host-side types of both. Mechanisms
//! below the runtime (versions, purge, the content model) speak in these
//! types, so they never depend on the runtime that calls the plugins.
//!
//! - [`PolicyError`]: a policy's own error answer;
//! - [`retention`]: retain-until, legal hold and may-delete decisions;
//! - [`purge`]: whether one exact version may be permanently deleted.

pub mod purge;
pub mod retention;

/// A policy's own error answer (the WIT `error` it returned), as opposed to
/// a failure of the call itself ([`crate::CallError`]).
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
