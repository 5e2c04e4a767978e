use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;

use super::governor::{self, Governor, GovernorConfig};
use super::in_flight::InFlight;
use super::*;
use crate::audit::Record;
use crate::budget::{SliceBudget, budgeted_kv};
use crate::fence::{Coordinator, FenceConfig, Namespace, ShardId};
use custodian_base::clock::{Clock, FixedClock};
use custodian_kv::intercept::{Call, Hook, Intercepted};
use custodian_kv::memory::MemoryKv;
use custodian_kv::{KvError, MAX_BATCH_OPS, Partition};

const START: u64 = 1_000_000;

fn work() -> Partition {
    Partition::new("work").expect("valid")
}

fn setup() -> (Arc<dyn Kv>, Arc<FixedClock>) {
    let clock = Arc::new(FixedClock::new(START));
    (Arc::new(MemoryKv::new(clock.clone())), clock)
}

/// What the test handler does on each step.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Write one fresh row per commit and reschedule, `steps` times.
    Count { steps: u64 },
    /// As `Count`, each next step due at once.
    AtOnce { steps: u64 },
    /// Always fail.
    Fail,
    /// Return a batch above the caller bounds.
    Oversized,
    /// Guard on a row that never exists with the value it checks.
    Stale,
}

struct Handler {
    kind: &'static str,
    mode: Mode,
    max_per_tick: Option<u32>,
    /// Distinct row per fire, so a double commit would leave two rows.
    fires: AtomicU64,
    /// Holds every fire until two have started, to make workers race.
    barrier: Option<tokio::sync::Barrier>,
    /// Who it says it is; `test:<kind>` when `None`.
    actor: Option<&'static str>,
    /// What every commit of its steps carries (see
    /// [`TimerHandler::guards`]).
    guards: Vec<Precondition>,
    /// Logs each step's decision (see [`TimerHandler::decision`]), and
    /// plans as many audit entries as a step may.
    decides: bool,
    /// Moves this clock on by this many ms during each fire: a slow step.
    slow: Option<(Arc<FixedClock>, u64)>,
}

impl Handler {
    fn new(kind: &'static str, mode: Mode) -> Self {
        Self {
            kind,
            mode,
            max_per_tick: None,
            fires: AtomicU64::new(0),
            barrier: None,
            actor: None,
            guards: Vec::new(),
            decides: false,
            slow: None,
        }
    }
}

#[async_trait]
impl TimerHandler for Handler {
    fn kind(&self) -> &str {
        self.kind
    }

    fn actor(&self) -> String {
        self.actor
            .map_or_else(|| format!("test:{}", self.kind), str::to_owned)
    }

    fn max_per_tick(&self) -> Option<u32> {
        self.max_per_tick
    }

    fn guards(&self) -> &[Precondition] {
        &self.guards
    }

    fn decision(&self, timer: &DueTimer, fired: &Fired, now_ms: u64) -> Option<Record> {
        let outcome = match fired {
            Fired::Reschedule { .. } => "outcome:reschedule",
            Fired::Done(_) => "outcome:done",
        };
        self.decides.then(|| Record {
            at_ms: now_ms,
            actor: "plugin:test@feedface".into(),
            event: "decision/test/step".into(),
            targets: vec![
                "plugin:feedface".into(),
                outcome.into(),
                format!(
                    "timer:{}/{}",
                    timer.kind,
                    display_reference(&timer.reference)
                ),
            ],
            detail: None,
        })
    }

    async fn fire(
        &self,
        timer: &DueTimer,
        now_ms: u64,
        _: &SliceBudget,
    ) -> Result<Fired, StepFailure> {
        if let Some(barrier) = &self.barrier {
            barrier.wait().await;
        }
        if let Some((clock, ms)) = &self.slow {
            clock.set(clock.now_ms() + ms);
        }
        let fire = self.fires.fetch_add(1, Ordering::SeqCst);
        let row = |key: Vec<u8>| Write::Put {
            partition: work(),
            key,
            value: b"x".to_vec(),
        };
        let mut key = timer.reference.clone();
        key.extend_from_slice(format!("/step{}/fire{fire}", timer.steps + 1).as_bytes());
        let entries = if self.decides { MAX_STEP_AUDIT } else { 1 };
        let commit = |batch: Batch| StepCommit {
            batch,
            audit: vec![
                AuditEntry {
                    event: "Counted".into(),
                    targets: vec![display_reference(&timer.reference)],
                    detail: Some(format!("step {}", timer.steps + 1)),
                };
                entries
            ],
        };
        match self.mode {
            Mode::Count { steps } | Mode::AtOnce { steps } => {
                let batch = Batch {
                    preconditions: vec![],
                    writes: vec![row(key)],
                };
                let later = if matches!(self.mode, Mode::AtOnce { .. }) {
                    0
                } else {
                    1_000
                };
                if timer.steps + 1 >= steps {
                    Ok(Fired::Done(commit(batch)))
                } else {
                    Ok(Fired::Reschedule {
                        due_ms: now_ms + later,
                        commit: commit(batch),
                    })
                }
            }
            Mode::Fail => Err(StepFailure::new("the policy is broken")),
            Mode::Oversized => Ok(Fired::Done(commit(Batch {
                preconditions: vec![],
                writes: (0..=MAX_BATCH_OPS)
                    .map(|i| row(format!("k{i}").into_bytes()))
                    .collect(),
            }))),
            Mode::Stale => Ok(Fired::Done(commit(Batch {
                preconditions: vec![Precondition::Equals {
                    partition: work(),
                    key: b"never".to_vec(),
                    value: b"there".to_vec(),
                }],
                writes: vec![row(key)],
            }))),
        }
    }
}

fn worker(kv: &Arc<dyn Kv>, clock: &Arc<FixedClock>, handlers: Vec<Arc<Handler>>) -> Worker {
    let worker = Worker::new(kv.clone(), clock.clone(), WorkerConfig::default());
    for handler in handlers {
        worker.register(handler);
    }
    worker
}

async fn rows(kv: &Arc<dyn Kv>) -> Vec<Vec<u8>> {
    let page = kv
        .scan(&work(), &[0], None, None, 1000)
        .await
        .expect("scan");
    page.entries.into_iter().map(|(k, _)| k).collect()
}

async fn audit_events(kv: &Arc<dyn Kv>) -> Vec<String> {
    let (records, _) = crate::audit::read(kv.as_ref(), 0, None, 1000)
        .await
        .expect("read");
    records.into_iter().map(|r| r.event).collect()
}

#[tokio::test]
async fn scheduling_a_timer_twice_moves_it_instead_of_adding_another() {
    let (kv, _) = setup();
    schedule(kv.as_ref(), "work", b"a", START + 5)
        .await
        .unwrap();
    schedule(kv.as_ref(), "work", b"a", START + 9)
        .await
        .unwrap();
    let (timers, next) = list(kv.as_ref(), None, 10).await.unwrap();
    assert_eq!(timers.len(), 1);
    assert_eq!(timers[0].due_ms, START + 9);
    assert_eq!(next, None);
    let timer = get(kv.as_ref(), "work", b"a").await.unwrap().unwrap();
    assert_eq!(timer.due_ms, START + 9);
    assert!(cancel(kv.as_ref(), "work", b"a").await.unwrap());
    assert!(!cancel(kv.as_ref(), "work", b"a").await.unwrap());
    assert_eq!(get(kv.as_ref(), "work", b"a").await.unwrap(), None);
    assert!(list(kv.as_ref(), None, 10).await.unwrap().0.is_empty());
}

#[tokio::test]
async fn a_timer_read_at_its_due_time_is_found_and_at_any_other_time_is_not() {
    let (kv, _) = setup();
    assert_eq!(
        get_due_at(kv.as_ref(), "work", b"a", START + 5)
            .await
            .unwrap(),
        None,
        "absent"
    );
    schedule(kv.as_ref(), "work", b"a", START + 5)
        .await
        .unwrap();
    let timer = get_due_at(kv.as_ref(), "work", b"a", START + 5)
        .await
        .unwrap()
        .expect("due then");
    assert_eq!(
        timer,
        get(kv.as_ref(), "work", b"a").await.unwrap().unwrap()
    );
    assert_eq!(
        get_due_at(kv.as_ref(), "work", b"a", START + 6)
            .await
            .unwrap(),
        None,
        "due at another time"
    );
    // An index naming a due row that is not there is corrupt, not a race:
    // both were read in one snapshot.
    let partition = partition();
    let gone = Batch {
        preconditions: Vec::new(),
        writes: vec![Write::Delete {
            partition,
            key: due_key(START + 5, "work", b"a"),
        }],
    };
    assert_eq!(kv.apply(&gone).await, Ok(Outcome::Committed));
    assert!(matches!(
        get_due_at(kv.as_ref(), "work", b"a", START + 5).await,
        Err(TimerError::Corrupt(_))
    ));
}

#[tokio::test]
async fn bad_kinds_and_references_are_refused() {
    let (kv, _) = setup();
    for (kind, reference) in [
        ("", b"a".as_slice()),
        ("Upper", b"a"),
        ("has\0nul", b"a"),
        ("work", b""),
        ("work", &[7u8; MAX_REFERENCE_BYTES + 1]),
    ] {
        let got = schedule(kv.as_ref(), kind, reference, START).await;
        assert!(
            matches!(got, Err(TimerError::InvalidArgument(_))),
            "{kind:?}: {got:?}"
        );
    }
}

#[tokio::test]
async fn only_due_timers_fire_and_they_fire_in_due_order() {
    let (kv, clock) = setup();
    let handler = Arc::new(Handler::new("work", Mode::Count { steps: 1 }));
    for (reference, due) in [
        (b"late", START + 10),
        (b"b-ok", START),
        (b"a-ok", START - 5),
    ] {
        schedule(kv.as_ref(), "work", reference, due).await.unwrap();
    }
    let worker = worker(&kv, &clock, vec![handler]);
    let report = worker.tick().await.unwrap();
    let fired: Vec<_> = report.fired.iter().map(|f| f.reference.as_str()).collect();
    assert_eq!(fired, vec!["a-ok", "b-ok"]);
    assert!(report.fired.iter().all(|f| f.outcome == FireOutcome::Done));
    assert!(get(kv.as_ref(), "work", b"late").await.unwrap().is_some());
    clock.set(START + 10);
    let report = worker.tick().await.unwrap();
    assert_eq!(report.fired.len(), 1);
    assert_eq!(report.fired[0].reference, "late");
}

