//! The `Range` header of the read routes (objects and files): one byte
//! range, as `bytes=a-b`, `bytes=a-` or `bytes=-n`, answered 206 with
//! `Content-Range`, or 416 `range_not_satisfiable` (with `Content-Range:
//! bytes */<size>` when the size is known).

use std::ops::Range;

use axum::http::header::CONTENT_RANGE;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::ApiError;

/// One byte range, as the `Range` header says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ByteRange {
    /// `bytes=a-b` (inclusive) or `bytes=a-` (to the end).
    From(u64, Option<u64>),
    /// `bytes=-n`: the last `n` bytes.
    Suffix(u64),
}

/// Parses a `Range` header: one range of bytes. Several ranges would need
/// a multipart response, which nothing here needs; they are refused
/// rather than answered with the whole object, which may be large.
pub(crate) fn parse_range(value: &str) -> Result<ByteRange, String> {
    let malformed = || format!("Range {value:?} is not bytes=a-b, bytes=a- or bytes=-n");
    let (unit, spec) = value.split_once('=').ok_or_else(malformed)?;
    if !unit.trim().eq_ignore_ascii_case("bytes") {
        return Err(format!("Range unit {unit:?} is not `bytes`"));
    }
    if spec.contains(',') {
        return Err(format!("Range {value:?} asks for several ranges; send one"));
    }
    let number = |text: &str| -> Result<u64, String> {
        // `u64::from_str` takes a leading `+`, which HTTP does not.
        if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(malformed());
        }
        text.parse().map_err(|_| malformed())
    };
    let (first, last) = spec.trim().split_once('-').ok_or_else(malformed)?;
    match (first, last) {
        ("", suffix) => Ok(ByteRange::Suffix(number(suffix)?)),
        (first, "") => Ok(ByteRange::From(number(first)?, None)),
        (first, last) => {
            let (first, last) = (number(first)?, number(last)?);
            if last < first {
                return Err(format!("Range {value:?} ends before it starts"));
            }
            Ok(ByteRange::From(first, Some(last)))
        }
    }
}

impl ByteRange {
    /// The bytes this range selects of an object of `size` bytes, or
    /// `None` when it selects none (RFC 9110's unsatisfiable range).
    pub(crate) fn resolve(self, size: u64) -> Option<Range<u64>> {
        match self {
            ByteRange::From(first, _) if first >= size => None,
            ByteRange::From(first, last) => {
                let end = last.map_or(size, |last| last.saturating_add(1).min(size));
                Some(first..end)
            }
            ByteRange::Suffix(0) => None,
            ByteRange::Suffix(_) if size == 0 => None,
            ByteRange::Suffix(n) => Some(size - n.min(size)..size),
        }
    }
}

/// 416, with the object's size when it is known so the client can ask
/// again.
pub(in crate::serve::http) fn unsatisfiable(message: String, size: Option<u64>) -> Response {
    let mut response = ApiError::new(
        StatusCode::RANGE_NOT_SATISFIABLE,
        "range_not_satisfiable",
        message,
    )
    .into_response();
    if let Some(size) = size {
        response.headers_mut().insert(
            CONTENT_RANGE,
            HeaderValue::from_str(&format!("bytes */{size}")).expect("digits are a header value"),
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_resolves_against_the_size_or_selects_nothing() {
        assert_eq!(ByteRange::From(0, Some(0)).resolve(1), Some(0..1));
        assert_eq!(ByteRange::From(0, None).resolve(0), None);
        assert_eq!(ByteRange::Suffix(5).resolve(0), None);
        assert_eq!(ByteRange::From(3, Some(u64::MAX)).resolve(5), Some(3..5));
        assert_eq!(parse_range("bytes=0-0"), Ok(ByteRange::From(0, Some(0))));
        assert_eq!(parse_range("BYTES=-7"), Ok(ByteRange::Suffix(7)));
        assert!(parse_range("bytes=-").is_err());
        assert!(parse_range("bytes=1").is_err());
    }
}

/// Fuzz targets of the `Range` parser (see the README's "Fuzzing").
#[cfg(test)]
mod fuzz {
    use super::*;

    /// Checks what [`parse_range`] made of `value`: a range never ends
    /// before it starts, and resolves to a non-empty part of the object
    /// or to nothing.
    fn check(value: &str, size: u64) {
        let Ok(range) = parse_range(value) else {
            return;
        };
        if let ByteRange::From(first, Some(last)) = range {
            assert!(first <= last, "{value:?} parsed to {range:?}");
        }
        let Some(bytes) = range.resolve(size) else {
            return;
        };
        assert!(
            bytes.start < bytes.end && bytes.end <= size,
            "{range:?} of {size}"
        );
        match range {
            ByteRange::From(first, _) => assert_eq!(bytes.start, first),
            ByteRange::Suffix(n) => assert_eq!(bytes.end - bytes.start, n.min(size)),
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_range_parser() {
        bolero::check!()
            .with_type::<(bool, Vec<u8>, u64)>()
            .for_each(|(framed, bytes, size)| {
                // Framed: `bytes=` then characters a range is made of, so
                // inputs reach the numbers instead of failing on the unit.
                const SPEC: &[u8] = b"0123456789-, =+\t9";
                let value = if *framed {
                    let spec: String = bytes
                        .iter()
                        .map(|&b| char::from(SPEC[usize::from(b) % SPEC.len()]))
                        .collect();
                    format!("bytes={spec}")
                } else {
                    String::from_utf8_lossy(bytes).into_owned()
                };
                check(&value, *size);
            });
    }

    #[test]
    fn generated_range_headers_parse_to_the_range_they_name() {
        bolero::check!()
            .with_type::<(u64, u64, u8, u64)>()
            .cloned()
            .for_each(|(first, last, form, size)| {
                let (value, expected) = match form % 3 {
                    0 => (
                        format!("bytes={first}-{last}"),
                        ByteRange::From(first, Some(last)),
                    ),
                    1 => (format!("Bytes={first}-"), ByteRange::From(first, None)),
                    _ => (format!("bytes=-{last}"), ByteRange::Suffix(last)),
                };
                match parse_range(&value) {
                    Ok(range) => assert_eq!(range, expected),
                    Err(_) => assert!(form % 3 == 0 && last < first, "{value:?} refused"),
                }
                check(&value, size);
            });
    }
}
