//! `aws-chunked` request bodies, decoded incrementally and without IO.
//!
//! SDKs that stream an upload without knowing its hash first, or that
//! append a checksum after the data, frame the body in chunks and declare
//! the real length in `x-amz-decoded-content-length`. The framing follows
//! from `x-amz-content-sha256` ([`Payload`]):
//!
//! - signed (`STREAMING-AWS4-HMAC-SHA256-PAYLOAD`):
//!   `hex-size;chunk-signature=<sig>\r\n<data>\r\n` …, ending with a
//!   zero-size chunk and `\r\n`. Each signature chains to the previous
//!   one, starting at the request's own ([`ChunkSigning`]).
//! - signed with trailers (`…-PAYLOAD-TRAILER`): the same, but the
//!   zero-size chunk is followed by trailer lines `name:value\r\n`, then
//!   `x-amz-trailer-signature:<sig>\r\n`, then `\r\n`.
//! - unsigned with trailers (`STREAMING-UNSIGNED-PAYLOAD-TRAILER`, boto3's
//!   and the AWS CLI's default): `hex-size\r\n<data>\r\n` …, `0\r\n`, the
//!   trailer lines, `\r\n`.
//!
//! [`Decoder::push`] takes the body as it arrives, in pieces of any size,
//! and [`Decoder::take`] hands out the decoded data as [`Bytes`] split from
//! the decoder's buffer (the input is copied once, into that buffer). Data
//! of a signed chunk is handed out only once its signature is verified, so
//! nothing forged reaches the store; unsigned data flows as it arrives.
//! [`Decoder::finish`] says whether the body was whole and returns its
//! trailers; checking a trailing checksum is the caller's, who computed it.

use std::collections::VecDeque;

use bytes::{Buf, Bytes, BytesMut};
use http::HeaderMap;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::{Code, S3Error};
use crate::sigv4::{ChunkSigning, Payload, Verified};

/// A chunk-size line is a dozen bytes plus an 80-byte signature; a line
/// with no end in sight is not a client's and must not grow the buffer.
const MAX_LINE: usize = 4 * 1024;
/// Sixteen hex digits are every size a u64 holds; more could only overflow.
const MAX_SIZE_DIGITS: usize = 16;
/// A signed chunk is held until its signature is checked, so its size is
/// memory this decoder holds. SDKs sign chunks of 64 to 128 KiB; 16 MiB
/// leaves them a wide margin and caps what one upload can make us hold.
/// Unsigned chunks pass through as they arrive and are bounded only by the
/// declared length.
const MAX_SIGNED_CHUNK: u64 = 16 * 1024 * 1024;
/// Clients send one checksum trailer; a few more leave room without
/// letting a body turn into a header store.
const MAX_TRAILERS: usize = 8;
/// All trailer lines together, signature included: a trailer section is a
/// few hundred bytes, and its lines are held until the body ends.
const MAX_TRAILER_SECTION: usize = 16 * 1024;

/// How an `aws-chunked` body is framed and whether its chunks are signed.
#[derive(Debug, Clone)]
pub enum Framing {
    /// Signed chunks, no trailers.
    Signed(ChunkSigning),
    /// Signed chunks, then trailers with their own signature.
    SignedWithTrailer(ChunkSigning),
    /// Unsigned chunks, then trailers.
    UnsignedWithTrailer,
}

/// The trailers that followed the final chunk, in arrival order, names in
/// lower case (the trailer signature itself left out).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trailers {
    entries: Vec<(String, String)>,
}

impl Trailers {
    /// The value of the trailer `name` (lower case), if it came.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every trailer, as `(name, value)`.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// Whether no trailer came.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The value to store as the object's `Content-Encoding`: the request's,
/// without `aws-chunked` (which describes the transfer, not the object);
/// `None` when nothing else remains.
pub fn remaining_content_encoding(headers: &HeaderMap) -> Option<String> {
    let rest: Vec<&str> = content_encodings(headers)
        .filter(|e| !e.eq_ignore_ascii_case("aws-chunked"))
        .collect();
    (!rest.is_empty()).then(|| rest.join(","))
}

fn content_encodings(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(http::header::CONTENT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|e| !e.is_empty())
}

#[derive(Debug, Clone, Copy)]
enum State {
    /// Expecting a chunk-size line.
    Size,
    /// Inside a chunk's data; a signed chunk carries its signature.
    Data {
        left: u64,
        signature: Option<[u8; 32]>,
    },
    /// Expecting the CRLF after a chunk's data.
    DataEnd,
    /// Expecting the CRLF that ends a body without trailers.
    FinalEnd,
    /// Reading trailer lines until an empty one.
    Trailers,
    /// The body is complete; nothing may follow.
    Done,
}

/// An incremental `aws-chunked` decoder; see the module documentation.
#[derive(Debug)]
pub struct Decoder {
    signing: Option<ChunkSigning>,
    /// The last verified signature, which the next one chains to.
    previous: [u8; 32],
    trailer_section: bool,
    declared: u64,
    /// Data bytes announced by chunk headers so far (never above
    /// `declared`).
    announced: u64,
    expected_trailers: Vec<String>,
    trailers: Vec<(String, String)>,
    trailer_bytes: usize,
    trailer_signed: bool,
    buf: BytesMut,
    /// How much of `buf` has been searched for a line end already, so
    /// input arriving a byte at a time is not searched again and again.
    scanned: usize,
    state: State,
    out: VecDeque<Bytes>,
    failed: Option<S3Error>,
}

impl Decoder {
    /// A decoder for a body framed as `framing`, whose decoded length is
    /// `decoded_length` (`x-amz-decoded-content-length`) and that must end
    /// with the trailers named in `expected_trailers` (`x-amz-trailer`).
    pub fn new(framing: Framing, decoded_length: u64, expected_trailers: Vec<String>) -> Self {
        let (signing, trailer_section) = match framing {
            Framing::Signed(signing) => (Some(signing), false),
            Framing::SignedWithTrailer(signing) => (Some(signing), true),
            Framing::UnsignedWithTrailer => (None, true),
        };
        Self {
            previous: signing.as_ref().map(ChunkSigning::seed).unwrap_or_default(),
            signing,
            trailer_section,
            declared: decoded_length,
            announced: 0,
            expected_trailers: expected_trailers
                .into_iter()
                .map(|n| n.to_ascii_lowercase())
                .collect(),
            trailers: Vec::new(),
            trailer_bytes: 0,
            trailer_signed: false,
            buf: BytesMut::new(),
            scanned: 0,
            state: State::Size,
            out: VecDeque::new(),
            failed: None,
        }
    }

