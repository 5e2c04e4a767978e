//! A storage backend for tests: redb's own file backend, plus counters of
//! what redb asked of it and a switch that makes every mutation fail from
//! the N-th one on, as a full or failing disk would.

use std::fs::File;
use std::io;
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ::redb::backends::FileBackend;
use ::redb::{BackendError, StorageBackend};

/// What the backend saw, shared with the test that built it.
#[derive(Debug)]
pub(super) struct Probe {
    /// `write`, `set_len` and `sync_data` calls so far.
    pub mutations: AtomicU64,
    /// `sync_data` calls so far.
    pub syncs: AtomicU64,
    /// Mutations from this index on fail; `u64::MAX`: none does.
    pub fail_from: AtomicU64,
}

impl Probe {
    /// Makes every mutation after the next `n` fail.
    pub fn fail_after(&self, n: u64) {
        let now = self.mutations.load(Ordering::SeqCst);
        self.fail_from.store(now + n, Ordering::SeqCst);
    }

    /// Whether a mutation has been refused.
    pub fn tripped(&self) -> bool {
        self.mutations.load(Ordering::SeqCst) > self.fail_from.load(Ordering::SeqCst)
    }
}

/// redb's file backend, probed.
#[derive(Debug)]
pub(super) struct ProbedBackend {
    inner: FileBackend,
    probe: Arc<Probe>,
}

impl ProbedBackend {
    /// Opens (creating) the file at `path`; nothing fails until the
    /// probe says so.
    pub fn open(path: &Path) -> (Self, Arc<Probe>) {
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .expect("opening the test database file");
        let probe = Arc::new(Probe {
            mutations: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            fail_from: AtomicU64::new(u64::MAX),
        });
        let inner = FileBackend::new(file).expect("wrapping the test database file");
        (
            Self {
                inner,
                probe: probe.clone(),
            },
            probe,
        )
    }

    /// Counts a mutation; an error if it is one of those set to fail.
    fn mutate(&self) -> io::Result<()> {
        let index = self.probe.mutations.fetch_add(1, Ordering::SeqCst);
        if index >= self.probe.fail_from.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected storage failure"));
        }
        Ok(())
    }
}

impl StorageBackend for ProbedBackend {
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.inner.read(offset, out)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.mutate()?;
        self.inner.set_len(len)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.mutate()?;
        self.probe.syncs.fetch_add(1, Ordering::SeqCst);
        self.inner.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.mutate()?;
        self.inner.write(offset, data)
    }

    fn close(&self) -> io::Result<()> {
        self.inner.close()
    }

    // The locks are the file backend's, so the probed file excludes other
    // opens exactly as a plain one does.

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.try_lock_range(start, end)
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.inner.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.query_lock_range(start, end)
    }
}
