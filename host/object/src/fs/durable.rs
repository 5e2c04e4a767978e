//! How anything is published: stage → fsync → rename → fsync dir (or,
//! for a small whole body on a store with a journal, stage → journal →
//! rename).
//!
//! The steps are split across three types so that the arbiter is held
//! only around the rename, yet no call site can skip a step:
//!
//! 1. [`Staged::create`] makes a uniquely named file in `staging/` and
//!    locks it (the lock marks a live writer: recovery deletes only
//!    staging files it can lock; one it removed before the lock was
//!    taken is seen, and made again). The caller writes the bytes.
//! 2. [`Staged::seal`] fsyncs the file (`fdatasync`: data and size) and
//!    is the only way to get a [`Sealed`] file.
//! 3. [`Sealed::publish`], which requires proof that the arbiter is held,
//!    creates any missing directories on the way to the target (fsyncing
//!    the parent of each new directory, so the new name is durable),
//!    and renames the file in (atomic: readers see the old directory or
//!    the new one). It returns an [`Unsynced`].
//! 4. [`Unsynced::sync`] fsyncs the target directory, so the rename is
//!    durable; only then may the publish be acknowledged.
//!
//! Step 4 may run after the arbiter is released, so concurrent publishes
//! wait on their directory syncs side by side instead of one after the
//! other. That is safe because a directory fsync makes durable every
//! name the directory holds when it runs, not only the caller's: a writer
//! that saw our version under the arbiter (a conditional publish of the
//! same key, which lives in the same directory) and was acknowledged has
//! fsynced that directory after our rename, so what it built on survives
//! whenever it does. Readers never took the arbiter, so they could always
//! see a rename before its sync. New directories are different: the
//! fsyncs of their parents stay under the arbiter, because a writer that
//! finds a directory already there cannot tell whether its name is
//! durable yet.
//!
//! A small whole publish on a store with a journal takes another way to
//! the same guarantees: the file is not synced, and a durable journal
//! record of its bytes stands in for steps 2 and 4 ([`Logged`];
//! `journal`).
//!
//! A crash before the rename leaves a staging file, which recovery
//! removes; a crash after the final fsync has published. In between the
//! rename may or may not have reached the disk, so the key shows the old
//! or the new generation, never a torn one: the file was complete and
//! durable before its name existed.
//!
//! Dropping a `Staged` or `Sealed` that was not published deletes its
//! file, so every failure path (a checksum mismatch, a failed condition,
//! an I/O error) leaves nothing in `staging/`.
//!
//! fsyncs per publish: one for the file, one for the target directory,
//! plus one per directory created on the way (a key's first publish);
//! only the last kind is waited for under the arbiter. When the target
//! directory itself was created by the publish (a key's first version),
//! its sync is started on a helper (`syncer`) right after the rename, so
//! it runs while the new directories' parents are synced under the
//! arbiter rather than after them: a new key's publish waits for two
//! syncs in a row, not three, and the arbiter is held no longer.

use custodian_base::detail::Detail;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::ObjectError;

use super::ids::Ids;
use super::io_error;
use super::journal::Synced;
use super::layout::Layout;
use super::lock::Held;
use super::syncer::{self, fsync_dir};
use super::syncs;

/// What a test runs between a staging file's create and its lock.
#[cfg(test)]
type BeforeLock = Box<dyn FnMut(&Path)>;

#[cfg(test)]
thread_local! {
    /// Run by [`Staged::create`] on this thread between a staging file's
    /// create and its lock: the window a recovery sweep may fall in.
    pub(super) static BEFORE_LOCK: std::cell::RefCell<Option<BeforeLock>> =
        const { std::cell::RefCell::new(None) };
}

/// A staging file, deleted on drop unless it was published.
#[derive(Debug)]
struct StagingFile {
    file: File,
    path: PathBuf,
    published: bool,
}

