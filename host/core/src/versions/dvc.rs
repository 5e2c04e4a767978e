//! DVC pointer files (`*.dvc`) and pipeline lock files (`dvc.lock`): what
//! each output row pins.
//!
//! A `.dvc` file's rows are its `outs:`; a `dvc.lock`'s are the `outs:` of
//! every stage under `stages:` (its `deps:` are inputs, not pins). Every
//! output row is one of:
//!
//! - **A file on a version-aware remote**: `md5`, `size`, `hash` and
//!   `cloud: {REMOTE: {version_id, etag}}`. It is one exact [`Pin`]: the
//!   key is the row's `path` under `key_dir`, the digest its `md5` under
//!   `hash` (a row without `hash` was written by DVC 2 and is
//!   `md5-dos2unix`, as DVC itself reads it).
//! - **A directory on a version-aware remote**: `files:`, one entry per
//!   file (`relpath`, `md5`, `size`, `cloud`). Each file is a pin keyed
//!   `key_dir/path/relpath`, and the directory's [`Listing`] (the `.dir`
//!   object DVC keeps in its cache) is rebuilt from the entries; a row
//!   that also carries `md5: X.dir` must list files hashing to `X`.
//! - **An output on a content-addressed remote** (no `cloud:` entry): an
//!   [`Addressed`] output, whose bytes live at the remote's cache-layout
//!   key for its digest (`files/md5/ab/cdef…` for DVC 3's `hash: md5`,
//!   `ab/cdef…` for DVC 2), whatever version holds them. A directory
//!   (`md5: X.dir`) is its `.dir` object there, which lists its files.
//!   These are resolved against the store by [`super::addressed`].
//!
//! With several remotes in `cloud:`, one is chosen by name; a chosen
//! remote a row lacks, or a `version_id` of `null`, is an error naming
//! the row: a version-aware pointer without an exact version pins
//! nothing.

use std::collections::BTreeMap;

use super::digest::Digest;
use super::error::VersionsError;
use super::pins::{Pin, exact_version, manifest_error};
use custodian_object::ObjectKey;

/// Deepest nesting of flow collections (`[`, `{`) a DVC file may have.
/// DVC writes block style a few levels deep, but the YAML scanner's work
/// grows with the square of the nesting: 100,000 `[` (200 KB) took 22 s
/// to refuse, and a file of [`super::pins::MAX_MANIFEST_BYTES`] would
/// never finish.
const MAX_DVC_NESTING: usize = 64;

/// Most files one directory output may list: a listing is held in memory
/// and rebuilt as JSON; DVC projects with more files per output split
/// them, and a pointer listing more is a mistake or an attack.
pub const MAX_DIRECTORY_FILES: usize = 1_000_000;

/// Everything a manifest names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pointers {
    /// Exact versions.
    pub pins: Vec<Pin>,
    /// DVC outputs on content-addressed remotes, resolved against the
    /// store ([`super::addressed`]).
    pub addressed: Vec<Addressed>,
    /// DVC directory listings, installed beside the fetched files.
    pub listings: Vec<Listing>,
}

impl Pointers {
    /// Appends `other`'s items.
    pub fn extend(&mut self, other: Pointers) {
        self.pins.extend(other.pins);
        self.addressed.extend(other.addressed);
        self.listings.extend(other.listings);
    }

    /// Pointers naming exactly `pins` (what a JSON manifest names).
    pub fn exact(pins: Vec<Pin>) -> Self {
        Self {
            pins,
            ..Self::default()
        }
    }
}

/// An output stored content-addressed: resolved against the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Addressed {
    /// Its key in the remote's cache layout (ending `.dir` for a
    /// directory).
    pub key: String,
    /// Its digest (for a directory, of the `.dir` object's bytes).
    pub digest: Digest,
    /// Its size, if recorded (a directory's is its files' total).
    pub size: Option<u64>,
    /// Whether it is a directory's `.dir` object.
    pub directory: bool,
    /// The hash of the files a directory lists (`md5`, or DVC 2's
    /// `md5-dos2unix`); for a file, its digest's.
    pub file_algorithm: &'static str,
    /// Its path in the DVC workspace, relative to the `.dvc` file.
    pub path: String,
    /// The manifest that names it.
    pub manifest: String,
}

