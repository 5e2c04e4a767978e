//! Directory fsyncs, and a few long-lived threads that make them side by
//! side.
//!
//! A group commit (see `group`) ends with one fsync per directory that
//! gained a new subdirectory, made while the arbiter is held. Syncs of
//! different directories proceed side by side on the device, so they are
//! spread over threads; the threads live as long as the process, because
//! starting threads for every group cost a thread start, a stack mapping
//! and its page faults each time (1.3–1.6 thread starts per object of a
//! takedown, counted with `perf`), for syncs that take ~0.15 ms.
//!
//! The caller always works too: it claims directories from the same list
//! as the helpers, so a list is finished even when no helper is free or
//! none could be started, and [`sync_all`] (or [`Pending::wait`]) returns
//! only once every directory's fsync has returned, whoever made it.
//!
//! [`start`] hands one directory to a helper without waiting: a publish
//! that created its version directory has it synced while its group
//! syncs the parents under the arbiter, and waits for it after (`durable`).

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};

use crate::ObjectError;

use super::{io_error, locked, syncs};

/// Helper threads per process. Syncs of different directories overlap
/// on the device; beyond a handful the waits gain little more on this
/// scale of group, and each helper is a parked thread for the process's
/// life.
const HELPERS: usize = 7;

/// One list of directories being synced.
#[derive(Debug)]
struct Batch {
    dirs: Vec<PathBuf>,
    /// The next index to claim.
    next: AtomicUsize,
    /// Syncs finished (successfully or not); the list is done at `dirs.len()`.
    finished: Mutex<usize>,
    all_finished: Condvar,
    failed: Mutex<BTreeMap<PathBuf, ObjectError>>,
}

impl Batch {
    /// Claims and syncs directories until none is left unclaimed.
    fn work(&self) {
        while let Some(dir) = self.dirs.get(self.next.fetch_add(1, Ordering::Relaxed)) {
            if let Err(error) = fsync_dir(dir) {
                locked(&self.failed).insert(dir.clone(), error);
            }
            *locked(&self.finished) += 1;
            self.all_finished.notify_all();
        }
    }

    /// Waits until every claimed sync has returned (the caller's own
    /// `work` has claimed the rest, so none is left unclaimed).
    fn wait(&self) {
        let mut finished = locked(&self.finished);
        while *finished < self.dirs.len() {
            finished = self
                .all_finished
                .wait(finished)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// The helpers' queue: each entry asks one helper to join a batch.
struct Pool {
    sender: Mutex<Sender<Arc<Batch>>>,
}

impl Pool {
    /// Starts the helpers; `None` if not one could be started (the
    /// callers then sync alone).
    fn start() -> Option<Self> {
        let (sender, receiver) = channel::<Arc<Batch>>();
        let receiver = Arc::new(Mutex::new(receiver));
        let mut started = 0;
        for n in 0..HELPERS {
            let receiver = Arc::clone(&receiver);
            let spawned = std::thread::Builder::new()
                .name(format!("custodian-fsync-{n}"))
                .spawn(move || helper(&receiver));
            if spawned.is_ok() {
                started += 1;
            }
        }
        (started > 0).then(|| Self {
            sender: Mutex::new(sender),
        })
    }
}

/// A helper's life: join each batch it is handed.
fn helper(receiver: &Mutex<Receiver<Arc<Batch>>>) {
    loop {
        // Held only while waiting for the next batch: the helper that
        // has it takes the next entry, the others wait for the lock.
        let batch = match locked(receiver).recv() {
            Ok(batch) => batch,
            Err(_) => return,
        };
        batch.work();
    }
}

fn pool() -> Option<&'static Pool> {
    static POOL: OnceLock<Option<Pool>> = OnceLock::new();
    POOL.get_or_init(Pool::start).as_ref()
}

/// fsyncs every directory of `dirs`, up to `HELPERS + 1` at a time, and
/// returns the ones that failed. Every fsync has returned when this does.
pub(super) fn sync_all<'a>(
    dirs: impl IntoIterator<Item = &'a Path>,
) -> BTreeMap<PathBuf, ObjectError> {
    let dirs: Vec<PathBuf> = dirs.into_iter().map(Path::to_path_buf).collect();
    // Most groups create no directory (every publish to an existing key).
    if dirs.is_empty() {
        return BTreeMap::new();
    }
    // One directory needs no helper: the caller syncs it at once.
    let helpers = dirs.len().saturating_sub(1).min(HELPERS);
    Pending::start(dirs, helpers).wait()
}

/// Starts the fsync of `dir` on a helper and returns at once: the caller
/// goes on with other work and waits for it with [`Pending::wait`].
pub(super) fn start(dir: PathBuf) -> Pending {
    Pending::start(vec![dir], 1)
}

/// Directory syncs handed to the helpers and not yet waited for.
#[derive(Debug)]
#[must_use = "the directories are durable only once `wait` has returned"]
pub(super) struct Pending(Arc<Batch>);

impl Pending {
    /// Hands `dirs` to up to `helpers` helpers.
    fn start(dirs: Vec<PathBuf>, helpers: usize) -> Self {
        let batch = Arc::new(Batch {
            dirs,
            next: AtomicUsize::new(0),
            finished: Mutex::new(0),
            all_finished: Condvar::new(),
            failed: Mutex::new(BTreeMap::new()),
        });
        if helpers > 0
            && let Some(pool) = pool()
        {
            let sender = locked(&pool.sender);
            for _ in 0..helpers {
                // A helper that gets it after the waiter has claimed the
                // last directory finds nothing to do and goes on.
                if sender.send(Arc::clone(&batch)).is_err() {
                    break;
                }
            }
        }
        Self(batch)
    }

