//! AWS Signature Version 4 as S3 checks it, server side: by the
//! `Authorization` header or by a presigned query.
//!
//! The work is split in three so the caller keeps the parts this module
//! must not own: [`parse`] reads what the request claims (who, when, over
//! which headers) without any secret; the caller looks the access key's
//! secret up; [`verify`] recomputes the signature with that secret and the
//! caller's clock. There is no IO and no clock here, so every rule can be
//! tested with AWS's published examples at their published time.
//!
//! A verified request carries a [`ChunkSigning`]: the signing key, scope
//! and seed signature that [`crate::chunked`] needs to check the signature
//! of each chunk of an `aws-chunked` body.
//!
//! Canonical URI: S3 signs the path as it travels, URI-encoded once, with
//! neither double encoding nor `.`/`..` normalisation. Clients sign the path
//! they put on the wire (botocore quotes with `/~` safe and signs that;
//! the Go and Java SDKs encode everything but unreserved characters and
//! `/`). So the path is taken raw: a well-formed `%XX` escape is kept (its
//! hex upper-cased, as SigV4 spells escapes), an unreserved byte or `/` is
//! kept, and any other byte is escaped. Keeping escapes rather than
//! decoding them matters for `%2F`: a key `a/b` sent as `a%2Fb` was signed
//! as `a%2Fb`, and decoding would turn it into `a/b` and fail the
//! signature. The same rule makes a client that sends a raw `$` (as AWS's
//! own PUT example does) match one that sends `%24`.

use std::fmt;

use hmac::{Hmac, KeyInit, Mac};
use http::{HeaderMap, Method, Uri};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, percent_encode};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::{Code, S3Error};

/// The only signing algorithm this endpoint accepts.
pub const ALGORITHM: &str = "AWS4-HMAC-SHA256";
/// `x-amz-content-sha256` for a body that is not signed.
pub const UNSIGNED_PAYLOAD: &str = "UNSIGNED-PAYLOAD";
/// `x-amz-content-sha256` for an `aws-chunked` body with signed chunks.
pub const STREAMING_SIGNED: &str = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD";
/// `x-amz-content-sha256` for signed chunks followed by signed trailers.
pub const STREAMING_SIGNED_TRAILER: &str = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER";
/// `x-amz-content-sha256` for unsigned chunks followed by trailers.
pub const STREAMING_UNSIGNED_TRAILER: &str = "STREAMING-UNSIGNED-PAYLOAD-TRAILER";

/// Hex SHA-256 of nothing: the empty-headers hash in every chunk's string
/// to sign.
pub(crate) const EMPTY_SHA256_HEX: &str =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// S3's tolerance between the request's time and the server's: a captured
/// header-signed request can be replayed only within this window.
const MAX_SKEW_SECS: u64 = 15 * 60;
/// S3's longest presigned lifetime (seven days): a leaked URL must die.
const MAX_PRESIGNED_EXPIRES: u64 = 7 * 24 * 3600;
/// SDKs send a few hundred bytes; anything near this is not a client's
/// header, and parsing it would only cost allocations.
const MAX_AUTHORIZATION_LEN: usize = 8 * 1024;
/// Clients sign a handful of headers; the bound keeps an attacker's list
/// from turning into thousands of lookups and a huge canonical request.
const MAX_SIGNED_HEADERS: usize = 64;
/// AWS's own limit on an access key id.
const MAX_ACCESS_KEY_LEN: usize = 128;
/// Region names are short (`us-east-1`, `auto`); the bound keeps an
/// unverified string from riding along into logs and the scope.
const MAX_REGION_LEN: usize = 64;

/// Bytes SigV4 leaves as they are when it URI-encodes: `A-Za-z0-9-._~`.
const SIGV4_ENCODE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

type HmacSha256 = Hmac<Sha256>;

/// What the request's `x-amz-content-sha256` (or, when presigned, the
/// payload line) says about the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload {
    /// The body's SHA-256; the caller checks the body against it
    /// ([`PayloadHasher`]).
    Sha256([u8; 32]),
    /// `UNSIGNED-PAYLOAD`: the body is not covered by the signature (the
    /// default for presigned URLs).
    Unsigned,
    /// `STREAMING-AWS4-HMAC-SHA256-PAYLOAD`: `aws-chunked` with a signature
    /// on every chunk.
    StreamingSigned,
    /// `STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER`: signed chunks, then
    /// trailers with their own signature.
    StreamingSignedTrailer,
    /// `STREAMING-UNSIGNED-PAYLOAD-TRAILER`: unsigned chunks, then trailers
    /// (boto3's and the AWS CLI's default for uploads with a checksum).
    StreamingUnsignedTrailer,
}

impl Payload {
    /// Reads an `x-amz-content-sha256` value.
    pub fn parse(value: &str) -> Result<Self, S3Error> {
        match value {
            UNSIGNED_PAYLOAD => Ok(Self::Unsigned),
            STREAMING_SIGNED => Ok(Self::StreamingSigned),
            STREAMING_SIGNED_TRAILER => Ok(Self::StreamingSignedTrailer),
            STREAMING_UNSIGNED_TRAILER => Ok(Self::StreamingUnsignedTrailer),
            hash => {
                let mut digest = [0u8; 32];
                match hex::decode_to_slice(hash, &mut digest) {
                    Ok(()) => Ok(Self::Sha256(digest)),
                    Err(_) => Err(S3Error::new(
                        Code::InvalidArgument,
                        "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, \
                         STREAMING-AWS4-HMAC-SHA256-PAYLOAD, \
                         STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER, \
                         STREAMING-UNSIGNED-PAYLOAD-TRAILER, or a valid sha256 value.",
                    )),
                }
            }
        }
    }

    /// Whether the body is `aws-chunked` ([`crate::chunked`] decodes it).
    pub fn is_streaming(self) -> bool {
        matches!(
            self,
            Self::StreamingSigned | Self::StreamingSignedTrailer | Self::StreamingUnsignedTrailer
        )
    }
}

/// What a request's signature claims, read from its `Authorization` header
/// or its presigned query; nothing here is checked against a secret yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The access key id the caller looks the secret up by.
    pub access_key: String,
    /// The scope's date, `yyyymmdd`.
    pub date: String,
    /// The scope's region (any: the endpoint is region-agnostic, but the
    /// signature covers whichever the client chose).
    pub region: String,
    /// The scope's service, always `s3`.
    pub service: String,
    /// The signed header names, lower case, in the client's order.
    pub signed_headers: Vec<String>,
    /// The signature the client sent.
    pub signature: [u8; 32],
    /// The signing time, `yyyymmddThhmmssZ`.
    pub amz_date: String,
    /// The signing time as unix seconds.
    pub at_secs: u64,
    /// `X-Amz-Expires` of a presigned URL; `None` for header auth.
    pub presigned_expires: Option<u64>,
    /// What the signature says about the body.
    pub payload: Payload,
    /// `x-amz-security-token` (temporary credentials), if sent; the caller
    /// decides whether it accepts such credentials.
    pub security_token: Option<String>,
    /// The last line of the canonical request, exactly as the client sent
    /// it (a hash in upper case stays upper case).
    payload_line: String,
}

impl Claim {
    /// The credential scope, `date/region/service/aws4_request`.
    pub fn scope(&self) -> String {
        format!(
            "{}/{}/{}/aws4_request",
            self.date, self.region, self.service
        )
    }

    /// Whether the claim came from a presigned query.
    pub fn is_presigned(&self) -> bool {
        self.presigned_expires.is_some()
    }
}

/// What [`crate::chunked`] needs to check an `aws-chunked` body's chunk and
/// trailer signatures: the chain starts at the request's own signature.
#[derive(Clone)]
pub struct ChunkSigning {
    key: [u8; 32],
    amz_date: String,
    scope: String,
    seed: [u8; 32],
}

impl ChunkSigning {
    /// The seed: the request's signature, the first chunk's "previous".
    pub fn seed(&self) -> [u8; 32] {
        self.seed
    }

    /// Built from its parts, for tests that sign bodies of their own.
    #[cfg(test)]
    pub(crate) fn from_parts(secret: &str, amz_date: &str, region: &str, seed: [u8; 32]) -> Self {
        let date = amz_date.get(..8).unwrap_or_default();
        Self {
            key: signing_key(secret, date, region, "s3"),
            amz_date: amz_date.to_owned(),
            scope: format!("{date}/{region}/s3/aws4_request"),
            seed,
        }
    }

