//! `custodian plugin diff`: what swapping a plugin in would change, found
//! offline on a data directory (see `custodian_runtime::plugin_set`'s
//! dry run). Nothing is written.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, anyhow};
use clap::Args;
use custodian::clock::SystemClock;
use custodian::plugin_set::{DryRun, MAX_DRY_RUN_ITEMS};
use custodian::runtime::World;

use super::signing;
use crate::cli::assembly::{self, Request};
use crate::cli::options::{DataArgs, Global, RetentionArgs};
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
    // The retention settings do not matter to a replay, which asks no
    // retention question of its own; the defaults stand in.
    let retention = RetentionArgs {
        retention_plugin: None,
        retention_ms: 30 * 24 * 3_600_000,
        noncurrent_retention_ms: 0,
    };
    let opened = assembly::open(
        global,
        &args.data,
        Arc::new(SystemClock),
        Request {
            retention: &retention,
            takedown: None,
            changes: false,
        },
        |_| {},
    )?;
    let source = args.plugin.display().to_string();
    let report = opened
        .io
        .block_on(
            opened
                .assembly
                .plugins
                .dry_run(args.world, bytes, source, signature, args.limit),
        )
        .map_err(|e| Failure::Failed(anyhow!(e)))?;
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
