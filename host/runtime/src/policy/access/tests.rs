//! The access driver on real components: the bundled policy's whole table,
//! and the gatekeeper guest's misbehaviour, on warm instances.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{AccessJudge, AccessPolicy, AccessRequest, Action, Decision, Principal, Target};
use crate::policy::warm::CALLS_PER_INSTANCE;
use crate::{CallError, LimitExceeded, Limits, LoadError, Services, World};
use custodian_base::clock::SystemClock;
use custodian_core::decisions::access::{MAX_REASON_BYTES, MAX_ROLES};

/// The I/O runtime isolated calls are handed; an access plugin makes no
/// call that needs it.
fn io() -> tokio::runtime::Handle {
    static IO: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    IO.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime")
    })
    .handle()
    .clone()
}

fn policy_of(bytes: &[u8], limits: Limits) -> AccessPolicy {
    let plugin = Arc::new(
        crate::test_guests::runtime()
            .load_bytes(bytes, "test")
            .expect("it loads"),
    );
    let services = Services::isolated(Arc::new(SystemClock), io());
    AccessPolicy::new(plugin, services, limits).expect("an access plugin")
}

fn bundled() -> AccessPolicy {
    policy_of(
        crate::bundled::plugin(World::Access).expect("bundled"),
        Limits::default(),
    )
}

fn gatekeeper(limits: Limits) -> AccessPolicy {
    policy_of(crate::test_guests::gatekeeper(), limits)
}

fn asked_by(name: &str, action: Action) -> AccessRequest {
    AccessRequest {
        principal: Principal {
            name: name.into(),
            roles: vec!["reader".into()],
        },
        action,
        target: Target {
            store: Some("serving".into()),
            key: Some("docs/a.txt".into()),
            ..Target::default()
        },
        headers: Vec::new(),
    }
}

fn deny_reason(decision: Decision) -> String {
    match decision {
        Decision::Deny(reason) => reason,
        Decision::Allow => panic!("allowed"),
    }
}

#[test]
fn the_bundled_plugin_gives_every_answer_of_its_table_as_a_component() {
    let cases: Vec<Value> =
        serde_json::from_str(include_str!("../../../../../plugins/access/cases.json"))
            .expect("cases.json parses");
    let policy = bundled();
    for case in &cases {
        let request: AccessRequest =
            serde_json::from_value(case["input"]["request"].clone()).expect("a request");
        let expected: Decision =
            serde_json::from_value(case["expect"].clone()).expect("a decision");
        let got = policy.decide(&request).expect("the bundled plugin answers");
        assert_eq!(got, expected, "case {}", case["name"]);
    }
    assert!(cases.len() >= 150, "the table lost its cases");
}

#[test]
fn a_warm_instance_answers_the_next_call() {
    let policy = gatekeeper(Limits::default());
    let counter = asked_by("counter", Action::Read);
    assert_eq!(deny_reason(policy.decide(&counter).unwrap()), "call 1");
    assert_eq!(deny_reason(policy.decide(&counter).unwrap()), "call 2");
    assert_eq!(policy.warm.idle_count(), 1);
}

#[test]
fn an_instance_is_retired_after_its_share_of_calls() {
    let policy = gatekeeper(Limits::default());
    let counter = asked_by("counter", Action::Read);
    for _ in 0..CALLS_PER_INSTANCE {
        policy.decide(&counter).unwrap();
    }
    assert_eq!(deny_reason(policy.decide(&counter).unwrap()), "call 1");
}

#[test]
fn a_trapping_plugin_leaves_the_request_unanswered_and_the_next_one_is_answered() {
    let policy = gatekeeper(Limits::default());
    let unanswered = AccessJudge::decide(&policy, &asked_by("trap", Action::Read))
        .expect_err("a trap is no answer");
    assert!(
        unanswered.to_string().contains("traps when asked to"),
        "{unanswered}"
    );
    assert_eq!(policy.warm.idle_count(), 0, "a trapped instance is dropped");
    assert_eq!(
        AccessJudge::decide(&policy, &asked_by("bob", Action::Read)),
        Ok(Decision::Allow)
    );
}

