//! The API's errors: an HTTP status and a JSON body with a stable code.
//!
//! ```json
//! {"error": {"code": "precondition_failed", "message": "…"}}
//! ```
//!
//! Codes are part of the API: scripts branch on them, so a code is never
//! renamed and its meaning never changes; messages are for people.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use custodian_object::ObjectError;

/// An API error: what the client sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The stable code.
    pub code: &'static str,
    /// What went wrong, for a person.
    pub message: String,
}

impl ApiError {
    /// An error with this status, code and message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    /// 400 `invalid_argument`: the request is malformed.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_argument", message)
    }

    /// 404 `not_found`.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 401 `unauthorized`: no token, or the wrong one.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    /// 503 `unavailable`: retry later.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
    }

    /// 500 `internal`: the server failed; the message says where.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    /// 413 `payload_too_large`.
    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", message)
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status.as_u16(),
            self.code,
            self.message
        )
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code, "message": self.message}});
        (self.status, Json(body)).into_response()
    }
}

impl From<ObjectError> for ApiError {
    fn from(error: ObjectError) -> Self {
        let message = error.to_string();
        let (status, code) = match error {
            ObjectError::NotFound(_) | ObjectError::NoSuchUpload(_) => {
                (StatusCode::NOT_FOUND, "not_found")
            }
            ObjectError::PreconditionFailed(_) => {
                (StatusCode::PRECONDITION_FAILED, "precondition_failed")
            }
            ObjectError::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            ObjectError::ChecksumMismatch(_) => (StatusCode::BAD_REQUEST, "checksum_mismatch"),
            ObjectError::InvalidArgument(_) => (StatusCode::BAD_REQUEST, "invalid_argument"),
            ObjectError::Unsupported(_) => (StatusCode::NOT_IMPLEMENTED, "unsupported"),
            // The store refused the *host's* credentials: not the client's
            // fault, and not a 401 that would make it retry its token.
            ObjectError::Auth(_) => (StatusCode::BAD_GATEWAY, "store_access_denied"),
            ObjectError::Unavailable(_) | ObjectError::Io(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
            }
            ObjectError::Corrupt(_) => (StatusCode::INTERNAL_SERVER_ERROR, "corrupt"),
            ObjectError::BudgetExhausted(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "budget_exhausted")
            }
        };
        Self::new(status, code, message)
    }
}