impl StagingFile {
    /// Renames the file to `target`, creating missing directories on the
    /// way (their parents added to `created`); the target's directory,
    /// and whether this created it. From then on the file is published,
    /// not ours to delete.
    fn rename_to(
        &mut self,
        target: Target<'_>,
        created: &mut NewDirs,
    ) -> Result<(PathBuf, bool), ObjectError> {
        let mut dir = target.base.to_path_buf();
        dir.extend(target.dirs);
        let destination = dir.join(target.name);
        // Renamed first: the directories almost always exist (every
        // publish of a key but its first), and a `mkdir` that finds its
        // directory there costs a path walk. Any failure takes the long
        // way, which makes the missing directories and reports the rest
        // as it always did.
        let made = match std::fs::rename(&self.path, &destination) {
            Ok(()) => false,
            Err(_) => {
                let made = create_dirs(target.base, target.dirs, created)?;
                std::fs::rename(&self.path, &destination)
                    .map_err(|e| io_error("publishing", &destination, e))?;
                made
            }
        };
        self.published = true;
        Ok((dir, made))
    }
}

impl Drop for StagingFile {
    fn drop(&mut self) {
        if !self.published {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// A file being written in `staging/`, locked by its writer.
#[derive(Debug)]
pub(super) struct Staged(StagingFile);

/// A staged file whose bytes are durable, waiting to be renamed in.
#[derive(Debug)]
pub(super) struct Sealed(StagingFile);

/// A staged file whose exact bytes a durable journal record holds,
/// waiting to be renamed in: the record restores it after a crash, so
/// neither it nor its directories are synced (`journal`).
#[derive(Debug)]
pub(super) struct Logged(StagingFile);

/// What a queued publish brings: a file synced on its own, or one a
/// journal record will hold (`journal`).
#[derive(Debug)]
pub(super) enum Payload {
    Sealed(Sealed),
    Logged {
        staged: Staged,
        /// Exactly the bytes written to `staged`.
        bytes: Vec<u8>,
    },
}

/// A published name whose directory is not fsynced yet: visible, but
/// not certain to survive a crash until [`Unsynced::sync`] returns.
#[derive(Debug)]
#[must_use = "a publish is durable only once `sync` has returned"]
pub(super) enum Unsynced {
    /// A directory that was there before: synced by `sync`.
    Dir(PathBuf),
    /// A directory the publish created, whose sync a helper started at
    /// the rename.
    Started(syncer::Pending),
    /// A name the journal restores after a crash: nothing to sync.
    Journaled,
}

impl Unsynced {
    /// fsyncs the directory the name went into (or waits for the sync
    /// started at the rename), with or without the arbiter (see the
    /// module doc).
    pub fn sync(self) -> Result<(), ObjectError> {
        match self {
            Self::Dir(dir) => fsync_dir(&dir),
            Self::Started(pending) => syncer::first_failure(pending.wait()),
            Self::Journaled => Ok(()),
        }
    }
}

/// Where a sealed file goes: `base/dirs.../name`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Target<'a> {
    /// An existing directory (`objects/`, `uploads/`).
    pub base: &'a Path,
    /// Directories below `base`, created if missing.
    pub dirs: &'a [&'a str],
    /// The file's name in the innermost directory; an existing file of
    /// that name is replaced.
    pub name: &'a str,
}

impl Staged {
    /// Creates and locks a fresh staging file.
    ///
    /// Between the create and the lock, recovery in another process may
    /// find the file unlocked, take its writer for dead, and remove it
    /// (it removes only files it can lock, holding its lock across the
    /// removal). Either the lock then fails, or it succeeds on a file no
    /// name points at any more; both are seen here and the file is made
    /// again under a new name. A file locked and still named is safe from
    /// then on: recovery cannot lock it. (Earlier builds closed that
    /// window with the staging gate, a shared `flock` taken around the
    /// create and the lock: three more system calls per publish.)
    pub fn create(layout: &Layout, ids: &Ids) -> Result<Self, ObjectError> {
        // Each lost race needs a recovery sweeping at that very moment;
        // losing this many in a row means something else removes files
        // from `staging/`.
        const ATTEMPTS: usize = 8;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let path = layout.staging.join(ids.staging_name());
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)
                .map_err(|e| io_error("creating staging file", &path, e))?;
            let staged = Self(StagingFile {
                file,
                path,
                published: false,
            });
            #[cfg(test)]
            BEFORE_LOCK.with_borrow_mut(|hook| {
                if let Some(hook) = hook {
                    hook(&staged.0.path);
                }
            });
            let lost = match staged.0.file.try_lock() {
                Ok(()) => {
                    staged
                        .0
                        .file
                        .metadata()
                        .map_err(|e| io_error("checking", &staged.0.path, e))?
                        .nlink()
                        == 0
                }
                Err(std::fs::TryLockError::WouldBlock) => true,
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(ObjectError::Io(Detail::caused_by(
                        format!("locking {}", staged.0.path.display()),
                        e,
                    )));
                }
            };
            if !lost {
                return Ok(staged);
            }
            if attempt == ATTEMPTS {
                return Err(ObjectError::Io(
                    format!(
                        "staging files in {} were removed as soon as they were made, \
                         {ATTEMPTS} times in a row",
                        layout.staging.display()
                    )
                    .into(),
                ));
            }
        }
    }

    /// Appends `bytes`.
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), ObjectError> {
        self.0
            .file
            .write_all(bytes)
            .map_err(|e| io_error("writing", &self.0.path, e))
    }

    /// Leaves the next `len` bytes as a hole for [`Staged::write_at`] to
    /// fill before sealing (a header whose fields are known only after
    /// the body that follows it).
    pub fn skip(&mut self, len: u64) -> Result<(), ObjectError> {
        let len = i64::try_from(len)
            .map_err(|_| ObjectError::InvalidArgument(format!("a hole of {len} bytes").into()))?;
        self.0
            .file
            .seek(SeekFrom::Current(len))
            .map(drop)
            .map_err(|e| io_error("seeking in", &self.0.path, e))
    }

    /// Writes `bytes` at `offset`, leaving the append position alone.
    pub fn write_at(&mut self, bytes: &[u8], offset: u64) -> Result<(), ObjectError> {
        self.0
            .file
            .write_all_at(bytes, offset)
            .map_err(|e| io_error("writing", &self.0.path, e))
    }

    /// Makes the bytes written so far durable.
    pub fn seal(self) -> Result<Sealed, ObjectError> {
        syncs::count(syncs::Kind::File);
        self.0
            .file
            .sync_data()
            .map_err(|e| io_error("fsyncing", &self.0.path, e))?;
        Ok(Sealed(self.0))
    }

    /// The file, once a durable journal record holds exactly the bytes
    /// written to it (`_synced`).
    pub fn logged(self, _synced: &Synced) -> Logged {
        Logged(self.0)
    }
}

