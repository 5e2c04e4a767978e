//! S3 failures mapped onto [`ObjectError`]. The SDK's error is reduced to
//! what decides the mapping (HTTP status and S3 error code) by
//! [`failure`]; [`classify`] is the mapping itself, a pure function so its
//! table is tested without a server.
//!
//! Rules that matter to callers:
//!
//! - 412 is [`ObjectError::PreconditionFailed`] and 409 is the distinct
//!   [`ObjectError::Conflict`] (a concurrent conditional writer in flight):
//!   the first means "someone else's generation is current", the second
//!   "try again after arbitrating".
//! - Refused credentials and a skewed clock are [`ObjectError::Auth`]:
//!   retrying does not fix them, and the message must point at the
//!   credential or the clock, not at the bucket.
//! - Timeouts, dispatch failures and 5xx (after the SDK's retries) are
//!   [`ObjectError::Unavailable`]: the outcome of a write is unknown.

use std::error::Error as StdError;

use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};

use super::super::ObjectError;

/// What an S3 failure means to this backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Class {
    /// 412: a guard did not hold.
    Precondition,
    /// 409: a concurrent conditional writer (or a conflicting operation).
    Conflict,
    /// Credentials refused, expired, or the clock is skewed.
    Auth,
    /// The body did not have the checksum sent with it.
    Checksum,
    /// No such key, version or bucket.
    NotFound,
    /// The multipart upload was aborted or completed.
    NoSuchUpload,
    /// 416: the range starts at or past the end.
    BadRange,
    /// 405: on a version-scoped call, the version is a delete marker.
    MethodNotAllowed,
    /// Any other refusal of the request itself.
    Invalid,
    /// The server does not implement the call.
    Unsupported,
    /// Transport, timeout or server failure: the outcome is unknown.
    Unavailable,
}

/// The S3 codes that mean "your credentials (or your clock) are wrong".
const AUTH_CODES: &[&str] = &[
    "AccessDenied",
    "AccountProblem",
    "AllAccessDisabled",
    "ExpiredToken",
    "InvalidAccessKeyId",
    "InvalidSecurity",
    "InvalidToken",
    "RequestTimeTooSkewed",
    "SignatureDoesNotMatch",
    "TokenRefreshRequired",
];

/// The S3 codes that mean "the body is not what its checksum says".
const CHECKSUM_CODES: &[&str] = &[
    "BadDigest",
    "InvalidDigest",
    "XAmzContentChecksumMismatch",
    "XAmzContentSHA256Mismatch",
];

/// The S3 codes that mean "retry later" whatever their status says
/// (`RequestTimeout` and `SlowDown` arrive as 400 and 503).
const UNAVAILABLE_CODES: &[&str] = &[
    "InternalError",
    "RequestTimeout",
    "ServiceUnavailable",
    "SlowDown",
];

/// Maps an S3 status and error code to what it means here. The code wins
/// over the status where S3 documents one (HEAD responses carry no body,
/// hence no code: the status alone decides).
pub(super) fn classify(status: Option<u16>, code: Option<&str>) -> Class {
    if let Some(code) = code {
        let class = match code {
            "PreconditionFailed" => Some(Class::Precondition),
            "ConditionalRequestConflict" | "OperationAborted" => Some(Class::Conflict),
            "NoSuchUpload" => Some(Class::NoSuchUpload),
            "NoSuchKey" | "NoSuchVersion" | "NoSuchBucket" | "NotFound" => Some(Class::NotFound),
            "InvalidRange" => Some(Class::BadRange),
            "MethodNotAllowed" => Some(Class::MethodNotAllowed),
            "NotImplemented" => Some(Class::Unsupported),
            // 403, but about the object (archived, not restored), not
            // about the credentials.
            "InvalidObjectState" => Some(Class::Invalid),
            _ if AUTH_CODES.contains(&code) => Some(Class::Auth),
            _ if CHECKSUM_CODES.contains(&code) => Some(Class::Checksum),
            _ if UNAVAILABLE_CODES.contains(&code) => Some(Class::Unavailable),
            _ => None,
        };
        if let Some(class) = class {
            return class;
        }
    }
    match status {
        Some(412) => Class::Precondition,
        Some(409) => Class::Conflict,
        Some(401 | 403) => Class::Auth,
        Some(404) => Class::NotFound,
        Some(405) => Class::MethodNotAllowed,
        Some(416) => Class::BadRange,
        Some(501) => Class::Unsupported,
        Some(400..=499) => Class::Invalid,
        _ => Class::Unavailable,
    }
}

