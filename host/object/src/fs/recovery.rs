//! Opening a store: the format record, crash recovery, and the bootstrap
//! report.
//!
//! `format` (JSON `{"format":3,"versioned":…}`) is written once, durably,
//! when the store is created, under the arbiter so that two processes
//! creating one store agree. Its `format` fixes for the store's life how
//! keys are spelled ([`Spelling`]) and whether small publishes go through
//! the journal ([`Format`]): this build creates format 3 and opens
//! formats 1 to 3, each as it was made, so a store made by an earlier
//! build keeps working as it is, with no migration (an earlier build
//! refuses a newer format as `Unsupported`: one that ignored the journal
//! could lose what it holds). A store keeps its versioning mode for life:
//! opening it with the other mode is refused, because an unversioned
//! opener would silently destroy history (it removes superseded versions)
//! and a versioned one would start keeping history nobody asked for.
//!
//! Recovery on open repairs what a crash can leave, never disturbing a
//! live writer in another process:
//! - publishes the journal holds but the filesystem may not (it settles
//!   the journal, see `journal`), before anything else is judged;
//! - staging files whose writer is gone: each writer holds a `flock` on
//!   its own staging file while it writes, so recovery deletes exactly
//!   the files it can lock (a writer that had not locked its new file
//!   yet sees it gone and makes another; see `durable`);
//! - on an unversioned store, versions a publish superseded but had not
//!   yet removed when it crashed (under the arbiter, key by key), and
//!   version directories a delete emptied but had not yet removed;
//! - upload directories without a readable `meta` (a crash mid-abort).
//!
//! The unversioned sweep reads every key's directory, so opening a large
//! unversioned store costs a walk of its tree; a versioned store needs no
//! walk (nothing a crash leaves there is visible to reads).

use custodian_base::detail::Detail;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{BootstrapReport, ObjectError};

use super::durable::{NewDirs, Staged, Target};
use super::ids::is_upload_id;
use super::journal::{Journal, Keep, Settled};
use super::layout::{Format, Layout, Spelling};
use super::lock::{Arbiter, Gate, Held};
use super::syncer::fsync_dir;
use super::uploads::read_meta;
use super::versions::version_ids;
use super::{FsStore, io_error};

/// Bound on the `format` record a reader will load.
const MAX_FORMAT_BYTES: u64 = 4096;
/// Pending uploads older than this are reported as abandoned.
const STALE_UPLOAD_MS: u64 = 24 * 60 * 60 * 1000;

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Record {
    format: u32,
    versioned: bool,
}

fn mode(versioned: bool) -> &'static str {
    if versioned {
        "versioned"
    } else {
        "unversioned"
    }
}

