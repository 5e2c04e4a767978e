//! The runner on the memory and filesystem stores (and moto's S3): what
//! is deleted, what is kept, what is refused.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::{Value, json};

use super::error::PurgeError;
use super::plan::{CandidateRef, Plan, registry_key};
use super::report::PurgeFailure;
use super::report::PurgeReport;
use super::run::{PURGE_WORKERS, purge};
use crate::decisions::PolicyError;
use crate::decisions::purge::{Candidate, Governance, PurgeJudge, Verdict};
use crate::decisions::retention::{Assessment, Item, RetentionOracle, Verdict as Allowed};
use custodian_base::clock::SystemClock;
use custodian_object::ObjectStoreExt;
use custodian_object::fs::FsStore;
use custodian_object::memory::MemoryStore;
use custodian_object::observed::{Call, Observed};
use custodian_object::{Metadata, ObjectError, ObjectMeta, ObjectStore, PutCondition};

/// The seed's decisions: mapped and unarchived versions go, unmapped stay.
struct SeedJudge;

#[async_trait]
impl PurgeJudge for SeedJudge {
    async fn judge(
        &self,
        _candidate: &Candidate,
        governance: &Governance,
        _now_ms: u64,
    ) -> Result<Verdict, PolicyError> {
        Ok(match governance {
            Governance::Mapped(_) | Governance::Unarchived => Verdict::Delete,
            Governance::Unmapped(source) => Verdict::Retain(format!("{source} does not map it")),
        })
    }
}

/// Allows every deletion, or (`keep_current`) keeps current versions.
struct Oracle {
    keep_current: bool,
}

impl RetentionOracle for Oracle {
    fn assess(&self, item: Item, now_ms: u64) -> Result<Assessment, PolicyError> {
        let may_delete = if self.keep_current && item.noncurrent_since_ms.is_none() {
            Allowed::Deny("the current version is retained".into())
        } else {
            Allowed::Allow
        };
        Ok(Assessment {
            retain_until_ms: now_ms,
            may_delete,
            may_purge: Allowed::Allow,
            next_check_ms: now_ms,
        })
    }

    fn set_hold(&self, item: Item, _enabled: bool) -> Result<Item, PolicyError> {
        Ok(item)
    }
}

const ALLOW: Oracle = Oracle {
    keep_current: false,
};

/// Each backend the runner is tested on; the directory keeps the
/// filesystem store alive.
fn stores() -> Vec<(Arc<dyn ObjectStore>, Option<tempfile::TempDir>)> {
    let dir = tempfile::tempdir().unwrap();
    let fs = FsStore::open(&dir.path().join("store"), Arc::new(SystemClock), true).unwrap();
    vec![
        (
            Arc::new(MemoryStore::versioned(Arc::new(SystemClock))),
            None,
        ),
        (Arc::new(fs), Some(dir)),
    ]
}

async fn put(store: &dyn ObjectStore, key: &str, bytes: &[u8]) -> ObjectMeta {
    store
        .put_whole(
            key,
            Bytes::copy_from_slice(bytes),
            &PutCondition::Unconditional,
            &Metadata::new(),
            custodian_base::checksum::crc64_nvme(bytes),
        )
        .await
        .unwrap_or_else(|e| panic!("publishing {key}: {e}"))
}

fn version(meta: &ObjectMeta) -> String {
    meta.version_id.clone().unwrap()
}

/// A copied registry of `source` → `archive/LEAF` mapping `moved`.
fn registry(source: &str, moved: &[&ObjectMeta]) -> Value {
    let leaf = source.rsplit('/').next().unwrap();
    let rows: Vec<Value> = moved
        .iter()
        .map(|meta| {
            let suffix = meta.key.strip_prefix(&format!("{source}/")).unwrap();
            json!({"source_object": meta.key, "source_version_id": version(meta),
                   "source_etag": meta.etag,
                   "destination_object": format!("archive/{leaf}/{suffix}"),
                   "destination_version_id": "w", "destination_etag": "f",
                   "size": meta.size, "delete_marker": false})
        })
        .collect();
    json!({"schema_version": 1, "status": "copied", "source": source,
           "destination": format!("archive/{leaf}"), "versions": rows})
}