/// A directory output's listing as DVC keeps it in its cache, beside the
/// files, at `CACHE/ab/cdef….dir`: a JSON array of `{"md5", "relpath"}`
/// sorted by relpath.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    /// The MD5 of [`Self::bytes`] (the directory's `md5` without `.dir`).
    pub digest: Digest,
    /// The listing, byte for byte as DVC writes it.
    pub bytes: Vec<u8>,
    /// The output's path in the DVC workspace.
    pub path: String,
    /// The manifest that names it.
    pub manifest: String,
}

#[derive(serde::Deserialize)]
struct DvcFile {
    #[serde(default)]
    outs: Vec<DvcOut>,
    /// `dvc.lock`: each pipeline stage's recorded outputs (its `deps` are
    /// inputs, pinned by whatever produced them).
    #[serde(default)]
    stages: BTreeMap<String, DvcStage>,
}

#[derive(serde::Deserialize)]
struct DvcStage {
    #[serde(default)]
    outs: Vec<DvcOut>,
}

#[derive(serde::Deserialize)]
struct DvcOut {
    path: String,
    md5: Option<String>,
    size: Option<u64>,
    hash: Option<String>,
    files: Option<Vec<DvcFileEntry>>,
    #[serde(default)]
    cloud: BTreeMap<String, DvcCloud>,
}

#[derive(serde::Deserialize)]
struct DvcFileEntry {
    relpath: String,
    md5: Option<String>,
    size: Option<u64>,
    #[serde(default)]
    cloud: BTreeMap<String, DvcCloud>,
}

#[derive(serde::Deserialize)]
struct DvcCloud {
    version_id: Option<String>,
    etag: Option<String>,
}

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

/// The remote's cache-layout key of `digest` (see the module doc).
pub fn layout_key(digest: &Digest) -> String {
    let value = digest.value();
    let root = match digest {
        Digest::Md5Dos2Unix(_) => "",
        _ => "files/md5/",
    };
    format!("{root}{}/{}", &value[..2], &value[2..])
}

/// A directory listing's bytes, as DVC's `Tree.as_bytes` writes them:
/// Python's `json.dumps(sorted_by_relpath, sort_keys=True)`, whose
/// separators are `, ` and `: ` and which escapes every character outside
/// printable ASCII as `\uXXXX`.
pub fn listing_bytes(files: &[(String, String)]) -> Vec<u8> {
    let mut sorted: Vec<&(String, String)> = files.iter().collect();
    // Python compares str by code point, as Rust compares UTF-8 bytes.
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out = String::from("[");
    for (index, (relpath, md5)) in sorted.into_iter().enumerate() {
        if index > 0 {
            out.push_str(", ");
        }
        out.push_str("{\"md5\": ");
        python_json_string(md5, &mut out);
        out.push_str(", \"relpath\": ");
        python_json_string(relpath, &mut out);
        out.push('}');
    }
    out.push(']');
    out.into_bytes()
}

/// `text` as Python's `json.dumps` (with `ensure_ascii`) quotes it.
fn python_json_string(text: &str, out: &mut String) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
    }
    out.push('"');
}

/// Parses a listing (`.dir` object): `(relpath, md5)` per file.
///
/// # Errors
/// A reason when it is not a JSON array of objects with string `relpath`
/// and `md5`, or lists more than [`MAX_DIRECTORY_FILES`].
pub fn parse_listing(bytes: &[u8]) -> Result<Vec<(String, String)>, String> {
    let entries: Vec<serde_json::Map<String, serde_json::Value>> =
        serde_json::from_slice(bytes).map_err(|e| format!("not a DVC .dir listing: {e}"))?;
    if entries.len() > MAX_DIRECTORY_FILES {
        return Err(format!("lists more than {MAX_DIRECTORY_FILES} files"));
    }
    entries
        .iter()
        .enumerate()
        .map(|(index, entry)| {
            let field = |name: &str| {
                entry
                    .get(name)
                    .and_then(|v| v.as_str())
                    .map(str::to_owned)
                    .ok_or_else(|| format!("entry {index} has no {name}"))
            };
            Ok((field("relpath")?, field("md5")?))
        })
        .collect()
}

