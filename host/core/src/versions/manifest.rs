//! Reading a manifest file in either format.
//!
//! The format is told apart by the file name (`*.dvc` and `dvc.lock` are
//! DVC, `*.json` is Custodian's) or, for any other name, by the first non-blank character
//! (`{` is JSON, anything else is taken as DVC YAML): see [`super::pins`]
//! for the JSON format and [`super::dvc`] for DVC pointer files.

use std::io::Read;
use std::path::Path;

use super::dvc::{Pointers, is_dvc_name, parse_dvc};
use super::error::VersionsError;
use super::pins::{MAX_MANIFEST_BYTES, ManifestOptions, manifest_error, parse_json};

/// Reads the pins of one manifest file, in either format (see the module
/// doc).
///
/// # Errors
/// [`VersionsError::Io`] when it cannot be read, [`VersionsError::Manifest`]
/// or [`VersionsError::NoExactVersion`] naming the bad row.
pub fn read_manifest(path: &Path, options: &ManifestOptions) -> Result<Pointers, VersionsError> {
    let file = std::fs::File::open(path).map_err(|e| VersionsError::io(path, e))?;
    let mut text = String::new();
    file.take(MAX_MANIFEST_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| VersionsError::io(path, e))?;
    let name = path.display().to_string();
    let key_dir = || dvc_key_dir(path, options.root.as_deref(), &name);
    parse_manifest(&text, &name, key_dir, options.remote.as_deref())
}

/// Parses a manifest's `text` in either format (told apart as the module
/// doc says, by `name`); `key_dir` gives a DVC file's key prefix (only
/// asked for DVC files).
///
/// # Errors
/// As [`read_manifest`].
pub fn parse_manifest(
    text: &str,
    name: &str,
    key_dir: impl FnOnce() -> Result<String, VersionsError>,
    remote: Option<&str>,
) -> Result<Pointers, VersionsError> {
    if text.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(manifest_error(
            name,
            format!("larger than {MAX_MANIFEST_BYTES} bytes"),
        ));
    }
    let is_dvc = if is_dvc_name(name) {
        true
    } else if name.ends_with(".json") {
        false
    } else {
        !text.trim_start().starts_with('{')
    };
    if is_dvc {
        parse_dvc(text, name, &key_dir()?, remote)
    } else {
        parse_json(text, name).map(Pointers::exact)
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-row pointer file of `train.csv` on the remote `r`.
    const DVC: &str = "outs:\n- md5: 900150983cd24fb0d6963f7d28e17f72\n  hash: md5\n  \
                       path: train.csv\n  cloud:\n    r:\n      version_id: v1\n";

    #[test]
    fn a_manifest_without_a_telling_name_is_told_apart_by_its_first_character() {
        let json =
            r#"{"pins": [{"key": "k", "version_id": "v", "crc64nvme": "ae8b14860a799888"}]}"#;
        let parsed = parse_manifest(json, "pins", || Ok(String::new()), None).unwrap();
        assert_eq!(parsed.pins[0].key, "k");
        let parsed = parse_manifest(DVC, "pins", || Ok(String::new()), None).unwrap();
        assert_eq!(parsed.pins[0].key, "train.csv");
        // A DVC file's key directory is asked for only when it is one.
        let parsed = parse_manifest(json, "pins.json", || unreachable!(), None).unwrap();
        assert_eq!(parsed.pins.len(), 1);
    }

    #[test]
    fn dvc_keys_are_relative_to_the_root_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("data/sub")).unwrap();
        let file = dir.path().join("data/sub/train.csv.dvc");
        std::fs::write(&file, DVC).unwrap();
        let pins = read_manifest(&file, &ManifestOptions::default())
            .unwrap()
            .pins;
        assert_eq!(pins[0].key, "train.csv");
        let options = ManifestOptions {
            root: Some(dir.path().to_owned()),
            remote: None,
        };
        let pins = read_manifest(&file, &options).unwrap().pins;
        assert_eq!(pins[0].key, "data/sub/train.csv");
    }
}
