//! Fetching pinned versions into a content-addressed cache, all or
//! nothing.
//!
//! The cache is laid out as DVC's: the object with digest `d` lives at
//! `CACHE/d[..2]/d[2..]`, and a directory's listing at
//! `CACHE/d[..2]/d[2..].dir`. A pin whose file is already there with the
//! pinned size and digest is a hit: nothing is downloaded, but the pin is
//! still verified against the store ([`super::verify`]), so a cache never
//! vouches for a version the store no longer has. A miss is read with
//! `get_version` ([`WORKERS`] at a time; retried twice when the store is
//! unavailable or fails locally; pins larger than [`WHOLE_READ_MAX`] are
//! read in ranges after a `head_version`), following pending aliases and
//! archive hops as verify does; the version, size, etag and digest of
//! what was read are checked.
//!
//! **All or nothing**, as the seed fetches: every miss is downloaded into
//! a scratch directory inside the cache (`CACHE/.custodian-fetch-*`, so
//! installing is a rename on the same filesystem), checked and fsynced.
//! Only when every pin passed (hits verified, misses downloaded and
//! checked) is anything installed: each file renamed into place and its
//! directory fsynced, so a cache file is always whole. Any failure
//! installs nothing and removes the scratch directory. A fetch killed
//! before installing leaves only its scratch directory, which the next
//! fetch into the cache removes (its lock, an `flock` on `.lock` inside
//! it, is free once its owner is gone); one killed while installing
//! leaves some files installed, each whole and verified.

use std::future::Future;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};

use super::aliases::Aliases;
use super::digest::{Digest, Hasher};
use super::dvc::Listing;
use super::error::VersionsError;
use super::hops::HopPolicy;
use super::pins::Pin;
use super::registry::{Registries, resolve};
use super::target::Target;
use super::verify::{Checked, Problem, VerifyReport, Via, WORKERS, meta_mismatches, verify};
use custodian_base::buffer;
use custodian_object::ObjectStoreExt;
use custodian_object::{ObjectError, ObjectStore};

/// Attempts of one download when the store is unavailable or fails
/// locally: transient failures are retried twice, with a short pause,
/// and a store that keeps failing fails the pin instead of stalling the
/// run.
pub const DOWNLOAD_ATTEMPTS: u32 = 3;

/// Pins of at most this many bytes (or of unknown size) are read with
/// one `get_version`; larger ones in ranges of [`RANGE_BYTES`], so the
/// [`WORKERS`] downloads in flight hold at most that much each.
pub const WHOLE_READ_MAX: u64 = 16 << 20;
/// The range size of large downloads.
pub const RANGE_BYTES: u64 = 16 << 20;

/// Where `digest`'s bytes live in the cache at `cache`.
pub fn cache_path(cache: &Path, digest: &Digest) -> PathBuf {
    let value = digest.value();
    cache.join(&value[..2]).join(&value[2..])
}

/// What [`fetch`] did.
#[derive(Debug, Default)]
pub struct FetchReport {
    /// Pins downloaded into the cache, in manifest order.
    pub downloaded: Vec<Checked>,
    /// Bytes downloaded.
    pub downloaded_bytes: u64,
    /// Pins already in the cache (and verified against the store).
    pub cached: Vec<Checked>,
    /// Bytes of those.
    pub cached_bytes: u64,
    /// Pins that failed, in manifest order.
    pub problems: Vec<Problem>,
    /// Directory listings installed (or already in the cache).
    pub listings: usize,
    /// Whether the downloads were installed: only when no pin failed.
    pub installed: bool,
}

impl FetchReport {
    /// No pin failed.
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }

    /// The summary as JSON.
    pub fn to_json(&self) -> Value {
        json!({
            "ok": self.ok(),
            "downloaded": self.downloaded.len(),
            "downloaded_bytes": self.downloaded_bytes,
            "cached": self.cached.len(),
            "cached_bytes": self.cached_bytes,
            "fetched": self.downloaded,
            "listings": self.listings,
            "installed": self.installed,
            "problems": self.problems.iter().map(Problem::to_json).collect::<Vec<_>>(),
        })
    }
}

