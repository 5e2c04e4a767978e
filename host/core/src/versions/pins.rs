//! Pins: exact versions of objects, and the manifests that list them.
//!
//! A pin is `(key, version id, etag?, size?, digest)`. It must name an
//! exact version: a missing, empty or `"null"` version id is an error
//! naming the pin (the `null` version is whatever an unversioned write
//! left last, not a pinned one).
//!
//! Two manifest formats are read ([`super::manifest`] tells them apart):
//!
//! **Custodian's JSON**:
//!
//! ```json
//! {"pins": [
//!   {"key": "data/train.csv", "version_id": "v1", "etag": "\"9e10…\"",
//!    "size": 1024, "md5": "900150983cd24fb0d6963f7d28e17f72", "hash": "md5"},
//!   {"key": "data/x.bin", "version_id": "v2", "size": 9,
//!    "crc64nvme": "ae8b14860a799888", "hash": "crc64nvme"}
//! ]}
//! ```
//!
//! `etag` and `size` may be omitted (then they are not checked); `hash`
//! is `md5`, `md5-dos2unix` (both with an `md5` field) or `crc64nvme`
//! (with a `crc64nvme` field) and defaults to the one field given.
//! Unknown fields are refused, so a typo does not silently drop a check.
//!
//! **DVC pointer files** (`*.dvc`): see [`super::dvc`]. Keys are each
//! output's `path` under the `.dvc` file's directory taken relative to
//! [`ManifestOptions::root`], which defaults to the `.dvc` file's own
//! directory (so by default the key is just `path`; pass the DVC
//! repository's root to get repository-relative keys, as DVC lays out a
//! version-aware remote).

use std::path::PathBuf;

use super::digest::Digest;
use super::error::VersionsError;
use custodian_object::ObjectKey;

/// Largest manifest read: a pin is ~200 bytes, so this is hundreds of
/// thousands of pins; a bigger file is a mistake or an attempt to exhaust
/// memory.
pub const MAX_MANIFEST_BYTES: u64 = 64 << 20;

/// One pinned object version.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Pin {
    /// The object's key in the store.
    pub key: String,
    /// The exact version.
    pub version_id: String,
    /// The version's etag, if pinned (compared without quotes).
    pub etag: Option<String>,
    /// Its size in bytes, if pinned.
    pub size: Option<u64>,
    /// Its content digest.
    pub digest: Digest,
    /// Where the pin came from: the manifest file.
    pub manifest: String,
}

impl Pin {
    /// `key@version`, how reports name the pin.
    pub fn name(&self) -> String {
        super::error::object_name(&self.key, &self.version_id)
    }
}

/// How manifests are read.
#[derive(Debug, Clone, Default)]
pub struct ManifestOptions {
    /// The directory DVC keys are relative to (default: each `.dvc`
    /// file's own directory).
    pub root: Option<PathBuf>,
    /// The DVC remote whose `cloud:` entry holds the version (needed when
    /// a row lists several).
    pub remote: Option<String>,
}

/// A [`VersionsError::Manifest`] naming the manifest at `path`.
pub(crate) fn manifest_error(path: &str, reason: String) -> VersionsError {
    VersionsError::Manifest {
        path: path.to_owned(),
        reason,
    }
}

