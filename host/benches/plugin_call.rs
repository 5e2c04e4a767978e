//! What a plugin call costs, as figures and ratios measured in one run:
//!
//! ```text
//! cargo bench -p custodian --bench plugin_call
//! ```
//!
//! The `languages` rows compare the retention policy written in Rust
//! (bundled), Python (componentize-py) and JavaScript (jco): set
//! `CUSTODIAN_EXAMPLE_PLUGINS` to the directory `plugins/examples/build.sh`
//! built them into (`.ci/run` builds them).
//!
//! Each figure is the median of several batches (after a warm-up), so one
//! noisy batch does not move it. Absolute times on a shared machine drift;
//! the ratios between rows of one run are what to compare.

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use custodian::clock::{Clock, FixedClock};
use custodian::kv::memory::MemoryKv;
use custodian::kv::{Batch, Kv, Partition, Write};
use custodian::policy::access::{AccessPolicy, AccessRequest, Action, Principal, Target};
use custodian::policy::retention::{Item, RetentionPolicy, Settings, Stage};
use custodian::runtime::{CallContext, Grants, Limits, Runtime, RuntimeConfig, Services};
use custodian_plugin_retention::Policy;
use custodian_sdk::access::AccessRules;
use custodian_sdk::retention::RetentionRules;

// The server's allocator, with the settings `.cargo/config.toml` compiles
// in, so these figures are what the `custodian` binary's calls cost.
#[path = "../src/allocator.rs"]
mod allocator;

include!("../runtime/build/wasm.rs");

const PROBE: &str = "custodian-test:probe/probe@0.1.0";
const BATCHES: usize = 9;

/// Median nanoseconds per call of `f`, over `BATCHES` batches of `n`.
fn per_call(n: u32, mut f: impl FnMut()) -> f64 {
    per_call_with(n, || (), |()| f())
}

/// As [`per_call`], with state made by `setup` before each batch (outside
/// the timing), e.g. a session whose budget one batch must not outlive.
fn per_call_with<S>(n: u32, mut setup: impl FnMut() -> S, mut f: impl FnMut(&mut S)) -> f64 {
    let mut state = setup();
    for _ in 0..n / 10 + 1 {
        f(&mut state);
    }
    let mut batches: Vec<f64> = (0..BATCHES)
        .map(|_| {
            let mut state = setup();
            let started = Instant::now();
            for _ in 0..n {
                f(&mut state);
            }
            started.elapsed().as_nanos() as f64 / f64::from(n)
        })
        .collect();
    batches.sort_by(f64::total_cmp);
    batches[BATCHES / 2]
}

/// Whether the row named `what` was asked for: `cargo bench ... -- WORD`
/// runs only the rows whose name contains WORD.
fn wanted(what: &str) -> bool {
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    filter.is_empty() || filter.iter().any(|f| what.contains(f.as_str()))
}