/// Publishes `document` as the registry of `source`; returns its proof.
async fn publish(store: &dyn ObjectStore, source: &str, document: &Value) -> Value {
    let meta = put(
        store,
        &registry_key(source),
        document.to_string().as_bytes(),
    )
    .await;
    json!({"receipt": document,
           "coordination": {"registry_version_id": version(&meta), "registry_etag": meta.etag}})
}

fn archived(source: &str, object: &str, version_id: &str) -> CandidateRef {
    CandidateRef {
        pointer: registry_key(source),
        object: object.into(),
        version_id: version_id.into(),
    }
}

fn generic(object: &str, version_id: &str) -> CandidateRef {
    CandidateRef {
        pointer: "pins.json".into(),
        object: object.into(),
        version_id: version_id.into(),
    }
}

async fn versions_of(store: &dyn ObjectStore, prefix: &str) -> Vec<(String, String)> {
    let page = store.list_versions(prefix, None, 1000).await.unwrap();
    page.items
        .into_iter()
        .map(|v| (v.key, v.version_id))
        .collect()
}

async fn run(
    store: &dyn ObjectStore,
    plan: &Plan,
    oracle: &Oracle,
) -> Result<PurgeReport, PurgeFailure> {
    purge(store, plan, &SeedJudge, oracle, 1_000).await
}

#[tokio::test]
async fn exactly_the_mapped_versions_are_deleted_unmapped_retained_and_absent_reported() {
    for (store, _dir) in stores() {
        let store = store.as_ref();
        let x1 = put(store, "old/task/x", b"x one").await;
        let x2 = put(store, "old/task/x", b"x two").await;
        let y = put(store, "old/task/d/y", b"y").await;
        put(store, "old/taskmate/z", b"a neighbour").await;
        let document = registry("old/task", &[&x1, &y]);
        let proof = publish(store, "old/task", &document).await;
        let plan = Plan::new(
            vec![
                archived("old/task", "old/task/x", &version(&x1)),
                archived("old/task", "old/task/d/y", &version(&y)),
                archived("old/task", "old/task/gone", "v-gone"),
            ],
            vec![],
            vec![proof],
        )
        .unwrap();
        let report = run(store, &plan, &ALLOW).await.unwrap();
        let deleted: Vec<_> = report
            .deleted
            .iter()
            .map(|d| (d.candidate.object.as_str(), d.deleted_version_ids.clone()))
            .collect();
        assert_eq!(
            deleted,
            [
                ("old/task/d/y", vec![version(&y)]),
                ("old/task/x", vec![version(&x1)])
            ]
        );
        assert_eq!(
            report.already_absent,
            [archived("old/task", "old/task/gone", "v-gone")]
        );
        assert_eq!(
            report.retained_unmapped,
            [archived("old/task", "old/task/x", &version(&x2))]
        );
        assert!(report.cleaned_prefixes.is_empty());
        assert!(report.retained.is_empty());
        let left = versions_of(store, "old/").await;
        assert!(left.contains(&("old/task/x".into(), version(&x2))));
        assert!(!left.contains(&("old/task/x".into(), version(&x1))));
        assert!(left.iter().any(|(k, _)| k == "old/taskmate/z"));
        assert!(left.iter().any(|(k, _)| k == &registry_key("old/task")));
    }
}

