use std::sync::OnceLock;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::Semaphore;

use super::*;
use custodian_base::clock::FixedClock;
use custodian_core::decisions::purge::{Candidate, Governance, Verdict};
use custodian_core::purge::plan::registry_key;
use custodian_core::versions::aliases::Aliases;
use custodian_core::versions::digest::Digest;
use custodian_core::versions::verify::verify;
use custodian_kv::Kv;
use custodian_kv::memory::MemoryKv;
use custodian_object::ObjectStoreExt;
use custodian_object::memory::MemoryStore;
use custodian_object::{Metadata, ObjectMeta, PutCondition};
use custodian_runtime::bundled;
use custodian_runtime::policy::PolicyError;
use custodian_runtime::policy::archive::ArchivePolicy;
use custodian_runtime::policy::purge::PurgePolicy;
use custodian_runtime::policy::retention::{RetentionPolicy, RetentionRoute, Settings};
use custodian_runtime::{Limits, Plugin, Runtime, RuntimeConfig, Services, World};

/// When the test objects are written.
const T0: u64 = 1_700_000_000_000;
/// When the jobs run: a day later, past the retention below.
const NOW: u64 = T0 + 86_400_000;
const HOUR: u64 = 3_600_000;

/// The bundled plugin of `world`, compiled once per test binary
/// (compiling is the slow part; the runtime's ticker lives on in the
/// plugins).
fn plugin(world: World) -> Arc<Plugin> {
    static LOADED: OnceLock<BTreeMap<&'static str, Arc<Plugin>>> = OnceLock::new();
    let loaded = LOADED.get_or_init(|| {
        let runtime = Runtime::new(&RuntimeConfig {
            cache_dir: None,
            concurrent_calls: 32,
        })
        .unwrap();
        [World::Archive, World::Purge, World::Retention]
            .into_iter()
            .map(|world| {
                let bytes = bundled::plugin(world).unwrap();
                let plugin = runtime.load_bytes(bytes, &bundled::name(world)).unwrap();
                (world.name(), Arc::new(plugin))
            })
            .collect()
    });
    loaded[world.name()].clone()
}

/// What a plugin granted nothing gets: a clock and the I/O runtime.
fn services() -> Arc<Services> {
    let clock: Arc<dyn Clock> = Arc::new(FixedClock::new(NOW));
    Arc::new(Services {
        kv: Arc::new(MemoryKv::new(clock.clone())),
        stores: BTreeMap::new(),
        clock,
        io: tokio::runtime::Handle::current(),
        retention: None,
    })
}

fn archive() -> Arc<ArchivePolicy> {
    Arc::new(ArchivePolicy::new(plugin(World::Archive), services(), Limits::default()).unwrap())
}

fn purge_policy() -> Arc<PurgePolicy> {
    Arc::new(PurgePolicy::new(plugin(World::Purge), services(), Limits::default()).unwrap())
}

fn retention() -> Arc<RetentionRoute> {
    let policy = RetentionPolicy::new(plugin(World::Retention)).unwrap();
    let settings = Settings {
        retention_ms: HOUR,
        noncurrent_retention_ms: HOUR,
    };
    Arc::new(RetentionRoute::new(
        Arc::new(policy),
        settings,
        services(),
        Limits::default(),
    ))
}

fn store() -> Arc<dyn ObjectStore> {
    Arc::new(MemoryStore::versioned(Arc::new(FixedClock::new(T0))))
}

fn verify_deps(store: &Arc<dyn ObjectStore>) -> VerifyDeps {
    VerifyDeps {
        store: store.clone(),
        archive: archive(),
        clock: Arc::new(FixedClock::new(NOW)),
    }
}

