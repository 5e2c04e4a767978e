//! `custodian timer …`: list, schedule and cancel durable timers.

use std::sync::Arc;

use anyhow::anyhow;
use custodian::clock::{Clock, SystemClock};
use custodian::timers::{self, TimerError, display_reference, parse_reference};
use serde_json::json;

use super::args::TimerCommand;
use super::{Failure, Outcome, io_runtime, open_data};

/// Timers read per page when listing.
const PAGE: u32 = 500;

fn timer_error(error: TimerError) -> Failure {
    match error {
        TimerError::InvalidArgument(_) => Failure::Usage(error.into()),
        other => Failure::Failed(other.into()),
    }
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