#[tokio::test]
async fn a_prefix_with_nothing_left_but_its_registry_is_cleaned_and_the_registry_kept() {
    for (store, _dir) in stores() {
        let store = store.as_ref();
        let x = put(store, "t/src/x", b"x").await;
        let document = registry("t/src", &[&x]);
        let proof = publish(store, "t/src", &document).await;
        let plan = Plan::new(
            vec![archived("t/src", "t/src/x", &version(&x))],
            vec![document],
            vec![proof],
        )
        .unwrap();
        let report = run(store, &plan, &ALLOW).await.unwrap();
        assert_eq!(report.cleaned_prefixes, ["t/src"]);
        assert_eq!(
            versions_of(store, "t/src/").await,
            [(
                registry_key("t/src"),
                versions_of(store, "t/src/").await[0].1.clone()
            )]
        );
    }
}

#[tokio::test]
async fn a_registry_differing_from_the_coordinated_receipt_is_refused_before_deleting_anything() {
    for (store, _dir) in stores() {
        let store = store.as_ref();
        let x = put(store, "old/task/x", b"x").await;
        let loose = put(store, "loose/key", b"unarchived").await;
        let document = registry("old/task", &[&x]);
        let proof = publish(store, "old/task", &document).await;
        let candidates = vec![
            generic("loose/key", &version(&loose)),
            archived("old/task", "old/task/x", &version(&x)),
        ];
        let before = versions_of(store, "").await;

        // The receipt says something else than what is published.
        let mut forged = proof.clone();
        forged["receipt"]["versions"] = json!([]);
        let plan = Plan::new(candidates.clone(), vec![], vec![forged]).unwrap();
        let failure = run(store, &plan, &ALLOW).await.unwrap_err();
        assert!(
            failure
                .error
                .to_string()
                .contains("differs from the coordinated receipt"),
            "{}",
            failure.error
        );
        assert_eq!(failure.partial, PurgeReport::default());

        // The registry was re-published since the proof was taken.
        publish(store, "old/task", &document).await;
        let plan = Plan::new(candidates.clone(), vec![], vec![proof.clone()]).unwrap();
        let failure = run(store, &plan, &ALLOW).await.unwrap_err();
        assert!(
            matches!(failure.error, PurgeError::Refused(_)),
            "{}",
            failure.error
        );
        assert!(failure.error.to_string().contains("current version"));

        // No proof at all.
        let plan = Plan::new(candidates, vec![], vec![]).unwrap();
        let failure = run(store, &plan, &ALLOW).await.unwrap_err();
        assert!(failure.error.to_string().contains("coordination proof"));

        let after = versions_of(store, "").await;
        for item in &before {
            assert!(after.contains(item), "{item:?} was deleted");
        }
    }
}

/// The seed's decisions, but re-publishes a registry on its second call.
struct RepublishingJudge {
    store: Arc<dyn ObjectStore>,
    source: String,
    document: Value,
    calls: AtomicUsize,
}

#[async_trait]
impl PurgeJudge for RepublishingJudge {
    async fn judge(
        &self,
        candidate: &Candidate,
        governance: &Governance,
        now_ms: u64,
    ) -> Result<Verdict, PolicyError> {
        if self.calls.fetch_add(1, Ordering::SeqCst) == 1 {
            publish(self.store.as_ref(), &self.source, &self.document).await;
        }
        SeedJudge.judge(candidate, governance, now_ms).await
    }
}

#[tokio::test]
async fn a_registry_republished_mid_run_stops_it_before_the_next_deletion() {
    for (store, _dir) in stores() {
        let x = put(store.as_ref(), "old/task/x", b"x").await;
        let y = put(store.as_ref(), "old/task/y", b"y").await;
        let document = registry("old/task", &[&x, &y]);
        let proof = publish(store.as_ref(), "old/task", &document).await;
        let plan = Plan::new(
            vec![
                archived("old/task", "old/task/x", &version(&x)),
                archived("old/task", "old/task/y", &version(&y)),
            ],
            vec![],
            vec![proof],
        )
        .unwrap();
        let judge = RepublishingJudge {
            store: store.clone(),
            source: "old/task".into(),
            document,
            calls: AtomicUsize::new(0),
        };
        let failure = purge(store.as_ref(), &plan, &judge, &ALLOW, 1_000)
            .await
            .unwrap_err();
        assert!(
            failure.error.to_string().contains("re-published"),
            "{}",
            failure.error
        );
        assert_eq!(failure.partial.deleted.len(), 1);
        assert_eq!(failure.partial.deleted[0].candidate.object, "old/task/x");
        assert_eq!(versions_of(store.as_ref(), "old/task/y").await.len(), 1);
    }
}

