//! A whole [`Host`] for tests: the bundled plugins over an in-memory KV
//! and versioned in-memory `serving` and `preserved` stores, driven
//! through the real router.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use super::jobs::{Board, JobLimits, Jobs};
use super::metrics::Metrics;
use super::{Auth, Host, ReadAccess, Readiness, RequestLimits};
use custodian_base::clock::{Clock, SystemClock};
use custodian_core::fence::{Coordinator, FenceConfig};
use custodian_core::locks::{LateRetention, LockGuard, Locks};
use custodian_core::principals::Principals;
use custodian_core::timers::Handlers;
use custodian_kv::Kv;
use custodian_kv::memory::MemoryKv;
use custodian_object::ObjectStore;
use custodian_object::memory::MemoryStore;
use custodian_runtime::plugin_set::{PluginSet, PluginSetParts};
use custodian_runtime::policy::retention::Settings;
use custodian_runtime::{Runtime, RuntimeConfig};

/// The bearer token of every test host.
pub(crate) const TOKEN: &str = "0123456789abcdef0123";

/// `Authorization` header value carrying [`TOKEN`].
pub(crate) const BEARER: &str = "Bearer 0123456789abcdef0123";

/// The retention the test hosts' takedown requests are kept for: 30 days,
/// the CLI's default.
pub(crate) const RETENTION_MS: u64 = 30 * 24 * 60 * 60 * 1000;

/// One runtime for every test host of the process. Compiling the bundled
/// plugins dominates building a host; with a shared runtime they are
/// compiled once per test binary, not once per test, and with the cache
/// beside the test binaries (`target/debug/custodian-test-components`,
/// gone with `cargo clean`) once per change of a plugin or the engine.
/// Entries are named by content and engine hashes, so a stale one is
/// never loaded.
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

/// A host on the system clock; see [`test_host_with`].
pub(crate) async fn test_host() -> Arc<Host> {
    test_host_with(Arc::new(SystemClock), RequestLimits::default()).await
}

/// A host reading time from `clock` (a [`custodian_base::clock::FixedClock`] makes
/// ids and due times predictable), with `limits`, the bundled plugins,
/// an in-memory KV, versioned in-memory `serving` and `preserved`
/// stores, token [`TOKEN`] on every route, and nothing running in the
/// background (no timer workers: a test steps timers itself if it needs
/// to). Must be called inside a tokio runtime: plugin calls block on it.
pub(crate) async fn test_host_with(clock: Arc<dyn Clock>, limits: RequestLimits) -> Arc<Host> {
    // Behind the locks, as a node's KV and stores always are.
    let kv: Arc<dyn Kv> = Arc::new(LockGuard::new(
        Arc::new(MemoryKv::new(clock.clone())),
        clock.clone(),
    ));
    let retention = Arc::new(LateRetention::new());
    let locks = Locks::new(kv.clone(), clock.clone(), retention.clone());
    let node = "test";
    let stores: BTreeMap<String, Arc<dyn ObjectStore>> = ["serving", "preserved"]
        .into_iter()
        .map(|name| {
            let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::versioned(clock.clone()));
            (name.to_owned(), locks.store(name, store, false))
        })
        .collect();
    let metrics = Arc::new(Metrics::new());
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
        events: metrics.clone(),
        retention: Settings {
            retention_ms: RETENTION_MS,
            noncurrent_retention_ms: 0,
        },
        settings: BTreeMap::new(),
        node: node.to_owned(),
        trust: custodian_runtime::signature::Trust::default(),
        sampling: custodian_core::decisions::log::Sampling::default(),
    };
    let plugins = PluginSet::load(parts, &BTreeMap::new())
        .await
        .unwrap_or_else(|e| panic!("the bundled plugins load: {e}"));
    let jobs = Arc::new(Jobs::shared(
        JobLimits::default(),
        Board::new(kv.clone(), node.to_owned(), clock.clone()),
    ));
    let principals = Arc::new(Principals::new(
        kv.clone(),
        clock.clone(),
        std::time::Duration::from_secs(1),
    ));
    principals
        .register_bootstrap(TOKEN)
        .await
        .expect("the test token registers");
    retention.bind(plugins.retention());
    let access = plugins.access();
    Arc::new(Host {
        kv,
        clock,
        stores,
        plugins,
        metrics: metrics.clone(),
        jobs,
        auth: Auth {
            principals,
            read_access: ReadAccess::Token,
            access: Some(access),
        },
        bodies: limits.bodies(metrics),
        limits,
        readiness: Readiness::default(),
        wake_workers: super::workers::Wake::default(),
        first_steps: None,
    })
}
