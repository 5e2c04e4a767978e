//! `custodian tick`: fire due timers once (or until idle), cron-style.

use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use clap::Args;
use custodian::clock::{Clock, FixedClock, SystemClock};
use custodian::fence::{Namespace, ShardId};
use custodian::runtime::{Limits, World};
use custodian::timers::{self, FireOutcome, FiredTimer, TickReport, Worker, WorkerConfig};
use serde_json::json;

use super::assembly;
use super::options::{DataArgs, Global, RetentionArgs};
use super::plugin_spec::source;
use super::{Failure, Outcome, node_failure};

#[derive(Debug, Args)]
pub struct TickArgs {
    #[command(flatten)]
    pub data: DataArgs,
    /// A policy plugin that handles timers: a `.wasm` file or
    /// `builtin:WORLD` (repeatable) [default: the takedown plugin the data
    /// directory's shared plugin set names, else builtin:takedown]. A
    /// takedown plugin the set does not name is refused.
    #[arg(long = "plugin", value_name = "PATH")]
    pub plugins: Vec<String>,
    /// Keep ticking until nothing is due (at most --max-ticks ticks).
    #[arg(long)]
    pub until_idle: bool,
    /// Most ticks with --until-idle.
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    pub max_ticks: u32,
    /// Pretend it is this time (ms since the epoch) for due times, steps
    /// and deadlines: for tests, demos and replaying a schedule.
    #[arg(long, value_name = "MS")]
    pub now: Option<u64>,
    /// Store calls one step may make before it is stopped with
    /// budget-exhausted (and commits nothing).
    #[arg(long, default_value_t = 256, value_name = "N")]
    pub step_calls: u32,
    /// Wall-clock limit of one step.
    #[arg(long, default_value_t = 2000, value_name = "MS")]
    pub timeout_ms: u64,
    /// Memory limit of one step.
    #[arg(long, default_value_t = 64, value_name = "MIB")]
    pub memory_mib: usize,
    /// Jump the --now clock to each next due timer until MS (see above).
    #[arg(long, value_name = "MS", requires = "now")]
    pub fast_forward_to: Option<u64>,
    #[command(flatten)]
    pub retention: RetentionArgs,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

fn usage(error: impl Into<anyhow::Error>) -> Failure {
    Failure::Usage(error.into())
}

/// The takedown plugin `specs` name, if any: the last, since one plugin
/// handles a kind of timer.
///
/// # Errors
/// A plugin of a world without timer steps.
fn takedown_source(specs: &[String]) -> Result<Option<custodian::plugin_set::Source>, Failure> {
    let mut named = None;
    for spec in specs {
        if let Some(world) = spec
            .strip_prefix("builtin:")
            .and_then(|name| name.parse::<World>().ok())
            .filter(|world| *world != World::Takedown)
        {
            return Err(usage(anyhow!(
                "{spec} implements the {world} world, which has no timer steps; \
                 only takedown-world plugins handle timers"
            )));
        }
        named = Some(source(spec, World::Takedown)?);
    }
    Ok(named)
}

pub(super) fn run(global: &Global, args: &TickArgs) -> Outcome {
    let timeout = Duration::from_millis(args.timeout_ms);
    let memory_bytes = args.memory_mib.saturating_mul(1 << 20);
    let limits = Limits {
        timeout,
        memory_bytes,
        ..Limits::default()
    };
    limits.validate().map_err(|e| usage(anyhow!(e)))?;
    if args.step_calls == 0 {
        return Err(usage(anyhow!("--step-calls must be at least 1")));
    }
    let fixed = args.now.map(|now| Arc::new(FixedClock::new(now)));
    let clock: Arc<dyn Clock> = match &fixed {
        Some(fixed) => fixed.clone(),
        None => Arc::new(SystemClock),
    };
    let request = assembly::Request {
        retention: Some(&args.retention),
        takedown: takedown_source(&args.plugins)?,
        changes: true,
    };
    // The step limits on the command line replace the configured ones.
    let opened = assembly::open(global, &args.data, clock.clone(), request, |plan| {
        if let Some(takedown) = plan.settings.get_mut(&World::Takedown) {
            takedown.limits.timeout = timeout;
            takedown.limits.memory_bytes = memory_bytes;
        }
    })?;
    let kv = opened.assembly.kv.clone();
    let mut worker = Worker::sharing(
        kv.clone(),
        clock,
        WorkerConfig {
            step_store_calls: args.step_calls,
            ..WorkerConfig::default()
        },
        opened.assembly.handlers.clone(),
    );
    // One process at a time holds a data directory, so every `tick` run
    // on it is the same shard, named after the node (hosts sharing an etcd
    // KV each have their own): the lease row is renewed, never multiplied.
    let node = opened.node.name().map_err(node_failure)?;
    worker.fence(
        opened.assembly.coordinator.clone(),
        Namespace::new(timers::FENCE_NAMESPACE).expect("a valid name"),
        // The shard's name is the host's own: a refused one is not bad
        // usage.
        ShardId::new(format!("{node}.tick"))
            .map_err(|e| Failure::of_kind(e.kind().host_built(), e.into()))?,
    );

    // Text goes out tick by tick, so a long run shows its progress; JSON is
    // one object at the end.
    let mut summary = Summary::default();
    let mut on_tick = |report: &TickReport| {
        if !args.json {
            print_lines(report);
        }
        summary.add(report);
    };
    opened
        .io
        .block_on(async {
            let Some(limit) = args.fast_forward_to else {
                return if args.until_idle {
                    worker
                        .run_until_idle(args.max_ticks.max(1), &mut on_tick)
                        .await
                        .map(drop)
                } else {
                    worker.tick().await.map(|report| on_tick(&report))
                };
            };
            let fixed = fixed
                .as_ref()
                .expect("clap requires --now with --fast-forward-to");
            let mut ticks = 0;
            while ticks < args.max_ticks.max(1) {
                ticks += worker
                    .run_until_idle(args.max_ticks.max(1) - ticks, &mut on_tick)
                    .await?;
                let now = fixed.now_ms();
                match timers::next_due_after(kv.as_ref(), now).await? {
                    Some(due) if due <= limit => fixed.set(due),
                    _ => break,
                }
            }
            Ok(())
        })
        .map_err(|e| Failure::Failed(anyhow!(e).context("the tick stopped")))?;
    summary.print(args.json);
    let failed = summary
        .fired
        .iter()
        .filter(|f| f.outcome == FireOutcome::Failed)
        .count();
    if failed > 0 {
        return Err(Failure::Failed(anyhow!(
            "{failed} step(s) failed; they will be retried (see `custodian timer list`)"
        )));
    }
    Ok(())
}

/// What a run of ticks did, for the final report.
#[derive(Default)]
struct Summary {
    ticks: u32,
    fired: Vec<FiredTimer>,
    more_due: bool,
    unhandled: u64,
    fenced: bool,
}

impl Summary {
    fn add(&mut self, report: &TickReport) {
        self.ticks += 1;
        self.fired.extend(report.fired.iter().cloned());
        self.more_due = report.more_due;
        self.unhandled = report.unhandled;
        self.fenced |= report.fenced;
    }

