//! The two locks that make one directory safe for several threads and
//! processes at once.
//!
//! **The arbiter** decides every conditional publish. It is an exclusive
//! `flock(2)` on `<root>/lock` (std's [`File::lock`], which is `flock`
//! with `LOCK_EX` on Unix), held only around check-and-rename: read the
//! key's current version, evaluate the condition, rename the staged file
//! in (fsyncing the parent of any directory created on the way), release.
//! Writing and fsyncing the bytes happen before, outside the lock, and
//! the sync of the version directory after a rename or a removal happens
//! after it (`durable`, `publish::settle_removal`), before the caller is
//! answered. Every change a condition can observe — a new
//! version, a removed version that may be current, a created or pruned
//! directory, an upload created, completed or aborted — happens under it,
//! and the condition is evaluated under it, so two writers guarded on the
//! same generation cannot both see it current: the second sees the
//! first's version and fails its guard. (The one removal outside it is of
//! versions an unversioned publish has just superseded, which no
//! condition reads.) That is
//! sufficient for "exactly one winner per generation" across threads and
//! processes alike. Readers take no lock: a version file is immutable
//! once published and is replaced only by renames, so a reader sees the
//! old or the new file, never a mixture.
//!
//! `flock` locks belong to an *open file description*: two threads sharing
//! one descriptor would both "hold" it. So the process-wide descriptor sits
//! behind a [`Mutex`], and a thread holds the mutex for as long as it holds
//! the flock. Two stores opened on one root in one process have separate
//! descriptions, so their flocks exclude each other as two processes' do.
//! A process that dies holding the lock releases it (the kernel closes its
//! descriptors), so a crash never wedges the store.
//!
//! `flock` is not reliable on network filesystems (NFS emulates it with
//! byte-range locks, or not at all, depending on version and mount
//! options), and neither are rename-and-fsync semantics there: the store
//! must live on a local filesystem.
//!
//! **The staging gate** (`<root>/staging.lock`) closed one window in
//! earlier builds: a writer creates its staging file and then locks it,
//! and recovery (which deletes staging files it can lock, i.e. whose
//! writer is gone) must not run between the two. Writers of those builds
//! hold the gate *shared* for just those two calls. Writers of this build
//! take no gate: they check after locking that their file was not removed
//! meanwhile, and make another if it was (`durable::Staged::create`).
//! Recovery still holds the gate *exclusive* while it sweeps, so a writer
//! of an earlier build sharing the root is never caught in its window.

use std::fs::{File, OpenOptions};
use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::ObjectError;

use super::io_error;

/// Opens (creating it if needed) a lock file.
fn open_lock_file(path: &Path) -> Result<File, ObjectError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| io_error("opening lock file", path, e))
}

/// The cross-process arbiter: an in-process mutex around an exclusive
/// `flock` on the root's lock file.
#[derive(Debug)]
pub(super) struct Arbiter {
    file: Mutex<File>,
    path: std::path::PathBuf,
}

/// Proof that the arbiter is held; released on drop.
#[derive(Debug)]
pub(super) struct Held<'a> {
    file: MutexGuard<'a, File>,
}

impl Arbiter {
    /// Opens the arbiter of the store whose lock file is `path`.
    pub fn open(path: &Path) -> Result<Self, ObjectError> {
        Ok(Self {
            file: Mutex::new(open_lock_file(path)?),
            path: path.to_owned(),
        })
    }

    /// Waits for the arbiter.
    pub fn lock(&self) -> Result<Held<'_>, ObjectError> {
        self.turn().lock().map_err(|(_, error)| error)
    }

    /// Waits for this process's turn at the arbiter: its mutex, without
    /// the flock yet (a group commit's follower needs only that; see
    /// `group`).
    pub fn turn(&self) -> Turn<'_> {
        // A thread that panicked while holding the mutex released the
        // flock on the way out (`Held` unlocks on drop), and nothing else
        // lives behind the mutex: poisoning carries no meaning here.
        Turn {
            file: self.file.lock().unwrap_or_else(PoisonError::into_inner),
            path: &self.path,
        }
    }
}

/// This thread's turn at the arbiter: no other thread of the process can
/// take it, but other processes still can until [`Turn::lock`].
#[derive(Debug)]
pub(super) struct Turn<'a> {
    file: MutexGuard<'a, File>,
    path: &'a Path,
}

impl<'a> Turn<'a> {
    /// Takes the flock too; if that fails, the turn comes back with the
    /// error (a group's leader answers its publishes before it lets the
    /// turn go; see `group`).
    pub fn lock(self) -> Result<Held<'a>, (Self, ObjectError)> {
        match self.file.lock() {
            Ok(()) => Ok(Held { file: self.file }),
            Err(e) => {
                let error = io_error("locking", self.path, e);
                Err((self, error))
            }
        }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        // Closing the descriptor would release it too, but the descriptor
        // lives as long as the store; an unlock that fails leaves nothing
        // to do but report nothing (the next lock() surfaces a real fault).
        let _ = self.file.unlock();
    }
}

/// Holds the staging gate while it lives (the descriptor's close releases
/// the flock).
#[derive(Debug)]
pub(super) struct Gate {
    _file: File,
}

impl Gate {
    /// Enters the gate as recovery, excluding every writer's
    /// create-then-lock window (of writers that take the gate: see the
    /// module doc).
    pub fn exclusive(path: &Path) -> Result<Self, ObjectError> {
        let file = open_lock_file(path)?;
        file.lock().map_err(|e| io_error("locking", path, e))?;
        Ok(Self { _file: file })
    }
}