    /// The decoder a verified request's body needs, from its payload and
    /// headers; `Ok(None)` when the body is not `aws-chunked`.
    pub fn for_request(verified: &Verified, headers: &HeaderMap) -> Result<Option<Self>, S3Error> {
        let framing = match verified.payload {
            Payload::StreamingSigned => Framing::Signed(verified.chunks.clone()),
            Payload::StreamingSignedTrailer => Framing::SignedWithTrailer(verified.chunks.clone()),
            Payload::StreamingUnsignedTrailer => Framing::UnsignedWithTrailer,
            Payload::Sha256(_) | Payload::Unsigned => {
                if content_encodings(headers).any(|e| e.eq_ignore_ascii_case("aws-chunked")) {
                    return Err(S3Error::new(
                        Code::InvalidArgument,
                        "An aws-chunked body needs x-amz-content-sha256 to name a STREAMING-* payload.",
                    ));
                }
                return Ok(None);
            }
        };
        let declared = headers
            .get("x-amz-decoded-content-length")
            .ok_or_else(|| {
                S3Error::new(
                    Code::MissingContentLength,
                    "An aws-chunked body needs x-amz-decoded-content-length.",
                )
            })?
            .to_str()
            .ok()
            .map(str::trim)
            .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or_else(|| {
                S3Error::new(
                    Code::InvalidArgument,
                    "x-amz-decoded-content-length is not a length.",
                )
            })?;
        let mut expected = Vec::new();
        for value in headers.get_all("x-amz-trailer") {
            let value = value
                .to_str()
                .map_err(|_| S3Error::new(Code::InvalidArgument, "x-amz-trailer is not text."))?;
            for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                if expected.len() == MAX_TRAILERS {
                    return Err(S3Error::new(
                        Code::InvalidArgument,
                        format!("x-amz-trailer names more than {MAX_TRAILERS} trailers."),
                    ));
                }
                expected.push(name.to_ascii_lowercase());
            }
        }
        if matches!(framing, Framing::Signed(_)) && !expected.is_empty() {
            return Err(S3Error::new(
                Code::InvalidArgument,
                "x-amz-trailer needs x-amz-content-sha256 of STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER.",
            ));
        }
        Ok(Some(Self::new(framing, declared, expected)))
    }

    /// Takes the next piece of the encoded body. An error (a bad signature,
    /// broken framing, more data than declared) is final: every later call
    /// repeats it.
    pub fn push(&mut self, input: &[u8]) -> Result<(), S3Error> {
        if let Some(error) = &self.failed {
            return Err(error.clone());
        }
        self.buf.extend_from_slice(input);
        let result = self.run();
        if let Err(error) = &result {
            self.failed = Some(error.clone());
            self.buf = BytesMut::new();
        }
        result
    }

    /// The next piece of decoded data, in order; `None` until more input
    /// has been pushed.
    pub fn take(&mut self) -> Option<Bytes> {
        self.out.pop_front()
    }

    /// Ends the body: its trailers if it arrived whole, `IncompleteBody`
    /// if it stopped early or a trailer `x-amz-trailer` promised is
    /// missing. Take every piece ([`Decoder::take`]) first: pieces still
    /// held are dropped.
    pub fn finish(self) -> Result<Trailers, S3Error> {
        if let Some(error) = self.failed {
            return Err(error);
        }
        if !matches!(self.state, State::Done) {
            return Err(S3Error::new(
                Code::IncompleteBody,
                format!(
                    "The aws-chunked body ended before its final chunk, after {} of the {} bytes \
                     x-amz-decoded-content-length declares.",
                    self.announced, self.declared
                ),
            ));
        }
        if let Some(missing) = self
            .expected_trailers
            .iter()
            .find(|name| !self.trailers.iter().any(|(n, _)| n == *name))
        {
            return Err(S3Error::new(
                Code::IncompleteBody,
                format!("The trailer {missing} that x-amz-trailer declares did not arrive."),
            ));
        }
        Ok(Trailers {
            entries: self.trailers,
        })
    }

    fn run(&mut self) -> Result<(), S3Error> {
        loop {
            match self.state {
                State::Size => {
                    let Some(line) = self.line()? else {
                        return Ok(());
                    };
                    self.on_size_line(&line)?;
                }
                State::Data {
                    left,
                    signature: None,
                } => {
                    if self.buf.is_empty() {
                        return Ok(());
                    }
                    let n = usize::try_from(left).map_or(self.buf.len(), |l| l.min(self.buf.len()));
                    self.out.push_back(self.buf.split_to(n).freeze());
                    let left = left - n as u64;
                    self.state = if left == 0 {
                        State::DataEnd
                    } else {
                        State::Data {
                            left,
                            signature: None,
                        }
                    };
                }
                State::Data {
                    left,
                    signature: Some(signature),
                } => {
                    // At most MAX_SIGNED_CHUNK, checked with the size line.
                    let size = usize::try_from(left).map_err(|_| too_big_chunk(left))?;
                    if self.buf.len() < size {
                        return Ok(());
                    }
                    let data = self.buf.split_to(size);
                    self.check_chunk(&Sha256::digest(&data).into(), &signature)?;
                    self.out.push_back(data.freeze());
                    self.state = State::DataEnd;
                }
                State::DataEnd | State::FinalEnd => {
                    if self.buf.first().is_some_and(|&b| b != b'\r')
                        || self.buf.get(1).is_some_and(|&b| b != b'\n')
                    {
                        return Err(malformed("A chunk's data is not followed by CRLF."));
                    }
                    if self.buf.len() < 2 {
                        return Ok(());
                    }
                    self.buf.advance(2);
                    self.state = match self.state {
                        State::DataEnd => State::Size,
                        _ => State::Done,
                    };
                }
                State::Trailers => {
                    let Some(line) = self.line()? else {
                        return Ok(());
                    };
                    self.on_trailer_line(&line)?;
                }
                State::Done => {
                    if !self.buf.is_empty() {
                        return Err(malformed("Bytes follow the end of the aws-chunked body."));
                    }
                    return Ok(());
                }
            }
        }
    }