/// One failed S3 call, reduced to what the backend decides with.
#[derive(Debug, Clone)]
pub(super) struct Failure {
    /// What it means.
    pub class: Class,
    /// The S3 error code, when the response had one.
    pub code: Option<String>,
    /// A description naming the call, the key and the server's words.
    pub detail: String,
}

impl Failure {
    /// The caller-facing error.
    pub fn into_error(self) -> ObjectError {
        let Failure {
            class,
            code,
            detail,
        } = self;
        match class {
            Class::Precondition => ObjectError::PreconditionFailed(detail.into()),
            Class::Conflict => ObjectError::Conflict(detail.into()),
            Class::Auth if code.as_deref() == Some("RequestTimeTooSkewed") => ObjectError::Auth(
                format!("{detail} (this host's clock differs from the server's: fix the clock)")
                    .into(),
            ),
            Class::Auth => ObjectError::Auth(detail.into()),
            Class::Checksum => ObjectError::ChecksumMismatch(detail.into()),
            Class::NotFound => ObjectError::NotFound(detail.into()),
            Class::NoSuchUpload => ObjectError::NoSuchUpload(detail.into()),
            Class::BadRange | Class::Invalid => ObjectError::InvalidArgument(detail.into()),
            // Only version-scoped calls give 405 a meaning (a delete
            // marker); elsewhere the server refuses the call itself.
            Class::MethodNotAllowed | Class::Unsupported => ObjectError::Unsupported(detail.into()),
            Class::Unavailable => ObjectError::Unavailable(detail.into()),
        }
    }
}

/// Reduces an SDK error from `call` on `what` to a [`Failure`]. Never
/// includes request headers: the description is the server's code and
/// message, or the transport's error chain.
pub(super) fn failure<E>(err: &SdkError<E, HttpResponse>, call: &str, what: &str) -> Failure
where
    E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
{
    let status = err.raw_response().map(|r| r.status().as_u16());
    match err {
        SdkError::ServiceError(service) => {
            let code = service.err().code().map(str::to_owned);
            let message = service.err().message().unwrap_or("no message");
            let class = classify(status, code.as_deref());
            let shown = code.as_deref().unwrap_or("no code");
            let status = status.map_or_else(|| "?".to_owned(), |s| s.to_string());
            Failure {
                class,
                detail: if code.is_some() {
                    format!("{call} {what}: HTTP {status} {shown}: {message}")
                } else {
                    // No code: the response could not be read as an S3
                    // error, and the SDK's account of why is all there is.
                    format!("{call} {what}: HTTP {status}: {}", DisplayErrorContext(err))
                },
                code,
            }
        }
        SdkError::ResponseError(_) => Failure {
            class: match status {
                Some(status) => classify(Some(status), None),
                None => Class::Unavailable,
            },
            code: None,
            detail: format!(
                "{call} {what}: unreadable response: {}",
                DisplayErrorContext(err)
            ),
        },
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) => Failure {
            class: Class::Unavailable,
            code: None,
            detail: format!("{call} {what}: {}", DisplayErrorContext(err)),
        },
        SdkError::ConstructionFailure(_) => {
            // Credentials are resolved while the request is built, so a
            // missing or refused credential surfaces here, not as a 403.
            let chain = DisplayErrorContext(err).to_string();
            let credentials = chain.to_ascii_lowercase().contains("credential");
            Failure {
                class: if credentials {
                    Class::Auth
                } else {
                    Class::Invalid
                },
                code: None,
                detail: format!("{call} {what}: {chain}"),
            }
        }
        _ => Failure {
            class: Class::Unavailable,
            code: None,
            detail: format!("{call} {what}: {}", DisplayErrorContext(err)),
        },
    }
}

