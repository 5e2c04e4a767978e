//! What a swap would change, found before it is made: the candidate is
//! proven as a swap proves it (signature, load, world, smoke call), then
//! the deployment's own state is replayed through the serving plugin and
//! the candidate, read-only, and every decision that differs is reported
//! (`custodian plugin diff`, `PUT /v1/plugins/{world}?dry_run=true`).
//! Nothing is written, published or swapped.
//!
//! What is replayed, by world, at most the limit of items:
//! - **takedown** ([`timers`]): the next step of each takedown timer due
//!   next, planned by each plugin under read-only grants (computed, never
//!   committed): whether it reschedules or is done, when, and its exact
//!   writes and audit entries.
//! - **retention** ([`retention`]): every takedown request in retain (its
//!   lock not yet purging), assessed by each plugin as a filing assesses
//!   it, with the deployer's settings: when it may be purged; and, given a
//!   purge plan, every version a run of it would ask retention about:
//!   whether it may be deleted.
//! - **access** ([`access`]): the most recent distinct access requests the
//!   decision log kept (every denial, and the sampled allows), decided by
//!   each plugin.
//! - purge and archive: nothing of the state; the report says so, and the
//!   candidate is only proven.

mod access;
mod retention;
mod timers;

use std::sync::Arc;

use serde::Serialize;

use super::{PluginSet, Policy, SwapError, World};
use crate::signature::Signature;

/// Most items one dry run replays: each is two plugin calls, and the
/// report lists each change, so a dry run stays within seconds and a
/// report within a screenful of pages.
pub const MAX_DRY_RUN_ITEMS: u32 = 10_000;

/// Differences listed per changed item, beyond which only the count is
/// given: a plan that rewrites a thousand rows is one change.
const MAX_DIFFERENCES: usize = 8;

/// Told how far a dry run has got: items replayed so far, of how many
/// (known once the state is read).
pub type Progress = Arc<dyn Fn(u32, u32) + Send + Sync>;

/// A purge plan whose versions a retention dry run replays.
#[derive(Clone)]
pub struct PlanReplay {
    /// The store the plan is for, by its name in the deployment.
    pub store: String,
    /// The plan.
    pub plan: Arc<custodian_core::purge::plan::Plan>,
}

/// What a dry run replays, and who hears of its progress.
#[derive(Clone)]
pub struct Replay {
    /// Items of the state replayed at most (capped at
    /// [`MAX_DRY_RUN_ITEMS`]).
    pub limit: u32,
    /// Told after each item.
    pub progress: Option<Progress>,
    /// For the retention world: a purge plan whose versions are replayed
    /// too.
    pub plan: Option<PlanReplay>,
}

impl Replay {
    /// Up to `limit` items, progress unreported.
    pub fn quietly(limit: u32) -> Self {
        Self {
            limit,
            progress: None,
            plan: None,
        }
    }

    fn limit(&self) -> u32 {
        self.limit.min(MAX_DRY_RUN_ITEMS)
    }

    fn tell(&self, done: usize, of: usize) {
        if let Some(progress) = &self.progress {
            let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
            progress(count(done), count(of));
        }
    }
}

/// A dry run's findings.
#[derive(Debug, Clone, Serialize)]
pub struct DryRun {
    /// The world.
    pub world: World,
    /// The serving plugin's hash.
    pub serving: String,
    /// The candidate's hash.
    pub candidate: String,
    /// What was replayed, or why nothing was.
    pub replayed: String,
    /// Items replayed.
    pub items: u32,
    /// Of those, the ones both plugins decide alike.
    pub unchanged: u32,
    /// The ones they decide differently.
    pub changed: Vec<Change>,
}

/// One item the candidate decides differently.
#[derive(Debug, Clone, Serialize)]
pub struct Change {
    /// The item: `timer KIND REFERENCE`, `request ID`, `access PRINCIPAL
    /// ACTION TARGET`.
    pub item: String,
    /// The serving plugin's decision, in brief.
    pub before: String,
    /// The candidate's.
    pub after: String,
    /// Where the two differ: the first eight, then how many more.
    pub differences: Vec<String>,
}

/// One item as both plugins decided it: what a replay of any world
/// yields.
struct Compared {
    item: String,
    before: String,
    after: String,
    /// Empty when the two decide alike.
    differences: Vec<String>,
}

impl PluginSet {
    /// Proves `bytes` as a plugin of `world` (signed by `signature`, if at
    /// all) and replays up to `replay.limit` items of the state through
    /// the serving plugin and it (see the module documentation). Changes
    /// nothing.
    ///
    /// # Errors
    /// [`SwapError::Refused`] when the candidate would be refused (the
    /// reason), or the state cannot be read.
    pub async fn dry_run(
        &self,
        world: World,
        bytes: Vec<u8>,
        source: String,
        signature: Option<Signature>,
        replay: Replay,
    ) -> Result<DryRun, SwapError> {
        let candidate = self.prover().prove(world, bytes, source, signature).await?;
        let serving = self.current(world);
        let (replayed, compared) = match (&serving.policy, &candidate.policy) {
            (Policy::Takedown(before), Policy::Takedown(after)) => (
                "takedown timers due next: each one's next step, planned read-only by both \
                 plugins"
                    .to_owned(),
                self.replay_timers(before.clone(), after.clone(), &replay)
                    .await?,
            ),
            (Policy::Retention(before), Policy::Retention(after)) => (
                format!(
                    "takedown requests in retain: when each may be purged, as each plugin \
                     assesses it with the configured settings ({}); a request keeps the \
                     retain-until it was filed with (or an operator extended it to), so a \
                     swap changes it for requests filed after the swap{}",
                    retention::describe(self.retention.settings),
                    replay.plan.as_ref().map_or(String::new(), |p| format!(
                        "; then the versions of {} a run of the purge plan would ask \
                         retention about: when each may be deleted",
                        p.store
                    ))
                ),
                self.replay_retention(before.clone(), after.clone(), &replay)
                    .await?,
            ),
            (Policy::Access(before), Policy::Access(after)) => (
                "recent access requests the decision log kept (every denial, sampled allows), \
                 each decided by both plugins"
                    .to_owned(),
                self.replay_access(before.clone(), after.clone(), &replay)
                    .await?,
            ),
            _ => (
                format!(
                    "nothing: a dry run replays no state of the {world} world; the plugin was \
                     proven (it loads, implements the world and answers a smoke call)"
                ),
                Vec::new(),
            ),
        };
        let mut report = DryRun {
            world,
            serving: serving.plugin.info().hash.clone(),
            candidate: candidate.plugin.info().hash.clone(),
            replayed,
            items: 0,
            unchanged: 0,
            changed: Vec::new(),
        };
        for compared in compared {
            report.items += 1;
            if compared.differences.is_empty() {
                report.unchanged += 1;
            } else {
                report.changed.push(Change {
                    item: compared.item,
                    before: compared.before,
                    after: compared.after,
                    differences: capped(compared.differences),
                });
            }
        }
        Ok(report)
    }
}

/// The first [`MAX_DIFFERENCES`] of `found`, then how many more.
fn capped(mut found: Vec<String>) -> Vec<String> {
    if found.len() > MAX_DIFFERENCES {
        let more = found.len() - MAX_DIFFERENCES;
        found.truncate(MAX_DIFFERENCES);
        found.push(format!("and {more} more"));
    }
    found
}

/// Runs `work` off the async runtime (plugin calls block), as a dry run's
/// failure when its thread does.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, SwapError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| SwapError::Refused(format!("the dry run could not finish: {e}")))
}
