//! The timer worker loops: each fires whichever due timers no other loop
//! of this host is firing (one shared in-flight set, so a timer never
//! waits while a loop is free), under its own fence lease, until
//! shutdown. Hosts sharing one KV each run their
//! own loops; each step is claimed first, so two hosts rarely run the same
//! step, and its commit is guarded on the timer row, so they never both
//! commit it.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::futures::Notified;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use super::metrics::Metrics;
use super::probation::Probation;
use custodian_base::clock::Clock;
use custodian_core::fence::{Coordinator, Namespace, ShardId};
use custodian_core::timers::claim::ClaimConfig;
use custodian_core::timers::governor::Governor;
use custodian_core::timers::in_flight::InFlight;
use custodian_core::timers::{self, Handlers, TimerError, Worker, WorkerConfig};
use custodian_kv::Kv;
use custodian_runtime::policy::requests::FirstSteps;

/// Longest idle sleep between scans for due timers (see
/// [`timers::IDLE_POLL_MS`]).
const IDLE_POLL: Duration = Duration::from_millis(timers::IDLE_POLL_MS);

/// Pause after a tick failed (the KV unavailable, a corrupt timer row):
/// long enough not to spin on a persistent fault.
const ERROR_PAUSE: Duration = Duration::from_secs(1);

/// Pause after a tick was fenced off: long enough for a host behind the
/// shared plugin set to follow it (polled every second) without spinning
/// on steps that cannot commit, short enough that a fresh lease after a
/// swap costs little.
const FENCED_PAUSE: Duration = Duration::from_millis(250);

/// How the workers run.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    /// Worker loops: how many steps of different timers run at once.
    pub count: u32,
    /// Store calls one step may make.
    pub step_store_calls: u32,
    /// How long shutdown waits for a tick in flight before abandoning it.
    pub drain: Duration,
    /// This host's node name: its workers' fence shards and step claims
    /// are named after it, so hosts sharing a KV never renew each other's
    /// leases.
    pub node: String,
    /// How long a step claim keeps other hosts' workers away, when hosts
    /// share the KV; `None` for a host alone on its KV.
    pub claim: Option<Duration>,
    /// Least time between two steps of one timer, ms.
    pub min_step_interval_ms: u64,
}

/// The running workers.
pub struct Workers {
    handles: Vec<JoinHandle<()>>,
    /// What the host's filings need to hand their first steps to these
    /// workers.
    first_steps: FirstSteps,
    wake: Wake,
    stop: watch::Sender<bool>,
}

/// Wakes a host's idle worker loops when the API makes a timer due at
/// once (a filing, a hold, an extension, a withdrawal).
///
/// One timer made due wakes one loop, not all of them: a loop takes one
/// step of a timer at a time, so the others would only find it taken,
/// scan, and sleep again, two KV reads each for nothing (with 8 loops,
/// 14 reads a filing; `scale_out -- 60 3 workers=8`). A wake-up that
/// reaches a loop still in its tick, which then finds more to do and
/// does not sleep, passes on to the next waiting loop
/// ([`Notify::notify_one`]); and a loop that is in no sleep at all finds
/// the timer at its next scan anyway.
#[derive(Debug, Clone, Default)]
pub struct Wake(Arc<Notify>);

impl Wake {
    /// A timer was just made due now: wakes one idle loop.
    pub fn timer_due(&self) {
        self.0.notify_one();
    }

    /// A wake-up armed at once, so that one sent before the caller sleeps
    /// is not lost (see [`run`]).
    pub(crate) fn armed(&self) -> Pin<Box<Notified<'_>>> {
        let mut woken = Box::pin(self.0.notified());
        woken.as_mut().enable();
        woken
    }
}

/// What the workers share.
pub struct WorkerParts {
    /// The durable KV.
    pub kv: Arc<dyn Kv>,
    /// "Now".
    pub clock: Arc<dyn Clock>,
    /// The handlers by kind (swapped by the plugin set).
    pub handlers: Arc<Handlers>,
    /// The fence coordinator.
    pub coordinator: Arc<Coordinator>,
    /// Where fired steps are counted.
    pub metrics: Arc<Metrics>,
    /// The step ceilings and quarantines, shared by every worker loop.
    pub governor: Arc<Governor>,
    /// Where steps are counted against swapped plugins on probation.
    pub probation: Arc<Probation>,
}

