//! The filesystem backend: the embedded default object store. One
//! directory; durable; versioned or not (fixed when the store is
//! created); safe for several threads and processes at once.
//!
//! How it is built, one module per concern:
//!
//! - `layout`: the directory layout and the key ↔ path
//!   encoding (each key's versions live in its own `%v` directory);
//! - `version_file`: one file per version — a
//!   checked header, the body, per-block CRCs — published by one rename,
//!   and verified on every read (a mismatch is [`ObjectError::Corrupt`]);
//! - `durable`: the one publish path, stage → fsync →
//!   rename → fsync dir;
//! - `lock`: the `flock` arbiter that gives conditional
//!   writers exactly one winner per generation across processes;
//! - `group`: group commit, concurrent publishes decided under one hold
//!   of the arbiter;
//! - `journal`: small whole publishes made durable by one shared sync of
//!   a journal record (format 3 stores), and settling it;
//! - `syncer`: directory fsyncs, and the threads that make a group's side by
//!   side;
//! - `ids`: version ids (sorted by creation), etags, upload
//!   ids;
//! - `versions`, `publish`, `listing`, `uploads`: the trait's calls;
//! - `recovery`: the format record and what `open` and
//!   `bootstrap` clean and report.
//!
//! Decisions worth knowing:
//!
//! - Calls that change the store (publish, copy, delete, the multipart
//!   calls) wait on fsyncs and on the arbiter, so they hold no runtime
//!   worker meanwhile: on a runtime with one worker per core, a publish
//!   done inline held a worker through its syncs, and 16 connections
//!   were served two publishes at a time. They run on tokio's blocking
//!   pool, or, when one is the store's only change under way on a
//!   multi-threaded runtime (the server's), under `block_in_place`,
//!   which spares a lone publish the hand-off. Reads stay inline: they are
//!   page-cache reads with no sync or lock, and a hand-off to the pool
//!   (~25 µs here) would cost more than a small GET itself. Outside a
//!   runtime, and on a thread marked with [`on_blocking_thread`](crate::fs::on_blocking_thread) (a
//!   plugin's step), every call runs inline. None holds a lock across an
//!   `.await`.
//! - Reads take no lock. Published files are immutable, so a reader that
//!   opened a version keeps reading exactly that version even if it is
//!   replaced or deleted meanwhile; a version that vanishes between
//!   listing its directory and opening it is looked up again.
//! - On an unversioned store a publish removes the older versions after
//!   its rename. A crash in between leaves an extra old version, which
//!   reads ignore (the newest is current) and the next publish or `open`
//!   removes. Version calls answer `Unsupported`.
//! - Parts of a multipart upload are at least 1 byte (`min_part_size`
//!   1; there is no network round trip to amortize) and at most 10 000.
//! - Lifecycle rules and presigned URLs are `Unsupported` (the trait's
//!   defaults): a local directory has neither.
//! - Unix only (`pread`, directory fsync), on a local, case-sensitive
//!   filesystem.
//!
//! Syncs per `put_whole` of a body up to `journal`'s 16 KiB on a format 3
//! store: **one**, of the journal segment, shared by every publish of
//! the group (`journal`). Otherwise, and on format 1 and 2 stores:
//! **2** when the key already has a version
//! directory — the version file (`fdatasync`: its bytes must be on disk
//! before any name points at them, or a crash could publish a torn
//! file), and the key's version directory (the rename itself must be
//! durable before the publish is acknowledged). A key's first publish
//! adds one per directory it creates (the parent of each new directory
//! holds its name). Only those directory-creation syncs are made under
//! the arbiter: the version file is synced before it is taken, and the
//! version directory after it is released, so concurrent publishes wait
//! on their syncs side by side (why that is safe: `durable`); a version
//! directory the publish created has its sync started at the rename, so
//! it overlaps its parent's and a key's first publish waits for two
//! syncs in a row, not three. Concurrent publishes are committed in
//! groups under one hold of the arbiter, and a group syncs each
//! directory it created once, several at a time (`group`, `syncer`), so
//! the syncs made under the arbiter no longer grow one by one with the
//! writers waiting for it. A
//! precondition refusal syncs the directory it was judged on first.
//! A delete (a key's versions on an unversioned store, one version, or
//! a delete marker) on a format 3 store is a journal record too, in the
//! same shared sync; otherwise it syncs the key's version directory.
//! Removing superseded versions on an unversioned store is not fsynced:
//! undoing it in a crash is harmless (see above). The body is written
//! from the caller's buffer as is: no copy.