    /// The signature of a chunk whose data hashes to `data_sha256`, chained
    /// to the `previous` signature.
    pub(crate) fn chunk(&self, previous: &[u8; 32], data_sha256: &[u8; 32]) -> [u8; 32] {
        let to_sign = format!(
            "AWS4-HMAC-SHA256-PAYLOAD\n{}\n{}\n{}\n{EMPTY_SHA256_HEX}\n{}",
            self.amz_date,
            self.scope,
            hex::encode(previous),
            hex::encode(data_sha256)
        );
        hmac(&self.key, to_sign.as_bytes())
    }

    /// The signature of the trailers whose canonical form hashes to
    /// `trailers_sha256`, chained to the final chunk's signature.
    pub(crate) fn trailer(&self, previous: &[u8; 32], trailers_sha256: &[u8; 32]) -> [u8; 32] {
        let to_sign = format!(
            "AWS4-HMAC-SHA256-TRAILER\n{}\n{}\n{}\n{}",
            self.amz_date,
            self.scope,
            hex::encode(previous),
            hex::encode(trailers_sha256)
        );
        hmac(&self.key, to_sign.as_bytes())
    }
}

impl fmt::Debug for ChunkSigning {
    // The key is as good as the secret for a day: never in a log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChunkSigning")
            .field("amz_date", &self.amz_date)
            .field("scope", &self.scope)
            .field("seed", &hex::encode(self.seed))
            .finish_non_exhaustive()
    }
}

/// A request whose signature matched.
#[derive(Debug, Clone)]
pub struct Verified {
    /// The access key that signed it.
    pub access_key: String,
    /// What the signature says about the body.
    pub payload: Payload,
    /// When a presigned URL stops working (unix seconds); `None` for
    /// header auth.
    pub expires_at: Option<u64>,
    /// The chain the body's chunk signatures continue.
    pub chunks: ChunkSigning,
}

/// Reads the credential a request claims. `Ok(None)`: the request carries
/// no credential at all (anonymous). Errors when it carries one that cannot
/// be read, carries two, or uses a scheme other than SigV4.
pub fn parse(uri: &Uri, headers: &HeaderMap) -> Result<Option<Claim>, S3Error> {
    let query = uri.query().unwrap_or("");
    let mut query_auth = false;
    let mut query_v2 = false;
    for (name, _) in raw_pairs(query) {
        match decode(name).as_str() {
            "X-Amz-Algorithm" | "X-Amz-Credential" | "X-Amz-Signature" => query_auth = true,
            "AWSAccessKeyId" | "Signature" => query_v2 = true,
            _ => {}
        }
    }
    let mut authorizations = headers.get_all(http::header::AUTHORIZATION).iter();
    let authorization = authorizations.next();
    if authorizations.next().is_some() {
        return Err(malformed(
            "The request carries more than one Authorization header.",
        ));
    }
    match authorization {
        Some(_) if query_auth || query_v2 => Err(S3Error::new(
            Code::InvalidArgument,
            "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, \
             Signature query string parameter or the Authorization header should be specified",
        )),
        Some(value) => parse_header_auth(value.as_bytes(), headers).map(Some),
        None if query_auth => parse_presigned(query, headers).map(Some),
        None if query_v2 => Err(unsupported()),
        None => Ok(None),
    }
}

/// Checks `claim` against the `secret` of its access key and the server's
/// clock `now_secs` (unix seconds). The request parts are the ones `claim`
/// was parsed from.
pub fn verify(
    claim: &Claim,
    secret: &str,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    now_secs: u64,
) -> Result<Verified, S3Error> {
    check_time(claim, now_secs)?;
    let key = signing_key(secret, &claim.date, &claim.region, &claim.service);
    let computed = expected_signature(claim, &key, method, uri, headers)?;
    if !bool::from(computed.ct_eq(&claim.signature)) {
        return Err(signature_mismatch());
    }
    Ok(Verified {
        access_key: claim.access_key.clone(),
        payload: claim.payload,
        expires_at: claim
            .presigned_expires
            .map(|expires| claim.at_secs.saturating_add(expires)),
        chunks: ChunkSigning {
            key,
            amz_date: claim.amz_date.clone(),
            scope: claim.scope(),
            seed: claim.signature,
        },
    })
}

/// The signature `claim`'s request should carry under `key`.
fn expected_signature(
    claim: &Claim,
    key: &[u8; 32],
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
) -> Result<[u8; 32], S3Error> {
    let canonical = canonical_request(method, uri, headers, claim)?;
    let to_sign = format!(
        "{ALGORITHM}\n{}\n{}\n{}",
        claim.amz_date,
        claim.scope(),
        hex::encode(Sha256::digest(&canonical))
    );
    Ok(hmac(key, to_sign.as_bytes()))
}

/// Compares a body's SHA-256 with the one its request signed
/// ([`Payload::Sha256`]).
pub fn check_payload(expected: &[u8; 32], actual: &[u8; 32]) -> Result<(), S3Error> {
    if expected == actual {
        Ok(())
    } else {
        Err(S3Error::new(
            Code::XAmzContentSHA256Mismatch,
            "The provided 'x-amz-content-sha256' header does not match what was computed.",
        ))
    }
}

/// Hashes a body as it streams, to check it against [`Payload::Sha256`]
/// once it has all arrived.
#[derive(Debug, Clone, Default)]
pub struct PayloadHasher(Sha256);

impl PayloadHasher {
    /// A hasher that has seen nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the next piece of the body.
    pub fn update(&mut self, data: &[u8]) {
        self.0.update(data);
    }

    /// Checks the whole body against the signed hash.
    pub fn check(self, expected: &[u8; 32]) -> Result<(), S3Error> {
        check_payload(expected, &self.0.finalize().into())
    }
}

fn parse_header_auth(value: &[u8], headers: &HeaderMap) -> Result<Claim, S3Error> {
    if value.len() > MAX_AUTHORIZATION_LEN {
        return Err(malformed(format!(
            "The Authorization header is longer than {MAX_AUTHORIZATION_LEN} bytes."
        )));
    }
    let value = std::str::from_utf8(value)
        .map_err(|_| malformed("The Authorization header is not text."))?
        .trim();
    let (algorithm, rest) = value.split_once([' ', '\t']).unwrap_or((value, ""));
    if algorithm != ALGORITHM {
        return Err(unsupported());
    }
    let (mut credential, mut signed, mut signature) = (None, None, None);
    // Clients separate the three parts with ", ", "," or " "; no value
    // contains a comma or a space, so any run of them separates.
    for part in rest.split([',', ' ', '\t']).filter(|p| !p.is_empty()) {
        let (key, value) = part.split_once('=').ok_or_else(|| {
            malformed(format!(
                "The Authorization header part {part:?} has no '='."
            ))
        })?;
        let slot = match key {
            "Credential" => &mut credential,
            "SignedHeaders" => &mut signed,
            "Signature" => &mut signature,
            _ => {
                return Err(malformed(format!(
                    "The Authorization header has an unknown part {key:?}."
                )));
            }
        };
        if slot.replace(value).is_some() {
            return Err(malformed(format!(
                "The Authorization header has {key} twice."
            )));
        }
    }
    let (Some(credential), Some(signed), Some(signature)) = (credential, signed, signature) else {
        return Err(malformed(
            "The Authorization header needs Credential, SignedHeaders and Signature.",
        ));
    };
    let credential = parse_credential(credential)?;
    let signed_headers = parse_signed_headers(signed)?;
    let signature = parse_signature(signature)?;

    let (amz_date, at_secs) = header_date(headers)?;
    if credential.date != amz_date[..8] {
        return Err(malformed(
            "Invalid credential date. Date is not the same as X-Amz-Date.",
        ));
    }
    let payload_line = single_header(headers, "x-amz-content-sha256")?
        .ok_or_else(|| {
            S3Error::new(
                Code::InvalidRequest,
                "Missing required header for this request: x-amz-content-sha256",
            )
        })?
        .to_owned();
    let payload = Payload::parse(&payload_line)?;
    let security_token = single_header(headers, "x-amz-security-token")?.map(str::to_owned);
    check_amz_headers_signed(headers, &signed_headers)?;
    Ok(Claim {
        access_key: credential.access_key,
        date: credential.date,
        region: credential.region,
        service: credential.service,
        signed_headers,
        signature,
        amz_date,
        at_secs,
        presigned_expires: None,
        payload,
        security_token,
        payload_line,
    })
}

