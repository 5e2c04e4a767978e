//! Tolerance for S3-compatible servers that answer a call with a
//! well-formed S3 document under the wrong root element. moto does this
//! for GetBucketVersioning (`GetBucketVersioningResponse`) and ListParts
//! (`ListPartsResponse`); the SDK refuses such a document, so these calls
//! read the few fields they need from the raw body instead.
//!
//! Used only when the SDK failed to parse a 200 response and reported no
//! S3 error code: a real S3 never takes this path.

use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};

/// The raw body of a 200 response the SDK could not parse, if that is
/// what `err` is.
pub(super) fn unparsed_success<E: ProvideErrorMetadata>(
    err: &SdkError<E, HttpResponse>,
) -> Option<String> {
    match err {
        SdkError::ServiceError(e)
            if e.raw().status().as_u16() == 200 && e.err().code().is_none() =>
        {
            let body = e.raw().body().bytes()?;
            Some(String::from_utf8_lossy(body).into_owned())
        }
        _ => None,
    }
}

/// The texts of every `<tag>…</tag>` in `xml`, in order (no nesting of
/// the same tag, which these documents never have).
pub(super) fn elements<'a>(xml: &'a str, tag: &str) -> Vec<&'a str> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let mut found = Vec::new();
    let mut rest = xml;
    while let Some(start) = rest.find(&open) {
        let after = &rest[start + open.len()..];
        let Some(end) = after.find(&close) else { break };
        found.push(&after[..end]);
        rest = &after[end + close.len()..];
    }
    found
}

/// The first `<tag>` text, XML entities decoded.
pub(super) fn text(xml: &str, tag: &str) -> Option<String> {
    elements(xml, tag).first().map(|t| unescape(t))
}

fn unescape(text: &str) -> String {
    text.replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_read_from_a_document_under_the_wrong_root() {
        let xml = r#"<?xml version="1.0"?><ListPartsResponse><IsTruncated>false</IsTruncated>
            <Part><PartNumber>2</PartNumber><ETag>"4d"</ETag><Size>15</Size></Part>
            <Part><PartNumber>3</PartNumber><ETag>&quot;5e&quot;</ETag><Size>1</Size></Part>
            </ListPartsResponse>"#;
        let parts = elements(xml, "Part");
        assert_eq!(parts.len(), 2);
        assert_eq!(text(parts[1], "ETag").as_deref(), Some("\"5e\""));
        assert_eq!(text(parts[0], "PartNumber").as_deref(), Some("2"));
        assert_eq!(text(xml, "IsTruncated").as_deref(), Some("false"));
        assert_eq!(text(xml, "Status"), None);
    }
}
