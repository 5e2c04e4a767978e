//! The shared plugin set on whole test hosts: swaps, following, guards.

use super::shared;
use super::*;
use crate::policy::access::{Action, Principal, Target};
use crate::policy::retention::Item;
use crate::policy::retention::Stage;
use crate::policy::takedown::{self, TakedownPolicy};
use crate::{RuntimeConfig, World};
use custodian_base::clock::{Clock, SystemClock};
use custodian_core::audit::{self, Record};
use custodian_core::fence::FenceConfig;
use custodian_kv::memory::MemoryKv;
use custodian_kv::{Kv, Precondition};
use custodian_object::memory::MemoryStore;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};

/// The retention the test hosts' takedown requests are kept for: 30 days,
/// the CLI's default.
const RETENTION_MS: u64 = 30 * 24 * 60 * 60 * 1000;

/// What a test host's plugin set told it, as the server's metrics count.
#[derive(Default)]
struct Counted {
    in_sync: Mutex<Option<bool>>,
    swaps: Mutex<BTreeMap<(String, &'static str), u64>>,
}

impl SetEvents for Counted {
    fn in_sync(&self, in_sync: bool) {
        *self.in_sync.lock().unwrap() = Some(in_sync);
    }

    fn swap(&self, world: &str, outcome: &'static str) {
        *self
            .swaps
            .lock()
            .unwrap()
            .entry((world.to_owned(), outcome))
            .or_default() += 1;
    }
}

impl Counted {
    fn swaps(&self, world: &str, outcome: &'static str) -> u64 {
        let swaps = self.swaps.lock().unwrap();
        swaps
            .get(&(world.to_owned(), outcome))
            .copied()
            .unwrap_or(0)
    }

    fn in_sync(&self) -> Option<bool> {
        *self.in_sync.lock().unwrap()
    }
}

/// What the tests reach of a host: its KV, clock, stores and plugin set.
struct TestHost {
    kv: Arc<dyn Kv>,
    clock: Arc<dyn Clock>,
    stores: BTreeMap<String, Arc<dyn ObjectStore>>,
    plugins: Arc<PluginSet>,
    events: Arc<Counted>,
}

/// One runtime for every test host of the process, so the bundled plugins
/// are compiled once per test binary (and, with the cache beside the test
/// binaries, once per change of a plugin or the engine).
fn shared_runtime() -> Arc<Runtime> {
    static RUNTIME: OnceLock<Arc<Runtime>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            // The test binary is `target/<profile>/deps/<name>`.
            let cache_dir = std::env::current_exe()
                .ok()
                .and_then(|exe| Some(exe.parent()?.parent()?.join("custodian-test-components")));
            Arc::new(
                Runtime::new(&RuntimeConfig {
                    cache_dir,
                    // Tests run in parallel on one runtime, and a takedown
                    // call holds a retention instance too: room for both.
                    concurrent_calls: 64,
                })
                .expect("a WebAssembly runtime"),
            )
        })
        .clone()
}

/// A host on the system clock and an in-memory KV of its own.
async fn test_host() -> Arc<TestHost> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let kv = Arc::new(MemoryKv::new(clock.clone()));
    test_host_on(kv, "test", &BTreeMap::new(), clock).await
}

/// A host named `node`, configured with `sources`, on `kv`, with the
/// bundled plugins and versioned in-memory `serving` and `preserved`
/// stores: hosts built on one KV share it as hosts sharing etcd do.
async fn test_host_on(
    kv: Arc<dyn Kv>,
    node: &str,
    sources: &BTreeMap<World, Source>,
    clock: Arc<dyn Clock>,
) -> Arc<TestHost> {
    try_test_host(kv, node, sources, clock, Trust::default())
        .await
        .expect("the plugin set loads")
}

/// [`test_host_on`] trusting `trust`'s keys, or why its plugins were
/// refused.
async fn try_test_host(
    kv: Arc<dyn Kv>,
    node: &str,
    sources: &BTreeMap<World, Source>,
    clock: Arc<dyn Clock>,
    trust: Trust,
) -> Result<Arc<TestHost>, SwapError> {
    let stores: BTreeMap<String, Arc<dyn ObjectStore>> = ["serving", "preserved"]
        .into_iter()
        .map(|name| {
            let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::versioned(clock.clone()));
            (name.to_owned(), store)
        })
        .collect();
    let events = Arc::new(Counted::default());
    let coordinator = Arc::new(
        Coordinator::new(kv.clone(), clock.clone(), FenceConfig::default())
            .expect("the default fence configuration is valid"),
    );
    let parts = PluginSetParts {
        runtime: shared_runtime(),
        kv: kv.clone(),
        clock: clock.clone(),
        stores: stores.clone(),
        io: tokio::runtime::Handle::current(),
        handlers: Arc::new(Handlers::new()),
        coordinator,
        events: events.clone(),
        retention: Settings {
            retention_ms: RETENTION_MS,
            noncurrent_retention_ms: 0,
        },
        settings: BTreeMap::new(),
        node: node.to_owned(),
        trust,
        sampling: custodian_core::decisions::log::Sampling::default(),
    };
    let plugins = PluginSet::load(parts, sources).await?;
    Ok(Arc::new(TestHost {
        kv,
        clock,
        stores,
        plugins,
        events,
    }))
}

