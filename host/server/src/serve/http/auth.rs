//! Who is calling: every request but the probes names a principal, by a
//! bearer credential (`Authorization: Bearer <token>`), and is then put
//! to the access policy (`access.rs`) before any handler runs.
//!
//! A credential is looked up by its id in one KV point read (cached for
//! the principals' cache bound) and its secret's hash compared in
//! constant time, so response timing says nothing about how much of a
//! guess was right; a value that cannot be a credential (too long, not
//! printable) is refused before it is hashed. Credentials never appear
//! in logs or errors.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::Response;

use super::listen::Connection;
use super::{ApiError, RetainedRefusal};
use crate::serve::Host;
use custodian_core::audit;
use custodian_core::decisions::access::Principal;
use custodian_core::principals::credential::{MAX_PRESENTED_BYTES, MIN_BOOTSTRAP_BYTES};
use std::sync::Arc;
use std::time::Duration;

/// The server's bootstrap token (its token file), redacted in `Debug`:
/// registered at start as a credential of the `admin` principal.
#[derive(Clone)]
pub struct Token(String);

impl Token {
    /// Shortest token accepted: a guessable token is no protection.
    pub const MIN_BYTES: usize = MIN_BOOTSTRAP_BYTES;
    /// Longest token accepted: a longer value is never a credential.
    pub const MAX_BYTES: usize = MAX_PRESENTED_BYTES;

    /// A token from its text (surrounding whitespace, such as a file's
    /// final newline, is not part of it).
    ///
    /// # Errors
    /// A token of fewer than [`Token::MIN_BYTES`] or more than
    /// [`Token::MAX_BYTES`] bytes, or not printable ASCII.
    pub fn new(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if !(Self::MIN_BYTES..=Self::MAX_BYTES).contains(&text.len()) {
            return Err(format!(
                "the token is {} bytes; {} to {} are required",
                text.len(),
                Self::MIN_BYTES,
                Self::MAX_BYTES
            ));
        }
        if !text.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("the token must be printable ASCII, without spaces".into());
        }
        Ok(Self(text.to_owned()))
    }

    /// A fresh random token: 32 bytes from the OS, as hex.
    ///
    /// # Errors
    /// The OS has no randomness to give.
    pub fn generate() -> Result<Self, getrandom::Error> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes)?;
        Ok(Self(hex::encode(bytes)))
    }

    /// The token's text, to write to a file the operator reads and to
    /// register as a credential.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// Whether read routes need a credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ReadAccess {
    /// Reads need a credential like everything else.
    #[default]
    Token,
    /// A read without a credential is made by [`ANONYMOUS`], with role
    /// [`ANONYMOUS_ROLE`]: the access policy still decides what it may
    /// read (the bundled one: what a `reader` may).
    Open,
}

/// The principal of a credential-less read when reads are open.
pub const ANONYMOUS: &str = "anonymous";
/// Its one role.
pub const ANONYMOUS_ROLE: &str = "reader";

/// The authenticated principal of a request, for its handler (the audit
/// actor) and the decision log.
#[derive(Debug, Clone)]
pub struct Caller(pub Principal);

impl Caller {
    /// How the audit log names the caller: `principal:NAME`.
    pub fn actor(&self) -> String {
        self.0.actor()
    }
}

/// Middleware: names the request's principal (401 without one), puts the
/// request to the access policy (403 or 503 when it is not allowed; see
/// `access.rs`), and hands the handler a [`Caller`]. Health probes
/// and metrics are open: they carry no data (metrics are counts by route,
/// action, principal, plugin hash and store name).
pub async fn authorize(
    State(host): State<Arc<Host>>,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    if matches!(request.uri().path(), "/healthz" | "/readyz" | "/metrics") {
        return Ok(next.run(request).await);
    }
    let principal = match who(&host, request.method(), request.headers()).await {
        Ok(principal) => {
            // A credential, not the anonymous reader: the connection has
            // proved itself and leaves the unauthenticated caps.
            if request.headers().contains_key(header::AUTHORIZATION)
                && let Some(connection) = request.extensions().get::<Arc<Connection>>()
            {
                connection.authenticated();
            }
            principal
        }
        Err(refusal) => {
            host.metrics.unauthenticated();
            drain(request).await;
            return Err(refusal);
        }
    };
    let asked = match super::access::gate(&host, &principal, &mut request).await {
        Ok(asked) => asked,
        Err(refusal) => {
            drain(request).await;
            return Err(refusal);
        }
    };
    request.extensions_mut().insert(Caller(principal.clone()));
    let response = next.run(request).await;
    // A lock refused what the handler tried: audited under the caller.
    if let Some(RetainedRefusal(reason)) = response.extensions().get::<RetainedRefusal>()
        && let Some((action, target)) = &asked
    {
        let record = super::access::refusal_record(
            &host,
            &principal,
            *action,
            target,
            "lock/refused",
            reason,
        );
        if let Err(error) = audit::append(host.kv.as_ref(), &record).await {
            tracing::warn!(%error, "cannot audit a lock's refusal");
        }
    }
    Ok(response)
}

/// The principal `headers` authenticate: a bearer credential's, else the
/// anonymous reader when reads are open and this is one.
async fn who(host: &Host, method: &Method, headers: &HeaderMap) -> Result<Principal, ApiError> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        let read = matches!(*method, Method::GET | Method::HEAD);
        if read && host.auth.read_access == ReadAccess::Open {
            return Ok(Principal {
                name: ANONYMOUS.into(),
                roles: vec![ANONYMOUS_ROLE.into()],
            });
        }
        return Err(ApiError::unauthorized(
            "this route needs an `Authorization: Bearer <token>` header",
        ));
    };
    let Some(presented) = value.as_bytes().strip_prefix(b"Bearer ") else {
        return Err(ApiError::unauthorized(
            "the `Authorization` header must be `Bearer <token>`",
        ));
    };
    match host.auth.principals.authenticate(presented).await {
        Ok(Some(principal)) => Ok(principal),
        Ok(None) => Err(ApiError::unauthorized("the bearer token is not valid")),
        Err(error) => {
            tracing::warn!(%error, "cannot check a credential");
            Err(ApiError::of_server_call(
                error.kind(),
                format!("cannot check the credential: {error}"),
            ))
        }
    }
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
    fn short_long_or_spaced_tokens_are_refused_and_a_final_newline_is_not_part() {
        assert!(Token::new("short").is_err());
        assert!(Token::new("0123456789 abcdef0123").is_err());
        assert!(Token::new(&"a".repeat(Token::MAX_BYTES + 1)).is_err());
        assert!(Token::new("0123456789abcdef\u{e9}0123").is_err());
        let token = Token::new("0123456789abcdef0123\n").unwrap();
        assert_eq!(token.expose(), "0123456789abcdef0123");
    }

    #[test]
    fn generated_tokens_differ_and_never_show_in_debug_output() {
        let (a, b) = (Token::generate().unwrap(), Token::generate().unwrap());
        assert_ne!(a.expose(), b.expose());
        assert_eq!(a.expose().len(), 64);
        assert_eq!(format!("{a:?}"), "Token(<redacted>)");
    }
}