/// Brings every pin's bytes, and every listing, into `cache`, all or
/// nothing (see the module doc); `progress` counts finished downloads.
///
/// # Errors
/// [`VersionsError::Unversioned`], or [`VersionsError::Io`] when the cache
/// or its scratch directory cannot be made or installing fails; each
/// pin's own failure is a [`Problem`] (and then nothing is installed).
pub async fn fetch(
    store: &dyn ObjectStore,
    pins: &[Pin],
    listings: &[Listing],
    aliases: &Aliases,
    hops: &dyn HopPolicy,
    cache: &Path,
    progress: Option<&indicatif::ProgressBar>,
) -> Result<FetchReport, VersionsError> {
    super::verify::require_versioned(store, "being read")?;
    std::fs::create_dir_all(cache).map_err(|e| VersionsError::io(cache, e))?;
    let owned = cache.to_owned();
    tokio::task::spawn_blocking(move || Scratch::remove_stale(&owned))
        .await
        .map_err(|e| VersionsError::io(cache, std::io::Error::other(e)))?;
    let mut hits = Vec::new();
    let mut misses = Vec::new();
    let mut probes = futures::stream::iter(pins.iter().enumerate())
        .map(|(index, pin)| {
            let path = cache_path(cache, &pin.digest);
            let (digest, size) = (pin.digest.clone(), pin.size);
            async move {
                let hit = tokio::task::spawn_blocking(move || cached(&path, &digest, size))
                    .await
                    .unwrap_or(false);
                (index, hit)
            }
        })
        .buffer_unordered(WORKERS);
    while let Some((index, hit)) = probes.next().await {
        if hit {
            hits.push(pins[index].clone());
        } else {
            misses.push(index);
        }
    }
    drop(probes);
    misses.sort_unstable();
    let mut report = FetchReport::default();
    let VerifyReport {
        checked, problems, ..
    } = verify(store, &hits, aliases, hops).await?;
    report.cached_bytes = checked
        .iter()
        .filter_map(|c| hits.iter().find(|p| p.name() == c.pin).and_then(|p| p.size))
        .sum();
    report.cached = checked;
    report.problems = problems;
    if let Some(bar) = progress {
        bar.set_length(misses.len() as u64);
    }
    let scratch = Scratch::new(cache)?;
    let registries = Registries::new(store);
    let mut downloads = futures::stream::iter(misses)
        .map(|index| {
            let pin = &pins[index];
            let registries = &registries;
            let scratch = &scratch;
            async move {
                (
                    index,
                    download(store, registries, hops, pin, aliases, scratch).await,
                )
            }
        })
        .buffer_unordered(WORKERS);
    let mut outcomes = Vec::new();
    while let Some(outcome) = downloads.next().await {
        if let Some(bar) = progress {
            bar.inc(1);
        }
        outcomes.push(outcome);
    }
    drop(downloads);
    outcomes.sort_by_key(|(index, _)| *index);
    let mut ready = Vec::new();
    for (index, outcome) in outcomes {
        match outcome {
            Ok((checked, size, file)) => {
                report.downloaded.push(checked);
                report.downloaded_bytes += size;
                ready.push((cache_path(cache, &pins[index].digest), file));
            }
            Err(error) => report.problems.push(Problem::new(&pins[index], error)),
        }
    }
    if !report.ok() {
        // Dropping the scratch directory removes every download: off the
        // async workers, since that may be many files.
        let _ = tokio::task::spawn_blocking(move || drop(scratch)).await;
        return Ok(report);
    }
    for listing in listings {
        let path = listing_path(cache, listing);
        if std::fs::read(&path).is_ok_and(|bytes| bytes == listing.bytes) {
            continue;
        }
        let mut staged = Staged::new(scratch.path(), &listing.digest)?;
        staged.write(&listing.bytes)?;
        ready.push((path, staged.finish(&listing.path)?));
    }
    report.listings = listings.len();
    tokio::task::spawn_blocking(move || {
        let _scratch = scratch;
        for (path, file) in ready {
            file.install(&path)?;
        }
        Ok::<_, VersionsError>(())
    })
    .await
    .map_err(|e| VersionsError::io(cache, std::io::Error::other(e)))??;
    report.installed = true;
    Ok(report)
}