    /// The next CRLF-terminated line, without its CRLF; `None` until it
    /// has arrived whole.
    fn line(&mut self) -> Result<Option<BytesMut>, S3Error> {
        let Some(at) = self.buf[self.scanned..].iter().position(|&b| b == b'\n') else {
            self.scanned = self.buf.len();
            if self.buf.len() > MAX_LINE {
                return Err(malformed(format!(
                    "A line of the aws-chunked body is longer than {MAX_LINE} bytes."
                )));
            }
            return Ok(None);
        };
        let end = self.scanned + at;
        self.scanned = 0;
        if end > MAX_LINE {
            return Err(malformed(format!(
                "A line of the aws-chunked body is longer than {MAX_LINE} bytes."
            )));
        }
        if end == 0 || self.buf[end - 1] != b'\r' {
            return Err(malformed(
                "A line of the aws-chunked body does not end in CRLF.",
            ));
        }
        let mut line = self.buf.split_to(end + 1);
        line.truncate(end - 1);
        Ok(Some(line))
    }

    fn on_size_line(&mut self, line: &[u8]) -> Result<(), S3Error> {
        let text =
            std::str::from_utf8(line).map_err(|_| malformed("A chunk-size line is not text."))?;
        let (size, extensions) = text.split_once(';').unwrap_or((text, ""));
        let size = size.trim_matches([' ', '\t']);
        if size.is_empty()
            || size.len() > MAX_SIZE_DIGITS
            || !size.bytes().all(|b| b.is_ascii_hexdigit())
        {
            return Err(malformed(format!(
                "A chunk-size line does not start with a hexadecimal size: {:?}.",
                truncated(text)
            )));
        }
        let size =
            u64::from_str_radix(size, 16).map_err(|_| malformed("A chunk size overflows."))?;
        let signature = match self.signing {
            None => None,
            Some(_) => Some(chunk_signature(extensions)?),
        };
        if size == 0 {
            if let Some(signature) = signature {
                self.check_chunk(&Sha256::digest(b"").into(), &signature)?;
            }
            if self.announced != self.declared {
                return Err(S3Error::new(
                    Code::IncompleteBody,
                    format!(
                        "The aws-chunked body holds {} bytes; x-amz-decoded-content-length declares {}.",
                        self.announced, self.declared
                    ),
                ));
            }
            self.state = if self.trailer_section {
                State::Trailers
            } else {
                State::FinalEnd
            };
            return Ok(());
        }
        if size > self.declared - self.announced {
            return Err(S3Error::new(
                Code::EntityTooLarge,
                format!(
                    "The aws-chunked body holds more than the {} bytes x-amz-decoded-content-length declares.",
                    self.declared
                ),
            ));
        }
        if signature.is_some() && size > MAX_SIGNED_CHUNK {
            return Err(too_big_chunk(size));
        }
        self.announced += size;
        self.state = State::Data {
            left: size,
            signature,
        };
        Ok(())
    }

    fn check_chunk(&mut self, data_sha256: &[u8; 32], signature: &[u8; 32]) -> Result<(), S3Error> {
        let Some(signing) = &self.signing else {
            return Ok(());
        };
        let expected = signing.chunk(&self.previous, data_sha256);
        if !bool::from(expected.ct_eq(signature)) {
            return Err(S3Error::new(
                Code::SignatureDoesNotMatch,
                format!(
                    "The signature we calculated for the chunk ending at decoded byte {} does not match the one provided.",
                    self.announced
                ),
            ));
        }
        self.previous = *signature;
        Ok(())
    }

    fn on_trailer_line(&mut self, line: &[u8]) -> Result<(), S3Error> {
        self.trailer_bytes += line.len() + 2;
        if self.trailer_bytes > MAX_TRAILER_SECTION {
            return Err(malformed(format!(
                "The trailers are longer than {MAX_TRAILER_SECTION} bytes."
            )));
        }
        if line.is_empty() {
            // Trailers in a signed body count only with their signature;
            // with none sent there is nothing to sign.
            if self.signing.is_some() && !self.trailers.is_empty() && !self.trailer_signed {
                return Err(malformed("Signed trailers lack x-amz-trailer-signature."));
            }
            self.state = State::Done;
            return Ok(());
        }
        if self.trailer_signed {
            return Err(malformed("A trailer follows x-amz-trailer-signature."));
        }
        let text = std::str::from_utf8(line).map_err(|_| malformed("A trailer is not text."))?;
        let (name, value) = text
            .split_once(':')
            .ok_or_else(|| malformed(format!("The trailer {:?} has no ':'.", truncated(text))))?;
        let name = name.trim().to_ascii_lowercase();
        let value = value.trim();
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(malformed(format!(
                "The trailer name {:?} is not a header name.",
                truncated(&name)
            )));
        }
        if name == "x-amz-trailer-signature" {
            return self.check_trailers(value);
        }
        if !self.expected_trailers.contains(&name) {
            return Err(S3Error::new(
                Code::InvalidRequest,
                format!("The trailer {name} is not declared in x-amz-trailer."),
            ));
        }
        if self.trailers.iter().any(|(n, _)| *n == name) {
            return Err(malformed(format!("The trailer {name} comes twice.")));
        }
        self.trailers.push((name, value.to_owned()));
        Ok(())
    }

    /// Checks `x-amz-trailer-signature` over the trailers before it, in
    /// their canonical form: `name:value\n` each, names in lower case and
    /// sorted (the order SDKs sign and send them in).
    fn check_trailers(&mut self, signature: &str) -> Result<(), S3Error> {
        let Some(signing) = &self.signing else {
            return Err(malformed(
                "An unsigned body carries x-amz-trailer-signature.",
            ));
        };
        let mut provided = [0u8; 32];
        hex::decode_to_slice(signature, &mut provided)
            .map_err(|_| malformed("x-amz-trailer-signature is not 64 hexadecimal digits."))?;
        let mut sorted: Vec<&(String, String)> = self.trailers.iter().collect();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        let mut hasher = Sha256::new();
        for (name, value) in sorted {
            hasher.update(name.as_bytes());
            hasher.update(b":");
            hasher.update(value.as_bytes());
            hasher.update(b"\n");
        }
        let expected = signing.trailer(&self.previous, &hasher.finalize().into());
        if !bool::from(expected.ct_eq(&provided)) {
            return Err(S3Error::new(
                Code::SignatureDoesNotMatch,
                "The trailer signature we calculated does not match the one provided.",
            ));
        }
        self.previous = provided;
        self.trailer_signed = true;
        Ok(())
    }
}

