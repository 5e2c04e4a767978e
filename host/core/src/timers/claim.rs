//! Step claims: how workers on several hosts avoid running the same step.
//!
//! Correctness never depends on a claim: every step commits guarded on the
//! due row it read (invariant 2 of the module), so of two workers that run
//! the same step at most one commits. What a claim saves is the loser's
//! work: a plugin call, its store calls, and the pieces it wrote before
//! losing. Before firing a timer a claiming worker writes a claim row,
//! guarded on the row it read, naming its host, the due row it is about to
//! fire and an expiry; a worker of another host that finds a live claim on
//! the same due row skips the timer.
//!
//! # Key layout (partition `custodian.timers`)
//!
//! - claim row: `b'c'`, `kind`, `0x00`, `reference` → [`ClaimRow`] as
//!   versioned JSON.
//!
//! A claim names the due row by its `due_ms`. Every change to a timer
//! moves its due row to a later time (a committed step reschedules it
//! after the step's `now`, a failure backs it off), so a claim on an older
//! `due_ms` is stale at once and the next attempt may be claimed by
//! anyone. The row is deleted with the timer's last step, and with the
//! timer when it is cancelled.
//!
//! A worker that dies holding a claim delays the step by at most the claim's
//! time to live, after which any worker takes it.
//!
//! # What a claim costs
//!
//! A claim is held by a host, not by one of its worker loops: the loops of
//! one host share an in-flight set, which keeps them from firing one timer
//! at once, so any of them may take the host's next step of a timer. The
//! claim row is read in the same snapshot read as the due row it names
//! (see [`claim`]), and a step that reschedules its timer soon carries the
//! claim to the new due row in its own commit. So a host working through a
//! timer's steps writes a claim once, on its first step, and reads nothing
//! extra after: one transaction per step, the step's own.
//! The carried claim cannot take a step from anyone: nobody could have
//! claimed a due row that the same commit creates.

use serde::{Deserialize, Serialize};

use super::{Timer, TimerError, partition};
use custodian_kv::{Batch, Kv, Outcome, Precondition, Write};

const CLAIM: u8 = b'c';
/// Format byte leading every stored claim, so the encoding can change.
const CLAIM_FORMAT: u8 = 1;
/// Longest holder name: a host's node name, with room to spare.
pub const MAX_HOLDER_BYTES: usize = 128;

/// Who claims steps, and for how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimConfig {
    /// The claiming host, unique across the cluster (its node name). Every
    /// worker of the host claims under it, and they must share one
    /// [`super::in_flight::InFlight`] set, which is what keeps two of them
    /// from firing one timer at once.
    pub holder: String,
    /// How long a claim keeps other workers away, in ms. Longer than a
    /// step may run (its plugin's time limit plus the commit), or a slow
    /// step would be run twice; short enough that a crashed host's steps
    /// are taken over promptly.
    pub ttl_ms: u64,
}

/// A stored claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimRow {
    /// The worker that claimed the step.
    pub holder: String,
    /// The due row it claimed, by its due time.
    pub due_ms: u64,
    /// When the claim lapses, ms since the epoch.
    pub until_ms: u64,
}

impl ClaimRow {
    fn encode(&self) -> Vec<u8> {
        let mut out = vec![CLAIM_FORMAT];
        out.extend(serde_json::to_vec(self).expect("claims serialize"));
        out
    }

    fn decode(bytes: &[u8]) -> Result<Self, TimerError> {
        match bytes.split_first() {
            Some((&CLAIM_FORMAT, json)) => serde_json::from_slice(json)
                .map_err(|e| TimerError::Corrupt(format!("timer claim: {e}"))),
            _ => Err(TimerError::Corrupt(
                "timer claim has an unknown format".into(),
            )),
        }
    }

    /// Whether this claim keeps `holder` away from `timer` at `now_ms`.
    fn excludes(&self, holder: &str, timer: &Timer, now_ms: u64) -> bool {
        self.holder != holder && self.due_ms == timer.due_ms && self.until_ms > now_ms
    }

    /// Whether this is `config`'s own claim on `timer`'s due row with at
    /// least half its time to live left: long enough for the step, since a
    /// time to live is longer than a step may run, so it needs no renewal.
    fn held_by(&self, config: &ClaimConfig, timer: &Timer, now_ms: u64) -> bool {
        self.holder == config.holder
            && self.due_ms == timer.due_ms
            && still_held(config, self.until_ms, now_ms)
    }
}