#[tokio::test]
async fn a_step_commits_its_batch_audit_and_reschedule_together() {
    let (kv, clock) = setup();
    schedule(kv.as_ref(), "work", b"r", START).await.unwrap();
    let worker = worker(
        &kv,
        &clock,
        vec![Arc::new(Handler::new("work", Mode::Count { steps: 3 }))],
    );
    let report = worker.tick().await.unwrap();
    assert_eq!(report.fired[0].outcome, FireOutcome::Rescheduled);
    assert_eq!(report.fired[0].next_due_ms, Some(START + 1_000));
    assert_eq!(rows(&kv).await.len(), 1);
    assert_eq!(audit_events(&kv).await, vec!["timer/step", "Counted"]);
    let timer = get(kv.as_ref(), "work", b"r").await.unwrap().unwrap();
    assert_eq!(timer.state.steps, 1);

    // Not due again until the clock reaches the reschedule.
    assert!(worker.tick().await.unwrap().fired.is_empty());
    for at in [START + 1_000, START + 2_000] {
        clock.set(at);
        worker.tick().await.unwrap();
    }
    assert_eq!(rows(&kv).await.len(), 3);
    assert_eq!(get(kv.as_ref(), "work", b"r").await.unwrap(), None);
    let events = audit_events(&kv).await;
    assert_eq!(events.iter().filter(|e| *e == "Counted").count(), 3);
    assert_eq!(events.last().map(String::as_str), Some("Counted"));
    assert!(events.contains(&"timer/done".to_owned()));
}

#[tokio::test]
async fn a_handlers_decision_record_commits_with_its_step_beside_as_many_entries_as_the_policy_may_plan()
 {
    let (kv, clock) = setup();
    schedule(kv.as_ref(), "work", b"r", START).await.unwrap();
    let mut handler = Handler::new("work", Mode::Count { steps: 2 });
    handler.decides = true;
    let worker = worker(&kv, &clock, vec![Arc::new(handler)]);
    for at in [START, START + 1_000] {
        clock.set(at);
        worker.tick().await.unwrap();
    }
    let (records, _) = crate::audit::read(kv.as_ref(), 0, None, 1000)
        .await
        .unwrap();
    let decisions: Vec<_> = records
        .iter()
        .filter(|r| r.event == "decision/test/step")
        .collect();
    assert_eq!(decisions.len(), 2, "{records:?}");
    assert!(
        decisions[0]
            .targets
            .contains(&"outcome:reschedule".to_owned())
    );
    assert!(decisions[1].targets.contains(&"outcome:done".to_owned()));
    assert!(decisions[1].targets.contains(&"plugin:feedface".to_owned()));
    assert!(
        decisions[1].targets.contains(&"timer:work/r".to_owned()),
        "{:?}",
        decisions[1]
    );
    assert_eq!(
        records.iter().filter(|r| r.event == "Counted").count(),
        2 * MAX_STEP_AUDIT
    );
}

#[tokio::test]
async fn a_failed_step_commits_nothing_and_backs_off_exponentially_up_to_a_cap() {
    let (kv, clock) = setup();
    schedule(kv.as_ref(), "work", b"r", START).await.unwrap();
    let worker = Worker::new(
        kv.clone(),
        clock.clone(),
        WorkerConfig {
            base_backoff_ms: 1_000,
            max_backoff_ms: 8_000,
            ..WorkerConfig::default()
        },
    );
    worker.register(Arc::new(Handler::new("work", Mode::Fail)));
    let mut delays = Vec::new();
    for _ in 0..6 {
        let report = worker.tick().await.unwrap();
        let fired = &report.fired[0];
        assert_eq!(fired.outcome, FireOutcome::Failed);
        assert_eq!(fired.error.as_deref(), Some("the policy is broken"));
        let next = fired.next_due_ms.unwrap();
        delays.push(next - clock.now_ms());
        clock.set(next);
    }
    for (delay, base) in delays
        .iter()
        .zip([1_000, 2_000, 4_000, 8_000, 8_000, 8_000])
    {
        assert!(
            (base..=base + base / 4).contains(delay),
            "delays {delays:?}"
        );
    }
    assert!(rows(&kv).await.is_empty());
    assert!(audit_events(&kv).await.is_empty());
    let timer = get(kv.as_ref(), "work", b"r").await.unwrap().unwrap();
    assert_eq!(timer.state.failures, 6);
    assert_eq!(timer.state.steps, 0);
    assert_eq!(
        timer.state.last_error.as_deref(),
        Some("the policy is broken")
    );
}

/// Two workers tick together over 20 due timers; a barrier makes both
/// fire each timer before either commits.
async fn race_two_workers(kv: Arc<dyn Kv>, clock: Arc<FixedClock>) {
    for i in 0..20u32 {
        schedule(kv.as_ref(), "work", format!("r{i:02}").as_bytes(), START)
            .await
            .unwrap();
    }
    let handler = Arc::new(Handler {
        barrier: Some(tokio::sync::Barrier::new(2)),
        max_per_tick: Some(1),
        ..Handler::new("work", Mode::Count { steps: 1 })
    });
    let first = Arc::new(worker(&kv, &clock, vec![handler.clone()]));
    let second = Arc::new(worker(&kv, &clock, vec![handler.clone()]));
    let mut outcomes = Vec::new();
    for _ in 0..20 {
        let (a, b) = (first.clone(), second.clone());
        let (a, b) = tokio::join!(
            tokio::spawn(async move { a.tick().await }),
            tokio::spawn(async move { b.tick().await })
        );
        for report in [a.unwrap().unwrap(), b.unwrap().unwrap()] {
            outcomes.extend(report.fired.into_iter().map(|f| f.outcome));
        }
    }
    let done = outcomes.iter().filter(|o| **o == FireOutcome::Done).count();
    let lost = outcomes.iter().filter(|o| **o == FireOutcome::Lost).count();
    assert_eq!(done, 20, "{outcomes:?}");
    assert_eq!(lost, 20, "both workers fired every timer: {outcomes:?}");
    assert_eq!(rows(&kv).await.len(), 20, "one committed row per timer");
    assert_eq!(handler.fires.load(Ordering::SeqCst), 40);
    let events = audit_events(&kv).await;
    assert_eq!(events.iter().filter(|e| *e == "Counted").count(), 20);
}

#[tokio::test]
async fn two_workers_firing_the_same_timer_commit_its_step_once() {
    let (kv, clock) = setup();
    race_two_workers(kv, clock).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_on_threads_over_the_durable_kv_commit_each_step_once() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(FixedClock::new(START));
    let kv: Arc<dyn Kv> = Arc::new(
        custodian_kv::redb::RedbKv::open(&dir.path().join("kv.redb"), clock.clone()).unwrap(),
    );
    race_two_workers(kv, clock).await;
}

#[tokio::test]
async fn max_per_tick_leaves_the_rest_for_later_ticks() {
    let (kv, clock) = setup();
    schedule_due(&kv, "slow", &["a", "b", "c"]).await;
    schedule(kv.as_ref(), "fast", b"z", START).await.unwrap();
    let slow = Arc::new(Handler {
        max_per_tick: Some(1),
        ..Handler::new("slow", Mode::Count { steps: 1 })
    });
    let fast = Arc::new(Handler::new("fast", Mode::Count { steps: 1 }));
    let worker = worker(&kv, &clock, vec![slow, fast]);
    let report = worker.tick().await.unwrap();
    let fired: Vec<_> = report.fired.iter().map(|f| f.reference.as_str()).collect();
    // Due at the same time, so in kind order: `fast` before `slow`.
    assert_eq!(fired, vec!["z", "a"]);
    assert!(report.more_due);
    let mut reports = Vec::new();
    let ticks = worker
        .run_until_idle(10, |report| reports.push(report.clone()))
        .await
        .unwrap();
    assert_eq!(ticks as usize, reports.len());
    let total: usize = reports.iter().map(|r| r.fired.len()).sum();
    assert_eq!(total, 2);
    assert!(!reports.last().unwrap().more_due);
}

#[tokio::test]
async fn timers_of_unknown_kinds_are_counted_and_left_alone() {
    let (kv, clock) = setup();
    schedule(kv.as_ref(), "other", b"a", START).await.unwrap();
    let worker = worker(&kv, &clock, vec![]);
    let report = worker.tick().await.unwrap();
    assert_eq!(report.unhandled, 1);
    assert!(report.fired.is_empty());
    assert!(get(kv.as_ref(), "other", b"a").await.unwrap().is_some());
}

#[tokio::test]
async fn a_step_that_loses_a_race_once_is_retried_at_once_and_backs_off_when_it_loses_again() {
    let (kv, clock) = setup();
    schedule(kv.as_ref(), "work", b"r", START).await.unwrap();
    let worker = worker(
        &kv,
        &clock,
        vec![Arc::new(Handler::new("work", Mode::Stale))],
    );
    let first = worker.tick().await.unwrap().fired.remove(0);
    assert_eq!(first.outcome, FireOutcome::Failed);
    assert_eq!(first.cause, Some(FailureCause::Contention));
    assert_eq!(
        first.next_due_ms,
        Some(START + 1),
        "the least step interval"
    );

    clock.set(START + 1);
    let second = worker.tick().await.unwrap().fired.remove(0);
    assert_eq!(second.cause, Some(FailureCause::Contention));
    let backoff = second.next_due_ms.unwrap() - (START + 1);
    assert!(
        (2_000..=2_500).contains(&backoff),
        "the back-off of a second failure, spread: {backoff} ms"
    );
}

#[tokio::test]
async fn a_step_whose_own_guard_fails_is_recorded_as_a_failure() {
    let (kv, clock) = setup();
    schedule(kv.as_ref(), "work", b"r", START).await.unwrap();
    let worker = worker(
        &kv,
        &clock,
        vec![Arc::new(Handler::new("work", Mode::Stale))],
    );
    let report = worker.tick().await.unwrap();
    let fired = &report.fired[0];
    assert_eq!(fired.outcome, FireOutcome::Failed);
    assert!(
        fired.error.as_deref().unwrap().contains("precondition 0"),
        "{fired:?}"
    );
    assert!(rows(&kv).await.is_empty());
    assert!(audit_events(&kv).await.is_empty());
}

#[tokio::test]
async fn a_step_whose_handler_guard_no_longer_holds_is_fenced_and_commits_nothing() {
    let (kv, clock) = setup();
    let set = |value: &[u8]| Batch {
        preconditions: vec![],
        writes: vec![Write::Put {
            partition: work(),
            key: b"plugin-set".to_vec(),
            value: value.to_vec(),
        }],
    };
    kv.apply(&set(b"v1")).await.unwrap();
    schedule(kv.as_ref(), "work", b"r", START).await.unwrap();
    let mut handler = Handler::new("work", Mode::Count { steps: 3 });
    handler.guards = vec![Precondition::Equals {
        partition: work(),
        key: b"plugin-set".to_vec(),
        value: b"v1".to_vec(),
    }];
    let worker = worker(&kv, &clock, vec![Arc::new(handler)]);
    let report = worker.tick().await.unwrap();
    assert_eq!(report.fired[0].outcome, FireOutcome::Rescheduled);

    // Another host's swap moves the set on.
    kv.apply(&set(b"v2")).await.unwrap();
    clock.set(START + 1_000);
    let before = rows(&kv).await.len();
    let report = worker.tick().await.unwrap();
    assert!(report.fenced);
    assert_eq!(report.fired[0].outcome, FireOutcome::Fenced);
    assert_eq!(
        rows(&kv).await.len(),
        before,
        "nothing of the step committed"
    );
    let timer = get(kv.as_ref(), "work", b"r").await.unwrap().unwrap();
    assert_eq!(timer.state.steps, 1);
    assert_eq!(
        timer.state.failures, 0,
        "a fenced step is not the step's failure"
    );
}