mod durable;
mod group;
mod ids;
mod journal;
mod layout;
mod listing;
mod lock;
mod publish;
mod recovery;
mod syncer;
mod syncs;
mod uploads;
mod version_file;
mod versions;

#[cfg(test)]
mod journal_tests;
#[cfg(test)]
mod process_tests;
#[cfg(test)]
mod tests;

pub use syncs::{Syncs, syncs};

use custodian_base::detail::Detail;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use bytes::Bytes;

use super::{
    BootstrapReport, CompleteOptions, CopyOptions, DeleteOptions, GetOptions, GetResult,
    HeadOptions, ListPage, ListedObject, ListedVersion, MAX_PART_NUMBER, ObjectAdmin, ObjectError,
    ObjectKey, ObjectMeta, ObjectStore, PartData, PendingUpload, PutOptions, StreamedBody,
    UploadOptions, validate_range,
};
use custodian_base::clock::Clock;

use self::ids::Ids;
use self::journal::{Journal, Keep};
use self::layout::Layout;
use self::lock::{Arbiter, Held};

/// Smallest part but the last: a local store has no per-request cost to
/// amortize, so any non-empty part will do.
const MIN_PART_SIZE: u64 = 1;

/// An object store in one local directory. See the module documentation.
///
/// A clone is the same store (one lock, one id source, one group-commit
/// queue): what a call needs is shared behind `Arc`s, so handing the
/// store to a blocking-pool task costs a few reference counts.
#[derive(Clone)]
pub struct FsStore {
    layout: Arc<Layout>,
    clock: Arc<dyn Clock>,
    versioned: bool,
    arbiter: Arc<Arbiter>,
    /// Publishes waiting to be committed as a group (see `group`).
    queue: Arc<group::Queue>,
    /// The journal of small publishes (format 3 stores; see `journal`).
    journal: Option<Arc<Journal>>,
    ids: Arc<Ids>,
    /// Changing calls of this store under way, and how calm they have
    /// been (see [`Self::run`]).
    changing: Arc<Changes>,
    /// What recovery did when this store was opened.
    recovered: Arc<[String]>,
    /// Keeps a test store's directory alive exactly as long as the store.
    #[cfg(test)]
    _temp: Option<Arc<tempfile::TempDir>>,
}

impl std::fmt::Debug for FsStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FsStore")
            .field("root", &self.layout.root)
            .field("versioned", &self.versioned)
            .finish_non_exhaustive()
    }
}

thread_local! {
    /// Whether this thread may block (see [`on_blocking_thread`]).
    static MAY_BLOCK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `work` with this thread marked as one that may block: a
/// filesystem store called on it makes its blocking calls (syncs, the
/// arbiter) inline, as it does outside a runtime, instead of handing them
/// to tokio's blocking pool and waiting. For threads already off the
/// runtime's workers, such as a blocking-pool thread running a plugin's
/// step, where the hand-off only adds two context switches and a wake-up
/// per call. A call made so runs to its end before a caller's timeout
/// around it can fire.
pub fn on_blocking_thread<T>(work: impl FnOnce() -> T) -> T {
    /// Puts the mark back as it was, even if `work` panics.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            MAY_BLOCK.set(self.0);
        }
    }
    let _restore = Restore(MAY_BLOCK.replace(true));
    work()
}

/// What a changing call's work waits for from its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Waits {
    /// Nothing: it has all it needs when it starts.
    Nothing,
    /// A body the caller's task feeds as the work reads it (a streamed
    /// publish joined with the feeding of its body), so the work must not
    /// stop that task.
    OnCaller,
}

/// A store's changing calls under way, and how many in a row ran with
/// no other overlapping them.
#[derive(Debug, Default)]
struct Changes {
    under_way: AtomicUsize,
    calm: AtomicUsize,
    /// Changes that began while another was under way, ever.
    overlaps: AtomicUsize,
}