#[tokio::test]
async fn a_present_archive_candidate_the_registry_does_not_map_refuses_the_run() {
    for (store, _dir) in stores() {
        let store = store.as_ref();
        let x1 = put(store, "old/task/x", b"one").await;
        let x2 = put(store, "old/task/x", b"two").await;
        let proof = publish(store, "old/task", &registry("old/task", &[&x1])).await;
        let plan = Plan::new(
            vec![
                archived("old/task", "old/task/x", &version(&x1)),
                archived("old/task", "old/task/x", &version(&x2)),
            ],
            vec![],
            vec![proof],
        )
        .unwrap();
        let failure = run(store, &plan, &ALLOW).await.unwrap_err();
        assert!(
            failure.error.to_string().contains("not mapped"),
            "{}",
            failure.error
        );
        assert_eq!(versions_of(store, "old/task/x").await.len(), 2);
    }
}

#[tokio::test]
async fn a_version_retention_keeps_is_reported_not_deleted() {
    for (store, _dir) in stores() {
        let store = store.as_ref();
        let old = put(store, "m/key", b"old").await;
        let current = put(store, "m/key", b"current").await;
        let plan = Plan::new(vec![generic("m/key", &version(&old))], vec![], vec![]).unwrap();
        let report = run(store, &plan, &Oracle { keep_current: true })
            .await
            .unwrap();
        assert_eq!(report.retained.len(), 1);
        assert_eq!(report.retained[0].candidate.version_id, version(&current));
        assert!(
            report.retained[0].reason.contains("retention"),
            "{:?}",
            report.retained
        );
        assert_eq!(report.deleted[0].deleted_version_ids, [version(&old)]);
        assert_eq!(
            versions_of(store, "m/key").await,
            [("m/key".to_owned(), version(&current))]
        );
    }
}

#[tokio::test]
async fn a_generic_unarchived_key_is_fully_retired_and_verified_absent() {
    for (store, _dir) in stores() {
        let store = store.as_ref();
        let first = put(store, "data/a.csv", b"1").await;
        put(store, "data/a.csv", b"2").await;
        store.delete("data/a.csv").await.unwrap();
        put(store, "data/a.csv.bak", b"a neighbour with a longer name").await;
        let mut all = versions_of(store, "data/a.csv").await;
        all.retain(|(k, _)| k == "data/a.csv");
        let plan = Plan::new(
            vec![
                generic("data/a.csv", &version(&first)),
                generic("data/never", "v0"),
            ],
            vec![],
            vec![],
        )
        .unwrap();
        let report = run(store, &plan, &ALLOW).await.unwrap();
        let mut ids: Vec<String> = all.into_iter().map(|(_, v)| v).collect();
        ids.sort();
        assert_eq!(report.deleted.len(), 1);
        assert_eq!(report.deleted[0].deleted_version_ids, ids);
        assert_eq!(ids.len(), 3, "two versions and a delete marker");
        assert_eq!(report.already_absent, [generic("data/never", "v0")]);
        assert_eq!(
            versions_of(store, "data/")
                .await
                .iter()
                .map(|(k, _)| k.as_str())
                .collect::<Vec<_>>(),
            ["data/a.csv.bak"]
        );
    }
}

