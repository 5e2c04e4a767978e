//! An S3 request's body, read and checked before anything is stored:
//! `aws-chunked` bodies decoded as they arrive (their chunk signatures
//! checked on the way), and every claim about the bytes compared with the
//! bytes: the signed SHA-256, `Content-MD5`, `x-amz-checksum-*` headers
//! and trailers, and the declared length. The CRC-64/NVME the store
//! checks again at publish is computed on the same pass, and so is the
//! MD5 a whole object's ETag names (see [`etag`](super::etag)).
//!
//! Every body is at most the per-object limit (`max_object_bytes`). How
//! much of it is held in memory depends on the store:
//! - into a store that writes bodies as they arrive
//!   (`ObjectStore::streams_bodies`, the filesystem store), a body longer
//!   than [`STREAM_ABOVE`] is streamed ([`Incoming`] → [`stream_into`]):
//!   it holds at most [`STREAMED_HOLD`] of the body budget, however long
//!   it is, and the store publishes only once every claim has held;
//! - otherwise it is read whole ([`read`]) within the host's body budget
//!   ([`Bodies`]), so one request pins at most the limit and all requests
//!   together at most the budget.
//!
//! A body that pauses longer than the bodies' bound is `RequestTimeout`.
//!
//! [`Bodies`]: crate::serve::http::Bodies

use axum::body::Body;
use axum::http::header::CONTENT_LENGTH;
use bytes::{Bytes, BytesMut};
use custodian_base::checksum::{self, Crc64Nvme};
use custodian_object::{BodySender, BodySums, ObjectError, ObjectStore, StreamedBody};
use custodian_s3_wire::checksum::{Algorithm, Claim, Hasher, content_md5};
use custodian_s3_wire::chunked::Decoder;
use custodian_s3_wire::error::{Code, S3Error};
use custodian_s3_wire::sigv4::{Payload, PayloadHasher};
use futures::StreamExt;
use md5::{Digest as _, Md5};

use super::{Call, errors};
use crate::serve::http::extract::Reservation;

/// A body read whole and checked, with its reservation from the budget:
/// keep `_held` alive as long as the bytes are in use.
pub(super) struct Received<'a> {
    /// The bytes.
    pub bytes: Bytes,
    /// Their CRC-64/NVME.
    pub crc64: u64,
    /// Their MD5, when the caller asked for it.
    pub md5: Option<[u8; 16]>,
    /// The checksum claims the client made and the bytes met, to echo in
    /// the answer as S3 does.
    pub claims: Vec<Claim>,
    _held: Reservation<'a>,
}

/// Everything computed over the decoded bytes as they arrive.
struct Checks {
    crc64: Crc64Nvme,
    sha256: Option<([u8; 32], PayloadHasher)>,
    /// The MD5, when wanted or claimed, and the `Content-MD5` claimed.
    md5: Option<(Md5, Option<[u8; 16]>)>,
    /// Each claim and its own hasher; `None` for a CRC-64/NVME claim,
    /// checked against `crc64`, which is computed anyway.
    claims: Vec<(Claim, Option<Hasher>)>,
    /// Checksums to be claimed in the trailer: (header name, algorithm,
    /// hasher as for `claims`).
    trailed: Vec<(String, Algorithm, Option<Hasher>)>,
}

impl Checks {
    fn update(&mut self, data: &[u8]) {
        self.crc64.update(data);
        if let Some((_, hash)) = &mut self.sha256 {
            hash.update(data);
        }
        if let Some((hash, _)) = &mut self.md5 {
            hash.update(data);
        }
        let hashers = self.claims.iter_mut().map(|(_, h)| h);
        for hasher in hashers
            .chain(self.trailed.iter_mut().map(|(_, _, h)| h))
            .flatten()
        {
            hasher.update(data);
        }
    }
}

/// The decoded length the request declares: `x-amz-decoded-content-length`
/// for an `aws-chunked` body, else `Content-Length`.
fn declared(call: &Call, chunked: bool) -> Result<Option<u64>, S3Error> {
    let name = if chunked {
        "x-amz-decoded-content-length"
    } else {
        CONTENT_LENGTH.as_str()
    };
    call.header(name)?
        .map(|v| {
            v.parse::<u64>()
                .map_err(|_| S3Error::new(Code::InvalidArgument, format!("{name} is not a length")))
        })
        .transpose()
}