#[test]
fn a_warm_instance_gets_a_fresh_deadline_for_each_call() {
    let timeout = Duration::from_millis(50);
    let policy = gatekeeper(Limits {
        timeout,
        ..Limits::default()
    });
    let read = asked_by("bob", Action::Read);
    assert_eq!(policy.decide(&read).unwrap(), Decision::Allow);
    // Past the deadline the instance had when it was made.
    std::thread::sleep(timeout * 3);
    assert_eq!(policy.decide(&read).unwrap(), Decision::Allow);
    let started = Instant::now();
    let spun = policy.decide(&asked_by("spin", Action::Read));
    assert!(
        matches!(spun, Err(CallError::Limit(LimitExceeded::Time(t))) if t == timeout),
        "{spun:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[test]
fn a_plugin_growing_past_its_memory_limit_leaves_the_request_unanswered() {
    let policy = gatekeeper(Limits {
        memory_bytes: 16 << 20,
        ..Limits::default()
    });
    let hogged = policy.decide(&asked_by("hog", Action::Read));
    assert!(
        matches!(hogged, Err(CallError::Limit(LimitExceeded::Memory { .. }))),
        "{hogged:?}"
    );
    assert_eq!(
        policy.decide(&asked_by("bob", Action::Read)).unwrap(),
        Decision::Allow
    );
}

#[test]
fn an_instance_whose_guest_wrote_to_stderr_is_not_called_again() {
    let policy = gatekeeper(Limits::default());
    assert_eq!(
        policy.decide(&asked_by("chatty", Action::Read)).unwrap(),
        Decision::Allow
    );
    assert_eq!(policy.warm.idle_count(), 0);
}

#[test]
fn a_long_deny_reason_is_cut_to_the_hosts_bound() {
    let policy = gatekeeper(Limits::default());
    let reason = deny_reason(policy.decide(&asked_by("long", Action::Read)).unwrap());
    assert!(
        reason.len() <= MAX_REASON_BYTES + '…'.len_utf8(),
        "{}",
        reason.len()
    );
    assert!(reason.ends_with('…'));
}

#[test]
fn a_request_outside_the_promised_bounds_is_not_asked() {
    let policy = gatekeeper(Limits::default());
    let mut request = asked_by("counter", Action::Read);
    request.principal.roles = vec!["reader".into(); MAX_ROLES + 1];
    assert!(matches!(policy.decide(&request), Err(CallError::Input(_))));
    let counter = asked_by("counter", Action::Read);
    assert_eq!(deny_reason(policy.decide(&counter).unwrap()), "call 1");
}

#[test]
fn a_plugin_of_another_world_is_not_an_access_policy() {
    let retention = crate::bundled::plugin(World::Retention).expect("bundled");
    let plugin = Arc::new(
        crate::test_guests::runtime()
            .load_bytes(retention, "retention")
            .unwrap(),
    );
    let services = Services::isolated(Arc::new(SystemClock), io());
    assert!(matches!(
        AccessPolicy::new(plugin, services, Limits::default()),
        Err(LoadError::WrongWorld { .. })
    ));
}

#[test]
fn the_judge_names_the_plugin_that_decides() {
    let policy = bundled();
    assert_eq!(
        AccessJudge::plugin_hash(&policy),
        crate::content_hash(crate::bundled::plugin(World::Access).unwrap())
    );
}

/// Runs `ask` in a task on a multi-threaded runtime's worker, where the
/// server's handlers run.
fn on_a_worker<T: Send + 'static>(ask: impl FnOnce() -> T + Send + 'static) -> T {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let task = runtime.spawn(async move { ask() });
    runtime.block_on(task).expect("the task does not panic")
}

#[test]
fn a_quick_plugin_decides_on_an_async_worker_even_when_it_writes_to_stderr() {
    let policy = Arc::new(gatekeeper(Limits::default()));
    let asked = policy.clone();
    let (read, write, chatty) = on_a_worker(move || {
        (
            asked.decide_now(&asked_by("bob", Action::Read)),
            asked.decide_now(&asked_by("bob", Action::Write)),
            asked.decide_now(&asked_by("chatty", Action::Read)),
        )
    });
    assert_eq!(
        read.expect("answered on the worker").unwrap(),
        Decision::Allow
    );
    assert!(matches!(write, Some(Ok(Decision::Deny(_)))), "{write:?}");
    // wasmtime-wasi's own stderr would have panicked here (it drives the
    // write with the runtime's block_on, which a worker refuses).
    assert_eq!(
        chatty.expect("answered on the worker").unwrap(),
        Decision::Allow
    );
}

#[test]
fn a_trap_on_an_async_worker_is_unanswered_with_the_guests_panic_message() {
    let policy = Arc::new(gatekeeper(Limits::default()));
    let asked = policy.clone();
    let trapped = on_a_worker(move || asked.decide_now(&asked_by("trap", Action::Read)))
        .expect("a trap is an answer made on the worker");
    let error = trapped.expect_err("a trap is no decision");
    assert!(error.to_string().contains("traps when asked to"), "{error}");
}

#[test]
fn a_plugin_that_waits_is_not_answered_on_an_async_worker_and_decides_elsewhere() {
    let policy = Arc::new(gatekeeper(Limits::default()));
    let asked = policy.clone();
    let sleepy = asked_by("sleepy", Action::Read);
    let on_worker = on_a_worker({
        let sleepy = sleepy.clone();
        move || asked.decide_now(&sleepy)
    });
    assert!(on_worker.is_none(), "{on_worker:?}");
    // Where it may wait (a thread of its own), it sleeps and decides.
    assert_eq!(policy.decide(&sleepy).unwrap(), Decision::Allow);
    // A refused wait did not demote the plugin: quick requests are still
    // answered on the worker.
    let asked = policy.clone();
    let read = on_a_worker(move || asked.decide_now(&asked_by("bob", Action::Read)));
    assert_eq!(
        read.expect("still asked on the worker").unwrap(),
        Decision::Allow
    );
}

#[test]
fn a_plugin_slow_three_times_is_then_asked_only_where_it_may_take_its_time() {
    // Past `QUICK`: each spin is stopped here, after 50 ms or a little more.
    let timeout = Duration::from_millis(50);
    assert!(timeout > super::QUICK);
    let policy = Arc::new(gatekeeper(Limits {
        timeout,
        ..Limits::default()
    }));
    let asked = policy.clone();
    let answers = on_a_worker(move || {
        (0..4)
            .map(|_| asked.decide_now(&asked_by("spin", Action::Read)))
            .collect::<Vec<_>>()
    });
    for spun in &answers[..3] {
        assert!(
            matches!(spun, Some(Err(CallError::Limit(LimitExceeded::Time(t)))) if *t == timeout),
            "{spun:?}"
        );
    }
    assert!(answers[3].is_none(), "{:?}", answers[3]);
    let asked = policy.clone();
    let quick = on_a_worker(move || asked.decide_now(&asked_by("bob", Action::Read)));
    assert!(quick.is_none(), "a slow plugin stays off the workers");
    assert_eq!(
        AccessJudge::decide(policy.as_ref(), &asked_by("bob", Action::Read)),
        Ok(Decision::Allow)
    );
}
