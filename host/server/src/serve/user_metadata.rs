//! User metadata as both front ends take it from a request: the
//! `x-amz-meta-*` headers, names lower case (as HTTP delivers them). The
//! rules live here once; the store checks names, values and sizes with
//! its own.

use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use custodian_object::Metadata;
use custodian_object::stamps::RESERVED_PREFIX;

/// The header prefix of a user metadata entry.
pub(crate) const HEADER_PREFIX: &str = "x-amz-meta-";

/// Where an object's `Content-Type` is kept: S3 clients set it on a
/// write and expect it back on a read, and the stores have no field for
/// it. Its name is reserved (see [`from_headers`]), so only the S3
/// endpoint writes it, from the request's `Content-Type`.
pub(crate) const CONTENT_TYPE_ENTRY: &str = "custodian-content-type";

/// Keeps the request's `Content-Type`, if it sent one, in `metadata`.
pub(crate) fn keep_content_type(
    headers: &HeaderMap,
    metadata: &mut Metadata,
) -> Result<(), String> {
    if let Some(value) = headers.get(CONTENT_TYPE) {
        let value = value
            .to_str()
            .map_err(|_| "the content-type header is not visible ASCII".to_owned())?;
        metadata.insert(CONTENT_TYPE_ENTRY.to_owned(), value.trim().to_owned());
    }
    Ok(())
}

/// The request's user metadata, or why it is refused: a value that is
/// not visible ASCII, a repeated header (it would have to be joined or
/// dropped, and either stores something the caller did not write once),
/// or a name the host reserves for its own publish stamps
/// (`custodian-*`: a caller could otherwise forge which generation,
/// epoch and flush wrote an object).
pub(crate) fn from_headers(headers: &HeaderMap) -> Result<Metadata, String> {
    let mut metadata = Metadata::new();
    for (name, value) in headers {
        let Some(key) = name.as_str().strip_prefix(HEADER_PREFIX) else {
            continue;
        };
        if key.starts_with(RESERVED_PREFIX) {
            return Err(format!(
                "the {name} header names reserved metadata: {RESERVED_PREFIX}* entries are \
                 the host's own publish stamps"
            ));
        }
        let value = value
            .to_str()
            .map_err(|_| format!("the {name} header is not visible ASCII"))?;
        if metadata.insert(key.to_owned(), value.to_owned()).is_some() {
            return Err(format!("the {name} header is repeated"));
        }
    }
    Ok(metadata)
}

/// Adds to `headers` what a read of an object with `metadata` answers
/// about it: `Content-Type` (the one kept at its write, else `default`)
/// and every other entry as `x-amz-meta-<name>`.
///
/// # Errors
/// An entry that is not a header name or value (the store holds only
/// what a request could carry, so this is a fault).
pub(crate) fn answer(
    metadata: &Metadata,
    default: &'static str,
    headers: &mut HeaderMap,
) -> Result<(), String> {
    let kept = metadata
        .get(CONTENT_TYPE_ENTRY)
        .map_or(default, String::as_str);
    let header = |text: &str| {
        HeaderValue::from_str(text)
            .map_err(|_| format!("{text:?} cannot be sent as a header value"))
    };
    headers.insert(CONTENT_TYPE, header(kept)?);
    for (name, text) in metadata
        .iter()
        .filter(|(name, _)| name.as_str() != CONTENT_TYPE_ENTRY)
    {
        let header_name = HeaderName::try_from(format!("{HEADER_PREFIX}{name}"))
            .map_err(|_| format!("metadata {name:?} is not a header name"))?;
        headers.insert(header_name, header(text)?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use axum::http::{HeaderMap, HeaderValue};

    use super::{answer, from_headers, keep_content_type};

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, HeaderValue::from_static(value));
        }
        headers
    }

    #[test]
    fn meta_headers_become_metadata_and_other_headers_are_ignored() {
        let got = from_headers(&headers(&[
            ("x-amz-meta-purpose", "test run"),
            ("content-type", "text/plain"),
        ]))
        .unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got["purpose"], "test run");
    }

    #[test]
    fn reserved_repeated_and_non_ascii_metadata_is_refused() {
        for name in ["x-amz-meta-custodian-gen", "x-amz-meta-custodian-anything"] {
            let mut forged = HeaderMap::new();
            forged.insert(name, HeaderValue::from_static("7"));
            let why = from_headers(&forged).unwrap_err();
            assert!(why.contains("reserved"), "{why}");
        }
        let repeated = headers(&[("x-amz-meta-a", "1"), ("x-amz-meta-a", "2")]);
        assert!(from_headers(&repeated).unwrap_err().contains("repeated"));
        let mut binary = HeaderMap::new();
        binary.insert("x-amz-meta-a", HeaderValue::from_bytes(b"\xff").unwrap());
        assert!(from_headers(&binary).unwrap_err().contains("ASCII"));
        // A name merely containing the word is the caller's.
        let own = headers(&[("x-amz-meta-my-custodian-note", "fine")]);
        assert_eq!(from_headers(&own).unwrap()["my-custodian-note"], "fine");
    }

    #[test]
    fn a_kept_content_type_is_read_back_as_the_content_type_and_not_as_user_metadata() {
        let request = headers(&[("content-type", "text/csv"), ("x-amz-meta-a", "1")]);
        let mut metadata = from_headers(&request).unwrap();
        keep_content_type(&request, &mut metadata).unwrap();
        let mut read = HeaderMap::new();
        answer(&metadata, "binary/octet-stream", &mut read).unwrap();
        assert_eq!(read.len(), 2);
        assert_eq!(read["content-type"], "text/csv");
        assert_eq!(read["x-amz-meta-a"], "1");
        let mut plain = from_headers(&headers(&[])).unwrap();
        keep_content_type(&headers(&[]), &mut plain).unwrap();
        let mut read = HeaderMap::new();
        answer(&plain, "binary/octet-stream", &mut read).unwrap();
        assert_eq!(read["content-type"], "binary/octet-stream");
    }
}