fn parse_presigned(query: &str, headers: &HeaderMap) -> Result<Claim, S3Error> {
    let mut algorithm = None;
    let mut credential = None;
    let mut date = None;
    let mut expires = None;
    let mut signed = None;
    let mut signature = None;
    let mut token = None;
    let mut content_sha256 = None;
    for (name, value) in raw_pairs(query) {
        let name = decode(name);
        let slot = match name.as_str() {
            "X-Amz-Algorithm" => &mut algorithm,
            "X-Amz-Credential" => &mut credential,
            "X-Amz-Date" => &mut date,
            "X-Amz-Expires" => &mut expires,
            "X-Amz-SignedHeaders" => &mut signed,
            "X-Amz-Signature" => &mut signature,
            "X-Amz-Security-Token" => &mut token,
            "X-Amz-Content-Sha256" => &mut content_sha256,
            _ => continue,
        };
        if slot.replace(decode(value)).is_some() {
            return Err(query_malformed(format!("{name} appears twice.")));
        }
    }
    let (
        Some(algorithm),
        Some(credential),
        Some(date),
        Some(expires),
        Some(signed),
        Some(signature),
    ) = (algorithm, credential, date, expires, signed, signature)
    else {
        return Err(query_malformed(
            "Query-string authentication requires the X-Amz-Algorithm, X-Amz-Credential, \
             X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, and X-Amz-Expires parameters.",
        ));
    };
    if algorithm != ALGORITHM {
        return Err(query_malformed(
            "X-Amz-Algorithm only supports \"AWS4-HMAC-SHA256\".",
        ));
    }
    let credential = parse_credential(&credential)?;
    let signed_headers = parse_signed_headers(&signed)?;
    let signature = parse_signature(&signature)?;
    let at_secs = parse_amz_date(&date)
        .ok_or_else(|| query_malformed("X-Amz-Date must be in the ISO8601 Long Format."))?;
    if credential.date != date[..8] {
        return Err(query_malformed(
            "Invalid credential date. Date is not the same as X-Amz-Date.",
        ));
    }
    // Six digits cover a week; more could only overflow.
    let expires = match expires.parse::<u64>() {
        Ok(n) if expires.len() <= 6 && expires.bytes().all(|b| b.is_ascii_digit()) => n,
        _ => return Err(query_malformed("X-Amz-Expires should be a number.")),
    };
    if expires == 0 {
        return Err(query_malformed(
            "X-Amz-Expires must be at least one second.",
        ));
    }
    if expires > MAX_PRESIGNED_EXPIRES {
        return Err(query_malformed(
            "X-Amz-Expires must be less than a week (in seconds) that is 604800.",
        ));
    }
    // A presigned URL is made before its body exists, so the payload line
    // is UNSIGNED-PAYLOAD, unless the client signed a hash anyway: as a
    // signed header, or as a query parameter (then inside the signed
    // query). An unsigned x-amz-content-sha256 header proves nothing and
    // is ignored.
    let signed_header = if signed_headers.iter().any(|h| h == "x-amz-content-sha256") {
        single_header(headers, "x-amz-content-sha256")?.map(str::to_owned)
    } else {
        None
    };
    let payload_line = signed_header
        .or(content_sha256)
        .unwrap_or_else(|| UNSIGNED_PAYLOAD.to_owned());
    let payload = Payload::parse(&payload_line)?;
    check_amz_headers_signed(headers, &signed_headers)?;
    Ok(Claim {
        access_key: credential.access_key,
        date: credential.date,
        region: credential.region,
        service: credential.service,
        signed_headers,
        signature,
        amz_date: date,
        at_secs,
        presigned_expires: Some(expires),
        payload,
        security_token: token,
        payload_line,
    })
}

struct Credential {
    access_key: String,
    date: String,
    region: String,
    service: String,
}

fn parse_credential(value: &str) -> Result<Credential, S3Error> {
    // From the right: an access key id is the one part a server other than
    // AWS might let contain a '/'.
    let mut parts = value.rsplitn(5, '/');
    let (Some(terminator), Some(service), Some(region), Some(date), Some(access_key)) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return Err(malformed(
            "The Credential is not AKID/yyyymmdd/region/s3/aws4_request.",
        ));
    };
    if access_key.is_empty() || access_key.len() > MAX_ACCESS_KEY_LEN {
        return Err(malformed(format!(
            "The Credential's access key id must be 1 to {MAX_ACCESS_KEY_LEN} characters."
        )));
    }
    if date.len() != 8 || parse_amz_date(&format!("{date}T000000Z")).is_none() {
        return Err(malformed(format!(
            "The Credential's date {date:?} is not yyyymmdd."
        )));
    }
    if region.is_empty() || region.len() > MAX_REGION_LEN {
        return Err(malformed(format!(
            "The Credential's region must be 1 to {MAX_REGION_LEN} characters."
        )));
    }
    if service != "s3" {
        return Err(malformed(format!(
            "The Credential names the service {service:?}; this endpoint is s3."
        )));
    }
    if terminator != "aws4_request" {
        return Err(malformed("The Credential must end with aws4_request."));
    }
    Ok(Credential {
        access_key: access_key.to_owned(),
        date: date.to_owned(),
        region: region.to_owned(),
        service: service.to_owned(),
    })
}

fn parse_signed_headers(value: &str) -> Result<Vec<String>, S3Error> {
    let mut names = Vec::new();
    for name in value.split(';') {
        if names.len() == MAX_SIGNED_HEADERS {
            return Err(malformed(format!(
                "SignedHeaders names more than {MAX_SIGNED_HEADERS} headers."
            )));
        }
        let valid = !name.is_empty()
            && name.bytes().all(|b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.!#$%&'*+^`|~".contains(&b)
            });
        if !valid {
            return Err(malformed(format!(
                "SignedHeaders has {name:?}, which is not a lower-case header name."
            )));
        }
        names.push(name.to_owned());
    }
    if !names.iter().any(|n| n == "host") {
        return Err(malformed("SignedHeaders must include host."));
    }
    Ok(names)
}

fn parse_signature(value: &str) -> Result<[u8; 32], S3Error> {
    let mut signature = [0u8; 32];
    hex::decode_to_slice(value, &mut signature)
        .map_err(|_| malformed("The Signature must be 64 hexadecimal digits."))?;
    Ok(signature)
}

/// The signing time of a header-signed request: `x-amz-date`, or else
/// `Date` (which S3 still accepts), as `yyyymmddThhmmssZ` and unix seconds.
fn header_date(headers: &HeaderMap) -> Result<(String, u64), S3Error> {
    let invalid = || {
        S3Error::new(
            Code::AccessDenied,
            "AWS authentication requires a valid Date or x-amz-date header",
        )
    };
    if let Some(value) = single_header(headers, "x-amz-date")? {
        let at = parse_amz_date(value).ok_or_else(invalid)?;
        return Ok((value.to_owned(), at));
    }
    let value = single_header(headers, "date")?.ok_or_else(invalid)?;
    crate::date::parse_http_date_signed(value).ok_or_else(invalid)
}

/// A header the request may carry once; as text, since every header read
/// here is ASCII when well formed.
fn single_header<'h>(headers: &'h HeaderMap, name: &str) -> Result<Option<&'h str>, S3Error> {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(S3Error::new(
            Code::InvalidArgument,
            format!("The request carries the header {name} more than once."),
        ));
    }
    value.to_str().map(|v| Some(v.trim())).map_err(|_| {
        S3Error::new(
            Code::InvalidArgument,
            format!("The header {name} is not text."),
        )
    })
}

/// S3 refuses `x-amz-*` headers the signature does not cover: they carry
/// meaning (copy sources, ACLs, lock bypasses) an intermediary must not be
/// able to add. `x-amz-content-sha256` is exempt: with header auth the
/// payload line covers it, and a presigned request ignores it unsigned.
fn check_amz_headers_signed(headers: &HeaderMap, signed_headers: &[String]) -> Result<(), S3Error> {
    for name in headers.keys() {
        let name = name.as_str();
        if name.starts_with("x-amz-")
            && name != "x-amz-content-sha256"
            && !signed_headers.iter().any(|s| s == name)
        {
            return Err(S3Error::new(
                Code::AccessDenied,
                format!("There were headers present in the request which were not signed: {name}"),
            ));
        }
    }
    Ok(())
}

