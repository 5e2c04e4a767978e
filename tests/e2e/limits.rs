//! Every call is bounded, capabilities are denied unless granted, and a
//! misbehaving guest never takes the host down.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use custodian::kv::{Answer, Batch, Kv, KvError, Outcome, Page, Partition, Read};
use custodian::runtime::{CallError, Grants, LimitExceeded, Limits, Services};
use serde_json::{Value, json};

use crate::support::{self, PROBE, World, runtime};

fn call(
    world: &World,
    grants: Grants,
    limits: Limits,
    function: &str,
    input: Value,
) -> Result<Value, CallError> {
    let runtime = runtime();
    let plugin = runtime.load_file(support::probe()).unwrap();
    plugin
        .function(PROBE, function)?
        .call_json(world.call(grants, limits), &input)
}

fn limits() -> Limits {
    Limits::default()
}

#[test]
fn a_trivial_call_returns_its_value() {
    let got = call(&World::new(), Grants::none(), limits(), "noop", json!({}));
    assert_eq!(got.unwrap(), json!(7));
}

#[test]
fn a_guest_panic_surfaces_with_the_guests_message() {
    let got = call(
        &World::new(),
        Grants::none(),
        limits(),
        "crash",
        json!({"message": "the ledger is upside down"}),
    );
    match got {
        Err(CallError::Trap(message)) => {
            assert!(message.contains("guest panicked at"), "{message}");
            assert!(message.contains("the ledger is upside down"), "{message}");
        }
        other => panic!("expected a trap, got {other:?}"),
    }
}

#[test]
fn an_infinite_loop_is_stopped_at_the_deadline_and_the_host_serves_the_next_call() {
    let world = World::new();
    let runtime = runtime();
    let plugin = runtime.load_file(support::probe()).unwrap();
    let timeout = Duration::from_millis(200);
    let started = Instant::now();
    let got = plugin.function(PROBE, "spin").unwrap().call_json(
        world.call(
            Grants::none(),
            Limits {
                timeout,
                ..limits()
            },
        ),
        &json!({"seed": 3}),
    );
    let elapsed = started.elapsed();
    assert!(
        matches!(got, Err(CallError::Limit(LimitExceeded::Time(t))) if t == timeout),
        "{got:?}"
    );
    assert!(elapsed >= timeout, "stopped early, after {elapsed:?}");
    assert!(
        elapsed < timeout + Duration::from_millis(250),
        "stopped late, after {elapsed:?}"
    );
    let next = plugin
        .function(PROBE, "noop")
        .unwrap()
        .call_json(world.call(Grants::none(), limits()), &json!({}));
    assert_eq!(next.unwrap(), json!(7));
}

#[test]
fn a_memory_hungry_guest_is_stopped_at_its_memory_cap() {
    let cap = 16 << 20;
    let got = call(
        &World::new(),
        Grants::none(),
        Limits {
            memory_bytes: cap,
            ..limits()
        },
        "hog",
        json!({"mebibytes": 64}),
    );
    match got {
        Err(CallError::Limit(LimitExceeded::Memory { limit, requested })) => {
            assert_eq!(limit, cap);
            assert!(requested > cap);
        }
        other => panic!("expected the memory limit, got {other:?}"),
    }
}

#[test]
fn a_guest_within_its_memory_cap_runs_to_completion() {
    let got = call(
        &World::new(),
        Grants::none(),
        Limits {
            memory_bytes: 64 << 20,
            ..limits()
        },
        "hog",
        json!({"mebibytes": 8}),
    );
    assert_eq!(got.unwrap(), json!(8 << 20));
}

#[test]
fn an_ungranted_partition_is_refused_with_access_denied() {
    let got = call(
        &World::new(),
        Grants::none(),
        limits(),
        "touch-partition",
        json!({"partition": "secrets"}),
    )
    .unwrap();
    let message = got["err"]["access-denied"]
        .as_str()
        .unwrap_or_else(|| panic!("{got}"));
    assert!(message.contains("secrets"), "{message}");
}

#[test]
fn a_granted_partition_is_reachable() {
    let world = World::new();
    let grants = Grants::none().partition("notes").unwrap();
    let got = call(
        &world,
        grants,
        limits(),
        "touch-partition",
        json!({"partition": "notes"}),
    )
    .unwrap();
    assert_eq!(got, json!({"ok": false}));
}

