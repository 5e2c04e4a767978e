//! One step: load, run the phase, and return the commit.
//!
//! Every step is one bounded checkpoint transition: its effects are the
//! returned commit (the new state guarded on the old one, plus the phase's
//! writes and audit entries), except piece intents, which are committed on
//! their own before their bytes are written (see [`crate::copy`]).

use custodian_sdk::Error;
use custodian_sdk::steps::{StepResult, Timer};

use crate::context;
use crate::state::Phase;
use crate::{acquire, closure, discover, purge, seed};

/// `step`: see `wit/takedown.wit`.
pub fn run(timer: &Timer) -> Result<StepResult, Error> {
    let mut step = context::load(timer)?;
    if !purge::start(&mut step)? {
        match step.state.phase {
            Phase::Seed => seed::run(&mut step)?,
            // Nothing is acquired or verified after a purge: its bytes
            // would only be deleted again.
            Phase::Acquire | Phase::Closure if step.state.purged => {
                step.state.phase = Phase::Discover;
            }
            Phase::Acquire => acquire::run(&mut step)?,
            Phase::Closure => closure::run(&mut step)?,
            Phase::Discover => discover::run(&mut step)?,
            Phase::Purging => purge::run(&mut step)?,
            Phase::Retain | Phase::Purged => {}
        }
    }
    context::finish(step)
}