/// Where `listing` lives in the cache at `cache`: beside its files, as
/// `d[..2]/d[2..].dir`.
pub fn listing_path(cache: &Path, listing: &Listing) -> PathBuf {
    let mut path = cache_path(cache, &listing.digest).into_os_string();
    path.push(".dir");
    PathBuf::from(path)
}

/// A fetch's scratch directory in the cache, locked while it lives and
/// removed when dropped.
struct Scratch {
    dir: tempfile::TempDir,
    _lock: std::fs::File,
}

/// The scratch directories' name prefix: hidden, and no two hex digits,
/// so DVC never takes one for a cache directory.
const SCRATCH_PREFIX: &str = ".custodian-fetch-";

/// A scratch directory without its lock file is left alone this long:
/// its owner may be between creating it and locking it.
const UNLOCKED_GRACE: Duration = Duration::from_secs(60);

impl Scratch {
    fn new(cache: &Path) -> Result<Self, VersionsError> {
        let dir = tempfile::Builder::new()
            .prefix(SCRATCH_PREFIX)
            .tempdir_in(cache)
            .map_err(|e| VersionsError::io(cache, e))?;
        let lock_path = dir.path().join(".lock");
        let lock =
            std::fs::File::create(&lock_path).map_err(|e| VersionsError::io(&lock_path, e))?;
        lock.lock().map_err(|e| VersionsError::io(&lock_path, e))?;
        Ok(Self { dir, _lock: lock })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Removes the scratch directories of fetches that died: those whose
    /// lock nobody holds. Failures are ignored: a leftover costs disk
    /// space, not correctness.
    fn remove_stale(cache: &Path) {
        let Ok(entries) = std::fs::read_dir(cache) else {
            return;
        };
        for entry in entries.flatten() {
            if !entry
                .file_name()
                .to_string_lossy()
                .starts_with(SCRATCH_PREFIX)
            {
                continue;
            }
            let dir = entry.path();
            let stale = match std::fs::File::open(dir.join(".lock")) {
                Ok(lock) => lock.try_lock().is_ok(),
                Err(_) => entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|at| at.elapsed().ok())
                    .is_some_and(|age| age > UNLOCKED_GRACE),
            };
            if stale {
                let _ = std::fs::remove_dir_all(&dir);
            }
        }
    }
}

/// Whether `path` holds bytes of `size` (if pinned) with `digest`.
fn cached(path: &Path, digest: &Digest, size: Option<u64>) -> bool {
    let Ok(mut file) = std::fs::File::open(path) else {
        return false;
    };
    match file.metadata() {
        Ok(meta) if meta.is_file() && size.is_none_or(|size| size == meta.len()) => {}
        _ => return false,
    }
    let mut hasher = digest.hasher();
    let mut buffer = buffer::zeroed(1 << 20);
    loop {
        match file.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => hasher.update(&buffer[..n]),
            Err(_) => return false,
        }
    }
    hasher.finish() == digest.value()
}

/// `call`, retried on transient failures (see [`DOWNLOAD_ATTEMPTS`]).
async fn with_retries<T, F, Fut>(mut call: F) -> Result<T, ObjectError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ObjectError>>,
{
    let mut attempt = 1;
    loop {
        match call().await {
            Err(ObjectError::Unavailable(_) | ObjectError::Io(_))
                if attempt < DOWNLOAD_ATTEMPTS =>
            {
                tokio::time::sleep(Duration::from_millis(100 << (2 * attempt))).await;
                attempt += 1;
            }
            other => return other,
        }
    }
}

fn join_error(pin: &Pin, error: tokio::task::JoinError) -> VersionsError {
    VersionsError::Io {
        path: pin.name(),
        source: std::io::Error::other(error),
    }
}

