//! The API's errors: an HTTP status and a JSON body with a stable code.
//!
//! ```json
//! {"error": {"code": "precondition_failed", "message": "…"}}
//! ```
//!
//! Codes are part of the API: scripts branch on them, so a code is never
//! renamed and its meaning never changes; messages are for people.
//!
//! A refusal because a takedown withholds the content (451 `taken_down`)
//! also names the request and when its denial took effect, and links to
//! it as RFC 7725 asks (`Link: </v1/takedowns/ID>; rel="blocked-by"`):
//!
//! ```json
//! {"error": {"code": "taken_down", "message": "…", "request": "<64 hex>", "since_ms": 1700000000000}}
//! ```

use axum::Json;
use axum::http::header::{LINK, RETRY_AFTER};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use custodian_base::error::ErrorKind;
use custodian_core::content::{ContentError, Withheld};
use custodian_kv::KvError;
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
    /// For 451 `taken_down`: the takedown withholding the content (boxed:
    /// every handler returns this error, and the common ones stay small).
    pub withheld: Option<Box<Withheld>>,
}

impl ApiError {
    /// An error with this status, code and message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            withheld: None,
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

    /// 403 `forbidden`: the caller is known, and may not do this (the
    /// access policy's reason, or the host's own rule).
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
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

    /// 500 `plugin_failed`: a policy plugin trapped, hit a limit or broke
    /// its contract. Not a kind of the table: whatever kind the plugin's
    /// failure is, the fix is the operator's (another plugin, other
    /// grants or limits), never the client's, and scripts tell it apart
    /// from the host's own failure by this code.
    pub fn plugin_failed(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "plugin_failed", message)
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

/// Marks a response refused by a lock or the retention plugin, with the
/// reason, so the layer that knows the caller audits it
/// ([`super::auth::authorize`]).
#[derive(Debug, Clone)]
pub struct RetainedRefusal(pub String);

/// What a client waits before it retries a 503, in seconds (`Retry-After`
/// on every 503): what was short (room for a body, a busy backend, a
/// plugin's budget) comes back as requests in flight finish.
pub const RETRY_AFTER_SECS: u64 = 1;

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = self.response();
        if response.status() == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
        }
        response
    }
}

/// Longest error message sent, in bytes: a message may quote a plugin (a
/// policy's refusal reason), and what a plugin says must not make every
/// error response it causes megabytes long. Far longer than any message
/// the host writes itself.
pub const MAX_MESSAGE_BYTES: usize = 16 << 10;

impl ApiError {
    fn response(mut self) -> Response {
        if self.message.len() > MAX_MESSAGE_BYTES {
            let cut = self.message.len();
            self.message = format!(
                "{}… (cut from {cut} bytes)",
                super::access::truncated(&self.message, MAX_MESSAGE_BYTES)
            );
        }
        let Some(withheld) = self.withheld else {
            let retained = (self.code == "retained").then(|| RetainedRefusal(self.message.clone()));
            let body = json!({"error": {"code": self.code, "message": self.message}});
            let mut response = (self.status, Json(body)).into_response();
            if let Some(retained) = retained {
                response.extensions_mut().insert(retained);
            }
            return response;
        };
        let request = withheld.request.to_hex();
        let body = json!({"error": {
            "code": self.code,
            "message": self.message,
            "request": request,
            "since_ms": withheld.since_ms,
        }});
        let link = format!("</v1/takedowns/{request}>; rel=\"blocked-by\"");
        let mut response = (self.status, Json(body)).into_response();
        // Hex digits and fixed text: always a valid header value.
        if let Ok(link) = HeaderValue::from_str(&link) {
            response.headers_mut().insert(LINK, link);
        }
        response
    }
}