/// The bundled takedown plugin with a custom section appended: another
/// build of the same policy, with its own hash.
fn rebuilt(world: World) -> Vec<u8> {
    let mut bytes = crate::bundled::plugin(world).unwrap().to_vec();
    let name = b"custodian-test-build";
    bytes.extend_from_slice(&[0, name.len() as u8 + 1, name.len() as u8]);
    bytes.extend_from_slice(name);
    bytes
}

/// A dry run on `host` of the bundled plugin of `candidate`, rebuilt, as
/// `world`'s plugin, replaying up to 100 items.
async fn dry_run(host: &TestHost, world: World, candidate: World) -> Result<DryRun, SwapError> {
    host.plugins
        .dry_run(
            world,
            rebuilt(candidate),
            format!("{candidate}.wasm"),
            None,
            Replay::quietly(100),
        )
        .await
}

/// Who signed `host`'s takedown plugin, if anyone did.
fn takedown_signer(host: &TestHost) -> Option<String> {
    host.plugins
        .current(World::Takedown)
        .view(World::Takedown)
        .signer
}

/// Swaps `host`'s takedown plugin for [`rebuilt`]'s, as operator alice.
async fn swap_in_rebuilt(host: &TestHost) -> SwapReport {
    host.plugins
        .swap(
            World::Takedown,
            rebuilt(World::Takedown),
            "test".into(),
            None,
            "operator:alice",
        )
        .await
        .unwrap()
}

/// The hash of the plugin `host` serves for `world`.
fn hash_of(host: &TestHost, world: World) -> String {
    host.plugins.current(world).plugin().info().hash.clone()
}