impl Workers {
    /// Starts `settings.count` worker loops on the current runtime.
    pub fn start(parts: WorkerParts, settings: &WorkerSettings) -> Self {
        let wake = Wake::default();
        let (stop, stopped) = watch::channel(false);
        let count = settings.count.max(1);
        let in_flight = InFlight::new();
        // Claimed by the host: its loops share `in_flight`.
        let claim = settings.claim.map(|ttl| ClaimConfig {
            holder: settings.node.clone(),
            ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
        });
        let handles = (0..count)
            .map(|index| {
                let mut worker = Worker::sharing(
                    parts.kv.clone(),
                    parts.clock.clone(),
                    WorkerConfig {
                        step_store_calls: settings.step_store_calls,
                        min_step_interval_ms: settings.min_step_interval_ms,
                        ..WorkerConfig::default()
                    },
                    parts.handlers.clone(),
                );
                worker.govern(parts.governor.clone());
                worker.share_in_flight(in_flight.clone());
                let name = format!("{}.w{index}", settings.node);
                worker.fence(
                    parts.coordinator.clone(),
                    Namespace::new(timers::FENCE_NAMESPACE).expect("a valid name"),
                    // A node name is at most 32 bytes of the same alphabet.
                    ShardId::new(name).expect("a valid shard name"),
                );
                if let Some(claim) = &claim {
                    worker
                        .claim_steps(claim.clone())
                        .expect("a node name holder and a positive ttl are valid");
                }
                tokio::spawn(run(
                    worker,
                    Loop {
                        clock: parts.clock.clone(),
                        metrics: parts.metrics.clone(),
                        probation: parts.probation.clone(),
                        wake: wake.clone(),
                        stopped: stopped.clone(),
                        drain: settings.drain,
                    },
                ))
            })
            .collect();
        Self {
            handles,
            first_steps: FirstSteps { in_flight, claim },
            wake,
            stop,
        }
    }

    /// What the host's filings need to hand their first steps to these
    /// workers (see [`FirstSteps`]).
    pub fn first_steps(&self) -> FirstSteps {
        self.first_steps.clone()
    }

    /// A handle that wakes the workers, for the API.
    pub fn waker(&self) -> Wake {
        self.wake.clone()
    }

    /// Stops the workers: each finishes the tick in flight within the
    /// drain period or abandons it (an abandoned step commits nothing).
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for handle in self.handles {
            let _ = handle.await;
        }
    }
}

struct Loop {
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    probation: Arc<Probation>,
    wake: Wake,
    stopped: watch::Receiver<bool>,
    drain: Duration,
}

async fn run(worker: Worker, mut lp: Loop) {
    let wake = lp.wake.clone();
    loop {
        if *lp.stopped.borrow() {
            return;
        }
        // Armed before the tick, so that a wake-up sent while the tick
        // runs (a filing releasing its first step, a timer scheduled for
        // now) ends the sleep after it: one armed only at the sleep
        // missed it and slept the whole idle poll.
        let mut woken = wake.armed();
        let tick = worker.tick();
        tokio::pin!(tick);
        let result = tokio::select! {
            result = &mut tick => result,
            _ = lp.stopped.changed() => match tokio::time::timeout(lp.drain, &mut tick).await {
                Ok(result) => result,
                Err(_) => {
                    tracing::warn!(
                        "a timer step was still running after the drain period; abandoned \
                         (it commits nothing and fires again later)"
                    );
                    return;
                }
            },
        };
        let report = match result {
            Ok(report) => report,
            Err(error) => {
                tracing::error!("the timer tick failed: {:#}", anyhow::Error::new(error));
                pause(&mut lp.stopped, ERROR_PAUSE, woken.as_mut()).await;
                continue;
            }
        };
        let now = lp.clock.now_ms();
        for fired in &report.fired {
            lp.metrics.step(fired, now);
            if let Some(verdict) = lp.probation.observe(fired, now) {
                // A rollback swaps, which fences this very worker's steps:
                // it runs beside the loop, not inside its tick.
                let probation = lp.probation.clone();
                tokio::spawn(async move { probation.act(verdict).await });
            }
        }
        lp.metrics.containment(&report.quarantined, report.paused);
        // Fenced: a swap (here or on another host) moved the authority or
        // the shared plugin set on. A pause lets this host follow before
        // its next step, instead of running steps that cannot commit.
        if report.fenced {
            pause(&mut lp.stopped, FENCED_PAUSE, woken.as_mut()).await;
            continue;
        }
        if !report.fired.is_empty() || report.more_due {
            continue;
        }
        // Idle: sleep until the next timer is due, a wake-up, or the poll.
        let wait = match idle_wait(&worker, lp.clock.now_ms()).await {
            Ok(wait) if wait.is_zero() => continue,
            Ok(wait) => wait,
            Err(error) => {
                tracing::error!(
                    "cannot read the next due timer: {:#}",
                    anyhow::Error::new(error)
                );
                ERROR_PAUSE
            }
        };
        pause(&mut lp.stopped, wait, woken.as_mut()).await;
    }
}