impl From<ContentError> for ApiError {
    /// A content error by its kind (see [`ApiError::of_kind`]); the index
    /// and the store name themselves.
    fn from(error: ContentError) -> Self {
        let kind = error.kind();
        match error {
            ContentError::Index(kv) => Self::of_kv(&kv, "the content index"),
            ContentError::Store(object) => {
                let mut api = Self::from(object);
                api.message = format!("the serving store: {}", api.message);
                api
            }
            // The client's own input: the reason alone, as every other
            // refusal of input reads.
            ContentError::InvalidArgument(message) => Self::of_kind(kind, message),
            ContentError::TakenDown(withheld) => Self::from(withheld),
            // Only a local file is read (`Read`), and an HTTP push reads
            // none.
            other => Self::of_kind(kind, other.to_string()),
        }
    }
}

impl From<Withheld> for ApiError {
    /// 451 `taken_down`, naming the request.
    fn from(withheld: Withheld) -> Self {
        Self {
            withheld: Some(Box::new(withheld)),
            ..Self::of_kind(ErrorKind::TakenDown, withheld.to_string())
        }
    }
}

impl ApiError {
    /// The one table from a failure's kind to the API's status and code.
    pub fn of_kind(kind: ErrorKind, message: impl Into<String>) -> Self {
        let (status, code) = match kind {
            ErrorKind::NotFound => (StatusCode::NOT_FOUND, "not_found"),
            ErrorKind::PreconditionFailed => {
                (StatusCode::PRECONDITION_FAILED, "precondition_failed")
            }
            ErrorKind::Conflict => (StatusCode::CONFLICT, "conflict"),
            ErrorKind::ChecksumMismatch => (StatusCode::BAD_REQUEST, "checksum_mismatch"),
            ErrorKind::InvalidArgument => (StatusCode::BAD_REQUEST, "invalid_argument"),
            ErrorKind::Unsupported => (StatusCode::NOT_IMPLEMENTED, "unsupported"),
            // Only the host's own credentials reach a backend: a store that
            // refuses them is not the client's fault, and not a 401 that
            // would make it retry its token.
            ErrorKind::AccessDenied => (StatusCode::BAD_GATEWAY, "store_access_denied"),
            ErrorKind::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            ErrorKind::Busy => (StatusCode::SERVICE_UNAVAILABLE, "busy"),
            ErrorKind::Corrupt => (StatusCode::INTERNAL_SERVER_ERROR, "corrupt"),
            ErrorKind::BudgetExhausted => (StatusCode::SERVICE_UNAVAILABLE, "budget_exhausted"),
            ErrorKind::Internal => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
            ErrorKind::TakenDown => (StatusCode::UNAVAILABLE_FOR_LEGAL_REASONS, "taken_down"),
            ErrorKind::Retained => (StatusCode::FORBIDDEN, "retained"),
        };
        Self::new(status, code, message)
    }
}

impl ApiError {
    /// A failure of a call the server made below it on a request's
    /// behalf, by its kind as a request sees it: the server built the
    /// arguments, so a refused one is its own fault (internal), and a
    /// backend held by another process is, to a request, one that cannot
    /// answer now (unavailable).
    pub fn of_server_call(kind: ErrorKind, message: impl Into<String>) -> Self {
        let kind = match kind.host_built() {
            ErrorKind::Busy => ErrorKind::Unavailable,
            kind => kind,
        };
        Self::of_kind(kind, message)
    }

    /// A KV failure while the server was doing `what` (see
    /// [`ApiError::of_server_call`]); the message carries the KV's causes,
    /// as a client sees no chain.
    pub fn of_kv(error: &KvError, what: &str) -> Self {
        Self::of_server_call(error.kind(), format!("{what}: {}", error.to_line()))
    }
}

