//! What a failed etcd call means for the caller: whether the request
//! can have taken effect, and whether trying again can help.

use tonic::{Code, Status};

/// An etcd client error, sorted by what the caller can conclude.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Failure {
    /// No connection to a member could be opened for the request, so no
    /// member saw it: nothing happened, and another attempt (possibly on
    /// another member) is safe.
    NotSent(String),
    /// A member refused the request before proposing it, because the
    /// server is overloaded: nothing happened; try again later.
    Busy(String),
    /// The auth token is no longer accepted (it expired, or auth was
    /// re-enabled). etcd checks the token before proposing, and the auth
    /// revision again before applying, so nothing happened; authenticate
    /// again and retry.
    TokenExpired(String),
    /// etcd refused the credentials or the permission: nothing happened,
    /// and retrying cannot help.
    AccessDenied(String),
    /// The request is beyond etcd's limits (operations per transaction,
    /// request bytes) or malformed: nothing happened, and retrying cannot
    /// help.
    Refused(String),
    /// Anything else: a timeout, a lost connection, a leader change. A
    /// write may or may not have taken effect.
    Unknown(String),
}

/// Sorts `status`: what a call of [`super::rpc::Client`] failed with,
/// whether etcd answered it or tonic made it up (no connection, a reset
/// stream, a malformed answer).
pub(super) fn classify(status: &Status) -> Failure {
    let message = status.message().to_owned();
    if never_connected(status) {
        return Failure::NotSent(format!(
            "cannot connect to an etcd member: {}",
            with_causes(&message, status)
        ));
    }
    // etcd's messages are stable API (`rpctypes` in etcd's source): the
    // status code alone does not separate "too many operations" from
    // "user name is empty", both InvalidArgument.
    match status.code() {
        Code::Unauthenticated => Failure::TokenExpired(message),
        _ if message.contains("revision of auth store is old") => Failure::TokenExpired(message),
        Code::PermissionDenied => Failure::AccessDenied(message),
        Code::InvalidArgument
            if message.contains("user name") || message.contains("authentication") =>
        {
            Failure::AccessDenied(message)
        }
        Code::InvalidArgument => Failure::Refused(message),
        // A request over the server's gRPC receive limit (max-request-bytes
        // plus 512 KiB) is refused by gRPC itself before etcd sees it.
        Code::ResourceExhausted if message.contains("larger than max") => Failure::Refused(message),
        Code::ResourceExhausted if message.contains("too many requests") => Failure::Busy(message),
        code => Failure::Unknown(format!(
            "{} (gRPC code {})",
            with_causes(&message, status),
            code as i32
        )),
    }
}

/// The status's message followed by its causes (a TLS or connection
/// error says what went wrong only there), each once.
fn with_causes(message: &str, status: &(dyn std::error::Error + 'static)) -> String {
    let mut text = message.to_owned();
    let mut cause = status.source();
    while let Some(error) = cause {
        let line = error.to_string();
        if !text.contains(&line) {
            text = format!("{text}: {line}");
        }
        cause = error.source();
    }
    text
}

/// Whether the status says the connection for the request was never
/// established: a refused TCP connection somewhere in its causes. Only
/// then is it certain that no byte of the request left this process.
fn never_connected(status: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = status.source();
    while let Some(error) = cause {
        if let Some(io) = error.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        cause = error.source();
    }
    false
}