    fn print(&self, as_json: bool) {
        if as_json {
            let output = json!({
                "ticks": self.ticks,
                "fired": self.fired,
                "more_due": self.more_due,
                "unhandled": self.unhandled,
                "fenced": self.fenced,
            });
            println!("{output}");
            return;
        }
        let mut summary = format!(
            "{} timer(s) fired in {} tick(s)",
            self.fired.len(),
            self.ticks
        );
        if self.more_due {
            summary.push_str("; more are due");
        }
        if self.unhandled > 0 {
            summary.push_str(&format!(
                "; {} due timer(s) have no plugin for their kind",
                self.unhandled
            ));
        }
        if self.fenced {
            summary.push_str("; stopped: this worker's fence was revoked");
        }
        eprintln!("{summary}");
    }
}

/// One line per fired timer.
fn print_lines(report: &TickReport) {
    for f in &report.fired {
        let outcome = serde_json::to_value(f.outcome).expect("outcomes serialize");
        let outcome = outcome.as_str().unwrap_or("?");
        let tail = match (&f.error, f.next_due_ms) {
            (Some(error), Some(next)) => format!("retry at {next}: {error}"),
            (Some(error), None) => error.clone(),
            (None, Some(next)) => format!("next at {next}"),
            (None, None) => String::new(),
        };
        println!(
            "{outcome:<12} {}/{}  step {}  {tail}",
            f.kind, f.reference, f.step
        );
    }
}