/// The hasher a claim of `algorithm` needs of its own: none for
/// CRC-64/NVME, which every body pass computes.
fn own_hasher(algorithm: Algorithm) -> Option<Hasher> {
    (algorithm != Algorithm::Crc64Nvme).then(|| Hasher::new(algorithm))
}

/// A claim checked against its own hasher, or against `crc64`.
fn check_claim(claim: &Claim, hasher: Option<&Hasher>, crc64: u64) -> Result<(), S3Error> {
    match hasher {
        Some(hasher) => claim.check(hasher),
        None => claim.check_wire(&checksum::to_wire(crc64)),
    }
}

/// The checks the request's headers ask for, refused before any byte is
/// read when one is malformed.
fn checks(call: &Call, decoder: Option<&Decoder>, want_md5: bool) -> Result<Checks, S3Error> {
    let sha256 = match call.verified.as_ref().map(|v| v.payload) {
        Some(Payload::Sha256(expected)) => Some((expected, PayloadHasher::new())),
        _ => None,
    };
    let claimed_md5 = call.header("content-md5")?.map(content_md5).transpose()?;
    let md5 = (want_md5 || claimed_md5.is_some()).then(|| (Md5::new(), claimed_md5));
    let mut claims = Vec::new();
    for (name, value) in &call.parts.headers {
        let Some(algorithm) = Algorithm::of_header(name.as_str())? else {
            continue;
        };
        let value = value.to_str().map_err(|_| {
            S3Error::new(
                Code::InvalidRequest,
                format!("the {name} header is not text"),
            )
        })?;
        claims.push((Claim::new(algorithm, value)?, own_hasher(algorithm)));
    }
    let mut trailed = Vec::new();
    if decoder.is_some() {
        for value in call.parts.headers.get_all("x-amz-trailer") {
            let value = value.to_str().unwrap_or("");
            for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                if let Some(algorithm) = Algorithm::of_header(name)? {
                    trailed.push((name.to_ascii_lowercase(), algorithm, own_hasher(algorithm)));
                }
            }
        }
    }
    Ok(Checks {
        crc64: Crc64Nvme::new(),
        sha256,
        md5,
        claims,
        trailed,
    })
}

/// A request body being read: decoded and checked piece by piece, by
/// [`read`] into one buffer or by [`feed`] into a store's streamed
/// publish.
pub(super) struct Incoming<'a> {
    call: &'a Call,
    frames: axum::body::BodyDataStream,
    decoder: Option<Decoder>,
    declared: Option<u64>,
    limit: u64,
    checks: Checks,
    /// Decoded bytes so far.
    len: u64,
    want_md5: bool,
}

/// What a body was found to be once it ended and every claim held.
pub(super) struct Finished {
    /// Its decoded length.
    pub len: u64,
    /// Its CRC-64/NVME.
    pub crc64: u64,
    /// Its MD5, when the caller asked for it.
    pub md5: Option<[u8; 16]>,
    /// The checksum claims the client made and the bytes met, to echo in
    /// the answer as S3 does.
    pub claims: Vec<Claim>,
}

impl<'a> Incoming<'a> {
    /// Starts reading `body`, at most `limit` decoded bytes; `want_md5`
    /// also reports the bytes' MD5 (a pass more than the claims need, so
    /// only a whole object's publish asks for it). Refuses malformed
    /// checksum headers and a declared length past `limit` before any
    /// byte is read.
    pub fn new(call: &'a Call, body: Body, limit: u64, want_md5: bool) -> Result<Self, S3Error> {
        let decoder = match &call.verified {
            Some(verified) => Decoder::for_request(verified, &call.parts.headers)?,
            None => None,
        };
        let declared = declared(call, decoder.is_some())?;
        if let Some(declared) = declared
            && declared > limit
        {
            return Err(too_large(limit));
        }
        let checks = checks(call, decoder.as_ref(), want_md5)?;
        Ok(Self {
            call,
            frames: body.into_data_stream(),
            decoder,
            declared,
            limit,
            checks,
            len: 0,
            want_md5,
        })
    }

    /// The decoded length the request declares, if it does.
    pub fn declared(&self) -> Option<u64> {
        self.declared
    }

