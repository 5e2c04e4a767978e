//! Who sent an S3 request: its Signature V4 is parsed, the access key's
//! secret looked up among the principals' S3 keys (cached as bearer
//! credentials are, so a revocation elsewhere takes effect within the
//! principals' cache bound), and the signature checked against it.
//!
//! Replays: Signature V4 binds a request to its time, not to a nonce. A
//! signed request can be replayed by whoever captured it for as long as
//! S3 would take it (15 minutes either side of its date, or a presigned
//! URL until it expires), exactly as against S3; serve the endpoint over
//! TLS (a terminating proxy) wherever the network is not trusted.

use std::sync::Arc;

use axum::http::Method;
use axum::http::request::Parts;
use custodian_core::decisions::access::Principal;
use custodian_s3_wire::error::{Code, S3Error};
use custodian_s3_wire::sigv4::{self, Verified};

use crate::serve::Host;
use crate::serve::http::auth::{ANONYMOUS, ANONYMOUS_ROLE, ReadAccess};
use crate::serve::http::listen::Connection;

/// An authenticated caller.
pub(super) struct Caller {
    /// Who it is.
    pub principal: Principal,
    /// Its verified signature, which the body's decoding needs (`None`
    /// for the anonymous reader, whose request has no body to check).
    pub verified: Option<Verified>,
}

/// The caller of the request `parts` heads.
///
/// # Errors
/// `AccessDenied` for an unsigned request when reads are not open (or it
/// is not a read); the signature's own errors (`SignatureDoesNotMatch`,
/// `RequestTimeTooSkewed`, `AuthorizationHeaderMalformed`, …);
/// `InvalidAccessKeyId` for a key no principal holds.
pub(super) async fn authenticate(host: &Host, parts: &Parts) -> Result<Caller, S3Error> {
    let refused = |error: S3Error| {
        host.metrics.unauthenticated();
        error
    };
    let claim = sigv4::parse(&parts.uri, &parts.headers).map_err(refused)?;
    let Some(claim) = claim else {
        let read = matches!(parts.method, Method::GET | Method::HEAD);
        if read && host.auth.read_access == ReadAccess::Open {
            return Ok(Caller {
                principal: Principal {
                    name: ANONYMOUS.into(),
                    roles: vec![ANONYMOUS_ROLE.into()],
                },
                verified: None,
            });
        }
        return Err(refused(S3Error::new(
            Code::AccessDenied,
            "Anonymous access is not allowed here: sign the request (AWS Signature V4) with an \
             S3 key of a principal (`custodian principal s3-key NAME`)",
        )));
    };
    let key = host
        .auth
        .principals
        .s3_key(&claim.access_key)
        .await
        .map_err(|error| {
            tracing::warn!(%error, "cannot look up an S3 key");
            S3Error::new(
                Code::ServiceUnavailable,
                format!("cannot check the access key: {error}"),
            )
        })?
        .ok_or_else(|| {
            refused(S3Error::new(
                Code::InvalidAccessKeyId,
                "The AWS Access Key Id you provided does not exist in our records.",
            ))
        })?;
    let now_secs = host.clock.now_ms() / 1000;
    let verified = sigv4::verify(
        &claim,
        &key.secret,
        &parts.method,
        &parts.uri,
        &parts.headers,
        now_secs,
    )
    .map_err(refused)?;
    // A signed request: the connection has proved itself and leaves the
    // unauthenticated caps.
    if let Some(connection) = parts.extensions.get::<Arc<Connection>>() {
        connection.authenticated();
    }
    Ok(Caller {
        principal: key.principal,
        verified: Some(verified),
    })
}
