//! Where a pinned version is looked for, and how what the store reports is
//! compared with it.
//!
//! Etags are compared without surrounding quotes. The S3 backend hands
//! out `"<s3-etag>:<version-id>"` (see `object::s3::etag`), while DVC and
//! other S3 tools record the plain S3 etag. A pinned etag therefore
//! matches when it equals the store's etag, or when the store's etag is
//! exactly the pinned one followed by `:` and the version id the store
//! reports for this very object. That is sound: the version id is
//! checked on its own, and the S3 part is S3's own etag of that version,
//! which is what the tool recorded.
//!
//! A store that recorded a version's MD5 (the embedded store, for objects
//! written through the S3 endpoint, whose ETag is that MD5) also matches a
//! pinned etag equal to it: that is the ETag the tool was given for this
//! very version.

use super::error::object_name;

/// A version being looked for: the pin's, or where archive hops led.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The key.
    pub key: String,
    /// The exact version.
    pub version_id: String,
    /// The etag it must have, if known.
    pub etag: Option<String>,
    /// Its size, if known.
    pub size: Option<u64>,
}

impl Target {
    /// `key@version`.
    pub fn name(&self) -> String {
        object_name(&self.key, &self.version_id)
    }

    /// The fields of a found version that differ from this target: its
    /// version id, size, and etag (with its recorded MD5, if any) as the
    /// store reports them.
    pub fn mismatches(
        &self,
        version_id: Option<&str>,
        size: u64,
        (etag, content_md5): (&str, Option<[u8; 16]>),
    ) -> Vec<&'static str> {
        let mut fields = Vec::new();
        if version_id != Some(self.version_id.as_str()) {
            fields.push("version id");
        }
        if self.size.is_some_and(|want| want != size) {
            fields.push("size");
        }
        if self
            .etag
            .as_deref()
            .is_some_and(|want| !names_version(want, (etag, content_md5), &self.version_id))
        {
            fields.push("etag");
        }
        fields
    }
}

/// Whether the recorded etag `expected` names version `version_id`,
/// whose etag and recorded MD5 the store reports: its etag (as
/// [`etag_matches`] compares them), or the MD5 the store recorded for it
/// (see the module doc).
pub fn names_version(
    expected: &str,
    (etag, content_md5): (&str, Option<[u8; 16]>),
    version_id: &str,
) -> bool {
    etag_matches(expected, etag, version_id)
        || content_md5.is_some_and(|md5| unquote(expected) == hex::encode(md5))
}

/// Whether the pinned etag `expected` names the store's `actual` etag of
/// version `version_id` (see the module doc).
pub fn etag_matches(expected: &str, actual: &str, version_id: &str) -> bool {
    let expected = unquote(expected);
    let actual = unquote(actual);
    expected == actual
        || actual
            .strip_suffix(version_id)
            .and_then(|rest| rest.strip_suffix(':'))
            .is_some_and(|s3_etag| s3_etag == expected)
}

/// An etag without its surrounding quotes.
pub fn unquote(etag: &str) -> &str {
    etag.trim_matches('"')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etags_match_with_or_without_quotes() {
        assert!(etag_matches("\"abc\"", "abc", "v1"));
        assert!(etag_matches("abc", "\"abc\"", "v1"));
        assert!(!etag_matches("abc", "\"abd\"", "v1"));
    }

    #[test]
    fn a_plain_s3_etag_matches_the_s3_backends_etag_of_that_version_only() {
        assert!(etag_matches("9e10", "\"9e10:v1\"", "v1"));
        assert!(etag_matches("\"9e10:v1\"", "\"9e10:v1\"", "v1"));
        assert!(!etag_matches("9e10", "\"9e10:v2\"", "v1"));
        assert!(!etag_matches("9e1", "\"9e10:v1\"", "v1"));
        assert!(!etag_matches("9e10:v1", "\"9e10\"", "v1"));
    }

    #[test]
    fn every_differing_field_is_named() {
        let target = Target {
            key: "k".into(),
            version_id: "v1".into(),
            etag: Some("e".into()),
            size: Some(3),
        };
        assert!(target.mismatches(Some("v1"), 3, ("\"e\"", None)).is_empty());
        assert_eq!(
            target.mismatches(Some("v2"), 4, ("f", None)),
            vec!["version id", "size", "etag"]
        );
    }

    #[test]
    fn a_pinned_etag_naming_the_recorded_md5_of_the_version_matches() {
        let md5 = *b"0123456789abcdef";
        let target = Target {
            key: "k".into(),
            version_id: "v1".into(),
            etag: Some(format!("\"{}\"", hex::encode(md5))),
            size: None,
        };
        assert!(
            target
                .mismatches(Some("v1"), 3, ("\"gen\"", Some(md5)))
                .is_empty()
        );
        assert_eq!(
            target.mismatches(Some("v1"), 3, ("\"gen\"", None)),
            vec!["etag"]
        );
        let other = *b"fedcba9876543210";
        assert_eq!(
            target.mismatches(Some("v1"), 3, ("\"gen\"", Some(other))),
            vec!["etag"]
        );
    }
}
