//! The host's errors as S3 errors: the one table from a store's, the
//! API's (the access gate, the body budget, a takedown's denial) and the
//! index's failures to the code an S3 client switches on.

use custodian_object::ObjectError;
use custodian_s3_wire::error::{Code, S3Error};

use crate::serve::http::ApiError;

/// A store's failure; `version` says whether the request named a version
/// (a missing one is `NoSuchVersion`, not `NoSuchKey`).
pub(super) fn of_store(error: ObjectError, version: bool) -> S3Error {
    let code = match &error {
        ObjectError::NotFound(_) if version => Code::NoSuchVersion,
        ObjectError::NotFound(_) => Code::NoSuchKey,
        ObjectError::PreconditionFailed(_) => Code::PreconditionFailed,
        ObjectError::Conflict(_) => Code::ConditionalRequestConflict,
        ObjectError::ChecksumMismatch(_) => Code::BadDigest,
        ObjectError::InvalidArgument(_) => Code::InvalidArgument,
        ObjectError::Unsupported(_) => Code::NotImplemented,
        ObjectError::NoSuchUpload(_) => Code::NoSuchUpload,
        // A lock or the retention policy kept the version: refused, with
        // the reason, as S3 refuses a locked version.
        ObjectError::Retained(_) => Code::AccessDenied,
        ObjectError::Unavailable(_) | ObjectError::BudgetExhausted(_) => Code::ServiceUnavailable,
        ObjectError::Auth(_) | ObjectError::Corrupt(_) | ObjectError::Io(_) => Code::InternalError,
    };
    let message = match code {
        Code::NoSuchKey => "The specified key does not exist.".to_owned(),
        Code::NoSuchVersion => "The specified version does not exist.".to_owned(),
        Code::PreconditionFailed => {
            format!("At least one of the pre-conditions you specified did not hold: {error}")
        }
        _ => error.to_string(),
    };
    S3Error::new(code, message)
}

/// An error of the `/v1` API's shared gates (the access policy, the body
/// budget, a takedown's denial), by its stable code.
pub(super) fn of_api(error: ApiError) -> S3Error {
    let code = match error.code {
        "forbidden" | "retained" => Code::AccessDenied,
        "taken_down" => Code::UnavailableForLegalReasons,
        "busy" => Code::SlowDown,
        "access_unavailable" | "unavailable" => Code::ServiceUnavailable,
        "payload_too_large" => Code::EntityTooLarge,
        "request_timeout" => Code::RequestTimeout,
        "invalid_argument" => Code::InvalidArgument,
        "not_found" => Code::NoSuchKey,
        "precondition_failed" => Code::PreconditionFailed,
        "conflict" => Code::ConditionalRequestConflict,
        _ => Code::InternalError,
    };
    S3Error::new(code, error.message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_version_is_no_such_version_and_a_retained_one_access_denied() {
        let missing = || ObjectError::NotFound("k".into());
        assert_eq!(of_store(missing(), true).code, Code::NoSuchVersion);
        assert_eq!(of_store(missing(), false).code, Code::NoSuchKey);
        let kept = of_store(ObjectError::Retained("held until 2030".into()), false);
        assert_eq!(kept.code, Code::AccessDenied);
        assert!(kept.message.contains("held until 2030"));
    }

    #[test]
    fn the_gates_refusals_keep_their_meaning() {
        assert_eq!(of_api(ApiError::forbidden("no")).code, Code::AccessDenied);
        assert_eq!(
            of_api(ApiError::unavailable("later")).code,
            Code::ServiceUnavailable
        );
        assert_eq!(
            of_api(ApiError::too_large("big")).code,
            Code::EntityTooLarge
        );
        assert_eq!(of_api(ApiError::internal("oops")).code, Code::InternalError);
    }
}
