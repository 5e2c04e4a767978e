//! The contract's versions: a plugin built against 0.1 still loads, links
//! and is called by the 0.2 host, each generation sees host errors as its
//! contract says, and any other version is refused naming what differs.

use std::sync::Arc;

use custodian::clock::{Clock, FixedClock};
use custodian::kv::memory::MemoryKv;
use custodian::kv::{Kv, Outcome, Partition, Write};
use custodian::object::ObjectStore;
use custodian::object::memory::MemoryStore;
use custodian::policy::PolicyError;
use custodian::policy::retention::{
    Item, RetentionOracle, RetentionPolicy, RetentionRoute, Settings, Stage, Verdict,
};
use custodian::policy::takedown::{self, Request, TakedownPolicy};
use custodian::runtime::{CallContext, Grants, Limits, LoadError, Services, World};
use custodian::timers::{DueTimer, Fired};
use serde_json::{Value, json};

use crate::support::{self, PROBE, outcome, run, runtime};

const NOW_MS: u64 = 1_700_000_000_000;

/// A KV, a versioned store `versioned` and an unversioned store
/// `unversioned`, on a pinned clock; retention questions go to the legacy
/// guest's retention policy, retaining for a minute.
struct Host {
    kv: Arc<dyn Kv>,
    services: Arc<Services>,
    _io: tokio::runtime::Runtime,
}

impl Host {
    fn new() -> Self {
        let io = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let clock: Arc<dyn Clock> = Arc::new(FixedClock::new(NOW_MS));
        let kv: Arc<dyn Kv> = Arc::new(MemoryKv::new(clock.clone()));
        let versioned: Arc<dyn ObjectStore> = Arc::new(MemoryStore::versioned(clock.clone()));
        let unversioned: Arc<dyn ObjectStore> = Arc::new(MemoryStore::unversioned(clock.clone()));
        let oracle: Arc<dyn RetentionOracle> = Arc::new(RetentionRoute::new(
            Arc::new(legacy()),
            settings(60_000),
            Services::isolated(clock.clone(), io.handle().clone()),
            Limits::default(),
        ));
        let services = Arc::new(Services {
            kv: kv.clone(),
            stores: [
                ("versioned".to_owned(), versioned),
                ("unversioned".to_owned(), unversioned),
            ]
            .into_iter()
            .collect(),
            clock,
            io: io.handle().clone(),
            retention: Some(oracle),
        });
        Self {
            kv,
            services,
            _io: io,
        }
    }

    fn call(&self, grants: Grants) -> Arc<CallContext> {
        Arc::new(CallContext {
            services: self.services.clone(),
            grants,
            limits: Limits::default(),
            actor: "plugin:test".into(),
        })
    }
}

fn legacy() -> RetentionPolicy {
    let plugin = runtime().load_file(support::legacy_contract()).unwrap();
    RetentionPolicy::new(Arc::new(plugin)).unwrap()
}

fn settings(retention_ms: u64) -> Settings {
    Settings {
        retention_ms,
        noncurrent_retention_ms: 0,
    }
}

const ITEM: Item = Item {
    created_ms: NOW_MS - 10_000,
    noncurrent_since_ms: None,
    hold: false,
    stage: Stage::Retaining,
};

#[test]
fn a_plugin_built_against_0_1_loads_and_says_which_contract_it_was_built_against() {
    let plugin = runtime().load_file(support::legacy_contract()).unwrap();
    let info = plugin.info();
    assert_eq!(info.worlds, vec![World::Retention, World::Takedown]);
    assert_eq!(info.policy_version.as_deref(), Some("0.1.0"));
    assert!(
        info.imports.iter().any(|i| i == "custodian:host/kv@0.1.0"),
        "{:?}",
        info.imports
    );
    let (code, stdout, stderr) = outcome(&run(&[
        "plugin",
        "inspect",
        support::legacy_contract().to_str().unwrap(),
    ]));
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("world    retention, takedown (custodian:policy@0.1.0)"),
        "{stdout}"
    );
}

