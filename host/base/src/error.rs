//! One vocabulary of failure for every layer: a backend's error, a policy's
//! answer, a job's refusal each say which [`ErrorKind`] they are, and each
//! boundary maps a kind once — to the WIT `error` a guest sees (the
//! runtime), to an HTTP status and code (the server), to an exit status
//! (the command) — instead of re-mapping every error type by hand.

/// What kind of failure an error is, whatever layer raised it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// No such key, version, object, job or request.
    NotFound,
    /// A guard the caller set did not hold.
    PreconditionFailed,
    /// A concurrent writer, or the state of the thing, conflicts.
    Conflict,
    /// Bytes do not have the checksum claimed for them.
    ChecksumMismatch,
    /// Stored data cannot be decoded, or does not match what it claims.
    Corrupt,
    /// A backend cannot answer now; it may later.
    Unavailable,
    /// A caller's budget of calls is spent.
    BudgetExhausted,
    /// Credentials or grants refuse the call.
    AccessDenied,
    /// An argument is outside its bounds or malformed.
    InvalidArgument,
    /// The backend cannot do this at all.
    Unsupported,
    /// Held by another process, or at capacity: nothing was done; retry.
    Busy,
    /// The host itself failed (a broken invariant, no randomness).
    Internal,
    /// Withheld for legal reasons: a takedown denies the object, so it is
    /// neither served nor accepted again (HTTP 451).
    TakenDown,
    /// A lock or the retention policy protects what the request would
    /// destroy (a version under retention or legal hold): nothing was
    /// changed, and no caller can waive it (HTTP 403 `retained`).
    Retained,
}

impl ErrorKind {
    /// This kind, for a failure of a call whose arguments the host built
    /// rather than its caller: a refused argument is then the host's own
    /// fault ([`ErrorKind::Internal`]), not one the caller could fix by
    /// asking differently. Every other kind is unchanged.
    pub fn host_built(self) -> Self {
        match self {
            Self::InvalidArgument => Self::Internal,
            kind => kind,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ErrorKind;

    #[test]
    fn a_refused_argument_the_host_built_is_the_hosts_fault_and_other_kinds_stay() {
        assert_eq!(ErrorKind::InvalidArgument.host_built(), ErrorKind::Internal);
        for kind in [
            ErrorKind::NotFound,
            ErrorKind::Busy,
            ErrorKind::Unavailable,
            ErrorKind::Corrupt,
        ] {
            assert_eq!(kind.host_built(), kind);
        }
    }

    #[test]
    fn kinds_are_plain_values_that_compare_and_copy() {
        let kind = ErrorKind::Busy;
        let copy = kind;
        assert_eq!(kind, copy);
        assert_ne!(kind, ErrorKind::Unavailable);
    }
}
