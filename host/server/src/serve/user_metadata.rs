//! User metadata as both front ends take it from a request: the
//! `x-amz-meta-*` headers, names lower case (as HTTP delivers them). The
//! rules live here once; the store checks names, values and sizes with
//! its own.

use axum::http::HeaderMap;
use axum::http::header::CONTENT_TYPE;
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

/// The content type a read of an object with `metadata` answers with:
/// the one kept at its write, else `default`.
pub(crate) fn content_type<'m>(metadata: &'m Metadata, default: &'m str) -> &'m str {
    metadata
        .get(CONTENT_TYPE_ENTRY)
        .map_or(default, String::as_str)
}

/// The entries a read answers as `x-amz-meta-*` headers: all but the
/// kept content type, which is answered as `Content-Type`.
pub(crate) fn user_entries(metadata: &Metadata) -> impl Iterator<Item = (&String, &String)> {
    metadata
        .iter()
        .filter(|(name, _)| name.as_str() != CONTENT_TYPE_ENTRY)
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

#[cfg(test)]
mod tests {
    use axum::http::{HeaderMap, HeaderValue};

    use super::{content_type, from_headers, keep_content_type, user_entries};

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
        assert_eq!(content_type(&metadata, "binary/octet-stream"), "text/csv");
        let entries: Vec<_> = user_entries(&metadata).collect();
        assert_eq!(entries, [(&"a".to_owned(), &"1".to_owned())]);
        let mut plain = from_headers(&headers(&[])).unwrap();
        keep_content_type(&headers(&[]), &mut plain).unwrap();
        assert_eq!(
            content_type(&plain, "binary/octet-stream"),
            "binary/octet-stream"
        );
    }
}