    /// The next decoded pieces (none at all is possible: a chunk header
    /// split across frames); `None` at the end of the body. Each piece
    /// is counted against the limit and the declared length, and fed to
    /// the checks, before it is returned.
    async fn next(&mut self) -> Result<Option<Vec<Bytes>>, S3Error> {
        let bodies = &self.call.host.bodies;
        let next = tokio::time::timeout(bodies.pause(), self.frames.next())
            .await
            .map_err(|_| {
                bodies.timed_out();
                S3Error::new(
                    Code::RequestTimeout,
                    format!(
                        "Your socket connection to the server was not read from or written to \
                         within the timeout period ({} ms); nothing was stored.",
                        bodies.pause().as_millis()
                    ),
                )
            })?;
        let Some(frame) = next else {
            return Ok(None);
        };
        let frame = frame.map_err(|e| {
            S3Error::new(
                Code::IncompleteBody,
                format!("reading the request body: {e}"),
            )
        })?;
        let pieces = match &mut self.decoder {
            Some(decoder) => {
                decoder.push(&frame)?;
                std::iter::from_fn(|| decoder.take()).collect()
            }
            None => vec![frame],
        };
        for piece in &pieces {
            self.len += piece.len() as u64;
            if self.len > self.limit {
                return Err(too_large(self.limit));
            }
            if self.declared.is_some_and(|d| self.len > d) {
                return Err(S3Error::new(
                    Code::IncompleteBody,
                    "The body is longer than its declared length.",
                ));
            }
            self.checks.update(piece);
        }
        Ok(Some(pieces))
    }

    /// Checks, once the body has ended, its length and every claim the
    /// request made about it.
    fn finish(self) -> Result<Finished, S3Error> {
        let trailers = self.decoder.map(Decoder::finish).transpose()?;
        if let Some(declared) = self.declared
            && self.len < declared
        {
            return Err(S3Error::new(
                Code::IncompleteBody,
                format!(
                    "You did not provide the number of bytes specified by the Content-Length \
                     HTTP header ({} of {declared}).",
                    self.len
                ),
            ));
        }
        let Checks {
            crc64,
            sha256,
            md5,
            claims,
            trailed,
        } = self.checks;
        if let Some((expected, hash)) = sha256 {
            hash.check(&expected)?;
        }
        let md5 = md5.map(|(hash, claimed)| (<[u8; 16]>::from(hash.finalize()), claimed));
        if let Some((actual, Some(expected))) = md5
            && actual != expected
        {
            return Err(S3Error::new(
                Code::BadDigest,
                "The Content-MD5 you specified did not match what we received.",
            ));
        }
        let crc64 = crc64.finalize();
        let mut met = Vec::new();
        for (claim, hasher) in claims {
            check_claim(&claim, hasher.as_ref(), crc64)?;
            met.push(claim);
        }
        if let Some(trailers) = trailers {
            for (name, algorithm, hasher) in trailed {
                let value = trailers.get(&name).ok_or_else(|| {
                    S3Error::new(
                        Code::IncompleteBody,
                        format!("the trailer {name} that x-amz-trailer announced did not come"),
                    )
                })?;
                let claim = Claim::new(algorithm, value)?;
                check_claim(&claim, hasher.as_ref(), crc64)?;
                met.push(claim);
            }
        }
        Ok(Finished {
            len: self.len,
            crc64,
            md5: md5.filter(|_| self.want_md5).map(|(actual, _)| actual),
            claims: met,
        })
    }
}

/// Reads `body` whole, at most `limit` decoded bytes, and checks every
/// claim the request makes about it (see [`Incoming::new`]).
///
/// # Errors
/// `EntityTooLarge` past `limit`; `SlowDown` when the body budget is
/// full; `RequestTimeout` for a stalled body; `IncompleteBody` for a body
/// shorter than declared; `SignatureDoesNotMatch` for a bad chunk
/// signature; `XAmzContentSHA256Mismatch`, `BadDigest` for a claim the
/// bytes do not meet.
pub(super) async fn read<'a>(
    call: &'a Call,
    body: Body,
    limit: u64,
    want_md5: bool,
) -> Result<Received<'a>, S3Error> {
    let mut incoming = Incoming::new(call, body, limit, want_md5)?;
    let declared = incoming.declared();
    // Up front, so a body that cannot fit is refused before it is read.
    let mut held = call
        .host
        .bodies
        .reserve(declared.unwrap_or(0))
        .map_err(errors::of_api)?;
    // At most `limit`, checked by `Incoming::new`.
    let mut buffer = BytesMut::with_capacity(declared.unwrap_or(0) as usize);
    while let Some(pieces) = incoming.next().await? {
        for piece in pieces {
            let len = (buffer.len() + piece.len()) as u64;
            let have = held_bytes(&buffer, declared);
            if len > have {
                held.grow(len - have).map_err(errors::of_api)?;
            }
            buffer.extend_from_slice(&piece);
        }
    }
    let Finished {
        crc64, md5, claims, ..
    } = incoming.finish()?;
    Ok(Received {
        bytes: buffer.freeze(),
        crc64,
        md5,
        claims,
        _held: held,
    })
}