/// `error` and its causes on one line, each cause not already in the text
/// before it (many errors print their source's message in their own).
pub(crate) fn one_line(error: &(dyn std::error::Error + 'static)) -> String {
    let mut line = error.to_string();
    let mut cause = error.source();
    while let Some(next) = cause {
        let text = next.to_string();
        if !line.contains(&text) {
            line = format!("{line}: {text}");
        }
        cause = next.source();
    }
    line
}

impl From<ObjectError> for ApiError {
    fn from(error: ObjectError) -> Self {
        Self::of_kind(error.kind(), error.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_message_longer_than_the_bound_is_cut_on_a_character_boundary_saying_so() {
        let long = "é".repeat(MAX_MESSAGE_BYTES);
        let response = ApiError::forbidden(long).into_response();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.len() <= MAX_MESSAGE_BYTES + 64, "{}", message.len());
        assert!(
            message.ends_with(&format!("… (cut from {} bytes)", 2 * MAX_MESSAGE_BYTES)),
            "{}",
            &message[message.len() - 40..]
        );
    }

    #[test]
    fn every_503_says_when_to_retry_and_other_errors_do_not() {
        let busy = ApiError::of_kind(ErrorKind::Busy, "full").into_response();
        assert_eq!(busy.headers()[RETRY_AFTER], "1");
        let missing = ApiError::not_found("gone").into_response();
        assert!(missing.headers().get(RETRY_AFTER).is_none());
    }

    #[test]
    fn each_kind_answers_its_own_status_and_code() {
        let table = [
            (ErrorKind::NotFound, 404, "not_found"),
            (ErrorKind::PreconditionFailed, 412, "precondition_failed"),
            (ErrorKind::Conflict, 409, "conflict"),
            (ErrorKind::ChecksumMismatch, 400, "checksum_mismatch"),
            (ErrorKind::InvalidArgument, 400, "invalid_argument"),
            (ErrorKind::Unsupported, 501, "unsupported"),
            (ErrorKind::AccessDenied, 502, "store_access_denied"),
            (ErrorKind::Unavailable, 503, "unavailable"),
            (ErrorKind::Busy, 503, "busy"),
            (ErrorKind::Corrupt, 500, "corrupt"),
            (ErrorKind::BudgetExhausted, 503, "budget_exhausted"),
            (ErrorKind::Internal, 500, "internal"),
            (ErrorKind::TakenDown, 451, "taken_down"),
            (ErrorKind::Retained, 403, "retained"),
        ];
        for (kind, status, code) in table {
            let error = ApiError::of_kind(kind, "m");
            assert_eq!(
                (error.status.as_u16(), error.code),
                (status, code),
                "{kind:?}"
            );
        }
    }

    #[test]
    fn a_failure_below_the_server_answers_its_kind_save_refused_arguments_and_busy_backends() {
        let table = [
            (ErrorKind::InvalidArgument, 500, "internal"),
            (ErrorKind::Busy, 503, "unavailable"),
            (ErrorKind::NotFound, 404, "not_found"),
            (ErrorKind::Corrupt, 500, "corrupt"),
            (ErrorKind::BudgetExhausted, 503, "budget_exhausted"),
        ];
        for (kind, status, code) in table {
            let error = ApiError::of_server_call(kind, "m");
            assert_eq!(
                (error.status.as_u16(), error.code),
                (status, code),
                "{kind:?}"
            );
        }
    }

    #[test]
    fn a_kv_failure_names_what_the_server_did_and_carries_its_causes() {
        let kv = KvError::Unavailable(custodian_kv::Detail::caused_by(
            "reading kv.redb",
            std::io::Error::other("disk on fire"),
        ));
        let error = ApiError::of_kv(&kv, "the content index");
        assert_eq!((error.status.as_u16(), error.code), (503, "unavailable"));
        assert_eq!(
            error.message,
            "the content index: kv unavailable: reading kv.redb: disk on fire"
        );
    }

    #[test]
    fn a_store_error_answers_by_its_kind_with_its_whole_message() {
        let error = ApiError::from(ObjectError::NoSuchUpload("u".into()));
        assert_eq!((error.status.as_u16(), error.code), (404, "not_found"));
        assert_eq!(error.message, "no such upload: u");
    }
}
