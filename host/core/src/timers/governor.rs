//! Runaway containment: how many steps a plugin's timers may take, and
//! the quarantine of a plugin that takes more.
//!
//! A step may ask to run again at once (a takedown with work does), so the
//! worker alone cannot tell a busy plugin from one that reschedules into
//! the past forever by how often it steps: a takedown of many objects
//! steps as fast as the host lets it, for as long as its work lasts (one
//! request took 650 steps/s on tmpfs on the 2-core reference machine, and
//! a request of 60 000 objects passed a ceiling of 30 000 steps a minute,
//! which quarantined the takedown plugin of every request). What tells
//! them apart is what a step commits: a step with work commits something
//! new (its state moves on), while a timer spinning in place commits the
//! same guards, writes and audit entries again and again.
//!
//! So the governor counts, in fixed windows of the worker's clock, each
//! timer's run of steps in a row that committed exactly the same, and per
//! kind the steps that committed nothing new (a step repeating its
//! timer's last commit, or a timer's first step in the window); when
//! either count passes its ceiling it quarantines the kind's plugin: a
//! row naming the plugin (its handler's actor, which carries the plugin's hash) is
//! written with a `plugin/quarantine` audit record, and every worker that
//! reads the row skips that kind's timers while the same plugin drives
//! them. Swapping (or rolling back) the plugin lifts it: the new handler's
//! actor differs, so the row no longer applies (it is replaced if the new
//! plugin is quarantined in turn), and the new plugin's steps are counted
//! afresh. `custodian timer release` (or `DELETE
//! /v1/timers/quarantine/{kind}`) lifts it for the same plugin.
//!
//! # Key layout (partition `custodian.timers`)
//!
//! - quarantine row: `b'q'`, `kind` → [`Quarantine`] as versioned JSON.
//!
//! # Bounds
//!
//! Counts live in memory, one entry per timer stepped in the current
//! window (its run and its last commit's 64-bit digest), cleared when the
//! window turns: at most as many entries as steps fit in a window. Each
//! host counts its own steps; the quarantine,
//! once declared, is shared through the KV and read again at most every
//! [`REFRESH_MS`]. Because windows are fixed, not sliding, a plugin may
//! take up to twice a ceiling across one window boundary before it trips.
//!
//! What the ceilings do not catch: a runaway whose every commit differs
//! (one writing the time or a counter at each step). The least step
//! interval still bounds such a timer to one step a millisecond, on one
//! worker loop at a time.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::{StepCommit, TimerError, partition};
use crate::audit::{self, Record};
use custodian_kv::{Batch, Kv, Outcome, Precondition, Write};

const QUARANTINE: u8 = b'q';
/// Format byte leading every stored quarantine, so the encoding can change.
const QUARANTINE_FORMAT: u8 = 1;
/// How often a governor reads the quarantine rows again: another host's
/// quarantine reaches this one within it.
pub const REFRESH_MS: u64 = 1_000;

/// The ceilings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GovernorConfig {
    /// The counting window, ms of the worker's clock.
    pub window_ms: u64,
    /// Most steps of one timer in a row in a window that each committed
    /// what the step before it did.
    pub max_timer_steps: u32,
    /// Most steps of one kind (one plugin's timers) in a window that
    /// committed nothing new.
    pub max_kind_steps: u32,
}

impl Default for GovernorConfig {
    /// One minute. A timer spinning into the past with the same commit
    /// steps up to once a millisecond (the default least interval), so
    /// 30 000 such steps in a row for one timer trip within a minute,
    /// and 120 000 for a kind catch several spinning at once. A timer with
    /// work, however fast it goes, counts once a window, for its kind.
    fn default() -> Self {
        Self {
            window_ms: 60_000,
            max_timer_steps: 30_000,
            max_kind_steps: 120_000,
        }
    }
}

/// A quarantined plugin: its kind's timers are paused while it drives
/// them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quarantine {
    /// The timer kind.
    pub kind: String,
    /// The plugin, as its handler names itself (`plugin:takedown@<hash>`).
    pub actor: String,
    /// Which ceiling it passed.
    pub reason: String,
    /// When, ms since the epoch.
    pub at_ms: u64,
}

impl Quarantine {
    fn encode(&self) -> Vec<u8> {
        let mut value = vec![QUARANTINE_FORMAT];
        value.extend(serde_json::to_vec(self).expect("a quarantine serializes"));
        value
    }

