//! `custodian timer …`: list, schedule and cancel durable timers.

use std::sync::Arc;

use anyhow::anyhow;
use clap::Subcommand;
use custodian::clock::{Clock, SystemClock};
use custodian::timers::{self, TimerError, display_reference, governor, parse_reference};
use serde_json::json;

use super::options::DataArgs;
use super::{Failure, Outcome, io_runtime, open_data};

#[derive(Debug, Subcommand)]
pub enum TimerCommand {
    /// List timers in due order, with their step count and last error.
    List {
        #[command(flatten)]
        data: DataArgs,
        /// Print JSON (one object a line).
        #[arg(long)]
        json: bool,
    },
    /// Schedule (or move) the timer KIND/REFERENCE.
    Schedule {
        #[command(flatten)]
        data: DataArgs,
        /// The timer's kind: the world whose plugin runs it (e.g.
        /// `takedown`).
        kind: String,
        /// What it is about: text, or `0x` and hex for bytes (so text that
        /// itself starts with `0x` must be given in hex).
        reference: String,
        /// When it is due, ms since the epoch [default: now].
        #[arg(long, value_name = "MS")]
        due: Option<u64>,
    },
    /// List the plugins quarantined for passing a step ceiling (`[timers]`
    /// in the configuration): their kind's timers are paused.
    Quarantined {
        #[command(flatten)]
        data: DataArgs,
        /// Print JSON (one object a line).
        #[arg(long)]
        json: bool,
    },
    /// Let the quarantined plugin of timer kind KIND run again (audited as
    /// `plugin/release`); exit 1 if none is quarantined. Swapping the
    /// plugin lifts a quarantine too.
    Release {
        #[command(flatten)]
        data: DataArgs,
        /// The timer kind (e.g. `takedown`).
        kind: String,
        /// Who is acting, for the audit log.
        #[arg(long, env = "USER", default_value = "unknown", value_name = "NAME")]
        operator: String,
    },
    /// Cancel the timer KIND/REFERENCE; exit 1 if there is none.
    Cancel {
        #[command(flatten)]
        data: DataArgs,
        /// The timer's kind.
        kind: String,
        /// Its reference: text, or `0x` and hex.
        reference: String,
    },
}

/// Timers read per page when listing.
const PAGE: u32 = 500;

/// A timer error fails the command by its kind: a kind or reference the
/// user gave that is out of bounds is bad usage.
fn timer_error(error: TimerError) -> Failure {
    Failure::of_kind(error.kind(), error.into())
}

pub(super) fn run(command: TimerCommand) -> Outcome {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let io = io_runtime()?;
    match command {
        TimerCommand::List { data, json } => {
            let kv = open_data(&data, clock)?;
            io.block_on(async {
                let mut cursor: Option<Vec<u8>> = None;
                loop {
                    let (page, next) = timers::list(kv.as_ref(), cursor.as_deref(), PAGE)
                        .await
                        .map_err(timer_error)?;
                    for timer in page {
                        let reference = display_reference(&timer.reference);
                        if json {
                            println!("{}", json!(timers::TimerSummary::from(&timer)));
                        } else {
                            let error = timer
                                .state
                                .last_error
                                .map(|e| format!("  failed {}x: {e}", timer.state.failures))
                                .unwrap_or_default();
                            println!(
                                "{}  {}/{reference}  steps {}{error}",
                                timer.due_ms, timer.kind, timer.state.steps
                            );
                        }
                    }
                    match next {
                        Some(next) => cursor = Some(next),
                        None => return Ok(()),
                    }
                }
            })
        }
        TimerCommand::Schedule {
            data,
            kind,
            reference,
            due,
        } => {
            let due = due.unwrap_or_else(|| clock.now_ms());
            let reference = parse_reference(&reference);
            timers::validate(&kind, &reference).map_err(timer_error)?;
            let kv = open_data(&data, clock)?;
            io.block_on(timers::schedule(kv.as_ref(), &kind, &reference, due))
                .map_err(timer_error)?;
            println!("{kind}/{} due at {due}", display_reference(&reference));
            Ok(())
        }
        TimerCommand::Quarantined { data, json } => {
            let kv = open_data(&data, clock)?;
            let rows = io
                .block_on(governor::quarantined(kv.as_ref()))
                .map_err(timer_error)?;
            for q in rows {
                if json {
                    println!("{}", json!(q));
                } else {
                    println!("{}  {}  {}  {}", q.at_ms, q.kind, q.actor, q.reason);
                }
            }
            Ok(())
        }
        TimerCommand::Release {
            data,
            kind,
            operator,
        } => {
            let now = clock.now_ms();
            let kv = open_data(&data, clock)?;
            let actor = format!("operator:{operator}");
            let released = io
                .block_on(governor::release(kv.as_ref(), &kind, &actor, now))
                .map_err(timer_error)?;
            if released {
                println!("released the plugin of timer kind {kind}");
                Ok(())
            } else {
                Err(Failure::Failed(anyhow!(
                    "no plugin of timer kind {kind:?} is quarantined"
                )))
            }
        }
        TimerCommand::Cancel {
            data,
            kind,
            reference,
        } => {
            let reference = parse_reference(&reference);
            timers::validate(&kind, &reference).map_err(timer_error)?;
            let kv = open_data(&data, clock)?;
            let removed = io
                .block_on(timers::cancel(kv.as_ref(), &kind, &reference))
                .map_err(timer_error)?;
            if removed {
                Ok(())
            } else {
                Err(Failure::Failed(anyhow!(
                    "there is no timer {kind}/{}",
                    display_reference(&reference)
                )))
            }
        }
    }
}
