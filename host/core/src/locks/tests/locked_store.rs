//! A store configured `locked`: every destructive request asks retention
//! about exactly the version it would destroy, and a denial changes
//! nothing.

use std::sync::Arc;

use bytes::Bytes;
use custodian_base::checksum::crc64_nvme;
use custodian_base::clock::{Clock, FixedClock};
use custodian_kv::Kv;
use custodian_kv::memory::MemoryKv;
use custodian_object::fs::FsStore;
use custodian_object::memory::MemoryStore;
use custodian_object::{Metadata, ObjectError, ObjectStore, ObjectStoreExt, PutCondition};

use super::{Answer, Recording};
use crate::decisions::retention::{Item, Stage};
use crate::locks::{LockGuard, Locks};

const KEY: &str = "docs/a";

fn retaining(created_ms: u64, noncurrent_since_ms: Option<u64>) -> Item {
    Item {
        created_ms,
        noncurrent_since_ms,
        hold: false,
        stage: Stage::Retaining,
    }
}

struct Locked {
    clock: Arc<FixedClock>,
    oracle: Arc<Recording>,
    inner: Arc<dyn ObjectStore>,
    store: Arc<dyn ObjectStore>,
    _dir: tempfile::TempDir,
}

/// A locked store on the memory or filesystem backend, versioned or not,
/// its clock at 1000.
fn locked(fs: bool, versioned: bool) -> Locked {
    let clock = Arc::new(FixedClock::new(1_000));
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let dir = tempfile::tempdir().unwrap();
    let inner: Arc<dyn ObjectStore> = match (fs, versioned) {
        (true, _) => Arc::new(FsStore::open(dir.path(), dyn_clock.clone(), versioned).unwrap()),
        (false, true) => Arc::new(MemoryStore::versioned(dyn_clock.clone())),
        (false, false) => Arc::new(MemoryStore::unversioned(dyn_clock.clone())),
    };
    let kv: Arc<dyn Kv> = Arc::new(LockGuard::new(
        Arc::new(MemoryKv::new(dyn_clock.clone())),
        dyn_clock.clone(),
    ));
    let oracle = Recording::new(Answer::Allow);
    let store = Locks::new(kv, dyn_clock, oracle.clone()).store("docs", inner.clone(), true);
    Locked {
        clock,
        oracle,
        inner,
        store,
        _dir: dir,
    }
}

impl Locked {
    async fn put_at(&self, now: u64, body: &'static [u8]) -> Result<String, ObjectError> {
        self.clock.set(now);
        let meta = self
            .store
            .put_whole(
                KEY,
                Bytes::from_static(body),
                &PutCondition::Unconditional,
                &Metadata::new(),
                crc64_nvme(body),
            )
            .await?;
        Ok(meta.version_id.unwrap_or_default())
    }

    async fn versions(&self) -> Vec<(String, bool)> {
        let page = self.inner.list_versions(KEY, None, 100).await.unwrap();
        page.items
            .into_iter()
            .map(|v| (v.version_id, v.is_delete_marker))
            .collect()
    }
}