/// The claim row's key for `(kind, reference)`.
pub fn claim_key(kind: &str, reference: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(2 + kind.len() + reference.len());
    key.push(CLAIM);
    key.extend_from_slice(kind.as_bytes());
    key.push(0);
    key.extend_from_slice(reference);
    key
}

/// The write that removes `timer`'s claim, for the batch of its last step.
pub(crate) fn release(timer: &Timer) -> Write {
    Write::Delete {
        partition: partition(),
        key: claim_key(&timer.kind, &timer.reference),
    }
}

/// Whether a claim of `config`'s holder lapsing at `until_ms` is held at
/// `now_ms`: with at least half its time to live left, long enough for a
/// step, since a time to live is longer than a step may run.
pub(crate) fn still_held(config: &ClaimConfig, until_ms: u64, now_ms: u64) -> bool {
    until_ms >= now_ms.saturating_add(config.ttl_ms / 2)
}

/// Until when a step at `now_ms` that reschedules its timer to
/// `next_due_ms` carries `config`'s claim, if it does (see [`carry`]).
pub(crate) fn carried_until(config: &ClaimConfig, next_due_ms: u64, now_ms: u64) -> Option<u64> {
    (next_due_ms < now_ms.saturating_add(config.ttl_ms / 2))
        .then(|| now_ms.saturating_add(config.ttl_ms))
}

/// The write that carries `config`'s claim on `timer` to the due row at
/// `next_due_ms`, for the batch of a step (at `now_ms`) that reschedules
/// it; `None` when the next step is not due until the claim would be half
/// spent, so that a claim written now could not spare its renewal then.
pub(crate) fn carry(
    config: &ClaimConfig,
    timer: &Timer,
    next_due_ms: u64,
    now_ms: u64,
) -> Option<Write> {
    carried_until(config, next_due_ms, now_ms)
        .map(|until_ms| claim_created(config, &timer.kind, &timer.reference, next_due_ms, until_ms))
}

/// The write that claims, for `config`'s holder until `until_ms`, the
/// timer of `kind` and `reference` whose due row of `due_ms` the same
/// batch creates: for a caller that schedules a timer at once and whose
/// host should take its first step (a filing, whose host holds the
/// timer from its own workers meanwhile, see
/// [`super::in_flight::InFlight::hold`]). Like a carried claim it takes no
/// step from anyone, since nobody could have claimed a due row that the
/// same commit creates, and it spares the claim's own transaction.
pub fn claim_created(
    config: &ClaimConfig,
    kind: &str,
    reference: &[u8],
    due_ms: u64,
    until_ms: u64,
) -> Write {
    Write::Put {
        partition: partition(),
        key: claim_key(kind, reference),
        value: ClaimRow {
            holder: config.holder.clone(),
            due_ms,
            until_ms,
        }
        .encode(),
    }
}

/// Whether this worker may fire `timer` now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claimed {
    /// The claim is this worker's for its time to live.
    Held,
    /// Another worker holds a live claim on this due row.
    Elsewhere {
        /// Who.
        holder: String,
        /// When the claim lapses, if it was read (a claim that won the
        /// race against this one was not).
        until_ms: Option<u64>,
    },
}

/// Claims `timer` for `config.holder` until `now_ms + ttl_ms`, given its
/// claim row `current` as read (with [`claim_key`], in the same read as
/// the due row): nothing to write when the claim is already the holder's
/// own for this due row (carried by its previous step), otherwise one
/// batch guarded on the claim row as read, so of two hosts claiming
/// together exactly one gets it.
///
/// # Errors
/// A KV failure, or a corrupt claim row.
pub async fn claim(
    kv: &dyn Kv,
    config: &ClaimConfig,
    timer: &Timer,
    current: Option<Vec<u8>>,
    now_ms: u64,
) -> Result<Claimed, TimerError> {
    if let Some(bytes) = &current {
        let row = ClaimRow::decode(bytes)?;
        if row.excludes(&config.holder, timer, now_ms) {
            return Ok(Claimed::Elsewhere {
                holder: row.holder,
                until_ms: Some(row.until_ms),
            });
        }
        if row.held_by(config, timer, now_ms) {
            return Ok(Claimed::Held);
        }
    }
    let partition = partition();
    let key = claim_key(&timer.kind, &timer.reference);
    let guard = match current {
        Some(value) => Precondition::Equals {
            partition: partition.clone(),
            key: key.clone(),
            value,
        },
        None => Precondition::Absent {
            partition: partition.clone(),
            key: key.clone(),
        },
    };
    let row = ClaimRow {
        holder: config.holder.clone(),
        due_ms: timer.due_ms,
        // A ttl from configuration is bounded far below u64; saturating
        // keeps a broken clock harmless.
        until_ms: now_ms.saturating_add(config.ttl_ms),
    };
    let batch = Batch {
        preconditions: vec![guard],
        writes: vec![Write::Put {
            partition,
            key,
            value: row.encode(),
        }],
    };
    match kv.apply(&batch).await? {
        Outcome::Committed => Ok(Claimed::Held),
        // Someone claimed between the read and the write: theirs.
        Outcome::PreconditionFailed { .. } | Outcome::DeadlinePassed => Ok(Claimed::Elsewhere {
            holder: "another worker".into(),
            until_ms: None,
        }),
    }
}