#[tokio::test]
async fn an_oversized_step_batch_is_a_failure_not_a_partial_commit() {
    let (kv, clock) = setup();
    schedule(kv.as_ref(), "work", b"r", START).await.unwrap();
    let worker = worker(
        &kv,
        &clock,
        vec![Arc::new(Handler::new("work", Mode::Oversized))],
    );
    let fired = &worker.tick().await.unwrap().fired[0];
    assert_eq!(fired.outcome, FireOutcome::Failed);
    assert!(fired.error.as_deref().unwrap().contains("invalid batch"));
    assert!(rows(&kv).await.is_empty());
}

/// Fires like `inner`, but while its first step is in flight raises the
/// `fence` epoch to 1 and revokes it to completion, as a plugin swap does
/// (first registering `successor`, when there is one, in `handlers`).
struct BumpsMidStep {
    coordinator: Arc<Coordinator>,
    fence: crate::fence::FenceKind,
    successor: Option<(Arc<Handlers>, Arc<dyn TimerHandler>)>,
    inner: Handler,
}

#[async_trait]
impl TimerHandler for BumpsMidStep {
    fn kind(&self) -> &str {
        "work"
    }
    fn actor(&self) -> String {
        self.inner.actor()
    }
    async fn fire(
        &self,
        timer: &DueTimer,
        now_ms: u64,
        budget: &SliceBudget,
    ) -> Result<Fired, StepFailure> {
        if self.inner.fires.load(Ordering::SeqCst) == 0 {
            if let Some((handlers, successor)) = &self.successor {
                handlers.register(successor.clone());
            }
            let ns = Namespace::new(FENCE_NAMESPACE).unwrap();
            self.coordinator
                .transition_and_revoke(&ns, 1, self.fence)
                .await
                .expect("the bump completes");
        }
        self.inner.fire(timer, now_ms, budget).await
    }
}

#[tokio::test]
async fn a_step_in_flight_when_an_epoch_bump_completes_commits_nothing() {
    let (kv, clock) = setup();
    schedule_due(&kv, "work", &["a", "b"]).await;
    let coordinator =
        Arc::new(Coordinator::new(kv.clone(), clock.clone(), FenceConfig::default()).unwrap());
    let mut worker = Worker::new(kv.clone(), clock.clone(), WorkerConfig::default());
    worker.register(Arc::new(BumpsMidStep {
        coordinator: coordinator.clone(),
        fence: crate::fence::FenceKind::Grant,
        successor: None,
        inner: Handler::new("work", Mode::Count { steps: 1 }),
    }));
    worker.fence(
        coordinator,
        Namespace::new(FENCE_NAMESPACE).unwrap(),
        ShardId::new("local").unwrap(),
    );
    let report = worker.tick().await.unwrap();
    assert!(report.fenced);
    assert_eq!(report.fired.len(), 1);
    assert_eq!(report.fired[0].outcome, FireOutcome::Fenced);
    assert!(
        rows(&kv).await.is_empty(),
        "the old epoch's step wrote nothing"
    );
    assert!(audit_events(&kv).await.is_empty());

    // The next tick takes a lease at the new epoch and carries on.
    let report = worker.tick().await.unwrap();
    assert!(!report.fenced);
    let outcomes: Vec<_> = report.fired.iter().map(|f| f.outcome).collect();
    assert_eq!(outcomes, vec![FireOutcome::Done, FireOutcome::Done]);
    assert_eq!(rows(&kv).await.len(), 2);
}

#[tokio::test]
async fn a_worker_whose_lease_expired_mid_step_commits_nothing() {
    struct Slow {
        clock: Arc<FixedClock>,
        inner: Handler,
    }
    #[async_trait]
    impl TimerHandler for Slow {
        fn kind(&self) -> &str {
            "work"
        }
        fn actor(&self) -> String {
            "test".into()
        }
        async fn fire(
            &self,
            timer: &DueTimer,
            now_ms: u64,
            budget: &SliceBudget,
        ) -> Result<Fired, StepFailure> {
            // The step outlives the worker's lease.
            self.clock
                .set(now_ms + FenceConfig::default().epoch_lease_ms);
            self.inner.fire(timer, now_ms, budget).await
        }
    }
    let (kv, clock) = setup();
    schedule(kv.as_ref(), "work", b"a", START).await.unwrap();
    let coordinator =
        Arc::new(Coordinator::new(kv.clone(), clock.clone(), FenceConfig::default()).unwrap());
    let mut worker = Worker::new(kv.clone(), clock.clone(), WorkerConfig::default());
    worker.register(Arc::new(Slow {
        clock: clock.clone(),
        inner: Handler::new("work", Mode::Count { steps: 1 }),
    }));
    worker.fence(
        coordinator,
        Namespace::new(FENCE_NAMESPACE).unwrap(),
        ShardId::new("local").unwrap(),
    );
    let report = worker.tick().await.unwrap();
    assert!(report.fenced);
    assert!(rows(&kv).await.is_empty());
}

#[tokio::test]
async fn a_reschedule_into_the_past_still_waits_for_the_next_tick() {
    struct Past;
    #[async_trait]
    impl TimerHandler for Past {
        fn kind(&self) -> &str {
            "work"
        }
        fn actor(&self) -> String {
            "test".into()
        }
        async fn fire(&self, _: &DueTimer, _: u64, _: &SliceBudget) -> Result<Fired, StepFailure> {
            Ok(Fired::Reschedule {
                due_ms: 0,
                commit: StepCommit::default(),
            })
        }
    }
    let (kv, clock) = setup();
    schedule(kv.as_ref(), "work", b"r", START).await.unwrap();
    let worker = Worker::new(kv.clone(), clock.clone(), WorkerConfig::default());
    worker.register(Arc::new(Past));
    let report = worker.tick().await.unwrap();
    assert_eq!(report.fired.len(), 1);
    assert_eq!(report.fired[0].next_due_ms, Some(START + 1));
}

#[tokio::test]
async fn a_corrupt_timer_row_is_reported_as_corrupt() {
    let (kv, clock) = setup();
    kv.apply(&Batch {
        preconditions: vec![],
        writes: vec![Write::Put {
            partition: partition(),
            key: due_key(START, "work", b"r"),
            value: b"garbage".to_vec(),
        }],
    })
    .await
    .unwrap();
    let worker = worker(
        &kv,
        &clock,
        vec![Arc::new(Handler::new("work", Mode::Count { steps: 1 }))],
    );
    assert!(matches!(worker.tick().await, Err(TimerError::Corrupt(_))));
}

/// What another writer does to timer `work/r` the first time a reader
/// asks for `row`: commits between the reader's two reads.
struct Meanwhile {
    row: Vec<u8>,
    then: tokio::sync::Mutex<Option<Then>>,
}

enum Then {
    Reschedule(u64),
    Cancel,
}

#[async_trait]
impl Hook for Meanwhile {
    async fn before(&self, inner: &dyn Kv, call: Call<'_>) -> Result<(), KvError> {
        if let Call::Get { key } = call
            && key == self.row
        {
            match self.then.lock().await.take() {
                Some(Then::Reschedule(due_ms)) => {
                    schedule(inner, "work", b"r", due_ms).await.unwrap();
                }
                Some(Then::Cancel) => assert!(cancel(inner, "work", b"r").await.unwrap()),
                None => {}
            }
        }
        Ok(())
    }
}

fn meanwhile(kv: &Arc<dyn Kv>, row: Vec<u8>, then: Then) -> Intercepted<Meanwhile> {
    Intercepted {
        inner: kv.clone(),
        hook: Meanwhile {
            row,
            then: tokio::sync::Mutex::new(Some(then)),
        },
    }
}

#[tokio::test]
async fn a_timer_moved_between_the_reads_of_a_get_is_read_where_it_moved_not_called_corrupt() {
    let (kv, _clock) = setup();
    schedule(kv.as_ref(), "work", b"r", START).await.unwrap();
    let moving = meanwhile(
        &kv,
        due_key(START, "work", b"r"),
        Then::Reschedule(START + 500),
    );
    let timer = get(&moving, "work", b"r").await.unwrap().unwrap();
    assert_eq!(timer.due_ms, START + 500);

    let cancelling = meanwhile(&kv, due_key(START + 500, "work", b"r"), Then::Cancel);
    assert_eq!(get(&cancelling, "work", b"r").await.unwrap(), None);
}

#[tokio::test]
async fn an_index_naming_a_row_that_is_not_there_is_corrupt() {
    let (kv, _clock) = setup();
    schedule(kv.as_ref(), "work", b"r", START).await.unwrap();
    kv.apply(&Batch {
        preconditions: vec![],
        writes: vec![Write::Delete {
            partition: partition(),
            key: due_key(START, "work", b"r"),
        }],
    })
    .await
    .unwrap();
    assert!(matches!(
        get(kv.as_ref(), "work", b"r").await,
        Err(TimerError::Corrupt(_))
    ));
}

#[test]
fn references_print_as_text_or_hex_and_parse_back() {
    for reference in [b"plain".to_vec(), vec![0, 1, 255], b"0xab".to_vec()] {
        let shown = display_reference(&reference);
        assert_eq!(parse_reference(&shown), reference, "{shown}");
    }
}

/// Reads its budget's worth of rows and then some, and returns a commit
/// anyway: the worker must not commit it.
struct Greedy;

#[async_trait]
impl TimerHandler for Greedy {
    fn kind(&self) -> &str {
        "greedy"
    }
    fn actor(&self) -> String {
        "test:greedy".into()
    }
    async fn fire(
        &self,
        timer: &DueTimer,
        _: u64,
        budget: &SliceBudget,
    ) -> Result<Fired, StepFailure> {
        let kv = budgeted_kv(
            Arc::new(MemoryKv::new(Arc::new(FixedClock::new(0)))),
            budget.clone(),
        );
        let reads: u32 = timer.reference[0].into();
        for _ in 0..reads {
            // Ignores `budget-exhausted`, as a careless policy might.
            let _ = kv.get(&work(), b"k").await;
        }
        Ok(Fired::Done(StepCommit {
            batch: Batch {
                preconditions: vec![],
                writes: vec![Write::Put {
                    partition: work(),
                    key: timer.reference.clone(),
                    value: b"x".to_vec(),
                }],
            },
            audit: vec![],
        }))
    }
}

#[tokio::test]
async fn a_step_that_spends_its_budget_commits_nothing_even_if_it_returns_a_commit() {
    let (kv, clock) = setup();
    schedule(kv.as_ref(), "greedy", &[5], START).await.unwrap();
    schedule(kv.as_ref(), "greedy", &[3], START).await.unwrap();
    let worker = Worker::new(
        kv.clone(),
        clock.clone(),
        WorkerConfig {
            step_store_calls: 4,
            ..WorkerConfig::default()
        },
    );
    worker.register(Arc::new(Greedy));
    let report = worker.tick().await.unwrap();
    let outcomes: Vec<_> = report
        .fired
        .iter()
        .map(|f| (f.reference.clone(), f.outcome))
        .collect();
    assert_eq!(
        outcomes,
        vec![
            ("0x03".to_owned(), FireOutcome::Done),
            ("0x05".to_owned(), FireOutcome::Failed)
        ]
    );
    assert!(
        report.fired[1]
            .error
            .as_deref()
            .unwrap()
            .contains("budget of 4 store calls")
    );
    assert_eq!(rows(&kv).await, vec![vec![3]]);
}