/// Changes in a row that ran with no other overlapping them before one
/// may run in place: a writer alone gets there after its first few
/// publishes, while under concurrent load an overlap comes along well
/// before and sends every change back to the pool.
const CALM_BEFORE_IN_PLACE: usize = 8;

/// One changing call of a store under way, counted until dropped.
struct Changing {
    changes: Arc<Changes>,
    /// Whether no other was under way when it began.
    alone: bool,
    /// [`Changes::overlaps`] when it began.
    overlaps: usize,
}

impl Changing {
    fn start(changes: &Arc<Changes>) -> Self {
        // Only hints of contention, which decide nothing but where the
        // work runs: relaxed ordering is enough.
        let alone = changes.under_way.fetch_add(1, Ordering::Relaxed) == 0;
        if !alone {
            changes.overlaps.fetch_add(1, Ordering::Relaxed);
            changes.calm.store(0, Ordering::Relaxed);
        }
        Self {
            changes: changes.clone(),
            alone,
            overlaps: changes.overlaps.load(Ordering::Relaxed),
        }
    }

    /// Whether this change may run in place: it began alone, after
    /// [`CALM_BEFORE_IN_PLACE`] changes in a row that nothing overlapped.
    fn in_place(&self) -> bool {
        self.alone && self.changes.calm.load(Ordering::Relaxed) >= CALM_BEFORE_IN_PLACE
    }
}

impl Drop for Changing {
    fn drop(&mut self) {
        let others = self.changes.under_way.fetch_sub(1, Ordering::Relaxed) - 1;
        let overlapped = self.changes.overlaps.load(Ordering::Relaxed) != self.overlaps;
        if self.alone && others == 0 && !overlapped {
            // Nothing overlapped it: no other change is under way, and
            // none began while it was.
            let _ = self
                .changes
                .calm
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |calm| {
                    Some(calm.saturating_add(1))
                });
        }
    }
}

/// Locks a mutex whose data stays consistent at every step (a queue, a
/// slot, a count, a list of segments), so a panic elsewhere does not make
/// it unusable.
fn locked<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// An I/O error, with what was being done to which path.
fn io_error(doing: &str, path: &Path, error: std::io::Error) -> ObjectError {
    ObjectError::Io(Detail::caused_by(
        format!("{doing} {}", path.display()),
        error,
    ))
}

impl FsStore {
    /// Opens the store in `root`, creating the directory and its layout if
    /// absent, and recovers from any crash (see `recovery`).
    /// A store is created versioned or not and stays so.
    ///
    /// # Errors
    /// `InvalidArgument` when `versioned` is not what the store was
    /// created with, or the root path is too long; `Unsupported` for a
    /// store written by a newer format; `Corrupt` for an unreadable format
    /// record; `Io` when the directory cannot be created or locked.
    pub fn open(root: &Path, clock: Arc<dyn Clock>, versioned: bool) -> Result<Self, ObjectError> {
        let mut layout = Layout::new(root)?;
        recovery::prepare(&mut layout, versioned)?;
        let mut store = Self {
            arbiter: Arc::new(Arbiter::open(&layout.lock)?),
            queue: Arc::default(),
            journal: layout
                .journaled
                .then(|| Arc::new(Journal::new(layout.root.clone(), layout.journal.clone()))),
            layout: Arc::new(layout),
            clock,
            versioned,
            ids: Arc::default(),
            changing: Arc::default(),
            recovered: Arc::from([]),
            #[cfg(test)]
            _temp: None,
        };
        store.recovered = store.recover()?.into();
        Ok(store)
    }

    /// Whether the store at `root` was created versioned; `None` when
    /// there is no store there yet. Lets a caller that does not care
    /// (`file:///path` without `?versioned=`) open an existing store in
    /// its own mode instead of being refused.
    ///
    /// # Errors
    /// `Corrupt` for an unreadable format record; `Io` if it cannot be
    /// read.
    pub fn created_versioned(root: &Path) -> Result<Option<bool>, ObjectError> {
        recovery::recorded_mode(root)
    }

    /// The store's root directory (absolute).
    pub fn root(&self) -> &Path {
        &self.layout.root
    }