#[tokio::test]
async fn a_locked_store_asks_retention_about_exactly_the_version_each_request_destroys() {
    for fs in [false, true] {
        let store = locked(fs, true);
        let backend = if fs { "fs" } else { "memory" };
        let v1 = store.put_at(1_000, b"one").await.unwrap();
        // A first write destroys nothing: retention is not asked.
        assert_eq!(store.oracle.take(), vec![], "{backend}");
        let v2 = store.put_at(2_000, b"two").await.unwrap();
        assert_eq!(
            store.oracle.take(),
            vec![retaining(1_000, None)],
            "{backend}"
        );
        store.put_at(3_000, b"three").await.unwrap();
        assert_eq!(
            store.oracle.take(),
            vec![retaining(2_000, None)],
            "{backend}"
        );
        store.clock.set(4_000);

        store.oracle.answer(Answer::Deny("kept seven years"));
        let before = store.versions().await;
        for (version, item) in [
            (Some(&v1), retaining(1_000, Some(2_000))),
            (Some(&v2), retaining(2_000, Some(3_000))),
            (None, retaining(3_000, None)),
        ] {
            let result = match version {
                Some(v) => store.store.delete_version(KEY, v).await,
                None => store.store.delete(KEY).await,
            };
            match result {
                Err(ObjectError::Retained(d)) => {
                    assert!(d.message().contains("kept seven years"), "{backend}: {d}");
                }
                other => panic!("{backend}: {other:?}"),
            }
            assert_eq!(store.oracle.take(), vec![item], "{backend}");
        }
        let overwrite = store.put_at(4_000, b"four").await;
        assert!(
            matches!(overwrite, Err(ObjectError::Retained(_))),
            "{backend}"
        );
        assert_eq!(
            store.oracle.take(),
            vec![retaining(3_000, None)],
            "{backend}"
        );
        assert_eq!(
            store.versions().await,
            before,
            "{backend}: a denial changed nothing"
        );

        store.oracle.answer(Answer::Allow);
        store.store.delete_version(KEY, &v2).await.unwrap();
        assert_eq!(
            store.oracle.take(),
            vec![retaining(2_000, Some(3_000))],
            "{backend}"
        );
        // v1 became noncurrent when v2, now gone, was written: its
        // neighbour is v3 now, as the store lists it.
        store.store.delete_version(KEY, &v1).await.unwrap();
        assert_eq!(
            store.oracle.take(),
            vec![retaining(1_000, Some(3_000))],
            "{backend}"
        );
        store.store.delete(KEY).await.unwrap();
        assert_eq!(
            store.oracle.take(),
            vec![retaining(3_000, None)],
            "{backend}"
        );
        // A delete marker holds no bytes: removing it asks nothing; nor does
        // a delete of a key or version that is not there.
        let marker = store
            .versions()
            .await
            .into_iter()
            .find(|(_, marker)| *marker)
            .expect("a delete marker")
            .0;
        store.store.delete_version(KEY, &marker).await.unwrap();
        store
            .store
            .delete_version(KEY, "no-such-version")
            .await
            .ok();
        store.store.delete("docs/none").await.unwrap();
        assert_eq!(store.oracle.take(), vec![], "{backend}");
    }
}

#[tokio::test]
async fn an_unversioned_locked_store_asks_before_an_overwrite_or_a_delete() {
    for fs in [false, true] {
        let store = locked(fs, false);
        store.put_at(1_000, b"one").await.unwrap();
        store.oracle.answer(Answer::Deny("not yet"));
        assert!(matches!(
            store.put_at(2_000, b"two").await,
            Err(ObjectError::Retained(_))
        ));
        assert!(matches!(
            store.store.delete(KEY).await,
            Err(ObjectError::Retained(_))
        ));
        assert_eq!(
            store.oracle.take(),
            vec![retaining(1_000, None), retaining(1_000, None)]
        );
        assert_eq!(
            store.inner.get_whole(KEY, None).await.unwrap().1,
            Bytes::from_static(b"one")
        );
        store.oracle.answer(Answer::Allow);
        store.put_at(3_000, b"three").await.unwrap();
        store.store.delete(KEY).await.unwrap();
        assert_eq!(
            store.oracle.take(),
            vec![retaining(1_000, None), retaining(3_000, None)]
        );
    }
}

#[tokio::test]
async fn a_create_only_write_to_a_locked_store_asks_nothing() {
    let store = locked(false, true);
    store.oracle.answer(Answer::Deny("never"));
    let create = PutCondition::IfNoneMatchAny;
    let body = Bytes::from_static(b"x");
    let put = store
        .store
        .put_whole(
            "fresh",
            body.clone(),
            &create,
            &Metadata::new(),
            crc64_nvme(&body),
        )
        .await;
    assert!(put.is_ok(), "{put:?}");
    assert_eq!(store.oracle.take(), vec![]);
}

#[tokio::test]
async fn a_locked_store_whose_retention_plugin_cannot_answer_refuses_as_unavailable() {
    for fs in [false, true] {
        let store = locked(fs, true);
        let version = store.put_at(1_000, b"one").await.unwrap();
        store.oracle.answer(Answer::Fail);
        let before = store.versions().await;
        let deleted = store.store.delete_version(KEY, &version).await;
        assert!(
            matches!(deleted, Err(ObjectError::Unavailable(_))),
            "fs {fs}: {deleted:?}"
        );
        let overwritten = store.put_at(2_000, b"two").await;
        assert!(
            matches!(overwritten, Err(ObjectError::Unavailable(_))),
            "fs {fs}: {overwritten:?}"
        );
        assert_eq!(store.versions().await, before, "fs {fs}: nothing changed");
    }
}
