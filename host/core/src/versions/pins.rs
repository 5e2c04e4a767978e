//! Pins: exact versions of objects, and the manifests that list them.
//!
//! A pin is `(key, version id, etag?, size?, digest)`. It must name an
//! exact version: a missing, empty or `"null"` version id is an error
//! naming the pin (the `null` version is whatever an unversioned write
//! left last, not a pinned one).
//!
//! Two manifest formats are read, told apart by the file name (`*.dvc`
//! is DVC, `*.json` is Custodian's) or, for any other name, by the first
//! non-blank character (`{` is JSON, anything else is taken as DVC YAML):
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
//! **DVC pointer files** (`*.dvc`): every row of `outs:` is a pin. Its
//! `md5` and `size` are the digest and size; `hash` is its algorithm
//! (`md5`; a row without `hash` was written by DVC 2 and is
//! `md5-dos2unix`, as DVC itself reads it); a version-aware remote
//! records `cloud: {REMOTE: {version_id, etag}}` (with several remotes,
//! pick one with [`ManifestOptions::remote`]). The pin's key is the
//! row's `path` under the `.dvc` file's directory taken relative to
//! [`ManifestOptions::root`], which defaults to the `.dvc` file's own
//! directory (so by default the key is just `path`; pass the DVC
//! repository's root to get repository-relative keys). Directory
//! outputs (`md5: ….dir`) are refused: pin their files.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

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

/// Reads the pins of one manifest file, in either format (see the module
/// doc).
///
/// # Errors
/// [`VersionsError::Io`] when it cannot be read, [`VersionsError::Manifest`]
/// or [`VersionsError::NoExactVersion`] naming the bad row.
pub fn read_manifest(path: &Path, options: &ManifestOptions) -> Result<Vec<Pin>, VersionsError> {
    let file = std::fs::File::open(path).map_err(|e| VersionsError::io(path, e))?;
    let mut text = String::new();
    file.take(MAX_MANIFEST_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| VersionsError::io(path, e))?;
    let name = path.display().to_string();
    if text.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(manifest_error(
            &name,
            format!("larger than {MAX_MANIFEST_BYTES} bytes"),
        ));
    }
    let is_dvc = match path.extension().and_then(|e| e.to_str()) {
        Some("dvc") => true,
        Some("json") => false,
        _ => !text.trim_start().starts_with('{'),
    };
    if is_dvc {
        let key_dir = dvc_key_dir(path, options.root.as_deref(), &name)?;
        parse_dvc(&text, &name, &key_dir, options.remote.as_deref())
    } else {
        parse_json(&text, &name)
    }
}

fn manifest_error(path: &str, reason: String) -> VersionsError {
    VersionsError::Manifest {
        path: path.to_owned(),
        reason,
    }
}