fn purge_deps(store: &Arc<dyn ObjectStore>, judge: Arc<dyn PurgeJudge>) -> PurgeDeps {
    PurgeDeps {
        store: store.clone(),
        purge: judge,
        retention: retention(),
        clock: Arc::new(FixedClock::new(NOW)),
    }
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

fn md5(bytes: &[u8]) -> String {
    Digest::Md5(String::new()).of(bytes)
}

fn manifest(name: &str, text: String) -> ManifestText {
    ManifestText {
        name: name.into(),
        text,
        format: None,
        key_dir: None,
    }
}

fn verify_request(manifests: Vec<ManifestText>) -> VerifyRequest {
    VerifyRequest {
        store: "serving".into(),
        pins: manifests,
        dvc_remote: None,
        receipts: None,
    }
}

/// One good pin in a JSON manifest, for jobs whose report is not the
/// point.
async fn one_good_pin(store: &dyn ObjectStore) -> VerifyInputs {
    let meta = put(store, "data/one.csv", b"1\n").await;
    let text = json!({"pins": [{"key": meta.key, "version_id": version(&meta),
                                "md5": md5(b"1\n")}]});
    VerifyInputs::parse(verify_request(vec![manifest("one.json", text.to_string())])).unwrap()
}

/// The job once it has finished.
async fn finished(jobs: &Jobs, id: &JobId) -> JobView {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let view = jobs.find(id.as_str()).await.unwrap();
        if view.state != JobState::Running {
            return view;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still running: {view:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The bundled purge policy, made to wait at `key` until the gate
/// opens: a job that is reliably still running.
struct Gated {
    inner: Arc<PurgePolicy>,
    key: String,
    gate: Arc<Semaphore>,
}

#[async_trait]
impl PurgeJudge for Gated {
    async fn judge(
        &self,
        candidate: &Candidate,
        governance: &Governance,
        now_ms: u64,
    ) -> Result<Verdict, PolicyError> {
        if candidate.key == self.key {
            let _open = self
                .gate
                .acquire()
                .await
                .map_err(|e| PolicyError::Unavailable(e.to_string()))?;
        }
        self.inner.judge(candidate, governance, now_ms).await
    }
}

/// A plan retiring the generic keys `keys` (each written once); the
/// judge waits at `keys[last]` until the returned gate opens.
async fn gated_purge(
    store: &Arc<dyn ObjectStore>,
    keys: &[&str],
) -> (PurgeInputs, PurgeDeps, Arc<Semaphore>) {
    let mut candidates = Vec::new();
    for key in keys {
        let meta = put(store.as_ref(), key, key.as_bytes()).await;
        candidates.push(json!({"pointer": "pins.json", "object": key,
                               "version_id": version(&meta)}));
    }
    let inputs = PurgeInputs::parse(PurgeRequest {
        store: "serving".into(),
        plan: json!({ "candidates": candidates }),
    })
    .unwrap();
    let gate = Arc::new(Semaphore::new(0));
    let judge = Arc::new(Gated {
        inner: purge_policy(),
        key: keys[keys.len() - 1].into(),
        gate: gate.clone(),
    });
    (inputs, purge_deps(store, judge), gate)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verify_job_over_good_and_bad_pins_finishes_with_the_counts_the_library_reports() {
    let store = store();
    let a = put(store.as_ref(), "data/a.csv", b"a,b\n1,2\n").await;
    let b = put(store.as_ref(), "data/b.csv", b"c,d\n3,4\n").await;
    let model = put(store.as_ref(), "model.bin", b"weights").await;
    let pins = json!({"pins": [
        {"key": "data/a.csv", "version_id": version(&a), "etag": a.etag,
         "size": a.size, "md5": md5(b"a,b\n1,2\n"), "hash": "md5"},
        {"key": "data/b.csv", "version_id": version(&b), "size": b.size + 1,
         "md5": md5(b"c,d\n3,4\n")},
        {"key": "data/c.csv", "version_id": "never-written", "md5": md5(b"")},
    ]});
    let dvc = format!(
        "outs:\n- md5: {}\n  size: {}\n  hash: md5\n  path: model.bin\n  cloud:\n    \
         store:\n      version_id: {}\n      etag: '{}'\n",
        md5(b"weights"),
        model.size,
        version(&model),
        model.etag
    );
    let inputs = VerifyInputs::parse(verify_request(vec![
        manifest("pins.json", pins.to_string()),
        manifest("models/model.bin.dvc", dvc),
    ]))
    .unwrap();
    assert_eq!(inputs.pins().len(), 4);
    let expected = verify(
        store.as_ref(),
        inputs.pins(),
        &Aliases::none(),
        archive().as_ref(),
    )
    .await
    .unwrap();
    assert_eq!((expected.checked.len(), expected.problems.len()), (2, 2));

    let jobs = Jobs::new();
    let id = jobs.start_verify(inputs, verify_deps(&store)).unwrap();
    let job = finished(&jobs, &id).await;

    assert_eq!(job.kind, JobKind::Verify);
    assert_eq!(job.store, "serving");
    // Pins failed: the CLI would exit 1, so the job failed, with the
    // report as its result.
    assert_eq!(job.state, JobState::Failed);
    assert_eq!(job.error.as_deref(), Some("2 of 4 pins failed"));
    assert_eq!(job.result, Some(expected.to_json()));
    assert_eq!(
        job.progress,
        Progress {
            done: 4,
            total: Some(4)
        }
    );
    assert!(job.finished_ms.is_some_and(|at| at >= job.started_ms));
    assert_eq!(job.started_ms, NOW);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verify_job_over_good_pins_succeeds() {
    let store = store();
    let inputs = one_good_pin(store.as_ref()).await;
    let jobs = Jobs::new();
    let id = jobs.start_verify(inputs, verify_deps(&store)).unwrap();
    let job = finished(&jobs, &id).await;
    assert_eq!(job.state, JobState::Succeeded, "{job:?}");
    assert_eq!(job.error, None);
    let result = job.result.unwrap();
    assert_eq!(result["ok"], true);
    assert_eq!(result["checked"].as_array().unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_job_deletes_what_its_plan_allows_and_reports_it() {
    let store = store();
    let s = store.as_ref();
    let a1 = put(s, "gone/a", b"a one").await;
    let a2 = put(s, "gone/a", b"a two").await;
    let b1 = put(s, "gone/b", b"b one").await;
    let x1 = put(s, "src/x", b"x one").await;
    let x2 = put(s, "src/x", b"x two").await;
    // The archive registry of src/ maps x1 (copied) only: x2's bytes
    // live nowhere else, so it must stay.
    let copy = put(s, "archive/src/x", b"x one").await;
    let registry = json!({"schema_version": 1, "status": "copied", "source": "src",
        "destination": "archive/src", "versions": [
            {"source_object": "src/x", "source_version_id": version(&x1),
             "source_etag": x1.etag, "destination_object": "archive/src/x",
             "destination_version_id": version(&copy), "destination_etag": copy.etag,
             "size": x1.size, "delete_marker": false}]});
    let published = put(s, &registry_key("src"), registry.to_string().as_bytes()).await;
    let candidate = |object: &str, version_id: &str| json!({"pointer": "pins.json", "object": object, "version_id": version_id});
    let plan = json!({
        "candidates": [candidate("gone/a", &version(&a1)),
                       candidate("gone/b", &version(&b1)),
                       candidate("gone/b", "already-gone"),
                       candidate("src/x", &version(&x1))],
        "coordination": [{"receipt": registry, "coordination": {
            "registry_version_id": version(&published),
            "registry_etag": published.etag}}],
    });
    // Sent as text, as a client reading the plan file would.
    let inputs = PurgeInputs::parse(PurgeRequest {
        store: "serving".into(),
        plan: Value::String(plan.to_string()),
    })
    .unwrap();

    let jobs = Jobs::new();
    let id = jobs
        .start_purge(inputs, purge_deps(&store, purge_policy()))
        .unwrap();
    let job = finished(&jobs, &id).await;

    assert_eq!(job.kind, JobKind::Purge);
    assert_eq!(job.state, JobState::Succeeded, "{job:?}");
    let result = job.result.unwrap();
    assert_eq!(result["ok"], true);
    let sorted = |ids: [&ObjectMeta; 2]| {
        let mut ids = ids.map(version);
        ids.sort();
        ids.to_vec()
    };
    assert_eq!(
        result["deleted"],
        json!([
            {"pointer": "pins.json", "object": "gone/a", "version_id": version(&a1),
             "deleted_version_ids": sorted([&a1, &a2])},
            {"pointer": "pins.json", "object": "gone/b", "version_id": version(&b1),
             "deleted_version_ids": [version(&b1)]},
            {"pointer": "pins.json", "object": "src/x", "version_id": version(&x1),
             "deleted_version_ids": [version(&x1)]},
        ])
    );
    assert_eq!(
        result["already_absent"],
        json!([candidate("gone/b", "already-gone")])
    );
    assert_eq!(
        result["retained_unmapped"],
        json!([{"pointer": registry_key("src"), "object": "src/x",
                "version_id": version(&x2)}])
    );
    assert_eq!(result["retained"], json!([]));
    assert_eq!(result["mode"], "permanent-version-deletion");
    assert_eq!(result["remote"], "serving");
    assert_eq!(
        job.progress,
        Progress {
            done: 3,
            total: Some(3)
        }
    );

    let left: Vec<(String, String)> = s
        .list_versions("", None, 1000)
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|v| (v.key, v.version_id))
        .collect();
    assert_eq!(
        left,
        [
            ("archive/src/x".to_owned(), version(&copy)),
            (registry_key("src"), version(&published)),
            ("src/x".to_owned(), version(&x2)),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_purge_fails_with_its_partial_report_and_deletes_nothing() {
    let store = store();
    let x1 = put(store.as_ref(), "src/x", b"x one").await;
    let registry = json!({"schema_version": 1, "status": "copied", "source": "src",
        "destination": "archive/src", "versions": []});
    put(
        store.as_ref(),
        &registry_key("src"),
        registry.to_string().as_bytes(),
    )
    .await;
    // The proof names a registry version that was never published.
    let plan = json!({
        "candidates": [{"pointer": "pins.json", "object": "src/x", "version_id": version(&x1)}],
        "coordination": [{"receipt": registry, "coordination": {
            "registry_version_id": "stale", "registry_etag": "stale"}}],
    });
    let inputs = PurgeInputs::parse(PurgeRequest {
        store: "serving".into(),
        plan,
    })
    .unwrap();
    let jobs = Jobs::new();
    let id = jobs
        .start_purge(inputs, purge_deps(&store, purge_policy()))
        .unwrap();
    let job = finished(&jobs, &id).await;
    assert_eq!(job.state, JobState::Failed);
    let error = job.error.unwrap();
    assert!(
        error.starts_with("the purge deleted nothing: ") && error.contains("registry"),
        "{error}"
    );
    let result = job.result.unwrap();
    assert_eq!(result["ok"], false);
    assert_eq!(result["deleted"], json!([]));
    assert!(result["kind"].is_string(), "{result}");
    let page = store.list_versions("src/x", None, 10).await.unwrap();
    assert_eq!(page.items.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_is_visible_while_a_job_runs_and_complete_when_it_ends() {
    let store = store();
    let (inputs, deps, gate) = gated_purge(&store, &["k/a", "k/b"]).await;
    let jobs = Jobs::new();
    let id = jobs.start_purge(inputs, deps).unwrap();

    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let midway = loop {
        let view = jobs.find(id.as_str()).await.unwrap();
        if view.progress.done == 1 {
            break view;
        }
        assert!(tokio::time::Instant::now() < deadline, "{view:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(midway.state, JobState::Running);
    assert_eq!(midway.progress.total, Some(2));
    assert_eq!(midway.result, None);
    assert_eq!(midway.finished_ms, None);
    assert_eq!(jobs.running(), 1);

    gate.add_permits(1);
    let job = finished(&jobs, &id).await;
    assert_eq!(job.state, JobState::Succeeded, "{job:?}");
    assert_eq!(
        job.progress,
        Progress {
            done: 2,
            total: Some(2)
        }
    );
    assert_eq!(jobs.running(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_beyond_the_running_bound_is_refused_busy() {
    let store = store();
    let jobs = Jobs::with_limits(JobLimits {
        max_running: 1,
        ..JobLimits::default()
    });
    let (inputs, deps, gate) = gated_purge(&store, &["k/a"]).await;
    let held = jobs.start_purge(inputs, deps).unwrap();

    let verify = one_good_pin(store.as_ref()).await;
    let refused = jobs
        .start_verify(verify.clone(), verify_deps(&store))
        .unwrap_err();
    assert!(matches!(refused, JobError::Busy(_)), "{refused:?}");
    assert_eq!(jobs.list().len(), 1, "a refused start leaves no job");

    gate.add_permits(1);
    finished(&jobs, &held).await;
    let id = jobs.start_verify(verify, verify_deps(&store)).unwrap();
    assert_eq!(finished(&jobs, &id).await.state, JobState::Succeeded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_id_is_not_found() {
    let store = store();
    let jobs = Jobs::new();
    let id = jobs
        .start_verify(one_good_pin(store.as_ref()).await, verify_deps(&store))
        .unwrap();
    finished(&jobs, &id).await;
    for unknown in ["0000000000000000", "", "../jobs"] {
        assert!(jobs.get(unknown).is_none());
        let error = jobs.find(unknown).await.unwrap_err();
        assert!(matches!(error, JobError::NotFound(_)), "{error:?}");
    }
    assert_eq!(jobs.find(id.as_str()).await.unwrap().id, id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_jobs_beyond_the_bound_are_forgotten_oldest_first() {
    let store = store();
    let jobs = Jobs::with_limits(JobLimits {
        max_finished: 2,
        ..JobLimits::default()
    });
    let inputs = one_good_pin(store.as_ref()).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let id = jobs
            .start_verify(inputs.clone(), verify_deps(&store))
            .unwrap();
        finished(&jobs, &id).await;
        ids.push(id);
    }
    let listed: Vec<JobId> = jobs.list().into_iter().map(|job| job.id).collect();
    assert_eq!(listed, [ids[2].clone(), ids[1].clone()], "newest first");
    assert!(matches!(
        jobs.find(ids[0].as_str()).await.unwrap_err(),
        JobError::NotFound(_)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_beyond_the_byte_bound_are_forgotten_but_the_newest_is_kept() {
    let store = store();
    let jobs = Jobs::with_limits(JobLimits {
        max_result_bytes: 1,
        ..JobLimits::default()
    });
    let inputs = one_good_pin(store.as_ref()).await;
    let first = jobs
        .start_verify(inputs.clone(), verify_deps(&store))
        .unwrap();
    finished(&jobs, &first).await;
    let second = jobs.start_verify(inputs, verify_deps(&store)).unwrap();
    let job = finished(&jobs, &second).await;
    assert!(job.result.is_some());
    assert!(jobs.get(first.as_str()).is_none());
    assert_eq!(jobs.list().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_inputs_are_refused_before_any_job_starts() {
    let invalid = |result: Result<VerifyInputs, JobError>| match result {
        Err(JobError::InvalidArgument(message)) => message,
        other => panic!("expected an invalid argument, got {:?}", other.err()),
    };
    let no_version = json!({"pins": [{"key": "data/a.csv", "md5": md5(b"")}]});
    let message = invalid(VerifyInputs::parse(verify_request(vec![manifest(
        "pins.json",
        no_version.to_string(),
    )])));
    assert!(
        message.contains("pins.json") && message.contains("data/a.csv"),
        "{message}"
    );
    let message = invalid(VerifyInputs::parse(verify_request(vec![])));
    assert!(message.contains("at least one manifest"), "{message}");
    let message = invalid(VerifyInputs::parse(verify_request(vec![manifest(
        "x.dvc",
        "outs: 3".into(),
    )])));
    assert!(message.contains("x.dvc"), "{message}");
    let mut with_receipt =
        verify_request(vec![manifest("pins.json", json!({"pins": []}).to_string())]);
    with_receipt.receipts = Some(vec![json!({"status": "planned", "schema_version": 1,
                                              "store": "elsewhere"})]);
    let message = invalid(VerifyInputs::parse(with_receipt));
    assert!(message.contains("elsewhere"), "{message}");

    for (plan, says) in [
        (
            json!([{"pointer": "p", "object": "k", "version_id": "null"}]),
            "no exact version id",
        ),
        (json!({"candidates": [], "extra": 1}), "extra"),
        (json!("not json"), "not JSON"),
    ] {
        let error = PurgeInputs::parse(PurgeRequest {
            store: "serving".into(),
            plan,
        })
        .unwrap_err();
        let JobError::InvalidArgument(message) = error else {
            panic!("expected an invalid argument, got {error:?}");
        };
        assert!(message.contains(says), "{message}");
    }

    let unversioned: Arc<dyn ObjectStore> =
        Arc::new(MemoryStore::unversioned(Arc::new(FixedClock::new(T0))));
    let jobs = Jobs::new();
    let good = one_good_pin(store().as_ref()).await;
    let error = jobs
        .start_verify(good, verify_deps(&unversioned))
        .unwrap_err();
    let JobError::InvalidArgument(message) = error else {
        panic!("expected an invalid argument, got {error:?}");
    };
    assert!(message.contains("versioning"), "{message}");
    let plan = PurgeInputs::parse(PurgeRequest {
        store: "serving".into(),
        plan: json!([]),
    })
    .unwrap();
    let error = jobs
        .start_purge(plan, purge_deps(&unversioned, purge_policy()))
        .unwrap_err();
    assert!(matches!(error, JobError::InvalidArgument(_)), "{error:?}");
    assert!(jobs.list().is_empty());
    assert_eq!(jobs.running(), 0);
}

/// Jobs of two hosts, `alpha` and `beta`, publishing to one KV.
fn two_boards(clock: Arc<dyn Clock>) -> (Arc<dyn Kv>, Jobs, Jobs) {
    let kv: Arc<dyn Kv> = Arc::new(MemoryKv::new(clock.clone()));
    let on = |node: &str| {
        Jobs::shared(
            JobLimits::default(),
            Board::new(kv.clone(), node.into(), clock.clone()),
        )
    };
    let (alpha, beta) = (on("alpha"), on("beta"));
    (kv, alpha, beta)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_run_on_one_host_is_found_with_its_progress_and_report_on_another() {
    let store = store();
    let (_kv, alpha, beta) = two_boards(Arc::new(custodian_base::clock::SystemClock));
    let (inputs, deps, gate) = gated_purge(&store, &["k/a", "k/b"]).await;
    let id = alpha.start_purge(inputs, deps).unwrap();

    // Midway, beta sees it running on alpha, with progress.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let midway = loop {
        if let Ok(view) = beta.find(id.as_str()).await
            && view.progress.done == 1
        {
            break view;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never published midway"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(midway.state, JobState::Running);
    assert_eq!(midway.node.as_deref(), Some("alpha"));
    assert_eq!(beta.running(), 0, "beta runs nothing itself");

    gate.add_permits(1);
    let on_alpha = finished(&alpha, &id).await;
    let on_beta = finished(&beta, &id).await;
    assert_eq!(on_beta.state, JobState::Succeeded);
    assert_eq!(on_beta.result, on_alpha.result);
    assert!(on_beta.result.is_some());
    assert_eq!(on_beta.progress, on_alpha.progress);
    let listed = beta.list_everywhere().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, id);
    assert_eq!(listed[0].result, None, "a listing leaves reports out");
}

fn record_view(id: &str, state: JobState, started_ms: u64) -> JobView {
    JobView {
        id: JobId(id.into()),
        kind: JobKind::Verify,
        state,
        store: "serving".into(),
        node: None,
        started_ms,
        finished_ms: (state != JobState::Running).then_some(started_ms + 1),
        progress: Progress {
            done: 0,
            total: None,
        },
        error: None,
        result: None,
    }
}

#[tokio::test]
async fn a_running_job_whose_host_stopped_reporting_reads_as_abandoned() {
    let clock = Arc::new(FixedClock::new(NOW));
    let kv: Arc<dyn Kv> = Arc::new(MemoryKv::new(clock.clone()));
    let board = Board::new(kv, "alpha".into(), clock.clone());
    let view = record_view("00018bcfe5680000000000aa", JobState::Running, NOW);
    board.publish(&view, None).await.unwrap();

    clock.set(NOW + board::STALE_MS);
    let fresh = board.get(view.id.as_str()).await.unwrap().unwrap();
    assert_eq!(fresh.state, JobState::Running, "within the window");

    clock.set(NOW + board::STALE_MS + 1);
    let stale = board.get(view.id.as_str()).await.unwrap().unwrap();
    assert_eq!(stale.state, JobState::Failed);
    let error = stale.error.unwrap();
    assert!(
        error.contains("abandoned") && error.contains("alpha"),
        "{error}"
    );
}

#[tokio::test]
async fn a_report_too_large_to_share_says_which_host_holds_it() {
    let clock = Arc::new(FixedClock::new(NOW));
    let kv: Arc<dyn Kv> = Arc::new(MemoryKv::new(clock.clone()));
    let board = Board::new(kv, "alpha".into(), clock);
    let view = record_view("00018bcfe5680000000000bb", JobState::Succeeded, NOW);
    let large = format!("\"{}\"", "x".repeat(board::MAX_SHARED_RESULT));
    board.publish(&view, Some(&large)).await.unwrap();
    let read = board.get(view.id.as_str()).await.unwrap().unwrap();
    assert_eq!(read.result, None);
    let error = read.error.unwrap();
    assert!(error.contains("only node alpha holds it"), "{error}");

    // One just under the bound is shared whole, across several chunks.
    let shared = format!("\"{}\"", "y".repeat(board::MAX_SHARED_RESULT - 2));
    let view = record_view("00018bcfe5680000000000cc", JobState::Succeeded, NOW);
    board.publish(&view, Some(&shared)).await.unwrap();
    let read = board.get(view.id.as_str()).await.unwrap().unwrap();
    assert_eq!(read.result, Some(serde_json::from_str(&shared).unwrap()));
}

#[tokio::test]
async fn only_the_newest_records_are_kept_with_their_reports() {
    let clock = Arc::new(FixedClock::new(NOW));
    let kv: Arc<dyn Kv> = Arc::new(MemoryKv::new(clock.clone()));
    let board = Board::new(kv.clone(), "alpha".into(), clock);
    let total = board::MAX_RECORDS + 3;
    for i in 0..total as u64 {
        let id = format!("{:012x}{:012x}", NOW + i, i);
        let view = record_view(&id, JobState::Succeeded, NOW + i);
        board.publish(&view, Some("{\"ok\": true}")).await.unwrap();
    }
    board.forget_old().await.unwrap();
    let listed = board.list().await.unwrap();
    assert_eq!(listed.len(), board::MAX_RECORDS);
    assert_eq!(listed[0].started_ms, NOW + total as u64 - 1, "newest first");
    let oldest = format!("{:012x}{:012x}", NOW, 0);
    assert!(board.get(&oldest).await.unwrap().is_none());
    let partition = custodian_kv::Partition::new(board::PARTITION).unwrap();
    let reports = kv
        .scan(&partition, b"result/", Some(b"result0"), None, 1000)
        .await
        .unwrap();
    assert_eq!(
        reports.entries.len(),
        board::MAX_RECORDS,
        "forgotten reports are gone"
    );
}