impl Logged {
    /// Renames the file to `target`, creating any missing directories on
    /// the way, and syncs nothing: the journal's record restores the file
    /// and its directories after a crash. The arbiter must be held. The
    /// directories whose entries it created are added to `created`: a
    /// synced publish that lands below one must have it synced first
    /// (`journal`).
    pub fn publish(
        mut self,
        _held: &Held<'_>,
        target: Target<'_>,
        created: &mut NewDirs,
    ) -> Result<(), ObjectError> {
        self.0.rename_to(target, created).map(drop)
    }
}

impl Sealed {
    /// Renames the file to `target`; the returned [`Unsynced`] makes that
    /// durable. The arbiter must be held (`held`): whatever was checked
    /// before this call is still true when the name appears. Directories
    /// created on the way are made durable before this returns.
    pub fn publish(self, held: &Held<'_>, target: Target<'_>) -> Result<Unsynced, ObjectError> {
        let mut created = NewDirs::default();
        let unsynced = self.publish_recording(held, target, &mut created)?;
        created.sync(held)?;
        Ok(unsynced)
    }

    /// [`Sealed::publish`], except that the directories whose entries
    /// the publish created are added to `created` for the caller to sync
    /// with [`NewDirs::sync`] before it releases the arbiter (so that a
    /// group of publishes syncs each such directory once; see `group`).
    pub fn publish_recording(
        mut self,
        _held: &Held<'_>,
        target: Target<'_>,
        created: &mut NewDirs,
    ) -> Result<Unsynced, ObjectError> {
        // If the directory's fsync fails, the version is visible but may
        // not survive a crash; the caller gets `Io` and must treat the
        // outcome as unknown, as after a timed-out PUT to S3.
        let (dir, made) = self.0.rename_to(target, created)?;
        if made {
            // Side by side with its parent's sync (module doc).
            return Ok(Unsynced::Started(syncer::start(dir)));
        }
        Ok(Unsynced::Dir(dir))
    }
}