#[tokio::test]
async fn when_the_tick_budget_runs_out_the_step_is_deferred_not_failed() {
    let (kv, clock) = setup();
    for reference in [[3u8], [4u8]] {
        schedule(kv.as_ref(), "greedy", &reference, START)
            .await
            .unwrap();
    }
    let worker = Worker::new(
        kv.clone(),
        clock.clone(),
        WorkerConfig {
            step_store_calls: 10,
            tick_store_calls: 5,
            ..WorkerConfig::default()
        },
    );
    worker.register(Arc::new(Greedy));
    let report = worker.tick().await.unwrap();
    let outcomes: Vec<_> = report.fired.iter().map(|f| f.outcome).collect();
    assert_eq!(outcomes, vec![FireOutcome::Done, FireOutcome::Deferred]);
    assert!(report.more_due);
    let timer = get(kv.as_ref(), "greedy", &[4]).await.unwrap().unwrap();
    assert_eq!(timer.state.failures, 0, "a deferred step is not a failure");
    assert_eq!(timer.due_ms, START);
}

#[tokio::test]
async fn a_step_of_a_handler_swapped_out_mid_step_commits_nothing_and_its_successor_runs_under_the_new_authority()
 {
    let (kv, clock) = setup();
    schedule(kv.as_ref(), "work", b"a", START).await.unwrap();
    let coordinator =
        Arc::new(Coordinator::new(kv.clone(), clock.clone(), FenceConfig::default()).unwrap());
    let handlers = Arc::new(Handlers::new());
    let mut worker = Worker::sharing(
        kv.clone(),
        clock.clone(),
        WorkerConfig::default(),
        handlers.clone(),
    );
    let successor = Handler {
        actor: Some("plugin:new"),
        ..Handler::new("work", Mode::Count { steps: 1 })
    };
    handlers.register(Arc::new(BumpsMidStep {
        coordinator: coordinator.clone(),
        fence: crate::fence::FenceKind::Authority,
        successor: Some((handlers.clone(), Arc::new(successor))),
        inner: Handler {
            actor: Some("plugin:old"),
            ..Handler::new("work", Mode::Count { steps: 1 })
        },
    }));
    worker.fence(
        coordinator,
        Namespace::new(FENCE_NAMESPACE).unwrap(),
        ShardId::new("local").unwrap(),
    );

    let report = worker.tick().await.unwrap();
    assert_eq!(report.fired[0].outcome, FireOutcome::Fenced);
    assert_eq!(report.fired[0].actor, "plugin:old");
    assert!(
        rows(&kv).await.is_empty(),
        "the old handler's step wrote nothing"
    );
    assert!(audit_events(&kv).await.is_empty());

    let report = worker.tick().await.unwrap();
    assert_eq!(report.fired[0].outcome, FireOutcome::Done);
    assert_eq!(report.fired[0].actor, "plugin:new");
    assert_eq!(rows(&kv).await.len(), 1);
    let (records, _) = crate::audit::read(kv.as_ref(), 0, None, 16).await.unwrap();
    let step = records
        .iter()
        .find(|r| r.event == "timer/done")
        .expect("the step is audited");
    let detail = step.detail.as_deref().unwrap();
    assert!(
        detail.contains("by plugin:new on local under authority 1"),
        "{detail}"
    );
    assert!(records.iter().all(|r| r.actor != "plugin:old"));
}

/// A handler that notes which timers are inside a step at once, and can
/// hold the steps of one reference until the test releases them.
struct Probe {
    inside: std::sync::Mutex<std::collections::HashSet<Vec<u8>>>,
    /// Steps that began while another step of the same timer was running.
    overlaps: AtomicU64,
    /// Every step's reference, in the order the steps began.
    fired: std::sync::Mutex<Vec<Vec<u8>>>,
    /// The reference whose steps are held, announced on `entered` and
    /// held until `release`.
    gate: Option<Vec<u8>>,
    entered: tokio::sync::Notify,
    release: tokio::sync::Notify,
}

impl Probe {
    fn new(gate: Option<&[u8]>) -> Arc<Self> {
        Arc::new(Self {
            inside: std::sync::Mutex::default(),
            overlaps: AtomicU64::new(0),
            fired: std::sync::Mutex::default(),
            gate: gate.map(<[u8]>::to_vec),
            entered: tokio::sync::Notify::new(),
            release: tokio::sync::Notify::new(),
        })
    }

    fn fired(&self) -> Vec<Vec<u8>> {
        self.fired.lock().unwrap().clone()
    }
}

#[async_trait]
impl TimerHandler for Probe {
    fn kind(&self) -> &str {
        "work"
    }

    fn actor(&self) -> String {
        "test:probe".into()
    }