async fn swap_events(kv: &dyn Kv) -> Vec<Record> {
    let (records, _) = audit::read(kv, 0, None, 100).await.unwrap();
    records
        .into_iter()
        .filter(|r| r.event == "plugin/swap")
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swap_serves_the_new_plugin_raises_the_authority_and_audits_both_hashes() {
    let host = test_host().await;
    let old = hash_of(&host, World::Takedown);
    let report = swap_in_rebuilt(&host).await;
    assert!(report.changed);
    assert_eq!(report.previous.hash, old);
    assert_eq!(report.authority_generation, 1);
    let new = hash_of(&host, World::Takedown);
    assert_eq!(report.current.hash, new);
    assert_ne!(new, old);
    let events = swap_events(host.kv.as_ref()).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].actor, "operator:alice");
    assert!(events[0].targets.contains(&format!("from:{old}")));
    assert!(events[0].targets.contains(&format!("to:{new}")));
    assert!(host.events.swaps("takedown", "completed") == 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swapping_in_the_same_bytes_changes_nothing_and_leaves_the_fence_alone() {
    let host = test_host().await;
    let bytes = crate::bundled::plugin(World::Retention).unwrap().to_vec();
    let report = host
        .plugins
        .swap(
            World::Retention,
            bytes,
            "test".into(),
            None,
            "operator:alice",
        )
        .await
        .unwrap();
    assert!(!report.changed);
    assert_eq!(report.authority_generation, 0);
    assert!(swap_events(host.kv.as_ref()).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_of_another_world_is_refused_and_the_old_one_keeps_serving() {
    let host = test_host().await;
    let old = hash_of(&host, World::Purge);
    let wrong = crate::bundled::plugin(World::Archive).unwrap().to_vec();
    let error = host
        .plugins
        .swap(
            World::Purge,
            wrong,
            "archive.wasm".into(),
            None,
            "operator:alice",
        )
        .await
        .unwrap_err();
    let SwapError::Refused(reason) = error else {
        panic!("refused, not {error}")
    };
    assert!(reason.contains("is not a purge plugin"), "{reason}");
    assert_eq!(hash_of(&host, World::Purge), old);
    assert!(swap_events(host.kv.as_ref()).await.is_empty());
    assert!(host.events.swaps("purge", "refused") == 1);
}

/// A write by an admin to `serving`.
fn admin_write() -> AccessRequest {
    AccessRequest {
        principal: Principal {
            name: "root".into(),
            roles: vec!["admin".into()],
        },
        action: Action::Write,
        target: Target {
            store: Some("serving".into()),
            key: Some("a".into()),
            ..Default::default()
        },
        headers: Vec::new(),
    }
}

/// Swaps the gatekeeper test guest in as the access plugin.
async fn swap_in_gatekeeper(host: &TestHost) -> SwapReport {
    let gatekeeper = crate::test_guests::gatekeeper().to_vec();
    host.plugins
        .swap(
            World::Access,
            gatekeeper,
            "gatekeeper".into(),
            None,
            "alice",
        )
        .await
        .unwrap()
}

/// `judge`'s decision on `request`, asked on a blocking thread as the
/// judge requires (a guest's WASI call, such as its panic message, blocks
/// on the runtime).
async fn decide(
    judge: &Arc<dyn AccessJudge>,
    request: AccessRequest,
) -> Result<Decision, Unanswered> {
    let judge = judge.clone();
    tokio::task::spawn_blocking(move || judge.decide(&request))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_access_judge_obtained_before_a_swap_decides_with_the_new_plugin_after_it() {
    let host = test_host().await;
    let judge = host.plugins.access();
    assert_eq!(decide(&judge, admin_write()).await, Ok(Decision::Allow));
    assert_eq!(judge.plugin_hash(), hash_of(&host, World::Access));
    let report = swap_in_gatekeeper(&host).await;
    assert!(report.changed);
    assert_eq!(
        decide(&judge, admin_write()).await,
        Ok(Decision::Deny(
            "the gatekeeper lets only reads through".into()
        ))
    );
    assert_eq!(judge.plugin_hash(), report.current.hash);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sets_access_judge_answers_on_the_requests_own_worker_before_and_after_a_swap() {
    let host = test_host().await;
    let judge = host.plugins.access();
    // Asked right here, on a worker of this runtime.
    assert_eq!(judge.decide_now(&admin_write()), Some(Ok(Decision::Allow)));
    swap_in_gatekeeper(&host).await;
    assert_eq!(
        judge.decide_now(&admin_write()),
        Some(Ok(Decision::Deny(
            "the gatekeeper lets only reads through".into()
        )))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swapped_in_access_plugin_that_traps_leaves_requests_unanswered() {
    let host = test_host().await;
    // It passes its smoke call: it traps only when asked by `trap`.
    swap_in_gatekeeper(&host).await;
    let mut request = admin_write();
    request.principal.name = "trap".into();
    let judge = host.plugins.access();
    let unanswered = decide(&judge, request.clone()).await.unwrap_err();
    assert!(
        unanswered.to_string().contains("traps when asked to"),
        "{unanswered}"
    );
    request.principal.name = "root".into();
    request.action = Action::Read;
    assert_eq!(decide(&judge, request).await, Ok(Decision::Allow));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retention_oracle_keeps_answering_across_a_retention_swap() {
    let host = test_host().await;
    let item = Item {
        created_ms: 1_000,
        noncurrent_since_ms: None,
        hold: false,
        stage: Stage::Retaining,
    };
    let oracle = host.plugins.retention();
    let before = tokio::task::block_in_place(|| oracle.assess(item, 2_000)).unwrap();
    host.plugins
        .swap(
            World::Retention,
            rebuilt(World::Retention),
            "test".into(),
            None,
            "operator:alice",
        )
        .await
        .unwrap();
    // The same oracle handle now reaches the new build, which answers
    // as the old one did (it is the same policy).
    let after = tokio::task::block_in_place(|| oracle.assess(item, 2_000)).unwrap();
    assert_eq!(before, after);
    assert_eq!(before.retain_until_ms, 1_000 + RETENTION_MS);
}

/// Pushes `bytes` to `acme/site` on `host`; a takedown request naming
/// them, filed now.
async fn pushed_and_named(
    host: &TestHost,
    bytes: &'static [u8],
) -> crate::policy::takedown::Request {
    use custodian_core::content::RepoName;
    use custodian_core::content::push::push_bytes;

    let repo = RepoName::parse("acme/site").unwrap();
    let serving = host.stores["serving"].as_ref();
    let entry = push_bytes(host.kv.as_ref(), serving, &repo, "a.txt", bytes.into())
        .await
        .unwrap();
    let now_ms = host.clock.now_ms();
    crate::policy::takedown::Request::new(repo.to_string(), now_ms, vec![entry.id.0], None)
}

/// Files `request` as an operator action planned by `policy` under `guard`.
async fn file(
    host: &TestHost,
    planned: (Arc<TakedownPolicy>, Vec<Precondition>),
    request: crate::policy::takedown::Request,
) -> Result<(), crate::policy::requests::RequestError> {
    file_held(host, planned, request, None).await
}

/// Files `request` as [`file`] does, its first step `held` for a serving
/// host's workers if given.
async fn file_held(
    host: &TestHost,
    (policy, guard): (Arc<TakedownPolicy>, Vec<Precondition>),
    request: crate::policy::takedown::Request,
    held: Option<crate::policy::requests::Held>,
) -> Result<(), crate::policy::requests::RequestError> {
    use crate::policy::requests::{self, Action};
    let call = host.plugins.takedown_call(&policy);
    let io = host.plugins.services().io.clone();
    let kv = host.kv.clone();
    let now_ms = request.created_ms;
    tokio::task::spawn_blocking(move || {
        let action = Action {
            actor: "operator:alice",
            now_ms,
            guard: &guard,
        };
        requests::create(
            &policy,
            || call.clone(),
            &io,
            kv.as_ref(),
            &request,
            action,
            held.as_ref(),
        )
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_action_planned_before_a_swap_cannot_commit_after_it() {
    use crate::policy::requests::RequestError;

    let host = test_host().await;
    let request = pushed_and_named(&host, b"planned before the swap").await;
    let planned = host.plugins.takedown_for_action().await.unwrap();
    swap_in_rebuilt(&host).await;

    let answer = file(&host, planned, request.clone()).await;
    assert!(matches!(answer, Err(RequestError::Swapped)), "{answer:?}");
    assert!(
        custodian_core::timers::get(host.kv.as_ref(), "takedown", &request.id)
            .await
            .unwrap()
            .is_none(),
        "nothing of the stale action committed"
    );

    // Planned afresh, by the new plugin, it commits.
    let planned = host.plugins.takedown_for_action().await.unwrap();
    file(&host, planned, request).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filings_first_step_waits_for_its_filer_and_start_moves_only_that_deferral() {
    use crate::policy::requests::{self, SETTLE_WITHIN};
    use custodian_core::timers;

    let host = test_host().await;
    let request = pushed_and_named(&host, b"filed while its denial settles").await;
    let filed_ms = request.created_ms;
    let planned = host.plugins.takedown_for_action().await.unwrap();
    file(&host, planned, request.clone()).await.unwrap();
    let due = |host: &TestHost| {
        let kv = host.kv.clone();
        let id = request.id;
        async move {
            timers::get(kv.as_ref(), "takedown", &id)
                .await
                .unwrap()
                .unwrap()
                .due_ms
        }
    };
    // Deferred: a step now would race the filer's own denial work.
    let settle_ms = u64::try_from(SETTLE_WITHIN.as_millis()).unwrap();
    assert_eq!(due(&host).await, filed_ms + settle_ms);

    let io = host.plugins.services().io.clone();
    let kv = host.kv.clone();
    let id = request.id;
    tokio::task::spawn_blocking(move || requests::start(&io, kv.as_ref(), &id, filed_ms))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        due(&host).await,
        filed_ms,
        "the filer is done: the steps begin"
    );

    // A timer moved on since (here by an operator, to later) is not the
    // filing's deferral: a late or repeated start leaves it.
    timers::schedule(host.kv.as_ref(), "takedown", &request.id, filed_ms + 7)
        .await
        .unwrap();
    let io = host.plugins.services().io.clone();
    let kv = host.kv.clone();
    tokio::task::spawn_blocking(move || requests::start(&io, kv.as_ref(), &id, filed_ms))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(due(&host).await, filed_ms + 7);
}

/// Files a request naming `bytes` on `host`, its first step held by a
/// serving host's `first_steps`; the request, its timer's due time and
/// its claim.
async fn file_as_serving_host(
    host: &TestHost,
    first_steps: &crate::policy::requests::FirstSteps,
    bytes: &'static [u8],
) -> (
    crate::policy::takedown::Request,
    u64,
    Option<custodian_core::timers::claim::ClaimRow>,
) {
    let request = pushed_and_named(host, bytes).await;
    let held = first_steps.hold(&request.id).expect("nobody fires it");
    assert!(
        first_steps.hold(&request.id).is_none(),
        "held from the host's workers until released"
    );
    let planned = host.plugins.takedown_for_action().await.unwrap();
    file_held(host, planned, request.clone(), Some(held))
        .await
        .unwrap();
    let kv = host.kv.as_ref();
    let timer = custodian_core::timers::get(kv, "takedown", &request.id)
        .await
        .unwrap()
        .unwrap();
    let claimed = custodian_core::timers::claim::current(kv, "takedown", &request.id)
        .await
        .unwrap();
    (request, timer.due_ms, claimed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_serving_hosts_filing_makes_its_first_step_due_at_once_claimed_by_that_host() {
    use crate::policy::requests::{FirstSteps, SETTLE_WITHIN};
    use custodian_core::timers::claim::ClaimConfig;
    use custodian_core::timers::in_flight::InFlight;

    let host = test_host().await;
    let first_steps = FirstSteps {
        in_flight: InFlight::new(),
        claim: Some(ClaimConfig {
            holder: "node-a".into(),
            ttl_ms: 40_000,
        }),
    };
    let (request, due_ms, claimed) =
        file_as_serving_host(&host, &first_steps, b"filed by a serving host").await;
    let filed_ms = request.created_ms;
    assert_eq!(due_ms, filed_ms, "due at once, not deferred");
    let claimed = claimed.expect("claimed in the filing's commit");
    assert_eq!(claimed.holder, "node-a");
    assert_eq!(claimed.due_ms, filed_ms, "on the due row the filing made");
    let settle_ms = u64::try_from(SETTLE_WITHIN.as_millis()).unwrap();
    assert_eq!(
        claimed.until_ms,
        filed_ms + settle_ms.max(40_000),
        "for a step claim's time, and no less than the filer's settling may take"
    );

    // A host alone on its KV claims nothing, but still files at once.
    let alone = FirstSteps {
        in_flight: InFlight::new(),
        claim: None,
    };
    let (request, due_ms, claimed) =
        file_as_serving_host(&host, &alone, b"filed by a host alone on its KV").await;
    assert_eq!(due_ms, request.created_ms);
    assert_eq!(claimed, None);
}

/// Two hosts, `alpha` and `beta`, sharing one KV, both configured with the
/// bundled plugins.
async fn two_hosts() -> (Arc<dyn Kv>, Arc<TestHost>, Arc<TestHost>) {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let kv: Arc<dyn Kv> = Arc::new(MemoryKv::new(clock.clone()));
    let bundled = BTreeMap::new();
    let alpha = test_host_on(kv.clone(), "alpha", &bundled, clock.clone()).await;
    let beta = test_host_on(kv.clone(), "beta", &bundled, clock).await;
    (kv, alpha, beta)
}

/// Another start of node `node` on `kv`, configured with `sources`.
async fn restart(kv: &Arc<dyn Kv>, node: &str, sources: &BTreeMap<World, Source>) -> Arc<TestHost> {
    test_host_on(kv.clone(), node, sources, Arc::new(SystemClock)).await
}

async fn events(kv: &dyn Kv, event: &str) -> Vec<Record> {
    let (records, _) = audit::read(kv, 0, None, 100).await.unwrap();
    records.into_iter().filter(|r| r.event == event).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swap_on_one_host_is_followed_by_the_others_from_the_shared_set() {
    let (kv, alpha, beta) = two_hosts().await;
    let old = hash_of(&beta, World::Takedown);
    let report = swap_in_rebuilt(&alpha).await;
    assert_eq!(
        hash_of(&beta, World::Takedown),
        old,
        "beta has not looked yet"
    );

    // The rebuilt plugin is not bundled: beta loads it from the KV.
    assert_eq!(beta.plugins.follow().await.unwrap(), vec![World::Takedown]);
    assert_eq!(hash_of(&beta, World::Takedown), report.current.hash);
    assert!(beta.plugins.shared_view().in_sync);
    assert!(
        beta.plugins.follow().await.unwrap().is_empty(),
        "nothing more to follow"
    );
    let adopted = events(kv.as_ref(), "plugin/adopt").await;
    assert_eq!(adopted.len(), 1, "{adopted:?}");
    assert_eq!(adopted[0].actor, "host:beta");
    assert!(adopted[0].targets.contains(&format!("from:{old}")));
    assert!(
        adopted[0]
            .targets
            .contains(&format!("to:{}", report.current.hash))
    );
    assert_eq!(events(kv.as_ref(), "plugin/swap").await.len(), 1);

    // The swapped-out plugin's bytes were collected: one stored plugin
    // per world is left.
    let partition = custodian_kv::Partition::new(shared::PARTITION).unwrap();
    let stored = kv
        .scan(&partition, b"stored/", Some(b"stored0"), None, 100)
        .await
        .unwrap();
    assert_eq!(stored.entries.len(), World::ALL.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_action_planned_on_a_host_cannot_commit_after_another_host_swaps() {
    use crate::policy::requests::RequestError;

    let (_kv, alpha, beta) = two_hosts().await;
    let request = pushed_and_named(&beta, b"planned on beta").await;
    let planned = beta.plugins.takedown_for_action().await.unwrap();
    swap_in_rebuilt(&alpha).await;
    let answer = file(&beta, planned, request.clone()).await;
    assert!(matches!(answer, Err(RequestError::Swapped)), "{answer:?}");

    // Still behind the set, beta's fresh plans fail too: its plugin is
    // not the set's.
    let stale = beta.plugins.takedown_for_action().await.unwrap();
    let answer = file(&beta, stale, request.clone()).await;
    assert!(matches!(answer, Err(RequestError::Swapped)), "{answer:?}");

    beta.plugins.follow().await.unwrap();
    let planned = beta.plugins.takedown_for_action().await.unwrap();
    file(&beta, planned, request).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_an_unchanged_configuration_keeps_a_swap_made_since() {
    let (kv, alpha, _beta) = two_hosts().await;
    let report = swap_in_rebuilt(&alpha).await;
    let again = restart(&kv, "beta", &BTreeMap::new()).await;
    assert_eq!(hash_of(&again, World::Takedown), report.current.hash);
    let adopted = events(kv.as_ref(), "plugin/adopt").await;
    assert_eq!(adopted.len(), 1, "{adopted:?}");
    assert_eq!(adopted[0].actor, "host:beta");

    // A node's first start follows the set too.
    let newcomer = restart(&kv, "gamma", &BTreeMap::new()).await;
    assert_eq!(hash_of(&newcomer, World::Takedown), report.current.hash);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_a_changed_configuration_swaps_every_host() {
    let (kv, alpha, _beta) = two_hosts().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("takedown.wasm");
    std::fs::write(&path, rebuilt(World::Takedown)).unwrap();
    let changed = BTreeMap::from([(World::Takedown, Source::File(path))]);
    let bundled_hash = hash_of(&alpha, World::Takedown);

    let beta = restart(&kv, "beta", &changed).await;
    let new = hash_of(&beta, World::Takedown);
    assert_ne!(new, bundled_hash);
    let swaps = events(kv.as_ref(), "plugin/swap").await;
    assert_eq!(swaps.len(), 1, "{swaps:?}");
    assert_eq!(swaps[0].actor, "host:beta");
    assert!(swaps[0].targets.contains(&format!("from:{bundled_hash}")));
    assert!(swaps[0].targets.contains(&format!("to:{new}")));

    alpha.plugins.follow().await.unwrap();
    assert_eq!(hash_of(&alpha, World::Takedown), new);

    // Started again with the same file, beta changes nothing more.
    let beta = restart(&kv, "beta", &changed).await;
    assert_eq!(hash_of(&beta, World::Takedown), new);
    assert_eq!(events(kv.as_ref(), "plugin/swap").await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloading_an_unchanged_configuration_does_not_undo_a_swap_made_elsewhere() {
    let (kv, alpha, beta) = two_hosts().await;
    let report = swap_in_rebuilt(&alpha).await;
    let outcomes = beta
        .plugins
        .reconfigure(&BTreeMap::new(), "operator:sighup")
        .await;
    assert!(
        outcomes.is_empty(),
        "nothing in beta's configuration changed: {:?}",
        outcomes.iter().map(|(w, _)| *w).collect::<Vec<_>>()
    );
    beta.plugins.follow().await.unwrap();
    assert_eq!(hash_of(&beta, World::Takedown), report.current.hash);

    // A reload that does change a world swaps it everywhere.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("retention.wasm");
    std::fs::write(&path, rebuilt(World::Retention)).unwrap();
    let changed = BTreeMap::from([(World::Retention, Source::File(path))]);
    let outcomes = beta.plugins.reconfigure(&changed, "operator:sighup").await;
    assert_eq!(outcomes.len(), 1);
    let (world, swapped) = &outcomes[0];
    assert_eq!(*world, World::Retention);
    let retention = swapped.as_ref().unwrap().current.hash.clone();
    alpha.plugins.follow().await.unwrap();
    assert_eq!(hash_of(&alpha, World::Retention), retention);
    assert_eq!(hash_of(&alpha, World::Takedown), report.current.hash);
    assert_eq!(events(kv.as_ref(), "plugin/swap").await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_swaps_on_two_hosts_both_land_in_order() {
    let (kv, alpha, beta) = two_hosts().await;
    let mut other = rebuilt(World::Takedown);
    other.extend_from_slice(&[0, 2, 1, b'x']);
    let (a, b) = tokio::join!(
        alpha.plugins.swap(
            World::Takedown,
            rebuilt(World::Takedown),
            "a".into(),
            None,
            "operator:alice"
        ),
        beta.plugins
            .swap(World::Takedown, other, "b".into(), None, "operator:bob"),
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert!(a.changed && b.changed);
    alpha.plugins.follow().await.unwrap();
    beta.plugins.follow().await.unwrap();
    assert_ne!(a.current.hash, b.current.hash);
    let set = shared::read(kv.as_ref()).await.unwrap().unwrap().set;
    let last = &set.member(World::Takedown).unwrap().hash;
    assert!(*last == a.current.hash || *last == b.current.hash);
    assert_eq!(&hash_of(&alpha, World::Takedown), last);
    assert_eq!(&hash_of(&beta, World::Takedown), last);
    // Ordered by the set: the later swap replaced the earlier one's plugin.
    let (first, second) = if *last == b.current.hash {
        (&a, &b)
    } else {
        (&b, &a)
    };
    assert_eq!(second.previous.hash, first.current.hash);
    assert_eq!(events(kv.as_ref(), "plugin/swap").await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_takedown_handler_carries_the_guard_of_the_set_its_plugin_belongs_to() {
    let (kv, alpha, beta) = two_hosts().await;
    let guards = |host: &TestHost| {
        host.plugins
            .handlers()
            .get(takedown::KIND)
            .expect("a takedown handler")
            .guards()
            .to_vec()
    };
    let row = shared::read(kv.as_ref()).await.unwrap().unwrap();
    assert_eq!(guards(&beta), vec![shared::guard(Some(&row))]);

    swap_in_rebuilt(&alpha).await;
    let swapped = shared::read(kv.as_ref()).await.unwrap().unwrap();
    assert_ne!(swapped, row);
    assert_eq!(guards(&alpha), vec![shared::guard(Some(&swapped))]);
    assert_eq!(
        guards(&beta),
        vec![shared::guard(Some(&row))],
        "beta's handler still runs the old plugin: its guard is the old set's"
    );
    beta.plugins.follow().await.unwrap();
    assert_eq!(guards(&beta), vec![shared::guard(Some(&swapped))]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_cannot_load_the_sets_plugin_says_why_and_keeps_its_own() {
    let (kv, alpha, beta) = two_hosts().await;
    let row = shared::read(kv.as_ref()).await.unwrap().unwrap();
    let mut set = row.set.clone();
    // A plugin whose bytes were never stored.
    set.worlds.insert(
        World::Takedown.name().to_owned(),
        shared::Member {
            hash: "ab".repeat(32),
            size: 10,
            source: "lost.wasm".into(),
            signature: None,
        },
    );
    shared::publish(kv.as_ref(), Some(&row), set)
        .await
        .unwrap()
        .unwrap();
    let before = hash_of(&beta, World::Takedown);

    let error = beta.plugins.follow().await.unwrap_err();
    assert!(error.to_string().contains("missing"), "{error}");
    assert_eq!(
        hash_of(&beta, World::Takedown),
        before,
        "beta keeps its plugin"
    );
    let view = beta.plugins.shared_view();
    assert!(!view.in_sync);
    assert!(view.last_error.unwrap().contains("missing"));
    assert_eq!(beta.events.in_sync(), Some(false));
    // Its plans fail their set guard until it follows.
    let (_, guards) = beta.plugins.takedown_for_action().await.unwrap();
    assert!(
        guards.contains(&shared::guard(Some(&row))),
        "beta still plans under the set it installed"
    );
    assert_eq!(alpha.events.in_sync(), Some(true));
}

/// Two hosts on one KV: alpha trusts no key, beta trusts `key`.
async fn alpha_open_beta_trusting(
    key: &crate::signature::SecretKey,
) -> (Arc<dyn Kv>, Arc<TestHost>, Arc<TestHost>) {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let kv: Arc<dyn Kv> = Arc::new(MemoryKv::new(clock.clone()));
    let bundled = BTreeMap::new();
    let alpha = test_host_on(kv.clone(), "alpha", &bundled, clock.clone()).await;
    let trust = Trust::new(&[key.public().to_string()]).unwrap();
    let beta = try_test_host(kv.clone(), "beta", &bundled, clock, trust)
        .await
        .expect("the bundled plugins need no signature");
    (kv, alpha, beta)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_trusted_keys_a_swap_needs_a_trusted_signature_of_those_very_bytes() {
    let key = crate::signature::SecretKey::generate().unwrap();
    let stranger = crate::signature::SecretKey::generate().unwrap();
    let (kv, _alpha, beta) = alpha_open_beta_trusting(&key).await;
    let bytes = rebuilt(World::Takedown);
    let hash = crate::content_hash(&bytes);
    let before = hash_of(&beta, World::Takedown);
    let mut other = bytes.clone();
    other.push(0);
    for (signature, said) in [
        (None, "is not signed"),
        (Some(stranger.sign(&hash)), "not among the trusted keys"),
        (
            Some(key.sign(&crate::content_hash(&other))),
            "does not verify",
        ),
    ] {
        let refused = beta
            .plugins
            .swap(
                World::Takedown,
                bytes.clone(),
                "t.wasm".into(),
                signature,
                "operator:alice",
            )
            .await
            .unwrap_err();
        assert!(matches!(refused, SwapError::Refused(_)), "{refused}");
        assert!(refused.to_string().contains(said), "{said}: {refused}");
        assert_eq!(hash_of(&beta, World::Takedown), before, "nothing swapped");
    }
    assert!(swap_events(kv.as_ref()).await.is_empty());

    let report = beta
        .plugins
        .swap(
            World::Takedown,
            bytes,
            "t.wasm".into(),
            Some(key.sign(&hash)),
            "operator:alice",
        )
        .await
        .unwrap();
    assert_eq!(report.current.signer, Some(key.public().to_string()));
    let row = shared::read(kv.as_ref()).await.unwrap().unwrap();
    let member = row.set.member(World::Takedown).unwrap();
    assert_eq!(
        member.signature.as_ref().map(|s| s.key.clone()),
        Some(key.public().to_string()),
        "the shared set records the signer"
    );
    let audited = swap_events(kv.as_ref()).await;
    assert!(
        audited[0]
            .targets
            .contains(&format!("signer:{}", key.public())),
        "{audited:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_with_trusted_keys_does_not_adopt_an_unsigned_plugin_another_host_published() {
    let key = crate::signature::SecretKey::generate().unwrap();
    let (_kv, alpha, beta) = alpha_open_beta_trusting(&key).await;
    let before = hash_of(&beta, World::Takedown);
    // alpha trusts no key: it swaps an unsigned plugin in.
    swap_in_rebuilt(&alpha).await;

    let refused = beta.plugins.follow().await.unwrap_err();
    assert!(refused.to_string().contains("is not signed"), "{refused}");
    assert_eq!(
        hash_of(&beta, World::Takedown),
        before,
        "beta keeps its plugin"
    );
    assert!(!beta.plugins.shared_view().in_sync);

    // Signed by the trusted key, beta adopts it.
    // Another build: a second custom section, another hash.
    let mut signed = rebuilt(World::Takedown);
    signed.extend_from_slice(&[0, 2, 1, b'x']);
    let signature = key.sign(&crate::content_hash(&signed));
    let report = alpha
        .plugins
        .swap(
            World::Takedown,
            signed,
            "s.wasm".into(),
            Some(signature),
            "operator:alice",
        )
        .await
        .unwrap();
    assert_eq!(beta.plugins.follow().await.unwrap(), vec![World::Takedown]);
    assert_eq!(hash_of(&beta, World::Takedown), report.current.hash);
    assert_eq!(takedown_signer(&beta), Some(key.public().to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_plugin_without_a_trusted_signature_stops_the_host_from_starting() {
    let key = crate::signature::SecretKey::generate().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("takedown.wasm");
    let bytes = rebuilt(World::Takedown);
    std::fs::write(&path, &bytes).unwrap();
    let sources = BTreeMap::from([(World::Takedown, Source::File(path.clone()))]);
    let trust = Trust::new(&[key.public().to_string()]).unwrap();
    let start = || {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let kv: Arc<dyn Kv> = Arc::new(MemoryKv::new(clock.clone()));
        try_test_host(kv, "alpha", &sources, clock, trust.clone())
    };
    let refused = start().await.err().expect("refused");
    assert!(refused.to_string().contains("is not signed"), "{refused}");

    let sig = dir.path().join("takedown.wasm.sig");
    std::fs::write(&sig, "{not json").unwrap();
    let refused = start().await.err().expect("refused");
    assert!(
        refused.to_string().contains("takedown.wasm.sig"),
        "{refused}"
    );

    std::fs::write(&sig, key.sign(&crate::content_hash(&bytes)).to_json()).unwrap();
    let host = start().await.expect("signed by a trusted key, it loads");
    assert_eq!(takedown_signer(&host), Some(key.public().to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_replays_due_takedown_steps_through_both_plugins_and_changes_nothing() {
    let host = test_host().await;
    let request = pushed_and_named(&host, b"evidence").await;
    file(
        &host,
        host.plugins.takedown_for_action().await.unwrap(),
        request,
    )
    .await
    .unwrap();
    let serving = hash_of(&host, World::Takedown);
    let row = shared::read(host.kv.as_ref()).await.unwrap();

    // Another build of the same policy decides every step alike.
    let report = dry_run(&host, World::Takedown, World::Takedown)
        .await
        .unwrap();
    assert!(report.items >= 1, "{report:?}");
    assert_eq!(report.unchanged, report.items, "{report:?}");
    assert!(report.changed.is_empty());
    assert_eq!(report.serving, serving);
    assert_ne!(report.candidate, serving);

    // The filed request is under its lock: another build of the retention
    // policy assesses it alike.
    let report = dry_run(&host, World::Retention, World::Retention)
        .await
        .unwrap();
    assert_eq!(report.items, 1, "{report:?}");
    assert_eq!(report.unchanged, 1, "{report:?}");
    assert!(report.replayed.starts_with("takedown requests in retain"));

    // A world with no replay says so; a plugin of another world is
    // refused as a swap would refuse it.
    let report = dry_run(&host, World::Purge, World::Purge).await.unwrap();
    assert_eq!(report.items, 0);
    assert!(
        report.replayed.starts_with("nothing"),
        "{}",
        report.replayed
    );
    let refused = dry_run(&host, World::Takedown, World::Retention)
        .await
        .unwrap_err();
    assert!(matches!(refused, SwapError::Refused(_)), "{refused}");

    assert_eq!(hash_of(&host, World::Takedown), serving, "nothing swapped");
    assert_eq!(
        shared::read(host.kv.as_ref()).await.unwrap(),
        row,
        "nothing published"
    );
    assert!(swap_events(host.kv.as_ref()).await.is_empty());
}
