//! Bearer-token authentication.
//!
//! Every mutating and admin route needs the token; read routes need it
//! unless the deployer opened them. The comparison is constant-time over
//! the token's bytes, so response timing says nothing about how much of a
//! guess was right. The token never appears in logs or errors.

use axum::extract::{Request, State};
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::Response;
use subtle::ConstantTimeEq;

use super::ApiError;
use crate::serve::Host;
use std::sync::Arc;
use std::time::Duration;

/// The server's secret, redacted in `Debug`.
#[derive(Clone)]
pub struct Token(Vec<u8>);

impl Token {
    /// Shortest token accepted: a guessable token is no protection.
    pub const MIN_BYTES: usize = 16;

    /// A token from its text (surrounding whitespace, such as a file's
    /// final newline, is not part of it).
    ///
    /// # Errors
    /// A token shorter than [`Token::MIN_BYTES`] or with inner whitespace.
    pub fn new(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.len() < Self::MIN_BYTES {
            return Err(format!(
                "the token is {} bytes; at least {} are required",
                text.len(),
                Self::MIN_BYTES
            ));
        }
        if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err("the token contains whitespace or control characters".into());
        }
        Ok(Self(text.as_bytes().to_vec()))
    }

    /// A fresh random token: 32 bytes from the OS, as hex.
    ///
    /// # Errors
    /// The OS has no randomness to give.
    pub fn generate() -> Result<Self, getrandom::Error> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes)?;
        Ok(Self(hex::encode(bytes).into_bytes()))
    }

    /// The token's text, to write to a file the operator reads.
    pub fn expose(&self) -> &str {
        std::str::from_utf8(&self.0).expect("tokens are text")
    }

    /// Whether `presented` is this token, in time independent of where
    /// they differ.
    pub fn matches(&self, presented: &[u8]) -> bool {
        bool::from(self.0.ct_eq(presented))
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// Whether read routes need the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ReadAccess {
    /// Reads need the token like everything else.
    #[default]
    Token,
    /// Reads are open to anyone who can reach the server.
    Open,
}

/// Middleware: refuses a request without the right bearer token, unless
/// it reads and reads are open. Health probes and metrics are always
/// open: they carry no data (metrics are counts by route, plugin hash and
/// store name).
pub async fn require_token(
    State(host): State<Arc<Host>>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let path = request.uri().path();
    let probe = matches!(path, "/healthz" | "/readyz" | "/metrics");
    // The plugin set, the audit log and the timers are admin reads: always behind
    // the token.
    let reads = matches!(*request.method(), Method::GET | Method::HEAD)
        && !path.starts_with("/v1/plugins")
        && !path.starts_with("/v1/audit")
        && !path.starts_with("/v1/timers");
    if probe || (reads && host.auth.read_access == ReadAccess::Open) {
        return Ok(next.run(request).await);
    }
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.as_bytes().strip_prefix(b"Bearer "));
    let refusal = match presented {
        Some(token) if host.auth.token.matches(token) => return Ok(next.run(request).await),
        Some(_) => ApiError::unauthorized("the bearer token is not valid"),
        None => {
            ApiError::unauthorized("this route needs an `Authorization: Bearer <token>` header")
        }
    };
    drain(request).await;
    Err(refusal)
}

/// Most bytes of a refused request's body read (and dropped) before the
/// refusal is sent: a client that writes its whole body before it reads
/// (one that does not send `Expect: 100-continue`) would otherwise meet a
/// closed connection instead of the 401. Small, so a stranger cannot make
/// the server read much; a larger body gets the closed connection.
const DRAIN_BYTES: usize = 1 << 20;

/// Longest wait for that body.
const DRAIN_TIME: Duration = Duration::from_secs(2);

/// Reads `request`'s body up to [`DRAIN_BYTES`], unless its client waits
/// for a go-ahead (`Expect: 100-continue`: reading would send it one) or
/// declares a larger body.
async fn drain(request: Request) {
    let headers = request.headers();
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if headers.contains_key(header::EXPECT) || declared.is_some_and(|n| n > DRAIN_BYTES as u64) {
        return;
    }
    let body = axum::body::to_bytes(request.into_body(), DRAIN_BYTES);
    let _ = tokio::time::timeout(DRAIN_TIME, body).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_matches_itself_and_nothing_else() {
        let token = Token::new("0123456789abcdef0123").unwrap();
        assert!(token.matches(b"0123456789abcdef0123"));
        assert!(!token.matches(b"0123456789abcdef0124"));
        assert!(!token.matches(b"0123456789abcdef012"));
        assert!(!token.matches(b""));
    }

    #[test]
    fn short_or_spaced_tokens_are_refused_and_a_final_newline_is_not_part() {
        assert!(Token::new("short").is_err());
        assert!(Token::new("0123456789 abcdef0123").is_err());
        let token = Token::new("0123456789abcdef0123\n").unwrap();
        assert!(token.matches(b"0123456789abcdef0123"));
    }

    #[test]
    fn generated_tokens_differ_and_never_show_in_debug_output() {
        let (a, b) = (Token::generate().unwrap(), Token::generate().unwrap());
        assert_ne!(a.expose(), b.expose());
        assert_eq!(a.expose().len(), 64);
        assert_eq!(format!("{a:?}"), "Token(<redacted>)");
    }
}
