//! The etags this backend hands out: S3's etag joined with the version id.
//!
//! S3's own etag is a content hash (MD5 of the bytes, or of the parts), so
//! two publishes of identical bytes share one, and a guard holding the
//! older would match the newer: a renewed epoch cell would keep its token,
//! and a stale `IfMatch` would pass after an A→B→A. The contract promises
//! a distinct etag per publish, so on a versioned bucket the etag is
//! `"<s3-etag>:<version-id>"`, which identifies one publish exactly.
//!
//! Guards split it again: the S3 part rides `If-Match` (atomic on the
//! server), and the version part is checked against what S3 reports: the
//! `x-amz-version-id` a read returns (exact), or a HEAD before a write (a
//! window, documented where it is used). On an unversioned bucket (version
//! id absent or `null`) the etag is S3's alone.

/// A guard split into what S3 can check and what this backend checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Guard {
    /// The S3 etag, quoted, for `If-Match` / `x-amz-copy-source-if-match`.
    pub s3_etag: String,
    /// The version the guard names, if any.
    pub version_id: Option<String>,
}

impl Guard {
    /// Whether an object S3 reports as `version_id` is the one guarded.
    /// S3 has already matched the etag part.
    pub fn holds_for(&self, version_id: Option<&str>) -> bool {
        match &self.version_id {
            None => true,
            Some(want) => version_id == Some(want.as_str()),
        }
    }
}

/// The version id S3 reports, with "no version" and the `null` version
/// of an unversioned bucket both as `None`.
pub(super) fn real_version(version_id: Option<&str>) -> Option<&str> {
    version_id.filter(|v| !v.is_empty() && *v != "null")
}

/// The etag of the S3 object with etag `s3_etag` and version `version_id`.
pub(super) fn issue(s3_etag: &str, version_id: Option<&str>) -> String {
    let inner = s3_etag.trim_matches('"');
    match real_version(version_id) {
        Some(version) => format!("\"{inner}:{version}\""),
        None => format!("\"{inner}\""),
    }
}

/// Splits an etag this backend issued. Anything else (a stale, foreign
/// or empty string) still yields a guard, which S3 then refuses: a guard
/// that cannot match must fail as a precondition, not as a bad argument.
pub(super) fn guard(etag: &str) -> Guard {
    let inner = etag.trim_matches('"');
    // An S3 etag is hex with an optional "-N" and never holds ':'; a
    // version id may hold anything after it.
    match inner.split_once(':') {
        Some((s3, version)) if !version.is_empty() => Guard {
            s3_etag: format!("\"{s3}\""),
            version_id: Some(version.to_owned()),
        },
        _ => Guard {
            s3_etag: format!("\"{inner}\""),
            version_id: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_issued_etag_splits_back_into_the_s3_etag_and_the_version() {
        let etag = issue("\"9e10\"", Some("v.1_x"));
        assert_eq!(etag, "\"9e10:v.1_x\"");
        let guard = guard(&etag);
        assert_eq!(guard.s3_etag, "\"9e10\"");
        assert_eq!(guard.version_id.as_deref(), Some("v.1_x"));
        assert!(guard.holds_for(Some("v.1_x")));
        assert!(!guard.holds_for(Some("v.2")));
        assert!(!guard.holds_for(None));
    }

    #[test]
    fn identical_bytes_published_twice_get_distinct_etags() {
        assert_ne!(issue("\"9e10\"", Some("a")), issue("\"9e10\"", Some("b")));
    }

    #[test]
    fn an_unversioned_object_keeps_the_s3_etag() {
        assert_eq!(issue("\"9e10-2\"", None), "\"9e10-2\"");
        assert_eq!(issue("\"9e10-2\"", Some("null")), "\"9e10-2\"");
        let guard = guard("\"9e10-2\"");
        assert_eq!(guard.version_id, None);
        assert!(guard.holds_for(Some("anything")));
    }

    #[test]
    fn a_foreign_or_empty_etag_still_makes_a_guard_that_s3_refuses() {
        assert_eq!(guard("").s3_etag, "\"\"");
        assert_eq!(guard("\"not-an-etag\"").s3_etag, "\"not-an-etag\"");
        assert_eq!(guard("\"x:\"").version_id, None);
    }
}
