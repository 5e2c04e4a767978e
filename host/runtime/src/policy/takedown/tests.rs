//! Takedown steps on warm instances, with the stepper guest: each step is
//! bound to its own call's services and budget, and a step that trapped
//! leaves no instance behind.

use std::sync::{Arc, OnceLock};

use super::{KIND, PARTITION, TakedownPolicy};
use crate::{CallContext, CallError, Limits, Services};
use custodian_base::clock::SystemClock;
use custodian_core::timers::{DueTimer, Fired};
use custodian_kv::memory::MemoryKv;
use custodian_kv::{Kv, Outcome, Partition};

/// Drives the plugin's KV calls; the steps themselves run on the test's
/// thread, as the timer worker runs them on a blocking thread.
fn io() -> &'static tokio::runtime::Runtime {
    static IO: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    IO.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a tokio runtime")
    })
}

fn stepper() -> TakedownPolicy {
    let plugin = crate::test_guests::runtime()
        .load_bytes(crate::test_guests::stepper(), "stepper")
        .expect("it loads");
    TakedownPolicy::new(Arc::new(plugin)).expect("a takedown plugin")
}

/// A call over its own in-memory KV, under `limits`.
fn call_over(kv: &Arc<MemoryKv>, limits: Limits) -> Arc<CallContext> {
    let services = Services {
        kv: kv.clone(),
        stores: Default::default(),
        clock: Arc::new(SystemClock),
        io: io().handle().clone(),
        retention: None,
    };
    Arc::new(CallContext {
        services: Arc::new(services),
        grants: super::grants(),
        limits,
        actor: "stepper".into(),
    })
}

fn kv() -> Arc<MemoryKv> {
    Arc::new(MemoryKv::new(Arc::new(SystemClock)))
}

fn timer(reference: &str) -> DueTimer {
    DueTimer {
        kind: KIND.into(),
        reference: reference.as_bytes().to_vec(),
        due_ms: 1,
        steps: 0,
        failures: 0,
    }
}

/// Runs one step of `reference` in `call` and commits it to `kv`.
fn step(
    policy: &TakedownPolicy,
    call: Arc<CallContext>,
    kv: &MemoryKv,
    reference: &str,
) -> Result<(), CallError> {
    let fired = policy
        .step(call, &timer(reference), 1)?
        .expect("the step answers");
    let (Fired::Reschedule { commit, .. } | Fired::Done(commit)) = fired;
    assert_eq!(
        io().block_on(kv.apply(&commit.batch)).unwrap(),
        Outcome::Committed
    );
    Ok(())
}

fn count(kv: &MemoryKv, reference: &str) -> Option<u64> {
    let partition = Partition::new(PARTITION).unwrap();
    io().block_on(kv.get(&partition, reference.as_bytes()))
        .unwrap()
        .map(|bytes| u64::from_be_bytes(bytes.try_into().expect("8 bytes")))
}

#[test]
fn a_step_on_a_warm_instance_reads_and_writes_through_its_own_calls_services() {
    let policy = stepper();
    let (first, second) = (kv(), kv());
    step(
        &policy,
        call_over(&first, Limits::default()),
        &first,
        "count:9:a",
    )
    .unwrap();
    assert_eq!(policy.warm.idle_count(), 1);
    // The warm instance now serves a call over another KV: it must read
    // that KV's row (absent), not the first one's.
    step(
        &policy,
        call_over(&second, Limits::default()),
        &second,
        "count:9:a",
    )
    .unwrap();
    assert_eq!(policy.warm.idle_count(), 1, "the instance served again");
    assert_eq!(count(&first, "count:9:a"), Some(1));
    assert_eq!(count(&second, "count:9:a"), Some(1));
}

#[test]
fn a_warm_instance_gets_each_steps_own_budget_of_host_calls() {
    let policy = stepper();
    let kv = kv();
    // A count step makes one KV read; two calls cover one step and not
    // two, so every step after the first would fail if the budget carried
    // over.
    let limits = Limits {
        host_calls: 2,
        ..Limits::default()
    };
    for _ in 0..5 {
        step(&policy, call_over(&kv, limits.clone()), &kv, "count:9:b").unwrap();
    }
    assert_eq!(count(&kv, "count:9:b"), Some(5));
    assert_eq!(policy.warm.idle_count(), 1);
}

#[test]
fn a_step_that_traps_leaves_no_instance_and_the_next_step_runs_on_a_fresh_one() {
    let policy = stepper();
    let kv = kv();
    step(&policy, call_over(&kv, Limits::default()), &kv, "count:9:c").unwrap();
    let trapped = policy.step(call_over(&kv, Limits::default()), &timer("trap:c"), 1);
    assert!(matches!(trapped, Err(CallError::Trap(_))), "{trapped:?}");
    assert_eq!(policy.warm.idle_count(), 0, "a trapped instance is dropped");
    step(&policy, call_over(&kv, Limits::default()), &kv, "count:9:c").unwrap();
    assert_eq!(count(&kv, "count:9:c"), Some(2));
}

#[test]
fn a_step_that_overspends_its_budget_leaves_no_instance() {
    let policy = stepper();
    let kv = kv();
    let limits = Limits {
        host_calls: 8,
        ..Limits::default()
    };
    let greedy = policy.step(call_over(&kv, limits.clone()), &timer("greedy:d"), 1);
    assert!(greedy.is_err(), "{greedy:?}");
    assert_eq!(policy.warm.idle_count(), 0);
    step(&policy, call_over(&kv, limits), &kv, "count:9:d").unwrap();
    assert_eq!(count(&kv, "count:9:d"), Some(1));
}
