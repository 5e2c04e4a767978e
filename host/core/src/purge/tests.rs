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

/// A copied registry of `source` → `archive/LEAF` mapping `moved`, whose
/// destination copies are really made (with their CRC-64/NVME recorded),
/// so that its history holds.
async fn registry(store: &dyn ObjectStore, source: &str, moved: &[&ObjectMeta]) -> Value {
    let leaf = source.rsplit('/').next().unwrap();
    let mut rows = Vec::new();
    for meta in moved {
        let suffix = meta.key.strip_prefix(&format!("{source}/")).unwrap();
        let destination = format!("archive/{leaf}/{suffix}");
        let (_, bytes) = store.get_version(&meta.key, &version(meta)).await.unwrap();
        let copy = put(store, &destination, &bytes).await;
        let mut row = json!({"source_object": meta.key, "source_version_id": version(meta),
               "source_etag": meta.etag,
               "destination_object": destination,
               "destination_version_id": version(&copy), "destination_etag": copy.etag,
               "size": meta.size, "delete_marker": false});
        if let Some(crc) = copy.crc64 {
            row["destination_crc64nvme"] = json!(format!("{crc:016x}"));
        }
        rows.push(row);
    }
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

/// `old/task/x` and `old/task/y`, archived by a published registry, and
/// the plan retiring both with its proof.
async fn two_archived(store: &dyn ObjectStore) -> (ObjectMeta, ObjectMeta, Value, Plan) {
    let x = put(store, "old/task/x", b"x").await;
    let y = put(store, "old/task/y", b"y").await;
    let document = registry(store, "old/task", &[&x, &y]).await;
    let proof = publish(store, "old/task", &document).await;
    let plan = Plan::new(
        vec![
            archived("old/task", "old/task/x", &version(&x)),
            archived("old/task", "old/task/y", &version(&y)),
        ],
        vec![],
        vec![proof],
    )
    .unwrap();
    (x, y, document, plan)
}

fn archived(source: &str, object: &str, version_id: &str) -> CandidateRef {
    CandidateRef {
        pointer: registry_key(source),
        object: object.into(),
        version_id: version_id.into(),
        revision: None,
    }
}

fn generic(object: &str, version_id: &str) -> CandidateRef {
    CandidateRef {
        pointer: "pins.json".into(),
        object: object.into(),
        version_id: version_id.into(),
        revision: None,
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
        let document = registry(store, "old/task", &[&x1, &y]).await;
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
        let document = registry(store, "t/src", &[&x]).await;
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
        let document = registry(store, "old/task", &[&x]).await;
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
        let (_, _, document, plan) = two_archived(store.as_ref()).await;
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
        let proof = publish(
            store,
            "old/task",
            &registry(store, "old/task", &[&x1]).await,
        )
        .await;
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
        let proof = publish(
            store,
            "proj/set",
            &registry(store, "proj/set", &[&mapped]).await,
        )
        .await;
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
                revision: None,
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
        let document = registry(store, "old/task", &[&x]).await;
        let archive_proof = publish(store, "old/task", &document).await;
        let mapped = put(store, "proj/set/k", b"moved").await;
        publish(
            store,
            "proj/set",
            &registry(store, "proj/set", &[&mapped]).await,
        )
        .await;
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
        let document = registry(&store, "old/task", &[&x, &y]).await;
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
            .filter(|k| !k.starts_with("archive/"))
            .collect();
        assert_eq!(left, [registry_key("old/task")]);
    }
}

/// Deletes the destination copy of the version it is asked about second,
/// as an operator cleaning the archive out of band might mid-run.
struct SabotagingJudge<'a> {
    store: &'a dyn ObjectStore,
    asked: AtomicUsize,
}

#[async_trait]
impl PurgeJudge for SabotagingJudge<'_> {
    async fn judge(
        &self,
        _candidate: &Candidate,
        governance: &Governance,
        _now_ms: u64,
    ) -> Result<Verdict, PolicyError> {
        if let Governance::Mapped(mapping) = governance
            && self.asked.fetch_add(1, Ordering::SeqCst) == 1
        {
            self.store
                .delete_version(&mapping.destination_key, &mapping.destination_version_id)
                .await
                .unwrap();
        }
        Ok(Verdict::Delete)
    }
}