/// Whether `name` (a path) is a DVC file: `*.dvc` or `dvc.lock`.
pub fn is_dvc_name(name: &str) -> bool {
    name.ends_with(".dvc") || name == "dvc.lock" || name.ends_with("/dvc.lock")
}

/// Parses a DVC pointer or lock file whose outputs live under `key_dir` (`""` or
/// ending in `/`); `remote` picks the `cloud:` entry. `path` names the
/// file in errors and in what it pins.
///
/// # Errors
/// [`VersionsError::Manifest`] or [`VersionsError::NoExactVersion`]
/// naming the bad row.
pub fn parse_dvc(
    text: &str,
    path: &str,
    key_dir: &str,
    remote: Option<&str>,
) -> Result<Pointers, VersionsError> {
    if nests_too_deep(text) {
        return Err(manifest_error(
            path,
            format!("nests collections deeper than {MAX_DVC_NESTING} levels"),
        ));
    }
    let file: DvcFile = serde_yaml_ng::from_str(text)
        .map_err(|e| manifest_error(path, format!("not a DVC pointer file: {e}")))?;
    let outs: Vec<DvcOut> = file
        .outs
        .into_iter()
        .chain(file.stages.into_values().flat_map(|stage| stage.outs))
        .collect();
    if outs.is_empty() {
        return Err(manifest_error(path, "has no outs".into()));
    }
    let mut pointers = Pointers::default();
    for out in outs {
        Row {
            manifest: path,
            key_dir,
            remote,
            out: &out,
        }
        .read(&mut pointers)?;
    }
    Ok(pointers)
}

/// One output row being read.
struct Row<'a> {
    manifest: &'a str,
    key_dir: &'a str,
    remote: Option<&'a str>,
    out: &'a DvcOut,
}