    async fn fire(&self, timer: &DueTimer, _: u64, _: &SliceBudget) -> Result<Fired, StepFailure> {
        if !self.inside.lock().unwrap().insert(timer.reference.clone()) {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        self.fired.lock().unwrap().push(timer.reference.clone());
        if self.gate.as_deref() == Some(timer.reference.as_slice()) {
            self.entered.notify_one();
            self.release.notified().await;
        } else {
            // Long enough for the other workers to reach the same timer.
            for _ in 0..8 {
                tokio::task::yield_now().await;
            }
        }
        self.inside.lock().unwrap().remove(&timer.reference);
        Ok(Fired::Done(StepCommit::default()))
    }
}

fn sharing_worker(
    kv: &Arc<dyn Kv>,
    clock: &Arc<FixedClock>,
    handlers: &Arc<Handlers>,
    in_flight: &InFlight,
) -> Worker {
    let mut worker = Worker::sharing(
        kv.clone(),
        clock.clone(),
        WorkerConfig::default(),
        handlers.clone(),
    );
    worker.share_in_flight(in_flight.clone());
    worker
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workers_sharing_an_in_flight_set_fire_every_due_timer_once_and_never_one_twice_at_once() {
    let (kv, clock) = setup();
    let references: Vec<Vec<u8>> = (0..40).map(|i| format!("r{i:02}").into_bytes()).collect();
    for reference in &references {
        schedule(kv.as_ref(), "work", reference, START)
            .await
            .unwrap();
    }
    let probe = Probe::new(None);
    let handlers = Arc::new(Handlers::new());
    handlers.register(probe.clone());
    let in_flight = InFlight::new();
    let ticks = (0..4).map(|_| {
        let worker = sharing_worker(&kv, &clock, &handlers, &in_flight);
        tokio::spawn(async move { worker.tick().await.unwrap() })
    });
    let reports: Vec<TickReport> = futures::future::join_all(ticks)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        probe.overlaps.load(Ordering::SeqCst),
        0,
        "no timer was in two steps at once"
    );
    let mut fired = probe.fired();
    fired.sort();
    assert_eq!(
        fired, references,
        "every due timer was fired, each by one plugin call"
    );
    for report in &reports {
        assert!(
            report.fired.iter().all(|f| f.outcome == FireOutcome::Done),
            "no step was lost to another worker: {report:?}"
        );
    }
    for reference in &references {
        assert!(
            get(kv.as_ref(), "work", reference).await.unwrap().is_none(),
            "every timer is done"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_worker_takes_the_due_timers_a_busy_worker_is_not_firing() {
    let (kv, clock) = setup();
    for (i, reference) in [b"r1", b"r2", b"r3"].iter().enumerate() {
        schedule(kv.as_ref(), "work", *reference, START - 3 + i as u64)
            .await
            .unwrap();
    }
    let probe = Probe::new(Some(b"r1"));
    let handlers = Arc::new(Handlers::new());
    handlers.register(probe.clone());
    let in_flight = InFlight::new();
    let busy = sharing_worker(&kv, &clock, &handlers, &in_flight);
    let held = tokio::spawn(async move { busy.tick().await.unwrap() });
    probe.entered.notified().await;

    // r1, the earliest due, is in a step on the other worker; this one
    // takes the rest of the queue instead of waiting behind it.
    let free = sharing_worker(&kv, &clock, &handlers, &in_flight);
    let report = tokio::time::timeout(std::time::Duration::from_secs(10), free.tick())
        .await
        .expect("the free worker does not wait behind the busy one")
        .unwrap();
    let references: Vec<&str> = report.fired.iter().map(|f| f.reference.as_str()).collect();
    assert_eq!(references, ["r2", "r3"]);
    assert_eq!(report.busy, 1, "{report:?}");

    // The held worker's page still lists r2 and r3 as due: it reads them
    // again and leaves them, instead of calling the plugin for rows that
    // moved on.
    probe.release.notify_one();
    let report = held.await.unwrap();
    let references: Vec<&str> = report.fired.iter().map(|f| f.reference.as_str()).collect();
    assert_eq!(references, ["r1"]);
    assert_eq!(
        probe.fired(),
        [b"r1".to_vec(), b"r2".to_vec(), b"r3".to_vec()]
    );
    for reference in [b"r1", b"r2", b"r3"] {
        assert!(get(kv.as_ref(), "work", reference).await.unwrap().is_none());
    }
}

fn claiming(
    kv: &Arc<dyn Kv>,
    clock: &Arc<FixedClock>,
    holder: &str,
    handler: Arc<Handler>,
) -> Worker {
    let mut worker = worker(kv, clock, vec![handler]);
    worker
        .claim_steps(claim::ClaimConfig {
            holder: holder.into(),
            ttl_ms: 30_000,
        })
        .unwrap();
    worker
}

/// Schedules `work/r1` at [`START`] and claims it for host `node-a`, as
/// a worker of that host would.
async fn claimed_elsewhere(kv: &Arc<dyn Kv>) {
    schedule(kv.as_ref(), "work", b"r1", START).await.unwrap();
    let timer = get(kv.as_ref(), "work", b"r1").await.unwrap().unwrap();
    let other = claim::ClaimConfig {
        holder: "node-a".into(),
        ttl_ms: 30_000,
    };
    let current = kv
        .get(&partition(), &claim::claim_key("work", b"r1"))
        .await
        .unwrap();
    assert_eq!(
        claim::claim(kv.as_ref(), &other, &timer, current, START)
            .await
            .unwrap(),
        claim::Claimed::Held
    );
}

#[tokio::test]
async fn a_step_claimed_by_another_worker_is_skipped_until_the_claim_lapses() {
    let (kv, clock) = setup();
    claimed_elsewhere(&kv).await;
    let handler = Arc::new(Handler::new("work", Mode::Count { steps: 1 }));
    let worker = claiming(&kv, &clock, "node-b", handler.clone());

    let report = worker.tick().await.unwrap();
    assert_eq!(report.claimed_elsewhere, 1);
    assert!(report.fired.is_empty());
    assert_eq!(handler.fires.load(Ordering::SeqCst), 0, "no wasted call");

    clock.set(START + 30_000);
    let report = worker.tick().await.unwrap();
    assert_eq!(report.claimed_elsewhere, 0);
    assert_eq!(report.fired.len(), 1);
    assert_eq!(report.fired[0].outcome, FireOutcome::Done);
}

#[tokio::test]
async fn a_claim_on_an_earlier_due_row_of_the_timer_keeps_nobody_away() {
    let (kv, clock) = setup();
    claimed_elsewhere(&kv).await;
    // The claimed attempt failed and backed the timer off: a new due row.
    schedule(kv.as_ref(), "work", b"r1", START + 10)
        .await
        .unwrap();
    clock.set(START + 10);
    let handler = Arc::new(Handler::new("work", Mode::Count { steps: 1 }));
    let report = claiming(&kv, &clock, "node-b", handler)
        .tick()
        .await
        .unwrap();
    assert_eq!(report.claimed_elsewhere, 0);
    assert_eq!(report.fired.len(), 1);
}

/// Counts the reads and the transactions a worker makes.
#[derive(Default)]
struct Calls {
    reads: AtomicU64,
    applies: AtomicU64,
}

/// The hook counting into shared [`Calls`].
struct Counting(Arc<Calls>);

#[async_trait]
impl Hook for Counting {
    async fn before(&self, _inner: &dyn Kv, call: Call<'_>) -> Result<(), KvError> {
        let Counting(calls) = self;
        let counter = match call {
            Call::Apply(_) => &calls.applies,
            _ => &calls.reads,
        };
        counter.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

impl Calls {
    /// (reads, applies) since the last look.
    fn take(&self) -> (u64, u64) {
        (
            self.reads.swap(0, Ordering::SeqCst),
            self.applies.swap(0, Ordering::SeqCst),
        )
    }
}

/// A claiming worker of host `holder` whose KV calls are counted.
fn counted_claiming(
    kv: &Arc<dyn Kv>,
    clock: &Arc<FixedClock>,
    holder: &str,
    handler: Arc<Handler>,
) -> (Worker, Arc<Calls>) {
    let calls = Arc::new(Calls::default());
    let counted: Arc<dyn Kv> = Arc::new(Intercepted {
        inner: kv.clone(),
        hook: Counting(calls.clone()),
    });
    (claiming(&counted, clock, holder, handler), calls)
}

/// Two claiming workers of host `holder`, sharing its in-flight set, each
/// with its own count of KV calls.
fn two_counted_workers_of_one_host(
    kv: &Arc<dyn Kv>,
    clock: &Arc<FixedClock>,
    holder: &str,
    handler: &Arc<Handler>,
) -> [(Worker, Arc<Calls>); 2] {
    let in_flight = InFlight::new();
    [(), ()].map(|()| {
        let (mut worker, calls) = counted_claiming(kv, clock, holder, handler.clone());
        worker.share_in_flight(in_flight.clone());
        (worker, calls)
    })
}

#[tokio::test]
async fn a_claiming_host_carries_its_claim_to_the_next_step_and_writes_it_once_per_timer() {
    let (kv, clock) = setup();
    schedule(kv.as_ref(), "work", b"r1", START).await.unwrap();
    let handler = Arc::new(Handler::new("work", Mode::Count { steps: 3 }));
    let (worker, calls) = counted_claiming(&kv, &clock, "node-a", handler);

    let report = worker.tick().await.unwrap();
    assert_eq!(report.fired[0].outcome, FireOutcome::Rescheduled);
    assert_eq!(
        calls.take(),
        (2, 2),
        "the page, then the due and claim rows in one read; the claim, then the step"
    );
    let timer = get(kv.as_ref(), "work", b"r1").await.unwrap().unwrap();
    let row = claim::current(kv.as_ref(), "work", b"r1")
        .await
        .unwrap()
        .expect("a claim");
    assert_eq!((row.holder.as_str(), row.due_ms), ("node-a", timer.due_ms));

    clock.set(timer.due_ms);
    let report = worker.tick().await.unwrap();
    assert_eq!(report.fired[0].outcome, FireOutcome::Rescheduled);
    assert_eq!(calls.take(), (2, 1), "the carried claim needs no write");

    clock.set(clock.now_ms() + 1_000);
    let report = worker.tick().await.unwrap();
    assert_eq!(report.fired[0].outcome, FireOutcome::Done);
    assert_eq!(calls.take(), (2, 1));
    assert_eq!(
        claim::current(kv.as_ref(), "work", b"r1").await.unwrap(),
        None,
        "the last step removed the claim with the timer"
    );
}

#[tokio::test]
async fn a_host_reads_another_hosts_live_claim_once_and_then_skips_its_timer_on_sight() {
    let (kv, clock) = setup();
    claimed_elsewhere(&kv).await;
    let handler = Arc::new(Handler::new("work", Mode::Count { steps: 1 }));
    let [(first, first_calls), (second, second_calls)] =
        two_counted_workers_of_one_host(&kv, &clock, "node-b", &handler);

    assert_eq!(first.tick().await.unwrap().claimed_elsewhere, 1);
    assert_eq!(
        first_calls.take(),
        (2, 0),
        "the page, then the due and claim rows"
    );
    for worker in [&first, &second, &first] {
        let report = worker.tick().await.unwrap();
        assert_eq!(report.claimed_elsewhere, 1);
        assert!(report.fired.is_empty());
    }
    assert_eq!(first_calls.take(), (2, 0), "two pages, no claim read");
    assert_eq!(
        second_calls.take(),
        (1, 0),
        "the page alone: its host had read the claim"
    );
    assert_eq!(handler.fires.load(Ordering::SeqCst), 0, "no wasted call");

    // The claim lapses: it is read again and the step taken over.
    clock.set(START + 30_000);
    let report = second.tick().await.unwrap();
    assert_eq!(report.claimed_elsewhere, 0);
    assert_eq!(report.fired.len(), 1);
    assert_eq!(second_calls.take(), (2, 2));
}

#[tokio::test]
async fn a_host_learns_in_one_read_the_live_claims_another_host_holds_on_a_page_of_timers() {
    let (kv, clock) = setup();
    for reference in [&b"r1"[..], b"r2", b"r3", b"r4", b"r5"] {
        schedule(kv.as_ref(), "work", reference, START)
            .await
            .unwrap();
    }
    let handler = Arc::new(Handler::new("work", Mode::Count { steps: 10 }));
    let holder = claiming(&kv, &clock, "node-a", handler.clone());
    assert_eq!(holder.tick().await.unwrap().fired.len(), 5);
    clock.set(START + 1_000);
    let [(first, first_calls), (second, second_calls)] =
        two_counted_workers_of_one_host(&kv, &clock, "node-b", &handler);

    let report = first.tick().await.unwrap();
    assert_eq!(report.claimed_elsewhere, 5);
    assert!(report.fired.is_empty());
    assert_eq!(
        first_calls.take(),
        (2, 0),
        "the page, then the first timer's rows with the four claims after it"
    );
    let report = second.tick().await.unwrap();
    assert_eq!(report.claimed_elsewhere, 5);
    assert_eq!(second_calls.take(), (1, 0), "the page alone");
    assert_eq!(handler.fires.load(Ordering::SeqCst), 5, "no wasted call");
}

#[tokio::test]
async fn a_claim_read_ahead_on_an_earlier_due_row_keeps_nobody_away_from_the_timer() {
    let (kv, clock) = setup();
    claimed_elsewhere(&kv).await;
    // r2 was claimed by the same host, and its attempt backed off: the
    // claim names a row that is gone.
    schedule(kv.as_ref(), "work", b"r2", START).await.unwrap();
    let timer = get(kv.as_ref(), "work", b"r2").await.unwrap().unwrap();
    let other = claim::ClaimConfig {
        holder: "node-a".into(),
        ttl_ms: 30_000,
    };
    assert_eq!(
        claim::claim(kv.as_ref(), &other, &timer, None, START)
            .await
            .unwrap(),
        claim::Claimed::Held
    );
    schedule(kv.as_ref(), "work", b"r2", START + 10)
        .await
        .unwrap();
    clock.set(START + 10);
    let handler = Arc::new(Handler::new("work", Mode::Count { steps: 1 }));
    let [(worker, calls), _] = two_counted_workers_of_one_host(&kv, &clock, "node-b", &handler);
    let report = worker.tick().await.unwrap();
    assert_eq!(report.claimed_elsewhere, 1, "r1, whose claim is live");
    assert_eq!(fired_references(&report), vec!["r2"]);
    assert_eq!(
        calls.take(),
        (3, 2),
        "the page, r1's rows with r2's claim, r2's rows; r2's claim and step"
    );
}

#[tokio::test]
async fn a_host_takes_the_next_step_of_a_timer_it_carried_its_claim_to_without_reading_its_rows_again()
 {
    let (kv, clock) = setup();
    schedule(kv.as_ref(), "work", b"r1", START).await.unwrap();
    let handler = Arc::new(Handler::new("work", Mode::Count { steps: 4 }));
    let [(first, first_calls), (second, second_calls)] =
        two_counted_workers_of_one_host(&kv, &clock, "node-a", &handler);

    assert_eq!(
        first.tick().await.unwrap().fired[0].outcome,
        FireOutcome::Rescheduled
    );
    assert_eq!(
        first_calls.take(),
        (2, 2),
        "the page, the due and claim rows; the claim, the step"
    );
    // Either worker of the host: the note is the host's.
    clock.set(START + 1_000);
    let report = second.tick().await.unwrap();
    assert_eq!(report.fired[0].outcome, FireOutcome::Rescheduled);
    assert_eq!(second_calls.take(), (1, 1), "the page and the step alone");

    // And back: each commit moves the note to its new due row.
    clock.set(START + 2_000);
    let report = first.tick().await.unwrap();
    assert_eq!(report.fired[0].outcome, FireOutcome::Rescheduled);
    assert_eq!(first_calls.take(), (1, 1));

    // The host fell behind: with less than half the claim's time to live
    // left, the rows are read and the claim written again.
    clock.set(START + 2_000 + 20_000);
    let report = second.tick().await.unwrap();
    assert_eq!(report.fired[0].outcome, FireOutcome::Done);
    assert_eq!(second_calls.take(), (2, 2));
    assert_eq!(handler.fires.load(Ordering::SeqCst), 4, "no step twice");
    assert!(
        claim::current(kv.as_ref(), "work", b"r1")
            .await
            .unwrap()
            .is_none(),
        "the last step removed the claim"
    );
}

#[tokio::test]
async fn a_failed_step_forgets_the_hosts_note_of_its_claim_so_the_next_look_reads_the_rows() {
    let (kv, clock) = setup();
    schedule(kv.as_ref(), "work", b"r1", START).await.unwrap();
    let in_flight = InFlight::new();
    let counting = Arc::new(Handler::new("work", Mode::Count { steps: 4 }));
    let (mut steps, step_calls) = counted_claiming(&kv, &clock, "node-a", counting);
    steps.share_in_flight(in_flight.clone());
    let (mut fails, _) = counted_claiming(
        &kv,
        &clock,
        "node-a",
        Arc::new(Handler::new("work", Mode::Fail)),
    );
    fails.share_in_flight(in_flight);

    steps.tick().await.unwrap();
    clock.set(START + 1_000);
    assert_eq!(
        fails.tick().await.unwrap().fired[0].outcome,
        FireOutcome::Failed
    );
    // An operator puts the timer back at the very due row the host's note
    // named (cancelling it removed its claim).
    cancel(kv.as_ref(), "work", b"r1").await.unwrap();
    schedule(kv.as_ref(), "work", b"r1", START + 1_000)
        .await
        .unwrap();
    step_calls.take();
    let report = steps.tick().await.unwrap();
    assert_eq!(report.fired[0].outcome, FireOutcome::Rescheduled);
    assert_eq!(
        step_calls.take(),
        (2, 2),
        "the rows read and the claim written again"
    );
}

#[tokio::test]
async fn another_host_leaves_a_step_whose_claim_was_carried_to_it_until_the_claim_lapses() {
    let (kv, clock) = setup();
    schedule(kv.as_ref(), "work", b"r1", START).await.unwrap();
    let handler = Arc::new(Handler::new("work", Mode::Count { steps: 3 }));
    let first = claiming(&kv, &clock, "node-a", handler.clone());
    assert_eq!(
        first.tick().await.unwrap().fired[0].outcome,
        FireOutcome::Rescheduled
    );

    let second = claiming(&kv, &clock, "node-b", handler.clone());
    clock.set(START + 1_000);
    let report = second.tick().await.unwrap();
    assert_eq!(report.claimed_elsewhere, 1);
    assert!(report.fired.is_empty());
    assert_eq!(handler.fires.load(Ordering::SeqCst), 1, "no wasted call");

    // node-a died: its claim lapses and node-b takes the step over.
    clock.set(START + 30_000);
    let report = second.tick().await.unwrap();
    assert_eq!(report.claimed_elsewhere, 0);
    assert_eq!(report.fired[0].outcome, FireOutcome::Rescheduled);
}

#[tokio::test]
async fn a_carried_claim_with_less_than_half_its_time_to_live_left_is_written_again() {
    let (kv, clock) = setup();
    schedule(kv.as_ref(), "work", b"r1", START).await.unwrap();
    let handler = Arc::new(Handler::new("work", Mode::Count { steps: 3 }));
    let (worker, calls) = counted_claiming(&kv, &clock, "node-a", handler);
    worker.tick().await.unwrap();
    calls.take();

    // The host fell behind: the step runs 20 s after its claim was
    // carried, with 10 of the claim's 30 s left.
    clock.set(START + 20_000);
    let report = worker.tick().await.unwrap();
    assert_eq!(report.fired[0].outcome, FireOutcome::Rescheduled);
    assert_eq!(calls.take(), (2, 2), "the claim is renewed before the step");
}

#[tokio::test]
async fn a_step_due_later_than_half_the_claims_time_to_live_leaves_the_claim_stale() {
    let (kv, clock) = setup();
    schedule(kv.as_ref(), "work", b"r1", START).await.unwrap();
    let handler = Arc::new(Handler::new("work", Mode::Count { steps: 2 }));
    // The handler reschedules 1 s later; a claim of 1.5 s would be more
    // than half spent by then, so it is not carried.
    let mut worker = worker(&kv, &clock, vec![handler]);
    worker
        .claim_steps(claim::ClaimConfig {
            holder: "node-a".into(),
            ttl_ms: 1_500,
        })
        .unwrap();

    let report = worker.tick().await.unwrap();
    assert_eq!(report.fired[0].outcome, FireOutcome::Rescheduled);
    let row = claim::current(kv.as_ref(), "work", b"r1").await.unwrap();
    let timer = get(kv.as_ref(), "work", b"r1").await.unwrap().unwrap();
    assert!(
        row.is_some_and(|row| row.due_ms < timer.due_ms),
        "the claim names the due row that was fired, now gone"
    );

    clock.set(timer.due_ms);
    let report = worker.tick().await.unwrap();
    assert_eq!(report.fired[0].outcome, FireOutcome::Done);
    assert_eq!(
        claim::current(kv.as_ref(), "work", b"r1").await.unwrap(),
        None
    );
}

#[tokio::test]
async fn cancelling_a_claimed_timer_removes_its_claim() {
    let (kv, _clock) = setup();
    claimed_elsewhere(&kv).await;
    assert!(
        claim::current(kv.as_ref(), "work", b"r1")
            .await
            .unwrap()
            .is_some()
    );
    assert!(cancel(kv.as_ref(), "work", b"r1").await.unwrap());
    assert_eq!(
        claim::current(kv.as_ref(), "work", b"r1").await.unwrap(),
        None
    );
}

#[tokio::test]
async fn a_claim_needs_a_named_holder_and_a_time_to_live() {
    let (kv, clock) = setup();
    let mut worker = Worker::new(kv, clock, WorkerConfig::default());
    for (holder, ttl_ms) in [("", 1), ("h", 0), (&*"x".repeat(129), 1)] {
        let config = claim::ClaimConfig {
            holder: holder.into(),
            ttl_ms,
        };
        assert!(matches!(
            worker.claim_steps(config),
            Err(TimerError::InvalidArgument(_))
        ));
    }
}

#[test]
fn each_timer_error_says_its_kind_and_contention_is_a_retry_away() {
    let cases = [
        (
            TimerError::InvalidArgument("x".into()),
            ErrorKind::InvalidArgument,
        ),
        (TimerError::Corrupt("x".into()), ErrorKind::Corrupt),
        (
            TimerError::Kv(KvError::Corrupt("x".into())),
            ErrorKind::Corrupt,
        ),
        (
            TimerError::Kv(KvError::InvalidArgument("x".into())),
            ErrorKind::Internal,
        ),
        (
            TimerError::Fence(crate::fence::FenceError::InvalidArgument("x".into())),
            ErrorKind::Internal,
        ),
        (
            TimerError::Fence(crate::fence::FenceError::Corrupt("x".into())),
            ErrorKind::Corrupt,
        ),
        (TimerError::Contention, ErrorKind::Unavailable),
    ];
    for (error, kind) in cases {
        assert_eq!(error.kind(), kind, "{error:?}");
    }
}

/// Reschedules into the past at every step: a runaway.
struct Runaway {
    actor: &'static str,
}

#[async_trait]
impl TimerHandler for Runaway {
    fn kind(&self) -> &str {
        "work"
    }
    fn actor(&self) -> String {
        self.actor.into()
    }
    async fn fire(&self, _: &DueTimer, _: u64, _: &SliceBudget) -> Result<Fired, StepFailure> {
        Ok(Fired::Reschedule {
            due_ms: 0,
            commit: StepCommit::default(),
        })
    }
}

/// A governor counting in windows of a minute, with these ceilings.
fn ceilings(max_timer_steps: u32, max_kind_steps: u32) -> Arc<Governor> {
    Arc::new(Governor::new(GovernorConfig {
        window_ms: 60_000,
        max_timer_steps,
        max_kind_steps,
    }))
}

fn governed(kv: &Arc<dyn Kv>, clock: &Arc<FixedClock>, governor: &Arc<Governor>) -> Worker {
    let mut worker = Worker::new(
        kv.clone(),
        clock.clone(),
        WorkerConfig {
            min_step_interval_ms: 10,
            ..WorkerConfig::default()
        },
    );
    worker.govern(governor.clone());
    worker
}

#[tokio::test]
async fn a_reschedule_sooner_than_the_least_interval_waits_for_it() {
    let (kv, clock) = setup();
    schedule(kv.as_ref(), "work", b"r", START).await.unwrap();
    let worker = governed(
        &kv,
        &clock,
        &Arc::new(Governor::new(GovernorConfig::default())),
    );
    worker.register(Arc::new(Runaway { actor: "plugin:a" }));
    let report = worker.tick().await.unwrap();
    assert_eq!(report.fired[0].next_due_ms, Some(START + 10));
}

#[tokio::test]
async fn a_runaway_timer_quarantines_its_plugin_until_another_plugin_drives_the_kind() {
    let (kv, clock) = setup();
    schedule(kv.as_ref(), "work", b"r", START).await.unwrap();
    let governor = ceilings(5, 1_000);
    let worker = governed(&kv, &clock, &governor);
    worker.register(Arc::new(Runaway { actor: "plugin:a" }));
    let mut steps = 0;
    let mut declared = Vec::new();
    for _ in 0..20 {
        clock.set(clock.now_ms() + 10);
        let report = worker.tick().await.unwrap();
        steps += report.fired.len();
        declared.extend(report.quarantined);
    }
    // The sixth step passes the ceiling of five; none runs after it.
    assert_eq!(steps, 6);
    assert_eq!(declared.len(), 1);
    assert_eq!(declared[0].actor, "plugin:a");
    assert!(
        declared[0].reason.contains("more than 5 steps"),
        "{declared:?}"
    );
    assert!(
        audit_events(&kv)
            .await
            .contains(&"plugin/quarantine".to_owned())
    );
    // Another host's governor reads the quarantine from the KV.
    let elsewhere = Arc::new(Governor::new(GovernorConfig::default()));
    let other = governed(&kv, &clock, &elsewhere);
    other.register(Arc::new(Runaway { actor: "plugin:a" }));
    clock.set(clock.now_ms() + 10);
    let report = other.tick().await.unwrap();
    assert!(report.fired.is_empty());
    assert_eq!(report.paused, 1);
    // A swapped plugin (another actor) is not paused by the old one's row.
    worker.register(Arc::new(Runaway { actor: "plugin:b" }));
    clock.set(clock.now_ms() + 10);
    assert_eq!(worker.tick().await.unwrap().fired.len(), 1);
    let listed = governor::quarantined(kv.as_ref()).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert!(
        governor::release(kv.as_ref(), "work", "operator:x", clock.now_ms())
            .await
            .unwrap()
    );
    assert!(
        !governor::release(kv.as_ref(), "work", "operator:x", clock.now_ms())
            .await
            .unwrap()
    );
    assert!(
        audit_events(&kv)
            .await
            .contains(&"plugin/release".to_owned())
    );
    assert!(governor::quarantined(kv.as_ref()).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_timer_with_work_stepping_at_once_is_never_quarantined_however_many_steps_it_takes() {
    let (kv, clock) = setup();
    schedule(kv.as_ref(), "work", b"r", START).await.unwrap();
    let governor = ceilings(5, 10);
    let worker = governed(&kv, &clock, &governor);
    // Every step writes a row of its own: each commit is new.
    worker.register(Arc::new(Handler::new("work", Mode::AtOnce { steps: 40 })));
    let mut steps = 0;
    for _ in 0..50 {
        clock.set(clock.now_ms() + 10);
        let report = worker.tick().await.unwrap();
        assert!(report.quarantined.is_empty(), "{report:?}");
        steps += report.fired.len();
    }
    assert_eq!(steps, 40);
    assert!(governor::quarantined(kv.as_ref()).await.unwrap().is_empty());
}

#[tokio::test]
async fn many_busy_timers_of_one_plugin_trip_the_kind_ceiling() {
    let (kv, clock) = setup();
    for r in 0u8..4 {
        schedule(kv.as_ref(), "work", &[b'r', r], START)
            .await
            .unwrap();
    }
    let governor = ceilings(1_000, 10);
    let worker = governed(&kv, &clock, &governor);
    worker.register(Arc::new(Runaway { actor: "plugin:a" }));
    let mut steps = 0;
    for _ in 0..10 {
        clock.set(clock.now_ms() + 10);
        steps += worker.tick().await.unwrap().fired.len();
    }
    assert_eq!(steps, 11);
    let held = governor::quarantined(kv.as_ref()).await.unwrap();
    assert!(held[0].reason.contains("kind work"), "{held:?}");
}

/// Schedules a timer of `kind` due at [`START`] for each of `references`.
async fn schedule_due(kv: &Arc<dyn Kv>, kind: &str, references: &[&str]) {
    for reference in references {
        schedule(kv.as_ref(), kind, reference.as_bytes(), START)
            .await
            .unwrap();
    }
}

/// A worker over `kv` with its KV calls counted, firing `handlers`, and
/// sharing `in_flight` if given.
fn counted_worker(
    kv: &Arc<dyn Kv>,
    clock: &Arc<FixedClock>,
    handlers: Vec<Arc<Handler>>,
    in_flight: Option<&InFlight>,
) -> (Worker, Arc<Calls>) {
    let calls = Arc::new(Calls::default());
    let counted: Arc<dyn Kv> = Arc::new(Intercepted {
        inner: kv.clone(),
        hook: Counting(calls.clone()),
    });
    let mut worker = worker(&counted, clock, handlers);
    if let Some(in_flight) = in_flight {
        worker.share_in_flight(in_flight.clone());
    }
    (worker, calls)
}

/// A handler of kind `slow` that fires one step per tick, each of
/// `steps` steps a second apart.
fn one_per_tick(steps: u64) -> Arc<Handler> {
    Arc::new(Handler {
        max_per_tick: Some(1),
        ..Handler::new("slow", Mode::Count { steps })
    })
}

fn fired_references(report: &TickReport) -> Vec<&str> {
    report.fired.iter().map(|f| f.reference.as_str()).collect()
}

#[tokio::test]
async fn rows_a_cap_left_fire_in_the_next_ticks_without_another_scan() {
    let (kv, clock) = setup();
    schedule_due(&kv, "slow", &["a", "b", "c"]).await;
    let (worker, calls) = counted_worker(&kv, &clock, vec![one_per_tick(1)], None);
    for (expected, reads) in [("a", 1), ("b", 0), ("c", 0)] {
        let report = worker.tick().await.unwrap();
        assert_eq!(fired_references(&report), vec![expected]);
        assert_eq!(report.fired[0].outcome, FireOutcome::Done);
        assert_eq!(
            calls.take(),
            (reads, 1),
            "reads and commits firing {expected}"
        );
    }
    let report = worker.tick().await.unwrap();
    assert!(report.fired.is_empty() && !report.more_due);
    assert_eq!(calls.take(), (1, 0), "nothing carried: a scan");
}

#[tokio::test]
async fn a_worker_with_nothing_carried_fires_from_the_page_another_worker_of_its_host_scanned_while_it_is_fresh()
 {
    let (kv, clock) = setup();
    schedule_due(&kv, "slow", &["a", "b", "c", "d"]).await;
    let in_flight = InFlight::new();
    let handler = one_per_tick(2);
    let (first, first_calls) = counted_worker(&kv, &clock, vec![handler.clone()], Some(&in_flight));
    let (second, second_calls) = counted_worker(&kv, &clock, vec![handler], Some(&in_flight));

    assert_eq!(fired_references(&first.tick().await.unwrap()), vec!["a"]);
    assert_eq!(first_calls.take(), (2, 1), "the page, a's row, a's step");
    let report = second.tick().await.unwrap();
    assert_eq!(fired_references(&report), vec!["b"], "a was stepped since");
    assert_eq!(
        second_calls.take(),
        (1, 1),
        "b's row and step: no scan of its own"
    );

    // Too old to share: the next worker with nothing carried scans.
    clock.set(START + carry::MAX_AGE_MS + 1);
    let (third, third_calls) = counted_worker(&kv, &clock, vec![one_per_tick(2)], Some(&in_flight));
    assert_eq!(fired_references(&third.tick().await.unwrap()), vec!["c"]);
    assert_eq!(
        third_calls.take(),
        (2, 1),
        "its own page, c's row, c's step"
    );
}

/// A handler of kind `slow` that fires one step per tick, each of
/// `steps` steps due at once after the one before.
fn one_per_tick_at_once(steps: u64) -> Arc<Handler> {
    Arc::new(Handler {
        max_per_tick: Some(1),
        ..Handler::new("slow", Mode::AtOnce { steps })
    })
}

#[tokio::test]
async fn a_worker_fires_the_step_its_own_step_made_due_at_once_from_the_row_it_wrote_without_a_scan_or_re_read()
 {
    let (kv, clock) = setup();
    schedule_due(&kv, "slow", &["a"]).await;
    let in_flight = InFlight::new();
    let handler = one_per_tick_at_once(3);
    let (worker, calls) = counted_worker(&kv, &clock, vec![handler.clone()], Some(&in_flight));

    let report = worker.tick().await.unwrap();
    assert_eq!(report.fired[0].outcome, FireOutcome::Rescheduled);
    assert_eq!(report.fired[0].next_due_ms, Some(START + 1));
    assert_eq!(calls.take(), (2, 1), "the page, a's row, the step");
    let report = worker.tick().await.unwrap();
    assert!(report.fired.is_empty(), "not due before its time");
    calls.take();

    clock.set(START + 1);
    let report = worker.tick().await.unwrap();
    assert_eq!(fired_references(&report), vec!["a"]);
    assert_eq!(report.fired[0].step, 2);
    assert_eq!(
        calls.take(),
        (0, 1),
        "the step alone: its row is as the last commit wrote it"
    );
    clock.set(START + 2);
    let report = worker.tick().await.unwrap();
    assert_eq!(report.fired[0].outcome, FireOutcome::Done);
    assert_eq!(calls.take(), (0, 1));
    assert_eq!(handler.fires.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_row_a_workers_step_wrote_is_not_fired_once_another_worker_of_its_host_stepped_the_timer()
{
    let (kv, clock) = setup();
    schedule_due(&kv, "slow", &["a"]).await;
    let in_flight = InFlight::new();
    let handler = one_per_tick_at_once(5);
    let (first, _) = counted_worker(&kv, &clock, vec![handler.clone()], Some(&in_flight));
    let (second, _) = counted_worker(&kv, &clock, vec![handler.clone()], Some(&in_flight));

    assert_eq!(fired_references(&first.tick().await.unwrap()), vec!["a"]);
    clock.set(START + 1);
    // The second worker finds a's new row by a scan and steps it.
    let report = second.tick().await.unwrap();
    assert_eq!(fired_references(&report), vec!["a"]);
    assert_eq!(report.fired[0].step, 2);
    let report = first.tick().await.unwrap();
    assert!(report.fired.is_empty(), "the row it wrote has moved");
    assert_eq!(handler.fires.load(Ordering::SeqCst), 2, "no wasted call");
}

#[tokio::test]
async fn carried_rows_older_than_their_bound_are_dropped_and_the_tick_scans() {
    let (kv, clock) = setup();
    schedule_due(&kv, "slow", &["a", "b"]).await;
    // Due after the first scan: only a scan finds it.
    schedule(kv.as_ref(), "fast", b"z", START + 1)
        .await
        .unwrap();
    let fast = Arc::new(Handler::new("fast", Mode::Count { steps: 1 }));
    let (worker, calls) = counted_worker(&kv, &clock, vec![one_per_tick(1), fast], None);
    assert_eq!(fired_references(&worker.tick().await.unwrap()), vec!["a"]);
    assert_eq!(calls.take(), (1, 1));
    clock.set(START + carry::MAX_AGE_MS + 1);
    let report = worker.tick().await.unwrap();
    assert_eq!(fired_references(&report), vec!["b", "z"]);
    assert_eq!(calls.take(), (1, 2), "a scan, then both steps");
}

#[tokio::test]
async fn a_worker_skips_without_a_read_the_carried_rows_another_worker_of_its_host_has_stepped() {
    let (kv, clock) = setup();
    schedule_due(&kv, "slow", &["a", "b", "c"]).await;
    let handler = one_per_tick(2);
    let in_flight = InFlight::new();
    let (first, first_calls) = counted_worker(&kv, &clock, vec![handler.clone()], Some(&in_flight));
    let (second, _) = counted_worker(&kv, &clock, vec![handler.clone()], Some(&in_flight));
    assert_eq!(fired_references(&first.tick().await.unwrap()), vec!["a"]);
    assert_eq!(
        first_calls.take(),
        (2, 1),
        "the page, the due row again, the step"
    );
    // The second scans after `a` moved on, and fires `b`.
    assert_eq!(fired_references(&second.tick().await.unwrap()), vec!["b"]);
    let report = first.tick().await.unwrap();
    assert_eq!(fired_references(&report), vec!["c"]);
    assert!(
        report
            .fired
            .iter()
            .all(|f| f.outcome == FireOutcome::Rescheduled)
    );
    assert_eq!(
        first_calls.take(),
        (1, 1),
        "no page and no read of `b`: only `c`'s due row again"
    );
    assert_eq!(handler.fires.load(Ordering::SeqCst), 3, "no wasted step");
}

#[tokio::test]
async fn a_carry_none_of_whose_rows_can_fire_gives_way_to_a_scan_in_the_same_tick() {
    let (kv, clock) = setup();
    schedule_due(&kv, "slow", &["a", "b"]).await;
    let handler = one_per_tick(2);
    let in_flight = InFlight::new();
    let (first, _) = counted_worker(&kv, &clock, vec![handler.clone()], Some(&in_flight));
    let (second, _) = counted_worker(&kv, &clock, vec![handler.clone()], Some(&in_flight));
    assert_eq!(fired_references(&first.tick().await.unwrap()), vec!["a"]);
    assert_eq!(fired_references(&second.tick().await.unwrap()), vec!["b"]);
    // Due now, and in no page read so far.
    schedule(kv.as_ref(), "slow", b"c", START).await.unwrap();
    let report = first.tick().await.unwrap();
    assert_eq!(fired_references(&report), vec!["c"]);
    assert!(!report.more_due);
}

#[tokio::test]
async fn a_host_skips_without_a_read_a_timer_whose_claim_another_host_carried_on_until_the_claim_it_read_lapses()
 {
    let (kv, clock) = setup();
    schedule(kv.as_ref(), "work", b"r1", START).await.unwrap();
    let handler = Arc::new(Handler::new("work", Mode::Count { steps: 10 }));
    let holder = claiming(&kv, &clock, "node-a", handler.clone());
    let [(other, calls), _] = two_counted_workers_of_one_host(&kv, &clock, "node-b", &handler);

    assert_eq!(holder.tick().await.unwrap().fired.len(), 1);
    clock.set(START + 1_000);
    assert_eq!(other.tick().await.unwrap().claimed_elsewhere, 1);
    assert_eq!(
        calls.take(),
        (2, 0),
        "the page, then the due and claim rows"
    );
    // The holder steps on, carrying its claim to each new due row.
    for step in 2..=4u64 {
        assert_eq!(holder.tick().await.unwrap().fired.len(), 1);
        clock.set(START + step * 1_000);
        let report = other.tick().await.unwrap();
        assert_eq!(report.claimed_elsewhere, 1);
        assert!(report.fired.is_empty());
        assert_eq!(calls.take(), (1, 0), "step {step}: the page alone");
    }
    assert_eq!(handler.fires.load(Ordering::SeqCst), 4, "no wasted call");

    // Past the expiry it read (START + 30 s), the claim is read again:
    // the holder carried it on, so the timer is still skipped.
    assert_eq!(holder.tick().await.unwrap().fired.len(), 1);
    clock.set(START + 30_001);
    let report = other.tick().await.unwrap();
    assert_eq!(report.claimed_elsewhere, 1);
    assert_eq!(calls.take(), (2, 0), "the page, then the claim again");
}

#[tokio::test]
async fn an_idle_worker_waits_past_rows_another_host_holds_until_the_claim_it_noted_lapses() {
    let (kv, clock) = setup();
    schedule(kv.as_ref(), "work", b"r1", START).await.unwrap();
    let handler = Arc::new(Handler::new("work", Mode::Count { steps: 10 }));
    let holder = claiming(&kv, &clock, "node-a", handler.clone());
    let [(other, _), _] = two_counted_workers_of_one_host(&kv, &clock, "node-b", &handler);
    let plain = worker(&kv, &clock, vec![handler.clone()]);

    assert_eq!(holder.tick().await.unwrap().fired.len(), 1);
    clock.set(START + 1_000);
    assert_eq!(other.tick().await.unwrap().claimed_elsewhere, 1);
    // The holder steps on: its next row is due a second later.
    assert_eq!(holder.tick().await.unwrap().fired.len(), 1);
    let now = clock.now_ms();
    assert_eq!(
        plain.next_due_after(now).await.unwrap(),
        Some(START + 2_000)
    );
    assert_eq!(
        other.next_due_after(now).await.unwrap(),
        Some(START + 30_000),
        "from when the claim it read lapses"
    );

    schedule(kv.as_ref(), "work", b"r2", START + 5_000)
        .await
        .unwrap();
    schedule(kv.as_ref(), "unknown", b"r3", START + 1_500)
        .await
        .unwrap();
    assert_eq!(
        other.next_due_after(now).await.unwrap(),
        Some(START + 5_000),
        "a timer nobody holds, of a kind it fires"
    );
}

#[tokio::test]
async fn an_idle_worker_whose_page_of_later_rows_is_all_held_elsewhere_waits_no_later_than_its_last_row()
 {
    let (kv, clock) = setup();
    let handler = Arc::new(Handler::new("work", Mode::Count { steps: 10 }));
    let holder = claiming(&kv, &clock, "node-a", handler.clone());
    for reference in [&b"r1"[..], b"r2"] {
        schedule(kv.as_ref(), "work", reference, START)
            .await
            .unwrap();
    }
    assert_eq!(holder.tick().await.unwrap().fired.len(), 2);
    let mut other = Worker::new(
        kv.clone(),
        clock.clone(),
        WorkerConfig {
            page: 2,
            ..WorkerConfig::default()
        },
    );
    other.register(handler);
    other.share_in_flight(InFlight::new());
    other
        .claim_steps(claim::ClaimConfig {
            holder: "node-b".into(),
            ttl_ms: 30_000,
        })
        .unwrap();
    clock.set(START + 1_000);
    assert_eq!(other.tick().await.unwrap().claimed_elsewhere, 2);
    clock.set(START + 1_001);
    assert_eq!(holder.tick().await.unwrap().fired.len(), 2);
    // r1 and r2 are due at START + 2 001 and held until START + 30 000;
    // r3, past a page of two, could have been due as soon as r2.
    schedule(kv.as_ref(), "work", b"r3", START + 9_000)
        .await
        .unwrap();
    assert_eq!(
        other.next_due_after(START + 1_001).await.unwrap(),
        Some(START + 2_001),
        "the page held r1 and r2 alone"
    );
}

#[tokio::test]
async fn a_timer_its_host_holds_with_a_claim_created_is_fired_once_released_by_that_host_alone_without_a_read_or_claim()
 {
    let (kv, clock) = setup();
    let handler = Arc::new(Handler::new("work", Mode::Count { steps: 3 }));
    let config = claim::ClaimConfig {
        holder: "node-a".into(),
        ttl_ms: 30_000,
    };
    // As a serving host's filing does: held from its own workers, then
    // scheduled at once with its claim in the same commit.
    let in_flight = InFlight::new();
    let held = in_flight.hold("work", b"r1").expect("nobody fires it");
    let planned = plan_schedule("work", b"r1", START, None, &TimerState::default()).unwrap();
    let mut batch = Batch {
        preconditions: planned.preconditions,
        writes: planned.writes,
    };
    batch.writes.push(claim::claim_created(
        &config,
        "work",
        b"r1",
        START,
        START + 30_000,
    ));
    assert_eq!(kv.apply(&batch).await.unwrap(), Outcome::Committed);

    let (mut own, own_calls) = counted_claiming(&kv, &clock, "node-a", handler.clone());
    own.share_in_flight(in_flight.clone());
    let (other, _) = counted_claiming(&kv, &clock, "node-b", handler.clone());
    let report = own.tick().await.unwrap();
    assert!(report.fired.is_empty(), "held: the filer is not done");
    assert_eq!(report.busy, 1);
    let report = other.tick().await.unwrap();
    assert!(report.fired.is_empty());
    assert_eq!(report.claimed_elsewhere, 1, "another host keeps away");

    held.release_claimed(START, START + 30_000, START);
    own_calls.take();
    let report = own.tick().await.unwrap();
    assert_eq!(report.fired.len(), 1);
    assert_eq!(report.fired[0].outcome, FireOutcome::Rescheduled);
    assert_eq!(
        own_calls.take(),
        (0, 1),
        "the page its host read while the timer was held, then the step's commit: no scan, \
         no re-read, no claim of its own"
    );
    assert_eq!(handler.fires.load(Ordering::SeqCst), 1);
}

/// A worker over `kv` reading due rows two to a page, with its KV calls
/// counted, firing `handlers` and sharing `in_flight`.
fn counted_paging_worker(
    kv: &Arc<dyn Kv>,
    clock: &Arc<FixedClock>,
    handlers: &[Arc<Handler>],
    in_flight: &InFlight,
) -> (Worker, Arc<Calls>) {
    let calls = Arc::new(Calls::default());
    let counted: Arc<dyn Kv> = Arc::new(Intercepted {
        inner: kv.clone(),
        hook: Counting(calls.clone()),
    });
    let mut worker = Worker::new(
        counted,
        clock.clone(),
        WorkerConfig {
            page: 2,
            ..WorkerConfig::default()
        },
    );
    for handler in handlers {
        worker.register(handler.clone());
    }
    worker.share_in_flight(in_flight.clone());
    (worker, calls)
}

#[tokio::test]
async fn a_tick_that_fired_from_the_first_page_reads_past_it_only_for_the_hosts_deep_pass_once_a_window()
 {
    let (kv, clock) = setup();
    // A capped kind's backlog of three pages, and a timer of an uncapped
    // kind due just behind it.
    schedule_due(&kv, "slow", &["a", "b", "c", "d", "e", "f"]).await;
    schedule(kv.as_ref(), "fast", b"y", START + 1)
        .await
        .unwrap();
    clock.set(START + 1);
    let handlers = [
        one_per_tick(2),
        Arc::new(Handler::new("fast", Mode::Count { steps: 1 })),
    ];
    let in_flight = InFlight::new();
    let (first, first_calls) = counted_paging_worker(&kv, &clock, &handlers, &in_flight);
    let (second, second_calls) = counted_paging_worker(&kv, &clock, &handlers, &in_flight);

    // The host's first deep pass: the first page fires `a`, and every
    // page after it is read, so `y` behind the backlog fires too.
    assert_eq!(
        fired_references(&first.tick().await.unwrap()),
        vec!["a", "y"]
    );
    assert_eq!(
        first_calls.take(),
        (6, 2),
        "four pages, the rows of a and y, their steps"
    );

    // Within the window another worker fires from the shared first page
    // and reads no further.
    assert_eq!(fired_references(&second.tick().await.unwrap()), vec!["b"]);
    assert_eq!(second_calls.take(), (1, 1), "b's row and its step: no page");

    // A window later, the next tick to fire from a first page makes the
    // next deep pass and finds a timer due behind the backlog since; a
    // tick before that leaves it.
    schedule(kv.as_ref(), "fast", b"z", START + 2)
        .await
        .unwrap();
    clock.set(START + carry::DEEP_PASS_MS);
    assert_eq!(
        fired_references(&second.tick().await.unwrap()),
        vec!["c"],
        "within the window"
    );
    clock.set(START + 1 + carry::DEEP_PASS_MS);
    assert_eq!(
        fired_references(&first.tick().await.unwrap()),
        vec!["d", "z"]
    );
}

#[tokio::test]
async fn a_tick_asks_for_the_deep_pass_by_the_clock_at_the_end_of_its_step() {
    let (kv, clock) = setup();
    schedule_due(&kv, "slow", &["a", "b", "c", "d", "e", "f"]).await;
    // Each step takes 800 ms: a loaded host's steps can.
    let handlers = [Arc::new(Handler {
        max_per_tick: Some(1),
        slow: Some((clock.clone(), 800)),
        ..Handler::new("slow", Mode::Count { steps: 2 })
    })];
    let in_flight = InFlight::new();
    let (worker, calls) = counted_paging_worker(&kv, &clock, &handlers, &in_flight);
    // Another loop of the host made a pass at START + 700, while this
    // tick, begun at START, was stepping `a`. Asked by the clock at its
    // start, the tick would read that pass as one from more than a window
    // ahead (a clock gone back) and make a pass of its own; asked by the
    // clock at the end of its step, it is within that pass's window.
    assert!(in_flight.deep_passes().begin(START + 700));
    clock.set(START);
    assert_eq!(fired_references(&worker.tick().await.unwrap()), vec!["a"]);
    assert_eq!(calls.take(), (2, 1), "the first page and a's row: no pass");
    // A window after that pass, the next tick makes one.
    clock.set(START + 1_300);
    assert_eq!(fired_references(&worker.tick().await.unwrap()), vec!["b"]);
    assert_eq!(
        calls.take(),
        (4, 1),
        "the first page (its shared copy too old), b's row and the two pages past it"
    );
}