/// Another host's live claim, lapsing at `until_ms`, that a worker of
/// `config`'s host read in `bytes` for a timer it found due at its row of
/// `due_ms` but was not about to fire: read ahead, beside the claim of the
/// timer it was (see [`super::in_flight`]). A claim on that row or on a
/// later one counts, since only the holder's own step, which carries its
/// claim, moves the row on while the claim lives; a claim on an earlier
/// row is stale, and so is a corrupt one, which is left to the read of
/// the timer's own claim to report.
pub(crate) fn live_elsewhere(
    config: &ClaimConfig,
    bytes: &[u8],
    due_ms: u64,
    now_ms: u64,
) -> Option<u64> {
    let row = ClaimRow::decode(bytes).ok()?;
    (row.holder != config.holder && row.due_ms >= due_ms && row.until_ms > now_ms)
        .then_some(row.until_ms)
}

/// The claim on `(kind, reference)`, if any (for tests and operators).
///
/// # Errors
/// A KV failure, or a corrupt claim row.
pub async fn current(
    kv: &dyn Kv,
    kind: &str,
    reference: &[u8],
) -> Result<Option<ClaimRow>, TimerError> {
    kv.get(&partition(), &claim_key(kind, reference))
        .await?
        .map(|bytes| ClaimRow::decode(&bytes))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_read_ahead_counts_only_if_another_hosts_live_on_the_row_found_or_a_later_one() {
        let config = ClaimConfig {
            holder: "node-b".into(),
            ttl_ms: 30_000,
        };
        let row = |holder: &str, due_ms, until_ms| {
            ClaimRow {
                holder: holder.into(),
                due_ms,
                until_ms,
            }
            .encode()
        };
        let (due, now) = (1_000, 2_000);
        assert_eq!(
            live_elsewhere(&config, &row("node-a", due, 9_000), due, now),
            Some(9_000)
        );
        assert_eq!(
            live_elsewhere(&config, &row("node-a", due + 5, 9_000), due, now),
            Some(9_000),
            "the holder stepped on and carried it"
        );
        assert_eq!(
            live_elsewhere(&config, &row("node-a", due - 1, 9_000), due, now),
            None,
            "stale"
        );
        assert_eq!(
            live_elsewhere(&config, &row("node-a", due, now), due, now),
            None,
            "lapsed"
        );
        assert_eq!(
            live_elsewhere(&config, &row("node-b", due, 9_000), due, now),
            None,
            "its own"
        );
        assert_eq!(live_elsewhere(&config, b"\x01{", due, now), None, "corrupt");
    }
}

/// Fuzz target of the claim row's codec (the codec is private to this
/// module, hence here; see the README's "Fuzzing").
#[cfg(test)]
mod fuzz {
    use super::*;

    #[test]
    fn claim_rows_round_trip_and_arbitrary_values_are_corrupt_not_a_panic() {
        bolero::check!()
            .with_type::<(String, u64, u64, bool, Vec<u8>)>()
            .cloned()
            .for_each(|(holder, due_ms, until_ms, framed, value)| {
                let row = ClaimRow {
                    holder,
                    due_ms,
                    until_ms,
                };
                assert_eq!(ClaimRow::decode(&row.encode()), Ok(row));
                let value = if framed {
                    [&[CLAIM_FORMAT][..], &value].concat()
                } else {
                    value
                };
                if let Err(error) = ClaimRow::decode(&value) {
                    assert!(matches!(error, TimerError::Corrupt(_)), "{error:?}");
                }
            });
    }
}
