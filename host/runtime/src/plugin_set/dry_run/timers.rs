//! The takedown world's replay: the next step of each takedown timer due
//! next, planned by both plugins under read-only grants.

use std::sync::Arc;

use super::{Compared, Replay, blocking};
use crate::CallContext;
use crate::plugin_set::{PluginSet, SwapError, World, proof};
use crate::policy::PolicyError;
use crate::policy::takedown::TakedownPolicy;
use custodian_core::timers::{self, DueTimer, Fired};
use custodian_kv::Write;

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
    /// Plans the next step of up to `replay.limit` takedown timers due
    /// next with both plugins.
    pub(super) async fn replay_timers(
        &self,
        before: Arc<TakedownPolicy>,
        after: Arc<TakedownPolicy>,
        replay: &Replay,
    ) -> Result<Vec<Compared>, SwapError> {
        let due = proof::due_takedown_timers(&self.services, replay.limit()).await?;
        let settings = self.settings(World::Takedown);
        let now = self.clock.now_ms();
        let before_call = proof::read_only_call(&self.services, &settings, &before);
        let after_call = proof::read_only_call(&self.services, &settings, &after);
        let replay = replay.clone();
        blocking(move || {
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
            let mut compared = Vec::with_capacity(due.len());
            for (done, timer) in due.iter().enumerate() {
                let was = plan(&before, &before_call, timer);
                let will = plan(&after, &after_call, timer);
                compared.push(Compared {
                    item: format!(
                        "timer {} {}",
                        timer.kind,
                        timers::display_reference(&timer.reference)
                    ),
                    before: brief(&was),
                    after: brief(&will),
                    differences: if was == will {
                        Vec::new()
                    } else {
                        differences(&was, &will)
                    },
                });
                replay.tell(done + 1, due.len());
            }
            compared
        })
        .await
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