async fn download(
    store: &dyn ObjectStore,
    registries: &Registries<'_>,
    hops: &dyn HopPolicy,
    pin: &Pin,
    aliases: &Aliases,
    scratch: &Scratch,
) -> Result<(Checked, u64, Verified), VersionsError> {
    let target = aliases.target(pin)?;
    let ranged = target.size.is_some_and(|size| size > WHOLE_READ_MAX);
    let (at, hops_taken, meta, body) = if ranged {
        let probe = |target: Target| async move {
            with_retries(|| store.head_version(&target.key, &target.version_id)).await
        };
        let resolved = resolve(target, registries, hops, probe).await?;
        (resolved.at, resolved.hops, resolved.found, None)
    } else {
        let probe = |target: Target| async move {
            with_retries(|| store.get_version(&target.key, &target.version_id)).await
        };
        let resolved = resolve(target, registries, hops, probe).await?;
        let (meta, bytes) = resolved.found;
        (resolved.at, resolved.hops, meta, Some(bytes))
    };
    let mut fields = meta_mismatches(pin, &at, &meta);
    if body
        .as_ref()
        .is_some_and(|bytes| bytes.len() as u64 != meta.size)
    {
        fields.push("length of the bytes read");
    }
    let found = at.name();
    if !fields.is_empty() {
        return Err(VersionsError::Mismatch {
            object: format!("{} (read as {found})", pin.name()),
            fields,
        });
    }
    let mut staged = Staged::new(scratch.path(), &pin.digest)?;
    match body {
        Some(bytes) => {
            staged = tokio::task::spawn_blocking(move || staged.write(&bytes).map(|()| staged))
                .await
                .map_err(|e| join_error(pin, e))??;
        }
        None => {
            let mut offset = 0;
            while offset < meta.size {
                let range = offset..meta.size.min(offset + RANGE_BYTES);
                let bytes = with_retries(|| {
                    store.get_version_range(&at.key, &at.version_id, range.clone())
                })
                .await
                .map_err(|source| VersionsError::Store {
                    object: found.clone(),
                    source,
                })?;
                if bytes.len() as u64 != range.end - range.start {
                    return Err(VersionsError::Mismatch {
                        object: format!("{} (read as {found})", pin.name()),
                        fields: vec!["length of the bytes read"],
                    });
                }
                offset = range.end;
                staged = tokio::task::spawn_blocking(move || staged.write(&bytes).map(|()| staged))
                    .await
                    .map_err(|e| join_error(pin, e))??;
            }
        }
    }
    let name = pin.name();
    let file = tokio::task::spawn_blocking(move || staged.finish(&name))
        .await
        .map_err(|e| join_error(pin, e))??;
    Ok((
        Checked {
            pin: pin.name(),
            manifest: pin.manifest.clone(),
            found,
            hops: hops_taken,
            via: Via::Head,
        },
        meta.size,
        file,
    ))
}

/// Bytes being downloaded: a temporary file in the scratch directory
/// and the digest of what was written to it.
struct Staged {
    file: tempfile::NamedTempFile,
    hasher: Hasher,
    digest: Digest,
}

impl Staged {
    fn new(scratch: &Path, digest: &Digest) -> Result<Self, VersionsError> {
        Ok(Self {
            file: tempfile::NamedTempFile::new_in(scratch)
                .map_err(|e| VersionsError::io(scratch, e))?,
            hasher: digest.hasher(),
            digest: digest.clone(),
        })
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), VersionsError> {
        self.hasher.update(bytes);
        self.file
            .write_all(bytes)
            .map_err(|e| VersionsError::io(self.file.path(), e))
    }

    /// Checks the digest (`name` names the object in a mismatch), then
    /// fsyncs the file: it is ready to install.
    fn finish(self, name: &str) -> Result<Verified, VersionsError> {
        let actual = self.hasher.finish();
        if actual != self.digest.value() {
            return Err(VersionsError::DigestMismatch {
                object: name.to_owned(),
                algorithm: self.digest.algorithm(),
                expected: self.digest.value().to_owned(),
                actual,
            });
        }
        self.file
            .as_file()
            .sync_all()
            .map_err(|e| VersionsError::io(self.file.path(), e))?;
        Ok(Verified(self.file))
    }
}

/// A downloaded file whose digest matched, synced, in the scratch
/// directory.
struct Verified(tempfile::NamedTempFile);

impl Verified {
    /// Renames the file to `path` and fsyncs its directory: the cache
    /// file appears whole or not at all.
    fn install(self, path: &Path) -> Result<(), VersionsError> {
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(|e| VersionsError::io(dir, e))?;
        self.0
            .persist(path)
            .map_err(|e| VersionsError::io(path, e.error))?;
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| VersionsError::io(dir, e))
    }
}
