//! One step: load, run the phase, and return the commit.
//!
//! Every step is one bounded checkpoint transition: its effects are the
//! returned commit (the new state guarded on the old one, plus the phase's
//! writes and audit entries), except piece intents and removal intents,
//! which are committed on their own before bytes are written or deleted
//! (see [`crate::copy`] and [`crate::remove`]). A request whose denial is
//! not settled (activation, or lifting after a withdrawal) gets a chunk of
//! denial work instead ([`crate::denial_work`]). A request filed before
//! locks existed gets its lock in a step of its own ([`crate::lock`]). In
//! the remove phase, pending removals are finished first, before even a
//! purge may start.

use custodian_sdk::Error;
use custodian_sdk::steps::{StepResult, Timer};

use crate::context;
use crate::state::Phase;
use crate::{acquire, closure, denial_work, discover, purge, remove, seed};

/// `step`: see `sdk/wit/takedown.wit`.
pub fn run(timer: &Timer) -> Result<StepResult, Error> {
    let read = context::read(timer)?;
    if !read.denial.state.settled {
        // Denial first: nothing is preserved (or purged) before the
        // content stops being served, or while a withdrawal is lifted.
        return denial_work::step(&read.id, &read.request, &read.denial, timer);
    }
    let mut step = context::load(timer, read)?;
    // A request without a lock (filed before locks) gets one from this
    // step's commit, and nothing else: no piece is locked to it, nor a
    // purge begun, before its lock is there.
    let locking = step.lock.missing() && !step.state.purge_begun();
    let finished =
        !locking && step.state.phase == Phase::Remove && remove::finish_pending(&mut step)?;
    if !locking && !purge::start(&mut step)? && !finished {
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
            Phase::Remove => remove::run(&mut step)?,
            Phase::Purging => purge::run(&mut step)?,
            Phase::Retain | Phase::Purged => {}
        }
    }
    context::finish(step)
}