    /// Syncs whatever no helper has claimed yet, waits for the rest, and
    /// returns the directories that failed. Every fsync has returned when
    /// this does.
    pub fn wait(self) -> BTreeMap<PathBuf, ObjectError> {
        self.0.work();
        self.0.wait();
        std::mem::take(&mut *locked(&self.0.failed))
    }
}

/// `Ok` if no sync failed, else the first failure (in path order).
pub(super) fn first_failure(failed: BTreeMap<PathBuf, ObjectError>) -> Result<(), ObjectError> {
    match failed.into_values().next() {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

/// fsyncs a directory, making the names in it durable.
pub(super) fn fsync_dir(dir: &Path) -> Result<(), ObjectError> {
    sync_dir(dir).map_err(|e| io_error("fsyncing directory", dir, e))
}

/// [`fsync_dir`] with the system's error, for a caller that tells a
/// directory gone meanwhile from a failed sync.
pub(super) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    let dir_file = File::open(dir)?;
    syncs::count(syncs::Kind::Directory);
    dir_file.sync_all()?;
    #[cfg(test)]
    locked(&SYNCED).push(dir.to_path_buf());
    Ok(())
}

/// Every directory this process fsynced, in tests: what a call made
/// durable, which nothing else can observe short of a power cut. Tests
/// run side by side, so each keeps the paths under its own store.
#[cfg(test)]
pub(super) static SYNCED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_directory_of_a_list_is_synced_and_a_missing_one_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let mut dirs: Vec<PathBuf> = (0..20).map(|n| dir.path().join(format!("d{n}"))).collect();
        for d in &dirs {
            std::fs::create_dir(d).unwrap();
        }
        dirs.push(dir.path().join("missing"));
        let failed = sync_all(dirs.iter().map(PathBuf::as_path));
        assert_eq!(
            failed.keys().collect::<Vec<_>>(),
            vec![&dir.path().join("missing")]
        );
    }

    #[test]
    fn a_started_sync_is_done_when_waited_for_whether_or_not_a_helper_took_it() {
        let dir = tempfile::tempdir().unwrap();
        let pending: Vec<Pending> = (0..50)
            .map(|n| {
                let d = dir.path().join(format!("s{n}"));
                std::fs::create_dir(&d).unwrap();
                start(d)
            })
            .collect();
        for p in pending {
            assert!(p.wait().is_empty());
        }
        assert!(!start(dir.path().join("missing")).wait().is_empty());
    }

    #[test]
    fn lists_synced_from_many_threads_at_once_all_finish() {
        let dir = tempfile::tempdir().unwrap();
        std::thread::scope(|scope| {
            for t in 0..8 {
                let root = dir.path().join(format!("t{t}"));
                scope.spawn(move || {
                    for round in 0..20 {
                        let dirs: Vec<PathBuf> =
                            (0..5).map(|n| root.join(format!("{round}-{n}"))).collect();
                        for d in &dirs {
                            std::fs::create_dir_all(d).unwrap();
                        }
                        assert!(sync_all(dirs.iter().map(PathBuf::as_path)).is_empty());
                    }
                });
            }
        });
    }
}