#[test]
fn a_0_1_retention_plugin_is_asked_through_the_same_driver_as_a_0_2_one() {
    let host = Host::new();
    let policy = legacy();
    let call = || host.call(Grants::none());
    let retained = policy
        .assess(call(), settings(60_000), ITEM, NOW_MS)
        .unwrap()
        .unwrap();
    assert_eq!(retained.retain_until_ms, NOW_MS + 50_000);
    assert_eq!(retained.may_delete, Verdict::Deny("retained".into()));
    let expired = policy
        .assess(call(), settings(5_000), ITEM, NOW_MS)
        .unwrap()
        .unwrap();
    assert_eq!(expired.may_delete, Verdict::Allow);
    let held = policy.set_hold(call(), ITEM, true).unwrap().unwrap();
    assert!(held.hold);
    let purging = Item {
        stage: Stage::Purging,
        ..ITEM
    };
    let refused = policy.set_hold(call(), purging, true).unwrap();
    assert!(
        matches!(&refused, Err(PolicyError::PreconditionFailed(m)) if m.contains("too late")),
        "{refused:?}"
    );
}

#[test]
fn a_0_1_plugin_reaches_the_kv_through_the_0_1_host_interfaces() {
    let host = Host::new();
    let grants = Grants::none().partition("legacy").unwrap();
    let answer = legacy()
        .assess(host.call(grants), settings(1), ITEM, NOW_MS)
        .unwrap()
        .unwrap();
    assert_eq!(
        answer.may_delete,
        Verdict::Deny(format!("kv: committed {NOW_MS}"))
    );
    let stored = host
        .services
        .io
        .block_on(host.kv.get(&Partition::new("legacy").unwrap(), b"seen"))
        .unwrap();
    assert_eq!(stored, Some(NOW_MS.to_string().into_bytes()));
    let denied = legacy()
        .assess(host.call(Grants::none()), settings(1), ITEM, NOW_MS)
        .unwrap();
    assert!(
        matches!(&denied, Err(PolicyError::AccessDenied(m)) if m.contains("legacy")),
        "{denied:?}"
    );
}