    fn decode(value: &[u8]) -> Result<Self, TimerError> {
        match value.split_first() {
            Some((&QUARANTINE_FORMAT, json)) => serde_json::from_slice(json)
                .map_err(|e| TimerError::Corrupt(format!("quarantine row: {e}"))),
            _ => Err(TimerError::Corrupt(
                "quarantine row of an unknown format".into(),
            )),
        }
    }
}

fn quarantine_key(kind: &str) -> Vec<u8> {
    let mut key = vec![QUARANTINE];
    key.extend_from_slice(kind.as_bytes());
    key
}

/// Every quarantine row.
///
/// # Errors
/// The KV's, or [`TimerError::Corrupt`] for an undecodable row.
pub async fn quarantined(kv: &dyn Kv) -> Result<Vec<Quarantine>, TimerError> {
    // Kinds are at most 64 bytes of names: one page holds every kind a
    // host has handlers for.
    let page = kv
        .scan(
            &partition(),
            &[QUARANTINE],
            Some(&[QUARANTINE + 1]),
            None,
            1_000,
        )
        .await?;
    page.entries
        .iter()
        .map(|(_, value)| Quarantine::decode(value))
        .collect()
}

/// Lifts the quarantine of `kind`, whoever it named; `false` if there was
/// none. Audited as `plugin/release` by `actor`.
///
/// # Errors
/// The KV's.
pub async fn release(
    kv: &dyn Kv,
    kind: &str,
    actor: &str,
    now_ms: u64,
) -> Result<bool, TimerError> {
    let key = quarantine_key(kind);
    let Some(value) = kv.get(&partition(), &key).await? else {
        return Ok(false);
    };
    let held = Quarantine::decode(&value)?;
    let record = Record {
        at_ms: now_ms,
        actor: actor.to_owned(),
        event: "plugin/release".into(),
        targets: vec![format!("timer-kind:{kind}"), held.actor.clone()],
        detail: Some(format!("quarantined at {}: {}", held.at_ms, held.reason)),
    };
    let (guard, write) = audit::plan(&record, &value, 0)?;
    let batch = Batch {
        preconditions: vec![
            Precondition::Equals {
                partition: partition(),
                key: key.clone(),
                value,
            },
            guard,
        ],
        writes: vec![
            Write::Delete {
                partition: partition(),
                key,
            },
            write,
        ],
    };
    Ok(kv.apply(&batch).await? == Outcome::Committed)
}

/// What the governor compares a step's commit by: equal for two commits
/// of the same guards, writes and audit entries.
pub(super) fn digest(commit: &StepCommit) -> u64 {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut hasher = DefaultHasher::new();
    commit.hash(&mut hasher);
    hasher.finish()
}

/// Adds one to `key`'s count in `counts`; the count now.
fn bump<K: std::hash::Hash + Eq>(counts: &mut HashMap<K, u32>, key: K) -> u32 {
    let count = counts.entry(key).or_default();
    *count = count.saturating_add(1);
    *count
}

/// A timer's run of steps in a window that each committed the same.
struct Run {
    /// Steps in the run.
    steps: u32,
    /// The digest of what each of them committed.
    commit: u64,
}

/// Counts steps and holds the quarantines, for every worker of a host.
pub struct Governor {
    config: GovernorConfig,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    window_start: u64,
    /// Steps that committed nothing new, by (kind, plugin).
    per_kind: HashMap<(String, String), u32>,
    /// Each timer's run of steps committing the same, by (kind, plugin,
    /// reference).
    per_timer: HashMap<(String, String, Vec<u8>), Run>,
    /// The quarantines as last read (or declared here), by kind.
    quarantines: BTreeMap<String, Quarantine>,
    /// When the rows were last read; `None`: never.
    read_at: Option<u64>,
}

impl Governor {
    /// A governor with these ceilings.
    pub fn new(config: GovernorConfig) -> Self {
        Self {
            config,
            state: Mutex::new(State::default()),
        }
    }