    /// The arbiter, with the journal settled: what every change that does
    /// not go through the journal holds (see `journal`).
    fn settled(&self) -> Result<Held<'_>, ObjectError> {
        let held = self.arbiter.lock()?;
        if let Some(journal) = &self.journal {
            self.settle_journal(journal, &held, Keep::Nothing)?;
        }
        Ok(held)
    }

    /// A store in a fresh temporary directory that lives as long as it.
    #[cfg(test)]
    pub(crate) fn temporary(versioned: bool) -> Self {
        Self::temporary_of_format(versioned, None)
    }

    /// As [`FsStore::temporary`], but created as if by a build that wrote
    /// `format` (1: the nested spelling earlier builds created).
    #[cfg(test)]
    pub(crate) fn temporary_of_format(versioned: bool, format: Option<u32>) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        if let Some(format) = format {
            recovery::write_record_of(dir.path(), format, versioned);
        }
        let clock: Arc<dyn Clock> = Arc::new(custodian_base::clock::FixedClock::new(1_000_000));
        let mut store = Self::open(dir.path(), clock, versioned).expect("a fresh store opens");
        store._temp = Some(Arc::new(dir));
        store
    }

    /// Runs `work`, which may fsync and wait for the arbiter, so that it
    /// holds no runtime worker meanwhile (see the module documentation);
    /// [`Self::run`] with nothing to wait for from the caller.
    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(Self) -> Result<T, ObjectError> + Send + 'static,
    ) -> Result<T, ObjectError> {
        self.run(Waits::Nothing, work).await
    }

    /// Runs `work` so that it holds no runtime worker meanwhile: inline
    /// outside a runtime and on a thread that may block; otherwise on
    /// tokio's blocking pool, except for a change that is the store's only
    /// one under way after a calm spell ([`Changing::in_place`]) on a
    /// multi-threaded runtime and `waits` for nothing from its caller,
    /// which runs under `block_in_place` (the worker's
    /// other tasks move to another thread and `work` runs on this one; the
    /// caller's own task does not run meanwhile, so work reading a body
    /// that task feeds would wait forever). The hand-off to the pool and back
    /// costs two context switches and a wake-up, 25–45 µs, a sixth of a
    /// lone small publish's time on disk (`object_store`: 0.84× of a
    /// write+fsync through the pool, 1.01× in place). Under concurrent
    /// load changes stay on the pool, where a publisher waiting for its
    /// group holds a pool thread, not a worker that must first hand its
    /// tasks over: the calm spell keeps the in-place path to a writer
    /// alone. A panic in `work` is resumed
    /// here, as if it had run inline. If the caller stops waiting, `work`
    /// still runs to its end: a publish is never cut off between its
    /// rename and its sync (in place, the caller cannot stop waiting).
    async fn run<T: Send + 'static>(
        &self,
        waits: Waits,
        work: impl FnOnce(Self) -> Result<T, ObjectError> + Send + 'static,
    ) -> Result<T, ObjectError> {
        let store = self.clone();
        let runtime = match tokio::runtime::Handle::try_current() {
            Ok(runtime) if !MAY_BLOCK.get() => runtime,
            _ => return work(store),
        };
        let changing = Changing::start(&self.changing);
        if changing.in_place()
            && waits == Waits::Nothing
            && runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread
        {
            return tokio::task::block_in_place(|| work(store));
        }
        // The count drops when the work ends, waited for or not.
        let task = move || {
            let _changing = changing;
            work(store)
        };
        match tokio::task::spawn_blocking(task).await {
            Ok(outcome) => outcome,
            Err(failed) if failed.is_panic() => std::panic::resume_unwind(failed.into_panic()),
            Err(failed) => Err(ObjectError::Io(Detail::caused_by(
                "the filesystem store's blocking task was cancelled",
                failed,
            ))),
        }
    }

    fn require_versions(&self, call: &str) -> Result<(), ObjectError> {
        if self.versioned {
            Ok(())
        } else {
            Err(ObjectError::Unsupported(
                format!(
                    "{call} needs a versioned store; {} is unversioned",
                    self.layout.root.display()
                )
                .into(),
            ))
        }
    }
}

#[async_trait]
impl ObjectStore for FsStore {
    fn versioned(&self) -> bool {
        self.versioned
    }

    fn min_part_size(&self) -> u64 {
        MIN_PART_SIZE
    }

    fn max_parts(&self) -> u32 {
        MAX_PART_NUMBER
    }

    fn streams_bodies(&self) -> bool {
        true
    }