#[test]
fn an_unsupported_host_error_reaches_a_0_1_plugin_as_invalid_argument_prefixed_unsupported() {
    let host = Host::new();
    let grants = Grants::none().read_store("unversioned");
    let answer = legacy()
        .assess(host.call(grants), settings(0), ITEM, NOW_MS)
        .unwrap();
    // The plugin answered the error it was given, unchanged.
    match answer {
        Err(PolicyError::InvalidArgument(m)) => {
            assert!(m.starts_with("unsupported: "), "{m}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_0_1_takedown_plugin_plans_steps_and_asks_the_retention_oracle_through_the_0_1_interfaces() {
    let host = Host::new();
    let policy = TakedownPolicy::new(Arc::new(
        runtime().load_file(support::legacy_contract()).unwrap(),
    ))
    .unwrap();
    let call = || host.call(takedown::grants());
    let request = Request::new("ns/repo".into(), NOW_MS, vec![[7; 32]], None);
    let created = policy
        .plan_create(call(), &request, NOW_MS)
        .unwrap()
        .unwrap();
    assert_eq!(created.audit.len(), 1);
    assert_eq!(created.audit[0].event, "LegacyCreated");
    assert_eq!(created.audit[0].targets, vec!["ns/repo".to_owned()]);
    let applied = host
        .services
        .io
        .block_on(host.kv.apply(&created.batch))
        .unwrap();
    assert_eq!(applied, Outcome::Committed);

    let status = policy.status(call(), &request.id).unwrap().unwrap();
    assert_eq!(status.repository, "ns/repo");
    assert_eq!(status.counts.objects, 1);
    let unknown = policy.status(call(), &[1; 32]).unwrap();
    assert!(
        matches!(&unknown, Err(PolicyError::NotFound(_))),
        "{unknown:?}"
    );

    let timer = DueTimer {
        kind: takedown::KIND.into(),
        reference: request.id.to_vec(),
        due_ms: NOW_MS,
        steps: 0,
        failures: 0,
    };
    let fired = policy.step(call(), &timer, NOW_MS).unwrap().unwrap();
    let Fired::Done(commit) = fired else {
        panic!("{fired:?}")
    };
    // The retention oracle (the same legacy plugin's retention world)
    // retains for a minute.
    match commit.batch.writes.as_slice() {
        [Write::Put { key, value, .. }] => {
            assert_eq!(key, &request.id);
            assert_eq!(value, (NOW_MS + 60_000).to_string().as_bytes());
        }
        other => panic!("{other:?}"),
    }

    let held = policy
        .plan_hold(call(), &request.id, true, NOW_MS)
        .unwrap()
        .unwrap();
    assert_eq!(held.audit[0].event, "LegacyHeld");
}

#[test]
fn a_0_1_plugin_is_called_by_world_name_with_json_too() {
    let (code, stdout, stderr) = outcome(&run(&[
        "run",
        "--plugin",
        support::legacy_contract().to_str().unwrap(),
        "retention",
        "assess",
        "--input",
        r#"{"settings": {"retention-ms": 5000, "noncurrent-retention-ms": 0},
            "item": {"created-ms": 1700000000000, "hold": false, "stage": "retaining"},
            "now-ms": 1700090000000}"#,
    ]));
    assert_eq!(code, 0, "{stderr}");
    let got: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(got["ok"]["may-delete"], json!("allow"), "{got}");
}

#[test]
fn a_0_2_plugin_sees_unsupported_as_its_own_case() {
    let host = Host::new();
    let plugin = runtime().load_file(support::probe()).unwrap();
    let function = plugin.function(PROBE, "list-versions").unwrap();
    let grants = Grants::none()
        .read_store("unversioned")
        .read_store("versioned");
    let unversioned = function
        .call_json(host.call(grants.clone()), &json!({"store": "unversioned"}))
        .unwrap();
    assert!(
        unversioned["err"]["unsupported"].is_string(),
        "{unversioned}"
    );
    let versioned = function
        .call_json(host.call(grants), &json!({"store": "versioned"}))
        .unwrap();
    assert_eq!(versioned, json!({"ok": 0}));
}

#[test]
fn a_plugin_built_against_1_0_is_refused_naming_the_import() {
    let component =
        wat::parse_str(r#"(component (import "custodian:host/clock@1.0.0" (instance)))"#).unwrap();
    let error = runtime().load_bytes(&component, "one.wasm").err().unwrap();
    let message = error.to_string();
    assert!(
        matches!(error, LoadError::IncompatibleVersion { .. }),
        "{message}"
    );
    assert!(
        message.contains("import custodian:host/clock@1.0.0"),
        "{message}"
    );
    assert!(message.contains("compatible: 0.1.x or 0.2.x"), "{message}");
}

#[test]
fn a_plugins_blake3_is_the_reference_hash_across_chunk_and_simd_boundaries() {
    let host = Host::new();
    let plugin = runtime().load_file(support::probe()).unwrap();
    let function = plugin.function(PROBE, "blake3").unwrap();
    // BLAKE3's chunk is 1 KiB and its widest SIMD hashes 16 chunks at
    // once: lengths either side of both, of a tree of many, and empty.
    for len in [
        0usize,
        1,
        1023,
        1024,
        1025,
        4096,
        16 * 1024 + 1,
        (1 << 20) + 3,
    ] {
        let data: Vec<u8> = (0..len).map(|i| (i * 131 + len) as u8).collect();
        let got = function
            .call_json(host.call(Grants::none()), &json!({ "data": data }))
            .unwrap();
        let want = blake3::hash(&data);
        assert_eq!(got, json!(want.as_bytes().to_vec()), "{len} bytes");
    }
}