#[test]
fn another_partition_than_the_granted_one_is_still_refused() {
    let grants = Grants::none().partition("notes").unwrap();
    let got = call(
        &World::new(),
        grants,
        limits(),
        "touch-partition",
        json!({"partition": "other"}),
    )
    .unwrap();
    assert!(got["err"]["access-denied"].is_string(), "{got}");
}

#[test]
fn an_ungranted_store_is_refused_with_access_denied() {
    let got = call(
        &World::new(),
        Grants::none(),
        limits(),
        "touch-store",
        json!({"store": "content"}),
    )
    .unwrap();
    assert!(got["err"]["access-denied"].is_string(), "{got}");
    let granted = call(
        &World::new(),
        Grants::none().store("content"),
        limits(),
        "touch-store",
        json!({"store": "content"}),
    )
    .unwrap();
    assert_eq!(granted, json!({"ok": false}));
}

#[test]
fn a_host_reserved_partition_cannot_be_granted() {
    assert!(Grants::none().partition("custodian.audit").is_err());
}

#[test]
fn a_guest_that_ignores_budget_exhausted_is_stopped() {
    let grants = Grants::none().partition("notes").unwrap();
    let got = call(
        &World::new(),
        grants,
        Limits {
            host_calls: 50,
            ..limits()
        },
        "burn",
        json!({"partition": "notes"}),
    );
    assert!(
        matches!(got, Err(CallError::Limit(LimitExceeded::HostCalls(50)))),
        "{got:?}"
    );
}

#[test]
fn a_guest_is_told_when_its_budget_is_spent() {
    let grants = Grants::none().partition("notes").unwrap();
    let got = call(
        &World::new(),
        grants,
        Limits {
            host_calls: 50,
            ..limits()
        },
        "burn-politely",
        json!({"partition": "notes"}),
    );
    assert_eq!(got.unwrap(), json!({"ok": 50}));
}

/// A KV backend whose reads never finish, like a network store that hangs.
struct HangingKv;

#[async_trait]
impl Kv for HangingKv {
    async fn get(&self, _: &Partition, _: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        std::future::pending().await
    }
    async fn get_many(
        &self,
        _: &Partition,
        _: &[Vec<u8>],
    ) -> Result<Vec<Option<Vec<u8>>>, KvError> {
        std::future::pending().await
    }
    async fn scan(
        &self,
        _: &Partition,
        _: &[u8],
        _: Option<&[u8]>,
        _: Option<&[u8]>,
        _: u32,
    ) -> Result<Page, KvError> {
        std::future::pending().await
    }
    async fn read(&self, _: &[Read]) -> Result<Vec<Answer>, KvError> {
        std::future::pending().await
    }
    async fn apply(&self, _: &Batch) -> Result<Outcome, KvError> {
        std::future::pending().await
    }
}

