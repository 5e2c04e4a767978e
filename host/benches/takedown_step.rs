//! Takedown steps per second through the wasm plugin against the same
//! policy built natively through the SDK, measured in one run:
//!
//! ```text
//! cargo bench -p custodian --bench takedown_step
//! ```
//!
//! Both drive one request of `OBJECTS` blobs of `BLOB_BYTES` from filing
//! to the retain phase (seed, select and copy every object, discover its
//! holders), each step's commit applied to an in-memory KV, with
//! retention asked of the bundled retention policy:
//! - `native`: `custodian-plugin-takedown` linked into this binary, its
//!   host calls answered by the SDK's in-memory host, retention by
//!   `custodian-plugin-retention` linked natively — the reference;
//! - `wasm`: the bundled takedown component on the host's runtime (warm
//!   instances, each step bound to its own call context as the timer
//!   worker binds it, every host call through the component boundary, the
//!   memory KV and stores), retention asked of the bundled retention
//!   component (warm too).
//!
//! The ratio is wasm throughput over native (higher is better; the target
//! is ≥ 0.8).
//!
//! `-- wasm-only [RUNS]` runs only the wasm build, RUNS times (default
//! 300), for a profiler: `CUSTODIAN_PERF_MAP=1 perf record -g` names the
//! plugin's functions (see the README's profiling paragraph).

use std::sync::Arc;
use std::time::{Duration, Instant};

use custodian::clock::{Clock, FixedClock};
use custodian::kv::memory::MemoryKv;
use custodian::kv::{Batch, Kv, Outcome, Partition, Precondition, Write};
use custodian::object::ObjectStoreExt;
use custodian::object::memory::MemoryStore;
use custodian::object::{ObjectStore, PutCondition};
use custodian::policy::retention::{RetentionPolicy, RetentionRoute, Settings};
use custodian::policy::takedown::{Request, TakedownPolicy};
use custodian::runtime::{CallContext, Limits, Runtime, RuntimeConfig, Services};
use custodian::timers::{DueTimer, Fired};
use custodian_sdk::retention::RetentionRules;
use custodian_sdk::takedown::TakedownSteps;

// The server's allocator, with the settings `.cargo/config.toml` compiles
// in, so both builds allocate as the server's steps do.
#[path = "../src/allocator.rs"]
mod allocator;

const OBJECTS: usize = 256;
const BLOB_BYTES: usize = 4096;
const ROUNDS: usize = 5;
const T0: u64 = 1_700_000_000_000;
const REPO: &str = "alpha/one";
const SETTINGS: Settings = Settings {
    retention_ms: 86_400_000,
    noncurrent_retention_ms: 0,
};

fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The fixture: blobs with their content-index rows (see
/// `sdk/wit/takedown.wit`): `o` id -> kind, size, CRC; `h` id ns 0 repo.
struct Fixture {
    blobs: Vec<([u8; 32], Vec<u8>)>,
}

impl Fixture {
    fn new() -> Self {
        Self {
            blobs: (0..OBJECTS)
                .map(|i| {
                    let bytes = noise(BLOB_BYTES, i as u64);
                    (*blake3::hash(&bytes).as_bytes(), bytes)
                })
                .collect(),
        }
    }

    fn rows(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut rows = Vec::new();
        for (id, bytes) in &self.blobs {
            let mut object = vec![b'o'];
            object.extend_from_slice(id);
            let mut value = vec![1u8];
            value.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
            value.extend_from_slice(&custodian::checksum::crc64_nvme(bytes).to_be_bytes());
            rows.push((object, value));
            let mut holder = vec![b'h'];
            holder.extend_from_slice(id);
            holder.extend_from_slice(b"alpha\0one");
            rows.push((holder, Vec::new()));
        }
        rows
    }

    fn request(&self) -> Request {
        Request::new(
            REPO.into(),
            T0,
            self.blobs.iter().map(|(id, _)| *id).collect(),
            None,
        )
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Runs `steps` steps of the request natively (or, with `None`, steps
/// until it reaches the retain phase); (steps, time).
fn native(fixture: &Fixture, steps: Option<u64>) -> (u64, Duration) {
    use custodian_plugin_takedown::Policy;
    use custodian_sdk::kv;
    use custodian_sdk::objects::{self, PutCondition as WitPut};
    use custodian_sdk::steps::{StepResult, Timer};
    use custodian_sdk::testing;

    testing::reset(T0);
    testing::set_retention(testing::RetentionOracle {
        assess: |item, now| {
            custodian_plugin_retention::Policy::assess(
                custodian_sdk::retention::Settings {
                    retention_ms: SETTINGS.retention_ms,
                    noncurrent_retention_ms: SETTINGS.noncurrent_retention_ms,
                },
                item,
                now,
            )
        },
        set_hold: custodian_plugin_retention::Policy::set_hold,
    });
    for (id, bytes) in &fixture.blobs {
        objects::put(
            "serving",
            &format!("content/{}", hex(id)),
            bytes,
            &WitPut::Unconditional,
            None,
            &[],
        )
        .unwrap();
    }
    for (key, value) in fixture.rows() {
        let batch = custodian_sdk::Batch::new().put("content", key, value);
        assert_eq!(batch.apply().unwrap(), kv::Outcome::Committed);
    }
    let request = fixture.request();
    let wit_request = custodian_sdk::takedown::Request {
        id: request.id.to_vec(),
        repository: request.repository.clone(),
        created_ms: request.created_ms,
        objects: request.objects.iter().map(|o| o.to_vec()).collect(),
        pack: None,
    };
    let commit = Policy::plan_create(wit_request, T0).unwrap();
    assert_eq!(kv::apply(&commit.batch).unwrap(), kv::Outcome::Committed);

    let started = Instant::now();
    let (mut taken, mut now) = (0u64, T0);
    loop {
        testing::set_now(now);
        let result = Policy::step(Timer {
            kind: "takedown".into(),
            reference: request.id.to_vec(),
            due_at_ms: now,
            now_ms: now,
        })
        .unwrap();
        let StepResult::Reschedule(next) = result else {
            panic!("a takedown never finishes its timer")
        };
        assert_eq!(
            kv::apply(&next.commit.batch).unwrap(),
            kv::Outcome::Committed
        );
        taken += 1;
        now = next.due_at_ms.max(now + 1);
        let finished = match steps {
            Some(steps) => taken == steps,
            None => Policy::status(request.id.to_vec()).unwrap().phase == "retain",
        };
        if finished {
            let elapsed = started.elapsed();
            assert_eq!(Policy::status(request.id.to_vec()).unwrap().phase, "retain");
            return (taken, elapsed);
        }
    }
}

struct Wasm {
    _runtime: Runtime,
    policy: TakedownPolicy,
    io: tokio::runtime::Runtime,
}

impl Wasm {
    fn new() -> Self {
        let runtime = Runtime::new(&RuntimeConfig {
            cache_dir: None,
            concurrent_calls: 8,
        })
        .unwrap();
        let load = |world| {
            runtime
                .load_bytes(custodian::bundled::plugin(world).unwrap(), "bench")
                .unwrap()
        };
        let policy =
            TakedownPolicy::new(Arc::new(load(custodian::runtime::World::Takedown))).unwrap();
        let retention =
            RetentionPolicy::new(Arc::new(load(custodian::runtime::World::Retention))).unwrap();
        let io = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let wasm = Self {
            _runtime: runtime,
            policy,
            io,
        };
        RETENTION.with(|r| *r.borrow_mut() = Some(Arc::new(retention)));
        wasm
    }

    /// Runs `steps` steps of the request, retention asked of the bundled
    /// retention component (or, with `native_retention`, of the same
    /// policy linked natively); (steps, time).
    fn run(&self, fixture: &Fixture, steps: u64, native_retention: bool) -> (u64, Duration) {
        let clock = Arc::new(FixedClock::new(T0));
        let dyn_clock: Arc<dyn Clock> = clock.clone();
        let kv: Arc<dyn Kv> = Arc::new(MemoryKv::new(dyn_clock.clone()));
        let serving: Arc<dyn ObjectStore> = Arc::new(MemoryStore::versioned(dyn_clock.clone()));
        let preserved: Arc<dyn ObjectStore> = Arc::new(MemoryStore::versioned(dyn_clock.clone()));
        let content = Partition::new("content").unwrap();
        self.io.block_on(async {
            for (id, bytes) in &fixture.blobs {
                serving
                    .put_whole(
                        &format!("content/{}", hex(id)),
                        bytes.clone().into(),
                        &PutCondition::Unconditional,
                        &Default::default(),
                        custodian::checksum::crc64_nvme(bytes),
                    )
                    .await
                    .unwrap();
            }
            for chunk in fixture.rows().chunks(64) {
                let batch = Batch {
                    preconditions: Vec::new(),
                    writes: chunk
                        .iter()
                        .map(|(key, value)| Write::Put {
                            partition: content.clone(),
                            key: key.clone(),
                            value: value.clone(),
                        })
                        .collect(),
                };
                assert_eq!(kv.apply(&batch).await.unwrap(), Outcome::Committed);
            }
        });
        let base = Arc::new(Services {
            kv: kv.clone(),
            stores: [
                ("serving".to_owned(), serving),
                ("preserved".to_owned(), preserved),
            ]
            .into_iter()
            .collect(),
            clock: dyn_clock,
            io: self.io.handle().clone(),
            retention: None,
        });
        let retention = RETENTION.with(|r| r.borrow().clone().unwrap());
        let route: Arc<dyn custodian::policy::retention::RetentionOracle> = if native_retention {
            Arc::new(NativeRetention)
        } else {
            Arc::new(RetentionRoute::new(
                retention,
                SETTINGS,
                base.clone(),
                Limits::default(),
            ))
        };
        let services = Arc::new(Services {
            retention: Some(route),
            kv: base.kv.clone(),
            stores: base.stores.clone(),
            clock: base.clock.clone(),
            io: base.io.clone(),
        });
        let grants = custodian::policy::takedown::grants();
        let call = || {
            Arc::new(CallContext {
                services: services.clone(),
                grants: grants.clone(),
                limits: Limits::default(),
                actor: "bench".into(),
            })
        };
        let request = fixture.request();
        let plan = self
            .policy
            .plan_create(call(), &request, T0)
            .unwrap()
            .unwrap();
        assert_eq!(
            self.io.block_on(kv.apply(&plan.batch)).unwrap(),
            Outcome::Committed
        );

        let started = Instant::now();
        let (mut taken, mut now) = (0u64, T0);
        while taken < steps {
            clock.set(now);
            let timer = DueTimer {
                kind: "takedown".into(),
                reference: request.id.to_vec(),
                due_ms: now,
                steps: taken,
                failures: 0,
            };
            let fired = self.policy.step(call(), &timer, now).unwrap().unwrap();
            let Fired::Reschedule { due_ms, commit } = fired else {
                panic!("a takedown never finishes its timer")
            };
            let mut batch = commit.batch;
            batch.preconditions.push(Precondition::NotAfter(u64::MAX));
            assert_eq!(
                self.io.block_on(kv.apply(&batch)).unwrap(),
                Outcome::Committed
            );
            taken += 1;
            now = due_ms.max(now + 1);
        }
        let elapsed = started.elapsed();
        let status = self.policy.status(call(), &request.id).unwrap().unwrap();
        assert_eq!(
            status.phase, "retain",
            "the wasm build took the native build's path"
        );
        (taken, elapsed)
    }
}

/// The bundled retention policy linked natively, behind the host's
/// oracle: isolates what the takedown component itself costs.
struct NativeRetention;

fn sdk_item(item: custodian::policy::retention::Item) -> custodian_sdk::retention::Item {
    use custodian::policy::retention::Stage as H;
    use custodian_sdk::retention::Stage as S;
    custodian_sdk::retention::Item {
        created_ms: item.created_ms,
        noncurrent_since_ms: item.noncurrent_since_ms,
        hold: item.hold,
        stage: match item.stage {
            H::Active => S::Active,
            H::Retaining => S::Retaining,
            H::Purging => S::Purging,
            H::Purged => S::Purged,
        },
    }
}

fn host_verdict(v: custodian_sdk::retention::Verdict) -> custodian::policy::retention::Verdict {
    match v {
        custodian_sdk::retention::Verdict::Allow => custodian::policy::retention::Verdict::Allow,
        custodian_sdk::retention::Verdict::Deny(r) => {
            custodian::policy::retention::Verdict::Deny(r)
        }
    }
}

impl custodian::policy::retention::RetentionOracle for NativeRetention {
    fn assess(
        &self,
        item: custodian::policy::retention::Item,
        now_ms: u64,
    ) -> Result<custodian::policy::retention::Assessment, custodian::policy::PolicyError> {
        let a = custodian_plugin_retention::Policy::assess(
            custodian_sdk::retention::Settings {
                retention_ms: SETTINGS.retention_ms,
                noncurrent_retention_ms: SETTINGS.noncurrent_retention_ms,
            },
            sdk_item(item),
            now_ms,
        )
        .map_err(|e| custodian::policy::PolicyError::Unavailable(format!("{e:?}")))?;
        Ok(custodian::policy::retention::Assessment {
            retain_until_ms: a.retain_until_ms,
            may_delete: host_verdict(a.may_delete),
            may_purge: host_verdict(a.may_purge),
            next_check_ms: a.next_check_ms,
        })
    }

    fn set_hold(
        &self,
        item: custodian::policy::retention::Item,
        enabled: bool,
    ) -> Result<custodian::policy::retention::Item, custodian::policy::PolicyError> {
        Ok(custodian::policy::retention::Item {
            hold: enabled,
            ..item
        })
    }
}

thread_local! {
    static RETENTION: std::cell::RefCell<Option<Arc<RetentionPolicy>>> =
        const { std::cell::RefCell::new(None) };
}

fn main() {
    let fixture = Fixture::new();
    let wasm = Wasm::new();
    // The path to retain, found once; timed runs take exactly its steps
    // (and check they arrived), so no status call is timed.
    let (steps, _) = native(&fixture, None);
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "wasm-only") {
        let runs: u64 = args.get(at + 1).and_then(|r| r.parse().ok()).unwrap_or(300);
        let timed: Duration = (0..runs).map(|_| wasm.run(&fixture, steps, false).1).sum();
        let per_step = timed.as_secs_f64() / (runs * steps) as f64;
        println!(
            "wasm (takedown + retention), {runs} runs of {steps} steps: {:.0} steps/s",
            1.0 / per_step
        );
        return;
    }
    let (mut native_best, mut wasm_best, mut wasm_native_retention) =
        (f64::MAX, f64::MAX, f64::MAX);
    // Alternate, so background noise hits all alike; keep each best.
    for _ in 0..ROUNDS {
        let (_, t) = native(&fixture, Some(steps));
        native_best = native_best.min(t.as_secs_f64() / steps as f64);
        let (_, t) = wasm.run(&fixture, steps, false);
        wasm_best = wasm_best.min(t.as_secs_f64() / steps as f64);
        let (_, t) = wasm.run(&fixture, steps, true);
        wasm_native_retention = wasm_native_retention.min(t.as_secs_f64() / steps as f64);
    }
    println!("takedown of {OBJECTS} blobs of {BLOB_BYTES} B to retain: {steps} steps");
    println!("{:<30} {:>10} {:>8}", "build", "steps/s", "ratio");
    for (name, per_step) in [
        ("native (takedown + retention)", native_best),
        ("wasm (takedown + retention)", wasm_best),
        ("wasm takedown, native retention", wasm_native_retention),
    ] {
        println!(
            "{name:<30} {:>10.0} {:>8.2}",
            1.0 / per_step,
            native_best / per_step
        );
    }
}