/// An exact version id, or the error naming the pin.
fn exact_version(version_id: Option<&str>, path: &str, key: &str) -> Result<String, VersionsError> {
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
/// As [`read_manifest`].
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

#[derive(serde::Deserialize)]
struct DvcFile {
    #[serde(default)]
    outs: Vec<DvcOut>,
}

#[derive(serde::Deserialize)]
struct DvcOut {
    path: String,
    md5: Option<String>,
    size: Option<u64>,
    hash: Option<String>,
    #[serde(default)]
    cloud: BTreeMap<String, DvcCloud>,
}

#[derive(serde::Deserialize)]
struct DvcCloud {
    version_id: Option<String>,
    etag: Option<String>,
}

/// The key prefix of a `.dvc` file's outputs: its directory relative to
/// `root` (default: the directory itself, so the prefix is empty).
fn dvc_key_dir(path: &Path, root: Option<&Path>, name: &str) -> Result<String, VersionsError> {
    let Some(root) = root else {
        return Ok(String::new());
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let dir = std::fs::canonicalize(dir).map_err(|e| VersionsError::io(dir, e))?;
    let root_real = std::fs::canonicalize(root).map_err(|e| VersionsError::io(root, e))?;
    let relative = dir
        .strip_prefix(&root_real)
        .map_err(|_| manifest_error(name, format!("is not under the root {}", root.display())))?;
    let mut prefix = String::new();
    for part in relative.components() {
        let part = part
            .as_os_str()
            .to_str()
            .ok_or_else(|| manifest_error(name, "its directory is not UTF-8".into()))?;
        prefix.push_str(part);
        prefix.push('/');
    }
    Ok(prefix)
}

/// Deepest nesting of flow collections (`[`, `{`) a DVC file may have.
/// DVC writes block style a few levels deep, but the YAML scanner's work
/// grows with the square of the nesting: 100,000 `[` (200 KB) took 22 s
/// to refuse, and a file of [`MAX_MANIFEST_BYTES`] would never finish.
const MAX_DVC_NESTING: usize = 64;

/// Whether `text` nests brackets or braces deeper than
/// [`MAX_DVC_NESTING`]. Quoting is not tracked, so brackets inside a
/// quoted path count too: only a path of dozens of unclosed brackets could
/// be refused by mistake.
fn nests_too_deep(text: &str) -> bool {
    let mut depth = 0usize;
    for byte in text.bytes() {
        match byte {
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_DVC_NESTING {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// Parses a DVC pointer file whose outputs live under `key_dir` (`""` or
/// ending in `/`); `remote` picks the `cloud:` entry.
///
/// # Errors
/// As [`read_manifest`].
pub fn parse_dvc(
    text: &str,
    path: &str,
    key_dir: &str,
    remote: Option<&str>,
) -> Result<Vec<Pin>, VersionsError> {
    if nests_too_deep(text) {
        return Err(manifest_error(
            path,
            format!("nests collections deeper than {MAX_DVC_NESTING} levels"),
        ));
    }
    let file: DvcFile = serde_yaml_ng::from_str(text)
        .map_err(|e| manifest_error(path, format!("not a DVC pointer file: {e}")))?;
    if file.outs.is_empty() {
        return Err(manifest_error(path, "has no outs".into()));
    }
    file.outs
        .into_iter()
        .map(|out| {
            let key = format!("{key_dir}{}", out.path);
            let bad =
                |reason: String| manifest_error(path, format!("out {:?}: {reason}", out.path));
            ObjectKey::new(key.as_str()).map_err(|e| bad(e.to_string()))?;
            let value = out.md5.as_deref().ok_or_else(|| bad("has no md5".into()))?;
            // DVC 3 writes `hash: md5`; a row without it is DVC 2's.
            let algorithm = out.hash.as_deref().unwrap_or("md5-dos2unix");
            if algorithm == "crc64nvme" {
                return Err(bad("DVC rows carry md5 digests".into()));
            }
            let digest = Digest::parse(algorithm, value).map_err(bad)?;
            let cloud = match (remote, out.cloud.len()) {
                (Some(name), _) => out
                    .cloud
                    .get(name)
                    .ok_or_else(|| bad(format!("has no cloud entry for the remote {name:?}")))?,
                (None, 1) => out.cloud.values().next().expect("one entry"),
                (None, 0) => {
                    return Err(VersionsError::NoExactVersion {
                        path: path.to_owned(),
                        key,
                    });
                }
                (None, _) => {
                    return Err(bad(format!(
                        "has cloud entries for several remotes ({}): choose one",
                        out.cloud.keys().cloned().collect::<Vec<_>>().join(", ")
                    )));
                }
            };
            Ok(Pin {
                version_id: exact_version(cloud.version_id.as_deref(), path, &key)?,
                etag: cloud.etag.clone().filter(|e| !e.is_empty()),
                size: out.size,
                digest,
                manifest: path.to_owned(),
                key,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by fuzzing: the YAML scanner is quadratic in the nesting, so
    /// a deep file is refused before it parses.
    #[test]
    fn a_dvc_file_nesting_past_the_bound_is_refused_before_yaml_parses_it() {
        let nested = |depth: usize| format!("outs: {}{}", "[".repeat(depth), "]".repeat(depth));
        let refusal = |depth| parse_dvc(&nested(depth), "m.dvc", "", None).unwrap_err();
        assert!(refusal(MAX_DVC_NESTING + 1).to_string().contains("nests"));
        // At the bound, YAML parses it and finds no outputs in it.
        assert!(!refusal(MAX_DVC_NESTING).to_string().contains("nests"));
        // Closed brackets do not add up.
        let flat = format!("outs: [{}]", "[], ".repeat(10 * MAX_DVC_NESTING));
        assert!(
            !parse_dvc(&flat, "m.dvc", "", None)
                .unwrap_err()
                .to_string()
                .contains("nests")
        );
    }

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

    const DVC: &str = "outs:
- md5: 900150983cd24fb0d6963f7d28e17f72
  size: 3
  hash: md5
  path: train.csv
  cloud:
    store:
      etag: 900150983cd24fb0d6963f7d28e17f72
      version_id: CxBqqlHnOmHSG09sYlP36Mytf.48xmaJ
";

    #[test]
    fn a_dvc_pointer_file_pins_its_path_with_the_remotes_version_and_etag() {
        let pins = parse_dvc(DVC, "train.csv.dvc", "data/", None).unwrap();
        assert_eq!(pins.len(), 1);
        let pin = &pins[0];
        assert_eq!(pin.key, "data/train.csv");
        assert_eq!(pin.version_id, "CxBqqlHnOmHSG09sYlP36Mytf.48xmaJ");
        assert_eq!(pin.etag.as_deref(), Some(MD5));
        assert_eq!(pin.size, Some(3));
        assert_eq!(pin.digest, Digest::Md5(MD5.into()));
    }

    #[test]
    fn a_dvc_row_without_a_hash_field_is_dvc_2s_md5_dos2unix() {
        let text = DVC.replace("  hash: md5\n", "");
        let pins = parse_dvc(&text, "x.dvc", "", None).unwrap();
        assert_eq!(pins[0].digest, Digest::Md5Dos2Unix(MD5.into()));
    }

    #[test]
    fn a_dvc_directory_output_is_refused_clearly() {
        let text = DVC.replace(MD5, &format!("{MD5}.dir"));
        let error = parse_dvc(&text, "x.dvc", "", None).unwrap_err();
        assert!(error.to_string().contains("directory"), "{error}");
    }

    #[test]
    fn a_dvc_row_without_a_version_aware_remote_has_no_exact_version() {
        let text = "outs:\n- md5: 900150983cd24fb0d6963f7d28e17f72\n  hash: md5\n  path: a\n";
        let error = parse_dvc(text, "x.dvc", "", None).unwrap_err();
        assert!(
            matches!(error, VersionsError::NoExactVersion { .. }),
            "{error}"
        );
        let text = DVC.replace(
            "version_id: CxBqqlHnOmHSG09sYlP36Mytf.48xmaJ",
            "version_id: 'null'",
        );
        let error = parse_dvc(&text, "x.dvc", "", None).unwrap_err();
        assert!(
            matches!(error, VersionsError::NoExactVersion { .. }),
            "{error}"
        );
    }

    #[test]
    fn a_dvc_row_with_several_remotes_needs_one_chosen() {
        let text = format!("{DVC}    other:\n      etag: x\n      version_id: v9\n");
        let error = parse_dvc(&text, "x.dvc", "", None).unwrap_err();
        assert!(error.to_string().contains("several remotes"), "{error}");
        let pins = parse_dvc(&text, "x.dvc", "", Some("other")).unwrap();
        assert_eq!(pins[0].version_id, "v9");
    }

    #[test]
    fn malformed_yaml_is_a_manifest_error_not_a_panic() {
        let error = parse_dvc("outs: [ {", "x.dvc", "", None).unwrap_err();
        assert!(matches!(error, VersionsError::Manifest { .. }), "{error}");
    }

    #[test]
    fn dvc_keys_are_relative_to_the_root_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("data/sub")).unwrap();
        let file = dir.path().join("data/sub/train.csv.dvc");
        std::fs::write(&file, DVC).unwrap();
        let pins = read_manifest(&file, &ManifestOptions::default()).unwrap();
        assert_eq!(pins[0].key, "train.csv");
        let options = ManifestOptions {
            root: Some(dir.path().to_owned()),
            remote: None,
        };
        let pins = read_manifest(&file, &options).unwrap();
        assert_eq!(pins[0].key, "data/sub/train.csv");
    }
}