fn human(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

fn row(what: &str, ns: f64, note: &str) {
    println!("{what:<48} {:>12}   {note}", human(ns));
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let target = custodian::bundled::wasm_target_dir().to_path_buf();
    let probe = build_wasm(root, &target, &["custodian-guest-probe"])
        .expect("the probe guest builds")[0]
        .clone();
    let retention =
        Path::new(custodian::bundled::path(custodian::runtime::World::Retention).expect("bundled"));

    let io = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let clock: Arc<dyn Clock> = Arc::new(FixedClock::new(1_700_000_000_000));
    let kv: Arc<dyn Kv> = Arc::new(MemoryKv::new(clock.clone()));
    let notes = Partition::new("notes").unwrap();
    let seed = Batch {
        preconditions: vec![],
        writes: vec![Write::Put {
            partition: notes,
            key: b"a".to_vec(),
            value: b"1".to_vec(),
        }],
    };
    io.block_on(kv.apply(&seed)).unwrap();
    let services = Arc::new(Services {
        kv,
        stores: Default::default(),
        clock,
        io: io.handle().clone(),
        retention: None,
    });
    let limits = Limits {
        timeout: Duration::from_secs(60),
        ..Limits::default()
    };
    let call = Arc::new(CallContext {
        services,
        grants: Grants::none().partition("notes").unwrap(),
        limits: Limits {
            host_calls: 100_000,
            ..limits
        },
        actor: "plugin:bench".into(),
    });

    println!(
        "environment: RUST_BACKTRACE={}",
        std::env::var("RUST_BACKTRACE").unwrap_or_else(|_| "unset".into())
    );
    println!("{:<48} {:>12}   note", "what", "per call");

    let cache = tempfile::tempdir().unwrap();
    let runtime = |cache_dir: Option<&Path>| {
        Runtime::new(&RuntimeConfig {
            cache_dir: cache_dir.map(Path::to_owned),
            concurrent_calls: 8,
        })
        .unwrap()
    };

    if wanted("plugin load") {
        let uncached = runtime(None);
        let cold = per_call(3, || {
            black_box(uncached.load_file(retention).unwrap());
        });
        let cached = runtime(Some(cache.path()));
        cached.load_file(retention).unwrap();
        let warm = per_call(20, || {
            assert!(cached.load_file(retention).unwrap().info().from_cache);
        });
        row(
            "plugin load, cold compile (retention)",
            cold,
            "60-110 ms measured here before",
        );
        row(
            "plugin load, from the disk cache",
            warm,
            &format!("target <= 1 ms; {:.0}x faster than compiling", cold / warm),
        );
    }

    let runtime = runtime(Some(cache.path()));
    let plugin = runtime.load_file(&probe).unwrap();
    let noop = plugin.function(PROBE, "noop").unwrap();
    let read_twice = plugin.function(PROBE, "read-twice").unwrap();
    let session = || plugin.session(call.clone()).unwrap();

    if wanted("fresh store") {
        let instantiate = per_call(20_000, || {
            black_box(session());
        });
        row(
            "fresh store + pooled instance",
            instantiate,
            "target <= 15 µs",
        );
    }

    let mut trivial = f64::NAN;
    if wanted("trivial call") {
        let prepared = || {
            let mut s = session();
            let f = s.typed::<(), (u32,)>(&noop).unwrap();
            (s, f)
        };
        trivial = per_call_with(200_000, prepared, |(s, f)| {
            let (n,) = s.call_typed(f, ()).unwrap();
            black_box(n);
        });
        row(
            "trivial call on a live instance",
            trivial,
            "target <= 250 ns",
        );
    }

    if wanted("host KV") {
        let partition = "notes".to_owned();
        // Two reads a call: a batch stays within the session's budget.
        let prepared = || {
            let mut s = session();
            let f = s.typed::<(String,), (u32,)>(&read_twice).unwrap();
            (s, f)
        };
        let two_reads = per_call_with(20_000, prepared, |(s, f)| {
            let (n,) = s.call_typed(f, (partition.clone(),)).unwrap();
            assert_eq!(n, 1);
        });
        row(
            "call making 2 host KV reads",
            two_reads,
            &format!(
                "target <= 1 µs; {} per read over a trivial call",
                human((two_reads - trivial) / 2.0)
            ),
        );
    }

    if wanted("one-shot") {
        let fresh_call = per_call(20_000, || {
            let (n,): (u32,) = noop.call(call.clone(), ()).unwrap();
            black_box(n);
        });
        row(
            "one-shot call (fresh instance + trivial call)",
            fresh_call,
            "",
        );
    }

    if wanted("retention") {
        // The same retention logic, natively and as a component.
        let policy = RetentionPolicy::new(Arc::new(runtime.load_file(retention).unwrap())).unwrap();
        let (settings, item) = retention_question();
        let wasm = per_call(20_000, || {
            black_box(
                policy
                    .assess(call.clone(), settings, item, 1_700_050_000_000)
                    .unwrap()
                    .unwrap(),
            );
        });
        let native_settings = custodian_sdk::retention::Settings {
            retention_ms: 86_400_000,
            noncurrent_retention_ms: 3_600_000,
        };
        let native_item = custodian_sdk::retention::Item {
            created_ms: 1_700_000_000_000,
            noncurrent_since_ms: None,
            hold: false,
            stage: custodian_sdk::retention::Stage::Retaining,
        };
        let native = per_call(1_000_000, || {
            black_box(
                Policy::assess(
                    black_box(native_settings),
                    black_box(native_item),
                    1_700_050_000_000,
                )
                .unwrap(),
            );
        });
        row("retention assess, wasm (warm instance)", wasm, "");
        row(
            "retention assess, native build",
            native,
            &format!("native/wasm = {:.3}x", native / wasm),
        );
    }

    if wanted("languages") {
        languages(retention, &call);
    }

    if wanted("access") {
        // The same access logic, natively and as a component, on the warm
        // instances the host asks it on for every API request.
        let path = custodian::bundled::path(custodian::runtime::World::Access).expect("bundled");
        let plugin = Arc::new(runtime.load_file(path).unwrap());
        let policy =
            Arc::new(AccessPolicy::new(plugin, call.services.clone(), Limits::default()).unwrap());
        let request = |roles: &[&str]| AccessRequest {
            principal: Principal {
                name: "bob".into(),
                roles: roles.iter().map(|r| (*r).to_owned()).collect(),
            },
            action: Action::Write,
            target: Target {
                store: Some("serving".into()),
                key: Some("docs/a.txt".into()),
                size: Some(4096),
                ..Target::default()
            },
            headers: vec![("content-type".into(), "text/plain".into())],
        };
        let allowed = request(&["reader", "writer:store/serving"]);
        let denied = request(&["reader", "writer:store/preserved"]);
        let allow = per_call(50_000, || {
            black_box(policy.decide(&allowed).unwrap());
        });
        let deny = per_call(50_000, || {
            black_box(policy.decide(&denied).unwrap());
        });
        let native_request = custodian_sdk::access::AccessRequest {
            principal: custodian_sdk::access::Principal {
                name: allowed.principal.name.clone(),
                roles: allowed.principal.roles.clone(),
            },
            action: custodian_sdk::access::Action::Write,
            target: custodian_sdk::access::Target {
                store: allowed.target.store.clone(),
                repository: None,
                key: allowed.target.key.clone(),
                version: None,
                size: allowed.target.size,
                subject: None,
            },
            headers: allowed.headers.clone(),
        };
        let native = per_call(1_000_000, || {
            black_box(custodian_plugin_access::Policy::decide(black_box(
                native_request.clone(),
            )));
        });
        // How an async server may call it: the judge must not run on an
        // async worker (a guest's WASI calls block on the runtime).
        let spawned = per_call(20_000, || {
            let (policy, request) = (policy.clone(), allowed.clone());
            let decided = io.block_on(async move {
                tokio::task::spawn_blocking(move || policy.decide(&request)).await
            });
            black_box(decided.unwrap().unwrap());
        });
        // On a worker of the runtime, as a request handler would be.
        let in_place = {
            let (policy, request) = (policy.clone(), allowed.clone());
            io.block_on(io.spawn(async move {
                per_call(20_000, || {
                    tokio::task::block_in_place(|| black_box(policy.decide(&request).unwrap()));
                })
            }))
            .unwrap()
        };
        row(
            "access decide, wasm (warm instance), allow",
            allow,
            "target: a few µs",
        );
        row("access decide, wasm (warm instance), deny", deny, "");
        row(
            "access decide from a task, spawn_blocking",
            spawned,
            "the same call handed to a blocking thread",
        );
        row(
            "access decide from a task, block_in_place",
            in_place,
            "the same call on the task's worker",
        );
        row(
            "access decide, native build, allow",
            native,
            &format!("native/wasm = {:.3}x", native / allow),
        );
    }
}

/// The retention policy in each language: size, cold compile, load from
/// the disk cache, a one-shot `assess` (a fresh instance per call) and an
/// `assess` on a warm instance (as the host asks it), each language's
/// plugin in the same run.
fn languages(rust: &Path, call: &Arc<CallContext>) {
    let Some(dir) = std::env::var_os("CUSTODIAN_EXAMPLE_PLUGINS").map(std::path::PathBuf::from)
    else {
        println!(
            "(languages: set CUSTODIAN_EXAMPLE_PLUGINS to plugins/examples/build.sh's OUT_DIR)"
        );
        return;
    };
    let plugins = [
        ("rust", rust.to_path_buf()),
        ("python", dir.join("retention-python.wasm")),
        ("js", dir.join("retention-js.wasm")),
    ];
    let (settings, item) = retention_question();
    let mut rust_call = (f64::NAN, f64::NAN);
    for (language, path) in plugins {
        let size = std::fs::metadata(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .len();
        let cache = tempfile::tempdir().unwrap();
        let runtime = Runtime::new(&RuntimeConfig {
            cache_dir: Some(cache.path().to_owned()),
            concurrent_calls: 8,
        })
        .unwrap();
        // One cold compile: it takes seconds for the large components,
        // and the cache makes every later load a read.
        let started = Instant::now();
        let loaded = runtime.load_file(&path).unwrap();
        let cold = started.elapsed().as_nanos() as f64;
        assert!(!loaded.info().from_cache);
        let cached = per_call(5, || {
            assert!(runtime.load_file(&path).unwrap().info().from_cache);
        });
        let loaded = Arc::new(loaded);
        let ask = |policy: &RetentionPolicy| {
            black_box(
                policy
                    .assess(call.clone(), settings, item, 1_700_050_000_000)
                    .unwrap()
                    .unwrap(),
            );
        };
        // A policy of its own per call has no warm instance to reuse; the
        // policies are linked before each batch, outside the timing, so
        // the row is the fresh instance and the call alone.
        let one_shot = 200;
        let assess = per_call_with(
            one_shot,
            || {
                (0..one_shot)
                    .map(|_| RetentionPolicy::new(loaded.clone()).unwrap())
                    .collect::<Vec<_>>()
            },
            |policies| ask(&policies.pop().expect("one policy per call")),
        );
        let policy = RetentionPolicy::new(loaded).unwrap();
        let warm = per_call(2_000, || ask(&policy));
        if language == "rust" {
            rust_call = (assess, warm);
        }
        row(
            &format!("retention in {language}: {:.2} MB", size as f64 / 1e6),
            cold,
            "cold compile",
        );
        row(&format!("retention in {language}: cached load"), cached, "");
        row(
            &format!("retention in {language}: instantiate + assess"),
            assess,
            &format!("{:.1}x the Rust plugin's", assess / rust_call.0),
        );
        row(
            &format!("retention in {language}: assess (warm instance)"),
            warm,
            &format!(
                "{:.1}x the Rust plugin's; {:.0}x faster than a fresh instance",
                warm / rust_call.1,
                assess / warm
            ),
        );
    }
}

/// The retention question every retention row asks: an item 14 hours
/// into a day's retention.
fn retention_question() -> (Settings, Item) {
    let settings = Settings {
        retention_ms: 86_400_000,
        noncurrent_retention_ms: 3_600_000,
    };
    let item = Item {
        created_ms: 1_700_000_000_000,
        noncurrent_since_ms: None,
        hold: false,
        stage: Stage::Retaining,
    };
    (settings, item)
}