impl Row<'_> {
    fn bad(&self, reason: String) -> VersionsError {
        manifest_error(self.manifest, format!("out {:?}: {reason}", self.out.path))
    }

    /// DVC 3 writes `hash: md5`; a row without it is DVC 2's.
    fn algorithm(&self) -> Result<&'static str, VersionsError> {
        match self.out.hash.as_deref() {
            None => Ok("md5-dos2unix"),
            Some("md5") => Ok("md5"),
            Some("md5-dos2unix") => Ok("md5-dos2unix"),
            Some(other) => Err(self.bad(format!(
                "hash {other:?} is not one DVC writes (md5, or none for DVC 2)"
            ))),
        }
    }

    /// The chosen remote's entry of `cloud`, `None` when it has none at
    /// all (content-addressed).
    fn cloud<'c>(
        &self,
        cloud: &'c BTreeMap<String, DvcCloud>,
        what: &str,
    ) -> Result<Option<&'c DvcCloud>, VersionsError> {
        match (self.remote, cloud.len()) {
            (_, 0) => Ok(None),
            (Some(name), _) => cloud.get(name).map(Some).ok_or_else(|| {
                self.bad(format!("{what}has no cloud entry for the remote {name:?}"))
            }),
            (None, 1) => Ok(cloud.values().next()),
            (None, _) => Err(self.bad(format!(
                "{what}has cloud entries for several remotes ({}): choose one",
                cloud.keys().cloned().collect::<Vec<_>>().join(", ")
            ))),
        }
    }

    fn pin(
        &self,
        key: String,
        digest: Digest,
        size: Option<u64>,
        cloud: &DvcCloud,
    ) -> Result<Pin, VersionsError> {
        Ok(Pin {
            version_id: exact_version(cloud.version_id.as_deref(), self.manifest, &key)?,
            etag: cloud.etag.clone().filter(|e| !e.is_empty()),
            size,
            digest,
            manifest: self.manifest.to_owned(),
            key,
        })
    }

    fn read(&self, pointers: &mut Pointers) -> Result<(), VersionsError> {
        let out = self.out;
        let algorithm = self.algorithm()?;
        let key = format!("{}{}", self.key_dir, out.path);
        ObjectKey::new(key.as_str()).map_err(|e| self.bad(e.to_string()))?;
        if let Some(files) = &out.files {
            return self.read_files(files, &key, algorithm, pointers);
        }
        let value = out
            .md5
            .as_deref()
            .ok_or_else(|| self.bad("has no md5 and no files".into()))?;
        if let Some(listing) = value.strip_suffix(".dir") {
            let digest = Digest::parse("md5", listing).map_err(|e| self.bad(e))?;
            let at = Digest::parse(algorithm, listing).map_err(|e| self.bad(e))?;
            pointers.addressed.push(Addressed {
                key: format!("{}.dir", layout_key(&at)),
                digest,
                size: out.size,
                directory: true,
                file_algorithm: algorithm,
                path: out.path.clone(),
                manifest: self.manifest.to_owned(),
            });
            return Ok(());
        }
        let digest = Digest::parse(algorithm, value).map_err(|e| self.bad(e))?;
        match self.cloud(&out.cloud, "")? {
            Some(cloud) => pointers.pins.push(self.pin(key, digest, out.size, cloud)?),
            None => pointers.addressed.push(Addressed {
                key: layout_key(&digest),
                digest,
                size: out.size,
                directory: false,
                file_algorithm: algorithm,
                path: out.path.clone(),
                manifest: self.manifest.to_owned(),
            }),
        }
        Ok(())
    }

    /// A version-aware directory: a pin per file, and its listing.
    fn read_files(
        &self,
        files: &[DvcFileEntry],
        key: &str,
        algorithm: &str,
        pointers: &mut Pointers,
    ) -> Result<(), VersionsError> {
        if files.is_empty() {
            return Err(
                self.bad("lists no files (is it pushed to a version-aware remote yet?)".into())
            );
        }
        if files.len() > MAX_DIRECTORY_FILES {
            return Err(self.bad(format!("lists more than {MAX_DIRECTORY_FILES} files")));
        }
        let mut listed = Vec::with_capacity(files.len());
        for file in files {
            let what = format!("file {:?} ", file.relpath);
            let file_key = format!("{key}/{}", file.relpath);
            ObjectKey::new(file_key.as_str()).map_err(|e| self.bad(format!("{what}: {e}")))?;
            let value = file
                .md5
                .as_deref()
                .ok_or_else(|| self.bad(format!("{what}has no md5")))?;
            let digest =
                Digest::parse(algorithm, value).map_err(|e| self.bad(format!("{what}: {e}")))?;
            let cloud =
                self.cloud(&file.cloud, &what)?
                    .ok_or_else(|| VersionsError::NoExactVersion {
                        path: self.manifest.to_owned(),
                        key: file_key.clone(),
                    })?;
            listed.push((file.relpath.clone(), value.to_owned()));
            pointers
                .pins
                .push(self.pin(file_key, digest, file.size, cloud)?);
        }
        let bytes = listing_bytes(&listed);
        let digest = Digest::Md5(Digest::Md5(String::new()).of(&bytes));
        if let Some(recorded) = self.out.md5.as_deref() {
            let recorded = recorded.strip_suffix(".dir").unwrap_or(recorded);
            if recorded != digest.value() {
                return Err(self.bad(format!(
                    "its files hash to the listing {}.dir, not its md5 {recorded}.dir",
                    digest.value()
                )));
            }
        }
        pointers.listings.push(Listing {
            digest,
            bytes,
            path: self.out.path.clone(),
            manifest: self.manifest.to_owned(),
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests;
