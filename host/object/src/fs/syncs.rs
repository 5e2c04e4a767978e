//! How many syncs this process's filesystem stores have made, by what
//! each made durable: the figure the journal and group commit exist to
//! lower, read by the server's metrics and the benchmarks.
//!
//! The counts are process-wide rather than per store: the stores of one
//! process share the device whose cache flushes these are, a flush costs
//! the same whichever store asked for it, and what an operator compares
//! them with (requests, steps, objects taken down) is the process's too.
//! A sync is counted when it is made, whether or not it succeeds.

use std::sync::atomic::{AtomicU64, Ordering};

/// Syncs made so far, by what they made durable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Syncs {
    /// `fdatasync` of a file's bytes before its name is published (a
    /// version file, or a part of a multipart upload).
    pub file: u64,
    /// `fsync` of a directory, making names in it durable.
    pub directory: u64,
    /// `fdatasync` of a journal segment: the records of one group's
    /// small publishes and removals.
    pub journal: u64,
    /// `syncfs` of a store's whole filesystem, when its journal is
    /// settled.
    pub filesystem: u64,
}

/// What one sync made durable.
#[derive(Debug, Clone, Copy)]
pub(super) enum Kind {
    File,
    Directory,
    Journal,
    Filesystem,
}

static FILE: AtomicU64 = AtomicU64::new(0);
static DIRECTORY: AtomicU64 = AtomicU64::new(0);
static JOURNAL: AtomicU64 = AtomicU64::new(0);
static FILESYSTEM: AtomicU64 = AtomicU64::new(0);

/// Counts one sync of `kind`.
pub(super) fn count(kind: Kind) {
    let counter = match kind {
        Kind::File => &FILE,
        Kind::Directory => &DIRECTORY,
        Kind::Journal => &JOURNAL,
        Kind::Filesystem => &FILESYSTEM,
    };
    // A statistic that orders nothing: relaxed is enough.
    counter.fetch_add(1, Ordering::Relaxed);
}

/// The syncs this process's filesystem stores have made since it began.
#[must_use]
pub fn syncs() -> Syncs {
    Syncs {
        file: FILE.load(Ordering::Relaxed),
        directory: DIRECTORY.load(Ordering::Relaxed),
        journal: JOURNAL.load(Ordering::Relaxed),
        filesystem: FILESYSTEM.load(Ordering::Relaxed),
    }
}