fn check_time(claim: &Claim, now_secs: u64) -> Result<(), S3Error> {
    let too_early = claim.at_secs > now_secs.saturating_add(MAX_SKEW_SECS);
    match claim.presigned_expires {
        None => {
            if too_early || now_secs > claim.at_secs.saturating_add(MAX_SKEW_SECS) {
                return Err(S3Error::new(
                    Code::RequestTimeTooSkewed,
                    "The difference between the request time and the current time is too large.",
                ));
            }
        }
        Some(expires) => {
            if too_early {
                return Err(S3Error::new(Code::AccessDenied, "Request is not valid yet"));
            }
            if now_secs > claim.at_secs.saturating_add(expires) {
                return Err(S3Error::new(Code::AccessDenied, "Request has expired"));
            }
        }
    }
    Ok(())
}

fn canonical_request(
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    claim: &Claim,
) -> Result<Vec<u8>, S3Error> {
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b'\n');
    out.extend_from_slice(canonical_uri(uri.path()).as_bytes());
    out.push(b'\n');
    out.extend_from_slice(
        canonical_query(uri.query().unwrap_or(""), claim.is_presigned()).as_bytes(),
    );
    out.push(b'\n');
    for name in &claim.signed_headers {
        out.extend_from_slice(name.as_bytes());
        out.push(b':');
        let mut values = headers.get_all(name.as_str()).iter().peekable();
        if values.peek().is_none() {
            // HTTP/2 carries the host as :authority, which lands in the URI.
            match uri.authority() {
                Some(authority) if name == "host" => {
                    out.extend_from_slice(authority.as_str().as_bytes());
                }
                _ => {
                    return Err(S3Error::new(
                        Code::SignatureDoesNotMatch,
                        format!(
                            "The header {name} is named in SignedHeaders but absent from the request."
                        ),
                    ));
                }
            }
        }
        for (i, value) in values.enumerate() {
            if i > 0 {
                out.push(b',');
            }
            push_canonical_value(&mut out, value.as_bytes());
        }
        out.push(b'\n');
    }
    out.push(b'\n');
    out.extend_from_slice(claim.signed_headers.join(";").as_bytes());
    out.push(b'\n');
    out.extend_from_slice(claim.payload_line.as_bytes());
    Ok(out)
}

/// A header value as SigV4 signs it: trimmed, runs of spaces made one.
fn push_canonical_value(out: &mut Vec<u8>, value: &[u8]) {
    let start = value.iter().position(|b| !matches!(b, b' ' | b'\t'));
    let end = value.iter().rposition(|b| !matches!(b, b' ' | b'\t'));
    let (Some(start), Some(end)) = (start, end) else {
        return;
    };
    let mut last_space = false;
    for &b in &value[start..=end] {
        if b == b' ' {
            if !last_space {
                out.push(b);
            }
            last_space = true;
        } else {
            out.push(b);
            last_space = false;
        }
    }
}

/// The path as S3 signs it; see the module's documentation for why escapes
/// are kept rather than decoded.
fn canonical_uri(path: &str) -> String {
    if path.is_empty() {
        return "/".to_owned();
    }
    let bytes = path.as_bytes();
    let mut out = String::with_capacity(bytes.len() + 16);
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match (b, bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if h.is_ascii_hexdigit() && l.is_ascii_hexdigit() => {
                out.push('%');
                out.push(char::from(h.to_ascii_uppercase()));
                out.push(char::from(l.to_ascii_uppercase()));
                i += 3;
                continue;
            }
            _ if b == b'/' || is_unreserved(b) => out.push(char::from(b)),
            _ => out.push_str(&format!("%{b:02X}")),
        }
        i += 1;
    }
    out
}

/// The query as SigV4 signs it: every name and value decoded and encoded
/// again (so `a b`, `a%20b` and `a%20b` agree), a name without `=` given an
/// empty value, sorted by name then value; for a presigned request without
/// `X-Amz-Signature`. A `+` is a literal plus, as RFC 3986 has it: SDKs
/// send a space as `%20`.
fn canonical_query(query: &str, presigned: bool) -> String {
    let mut pairs: Vec<(String, String)> = raw_pairs(query)
        .map(|(name, value)| (reencode(name), reencode(value)))
        .filter(|(name, _)| !(presigned && name == "X-Amz-Signature"))
        .collect();
    pairs.sort_unstable();
    let mut out = String::with_capacity(query.len() + 16);
    for (i, (name, value)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        out.push_str(name);
        out.push('=');
        out.push_str(value);
    }
    out
}

/// A raw query's `name=value` pairs, not decoded; empty segments skipped.
fn raw_pairs(query: &str) -> impl Iterator<Item = (&str, &str)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| p.split_once('=').unwrap_or((p, "")))
}

fn decode(raw: &str) -> String {
    percent_decode_str(raw).decode_utf8_lossy().into_owned()
}