/// The `chunk-signature` extension of a signed chunk's size line.
fn chunk_signature(extensions: &str) -> Result<[u8; 32], S3Error> {
    let value = extensions
        .split(';')
        .map(|e| e.trim_matches([' ', '\t']))
        .find_map(|e| e.strip_prefix("chunk-signature="))
        .ok_or_else(|| malformed("A signed chunk has no chunk-signature."))?;
    let mut signature = [0u8; 32];
    hex::decode_to_slice(value, &mut signature)
        .map_err(|_| malformed("A chunk-signature is not 64 hexadecimal digits."))?;
    Ok(signature)
}

/// A prefix of `text` to quote in an error: what the client sent can be
/// anything up to the line bound.
fn truncated(text: &str) -> &str {
    let mut end = text.len().min(64);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn too_big_chunk(size: u64) -> S3Error {
    S3Error::new(
        Code::InvalidRequest,
        format!(
            "A signed chunk of {size} bytes is larger than the {MAX_SIGNED_CHUNK} this endpoint takes."
        ),
    )
}

fn malformed(message: impl Into<String>) -> S3Error {
    S3Error::new(
        Code::InvalidRequest,
        format!("Malformed aws-chunked body: {}", message.into()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sigv4;
    use http::{HeaderName, HeaderValue, Method, Uri};

    const SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
    const AMZ_DATE: &str = "20130524T000000Z";
    const AT: u64 = 1_369_353_600;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).expect("test header name"),
                HeaderValue::from_str(value).expect("test header value"),
            );
        }
        map
    }

    fn signing(seed: [u8; 32]) -> ChunkSigning {
        ChunkSigning::from_parts(SECRET, AMZ_DATE, "us-east-1", seed)
    }

    /// Encodes `data` in chunks of the `sizes` given (cycled; zeros
    /// skipped, as a zero chunk ends a body), signed when `signing` is.
    fn encode(
        signing: Option<&ChunkSigning>,
        data: &[u8],
        sizes: &[usize],
        trailers: Option<&[(&str, &str)]>,
    ) -> Vec<u8> {
        let mut out = Vec::new();
        let mut previous = signing.map(ChunkSigning::seed).unwrap_or_default();
        let mut chunk = |out: &mut Vec<u8>, piece: &[u8]| {
            out.extend_from_slice(format!("{:x}", piece.len()).as_bytes());
            if let Some(signing) = signing {
                previous = signing.chunk(&previous, &Sha256::digest(piece).into());
                out.extend_from_slice(
                    format!(";chunk-signature={}", hex::encode(previous)).as_bytes(),
                );
            }
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(piece);
            if !piece.is_empty() {
                out.extend_from_slice(b"\r\n");
            }
        };
        let sizes: Vec<usize> = sizes.iter().copied().filter(|&s| s > 0).collect();
        let mut rest = data;
        let mut i = 0;
        while !rest.is_empty() {
            let size = sizes
                .get(i % sizes.len().max(1))
                .copied()
                .unwrap_or(rest.len());
            let (piece, tail) = rest.split_at(size.min(rest.len()));
            chunk(&mut out, piece);
            rest = tail;
            i += 1;
        }
        chunk(&mut out, b"");
        if let Some(trailers) = trailers {
            let mut canonical = String::new();
            for (name, value) in trailers {
                out.extend_from_slice(format!("{name}:{value}\r\n").as_bytes());
                canonical.push_str(&format!("{name}:{value}\n"));
            }
            if let Some(signing) = signing {
                let signature = signing.trailer(&previous, &Sha256::digest(canonical).into());
                out.extend_from_slice(
                    format!("x-amz-trailer-signature:{}\r\n", hex::encode(signature)).as_bytes(),
                );
            }
        }
        out.extend_from_slice(b"\r\n");
        out
    }

    /// Pushes `body` cut at `cuts`, takes every piece, and finishes.
    fn decode(
        mut decoder: Decoder,
        body: &[u8],
        cuts: &[usize],
    ) -> Result<(Vec<u8>, Trailers), S3Error> {
        let mut data = Vec::new();
        let mut start = 0;
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
        cuts.sort_unstable();
        cuts.push(body.len());
        for cut in cuts {
            decoder.push(&body[start..cut])?;
            while let Some(piece) = decoder.take() {
                data.extend_from_slice(&piece);
            }
            start = cut;
        }
        let trailers = decoder.finish()?;
        Ok((data, trailers))
    }

    fn code<T: std::fmt::Debug>(result: Result<T, S3Error>) -> Code {
        result.expect_err("an error").code
    }

    /// The request of AWS's chunked-upload example: 64 KiB + 1 KiB of 'a'.
    fn aws_example(trailer: bool) -> (Uri, HeaderMap) {
        let (payload, signed, seed) = if trailer {
            (
                sigv4::STREAMING_SIGNED_TRAILER,
                "content-encoding;host;x-amz-content-sha256;x-amz-date;\
                 x-amz-decoded-content-length;x-amz-storage-class;x-amz-trailer",
                "106e2a8a18243abcf37539882f36619c00e2dfc72633413f02d3b74544bfeb8e",
            )
        } else {
            (
                sigv4::STREAMING_SIGNED,
                "content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;\
                 x-amz-decoded-content-length;x-amz-storage-class",
                "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9",
            )
        };
        let auth = format!(
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,\
             SignedHeaders={signed},Signature={seed}"
        );
        let mut pairs = vec![
            ("host", "s3.amazonaws.com"),
            ("x-amz-date", AMZ_DATE),
            ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
            ("authorization", auth.as_str()),
            ("x-amz-content-sha256", payload),
            ("content-encoding", "aws-chunked"),
            ("x-amz-decoded-content-length", "66560"),
        ];
        if trailer {
            pairs.push(("x-amz-trailer", "x-amz-checksum-crc32c"));
            pairs.push(("content-length", "66946"));
        } else {
            pairs.push(("content-length", "66824"));
        }
        let uri = Uri::from_static("/examplebucket/chunkObject.txt");
        (uri, headers(&pairs))
    }

    fn verified(uri: &Uri, headers: &HeaderMap) -> sigv4::Verified {
        let claim = sigv4::parse(uri, headers)
            .expect("parses")
            .expect("a credential");
        sigv4::verify(&claim, SECRET, &Method::PUT, uri, headers, AT).expect("the seed verifies")
    }

    fn published_body(signatures: [&str; 3], trailer: Option<&str>) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(format!("10000;chunk-signature={}\r\n", signatures[0]).as_bytes());
        body.extend_from_slice(&[b'a'; 65536]);
        body.extend_from_slice(format!("\r\n400;chunk-signature={}\r\n", signatures[1]).as_bytes());
        body.extend_from_slice(&[b'a'; 1024]);
        body.extend_from_slice(format!("\r\n0;chunk-signature={}\r\n", signatures[2]).as_bytes());
        if let Some(signature) = trailer {
            body.extend_from_slice(b"x-amz-checksum-crc32c:sOO8/Q==\r\n");
            body.extend_from_slice(format!("x-amz-trailer-signature:{signature}\r\n").as_bytes());
        }
        body.extend_from_slice(b"\r\n");
        body
    }

    #[test]
    fn the_published_chunked_example_verifies_from_its_seed_and_decodes() {
        let (uri, headers) = aws_example(false);
        let verified = verified(&uri, &headers);
        assert_eq!(verified.payload, Payload::StreamingSigned);
        let body = published_body(
            [
                "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648",
                "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497",
                "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9",
            ],
            None,
        );
        assert_eq!(body.len(), 66824);
        for cuts in [vec![], vec![1, 90, 65_000, 65_700, 66_700]] {
            let decoder = Decoder::for_request(&verified, &headers)
                .expect("framing")
                .expect("aws-chunked");
            let (data, trailers) = decode(decoder, &body, &cuts).expect("decodes");
            assert_eq!(data, vec![b'a'; 66560]);
            assert!(trailers.is_empty());
        }
        // Our own encoder produces the same body from the same seed.
        assert_eq!(
            encode(Some(&verified.chunks), &[b'a'; 66560], &[65536], None),
            body
        );
    }

    #[test]
    fn the_published_trailer_example_verifies_its_chunks_and_its_trailer() {
        let (uri, headers) = aws_example(true);
        let verified = verified(&uri, &headers);
        assert_eq!(verified.payload, Payload::StreamingSignedTrailer);
        let body = published_body(
            [
                "b474d8862b1487a5145d686f57f013e54db672cee1c953b3010fb58501ef5aa2",
                "1c1344b170168f8e65b41376b44b20fe354e373826ccbbe2c1d40a8cae51e5c7",
                "2ca2aba2005185cf7159c6277faf83795951dd77a3a99e6e65d5c9f85863f992",
            ],
            Some("d81f82fc3505edab99d459891051a732e8730629a2e4a59689829ca17fe2e435"),
        );
        assert_eq!(body.len(), 66946);
        let decoder = Decoder::for_request(&verified, &headers)
            .expect("framing")
            .expect("aws-chunked");
        let (data, trailers) = decode(decoder, &body, &[66_830, 66_900]).expect("decodes");
        assert_eq!(data.len(), 66560);
        assert_eq!(trailers.get("x-amz-checksum-crc32c"), Some("sOO8/Q=="));
        assert_eq!(trailers.iter().count(), 1);

        // A changed checksum breaks the trailer signature.
        let tampered = String::from_utf8(body)
            .expect("ascii")
            .replace("sOO8/Q==", "sOO8/Q=A");
        let decoder = Decoder::for_request(&verified, &headers)
            .expect("framing")
            .expect("aws-chunked");
        assert_eq!(
            code(decode(decoder, tampered.as_bytes(), &[])),
            Code::SignatureDoesNotMatch
        );
    }

    #[test]
    fn an_unsigned_trailer_body_as_boto3_sends_it_decodes() {
        let body =
            b"5\r\nhello\r\n6\r\n world\r\n0\r\nx-amz-checksum-crc64nvme:jSnVw/bqjr4=\r\n\r\n";
        let decoder = Decoder::new(
            Framing::UnsignedWithTrailer,
            11,
            vec!["x-amz-checksum-crc64nvme".to_owned()],
        );
        let (data, trailers) = decode(decoder, body, &[3, 4, 20]).expect("decodes");
        assert_eq!(data, b"hello world");
        assert_eq!(
            trailers.get("x-amz-checksum-crc64nvme"),
            Some("jSnVw/bqjr4=")
        );
    }

    /// botocore 1.43's PutObject with a CRC-32, as it sends it (see the
    /// botocore vectors in `sigv4`): unsigned chunks and a trailer, and
    /// once with its own `Content-Encoding` before `aws-chunked`.
    #[test]
    fn a_botocore_upload_with_a_trailing_checksum_verifies_and_decodes() {
        for (encoding, signature) in [
            (
                "aws-chunked",
                "cbd1892e851f15879b3635a8062661c69c9116b062b3573bf5dd857250a63952",
            ),
            (
                "gzip,aws-chunked",
                "fcd809740355108377025108c865c3ceb7227b7ce50b475105c6ce1d810ab77c",
            ),
        ] {
            let auth = format!(
                "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, \
                 SignedHeaders=content-encoding;host;x-amz-content-sha256;x-amz-date;\
                 x-amz-decoded-content-length;x-amz-sdk-checksum-algorithm;x-amz-trailer, \
                 Signature={signature}"
            );
            let headers = headers(&[
                ("host", "s3.example.test:9000"),
                ("x-amz-sdk-checksum-algorithm", "CRC32"),
                ("expect", "100-continue"),
                ("transfer-encoding", "chunked"),
                ("content-encoding", encoding),
                ("x-amz-trailer", "x-amz-checksum-crc32"),
                ("x-amz-decoded-content-length", "11"),
                ("x-amz-date", AMZ_DATE),
                ("x-amz-content-sha256", sigv4::STREAMING_UNSIGNED_TRAILER),
                ("authorization", &auth),
            ]);
            let uri = Uri::from_static(if encoding == "aws-chunked" {
                "/bucket/k"
            } else {
                "/bucket/gz"
            });
            let verified = verified(&uri, &headers);
            let decoder = Decoder::for_request(&verified, &headers)
                .expect("framing")
                .expect("aws-chunked");
            let body = b"b\r\nhello world\r\n0\r\nx-amz-checksum-crc32:DUoRhQ==\r\n\r\n";
            let (data, trailers) = decode(decoder, body, &[5, 30]).expect("decodes");
            assert_eq!(data, b"hello world");
            assert_eq!(trailers.get("x-amz-checksum-crc32"), Some("DUoRhQ=="));
            let expected = (encoding != "aws-chunked").then(|| "gzip".to_owned());
            assert_eq!(remaining_content_encoding(&headers), expected);
        }
    }

    #[test]
    fn unsigned_chunk_extensions_are_tolerated_and_data_flows_before_the_chunk_ends() {
        let mut decoder = Decoder::new(Framing::UnsignedWithTrailer, 10, vec![]);
        decoder.push(b"A;foo=bar;baz\r\nhel").expect("pushes");
        assert_eq!(decoder.take().as_deref(), Some(&b"hel"[..]));
        assert_eq!(decoder.take(), None);
        decoder.push(b"lo_worl\r\n0\r\n\r\n").expect("pushes");
        assert_eq!(decoder.take().as_deref(), Some(&b"lo_worl"[..]));
        assert!(decoder.finish().expect("whole").is_empty());
    }

    #[test]
    fn a_signed_chunk_is_held_until_its_signature_is_checked() {
        let signing = signing([3; 32]);
        let body = encode(Some(&signing), b"0123456789", &[10], None);
        let mut decoder = Decoder::new(Framing::Signed(signing), 10, vec![]);
        let header_end = body.iter().position(|&b| b == b'\n').expect("a line") + 1;
        decoder.push(&body[..header_end + 9]).expect("pushes");
        assert_eq!(decoder.take(), None);
        decoder.push(&body[header_end + 9..]).expect("pushes");
        assert_eq!(decoder.take().as_deref(), Some(&b"0123456789"[..]));
        decoder.finish().expect("whole");
    }

    #[test]
    fn a_bad_signature_in_the_middle_stops_the_body_before_that_chunk_is_handed_out() {
        let signing = signing([5; 32]);
        let data: Vec<u8> = (0..300u16).map(|i| (i % 251) as u8).collect();
        let mut body = encode(Some(&signing), &data, &[100], None);
        // A byte of the second chunk's data.
        let second = body.windows(2).filter(|w| w == b"\r\n").count();
        assert!(second > 4);
        let at = body.len() / 2;
        body[at] ^= 1;
        let mut decoder = Decoder::new(Framing::Signed(signing), 300, vec![]);
        let error = decoder.push(&body).expect_err("tampered");
        assert_eq!(error.code, Code::SignatureDoesNotMatch);
        let mut handed_out = Vec::new();
        while let Some(piece) = decoder.take() {
            handed_out.extend_from_slice(&piece);
        }
        assert_eq!(handed_out, data[..100]);
        // The error sticks.
        assert_eq!(code(decoder.push(b"")), Code::SignatureDoesNotMatch);
        assert_eq!(code(decoder.finish()), Code::SignatureDoesNotMatch);
    }

    #[test]
    fn a_chunk_signed_with_another_seed_does_not_match() {
        let body = encode(Some(&signing([1; 32])), b"abc", &[3], None);
        let decoder = Decoder::new(Framing::Signed(signing([2; 32])), 3, vec![]);
        assert_eq!(
            code(decode(decoder, &body, &[])),
            Code::SignatureDoesNotMatch
        );
    }

    #[test]
    fn chunks_reordered_or_dropped_break_the_chain() {
        let signing = signing([9; 32]);
        let body = encode(Some(&signing), b"aaabbb", &[3], None);
        let text = String::from_utf8(body).expect("ascii");
        let lines: Vec<&str> = text.split("\r\n").collect();
        // Swap the two data chunks, each with its own signature.
        let swapped = format!(
            "{}\r\n{}\r\n{}\r\n{}\r\n{}\r\n\r\n",
            lines[2], lines[3], lines[0], lines[1], lines[4]
        );
        let decoder = Decoder::new(Framing::Signed(signing.clone()), 6, vec![]);
        assert_eq!(
            code(decode(decoder, swapped.as_bytes(), &[])),
            Code::SignatureDoesNotMatch
        );
        let dropped = format!("{}\r\n{}\r\n{}\r\n\r\n", lines[0], lines[1], lines[4]);
        let decoder = Decoder::new(Framing::Signed(signing), 3, vec![]);
        assert_eq!(
            code(decode(decoder, dropped.as_bytes(), &[])),
            Code::SignatureDoesNotMatch
        );
    }

    #[test]
    fn every_truncation_of_a_body_is_incomplete() {
        let signing = signing([4; 32]);
        let cases = [
            (
                Framing::SignedWithTrailer(signing.clone()),
                encode(
                    Some(&signing),
                    b"hello world",
                    &[4],
                    Some(&[("x-amz-checksum-crc32", "DUoRhQ==")]),
                ),
            ),
            (
                Framing::UnsignedWithTrailer,
                encode(
                    None,
                    b"hello world",
                    &[4],
                    Some(&[("x-amz-checksum-crc32", "DUoRhQ==")]),
                ),
            ),
        ];
        for (framing, body) in cases {
            for end in 0..body.len() {
                let decoder =
                    Decoder::new(framing.clone(), 11, vec!["x-amz-checksum-crc32".to_owned()]);
                let error = decode(decoder, &body[..end], &[]).expect_err("truncated");
                assert_eq!(error.code, Code::IncompleteBody, "cut at {end}: {error}");
            }
            let decoder = Decoder::new(framing, 11, vec!["x-amz-checksum-crc32".to_owned()]);
            decode(decoder, &body, &[]).expect("whole");
        }
    }

    #[test]
    fn a_declared_trailer_that_never_comes_is_incomplete() {
        let decoder = Decoder::new(
            Framing::UnsignedWithTrailer,
            2,
            vec!["x-amz-checksum-crc32".to_owned()],
        );
        let error = decode(decoder, b"2\r\nhi\r\n0\r\n\r\n", &[]).expect_err("missing trailer");
        assert_eq!(error.code, Code::IncompleteBody);
        assert!(error.message.contains("x-amz-checksum-crc32"));
    }

    #[test]
    fn an_undeclared_or_repeated_trailer_is_refused() {
        let decoder = Decoder::new(Framing::UnsignedWithTrailer, 0, vec![]);
        assert_eq!(
            code(decode(
                decoder,
                b"0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n",
                &[]
            )),
            Code::InvalidRequest
        );
        let decoder = Decoder::new(
            Framing::UnsignedWithTrailer,
            0,
            vec!["x-amz-checksum-crc32".to_owned()],
        );
        let body = b"0\r\nx-amz-checksum-crc32:AAAAAA==\r\nX-Amz-Checksum-Crc32:AAAAAA==\r\n\r\n";
        assert_eq!(code(decode(decoder, body, &[])), Code::InvalidRequest);
    }

    #[test]
    fn signed_trailers_without_their_signature_are_refused() {
        let signing = signing([6; 32]);
        let body = encode(
            None,
            b"",
            &[],
            Some(&[("x-amz-checksum-crc32", "AAAAAA==")]),
        );
        // Sign the zero chunk, but send the trailer unsigned.
        let zero = signing.chunk(&signing.seed(), &Sha256::digest(b"").into());
        let body = String::from_utf8(body).expect("ascii").replacen(
            "0\r\n",
            &format!("0;chunk-signature={}\r\n", hex::encode(zero)),
            1,
        );
        let decoder = Decoder::new(
            Framing::SignedWithTrailer(signing),
            0,
            vec!["x-amz-checksum-crc32".to_owned()],
        );
        assert_eq!(
            code(decode(decoder, body.as_bytes(), &[])),
            Code::InvalidRequest
        );
    }

    #[test]
    fn more_data_than_declared_is_refused_as_soon_as_a_chunk_announces_it() {
        let mut decoder = Decoder::new(Framing::UnsignedWithTrailer, 4, vec![]);
        decoder.push(b"3\r\nabc\r\n").expect("within");
        let error = decoder.push(b"2\r\n").expect_err("beyond");
        assert_eq!(error.code, Code::EntityTooLarge);
        let decoder = Decoder::new(Framing::UnsignedWithTrailer, 4, vec![]);
        assert_eq!(
            code(decode(decoder, b"3\r\nabc\r\n0\r\n\r\n", &[])),
            Code::IncompleteBody
        );
    }

    #[test]
    fn oversize_lines_sizes_and_trailer_sections_are_refused() {
        let unsigned = || {
            Decoder::new(
                Framing::UnsignedWithTrailer,
                u64::MAX,
                vec!["x-a".to_owned()],
            )
        };
        let long_line = vec![b'1'; MAX_LINE + 3];
        assert_eq!(code(unsigned().push(&long_line)), Code::InvalidRequest);
        // Bytes arriving one at a time hit the same bound.
        let mut decoder = unsigned();
        let result = long_line.iter().try_for_each(|b| decoder.push(&[*b]));
        assert_eq!(code(result), Code::InvalidRequest);
        // A size of 17 hex digits cannot be a u64.
        assert_eq!(
            code(unsigned().push(b"10000000000000000\r\n")),
            Code::InvalidRequest
        );
        assert_eq!(code(unsigned().push(b"+10\r\n")), Code::InvalidRequest);
        assert_eq!(code(unsigned().push(b"\r\n")), Code::InvalidRequest);
        // A signed chunk beyond the bound is refused before it is held.
        let signed = format!("1000001;chunk-signature={}\r\n", "0".repeat(64));
        let mut decoder = Decoder::new(Framing::Signed(signing([0; 32])), u64::MAX, vec![]);
        assert_eq!(code(decoder.push(signed.as_bytes())), Code::InvalidRequest);
        // Trailer lines together are bounded too.
        let mut decoder = unsigned();
        decoder
            .push(b"0\r\n")
            .expect_err("declared length not reached");
        let mut decoder = Decoder::new(Framing::UnsignedWithTrailer, 0, vec!["x-a".to_owned()]);
        decoder.push(b"0\r\n").expect("final chunk");
        let line = format!("x-b:{}\r\n", "v".repeat(4000));
        let result = (0..5).try_for_each(|_| decoder.push(line.as_bytes()));
        assert_eq!(code(result), Code::InvalidRequest);
    }

    #[test]
    fn broken_framing_is_refused() {
        let signing = signing([8; 32]);
        let zeros = "0".repeat(64);
        let cases: Vec<(Framing, Vec<u8>)> = vec![
            (
                Framing::UnsignedWithTrailer,
                b"2\r\nhiX\r\n0\r\n\r\n".to_vec(),
            ),
            (Framing::UnsignedWithTrailer, b"2\nhi\r\n0\r\n\r\n".to_vec()),
            (
                Framing::UnsignedWithTrailer,
                b"2\r\nhi\r\n0\r\n\r\nmore".to_vec(),
            ),
            (
                Framing::UnsignedWithTrailer,
                b"2\r\nhi\r\n0\r\nno-colon\r\n\r\n".to_vec(),
            ),
            (
                Framing::UnsignedWithTrailer,
                b"2\r\nhi\r\n0\r\nx-amz-trailer-signature:00\r\n\r\n".to_vec(),
            ),
            (Framing::Signed(signing.clone()), b"2\r\nhi\r\n".to_vec()),
            (
                Framing::Signed(signing.clone()),
                b"2;chunk-signature=abc\r\nhi\r\n".to_vec(),
            ),
            (
                Framing::Signed(signing.clone()),
                format!("0;chunk-signature={zeros}\r\n\r\n").into_bytes(),
            ),
        ];
        for (framing, body) in cases {
            let decoder = Decoder::new(framing, 2, vec![]);
            let error = decode(decoder, &body, &[]).expect_err("broken");
            assert!(
                matches!(
                    error.code,
                    Code::InvalidRequest | Code::SignatureDoesNotMatch
                ),
                "{:?}: {error}",
                String::from_utf8_lossy(&body)
            );
        }
    }

    #[test]
    fn the_request_headers_choose_the_framing() {
        let (uri, headers) = aws_example(false);
        let streaming = verified(&uri, &headers);
        let mut without_length = headers.clone();
        without_length.remove("x-amz-decoded-content-length");
        assert_eq!(
            code(Decoder::for_request(&streaming, &without_length)),
            Code::MissingContentLength
        );
        let mut bad_length = headers.clone();
        bad_length.insert(
            "x-amz-decoded-content-length",
            HeaderValue::from_static("-1"),
        );
        assert_eq!(
            code(Decoder::for_request(&streaming, &bad_length)),
            Code::InvalidArgument
        );
        let mut trailer = headers.clone();
        trailer.insert(
            "x-amz-trailer",
            HeaderValue::from_static("x-amz-checksum-crc32"),
        );
        assert_eq!(
            code(Decoder::for_request(&streaming, &trailer)),
            Code::InvalidArgument
        );

        let mut plain = streaming.clone();
        plain.payload = Payload::Unsigned;
        assert_eq!(
            code(Decoder::for_request(&plain, &headers)),
            Code::InvalidArgument
        );
        let mut no_encoding = headers;
        no_encoding.remove("content-encoding");
        assert!(
            Decoder::for_request(&plain, &no_encoding)
                .expect("plain")
                .is_none()
        );
    }

    #[test]
    fn only_aws_chunked_is_stripped_from_the_content_encoding() {
        let encoding =
            |value: &str| remaining_content_encoding(&headers(&[("content-encoding", value)]));
        assert_eq!(encoding("aws-chunked"), None);
        assert_eq!(encoding("aws-chunked,gzip"), Some("gzip".to_owned()));
        assert_eq!(encoding("gzip, AWS-Chunked"), Some("gzip".to_owned()));
        assert_eq!(encoding("gzip,br"), Some("gzip,br".to_owned()));
        assert_eq!(remaining_content_encoding(&HeaderMap::new()), None);
    }

    #[test]
    fn any_split_of_a_valid_body_decodes_to_the_same_data() {
        bolero::check!()
            .with_type::<(u8, Vec<u8>, Vec<u16>, Vec<u32>, bool)>()
            .for_each(|(mode, data, sizes, cuts, with_trailer)| {
                let sizes: Vec<usize> = sizes.iter().map(|&s| usize::from(s % 512)).collect();
                let trailer = [("x-amz-checksum-crc32", "AAAAAA==")];
                let trailers = with_trailer.then_some(&trailer[..]);
                let expected = if *with_trailer {
                    vec!["x-amz-checksum-crc32".to_owned()]
                } else {
                    vec![]
                };
                let signing = signing([*mode; 32]);
                let (framing, body) = match mode % 3 {
                    0 => (
                        Framing::Signed(signing.clone()),
                        encode(Some(&signing), data, &sizes, None),
                    ),
                    1 => (
                        Framing::SignedWithTrailer(signing.clone()),
                        encode(Some(&signing), data, &sizes, trailers),
                    ),
                    _ => (
                        Framing::UnsignedWithTrailer,
                        encode(None, data, &sizes, trailers),
                    ),
                };
                let expected = if mode % 3 == 0 { vec![] } else { expected };
                let cuts: Vec<usize> = cuts.iter().map(|&c| c as usize).collect();
                let decoder = Decoder::new(framing, data.len() as u64, expected.clone());
                let (decoded, got) = decode(decoder, &body, &cuts).expect("a valid body");
                assert_eq!(&decoded, data);
                assert_eq!(got.iter().count(), expected.len());
            });
    }

    #[test]
    fn arbitrary_input_never_panics_the_decoder() {
        bolero::check!()
            .with_type::<(u8, u16, Vec<u8>, Vec<u16>)>()
            .for_each(|(mode, declared, body, cuts)| {
                let framing = match mode % 3 {
                    0 => Framing::Signed(signing([0; 32])),
                    1 => Framing::SignedWithTrailer(signing([0; 32])),
                    _ => Framing::UnsignedWithTrailer,
                };
                let cuts: Vec<usize> = cuts.iter().map(|&c| usize::from(c)).collect();
                let decoder = Decoder::new(
                    framing,
                    u64::from(*declared),
                    vec!["x-amz-checksum-crc32".to_owned()],
                );
                let _ = decode(decoder, body, &cuts);
            });
    }
}