#[tokio::test]
async fn a_generic_key_under_a_registry_loses_its_mapped_versions_only_with_a_proof() {
    for (store, _dir) in stores() {
        let store = store.as_ref();
        let mapped = put(store, "proj/set/k", b"moved").await;
        let unmapped = put(store, "proj/set/k", b"written after the copy").await;
        let proof = publish(store, "proj/set", &registry("proj/set", &[&mapped])).await;
        let candidates = vec![generic("proj/set/k", &version(&mapped))];
        let plan = Plan::new(candidates.clone(), vec![], vec![]).unwrap();
        let failure = run(store, &plan, &ALLOW).await.unwrap_err();
        assert!(
            failure.error.to_string().contains("coordination proof"),
            "{}",
            failure.error
        );
        assert_eq!(versions_of(store, "proj/set/k").await.len(), 2);

        let plan = Plan::new(candidates, vec![], vec![proof]).unwrap();
        let report = run(store, &plan, &ALLOW).await.unwrap();
        assert_eq!(report.deleted[0].deleted_version_ids, [version(&mapped)]);
        assert_eq!(
            report.retained_unmapped,
            [CandidateRef {
                pointer: registry_key("proj/set"),
                object: "proj/set/k".into(),
                version_id: version(&unmapped),
            }]
        );
        assert_eq!(
            versions_of(store, "proj/set/k").await,
            [("proj/set/k".to_owned(), version(&unmapped))]
        );
    }
}

#[tokio::test]
async fn a_generic_keys_missing_proof_refuses_the_plan_before_any_prefix_is_retired() {
    for (store, _dir) in stores() {
        let store = store.as_ref();
        let x = put(store, "old/task/x", b"x bytes").await;
        let document = registry("old/task", &[&x]);
        let archive_proof = publish(store, "old/task", &document).await;
        let mapped = put(store, "proj/set/k", b"moved").await;
        publish(store, "proj/set", &registry("proj/set", &[&mapped])).await;
        let plan = Plan::new(
            vec![
                archived("old/task", "old/task/x", &version(&x)),
                generic("proj/set/k", &version(&mapped)),
            ],
            vec![document],
            vec![archive_proof],
        )
        .unwrap();
        let failure = run(store, &plan, &ALLOW).await.unwrap_err();
        assert!(
            failure.error.to_string().contains("coordination proof"),
            "{}",
            failure.error
        );
        assert!(failure.partial.deleted.is_empty());
        assert_eq!(
            versions_of(store, "old/task/x").await.len(),
            1,
            "nothing deleted"
        );
    }
}

#[test]
fn task_prefixes_and_objects_must_be_clean_and_candidates_exact() {
    let bad_objects = ["../x", "a/../b", "a//b", "/a", "a/./b", "", "a/"];
    for object in bad_objects {
        let error = Plan::new(vec![generic(object, "v")], vec![], vec![]).unwrap_err();
        assert!(matches!(error, PurgeError::Plan(_)), "{object:?}: {error}");
    }
    for source in ["a/../b", "/a", "a//b", "."] {
        let candidate = archived(source, &format!("{source}/x"), "v");
        let error = Plan::new(vec![candidate], vec![], vec![]).unwrap_err();
        assert!(matches!(error, PurgeError::Plan(_)), "{source:?}: {error}");
    }
    let cases = [
        (archived("a/b", "a/c/x", "v"), "escapes"),
        (generic("a/b/.custodian-archive.json", "v"), "never purged"),
        (generic("a/b", "null"), "exact"),
        (generic("a/b", ""), "exact"),
    ];
    for (candidate, want) in cases {
        let error = Plan::new(vec![candidate], vec![], vec![]).unwrap_err();
        assert!(error.to_string().contains(want), "{error}");
    }
    assert!(Plan::new(vec![archived("a/b", "a/b/c/x", "v")], vec![], vec![]).is_ok());
}