/// How long a loop whose tick fired nothing sleeps at `now_ms`: until the
/// first timer due after it, or the first row the loop's own steps wrote
/// and it carries, whichever is sooner, at most [`IDLE_POLL`]; not at all
/// when that row is due already.
///
/// The carried rows count because the KV's rows due after `now_ms` may
/// miss one: a step rescheduled for the next millisecond is not due when
/// the tick after it looks, and due by the time the loop asks, and the
/// loop slept the whole idle poll past it. A lone takedown of 1,000
/// objects lost 150–180 ms to each of two such rows (`takedown_scale --
/// serve 1000 0`). Rows of other hosts' timers that fall due the same way
/// are left to the poll, as before: their holder steps them, and
/// reading their claims at once cost a tenth of a read per step
/// (`scale_out -- 60 3 workers=8`).
async fn idle_wait(worker: &Worker, now_ms: u64) -> Result<Duration, TimerError> {
    let stored = worker.next_due_after(now_ms).await?;
    let next = stored.into_iter().chain(worker.next_written_due()).min();
    Ok(next.map_or(IDLE_POLL, |due| {
        Duration::from_millis(due.saturating_sub(now_ms)).min(IDLE_POLL)
    }))
}

/// Sleeps for `wait`, until `woken` (armed before the tick that led
/// here), or until shutdown.
async fn pause(stopped: &mut watch::Receiver<bool>, wait: Duration, woken: Pin<&mut Notified<'_>>) {
    tokio::select! {
        () = tokio::time::sleep(wait) => {}
        () = woken => {}
        _ = stopped.changed() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use custodian_base::clock::FixedClock;
    use custodian_kv::memory::MemoryKv;

    /// Reschedules its timer at once at every step: a timer with work.
    struct AtOnce;

    /// A worker over a fresh KV holding one timer, of kind `kind` and
    /// `reference`, due at `due_ms`; and its clock, at 1 000.
    async fn one_timer(reference: &[u8], due_ms: u64) -> (Worker, Arc<FixedClock>) {
        let clock = Arc::new(FixedClock::new(1_000));
        let kv: Arc<dyn Kv> = Arc::new(MemoryKv::new(clock.clone()));
        timers::schedule(kv.as_ref(), "kind", reference, due_ms)
            .await
            .unwrap();
        (
            Worker::new(kv, clock.clone(), WorkerConfig::default()),
            clock,
        )
    }

    #[async_trait::async_trait]
    impl timers::TimerHandler for AtOnce {
        fn kind(&self) -> &str {
            "kind"
        }

        fn actor(&self) -> String {
            "test:kind".into()
        }

        async fn fire(
            &self,
            _: &timers::DueTimer,
            now_ms: u64,
            _: &custodian_core::budget::SliceBudget,
        ) -> Result<timers::Fired, timers::StepFailure> {
            Ok(timers::Fired::Reschedule {
                due_ms: now_ms,
                commit: timers::StepCommit::default(),
            })
        }
    }

    #[tokio::test]
    async fn an_idle_loop_wakes_for_the_row_its_own_step_rescheduled_for_the_next_millisecond() {
        let (worker, clock) = one_timer(b"busy", 1_000).await;
        worker.register(Arc::new(AtOnce));
        // The step at 1 000 is rescheduled for 1 001, the least interval.
        assert_eq!(worker.tick().await.unwrap().fired.len(), 1);
        // The next tick, still at 1 000, finds nothing due and carries it.
        assert!(worker.tick().await.unwrap().fired.is_empty());
        assert_eq!(worker.next_written_due(), Some(1_001));
        assert_eq!(
            idle_wait(&worker, 1_000).await.unwrap(),
            Duration::from_millis(1)
        );
        // By the time the loop asks, the row is due: no sleep at all,
        // where the KV's rows due after 1 001 no longer include it.
        clock.set(1_001);
        assert_eq!(idle_wait(&worker, 1_001).await.unwrap(), Duration::ZERO);
        assert_eq!(worker.tick().await.unwrap().fired.len(), 1);
    }

    #[tokio::test]
    async fn an_idle_loop_sleeps_until_the_first_timer_due_after_now() {
        let (worker, _) = one_timer(b"later", 1_040).await;
        assert_eq!(
            idle_wait(&worker, 1_002).await.unwrap(),
            Duration::from_millis(38)
        );
        // Nothing due after now: the idle poll.
        assert_eq!(idle_wait(&worker, 1_040).await.unwrap(), IDLE_POLL);
    }

    #[tokio::test]
    async fn an_idle_loop_sleeps_at_most_the_idle_poll_before_a_far_timer() {
        let (worker, _) = one_timer(b"far", 3_600_000).await;
        assert_eq!(idle_wait(&worker, 1_000).await.unwrap(), IDLE_POLL);
    }

    /// Whether a sleep of ten minutes on `woken` ends within ten seconds.
    async fn ends_at_once(
        stopped: &mut watch::Receiver<bool>,
        woken: Pin<&mut Notified<'_>>,
    ) -> bool {
        tokio::time::timeout(
            Duration::from_secs(10),
            pause(stopped, Duration::from_secs(600), woken),
        )
        .await
        .is_ok()
    }

    /// Whether a sleep of 50 ms on `woken` lasts all of it.
    async fn sleeps_the_whole_wait(
        stopped: &mut watch::Receiver<bool>,
        woken: Pin<&mut Notified<'_>>,
    ) -> bool {
        let started = std::time::Instant::now();
        pause(stopped, Duration::from_millis(50), woken).await;
        started.elapsed() >= Duration::from_millis(50)
    }

    #[tokio::test]
    async fn a_wake_up_sent_while_a_tick_runs_ends_the_sleep_after_it_at_once() {
        let wake = Wake::default();
        let (_stop, mut stopped) = watch::channel(false);
        let mut woken = wake.armed();
        // Sent while the loop is still in its tick, before it sleeps.
        wake.timer_due();
        assert!(
            ends_at_once(&mut stopped, woken.as_mut()).await,
            "the wake-up was lost: slept the whole wait"
        );
    }

    #[tokio::test]
    async fn an_idle_loop_sleeps_its_wait_without_a_wake_up_and_stops_at_shutdown() {
        let wake = Wake::default();
        let (stop, mut stopped) = watch::channel(false);
        let mut woken = wake.armed();
        assert!(sleeps_the_whole_wait(&mut stopped, woken.as_mut()).await);
        stop.send(true).unwrap();
        assert!(
            ends_at_once(&mut stopped, woken.as_mut()).await,
            "shutdown ends the sleep"
        );
    }

    #[tokio::test]
    async fn a_timer_made_due_wakes_one_loop_and_a_loop_that_does_not_sleep_passes_it_on() {
        let wake = Wake::default();
        let (_stop, mut stopped) = watch::channel(false);
        // Armed in this order: the first still ticks when the wake-up
        // comes, finds more to do and arms again without sleeping.
        let busy = wake.armed();
        let mut idle = wake.armed();
        let mut other = wake.armed();
        wake.timer_due();
        drop(busy);
        assert!(
            ends_at_once(&mut stopped, idle.as_mut()).await,
            "the wake-up was not passed on"
        );
        assert!(
            sleeps_the_whole_wait(&mut stopped, other.as_mut()).await,
            "one timer woke a second loop"
        );
    }
}