    /// Its ceilings.
    pub fn config(&self) -> GovernorConfig {
        self.config
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Reads the quarantine rows again if the last read is older than
    /// [`REFRESH_MS`].
    ///
    /// # Errors
    /// The KV's.
    pub async fn refresh(&self, kv: &dyn Kv, now_ms: u64) -> Result<(), TimerError> {
        let fresh = self
            .state()
            .read_at
            .is_some_and(|at| now_ms >= at && now_ms - at < REFRESH_MS);
        if fresh {
            return Ok(());
        }
        let rows = quarantined(kv).await?;
        let mut state = self.state();
        let now_held: BTreeMap<String, Quarantine> =
            rows.into_iter().map(|q| (q.kind.clone(), q)).collect();
        // A quarantine lifted since the last read starts its kind's counts
        // afresh: a released plugin gets a whole window again.
        let lifted: Vec<String> = state
            .quarantines
            .keys()
            .filter(|kind| !now_held.contains_key(*kind))
            .cloned()
            .collect();
        for kind in &lifted {
            state.per_kind.retain(|(of, _), _| of != kind);
            state.per_timer.retain(|(of, _, _), _| of != kind);
        }
        state.quarantines = now_held;
        state.read_at = Some(now_ms);
        Ok(())
    }

    /// Whether a quarantine pauses `kind` while the plugin `actor` names
    /// drives it. `actor` is asked only when `kind` has a quarantine:
    /// this runs for every due timer of every tick.
    pub fn paused(&self, kind: &str, actor: impl FnOnce() -> String) -> bool {
        let state = self.state();
        state
            .quarantines
            .get(kind)
            .is_some_and(|q| q.actor == actor())
    }

    /// Every quarantine as last read.
    pub fn quarantines(&self) -> Vec<Quarantine> {
        self.state().quarantines.values().cloned().collect()
    }

    /// Counts a committed step of `(kind, reference)` run by `actor` at
    /// `now_ms`, whose commit has the digest `commit`; the ceiling it
    /// passed, if it is past one.
    ///
    /// Only steps that commit nothing new count: a step committing what
    /// its timer's step before it in the window committed extends the
    /// timer's run of them, and the timer's first step in the window
    /// counts for its kind. A step committing something else starts the
    /// timer's run afresh and does not count for its kind.
    pub fn count(
        &self,
        kind: &str,
        actor: &str,
        reference: &[u8],
        commit: u64,
        now_ms: u64,
    ) -> Option<String> {
        let window = self.config.window_ms.max(1);
        let mut state = self.state();
        if now_ms < state.window_start || now_ms - state.window_start >= window {
            state.window_start = now_ms;
            state.per_kind.clear();
            state.per_timer.clear();
        }
        let run = state
            .per_timer
            .entry((kind.to_owned(), actor.to_owned(), reference.to_vec()))
            .or_insert(Run { steps: 0, commit });
        let repeated = run.steps == 0 || run.commit == commit;
        if repeated {
            run.steps = run.steps.saturating_add(1);
        } else {
            *run = Run { steps: 1, commit };
        }
        let of_timer = run.steps;
        let of_kind = if repeated {
            bump(&mut state.per_kind, (kind.to_owned(), actor.to_owned()))
        } else {
            0
        };
        // Every step past a ceiling reports it; `quarantine` declares it
        // once per plugin.
        if of_timer > self.config.max_timer_steps {
            Some(format!(
                "timer {kind}/{} took more than {} steps in a row in {window} ms, each \
                 committing what the step before it did",
                super::display_reference(reference),
                self.config.max_timer_steps
            ))
        } else if of_kind > self.config.max_kind_steps {
            Some(format!(
                "timers of kind {kind} took more than {} steps in {window} ms that committed \
                 nothing new",
                self.config.max_kind_steps
            ))
        } else {
            None
        }
    }

    /// Quarantines `actor`'s `kind`: writes the row (replacing one that
    /// named another plugin) and its `plugin/quarantine` audit record in
    /// one batch, and pauses the kind here at once. Returns the new
    /// quarantine; `None` if one already held this plugin (a step that
    /// was in flight when it was declared).
    ///
    /// # Errors
    /// The KV's.
    pub async fn quarantine(
        &self,
        kv: &dyn Kv,
        kind: &str,
        actor: &str,
        reason: String,
        now_ms: u64,
    ) -> Result<Option<Quarantine>, TimerError> {
        let quarantine = Quarantine {
            kind: kind.to_owned(),
            actor: actor.to_owned(),
            reason,
            at_ms: now_ms,
        };
        let key = quarantine_key(kind);
        let existing = kv.get(&partition(), &key).await?;
        if let Some(value) = &existing {
            let held = Quarantine::decode(value)?;
            if held.actor == actor {
                self.hold(held);
                return Ok(None);
            }
        }
        let record = Record {
            at_ms: now_ms,
            actor: "system:timer".into(),
            event: "plugin/quarantine".into(),
            targets: vec![format!("timer-kind:{kind}"), actor.to_owned()],
            detail: Some(format!(
                "{}; its timers are paused until the plugin is swapped, rolled back or released",
                quarantine.reason
            )),
        };
        let value = quarantine.encode();
        let (guard, write) = audit::plan(&record, &value, 0)?;
        let observed = match existing {
            Some(value) => Precondition::Equals {
                partition: partition(),
                key: key.clone(),
                value,
            },
            None => Precondition::Absent {
                partition: partition(),
                key: key.clone(),
            },
        };
        let batch = Batch {
            preconditions: vec![observed, guard],
            writes: vec![
                Write::Put {
                    partition: partition(),
                    key,
                    value,
                },
                write,
            ],
        };
        // Lost to another host quarantining the same plugin at the same
        // moment: the pause holds all the same.
        kv.apply(&batch).await?;
        self.hold(quarantine.clone());
        Ok(Some(quarantine))
    }

    fn hold(&self, quarantine: Quarantine) {
        self.state()
            .quarantines
            .insert(quarantine.kind.clone(), quarantine);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One commit's digest, repeated by every step that commits nothing new.
    const SAME: u64 = 7;

    fn governor(timer: u32, kind: u32) -> Governor {
        Governor::new(GovernorConfig {
            window_ms: 1_000,
            max_timer_steps: timer,
            max_kind_steps: kind,
        })
    }

    #[test]
    fn a_timer_passing_its_ceiling_trips_until_the_window_turns() {
        let g = governor(3, 100);
        let trips: Vec<_> = (0..6)
            .map(|i| g.count("k", "p", b"r", SAME, 10 + i))
            .collect();
        assert!(trips[..3].iter().all(Option::is_none));
        assert!(trips[3].as_deref().unwrap().contains("timer k/r"));
        assert!(trips[4..].iter().all(Option::is_some));
        // A new window counts afresh.
        assert!((0..3).all(|_| g.count("k", "p", b"r", SAME, 2_000).is_none()));
        assert!(g.count("k", "p", b"r", SAME, 2_000).is_some());
    }

    #[test]
    fn many_timers_of_one_kind_trip_the_kind_ceiling() {
        let g = governor(100, 4);
        let trips: Vec<_> = (0u8..5)
            .map(|i| g.count("k", "p", &[i], SAME, 10))
            .collect();
        assert!(trips[..4].iter().all(Option::is_none));
        assert!(trips[4].as_deref().unwrap().contains("kind k"));
        assert!(g.count("k", "p", b"fresh", SAME, 10).is_some());
        // Another plugin driving the kind (a swap) is counted afresh.
        assert!(g.count("k", "swapped", b"fresh", SAME, 10).is_none());
        assert!(g.count("other", "p", b"r", SAME, 10).is_none());
    }

    #[test]
    fn a_timer_whose_every_step_commits_something_new_is_never_counted() {
        let g = governor(3, 4);
        for (i, commit) in (0..100u64).enumerate() {
            let now = 10 + u64::try_from(i).unwrap();
            assert_eq!(g.count("k", "p", b"r", commit, now), None, "step {i}");
        }
    }

    #[test]
    fn a_new_commit_ends_a_timers_run_and_only_repeats_count_for_its_kind() {
        let g = governor(3, 5);
        // A run of three, then a new commit: the run starts again.
        assert!((0..3).all(|_| g.count("k", "p", b"r", SAME, 10).is_none()));
        assert!(g.count("k", "p", b"r", SAME + 1, 10).is_none());
        assert!((0..2).all(|_| g.count("k", "p", b"r", SAME + 1, 10).is_none()));
        // The kind has counted five steps (the first and four repeats):
        // the next repeat passes both ceilings, and the timer's is told.
        let trip = g.count("k", "p", b"r", SAME + 1, 10).unwrap();
        assert!(
            trip.contains("timer k/r took more than 3 steps in a row"),
            "{trip}"
        );
        // A step with a new commit passes neither.
        assert!(g.count("k", "p", b"r", SAME + 2, 10).is_none());
    }

    #[test]
    fn a_clock_going_back_starts_a_new_window() {
        let g = governor(2, 100);
        assert!(g.count("k", "p", b"r", SAME, 5_000).is_none());
        assert!(g.count("k", "p", b"r", SAME, 5_000).is_none());
        assert!(g.count("k", "p", b"r", SAME, 10).is_none());
        assert!(g.count("k", "p", b"r", SAME, 10).is_none());
        assert!(g.count("k", "p", b"r", SAME, 10).is_some());
    }

    #[test]
    fn a_quarantine_row_round_trips_and_rejects_unknown_formats() {
        let q = Quarantine {
            kind: "takedown".into(),
            actor: "plugin:takedown@ab".into(),
            reason: "r".into(),
            at_ms: 7,
        };
        assert_eq!(Quarantine::decode(&q.encode()).unwrap(), q);
        assert!(Quarantine::decode(b"").is_err());
        assert!(Quarantine::decode(&[9, b'{', b'}']).is_err());
    }
}