/// Creates the root and its layout if absent, checks (or writes) the
/// format record, and sets `layout`'s spelling from it.
pub(super) fn prepare(layout: &mut Layout, versioned: bool) -> Result<(), ObjectError> {
    let root = &layout.root;
    let existed = root.is_dir();
    std::fs::create_dir_all(root).map_err(|e| io_error("creating", root, e))?;
    if !existed && let Some(parent) = root.parent() {
        fsync_dir(parent)?;
    }
    let arbiter = Arbiter::open(&layout.lock)?;
    let held = arbiter.lock()?;
    for dir in [&layout.objects, &layout.staging, &layout.uploads] {
        make_dir(dir)?;
    }
    match std::fs::read(&layout.format) {
        Ok(bytes) => {
            if bytes.len() as u64 > MAX_FORMAT_BYTES {
                return Err(ObjectError::Corrupt(
                    format!(
                        "{} is {} bytes, not a format record",
                        layout.format.display(),
                        bytes.len()
                    )
                    .into(),
                ));
            }
            let format = check_format(layout, &bytes, versioned)?;
            layout.spelling = format.spelling;
            layout.journaled = format.journaled;
            // Made with the store; missing only if removed by hand.
            if format.journaled && make_dir(&layout.journal)? {
                fsync_dir(root)?;
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // A new store: the directories first (durably), then the
            // record that says the store exists.
            make_dir(&layout.journal)?;
            fsync_dir(root)?;
            let record = Record {
                format: Format::NEW.number(),
                versioned,
            };
            layout.spelling = Format::NEW.spelling;
            layout.journaled = Format::NEW.journaled;
            let ids = super::ids::Ids::default();
            let mut staged = Staged::create(layout, &ids)?;
            staged.write(&serde_json::to_vec(&record).expect("a format record serializes"))?;
            staged
                .seal()?
                .publish(
                    &held,
                    Target {
                        base: root,
                        dirs: &[],
                        name: super::layout::FORMAT_FILE,
                    },
                )?
                .sync()
        }
        Err(e) => Err(io_error("reading", &layout.format, e)),
    }
}

/// Writes the format record a build of `format` would have written in
/// `root`, so a test can open a store as that build left it.
#[cfg(test)]
pub(super) fn write_record_of(root: &Path, format: u32, versioned: bool) {
    let record = serde_json::to_vec(&Record { format, versioned }).expect("a record serializes");
    std::fs::write(root.join(super::layout::FORMAT_FILE), record)
        .expect("a format record is written");
}

/// The versioning mode the store at `root` was created with; `None` if
/// there is no store there yet.
pub(super) fn recorded_mode(root: &Path) -> Result<Option<bool>, ObjectError> {
    let layout = Layout::new(root)?;
    match std::fs::read(&layout.format) {
        Ok(bytes) => {
            let record: Record = serde_json::from_slice(&bytes).map_err(|e| {
                ObjectError::Corrupt(Detail::caused_by(
                    format!("format record {}", layout.format.display()),
                    e,
                ))
            })?;
            Ok(Some(record.versioned))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error("reading", &layout.format, e)),
    }
}

/// Creates directory `dir` if it is missing (not durably: the caller
/// syncs its parent); whether it did.
fn make_dir(dir: &Path) -> Result<bool, ObjectError> {
    match std::fs::create_dir(dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(io_error("creating", dir, e)),
    }
}

/// The format of a store whose format record is `bytes`, once its
/// versioning mode is checked.
fn check_format(layout: &Layout, bytes: &[u8], versioned: bool) -> Result<Format, ObjectError> {
    let record: Record = serde_json::from_slice(bytes).map_err(|e| {
        ObjectError::Corrupt(Detail::caused_by(
            format!("format record {}", layout.format.display()),
            e,
        ))
    })?;
    let Some(format) = Format::of_number(record.format) else {
        return Err(ObjectError::Unsupported(
            format!(
                "{} is a format {} store; this build reads formats 1 to 3",
                layout.root.display(),
                record.format
            )
            .into(),
        ));
    };
    if record.versioned != versioned {
        return Err(ObjectError::InvalidArgument(
            format!(
                "the store at {} was created {}; opening it {} is refused (a store keeps its \
             versioning mode for life)",
                layout.root.display(),
                mode(record.versioned),
                mode(versioned)
            )
            .into(),
        ));
    }
    Ok(format)
}

/// Every version directory below `objects/`.
fn version_dirs(objects: &Path, spelling: Spelling) -> Result<Vec<PathBuf>, ObjectError> {
    let mut found = Vec::new();
    let mut stack = vec![objects.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io_error("listing", &dir, e)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| io_error("listing", &dir, e))?;
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if spelling.is_versions_name(entry.file_name().as_encoded_bytes()) {
                found.push(entry.path());
            } else {
                stack.push(entry.path());
            }
        }
    }
    Ok(found)
}

impl FsStore {
    /// Settles `journal`, this store's (see `journal`), writing each file
    /// a crash lost back from its record.
    pub(super) fn settle_journal(
        &self,
        journal: &Journal,
        held: &Held<'_>,
        keep: Keep,
    ) -> Result<Settled, ObjectError> {
        journal.settle(held, keep, |lost, synced| {
            let mut staged = Staged::create(&self.layout, &self.ids)?;
            staged.write(lost.bytes)?;
            // The settle's flush makes its directories durable.
            staged.logged(synced).publish(
                held,
                Target {
                    base: &self.layout.objects,
                    dirs: lost.dirs,
                    name: lost.name,
                },
                &mut NewDirs::default(),
            )
        })
    }

    /// Repairs what a crash can leave; returns what it did, for
    /// `bootstrap`.
    pub(super) fn recover(&self) -> Result<Vec<String>, ObjectError> {
        let (removed, live) = self.sweep_staging()?;
        let mut notes = vec![format!(
            "recovery: removed {removed} abandoned staging file(s); left {live} of live writers"
        )];
        if let Some(journal) = &self.journal {
            let held = self.arbiter.lock()?;
            let settled = self.settle_journal(journal, &held, Keep::Nothing)?;
            notes.push(format!(
                "recovery: settled the journal: read {} segment(s), restored {} publish(es), \
                 redid {} removal(s)",
                settled.read, settled.restored, settled.removed
            ));
        }
        let mut superseded = 0;
        let mut emptied = 0;
        if !self.versioned {
            for dir in version_dirs(&self.layout.objects, self.layout.spelling)? {
                let held = self.settled()?;
                let mut ids = version_ids(&dir)?;
                ids.pop();
                for old in &ids {
                    if std::fs::remove_file(dir.join(old)).is_ok() {
                        superseded += 1;
                    }
                }
                if version_ids(&dir)?.is_empty() {
                    self.prune(&dir);
                    emptied += 1;
                }
                drop(held);
            }
            notes.push(format!(
                "recovery: removed {superseded} superseded version(s) and {emptied} empty key \
                 director(ies) of this unversioned store"
            ));
        }
        let broken = self.sweep_uploads()?;
        if broken > 0 {
            notes.push(format!(
                "recovery: removed {broken} incomplete upload director(ies)"
            ));
        }
        Ok(notes)
    }