fn reencode(raw: &str) -> String {
    let bytes: Vec<u8> = percent_decode_str(raw).collect();
    percent_encode(&bytes, SIGV4_ENCODE).to_string()
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// The key of one day, region and service, derived from the secret.
pub(crate) fn signing_key(secret: &str, date: &str, region: &str, service: &str) -> [u8; 32] {
    let k_date = hmac(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    let k_region = hmac(&k_date, region.as_bytes());
    let k_service = hmac(&k_region, service.as_bytes());
    hmac(&k_service, b"aws4_request")
}

/// HMAC-SHA256 of `data` under `key`.
pub(crate) fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    // HMAC takes a key of any length (a long one is hashed first), so this
    // cannot fail whatever the request holds.
    let mut mac =
        <HmacSha256 as KeyInit>::new_from_slice(key).expect("HMAC accepts keys of every length");
    mac.update(data);
    mac.finalize().into_bytes().into()
}

/// `yyyymmddThhmmssZ` as unix seconds.
fn parse_amz_date(value: &str) -> Option<u64> {
    let b = value.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let num = |range: std::ops::Range<usize>| -> Option<u32> {
        let digits = b.get(range)?;
        digits.iter().try_fold(0u32, |n, &d| {
            d.is_ascii_digit().then(|| n * 10 + u32::from(d - b'0'))
        })
    };
    crate::date::to_unix(
        num(0..4)?,
        num(4..6)?,
        num(6..8)?,
        num(9..11)?,
        num(11..13)?,
        num(13..15)?,
    )
}

fn malformed(message: impl Into<String>) -> S3Error {
    S3Error::new(Code::AuthorizationHeaderMalformed, message)
}

/// S3 answers a bad presigned query with AuthorizationQueryParametersError,
/// which this endpoint's table lacks; its nearest kin is the header's.
fn query_malformed(message: impl Into<String>) -> S3Error {
    S3Error::new(
        Code::AuthorizationHeaderMalformed,
        format!("Query-string authentication: {}", message.into()),
    )
}

fn unsupported() -> S3Error {
    S3Error::new(
        Code::InvalidRequest,
        "The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256.",
    )
}

fn signature_mismatch() -> S3Error {
    S3Error::new(
        Code::SignatureDoesNotMatch,
        "The request signature we calculated does not match the signature you provided. \
         Check your key and signing method.",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderName, HeaderValue};

    const AKID: &str = "AKIAIOSFODNN7EXAMPLE";
    const SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
    const HOST: &str = "examplebucket.s3.amazonaws.com";
    const EMPTY: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    /// 2013-05-24T00:00:00Z, the time of every AWS example.
    const AT: u64 = 1_369_353_600;

    fn request(uri: &str, headers: &[(&str, &str)]) -> (Uri, HeaderMap) {
        let uri: Uri = uri.parse().expect("test URI");
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).expect("test header name"),
                HeaderValue::from_str(value).expect("test header value"),
            );
        }
        (uri, map)
    }

    fn authorization(signed: &str, signature: &str) -> String {
        format!(
            "AWS4-HMAC-SHA256 Credential={AKID}/20130524/us-east-1/s3/aws4_request,\
             SignedHeaders={signed},Signature={signature}"
        )
    }

    fn check(
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        now: u64,
    ) -> Result<Verified, S3Error> {
        let claim = parse(uri, headers)?.expect("a credential");
        verify(&claim, SECRET, method, uri, headers, now)
    }

    /// Replaces the placeholder signature of a request by the right one,
    /// so a test can then change one thing and see the signature fail.
    fn sign(method: &Method, uri: &Uri, headers: &mut HeaderMap) {
        let claim = parse(uri, headers).expect("parses").expect("a credential");
        let key = signing_key(SECRET, &claim.date, &claim.region, &claim.service);
        let signature = hex::encode(
            expected_signature(&claim, &key, method, uri, headers).expect("canonical request"),
        );
        let value = headers[http::header::AUTHORIZATION]
            .to_str()
            .expect("ascii")
            .replace(&hex::encode(claim.signature), &signature);
        headers.insert(
            http::header::AUTHORIZATION,
            HeaderValue::from_str(&value).expect("ascii"),
        );
    }

    /// A GET of `/k` signed at `at` over host, x-amz-content-sha256 and
    /// x-amz-date.
    fn signed_get(at: &str, extra: &[(&str, &str)]) -> (Uri, HeaderMap) {
        let mut signed = "host;x-amz-content-sha256;x-amz-date".to_owned();
        for (name, _) in extra {
            signed.push(';');
            signed.push_str(name);
        }
        let auth = format!(
            "AWS4-HMAC-SHA256 Credential={AKID}/{}/us-east-1/s3/aws4_request, \
             SignedHeaders={signed}, Signature={}",
            &at[..8],
            "0".repeat(64)
        );
        let mut headers = vec![
            ("host", HOST),
            ("x-amz-content-sha256", EMPTY),
            ("x-amz-date", at),
            ("authorization", auth.as_str()),
        ];
        headers.extend_from_slice(extra);
        let (uri, mut map) = request("/k", &headers);
        sign(&Method::GET, &uri, &mut map);
        (uri, map)
    }

    fn code(result: Result<impl std::fmt::Debug, S3Error>) -> Code {
        result.expect_err("an error").code
    }

    #[test]
    fn the_get_object_example_verifies() {
        let auth = authorization(
            "host;range;x-amz-content-sha256;x-amz-date",
            "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
        );
        let (uri, headers) = request(
            "/test.txt",
            &[
                ("host", HOST),
                ("range", "bytes=0-9"),
                ("x-amz-content-sha256", EMPTY),
                ("x-amz-date", "20130524T000000Z"),
                ("authorization", &auth),
            ],
        );
        let claim = parse(&uri, &headers)
            .expect("parses")
            .expect("a credential");
        assert_eq!(claim.access_key, AKID);
        assert_eq!(claim.scope(), "20130524/us-east-1/s3/aws4_request");
        assert_eq!(claim.at_secs, AT);
        let verified = verify(&claim, SECRET, &Method::GET, &uri, &headers, AT).expect("verifies");
        assert_eq!(verified.access_key, AKID);
        let mut empty = [0u8; 32];
        hex::decode_to_slice(EMPTY, &mut empty).expect("hex");
        assert_eq!(verified.payload, Payload::Sha256(empty));
        assert_eq!(verified.expires_at, None);
    }

    #[test]
    fn the_put_object_example_verifies_whether_or_not_the_dollar_is_escaped() {
        let auth = authorization(
            "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class",
            "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd",
        );
        let body_hash = "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072";
        for path in ["/test$file.text", "/test%24file.text"] {
            let (uri, headers) = request(
                path,
                &[
                    ("date", "Fri, 24 May 2013 00:00:00 GMT"),
                    ("host", HOST),
                    ("x-amz-content-sha256", body_hash),
                    ("x-amz-date", "20130524T000000Z"),
                    ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
                    ("authorization", &auth),
                ],
            );
            let verified = check(&Method::PUT, &uri, &headers, AT).expect("verifies");
            let mut hasher = PayloadHasher::new();
            hasher.update(b"Welcome to ");
            hasher.update(b"Amazon S3.");
            let Payload::Sha256(expected) = verified.payload else {
                panic!("a hash payload");
            };
            hasher.check(&expected).expect("the example's body matches");
        }
    }

    #[test]
    fn the_lifecycle_example_signs_a_bare_subresource_as_an_empty_value() {
        let auth = authorization(
            "host;x-amz-content-sha256;x-amz-date",
            "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543",
        );
        let (uri, headers) = request(
            "/?lifecycle",
            &[
                ("host", HOST),
                ("x-amz-content-sha256", EMPTY),
                ("x-amz-date", "20130524T000000Z"),
                ("authorization", &auth),
            ],
        );
        check(&Method::GET, &uri, &headers, AT).expect("verifies");
    }

    #[test]
    fn the_list_objects_example_verifies_in_either_query_order() {
        let auth = authorization(
            "host;x-amz-content-sha256;x-amz-date",
            "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7",
        );
        for uri in ["/?max-keys=2&prefix=J", "/?prefix=J&max-keys=2"] {
            let (uri, headers) = request(
                uri,
                &[
                    ("host", HOST),
                    ("x-amz-content-sha256", EMPTY),
                    ("x-amz-date", "20130524T000000Z"),
                    ("authorization", &auth),
                ],
            );
            check(&Method::GET, &uri, &headers, AT).expect("verifies");
        }
    }

    const PRESIGNED: &str = "/test.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256\
        &X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request\
        &X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host\
        &X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404";

    #[test]
    fn the_presigned_example_verifies_until_it_expires() {
        let (uri, headers) = request(PRESIGNED, &[("host", HOST)]);
        let claim = parse(&uri, &headers)
            .expect("parses")
            .expect("a credential");
        assert_eq!(claim.presigned_expires, Some(86_400));
        for now in [AT, AT + 86_400] {
            let verified =
                verify(&claim, SECRET, &Method::GET, &uri, &headers, now).expect("valid");
            assert_eq!(verified.payload, Payload::Unsigned);
            assert_eq!(verified.expires_at, Some(AT + 86_400));
        }
        // A clock somewhat behind the signer's is tolerated like skew.
        verify(&claim, SECRET, &Method::GET, &uri, &headers, AT - 600).expect("valid");
    }

    #[test]
    fn a_presigned_url_past_its_expiry_is_access_denied() {
        let (uri, headers) = request(PRESIGNED, &[("host", HOST)]);
        let error = check(&Method::GET, &uri, &headers, AT + 86_401).expect_err("expired");
        assert_eq!(error.code, Code::AccessDenied);
        assert_eq!(error.message, "Request has expired");
    }

    #[test]
    fn a_presigned_url_dated_beyond_the_skew_is_not_valid_yet() {
        let (uri, headers) = request(PRESIGNED, &[("host", HOST)]);
        let error = check(&Method::GET, &uri, &headers, AT - 901).expect_err("early");
        assert_eq!(error.code, Code::AccessDenied);
        assert_eq!(error.message, "Request is not valid yet");
    }

    #[test]
    fn a_presigned_url_with_a_changed_method_path_or_query_does_not_match() {
        let (uri, headers) = request(PRESIGNED, &[("host", HOST)]);
        assert_eq!(
            code(check(&Method::PUT, &uri, &headers, AT)),
            Code::SignatureDoesNotMatch
        );
        let (uri, headers) = request(
            &PRESIGNED.replace("test.txt", "test2.txt"),
            &[("host", HOST)],
        );
        assert_eq!(
            code(check(&Method::GET, &uri, &headers, AT)),
            Code::SignatureDoesNotMatch
        );
        let (uri, headers) = request(&format!("{PRESIGNED}&versionId=1"), &[("host", HOST)]);
        assert_eq!(
            code(check(&Method::GET, &uri, &headers, AT)),
            Code::SignatureDoesNotMatch
        );
        let (uri, headers) = request(PRESIGNED, &[("host", "otherbucket.s3.amazonaws.com")]);
        assert_eq!(
            code(check(&Method::GET, &uri, &headers, AT)),
            Code::SignatureDoesNotMatch
        );
    }

    #[test]
    fn presigned_query_parameters_out_of_bounds_are_refused() {
        for (from, to) in [
            ("X-Amz-Expires=86400", "X-Amz-Expires=604801"),
            ("X-Amz-Expires=86400", "X-Amz-Expires=0"),
            ("X-Amz-Expires=86400", "X-Amz-Expires=-1"),
            (
                "X-Amz-Expires=86400",
                "X-Amz-Expires=99999999999999999999999",
            ),
            (
                "X-Amz-Algorithm=AWS4-HMAC-SHA256",
                "X-Amz-Algorithm=AWS4-HMAC-SHA1",
            ),
            ("X-Amz-Date=20130524T000000Z", "X-Amz-Date=20130525T000000Z"),
            ("X-Amz-Date=20130524T000000Z", "X-Amz-Date=2013-05-24"),
            ("X-Amz-SignedHeaders=host", "X-Amz-SignedHeaders=range"),
            ("&X-Amz-Expires=86400", ""),
            (
                "&X-Amz-Date=20130524T000000Z",
                "&X-Amz-Date=20130524T000000Z&X-Amz-Date=20130524T000000Z",
            ),
        ] {
            let (uri, headers) = request(&PRESIGNED.replace(from, to), &[("host", HOST)]);
            assert_eq!(
                code(parse(&uri, &headers)),
                Code::AuthorizationHeaderMalformed,
                "{to}"
            );
        }
        // The longest lifetime S3 allows is allowed.
        let (uri, headers) = request(
            &PRESIGNED.replace("X-Amz-Expires=86400", "X-Amz-Expires=604800"),
            &[("host", HOST)],
        );
        parse(&uri, &headers).expect("parses");
    }

    /// Requests botocore 1.43 signed (path style, `https://s3.example.test:9000`,
    /// the example credentials, its clock pinned to the examples' time),
    /// captured as it sends them: escapes in the path, a query botocore
    /// ordered its own way, and headers it leaves unsigned.
    #[test]
    fn requests_signed_by_botocore_verify() {
        let host = "s3.example.test:9000";
        let auth = |signed: &str, signature: &str| {
            format!(
                "AWS4-HMAC-SHA256 Credential={AKID}/20130524/us-east-1/s3/aws4_request, \
                 SignedHeaders={signed}, Signature={signature}"
            )
        };
        let cases = [
            (
                "/bucket/dir/a%20b%2Bc%252F~%C3%A9%24.txt",
                vec![("range", "bytes=0-9"), ("x-amz-checksum-mode", "ENABLED")],
                auth(
                    "host;range;x-amz-checksum-mode;x-amz-content-sha256;x-amz-date",
                    "35739d92610d46c8ee50a475c323df6cf4622923f843be27077756f40274de96",
                ),
            ),
            (
                "/bucket?list-type=2&prefix=a%20b%2Bc%2F&delimiter=%2F&encoding-type=url",
                vec![],
                auth(
                    "host;x-amz-content-sha256;x-amz-date",
                    "9f685afdbf220c368a2687733faeb006a02fe633fb379644774ff5f55c238e22",
                ),
            ),
            (
                "/bucket?versioning",
                vec![],
                auth(
                    "host;x-amz-content-sha256;x-amz-date",
                    "75f21c356f3ff4585b3589b6c68ff61cd83b27c3318fd90217cd75f57297a339",
                ),
            ),
        ];
        for (uri, extra, auth) in cases {
            let mut headers = vec![
                ("host", host),
                ("user-agent", "Botocore/1.43.11 ua/2.1"),
                ("x-amz-date", "20130524T000000Z"),
                ("x-amz-content-sha256", EMPTY),
                ("authorization", auth.as_str()),
                (
                    "amz-sdk-invocation-id",
                    "4ffd0b19-af87-4b84-8bcf-b6e919febe1c",
                ),
                ("amz-sdk-request", "attempt=1"),
            ];
            headers.extend(extra);
            let (uri, headers) = request(uri, &headers);
            check(&Method::GET, &uri, &headers, AT).expect("botocore's signature");
        }
        for (method, uri) in [
            (
                Method::GET,
                "/bucket/dir/a%20b%2B%C3%A9.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256\
                 &X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request\
                 &X-Amz-Date=20130524T000000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host\
                 &X-Amz-Signature=432fe68597b01ab4ca7fba7f8e1d9f4746cfb8154f02ae9acce4f517c0dceea8",
            ),
            (
                Method::PUT,
                "/bucket/up/x%20y.bin?X-Amz-Algorithm=AWS4-HMAC-SHA256\
                 &X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request\
                 &X-Amz-Date=20130524T000000Z&X-Amz-Expires=600&X-Amz-SignedHeaders=host\
                 &X-Amz-Signature=1b07c1278601e81df83544e1356269eabe8ce594e4034c025c7ba53ba913d9ee",
            ),
        ] {
            let (uri, headers) = request(uri, &[("host", host), ("content-length", "3")]);
            let verified =
                check(&method, &uri, &headers, AT + 60).expect("botocore's presigned URL");
            assert_eq!(verified.payload, Payload::Unsigned);
        }
    }

    #[test]
    fn a_request_without_any_credential_is_anonymous() {
        let (uri, headers) = request("/bucket/key?versionId=3", &[("host", HOST)]);
        assert_eq!(parse(&uri, &headers).expect("parses"), None);
    }

    #[test]
    fn header_and_query_credentials_together_are_refused() {
        let auth = authorization("host", &"0".repeat(64));
        let (uri, headers) = request(PRESIGNED, &[("host", HOST), ("authorization", &auth)]);
        assert_eq!(code(parse(&uri, &headers)), Code::InvalidArgument);
    }

    #[test]
    fn signature_version_2_is_not_supported() {
        let (uri, headers) = request(
            "/k",
            &[
                ("host", HOST),
                (
                    "authorization",
                    "AWS AKIAIOSFODNN7EXAMPLE:frJIUN8DYpKDtOLCwo//yllqDzg=",
                ),
            ],
        );
        assert_eq!(code(parse(&uri, &headers)), Code::InvalidRequest);
        let (uri, headers) = request(
            "/k?AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Expires=1141889120&Signature=vjbyPxybd",
            &[("host", HOST)],
        );
        assert_eq!(code(parse(&uri, &headers)), Code::InvalidRequest);
    }

    #[test]
    fn a_header_signed_request_within_fifteen_minutes_verifies_and_beyond_is_too_skewed() {
        let (uri, headers) = signed_get("20130524T000000Z", &[]);
        for now in [AT - 900, AT, AT + 900] {
            check(&Method::GET, &uri, &headers, now).expect("within the skew");
        }
        for now in [AT - 901, AT + 901, 0, u64::MAX] {
            assert_eq!(
                code(check(&Method::GET, &uri, &headers, now)),
                Code::RequestTimeTooSkewed
            );
        }
    }

    #[test]
    fn a_wrong_secret_does_not_match() {
        let (uri, headers) = signed_get("20130524T000000Z", &[]);
        let claim = parse(&uri, &headers)
            .expect("parses")
            .expect("a credential");
        let error = verify(&claim, "not the secret", &Method::GET, &uri, &headers, AT)
            .expect_err("wrong secret");
        assert_eq!(error.code, Code::SignatureDoesNotMatch);
        assert!(
            error
                .message
                .starts_with("The request signature we calculated")
        );
    }

    #[test]
    fn a_tampered_signed_header_does_not_match() {
        let (uri, mut headers) = signed_get("20130524T000000Z", &[("range", "bytes=0-9")]);
        check(&Method::GET, &uri, &headers, AT).expect("as signed");
        headers.insert("range", HeaderValue::from_static("bytes=0-99"));
        assert_eq!(
            code(check(&Method::GET, &uri, &headers, AT)),
            Code::SignatureDoesNotMatch
        );
    }

    #[test]
    fn a_tampered_payload_hash_does_not_match() {
        let (uri, mut headers) = signed_get("20130524T000000Z", &[]);
        headers.insert(
            "x-amz-content-sha256",
            HeaderValue::from_static(UNSIGNED_PAYLOAD),
        );
        assert_eq!(
            code(check(&Method::GET, &uri, &headers, AT)),
            Code::SignatureDoesNotMatch
        );
    }

    #[test]
    fn a_signed_header_missing_from_the_request_does_not_match() {
        let (uri, mut headers) = signed_get("20130524T000000Z", &[("range", "bytes=0-9")]);
        headers.remove("range");
        let error = check(&Method::GET, &uri, &headers, AT).expect_err("missing");
        assert_eq!(error.code, Code::SignatureDoesNotMatch);
        assert!(error.message.contains("range"), "{}", error.message);
    }

    #[test]
    fn the_host_may_come_from_the_uri_authority_as_with_http2() {
        let (_, mut headers) = signed_get("20130524T000000Z", &[]);
        headers.remove("host");
        let uri: Uri = format!("https://{HOST}/k").parse().expect("uri");
        check(&Method::GET, &uri, &headers, AT).expect("host from :authority");
    }

    #[test]
    fn an_unsigned_amz_header_is_refused() {
        let (uri, mut headers) = signed_get("20130524T000000Z", &[]);
        headers.insert(
            "x-amz-copy-source",
            HeaderValue::from_static("/other/secret"),
        );
        let error = parse(&uri, &headers).expect_err("unsigned header");
        assert_eq!(error.code, Code::AccessDenied);
        assert!(error.message.contains("x-amz-copy-source"));
    }

    #[test]
    fn header_values_are_signed_trimmed_with_spaces_collapsed_and_repeats_joined() {
        let (uri, mut headers) = signed_get("20130524T000000Z", &[("x-amz-meta-a", "one  two")]);
        headers.append("x-amz-meta-a", HeaderValue::from_static("three"));
        sign(&Method::GET, &uri, &mut headers);
        let claim = parse(&uri, &headers)
            .expect("parses")
            .expect("a credential");
        let canonical = canonical_request(&Method::GET, &uri, &headers, &claim).expect("canonical");
        let canonical = String::from_utf8(canonical).expect("text");
        assert!(
            canonical.contains("\nx-amz-meta-a:one two,three\n"),
            "{canonical}"
        );
        // Spacing is not part of what is signed.
        headers.remove("x-amz-meta-a");
        headers.append("x-amz-meta-a", HeaderValue::from_static("  one two   "));
        headers.append("x-amz-meta-a", HeaderValue::from_static("three"));
        check(&Method::GET, &uri, &headers, AT).expect("same canonical value");
    }

    #[test]
    fn the_date_header_stands_in_for_a_missing_x_amz_date() {
        let auth = authorization("date;host;x-amz-content-sha256", &"0".repeat(64));
        let (uri, mut headers) = request(
            "/k",
            &[
                ("date", "Fri, 24 May 2013 00:00:00 GMT"),
                ("host", HOST),
                ("x-amz-content-sha256", EMPTY),
                ("authorization", &auth),
            ],
        );
        sign(&Method::GET, &uri, &mut headers);
        let claim = parse(&uri, &headers)
            .expect("parses")
            .expect("a credential");
        assert_eq!(claim.amz_date, "20130524T000000Z");
        assert_eq!(claim.at_secs, AT);
        verify(&claim, SECRET, &Method::GET, &uri, &headers, AT).expect("verifies");
    }

    #[test]
    fn a_request_without_a_date_is_access_denied() {
        let auth = authorization("host;x-amz-content-sha256", &"0".repeat(64));
        let (uri, headers) = request(
            "/k",
            &[
                ("host", HOST),
                ("x-amz-content-sha256", EMPTY),
                ("authorization", &auth),
            ],
        );
        assert_eq!(code(parse(&uri, &headers)), Code::AccessDenied);
    }

    #[test]
    fn a_missing_content_sha256_header_is_an_invalid_request() {
        let auth = authorization("host;x-amz-date", &"0".repeat(64));
        let (uri, headers) = request(
            "/k",
            &[
                ("host", HOST),
                ("x-amz-date", "20130524T000000Z"),
                ("authorization", &auth),
            ],
        );
        let error = parse(&uri, &headers).expect_err("missing");
        assert_eq!(error.code, Code::InvalidRequest);
        assert!(error.message.contains("x-amz-content-sha256"));
    }

    #[test]
    fn a_content_sha256_that_is_neither_a_hash_nor_a_known_token_is_invalid() {
        for value in [
            "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD",
            "abc",
            &"g".repeat(64),
        ] {
            assert_eq!(
                code(Payload::parse(value)),
                Code::InvalidArgument,
                "{value}"
            );
        }
        assert_eq!(
            Payload::parse(STREAMING_SIGNED),
            Ok(Payload::StreamingSigned)
        );
        assert_eq!(
            Payload::parse(STREAMING_SIGNED_TRAILER),
            Ok(Payload::StreamingSignedTrailer)
        );
        assert_eq!(
            Payload::parse(STREAMING_UNSIGNED_TRAILER),
            Ok(Payload::StreamingUnsignedTrailer)
        );
        assert!(Payload::StreamingUnsignedTrailer.is_streaming());
        assert!(!Payload::Unsigned.is_streaming());
    }

    #[test]
    fn a_body_whose_hash_differs_from_the_signed_one_is_a_mismatch() {
        assert_eq!(
            code(check_payload(&[1; 32], &[2; 32])),
            Code::XAmzContentSHA256Mismatch
        );
        let mut hasher = PayloadHasher::new();
        hasher.update(b"x");
        assert_eq!(
            code(hasher.check(&[0; 32])),
            Code::XAmzContentSHA256Mismatch
        );
    }

    #[test]
    fn authorization_parts_may_be_separated_by_commas_spaces_or_both() {
        let signature = "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41";
        let credential = format!("Credential={AKID}/20130524/us-east-1/s3/aws4_request");
        let signed = "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date";
        for auth in [
            format!("AWS4-HMAC-SHA256 {credential},{signed},Signature={signature}"),
            format!("AWS4-HMAC-SHA256 {credential}, {signed}, Signature={signature}"),
            format!("AWS4-HMAC-SHA256  {credential} {signed} Signature={signature} "),
            format!("AWS4-HMAC-SHA256 Signature={signature},{credential},{signed}"),
        ] {
            let (uri, headers) = request(
                "/test.txt",
                &[
                    ("host", HOST),
                    ("range", "bytes=0-9"),
                    ("x-amz-content-sha256", EMPTY),
                    ("x-amz-date", "20130524T000000Z"),
                    ("authorization", &auth),
                ],
            );
            check(&Method::GET, &uri, &headers, AT).expect(&auth);
        }
    }

    #[test]
    fn malformed_authorization_headers_are_refused_with_a_reason() {
        let zeros = "0".repeat(64);
        let good_credential = format!("{AKID}/20130524/us-east-1/s3/aws4_request");
        let header = |credential: &str, signed: &str, signature: &str| {
            format!(
                "AWS4-HMAC-SHA256 Credential={credential}, SignedHeaders={signed}, Signature={signature}"
            )
        };
        let signed = "host;x-amz-content-sha256;x-amz-date";
        let many: Vec<String> = (0..65).map(|i| format!("x-h{i}")).collect();
        let many = format!("host;{}", many.join(";"));
        let cases = [
            header(&good_credential, signed, "abc"),
            header(&good_credential, signed, &"z".repeat(64)),
            header(&good_credential, "x-amz-date", &zeros),
            header(&good_credential, "host;Range", &zeros),
            header(&good_credential, "host;;range", &zeros),
            header(&good_credential, &many, &zeros),
            header(
                &format!("{AKID}/20130524/us-east-1/ec2/aws4_request"),
                signed,
                &zeros,
            ),
            header(
                &format!("{AKID}/20130524/us-east-1/s3/aws5_request"),
                signed,
                &zeros,
            ),
            header(
                &format!("{AKID}/20130525/us-east-1/s3/aws4_request"),
                signed,
                &zeros,
            ),
            header(
                &format!("{AKID}/2013052/us-east-1/s3/aws4_request"),
                signed,
                &zeros,
            ),
            header(&format!("{AKID}/20130524/s3/aws4_request"), signed, &zeros),
            header("/20130524/us-east-1/s3/aws4_request", signed, &zeros),
            header(
                &format!("{}/20130524/us-east-1/s3/aws4_request", "A".repeat(129)),
                signed,
                &zeros,
            ),
            header(
                &format!("{AKID}/20130524/{}/s3/aws4_request", "r".repeat(65)),
                signed,
                &zeros,
            ),
            format!("AWS4-HMAC-SHA256 Credential={good_credential}, Signature={zeros}"),
            format!("AWS4-HMAC-SHA256 Credential={good_credential}, SignedHeaders={signed}"),
            format!(
                "AWS4-HMAC-SHA256 Credential={good_credential}, SignedHeaders={signed}, Signature={zeros}, Signature={zeros}"
            ),
            format!(
                "AWS4-HMAC-SHA256 Credential={good_credential}, SignedHeaders={signed}, Signature={zeros}, Extra=1"
            ),
            format!(
                "AWS4-HMAC-SHA256 Credential={good_credential}, SignedHeaders={signed}, Signature"
            ),
            format!(
                "AWS4-HMAC-SHA256 Credential={good_credential}, SignedHeaders={signed}, Signature={zeros}, {}",
                "x".repeat(9000)
            ),
            "AWS4-HMAC-SHA256".to_owned(),
        ];
        for auth in cases {
            let (uri, headers) = request(
                "/k",
                &[
                    ("host", HOST),
                    ("x-amz-content-sha256", EMPTY),
                    ("x-amz-date", "20130524T000000Z"),
                    ("authorization", &auth),
                ],
            );
            let error = parse(&uri, &headers).expect_err(&auth);
            assert_eq!(
                error.code,
                Code::AuthorizationHeaderMalformed,
                "{auth}: {error}"
            );
        }
    }

    #[test]
    fn a_region_other_than_us_east_1_is_accepted_and_signed() {
        let auth = format!(
            "AWS4-HMAC-SHA256 Credential={AKID}/20130524/auto/s3/aws4_request, \
             SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature={}",
            "0".repeat(64)
        );
        let (uri, mut headers) = request(
            "/k",
            &[
                ("host", HOST),
                ("x-amz-content-sha256", UNSIGNED_PAYLOAD),
                ("x-amz-date", "20130524T000000Z"),
                ("authorization", &auth),
            ],
        );
        sign(&Method::GET, &uri, &mut headers);
        let verified = check(&Method::GET, &uri, &headers, AT).expect("verifies");
        assert_eq!(verified.payload, Payload::Unsigned);
        let claim = parse(&uri, &headers)
            .expect("parses")
            .expect("a credential");
        let mut wrong = claim.clone();
        wrong.region = "us-east-1".to_owned();
        assert_eq!(
            code(verify(&wrong, SECRET, &Method::GET, &uri, &headers, AT)),
            Code::SignatureDoesNotMatch
        );
    }

    #[test]
    fn the_canonical_query_sorts_encodes_and_gives_bare_names_an_empty_value() {
        assert_eq!(canonical_query("versioning", false), "versioning=");
        assert_eq!(canonical_query("", false), "");
        assert_eq!(
            canonical_query("list-type=2&prefix=a b", false),
            "list-type=2&prefix=a%20b"
        );
        assert_eq!(
            canonical_query("prefix=a%20b&list-type=2", false),
            "list-type=2&prefix=a%20b"
        );
        assert_eq!(canonical_query("b=2&a=x%2fy/z", false), "a=x%2Fy%2Fz&b=2");
        assert_eq!(canonical_query("a=1&a=0&a-b=2", false), "a=0&a=1&a-b=2");
        assert_eq!(canonical_query("p=a+b&q=%7E%41", false), "p=a%2Bb&q=~A");
        assert_eq!(
            canonical_query("k=caf%C3%A9&uploads&&", false),
            "k=caf%C3%A9&uploads="
        );
        assert_eq!(
            canonical_query("X-Amz-Signature=ab&X-Amz-Date=1", true),
            "X-Amz-Date=1"
        );
        assert_eq!(
            canonical_query("X-Amz-Signature=ab&X-Amz-Date=1", false),
            "X-Amz-Date=1&X-Amz-Signature=ab"
        );
    }

    #[test]
    fn the_canonical_uri_is_the_wire_path_encoded_once() {
        assert_eq!(canonical_uri(""), "/");
        assert_eq!(canonical_uri("/test$file.text"), "/test%24file.text");
        assert_eq!(canonical_uri("/test%24file.text"), "/test%24file.text");
        // botocore sends (and signs) a key "a b/c~d" as this:
        assert_eq!(canonical_uri("/bucket/a%20b/c~d"), "/bucket/a%20b/c~d");
        // A slash sent escaped was signed escaped; lower-case hex is
        // spelled upper-case as SigV4 does.
        assert_eq!(canonical_uri("/bucket/a%2Fb"), "/bucket/a%2Fb");
        assert_eq!(canonical_uri("/bucket/a%2fb"), "/bucket/a%2Fb");
        // No dot-segment normalisation, no double encoding.
        assert_eq!(canonical_uri("/bucket/./a/../b//c"), "/bucket/./a/../b//c");
        assert_eq!(canonical_uri("/bucket/%25%41"), "/bucket/%25%41");
        // A '%' that starts no escape is itself escaped.
        assert_eq!(canonical_uri("/a%zz%4"), "/a%25zz%254");
        assert_eq!(canonical_uri("/a:b@c=d+e"), "/a%3Ab%40c%3Dd%2Be");
    }

    #[test]
    fn dates_convert_to_unix_seconds_and_impossible_ones_are_refused() {
        assert_eq!(parse_amz_date("20130524T000000Z"), Some(AT));
        assert_eq!(parse_amz_date("19700101T000000Z"), Some(0));
        assert_eq!(parse_amz_date("20000229T235959Z"), Some(951_868_799));
        assert_eq!(parse_amz_date("21000301T000000Z"), Some(4_107_542_400));
        for bad in [
            "20130230T000000Z",
            "21000229T000000Z",
            "20131324T000000Z",
            "20130524T240000Z",
            "20130524T006000Z",
            "19691231T235959Z",
            "20130524 000000Z",
            "20130524T000000",
            "2013052aT000000Z",
            "+0130524T000000Z",
            "",
        ] {
            assert_eq!(parse_amz_date(bad), None, "{bad}");
        }
        assert_eq!(
            crate::date::parse_http_date_signed("Fri, 24 May 2013 00:00:00 GMT"),
            Some(("20130524T000000Z".to_owned(), AT))
        );
        assert_eq!(
            crate::date::parse_http_date_signed("Fri, 24 May 2013 00:00:00 UTC"),
            None
        );
        assert_eq!(
            crate::date::parse_http_date_signed("Fri, 24 Mai 2013 00:00:00 GMT"),
            None
        );
        assert_eq!(
            crate::date::parse_http_date_signed("Fri, 24 May 2013 0:00:00 GMT"),
            None
        );
    }

    #[test]
    fn the_signing_key_hides_in_debug_output() {
        let signing = ChunkSigning::from_parts(SECRET, "20130524T000000Z", "us-east-1", [7; 32]);
        let shown = format!("{signing:?}");
        assert!(shown.contains("20130524/us-east-1/s3/aws4_request"));
        assert!(!shown.contains(&hex::encode(signing.key)));
        assert!(!shown.contains(&format!("{:?}", signing.key)));
    }

    #[test]
    fn arbitrary_headers_and_queries_never_panic_parse_or_verify() {
        const NAMES: [&str; 9] = [
            "authorization",
            "x-amz-date",
            "x-amz-content-sha256",
            "host",
            "date",
            "range",
            "x-amz-security-token",
            "x-amz-meta-a",
            "x-amz-decoded-content-length",
        ];
        bolero::check!()
            .with_type::<(Vec<(u8, bool, Vec<u8>)>, Vec<u8>)>()
            .for_each(|(entries, query)| {
                let mut headers = HeaderMap::new();
                for (which, framed, bytes) in entries {
                    let name = NAMES[usize::from(*which) % NAMES.len()];
                    // Framed values start the way a real one does, so the
                    // input gets past the first check.
                    let mut value = match (name, framed) {
                        ("authorization", true) => format!(
                            "AWS4-HMAC-SHA256 Credential={AKID}/20130524/us-east-1/s3/aws4_request, \
                             SignedHeaders=host;"
                        )
                        .into_bytes(),
                        ("x-amz-date", true) => b"2013052".to_vec(),
                        _ => Vec::new(),
                    };
                    value.extend_from_slice(bytes);
                    if let Ok(value) = HeaderValue::from_bytes(&value) {
                        headers.append(name, value);
                    }
                }
                // Characters a query is made of, so the URI mostly parses.
                const QUERY: &[u8] = b"aZ0%=&+-X2F~_./;:";
                let query: String = query
                    .iter()
                    .map(|&b| char::from(QUERY[usize::from(b) % QUERY.len()]))
                    .collect();
                let uri = format!("/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&{query}")
                    .parse::<Uri>()
                    .unwrap_or_else(|_| Uri::from_static("/k"));
                for uri in [uri, Uri::from_static("/k")] {
                    let _ = canonical_query(uri.query().unwrap_or(""), true);
                    if let Ok(Some(claim)) = parse(&uri, &headers) {
                        let _ = verify(&claim, SECRET, &Method::PUT, &uri, &headers, AT);
                    }
                }
            });
    }
}