/// An exact version id, or the error naming the pin.
pub(crate) fn exact_version(
    version_id: Option<&str>,
    path: &str,
    key: &str,
) -> Result<String, VersionsError> {
    match version_id {
        Some(v) if !v.is_empty() && v != "null" => Ok(v.to_owned()),
        _ => Err(VersionsError::NoExactVersion {
            path: path.to_owned(),
            key: key.to_owned(),
        }),
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonManifest {
    pins: Vec<JsonPin>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonPin {
    key: String,
    version_id: Option<String>,
    etag: Option<String>,
    size: Option<u64>,
    md5: Option<String>,
    crc64nvme: Option<String>,
    hash: Option<String>,
}

/// Parses Custodian's JSON manifest; `path` names it in errors.
///
/// # Errors
/// [`VersionsError::Manifest`] or [`VersionsError::NoExactVersion`]
/// naming the bad row.
pub fn parse_json(text: &str, path: &str) -> Result<Vec<Pin>, VersionsError> {
    let manifest: JsonManifest = serde_json::from_str(text)
        .map_err(|e| manifest_error(path, format!("not a pin manifest: {e}")))?;
    manifest
        .pins
        .into_iter()
        .enumerate()
        .map(|(index, row)| {
            let bad = |reason: String| {
                manifest_error(path, format!("pin {index} ({:?}): {reason}", row.key))
            };
            ObjectKey::new(row.key.as_str()).map_err(|e| bad(e.to_string()))?;
            let (algorithm, value) = match (row.hash.as_deref(), &row.md5, &row.crc64nvme) {
                (None | Some("md5"), Some(md5), None) => ("md5", md5),
                (Some("md5-dos2unix"), Some(md5), None) => ("md5-dos2unix", md5),
                (None | Some("crc64nvme"), None, Some(crc)) => ("crc64nvme", crc),
                (_, None, None) => return Err(bad("has no md5 or crc64nvme digest".into())),
                (_, Some(_), Some(_)) => {
                    return Err(bad("has both md5 and crc64nvme; give one".into()));
                }
                (Some(hash), _, _) => {
                    return Err(bad(format!(
                        "hash {hash:?} does not match its digest field"
                    )));
                }
            };
            let digest = Digest::parse(algorithm, value).map_err(bad)?;
            Ok(Pin {
                version_id: exact_version(row.version_id.as_deref(), path, &row.key)?,
                key: row.key,
                etag: row.etag.filter(|e| !e.is_empty()),
                size: row.size,
                digest,
                manifest: path.to_owned(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MD5: &str = "900150983cd24fb0d6963f7d28e17f72";

    #[test]
    fn a_json_manifest_gives_one_pin_per_row_with_its_digest() {
        let text = format!(
            r#"{{"pins": [
                {{"key": "a/b.csv", "version_id": "v1", "etag": "\"e1\"", "size": 3, "md5": "{MD5}", "hash": "md5"}},
                {{"key": "a/c.bin", "version_id": "v2", "crc64nvme": "ae8b14860a799888"}},
                {{"key": "a/d.txt", "version_id": "v3", "md5": "{MD5}", "hash": "md5-dos2unix"}}
            ]}}"#
        );
        let pins = parse_json(&text, "m.json").unwrap();
        assert_eq!(pins.len(), 3);
        assert_eq!(pins[0].key, "a/b.csv");
        assert_eq!(pins[0].etag.as_deref(), Some("\"e1\""));
        assert_eq!(pins[0].size, Some(3));
        assert_eq!(pins[0].digest, Digest::Md5(MD5.into()));
        assert_eq!(pins[1].digest, Digest::Crc64Nvme("ae8b14860a799888".into()));
        assert_eq!(pins[1].size, None);
        assert_eq!(pins[2].digest, Digest::Md5Dos2Unix(MD5.into()));
    }

    #[test]
    fn a_pin_without_an_exact_version_is_an_error_naming_it() {
        for version in [r#""version_id": "","#, r#""version_id": "null","#, ""] {
            let text = format!(r#"{{"pins": [{{"key": "a/b", {version} "md5": "{MD5}"}}]}}"#);
            let error = parse_json(&text, "m.json").unwrap_err();
            assert!(
                matches!(&error, VersionsError::NoExactVersion { key, .. } if key == "a/b"),
                "{error}"
            );
            assert!(error.to_string().contains("\"a/b\""), "{error}");
        }
    }

    #[test]
    fn a_json_pin_with_a_bad_digest_key_or_field_is_refused_naming_the_row() {
        let cases = [
            (
                format!(
                    r#"{{"key": "a", "version_id": "v", "md5": "{}"}}"#,
                    MD5.to_uppercase()
                ),
                "lowercase",
            ),
            (r#"{"key": "a", "version_id": "v"}"#.to_owned(), "no md5"),
            (
                format!(r#"{{"key": "a/../b", "version_id": "v", "md5": "{MD5}"}}"#),
                "..",
            ),
            (
                format!(
                    r#"{{"key": "a", "version_id": "v", "md5": "{MD5}", "hash": "crc64nvme"}}"#
                ),
                "does not match",
            ),
            (
                format!(r#"{{"key": "a", "version_id": "v", "md5": "{MD5}", "sise": 3}}"#),
                "unknown field",
            ),
        ];
        for (row, want) in cases {
            let error = parse_json(&format!(r#"{{"pins": [{row}]}}"#), "m.json").unwrap_err();
            assert!(error.to_string().contains(want), "{row}: {error}");
            assert!(error.to_string().contains("m.json"), "{error}");
        }
    }
}
