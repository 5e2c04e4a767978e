//! Resolving DVC outputs on content-addressed remotes into exact pins.
//!
//! A content-addressed output ([`Addressed`]) names its bytes by digest:
//! they live at the remote's cache-layout key, and any version there holds
//! them. Resolving reads that key's *current* version:
//!
//! - a file becomes a [`Pin`] on that exact version, with the output's
//!   size (if recorded) and digest; no etag is pinned, since the key's
//!   name is the content's identity. `fetch` then checks the digest of
//!   the bytes read;
//! - a directory's `.dir` object is read whole (at most
//!   [`MAX_MANIFEST_BYTES`]), its MD5 checked against the output's, and
//!   parsed: each file it lists becomes a content-addressed file resolved
//!   as above, and the listing is kept to be installed beside the files.
//!
//! A key the store does not have, or a `.dir` that does not hash to its
//! name, is a [`Problem`] of that output; every output is tried.

use futures::StreamExt;

use super::digest::Digest;
use super::dvc::{Addressed, Listing, Pointers, layout_key, parse_listing};
use super::error::VersionsError;
use super::pins::{MAX_MANIFEST_BYTES, Pin};
use super::verify::{Problem, WORKERS};
use custodian_object::ObjectStore;
use custodian_object::ObjectStoreExt;

/// What [`resolve`] found.
#[derive(Debug, Default)]
pub struct Resolved {
    /// Every pin: the exact ones first, then one per content-addressed
    /// file (a directory's files included).
    pub pins: Vec<Pin>,
    /// Every listing: the rebuilt ones, then those of the directories
    /// read.
    pub listings: Vec<Listing>,
    /// Outputs that could not be resolved.
    pub problems: Vec<Problem>,
}

/// How a problem names an output: its key, and its workspace path.
fn name(addressed: &Addressed) -> String {
    format!("{} ({})", addressed.key, addressed.path)
}

fn problem(addressed: &Addressed, error: VersionsError) -> Problem {
    Problem {
        pin: name(addressed),
        manifest: addressed.manifest.clone(),
        error,
    }
}

/// Resolves every content-addressed output of `pointers` on `store` (see
/// the module doc), keeping its exact pins and listings.
pub async fn resolve(store: &dyn ObjectStore, pointers: Pointers) -> Resolved {
    let mut resolved = Resolved {
        pins: pointers.pins,
        listings: pointers.listings,
        problems: Vec::new(),
    };
    let mut files: Vec<Addressed> = Vec::new();
    for output in &pointers.addressed {
        if !output.directory {
            files.push(output.clone());
            continue;
        }
        match read_directory(store, output).await {
            Ok((listing, listed)) => {
                resolved.listings.push(listing);
                files.extend(listed);
            }
            Err(error) => resolved.problems.push(problem(output, error)),
        }
    }
    let mut outcomes: Vec<(usize, Result<Pin, VersionsError>)> =
        futures::stream::iter(files.iter().enumerate())
            .map(|(index, file)| async move { (index, current_pin(store, file).await) })
            .buffer_unordered(WORKERS)
            .collect()
            .await;
    outcomes.sort_by_key(|(index, _)| *index);
    for (index, outcome) in outcomes {
        match outcome {
            Ok(pin) => resolved.pins.push(pin),
            Err(error) => resolved.problems.push(problem(&files[index], error)),
        }
    }
    resolved
}

/// The pin on the current version of `file`'s key.
async fn current_pin(store: &dyn ObjectStore, file: &Addressed) -> Result<Pin, VersionsError> {
    let meta = store
        .head(&file.key)
        .await
        .map_err(|source| VersionsError::Store {
            object: file.key.clone(),
            source,
        })?;
    let version_id = meta
        .version_id
        .filter(|v| !v.is_empty() && v != "null")
        .ok_or_else(|| VersionsError::NoExactVersion {
            path: file.manifest.clone(),
            key: file.key.clone(),
        })?;
    Ok(Pin {
        key: file.key.clone(),
        version_id,
        etag: None,
        size: file.size,
        digest: file.digest.clone(),
        manifest: file.manifest.clone(),
    })
}

/// Reads and checks a directory's `.dir` object; its listing and the
/// files it lists.
async fn read_directory(
    store: &dyn ObjectStore,
    directory: &Addressed,
) -> Result<(Listing, Vec<Addressed>), VersionsError> {
    let store_error = |source| VersionsError::Store {
        object: directory.key.clone(),
        source,
    };
    let meta = store.head(&directory.key).await.map_err(store_error)?;
    // A listing larger than a manifest may be would exhaust memory.
    if meta.size > MAX_MANIFEST_BYTES {
        return Err(VersionsError::Manifest {
            path: directory.key.clone(),
            reason: format!("larger than {MAX_MANIFEST_BYTES} bytes"),
        });
    }
    let version_id = meta.version_id.unwrap_or_default();
    let (_, bytes) = store
        .get_version(&directory.key, &version_id)
        .await
        .map_err(store_error)?;
    let actual = directory.digest.of(&bytes);
    if actual != directory.digest.value() {
        return Err(VersionsError::DigestMismatch {
            object: format!("{}@{version_id}", directory.key),
            algorithm: directory.digest.algorithm(),
            expected: directory.digest.value().to_owned(),
            actual,
        });
    }
    let corrupt = |reason: String| VersionsError::Manifest {
        path: format!("{}@{version_id}", directory.key),
        reason,
    };
    let mut files = Vec::new();
    for (relpath, md5) in parse_listing(&bytes).map_err(corrupt)? {
        let digest = Digest::parse(directory.file_algorithm, &md5)
            .map_err(|e| corrupt(format!("{relpath:?}: {e}")))?;
        files.push(Addressed {
            key: layout_key(&digest),
            digest,
            size: None,
            directory: false,
            file_algorithm: directory.file_algorithm,
            path: format!("{}/{relpath}", directory.path),
            manifest: directory.manifest.clone(),
        });
    }
    let listing = Listing {
        digest: directory.digest.clone(),
        bytes: bytes.to_vec(),
        path: directory.path.clone(),
        manifest: directory.manifest.clone(),
    };
    Ok((listing, files))
}