    async fn put_opts(
        &self,
        key: &ObjectKey,
        body: Bytes,
        options: PutOptions<'_>,
    ) -> Result<ObjectMeta, ObjectError> {
        let key = key.clone();
        let (condition, metadata) = (options.condition.clone(), options.metadata.clone());
        let (crc64, content_md5) = (options.crc64, options.content_md5);
        self.blocking(move |store| {
            let options = PutOptions {
                condition: &condition,
                metadata: &metadata,
                crc64,
                content_md5,
            };
            store.put_bytes(&key, &body, options)
        })
        .await
    }

    /// Written from the blocking pool as the pieces arrive. Outside a
    /// runtime it runs inline, so the body must already be complete
    /// there (its sender cannot run while the store waits for it).
    async fn put_stream(
        &self,
        key: &ObjectKey,
        body: StreamedBody,
        limit: u64,
        options: PutOptions<'_>,
    ) -> Result<ObjectMeta, ObjectError> {
        let key = key.clone();
        let (condition, metadata) = (options.condition.clone(), options.metadata.clone());
        let work = move |store: Self| store.put_streamed(&key, body, limit, &condition, &metadata);
        self.run(Waits::OnCaller, work).await
    }

    async fn upload_part_stream(
        &self,
        key: &ObjectKey,
        upload_id: &str,
        part: u32,
        body: StreamedBody,
        limit: u64,
    ) -> Result<u64, ObjectError> {
        let (key, upload_id) = (key.clone(), upload_id.to_owned());
        let work =
            move |store: Self| store.store_part_streamed(&key, &upload_id, part, body, limit);
        self.run(Waits::OnCaller, work).await
    }

    async fn copy_opts(
        &self,
        source: &ObjectKey,
        destination: &ObjectKey,
        options: CopyOptions<'_>,
    ) -> Result<ObjectMeta, ObjectError> {
        let (source, destination) = (source.clone(), destination.clone());
        let source_if_match = options.source_if_match.map(str::to_owned);
        let (condition, metadata) = (options.condition.clone(), options.metadata.clone());
        self.blocking(move |store| {
            let options = CopyOptions {
                source_if_match: source_if_match.as_deref(),
                condition: &condition,
                metadata: &metadata,
            };
            store.copy(&source, &destination, options)
        })
        .await
    }

    async fn head_opts(
        &self,
        key: &ObjectKey,
        options: HeadOptions<'_>,
    ) -> Result<ObjectMeta, ObjectError> {
        let path = layout::KeyPath::new(key);
        let (id, file) = self.readable(&path, options.version_id)?;
        Ok(self.meta(key, &id, file.header()))
    }

    async fn get_opts(
        &self,
        key: &ObjectKey,
        options: GetOptions<'_>,
    ) -> Result<GetResult, ObjectError> {
        if let Some(range) = &options.range {
            validate_range(range)?;
        }
        let path = layout::KeyPath::new(key);
        let (id, file) = self.readable(&path, options.version_id)?;
        if let Some(want) = options.if_match {
            check_etag(key, file.header(), want)?;
        }
        let body = match options.range {
            Some(range) => file.read_range(range)?,
            None => file.read_all()?,
        };
        Ok(GetResult {
            meta: self.meta(key, &id, file.header()),
            body: vec![body],
        })
    }

    async fn delete_opts(
        &self,
        key: &ObjectKey,
        options: DeleteOptions<'_>,
    ) -> Result<(), ObjectError> {
        let key = key.clone();
        let version_id = options.version_id.map(str::to_owned);
        self.blocking(move |store| match version_id {
            Some(version_id) => {
                store.require_versions("deleting a version")?;
                store.remove_version(&key, &version_id)
            }
            None => store.delete_key(&key),
        })
        .await
    }