#[test]
fn a_host_call_that_hangs_is_stopped_at_the_call_deadline() {
    let world = World::new();
    let services = Arc::new(Services {
        kv: Arc::new(HangingKv),
        stores: Default::default(),
        clock: world.services.clock.clone(),
        io: world.services.io.clone(),
        retention: None,
    });
    let runtime = runtime();
    let plugin = runtime.load_file(support::probe()).unwrap();
    let timeout = Duration::from_millis(200);
    let call = Arc::new(custodian::runtime::CallContext {
        services,
        grants: Grants::none().partition("notes").unwrap(),
        limits: Limits {
            timeout,
            ..limits()
        },
        actor: "plugin:test".into(),
    });
    let started = Instant::now();
    let got = plugin
        .function(PROBE, "touch-partition")
        .unwrap()
        .call_json(call, &json!({"partition": "notes"}));
    assert!(
        matches!(got, Err(CallError::Limit(LimitExceeded::Time(_)))),
        "{got:?}"
    );
    assert!(
        started.elapsed() < timeout + Duration::from_millis(250),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn guests_reading_two_keys_see_what_the_host_stored() {
    let world = World::new();
    let partition = Partition::new("notes").unwrap();
    let batch = Batch {
        preconditions: vec![],
        writes: vec![custodian::kv::Write::Put {
            partition,
            key: b"a".to_vec(),
            value: b"1".to_vec(),
        }],
    };
    world.services.io.block_on(world.kv.apply(&batch)).unwrap();
    let grants = Grants::none().partition("notes").unwrap();
    let got = call(
        &world,
        grants,
        limits(),
        "read-twice",
        json!({"partition": "notes"}),
    );
    assert_eq!(got.unwrap(), json!(1));
}

/// A KV whose every key holds a value of the largest size, recording the
/// most values one read asked it for: what the host would hold at once.
#[derive(Default)]
struct BigValuesKv {
    most_per_read: std::sync::atomic::AtomicUsize,
}

impl BigValuesKv {
    fn asked(&self, n: usize) {
        self.most_per_read
            .fetch_max(n, std::sync::atomic::Ordering::SeqCst);
    }
}

#[async_trait]
impl Kv for BigValuesKv {
    async fn get(&self, _: &Partition, _: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        self.asked(1);
        Ok(Some(vec![7; custodian::kv::MAX_VALUE_BYTES]))
    }
    async fn get_many(
        &self,
        _: &Partition,
        keys: &[Vec<u8>],
    ) -> Result<Vec<Option<Vec<u8>>>, KvError> {
        self.asked(keys.len());
        Ok(keys
            .iter()
            .map(|_| Some(vec![7; custodian::kv::MAX_VALUE_BYTES]))
            .collect())
    }
    async fn scan(
        &self,
        _: &Partition,
        _: &[u8],
        _: Option<&[u8]>,
        cursor: Option<&[u8]>,
        limit: u32,
    ) -> Result<Page, KvError> {
        self.asked(limit as usize);
        // Keys 0, 1, 2, … as big-endian u32, after the cursor; endless.
        let first = cursor.map_or(0, |c| u32::from_be_bytes(c.try_into().unwrap()) + 1);
        let entries: Vec<(Vec<u8>, Vec<u8>)> = (first..first + limit)
            .map(|i| {
                (
                    i.to_be_bytes().to_vec(),
                    vec![7; custodian::kv::MAX_VALUE_BYTES],
                )
            })
            .collect();
        let next = entries.last().map(|(k, _)| k.clone());
        Ok(Page { entries, next })
    }
    async fn read(&self, reads: &[Read]) -> Result<Vec<Answer>, KvError> {
        // The whole read at once, as a backend answers one snapshot.
        let mut answers = Vec::new();
        for read in reads {
            answers.push(match read {
                Read::Get { partition, key } => Answer::Value(self.get(partition, key).await?),
                Read::Scan {
                    partition,
                    start,
                    end,
                    cursor,
                    limit,
                } => Answer::Page(
                    self.scan(partition, start, end.as_deref(), cursor.as_deref(), *limit)
                        .await?,
                ),
            });
        }
        Ok(answers)
    }
    async fn apply(&self, _: &Batch) -> Result<Outcome, KvError> {
        Ok(Outcome::Committed)
    }
}

/// A call of the probe over `kv` with `memory` bytes of guest memory.
fn call_over(
    kv: Arc<BigValuesKv>,
    memory: usize,
    function: &str,
    input: Value,
) -> Result<Value, CallError> {
    let world = World::new();
    let services = Arc::new(Services {
        kv,
        stores: Default::default(),
        clock: world.services.clock.clone(),
        io: world.services.io.clone(),
        retention: None,
    });
    let runtime = runtime();
    let plugin = runtime.load_file(support::probe()).unwrap();
    let call = Arc::new(custodian::runtime::CallContext {
        services,
        grants: Grants::none().partition("notes").unwrap(),
        limits: Limits {
            memory_bytes: memory,
            ..limits()
        },
        actor: "plugin:test".into(),
    });
    plugin.function(PROBE, function)?.call_json(call, &input)
}

#[test]
fn a_get_many_larger_than_the_guest_can_hold_is_refused_without_the_host_holding_it() {
    let memory = 16 << 20;
    let kv = Arc::new(BigValuesKv::default());
    // 1000 values of 256 KiB: 250 MiB, 16 times what the guest can take.
    let got = call_over(
        kv.clone(),
        memory,
        "read-many",
        json!({"partition": "notes", "count": 1000}),
    );
    let error = got.unwrap()["err"].to_string();
    assert!(error.contains("budget-exhausted"), "{error}");
    // Never more asked of the KV at once than the guest's memory holds.
    let most = kv.most_per_read.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        most * custodian::kv::MAX_VALUE_BYTES <= memory,
        "{most} values read at once"
    );
    // What fits is read whole.
    let fits = call_over(
        Arc::new(BigValuesKv::default()),
        memory,
        "read-many",
        json!({"partition": "notes", "count": 8}),
    );
    assert_eq!(
        fits.unwrap(),
        json!({"ok": 8 * custodian::kv::MAX_VALUE_BYTES})
    );
}

#[test]
fn a_scan_larger_than_the_guest_can_hold_ends_its_page_early_with_a_cursor() {
    let memory = 16 << 20;
    let kv = Arc::new(BigValuesKv::default());
    let got = call_over(
        kv.clone(),
        memory,
        "scan-page",
        json!({"partition": "notes", "limit": 1000}),
    )
    .unwrap();
    let (entries, more) = (got["ok"][0].as_u64().unwrap(), got["ok"][1].clone());
    assert!(entries >= 1, "{got}");
    assert!(
        entries as usize * custodian::kv::MAX_VALUE_BYTES <= memory,
        "{entries} entries of 256 KiB in one page"
    );
    assert_eq!(more, json!(true), "the guest pages on");
    let most = kv.most_per_read.load(std::sync::atomic::Ordering::SeqCst);
    assert!(most * custodian::kv::MAX_VALUE_BYTES <= memory, "{most}");
}

#[test]
fn a_snapshot_read_of_any_partition_not_granted_is_refused_whole() {
    let grants = || Grants::none().partition("notes").unwrap();
    for (gets_from, scanned) in [
        ("notes", "secrets"),
        ("secrets", "notes"),
        ("custodian.timers", "notes"),
        ("notes", "custodian.audit"),
    ] {
        let got = call(
            &World::new(),
            grants(),
            limits(),
            "read-snapshot",
            json!({"get-partition": gets_from, "gets": 2, "scan-partition": scanned, "limit": 5}),
        )
        .unwrap();
        assert!(
            got["err"]["access-denied"].is_string(),
            "{gets_from} and {scanned}: {got}"
        );
    }
    let granted = call(
        &World::new(),
        grants(),
        limits(),
        "read-snapshot",
        json!({"get-partition": "notes", "gets": 2, "scan-partition": "notes", "limit": 5}),
    )
    .unwrap();
    assert_eq!(granted, json!({"ok": [0, 0, false]}));
}

#[test]
fn a_snapshot_read_beyond_its_bounds_is_refused_as_an_invalid_argument() {
    let grants = || Grants::none().partition("notes").unwrap();
    for (gets, limit) in [(64, 1), (0, 0), (0, 1001), (10, 995)] {
        let got = call(
            &World::new(),
            grants(),
            limits(),
            "read-snapshot",
            json!({"get-partition": "notes", "gets": gets, "scan-partition": "notes", "limit": limit}),
        )
        .unwrap();
        assert!(
            got["err"]["invalid-argument"].is_string(),
            "{gets} gets and a scan of {limit}: {got}"
        );
    }
}

#[test]
fn a_snapshot_read_larger_than_the_guest_can_hold_is_refused_or_its_pages_end_early() {
    let memory = 16 << 20;
    // 63 values of 256 KiB could be 15.75 MiB: more than the guest has left.
    let kv = Arc::new(BigValuesKv::default());
    let got = call_over(
        kv.clone(),
        memory,
        "read-snapshot",
        json!({"get-partition": "notes", "gets": 63, "scan-partition": "notes", "limit": 1}),
    );
    let error = got.unwrap()["err"].to_string();
    assert!(error.contains("budget-exhausted"), "{error}");
    assert_eq!(
        kv.most_per_read.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "nothing was asked of the KV"
    );
    // A few values and a scan: the scan's page ends early, with a cursor.
    let kv = Arc::new(BigValuesKv::default());
    let got = call_over(
        kv.clone(),
        memory,
        "read-snapshot",
        json!({"get-partition": "notes", "gets": 4, "scan-partition": "notes", "limit": 900}),
    )
    .unwrap();
    let (bytes, entries, more) = (
        got["ok"][0].as_u64().unwrap(),
        got["ok"][1].as_u64().unwrap(),
        got["ok"][2].clone(),
    );
    assert_eq!(bytes, 4 * custodian::kv::MAX_VALUE_BYTES as u64, "{got}");
    assert!(entries >= 1, "{got}");
    assert!(
        (4 + entries as usize) * custodian::kv::MAX_VALUE_BYTES <= memory,
        "{entries} entries of 256 KiB beside 4 values"
    );
    assert_eq!(more, json!(true), "the guest pages on");
}