    /// Deletes the staging files no live writer holds.
    fn sweep_staging(&self) -> Result<(usize, usize), ObjectError> {
        let staging = &self.layout.staging;
        let _gate = Gate::exclusive(&self.layout.gate)?;
        let (mut removed, mut live) = (0, 0);
        for entry in std::fs::read_dir(staging).map_err(|e| io_error("listing", staging, e))? {
            let entry = entry.map_err(|e| io_error("listing", staging, e))?;
            let path = entry.path();
            // Only regular files are staging files (opening anything else,
            // a FIFO say, could block recovery).
            if !entry.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            let Ok(file) = std::fs::File::open(&path) else {
                continue;
            };
            match file.try_lock() {
                // Unlocked: its writer has let go, or has not locked it
                // yet (and will see it gone, and make another). Gone by
                // now is fine: the writer published it (a rename) after
                // our open, or another process's recovery removed it
                // first.
                Ok(()) => match std::fs::remove_file(&path) {
                    Ok(()) => removed += 1,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io_error("removing", &path, e)),
                },
                Err(std::fs::TryLockError::WouldBlock) => live += 1,
                Err(std::fs::TryLockError::Error(e)) => return Err(io_error("locking", &path, e)),
            }
        }
        Ok((removed, live))
    }

    /// Removes upload directories that are not uploads (no readable
    /// `meta`).
    fn sweep_uploads(&self) -> Result<usize, ObjectError> {
        let uploads = &self.layout.uploads;
        let _held = self.settled()?;
        let mut removed = 0;
        for entry in std::fs::read_dir(uploads).map_err(|e| io_error("listing", uploads, e))? {
            let entry = entry.map_err(|e| io_error("listing", uploads, e))?;
            let is_upload = entry.file_name().to_str().is_some_and(is_upload_id)
                && read_meta(&entry.path())?.is_some();
            if !is_upload {
                let path = entry.path();
                let gone = if path.is_dir() {
                    std::fs::remove_dir_all(&path)
                } else {
                    std::fs::remove_file(&path)
                };
                if gone.is_ok() {
                    removed += 1;
                }
            }
        }
        Ok(removed)
    }

    /// `bootstrap`.
    pub(super) fn report(&self, prefix: &str) -> Result<BootstrapReport, ObjectError> {
        let mut report = BootstrapReport::default();
        report.notes.push(format!(
            "filesystem store at {} ({}, format {})",
            self.layout.root.display(),
            mode(self.versioned),
            Format {
                spelling: self.layout.spelling,
                journaled: self.layout.journaled,
            }
            .number()
        ));
        report.notes.push(
            "checksums: the CRC-64/NVME is validated on every publish and every read is checked \
             (whole bodies against it, ranges against 64 KiB block CRCs)"
                .into(),
        );
        report.notes.push(format!(
            "arbiter: flock on {} (local filesystems only; not NFS)",
            self.layout.lock.display()
        ));
        report.notes.extend(self.recovered.iter().cloned());
        // Writable: stage, seal and discard one file.
        let probe = Staged::create(&self.layout, &self.ids).and_then(|mut staged| {
            staged.write(b"probe")?;
            staged.seal()
        });
        if let Err(e) = probe {
            report.errors.push(format!(
                "{} is not writable: {e}",
                self.layout.root.display()
            ));
        }
        let now = self.clock.now_ms();
        let pending = self.pending_uploads(prefix)?;
        let stale = pending
            .iter()
            .filter(|u| {
                u.initiated_ms
                    .is_some_and(|t| now.saturating_sub(t) > STALE_UPLOAD_MS)
            })
            .count();
        if stale > 0 {
            report.warnings.push(format!(
                "{stale} upload(s) under {prefix:?} have been pending for over a day; abort them \
                 (list_uploads, abort_upload)"
            ));
        }
        if !pending.is_empty() {
            report.notes.push(format!(
                "{} upload(s) pending under {prefix:?}",
                pending.len()
            ));
        }
        Ok(report)
    }
}
