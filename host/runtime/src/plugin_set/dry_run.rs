//! What a swap would change, found before it is made: the candidate is
//! proven as a swap proves it (signature, load, world, smoke call), then
//! the deployment's own state is replayed through the serving plugin and
//! the candidate, read-only, and every decision that differs is reported
//! (`custodian plugin diff`, `PUT /v1/plugins/{world}?dry_run=true`).
//! Nothing is written, published or swapped.
//!
//! What is replayed, by world:
//! - **takedown**: the next step of each takedown timer due next (at most
//!   the limit), planned by each plugin under read-only grants (the plans
//!   are computed, never committed): whether it reschedules or is done,
//!   when, and its exact writes and audit entries.
//! - the other worlds: nothing of the state yet; the report says so, and
//!   the candidate is only proven.

use std::sync::Arc;

use serde::Serialize;

use super::{PluginSet, Policy, SwapError, World, proof};
use crate::CallContext;
use crate::policy::PolicyError;
use crate::policy::takedown::TakedownPolicy;
use crate::signature::Signature;
use custodian_core::timers::{self, DueTimer, Fired};
use custodian_kv::Write;

/// Most timers one dry run replays: each is two plugin calls, and the
/// report lists each change, so a dry run stays within seconds and a
/// report within a screenful of pages.
pub const MAX_DRY_RUN_ITEMS: u32 = 10_000;

/// Differences listed per changed item, beyond which only the count is
/// given: a plan that rewrites a thousand rows is one change.
const MAX_DIFFERENCES: usize = 8;

/// A dry run's findings.
#[derive(Debug, Clone, Serialize)]
pub struct DryRun {
    /// The world.
    pub world: World,
    /// The serving plugin's hash.
    pub serving: String,
    /// The candidate's hash.
    pub candidate: String,
    /// What was replayed (`takedown timers`), or why nothing was.
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
    /// The item: `timer KIND REFERENCE`.
    pub item: String,
    /// The serving plugin's decision, in brief.
    pub before: String,
    /// The candidate's.
    pub after: String,
    /// Where the two differ: the first eight, then how many more.
    pub differences: Vec<String>,
}

/// A step's decision, comparable.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Planned {
    Fired(Fired),
    /// The policy answered with an error.
    Refused(String),
    /// No answer: a trap, a limit, a missing function.
    Failed(String),
}

impl PluginSet {
    /// Proves `bytes` as a plugin of `world` (signed by `signature`, if at
    /// all) and replays up to `limit` items of the state through the
    /// serving plugin and it (see the module documentation). Changes
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
        limit: u32,
    ) -> Result<DryRun, SwapError> {
        let candidate = self.prover().prove(world, bytes, source, signature).await?;
        let serving = self.current(world);
        let mut report = DryRun {
            world,
            serving: serving.plugin.info().hash.clone(),
            candidate: candidate.plugin.info().hash.clone(),
            replayed: format!(
                "nothing: a dry run replays no state of the {world} world yet; the plugin was \
                 proven (it loads, implements the world and answers a smoke call)"
            ),
            items: 0,
            unchanged: 0,
            changed: Vec::new(),
        };
        if let (Policy::Takedown(before), Policy::Takedown(after)) =
            (&serving.policy, &candidate.policy)
        {
            self.replay_timers(
                &mut report,
                before.clone(),
                after.clone(),
                limit.min(MAX_DRY_RUN_ITEMS),
            )
            .await?;
        }
        Ok(report)
    }

    async fn replay_timers(
        &self,
        report: &mut DryRun,
        before: Arc<TakedownPolicy>,
        after: Arc<TakedownPolicy>,
        limit: u32,
    ) -> Result<(), SwapError> {
        let due = proof::due_takedown_timers(&self.services, limit).await?;
        let settings = self.settings(World::Takedown);
        let now = self.clock.now_ms();
        let before_call = proof::read_only_call(&self.services, &settings, &before);
        let after_call = proof::read_only_call(&self.services, &settings, &after);
        let changes = tokio::task::spawn_blocking(move || {
            let plan =
                |policy: &TakedownPolicy, call: &Arc<CallContext>, timer: &DueTimer| match policy
                    .step(call.clone(), timer, now)
                {
                    Ok(Ok(fired)) => Planned::Fired(fired),
                    Ok(Err(PolicyError::AccessDenied(why))) => {
                        Planned::Refused(format!("a write, refused in a dry run: {why}"))
                    }
                    Ok(Err(error)) => Planned::Refused(error.to_string()),
                    Err(error) => Planned::Failed(error.to_string()),
                };
            due.iter()
                .map(|timer| {
                    let item = format!(
                        "timer {} {}",
                        timer.kind,
                        timers::display_reference(&timer.reference)
                    );
                    let was = plan(&before, &before_call, timer);
                    let will = plan(&after, &after_call, timer);
                    (item, was, will)
                })
                .collect::<Vec<_>>()
        })
        .await
        .map_err(|e| SwapError::Refused(format!("the dry run could not finish: {e}")))?;
        report.replayed = "takedown timers due next: each one's next step, planned read-only \
                           by both plugins"
            .to_owned();
        for (item, was, will) in changes {
            report.items += 1;
            if was == will {
                report.unchanged += 1;
            } else {
                report.changed.push(Change {
                    item,
                    before: brief(&was),
                    after: brief(&will),
                    differences: differences(&was, &will),
                });
            }
        }
        Ok(())
    }
}