#[tokio::test]
async fn a_registry_whose_destination_copy_is_gone_or_altered_refuses_the_plan_before_any_deletion()
{
    for (store, _dir) in stores() {
        let store = store.as_ref();
        let x = put(store, "old/task/x", b"x").await;
        let y = put(store, "old/task/d/y", b"y").await;
        let loose = put(store, "loose/key", b"unarchived").await;
        let document = registry(store, "old/task", &[&x, &y]).await;
        let rows = document["versions"].as_array().unwrap().clone();
        let y_copy = (
            rows[1]["destination_object"].as_str().unwrap().to_owned(),
            rows[1]["destination_version_id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
        let candidates = vec![
            generic("loose/key", &version(&loose)),
            archived("old/task", "old/task/x", &version(&x)),
            archived("old/task", "old/task/d/y", &version(&y)),
        ];

        // A row recording another size, etag or CRC than its copy has.
        let altered = [
            ("size", json!(99), "size is 1, recorded 99"),
            ("destination_etag", json!("\"nope\""), "etag is"),
            (
                "destination_crc64nvme",
                json!("0000000000000000"),
                "crc64nvme is",
            ),
        ];
        for (field, value, want) in altered {
            let mut forged = document.clone();
            forged["versions"][1][field] = value;
            let proof = publish(store, "old/task", &forged).await;
            let before = versions_of(store, "").await;
            let plan = Plan::new(candidates.clone(), vec![], vec![proof]).unwrap();
            let failure = run(store, &plan, &ALLOW).await.unwrap_err();
            let message = failure.error.to_string();
            assert_eq!(failure.error.kind(), "history", "{message}");
            assert!(message.contains(want), "{field}: {message}");
            assert!(
                message.contains(&format!("old/task/d/y@{}", version(&y))),
                "the row is named: {message}"
            );
            assert_eq!(failure.partial, PurgeReport::default());
            assert_eq!(versions_of(store, "").await, before, "nothing deleted");
        }

        // The copy deleted out of band.
        let proof = publish(store, "old/task", &document).await;
        store.delete_version(&y_copy.0, &y_copy.1).await.unwrap();
        let before = versions_of(store, "").await;
        let plan = Plan::new(candidates.clone(), vec![], vec![proof]).unwrap();
        let failure = run(store, &plan, &ALLOW).await.unwrap_err();
        assert!(
            failure
                .error
                .to_string()
                .contains("the destination version does not exist"),
            "{}",
            failure.error
        );
        assert_eq!(versions_of(store, "").await, before, "nothing deleted");
    }
}

#[tokio::test]
async fn a_destination_copy_deleted_mid_run_stops_the_deletion_of_its_source() {
    for (store, _dir) in stores() {
        let store = store.as_ref();
        let (x, y, _, plan) = two_archived(store).await;
        let judge = SabotagingJudge {
            store,
            asked: AtomicUsize::new(0),
        };
        let failure = purge(store, &plan, &judge, &ALLOW, 1_000)
            .await
            .unwrap_err();
        assert_eq!(failure.error.kind(), "history", "{}", failure.error);
        assert!(
            failure
                .error
                .to_string()
                .contains(&format!("old/task/y@{}", version(&y))),
            "{}",
            failure.error
        );
        // The first version went; the one whose copy vanished did not.
        let left = versions_of(store, "old/task/").await;
        assert!(!left.contains(&("old/task/x".into(), version(&x))));
        assert!(left.contains(&("old/task/y".into(), version(&y))));
        assert_eq!(failure.partial.deleted.len(), 1);
    }
}

#[tokio::test]
async fn the_report_names_its_mode_and_remote_and_lists_mapped_versions_a_policy_kept() {
    for (store, _dir) in stores() {
        let store = store.as_ref();
        let x = put(store, "old/task/x", b"x").await;
        let document = registry(store, "old/task", &[&x]).await;
        let proof = publish(store, "old/task", &document).await;
        let plan = Plan::new(
            vec![archived("old/task", "old/task/x", &version(&x))],
            vec![],
            vec![proof],
        )
        .unwrap();
        let keep = Oracle { keep_current: true };
        let mut report = run(store, &plan, &keep).await.unwrap();
        assert_eq!(
            report.retained_mapped,
            [archived("old/task", "old/task/x", &version(&x))]
        );
        assert_eq!(report.retained.len(), 1);
        report.remote = "s3://bucket/prefix".into();
        let document = report.to_json();
        assert_eq!(document["mode"], "permanent-version-deletion");
        assert_eq!(document["remote"], "s3://bucket/prefix");
        assert_eq!(document["retained_mapped"][0]["object"], "old/task/x");
    }
}