/// [`failure`] straight to the caller-facing error.
pub(super) fn object_error<E>(
    err: &SdkError<E, HttpResponse>,
    call: &str,
    what: &str,
) -> ObjectError
where
    E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
{
    failure(err, call, what).into_error()
}

/// How a key or prefix appears in an error message: quoted and escaped,
/// so an empty or odd key is still visible.
pub(super) fn quoted(key: &str) -> String {
    format!("{key:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(status: u16, code: Option<&str>) -> ObjectError {
        Failure {
            class: classify(Some(status), code),
            code: code.map(str::to_owned),
            detail: "call".into(),
        }
        .into_error()
    }

    #[test]
    fn a_failed_guard_and_a_concurrent_writer_are_distinct_errors() {
        assert!(matches!(
            error(412, Some("PreconditionFailed")),
            ObjectError::PreconditionFailed(_)
        ));
        assert!(matches!(
            error(409, Some("ConditionalRequestConflict")),
            ObjectError::Conflict(_)
        ));
        // HEAD carries no body, so no code: the status decides alone.
        assert!(matches!(
            error(412, None),
            ObjectError::PreconditionFailed(_)
        ));
        assert!(matches!(error(409, None), ObjectError::Conflict(_)));
    }

    #[test]
    fn refused_credentials_and_a_skewed_clock_are_auth_errors() {
        for code in [
            "AccessDenied",
            "InvalidAccessKeyId",
            "SignatureDoesNotMatch",
            "ExpiredToken",
        ] {
            assert!(
                matches!(error(403, Some(code)), ObjectError::Auth(_)),
                "{code}"
            );
        }
        assert!(matches!(error(401, None), ObjectError::Auth(_)));
        assert!(matches!(error(403, None), ObjectError::Auth(_)));
        let skewed = error(403, Some("RequestTimeTooSkewed"));
        assert!(
            matches!(&skewed, ObjectError::Auth(why) if why.contains("clock")),
            "{skewed:?}"
        );
    }

    #[test]
    fn a_body_that_does_not_match_its_checksum_is_a_checksum_mismatch() {
        for code in ["BadDigest", "XAmzContentChecksumMismatch", "InvalidDigest"] {
            assert!(
                matches!(error(400, Some(code)), ObjectError::ChecksumMismatch(_)),
                "{code}"
            );
        }
    }

    #[test]
    fn missing_things_are_not_found_and_a_gone_upload_is_no_such_upload() {
        for code in ["NoSuchKey", "NoSuchVersion", "NoSuchBucket"] {
            assert!(
                matches!(error(404, Some(code)), ObjectError::NotFound(_)),
                "{code}"
            );
        }
        assert!(matches!(error(404, None), ObjectError::NotFound(_)));
        assert!(matches!(
            error(404, Some("NoSuchUpload")),
            ObjectError::NoSuchUpload(_)
        ));
    }

    #[test]
    fn server_trouble_after_retries_is_unavailable() {
        for (status, code) in [
            (500, Some("InternalError")),
            (503, Some("SlowDown")),
            (503, None),
            (400, Some("RequestTimeout")),
            (502, None),
        ] {
            assert!(
                matches!(error(status, code), ObjectError::Unavailable(_)),
                "{status} {code:?}"
            );
        }
    }

    #[test]
    fn other_refusals_are_invalid_arguments_or_unsupported() {
        assert!(matches!(
            error(400, Some("InvalidPart")),
            ObjectError::InvalidArgument(_)
        ));
        assert!(matches!(
            error(400, Some("EntityTooSmall")),
            ObjectError::InvalidArgument(_)
        ));
        assert!(matches!(error(400, None), ObjectError::InvalidArgument(_)));
        assert!(matches!(
            error(501, Some("NotImplemented")),
            ObjectError::Unsupported(_)
        ));
        assert!(matches!(
            error(403, Some("InvalidObjectState")),
            ObjectError::InvalidArgument(_)
        ));
        assert_eq!(classify(Some(416), None), Class::BadRange);
        assert_eq!(classify(Some(405), None), Class::MethodNotAllowed);
    }
}