/// Directories that gained a new subdirectory under the arbiter and must
/// be fsynced before it is released: a writer that finds a directory
/// already there cannot tell whether its name is durable yet (see the
/// module doc), so no directory may be seen by another writer before it
/// is.
#[derive(Debug, Default)]
#[must_use = "new directories are durable only once `sync` has returned"]
pub(super) struct NewDirs(BTreeSet<PathBuf>);

impl NewDirs {
    /// Adds `dirs`.
    pub fn extend(&mut self, dirs: impl IntoIterator<Item = PathBuf>) {
        self.0.extend(dirs);
    }

    /// The directories to sync, each once, in path order.
    pub fn iter(&self) -> impl Iterator<Item = &Path> {
        self.0.iter().map(PathBuf::as_path)
    }

    /// fsyncs every directory, side by side, while the arbiter is still
    /// held (`held`); the first that failed, if any.
    pub fn sync(self, held: &Held<'_>) -> Result<(), ObjectError> {
        syncer::first_failure(self.sync_each(held))
    }

    /// fsyncs every directory, side by side, while the arbiter is still
    /// held (`_held`), and returns the ones that failed.
    pub fn sync_each(&self, _held: &Held<'_>) -> BTreeMap<PathBuf, ObjectError> {
        syncer::sync_all(self.iter())
    }
}

/// Creates `base/dirs...` as needed; whether the innermost directory was
/// created by this call. Each new directory's
/// name lives in its parent, so the parent of every created directory is
/// added to `created`; the innermost one is left to the caller, who
/// fsyncs it after putting something in it.
///
/// It tries the innermost directory first and walks up only while a
/// parent is missing: a `mkdir` locks its parent directory even when it
/// fails, and in the common cases (a key that exists, a new key under an
/// existing prefix) one call settles it instead of one per level.
fn create_dirs(base: &Path, dirs: &[&str], created: &mut NewDirs) -> Result<bool, ObjectError> {
    // `probe` is `base/dirs[..level]`, from the innermost outwards until
    // one exists or is made.
    let mut probe = base.to_path_buf();
    probe.extend(dirs);
    let mut level = dirs.len();
    // Whether the last `mkdir` that succeeded or found its directory
    // there made the innermost one.
    let mut made = false;
    while level > 0 {
        match std::fs::create_dir(&probe) {
            Ok(()) => {
                created.0.insert(parent_of(&probe));
                made = level == dirs.len();
                break;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => break,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                level -= 1;
                probe.pop();
            }
            Err(e) => return Err(io_error("creating directory", &probe, e)),
        }
    }
    // Then the levels below it, outermost first.
    for dir in &dirs[level..] {
        probe.push(dir);
        made = match std::fs::create_dir(&probe) {
            Ok(()) => {
                created.0.insert(parent_of(&probe));
                true
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
            Err(e) => return Err(io_error("creating directory", &probe, e)),
        };
    }
    Ok(made)
}

fn parent_of(dir: &Path) -> PathBuf {
    dir.parent()
        .expect("a created directory lies below the store's root")
        .to_path_buf()
}