/// A decision in a few words.
fn brief(planned: &Planned) -> String {
    match planned {
        Planned::Fired(Fired::Reschedule { due_ms, commit }) => format!(
            "step again at {due_ms}: {} writes, {} audit entries",
            commit.batch.writes.len(),
            commit.audit.len()
        ),
        Planned::Fired(Fired::Done(commit)) => format!(
            "done: {} writes, {} audit entries",
            commit.batch.writes.len(),
            commit.audit.len()
        ),
        Planned::Refused(why) => format!("answers an error: {why}"),
        Planned::Failed(why) => format!("no answer: {why}"),
    }
}

/// Where two decisions differ: the outcome, then each write and audit
/// entry one has and the other has not.
fn differences(was: &Planned, will: &Planned) -> Vec<String> {
    let (Planned::Fired(was), Planned::Fired(will)) = (was, will) else {
        return vec!["the outcome".to_owned()];
    };
    let mut found = Vec::new();
    let (was_commit, will_commit) = match (was, will) {
        (
            Fired::Reschedule {
                due_ms: a,
                commit: x,
            },
            Fired::Reschedule {
                due_ms: b,
                commit: y,
            },
        ) => {
            if a != b {
                found.push(format!("next step at {a} → {b}"));
            }
            (x, y)
        }
        (Fired::Done(x), Fired::Done(y)) => (x, y),
        (Fired::Reschedule { commit: x, .. }, Fired::Done(y)) => {
            found.push("steps again → done".to_owned());
            (x, y)
        }
        (Fired::Done(x), Fired::Reschedule { commit: y, .. }) => {
            found.push("done → steps again".to_owned());
            (x, y)
        }
    };
    let described = |writes: &[Write]| -> Vec<String> { writes.iter().map(write).collect() };
    let (a, b) = (
        described(&was_commit.batch.writes),
        described(&will_commit.batch.writes),
    );
    found.extend(
        a.iter()
            .filter(|w| !b.contains(w))
            .map(|w| format!("no longer {w}")),
    );
    found.extend(
        b.iter()
            .filter(|w| !a.contains(w))
            .map(|w| format!("now {w}")),
    );
    if was_commit.batch.preconditions != will_commit.batch.preconditions {
        found.push("the plan's guards".to_owned());
    }
    if was_commit.audit != will_commit.audit {
        found.push("the audit entries".to_owned());
    }
    if found.len() > MAX_DIFFERENCES {
        let more = found.len() - MAX_DIFFERENCES;
        found.truncate(MAX_DIFFERENCES);
        found.push(format!("and {more} more"));
    }
    found
}

/// One write, for a person: its partition, key, and the size and a
/// digest of what is written (so two values of one size differ).
fn write(write: &Write) -> String {
    match write {
        Write::Put {
            partition,
            key,
            value,
        } => format!(
            "writes {partition}/{} ({} bytes, blake3:{})",
            timers::display_reference(key),
            value.len(),
            &crate::content_hash(value)[..12]
        ),
        Write::Delete { partition, key } => {
            format!("deletes {partition}/{}", timers::display_reference(key))
        }
    }
}
