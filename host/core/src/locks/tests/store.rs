//! What the store's lock lets a request do to a locked key, on the memory
//! and filesystem stores, versioned and not.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use custodian_base::checksum::crc64_nvme;
use custodian_base::clock::{Clock, FixedClock};
use custodian_kv::Kv;
use custodian_kv::memory::MemoryKv;
use custodian_object::fs::FsStore;
use custodian_object::memory::MemoryStore;
use custodian_object::observed::{Call, Observed};
use custodian_object::{
    CompleteOptions, ComposeSpec, Metadata, ObjectError, ObjectKey, ObjectStore, ObjectStoreExt,
    PartData, PartSource, PutCondition, UploadOptions,
};

use super::{Answer, Recording, commit, lock_of, put_piece, put_request};
use crate::decisions::retention::{Item, RetentionOracle};
use crate::locks::{LateRetention, LockGuard, Locks};

const STORE: &str = "preserved";
const KEY: &str = "req/p/0";
const SOURCE: &str = "src";
const R: [u8; 32] = [7; 32];
const CREATED: u64 = 10;
const RETAIN_UNTIL: u64 = 5_000;
const NEW: &[u8] = b"new bytes";

/// A backend's name and the store.
type Named = (&'static str, Arc<dyn ObjectStore>);

/// Every backend, named, and the directory the filesystem ones live in.
fn backends(clock: &Arc<dyn Clock>) -> (Vec<Named>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let fs = |name: &str, versioned| -> Arc<dyn ObjectStore> {
        Arc::new(FsStore::open(&dir.path().join(name), clock.clone(), versioned).unwrap())
    };
    let stores: Vec<Named> = vec![
        (
            "memory versioned",
            Arc::new(MemoryStore::versioned(clock.clone())),
        ),
        (
            "memory unversioned",
            Arc::new(MemoryStore::unversioned(clock.clone())),
        ),
        ("fs versioned", fs("v", true)),
        ("fs unversioned", fs("u", false)),
    ];
    (stores, dir)
}

/// A node's worth of locks: the guarded KV holding request `R`'s lock (as
/// `lock`) over `KEY`, and a clock at 1000.
struct Setup {
    kv: Arc<dyn Kv>,
    clock: Arc<FixedClock>,
}

impl Setup {
    async fn new() -> Self {
        let clock = Arc::new(FixedClock::new(1_000));
        let dyn_clock: Arc<dyn Clock> = clock.clone();
        let kv: Arc<dyn Kv> = Arc::new(LockGuard::new(
            Arc::new(MemoryKv::new(dyn_clock.clone())),
            dyn_clock,
        ));
        commit(
            kv.as_ref(),
            vec![
                put_request(&R, &lock_of(CREATED, RETAIN_UNTIL, false, false)),
                put_piece(STORE, KEY, &R),
            ],
        )
        .await;
        Self { kv, clock }
    }

    fn clock(&self) -> Arc<dyn Clock> {
        self.clock.clone()
    }

    fn locked(
        &self,
        inner: Arc<dyn ObjectStore>,
        oracle: Arc<dyn RetentionOracle>,
    ) -> Arc<dyn ObjectStore> {
        Locks::new(self.kv.clone(), self.clock(), oracle).store(STORE, inner, false)
    }

    /// Lets retention pass and begins purging: the lock releases.
    async fn release(&self) {
        self.clock.set(RETAIN_UNTIL + 1);
        commit(
            self.kv.as_ref(),
            vec![put_request(
                &R,
                &lock_of(CREATED, RETAIN_UNTIL, false, true),
            )],
        )
        .await;
    }
}

/// The piece, the copy source and the composed file, written around the
/// lock (the first write of the locked key goes through the lock).
async fn seed(locked: &dyn ObjectStore, inner: &dyn ObjectStore, local: &Path) {
    let md = Metadata::new();
    let piece = Bytes::from_static(b"piece");
    locked
        .put_whole(
            KEY,
            piece.clone(),
            &PutCondition::Unconditional,
            &md,
            crc64_nvme(&piece),
        )
        .await
        .expect("a first write of a locked key with nothing there");
    inner
        .put_whole(
            SOURCE,
            Bytes::from_static(NEW),
            &PutCondition::Unconditional,
            &md,
            crc64_nvme(NEW),
        )
        .await
        .unwrap();
    std::fs::write(local, NEW).unwrap();
}

/// What the store holds under `KEY`: its current bytes and etag, and its
/// versions where it keeps them.
async fn snapshot(inner: &dyn ObjectStore) -> (Option<(String, Bytes)>, Option<Vec<String>>) {
    let current = inner
        .get_whole(KEY, None)
        .await
        .ok()
        .map(|(meta, bytes)| (meta.etag, bytes));
    let versions = inner.list_versions(KEY, None, 100).await.ok().map(|page| {
        page.items
            .into_iter()
            .map(|v| format!("{}:{}", v.version_id, v.is_delete_marker))
            .collect()
    });
    (current, versions)
}

/// Tries every mutating method on `KEY` through `store`, in an order in
/// which each would succeed unlocked.
async fn every_mutation(
    store: &dyn ObjectStore,
    inner: &dyn ObjectStore,
    local: &Path,
) -> Vec<(&'static str, Result<(), ObjectError>)> {
    let key = ObjectKey::new(KEY).unwrap();
    let md = Metadata::new();
    let body = Bytes::from_static(NEW);
    let crc = crc64_nvme(NEW);
    let unconditional = PutCondition::Unconditional;
    let mut out = Vec::new();
    let put = store
        .put_whole(KEY, body.clone(), &unconditional, &md, crc)
        .await;
    out.push(("put", put.map(drop)));
    let etag = inner.head(KEY).await.unwrap().etag;
    let put = store
        .put_whole(KEY, body.clone(), &PutCondition::IfMatch(etag), &md, crc)
        .await;
    out.push(("put if-match", put.map(drop)));
    let copy = store
        .copy_object(SOURCE, None, KEY, &unconditional, &md)
        .await;
    out.push(("copy onto", copy.map(drop)));
    let spec = ComposeSpec {
        key: &key,
        local_path: local,
        parts: vec![PartSource::Local {
            offset: 0,
            len: NEW.len() as u64,
        }],
        base_key: None,
        base_etag: None,
        condition: PutCondition::Unconditional,
        metadata: Metadata::new(),
        crc64: None,
        progress: None,
    };
    out.push(("compose", store.compose(&spec).await.map(drop)));
    let declared = UploadOptions { metadata: &md };
    let created = store.create_upload(&key, declared).await;
    if let Ok(upload) = &created {
        inner.abort_upload(&key, upload).await.unwrap();
    }
    out.push(("create upload", created.map(drop)));
    let part = || PartData::Bytes {
        body: body.clone(),
        crc64: crc,
    };
    let pending = inner.create_upload(&key, declared).await.unwrap();
    let uploaded = store.upload_part(&key, &pending, 1, part()).await;
    out.push(("upload part", uploaded.map(drop)));
    inner.abort_upload(&key, &pending).await.unwrap();
    let pending = inner.create_upload(&key, declared).await.unwrap();
    inner.upload_part(&key, &pending, 1, part()).await.unwrap();
    let complete = CompleteOptions {
        parts: 1,
        condition: &unconditional,
        crc64: crc,
    };
    let completed = store.complete_upload(&key, &pending, complete).await;
    if completed.is_err() {
        inner.abort_upload(&key, &pending).await.unwrap();
    }
    out.push(("complete upload", completed.map(drop)));
    if store.versioned() {
        let page = inner.list_versions(KEY, None, 100).await.unwrap();
        let oldest = page.items.last().unwrap().version_id.clone();
        out.push(("delete version", store.delete_version(KEY, &oldest).await));
    } else {
        let versionless = store.delete_version(KEY, "v1").await;
        out.push(("delete version (unversioned)", versionless));
    }
    out.push(("delete", store.delete(KEY).await));
    out
}

#[tokio::test]
async fn every_mutating_method_on_a_locked_key_is_refused_and_changes_nothing() {
    let setup = Setup::new().await;
    let local = tempfile::NamedTempFile::new().unwrap();
    let (stores, _dir) = backends(&setup.clock());
    for (backend, inner) in stores {
        let oracle = Recording::new(Answer::Allow);
        let locked = setup.locked(inner.clone(), oracle.clone());
        seed(locked.as_ref(), inner.as_ref(), local.path()).await;
        let before = snapshot(inner.as_ref()).await;
        for (what, result) in every_mutation(locked.as_ref(), inner.as_ref(), local.path()).await {
            match result {
                Err(ObjectError::Retained(detail)) => {
                    let message = detail.message();
                    assert!(
                        message.contains(&hex::encode(R)),
                        "{backend} {what}: {message}"
                    );
                    assert!(
                        message.contains("retained until 5000"),
                        "{backend} {what}: {message}"
                    );
                }
                other => panic!("{backend} {what}: {other:?}"),
            }
        }
        assert_eq!(snapshot(inner.as_ref()).await, before, "{backend}");
        // The lock had not released: retention was never asked.
        assert_eq!(oracle.take(), Vec::<Item>::new(), "{backend}");
    }
}

#[tokio::test]
async fn create_only_writes_reads_and_listings_pass_a_locked_key_unasked() {
    let setup = Setup::new().await;
    let oracle = Recording::new(Answer::Deny("never"));
    let clock = setup.clock();
    let inner: Arc<dyn ObjectStore> = Arc::new(MemoryStore::versioned(clock));
    let locked = setup.locked(inner.clone(), oracle.clone());
    let md = Metadata::new();
    let piece = Bytes::from_static(b"piece");
    let crc = crc64_nvme(&piece);
    let create = PutCondition::IfNoneMatchAny;
    locked
        .put_whole(KEY, piece.clone(), &create, &md, crc)
        .await
        .unwrap();
    // A create over an existing piece fails as the store says, not as a lock.
    let again = locked
        .put_whole(KEY, piece.clone(), &create, &md, crc)
        .await;
    assert!(
        matches!(again, Err(ObjectError::PreconditionFailed(_))),
        "{again:?}"
    );
    assert_eq!(locked.get_whole(KEY, None).await.unwrap().1, piece);
    assert_eq!(locked.list(KEY, None, 10).await.unwrap().items.len(), 1);
    assert_eq!(
        locked
            .list_versions(KEY, None, 10)
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    assert!(oracle.take().is_empty());
}

#[tokio::test]
async fn a_released_lock_lets_every_mutation_through_without_asking_retention_again() {
    let setup = Setup::new().await;
    let local = tempfile::NamedTempFile::new().unwrap();
    let mut released = false;
    let (stores, _dir) = backends(&setup.clock());
    for (backend, inner) in stores {
        // Today's retention would keep it: the lock's retain-until is the
        // answer that counts, recorded when the request was filed.
        let oracle = Recording::new(Answer::Deny("retention was raised since"));
        let locked = setup.locked(inner.clone(), oracle.clone());
        // The first write of the key is the lock's own exception; release
        // only once every backend has its piece.
        seed(locked.as_ref(), inner.as_ref(), local.path()).await;
        if !released {
            setup.release().await;
            released = true;
        }
        let results = every_mutation(locked.as_ref(), inner.as_ref(), local.path()).await;
        for (what, result) in results {
            if what == "delete version (unversioned)" {
                assert!(
                    matches!(result, Err(ObjectError::Unsupported(_))),
                    "{backend}: {result:?}"
                );
            } else {
                assert_eq!(result, Ok(()), "{backend} {what}");
            }
        }
        assert_eq!(oracle.take(), Vec::<Item>::new(), "{backend}");
    }
}

#[tokio::test]
async fn a_retention_plugin_that_says_delete_everything_cannot_unlock_an_unreleased_lock() {
    let setup = Setup::new().await;
    let oracle = Recording::new(Answer::Allow);
    let inner: Arc<dyn ObjectStore> = Arc::new(MemoryStore::versioned(setup.clock()));
    let locked = setup.locked(inner.clone(), oracle.clone());
    let local = tempfile::NamedTempFile::new().unwrap();
    seed(locked.as_ref(), inner.as_ref(), local.path()).await;
    let held = lock_of(CREATED, RETAIN_UNTIL, true, false);
    // Retain-until not passed; passed but held; passed but not purging.
    for (when, lock, why) in [
        (1_000, None, "retained until 5000"),
        (RETAIN_UNTIL + 1, Some(held), "legal hold"),
        (
            RETAIN_UNTIL + 1,
            Some(lock_of(CREATED, RETAIN_UNTIL, false, false)),
            "not begun purging",
        ),
    ] {
        setup.clock.set(when);
        if let Some(lock) = lock {
            commit(setup.kv.as_ref(), vec![put_request(&R, &lock)]).await;
        }
        let result = locked.delete(KEY).await;
        match result {
            Err(ObjectError::Retained(detail)) => {
                assert!(detail.message().contains(why), "{detail}")
            }
            other => panic!("{why}: {other:?}"),
        }
    }
    assert!(oracle.take().is_empty());
    assert!(inner.head(KEY).await.is_ok());
}

#[tokio::test]
async fn a_released_piece_goes_even_with_no_retention_plugin_bound() {
    let setup = Setup::new().await;
    let inner: Arc<dyn ObjectStore> = Arc::new(MemoryStore::versioned(setup.clock()));
    let unbound: Arc<dyn RetentionOracle> = Arc::new(LateRetention::new());
    let local = tempfile::NamedTempFile::new().unwrap();
    let locked = setup.locked(inner.clone(), unbound);
    seed(locked.as_ref(), inner.as_ref(), local.path()).await;
    assert!(matches!(
        locked.delete(KEY).await,
        Err(ObjectError::Retained(_))
    ));
    setup.release().await;
    assert_eq!(locked.delete(KEY).await, Ok(()));
    assert!(matches!(
        inner.head(KEY).await,
        Err(ObjectError::NotFound(_))
    ));
}

#[tokio::test]
async fn a_write_checked_against_nothing_cannot_overwrite_a_piece_written_before_it_lands() {
    let setup = Setup::new().await;
    let inner: Arc<dyn ObjectStore> = Arc::new(MemoryStore::unversioned(setup.clock()));
    let raced = AtomicBool::new(false);
    let backend = inner.clone();
    // The takedown writes its piece just after the check saw nothing and
    // before the unconditional write reaches the store.
    let racing: Arc<dyn ObjectStore> = Arc::new(Observed::before(inner.clone(), move |call| {
        if let Call::Put { key: KEY } = call
            && !raced.swap(true, Ordering::SeqCst)
        {
            let piece = Bytes::from_static(b"piece");
            let crc = crc64_nvme(&piece);
            // The memory store answers on the first poll.
            let md = Metadata::new();
            let put = backend.put_whole(KEY, piece, &PutCondition::IfNoneMatchAny, &md, crc);
            futures::FutureExt::now_or_never(put)
                .expect("the memory store answers at once")
                .unwrap();
        }
        Ok(())
    }));
    let oracle = Recording::new(Answer::Allow);
    let locked = setup.locked(racing, oracle.clone());
    let result = locked
        .put_whole(
            KEY,
            Bytes::from_static(NEW),
            &PutCondition::Unconditional,
            &Metadata::new(),
            crc64_nvme(NEW),
        )
        .await;
    assert!(
        matches!(result, Err(ObjectError::Retained(_))),
        "{result:?}"
    );
    assert_eq!(
        inner.get_whole(KEY, None).await.unwrap().1,
        Bytes::from_static(b"piece")
    );
}

#[tokio::test]
async fn an_unlocked_key_of_an_unlocked_store_is_written_and_deleted_freely() {
    let setup = Setup::new().await;
    let oracle = Recording::new(Answer::Deny("never"));
    let inner: Arc<dyn ObjectStore> = Arc::new(MemoryStore::versioned(setup.clock()));
    let locked = setup.locked(inner, oracle.clone());
    let md = Metadata::new();
    for _ in 0..2 {
        locked
            .put_whole(
                "other",
                Bytes::from_static(NEW),
                &PutCondition::Unconditional,
                &md,
                crc64_nvme(NEW),
            )
            .await
            .unwrap();
    }
    locked.delete("other").await.unwrap();
    assert!(oracle.take().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_plugin_host_call_blocking_on_the_store_gets_its_answer_without_deadlock() {
    let setup = Setup::new().await;
    let inner: Arc<dyn ObjectStore> = Arc::new(MemoryStore::versioned(setup.clock()));
    let oracle = Recording::new(Answer::Allow);
    let locked = setup.locked(inner.clone(), oracle.clone());
    let local = tempfile::NamedTempFile::new().unwrap();
    seed(locked.as_ref(), inner.as_ref(), local.path()).await;
    setup.release().await;
    // As a plugin's host call does: on a blocking thread, block on the
    // store's future with the I/O runtime's handle.
    let io = tokio::runtime::Handle::current();
    let deleted = tokio::task::spawn_blocking(move || io.block_on(locked.delete(KEY)))
        .await
        .unwrap();
    assert_eq!(deleted, Ok(()));
    assert_eq!(oracle.take(), Vec::<Item>::new());
}