/// Bytes one streamed body holds at most, reserved from the body budget
/// for as long as it is read: [`STREAM_DEPTH`] pieces in the channel,
/// one in the hands of each end and the decoder's queue, each piece at
/// most one frame of the connection's read buffer (hyper's is at most
/// ~400 KiB), rounded up.
pub(super) const STREAMED_HOLD: u64 = 4 << 20;

/// Pieces between a streamed body's reader and the store.
pub(super) const STREAM_DEPTH: usize = 4;

/// Bodies declared longer than this are streamed into the store as they
/// arrive, not read whole first: below it the bytes are few, and one
/// write from a buffer costs less than a hand-off per piece.
pub(super) const STREAM_ABOVE: u64 = 1 << 20;

/// Whether `call`'s body should be streamed into `store` (see
/// [`STREAM_ABOVE`]): the store writes bodies as they arrive, and the
/// body is longer than that or says nothing of its length.
pub(super) fn should_stream(call: &Call, store: &dyn ObjectStore) -> Result<bool, S3Error> {
    if !store.streams_bodies() {
        return Ok(false);
    }
    let chunked = call
        .verified
        .as_ref()
        .is_some_and(|v| v.payload.is_streaming());
    Ok(declared(call, chunked)?.is_none_or(|len| len > STREAM_ABOVE))
}

/// Streams `incoming` into `publish`, a store call that reads the other
/// end, and answers with what the body was found to be and the store's
/// result. A body that fails a check wins over the store's answer (the
/// store was told, and published nothing).
///
/// # Errors
/// As [`read`], or the store's error.
pub(super) async fn stream_into<T, F>(
    incoming: Incoming<'_>,
    publish: impl FnOnce(StreamedBody) -> F,
) -> Result<(Finished, T), S3Error>
where
    F: Future<Output = Result<T, ObjectError>>,
{
    let (sender, streamed) = StreamedBody::channel(STREAM_DEPTH);
    let (fed, stored) = tokio::join!(feed(incoming, sender), publish(streamed));
    let finished = fed?;
    let stored = stored.map_err(|e| errors::of_store(e, false))?;
    let finished = finished.ok_or_else(|| {
        S3Error::new(
            Code::InternalError,
            "the store stopped reading the body without saying why",
        )
    })?;
    Ok((finished, stored))
}

/// Reads `incoming` into `sender` as it arrives, holding at most
/// [`STREAMED_HOLD`] of the body budget, and ends the body with its
/// checksums once every claim held; the store publishes only then.
/// `Ok(None)` when the store stopped reading first (its own answer says
/// why).
///
/// # Errors
/// As [`read`]; the store is told the body failed, so it publishes
/// nothing.
async fn feed(mut incoming: Incoming<'_>, sender: BodySender) -> Result<Option<Finished>, S3Error> {
    let fed = async {
        let _held = incoming
            .call
            .host
            .bodies
            .reserve(STREAMED_HOLD)
            .map_err(errors::of_api)?;
        while let Some(pieces) = incoming.next().await? {
            for piece in pieces {
                if sender.data(piece).await.is_err() {
                    return Ok(None);
                }
            }
        }
        incoming.finish().map(Some)
    }
    .await;
    match fed {
        Ok(Some(finished)) => {
            let sums = BodySums {
                crc64: finished.crc64,
                content_md5: finished.md5,
            };
            Ok(sender.end(sums).await.ok().map(|()| finished))
        }
        Ok(None) => Ok(None),
        Err(error) => {
            sender
                .fail(ObjectError::InvalidArgument(
                    format!("the request body failed: {}", error.message).into(),
                ))
                .await;
            Err(error)
        }
    }
}

/// Bytes already reserved for `buffer`: the declared length was reserved
/// up front, and without one each piece as it came.
fn held_bytes(buffer: &BytesMut, declared: Option<u64>) -> u64 {
    declared.unwrap_or(0).max(buffer.len() as u64)
}

fn too_large(limit: u64) -> S3Error {
    S3Error::new(
        Code::EntityTooLarge,
        format!(
            "Your proposed upload exceeds this server's limit of {limit} bytes per request \
             body (`[server] max_object_mib`); upload larger objects in parts (multipart)."
        ),
    )
}