    async fn list(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<ListPage<ListedObject>, ObjectError> {
        self.list_current(prefix, cursor, limit)
    }

    async fn list_versions(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<ListPage<ListedVersion>, ObjectError> {
        self.require_versions("list_versions")?;
        self.list_all_versions(prefix, cursor, limit)
    }

    async fn list_key_versions(
        &self,
        key: &ObjectKey,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<ListPage<ListedVersion>, ObjectError> {
        self.require_versions("list_key_versions")?;
        self.list_one_key_versions(key, cursor, limit)
    }

    async fn create_upload(
        &self,
        key: &ObjectKey,
        options: UploadOptions<'_>,
    ) -> Result<String, ObjectError> {
        let key = key.clone();
        let metadata = options.metadata.clone();
        self.blocking(move |store| store.start_upload(&key, &metadata))
            .await
    }

    async fn upload_part(
        &self,
        key: &ObjectKey,
        upload_id: &str,
        part: u32,
        data: PartData<'_>,
    ) -> Result<u64, ObjectError> {
        let (key, upload_id) = (key.clone(), upload_id.to_owned());
        match data {
            PartData::Bytes { body, crc64 } => {
                self.blocking(move |store| {
                    store.store_part(&key, &upload_id, part, &body, crc64)?;
                    Ok(crc64)
                })
                .await
            }
            PartData::Copy {
                source,
                source_if_match,
                range,
            } => {
                let (source, source_if_match) = (source.clone(), source_if_match.to_owned());
                self.blocking(move |store| {
                    store.copy_part(&key, &upload_id, part, &source, &source_if_match, range)
                })
                .await
            }
        }
    }

    async fn complete_upload(
        &self,
        key: &ObjectKey,
        upload_id: &str,
        options: CompleteOptions<'_>,
    ) -> Result<ObjectMeta, ObjectError> {
        let (key, upload_id) = (key.clone(), upload_id.to_owned());
        let (parts, condition, crc64) = (options.parts, options.condition.clone(), options.crc64);
        self.blocking(move |store| {
            let options = CompleteOptions {
                parts,
                condition: &condition,
                crc64,
            };
            store.finish_upload(&key, &upload_id, options)
        })
        .await
    }

    async fn abort_upload(&self, key: &ObjectKey, upload_id: &str) -> Result<(), ObjectError> {
        let (key, upload_id) = (key.clone(), upload_id.to_owned());
        self.blocking(move |store| store.drop_upload(&key, &upload_id))
            .await
    }

    async fn list_uploads(&self, prefix: &str) -> Result<Vec<PendingUpload>, ObjectError> {
        self.pending_uploads(prefix)
    }

    async fn list_parts(
        &self,
        key: &ObjectKey,
        upload_id: &str,
    ) -> Result<Vec<crate::UploadedPart>, ObjectError> {
        self.uploaded_parts(key, upload_id)
    }

    fn admin(&self) -> &dyn ObjectAdmin {
        self
    }
}

#[async_trait]
impl ObjectAdmin for FsStore {
    async fn bootstrap(&self, prefix: &str) -> Result<BootstrapReport, ObjectError> {
        self.report(prefix)
    }
}

/// Refuses a read guard that does not name the current etag.
fn check_etag(key: &str, header: &version_file::Header, want: &str) -> Result<(), ObjectError> {
    if header.etag == want {
        Ok(())
    } else {
        Err(ObjectError::PreconditionFailed(
            format!("{key:?} has etag {}, not {want}", header.etag).into(),
        ))
    }
}

#[cfg(test)]
mod conformance {
    use super::FsStore;

    mod versioned {
        use super::FsStore;

        crate::object_conformance_tests!(versioned: || FsStore::temporary(true));
    }

    mod unversioned {
        use super::FsStore;

        crate::object_conformance_tests!(unversioned: || FsStore::temporary(false));
    }

    /// Stores made by a build before format 2 keep their spelling and
    /// pass the same suite.
    mod format_1_versioned {
        use super::FsStore;

        crate::object_conformance_tests!(versioned: || FsStore::temporary_of_format(true, Some(1)));
    }

    mod format_1_unversioned {
        use super::FsStore;

        crate::object_conformance_tests!(
            unversioned: || FsStore::temporary_of_format(false, Some(1))
        );
    }

    /// Stores made before format 3 have no journal: every publish syncs
    /// its file and directory, and they pass the same suite.
    mod format_2_versioned {
        use super::FsStore;

        crate::object_conformance_tests!(versioned: || FsStore::temporary_of_format(true, Some(2)));
    }

    mod format_2_unversioned {
        use super::FsStore;

        crate::object_conformance_tests!(
            unversioned: || FsStore::temporary_of_format(false, Some(2))
        );
    }
}
