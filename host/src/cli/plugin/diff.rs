//! `custodian plugin diff`: what swapping a plugin in would change, found
//! offline on a data directory (see `custodian_runtime::plugin_set`'s
//! dry run). Nothing is written. A progress bar shows on stderr when it
//! is a terminal.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, anyhow};
use clap::Args;
use custodian::clock::{Clock, FixedClock, SystemClock};
use custodian::plugin_set::{DryRun, MAX_DRY_RUN_ITEMS, PlanReplay, Progress, Replay};
use custodian::purge::plan::Plan;
use custodian::runtime::World;

use super::signing;
use crate::cli::assembly::{self, Request};
use crate::cli::options::{DataArgs, Global};
use crate::cli::{Failure, Outcome};

/// `custodian plugin diff`'s arguments.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The world whose plugin would be replaced.
    #[arg(long)]
    pub world: World,
    /// The candidate `.wasm` file.
    pub plugin: PathBuf,
    /// Its signature [default: PLUGIN.sig, when it exists]; checked as a
    /// swap checks it, against `[plugins] trusted_keys`.
    #[arg(long, value_name = "FILE")]
    pub signature: Option<PathBuf>,
    /// Items of the state replayed at most.
    #[arg(long, default_value_t = 1_000, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_DRY_RUN_ITEMS)))]
    pub limit: u32,
    /// The retention settings the retention world is replayed with
    /// [default: `[retention]` of --config].
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub retention_ms: Option<u64>,
    /// How long a version is kept after it stopped being current
    /// [default: `[retention]` of --config].
    #[arg(long, value_name = "MS")]
    pub noncurrent_retention_ms: Option<u64>,
    /// For the retention world: a purge plan (as `custodian purge delete`
    /// takes it) whose versions are replayed too: whether each may be
    /// deleted. Needs --store.
    #[arg(long, value_name = "FILE", requires = "store")]
    pub plan: Option<PathBuf>,
    /// The store the plan is for: `serving`, `preserved` or a store of
    /// --config.
    #[arg(long, value_name = "NAME", requires = "plan")]
    pub store: Option<String>,
    /// "Now" for the replay, ms since the epoch [default: now].
    #[arg(long, value_name = "MS")]
    pub now: Option<u64>,
    #[command(flatten)]
    pub data: DataArgs,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

pub(super) fn run(global: &Global, args: &DiffArgs) -> Outcome {
    let bytes = std::fs::read(&args.plugin)
        .with_context(|| format!("cannot read {}", args.plugin.display()))
        .map_err(Failure::Usage)?;
    let signature = signing::signature_for(&args.plugin, args.signature.as_deref())?;
    let plan = match (&args.plan, &args.store) {
        (Some(file), Some(store)) => {
            if args.world != World::Retention {
                return Err(Failure::Usage(anyhow!(
                    "--plan replays retention decisions: it needs --world retention"
                )));
            }
            let plan = Plan::read(file)
                .with_context(|| format!("cannot use {} as a purge plan", file.display()))
                .map_err(Failure::Usage)?;
            Some(PlanReplay {
                store: store.clone(),
                plan: Arc::new(plan),
            })
        }
        _ => None,
    };
    let clock: Arc<dyn Clock> = match args.now {
        Some(now) => Arc::new(FixedClock::new(now)),
        None => Arc::new(SystemClock),
    };
    let opened = assembly::open(
        global,
        &args.data,
        clock,
        Request {
            retention: None,
            takedown: None,
            changes: false,
        },
        |plan| {
            if let Some(ms) = args.retention_ms {
                plan.retention.retention_ms = ms;
            }
            if let Some(ms) = args.noncurrent_retention_ms {
                plan.retention.noncurrent_retention_ms = ms;
            }
        },
    )?;
    let source = args.plugin.display().to_string();
    let bar =
        crate::cli::progress_bar("{spinner} replaying [{bar:40}] {pos}/{len} items {elapsed}");
    let progress = bar.clone().map(|bar| -> Progress {
        Arc::new(move |done, of| {
            bar.set_length(u64::from(of));
            bar.set_position(u64::from(done));
        })
    });
    let report = opened.io.block_on(opened.assembly.plugins.dry_run(
        args.world,
        bytes,
        source,
        signature,
        Replay {
            limit: args.limit,
            progress,
            plan,
        },
    ));
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let report = report.map_err(|e| Failure::Failed(anyhow!(e)))?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("a report serializes")
        );
    } else {
        print_report(&report);
    }
    Ok(())
}

fn print_report(report: &DryRun) {
    println!(
        "{} world: {} → {}",
        report.world,
        &report.serving[..16],
        &report.candidate[..16]
    );
    println!("replayed: {}", report.replayed);
    for change in &report.changed {
        println!("changed  {}", change.item);
        println!("         before: {}", change.before);
        println!("         after:  {}", change.after);
        for difference in &change.differences {
            println!("         - {difference}");
        }
    }
    println!(
        "{} items: {} unchanged, {} changed",
        report.items,
        report.unchanged,
        report.changed.len()
    );
}