#[test]
fn a_plan_is_an_object_or_the_bare_list_and_rejects_what_it_does_not_know() {
    let list = r#"[{"pointer": "p.json", "object": "a/b", "version_id": "v"}]"#;
    assert_eq!(Plan::parse(list).unwrap().generic.len(), 1);
    let object = format!(r#"{{"candidates": {list}, "prefixes": [], "coordination": []}}"#);
    assert_eq!(Plan::parse(&object).unwrap().generic.len(), 1);
    for bad in [
        r#"{"candidates": [], "extra": 1}"#.to_owned(),
        r#"[{"pointer": "p", "object": "a", "version_id": "v", "x": 1}]"#.to_owned(),
        r#"{"prefixes": [{"source": "a", "status": "planned", "versions": []}]}"#.to_owned(),
        r#"{"coordination": [{"receipt": {"source": "a"}, "coordination": {}}]}"#.to_owned(),
        "42".to_owned(),
    ] {
        let error = Plan::parse(&bad).unwrap_err();
        assert!(error.is_usage(), "{bad}: {error}");
    }
}

#[tokio::test]
async fn an_unversioned_store_is_refused() {
    let store = MemoryStore::unversioned(Arc::new(SystemClock));
    let plan = Plan::new(vec![generic("a/b", "v")], vec![], vec![]).unwrap();
    let failure = run(&store, &plan, &ALLOW).await.unwrap_err();
    assert!(matches!(failure.error, PurgeError::Unversioned(_)));
}

/// A store whose `delete_version` of one key fails, counting deletions.
#[tokio::test]
async fn workers_stop_after_the_first_error() {
    let inner: Arc<dyn ObjectStore> = Arc::new(MemoryStore::versioned(Arc::new(SystemClock)));
    let mut candidates = Vec::new();
    for i in 0..40 {
        let key = format!("k/{i:02}");
        let meta = put(inner.as_ref(), &key, b"bytes").await;
        candidates.push(generic(&key, &version(&meta)));
    }
    // Counts deletions; the one of `k/00` fails.
    let deletes = Arc::new(AtomicUsize::new(0));
    let seen = deletes.clone();
    let store = Observed::before(inner.clone(), move |call| match call {
        Call::Delete {
            key,
            version_id: Some(_),
        } => {
            seen.fetch_add(1, Ordering::SeqCst);
            if *key == "k/00" {
                return Err(ObjectError::Unavailable("injected".into()));
            }
            Ok(())
        }
        _ => Ok(()),
    });
    let plan = Plan::new(candidates, vec![], vec![]).unwrap();
    let failure = run(&store, &plan, &ALLOW).await.unwrap_err();
    assert!(
        matches!(failure.error, PurgeError::Store { .. }),
        "{}",
        failure.error
    );
    assert!(
        failure.error.to_string().contains("k/00"),
        "{}",
        failure.error
    );
    let attempted = deletes.load(Ordering::SeqCst);
    assert!(
        attempted <= PURGE_WORKERS,
        "{attempted} deletions attempted"
    );
    assert_eq!(failure.partial.deleted.len(), attempted - 1);
    let left = versions_of(inner.as_ref(), "k/").await.len();
    assert_eq!(left, 40 - (attempted - 1));
}

mod s3 {
    use super::*;
    use custodian_object::s3::local_server::{self, Kind};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_moto_an_archive_prefix_is_retired_and_cleaned() {
        let Some(store) = local_server::store(Kind::Moto).await else {
            return;
        };
        let x = put(&store, "old/task/x", b"x").await;
        let y = put(&store, "old/task/d/y", b"y").await;
        let loose = put(&store, "loose/key", b"z").await;
        let document = registry("old/task", &[&x, &y]);
        let proof = publish(&store, "old/task", &document).await;
        let plan = Plan::new(
            vec![
                archived("old/task", "old/task/x", &version(&x)),
                archived("old/task", "old/task/d/y", &version(&y)),
                generic("loose/key", &version(&loose)),
            ],
            vec![document],
            vec![proof],
        )
        .unwrap();
        let report = run(&store, &plan, &ALLOW).await.unwrap();
        assert_eq!(report.cleaned_prefixes, ["old/task"]);
        assert_eq!(report.deleted.len(), 3);
        let left: Vec<String> = versions_of(&store, "")
            .await
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(left, [registry_key("old/task")]);
    }
}
