//! Durable timers: rows in the KV that say "run a step of `kind` for
//! `reference` at `due_ms`", and the worker that fires them.
//!
//! # Key layout (partition `custodian.timers`)
//!
//! - due row: `b'd'`, `due_ms` (8 bytes, big-endian), `kind`, `0x00`,
//!   `reference` → the timer's [`TimerState`] as versioned JSON. A scan of
//!   the `d` class up to `now` reads due timers in due order.
//! - index row: `b'r'`, `kind`, `0x00`, `reference` → `due_ms` (8 bytes,
//!   big-endian). There is at most one timer per `(kind, reference)`:
//!   scheduling an existing one moves it, so timers never multiply.
//!
//! `kind` is a name of `[a-z0-9._-]` (it cannot contain `0x00`, which ends
//! it); `reference` is any bytes and ends the key, so neither needs
//! escaping.
//!
//! # Invariants
//!
//! 1. A due row and its index row are written and removed in the same
//!    batch, so they always agree.
//! 2. Every change to a timer (a step's commit, a failure's back-off, a
//!    reschedule by an operator) is guarded on the due row it read being
//!    unchanged, and moves or deletes that row. So a step commits at most
//!    once however many workers fire the same timer: the second commit's
//!    guard fails.
//! 3. A rescheduled timer is due strictly after the `now` of the step that
//!    moved it, so one tick never fires the same timer twice.
//!
//! A worker fires from a scan of the due rows, or from the rows an earlier
//! tick's caps left, for at most 100 ms after their page was read
//! (`carry`); either way each row is checked and its commit guarded alike.

mod carry;
pub mod claim;
pub mod governor;
pub mod in_flight;
mod worker;

pub use worker::{
    AuditEntry, DueTimer, FailureCause, FireOutcome, Fired, FiredTimer, Handlers,
    LOG_TARGET as WORKER_LOG_TARGET, MAX_STEP_AUDIT, StepCommit, StepFailure, TickReport,
    TimerHandler, Worker, WorkerConfig,
};

use serde::{Deserialize, Serialize};

use custodian_base::error::ErrorKind;
use custodian_kv::{
    Answer, Batch, Kv, KvError, Outcome, Page, Partition, Precondition, Read, Write,
};

/// The partition holding timers.
pub const PARTITION: &str = "custodian.timers";
/// The fencing namespace timer workers hold their leases in: bumping its
/// epoch (as a plugin swap does) fences every step in flight.
pub const FENCE_NAMESPACE: &str = "timers";
/// Longest kind name; kinds name policy worlds.
pub const MAX_KIND_BYTES: usize = 64;
/// Longest reference: enough for a hash or a structured id, small enough
/// that the timer key stays far below the KV's key bound.
pub const MAX_REFERENCE_BYTES: usize = 256;
/// Longest error message kept on a timer row: an operator needs the
/// message, not an unbounded guest-controlled string in a hot row.
pub const MAX_ERROR_BYTES: usize = 1024;
/// Longest a host's idle worker loop sleeps between looks for due timers
/// (the server's idle poll), so a timer scheduled by another writer (a
/// `custodian takedown create` against the same data is impossible while
/// the server holds it, but a timer rescheduled for "now" is not) is
/// picked up within this. A busy host's deep pass (the `carry` module)
/// keeps the same bound for timers behind a backlog.
pub const IDLE_POLL_MS: u64 = 500;
/// Attempts to move a timer under contention before giving up.
const SCHEDULE_ATTEMPTS: usize = 8;

const DUE: u8 = b'd';
const INDEX: u8 = b'r';
/// Format byte leading every stored state, so the encoding can change.
const STATE_FORMAT: u8 = 1;

/// Why a timer operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimerError {
    /// A kind or reference outside its bounds.
    #[error("invalid timer: {0}")]
    InvalidArgument(String),
    /// A stored timer row cannot be decoded.
    #[error("corrupt timer row: {0}")]
    Corrupt(String),
    /// The KV failed.
    #[error(transparent)]
    Kv(#[from] KvError),
    /// The worker could not hold its fencing lease.
    #[error("cannot hold the worker's fencing lease")]
    Fence(#[from] crate::fence::FenceError),
    /// Other writers kept moving the same timer.
    #[error("the timer kept changing under contention; retry")]
    Contention,
}

impl TimerError {
    /// What kind of failure this is (see [`ErrorKind`]). Arguments the
    /// timers pass on to the KV or the fence are their own, so a refusal
    /// from below is the host's fault; contention is a retry away.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::InvalidArgument(_) => ErrorKind::InvalidArgument,
            Self::Corrupt(_) => ErrorKind::Corrupt,
            Self::Kv(kv) => kv.kind().host_built(),
            Self::Fence(fence) => fence.kind().host_built(),
            Self::Contention => ErrorKind::Unavailable,
        }
    }
}

/// What a timer row holds besides its key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimerState {
    /// Steps committed for this timer so far.
    pub steps: u64,
    /// Consecutive failed attempts since the last committed step.
    pub failures: u32,
    /// The last failure's message, for an operator.
    pub last_error: Option<String>,
    /// When the last failure happened, ms since the epoch.
    pub last_error_at_ms: Option<u64>,
}

impl TimerState {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = vec![STATE_FORMAT];
        out.extend(serde_json::to_vec(self).expect("timer states serialize"));
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, TimerError> {
        match bytes.split_first() {
            Some((&STATE_FORMAT, json)) => serde_json::from_slice(json)
                .map_err(|e| TimerError::Corrupt(format!("timer state: {e}"))),
            _ => Err(TimerError::Corrupt(
                "timer state has an unknown format".into(),
            )),
        }
    }
}

/// One timer as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timer {
    /// When it is due, ms since the epoch.
    pub due_ms: u64,
    /// Which handler runs it.
    pub kind: String,
    /// What it is about.
    pub reference: Vec<u8>,
    /// Its counters and last error.
    pub state: TimerState,
}

/// A timer as `custodian timer list --json` and `GET /v1/timers` show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TimerSummary {
    /// Its kind.
    pub kind: String,
    /// Its reference, as text or `0x` hex.
    pub reference: String,
    /// When it is due, ms since the epoch.
    pub due_ms: u64,
    /// Steps committed.
    pub steps: u64,
    /// Failed attempts since the last committed step.
    pub failures: u32,
    /// The last failure's message.
    pub last_error: Option<String>,
    /// When it failed.
    pub last_error_at_ms: Option<u64>,
}

impl From<&Timer> for TimerSummary {
    fn from(timer: &Timer) -> Self {
        Self {
            kind: timer.kind.clone(),
            reference: display_reference(&timer.reference),
            due_ms: timer.due_ms,
            steps: timer.state.steps,
            failures: timer.state.failures,
            last_error: timer.state.last_error.clone(),
            last_error_at_ms: timer.state.last_error_at_ms,
        }
    }
}

pub(crate) fn partition() -> Partition {
    Partition::new(PARTITION).expect("the timer partition name is valid")
}

/// Checks a kind and a reference.
///
/// # Errors
/// [`TimerError::InvalidArgument`] naming the bound.
pub fn validate(kind: &str, reference: &[u8]) -> Result<(), TimerError> {
    if !custodian_contract::name::is_name(kind, MAX_KIND_BYTES) {
        return Err(TimerError::InvalidArgument(format!(
            "{kind:?} is not a timer kind (1..={MAX_KIND_BYTES} bytes of [a-z0-9._-])"
        )));
    }
    if !(1..=MAX_REFERENCE_BYTES).contains(&reference.len()) {
        return Err(TimerError::InvalidArgument(format!(
            "a timer reference is 1..={MAX_REFERENCE_BYTES} bytes, not {}",
            reference.len()
        )));
    }
    Ok(())
}

pub(crate) fn due_key(due_ms: u64, kind: &str, reference: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(10 + kind.len() + reference.len());
    key.push(DUE);
    key.extend_from_slice(&due_ms.to_be_bytes());
    key.extend_from_slice(kind.as_bytes());
    key.push(0);
    key.extend_from_slice(reference);
    key
}

pub(crate) fn index_key(kind: &str, reference: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(2 + kind.len() + reference.len());
    key.push(INDEX);
    key.extend_from_slice(kind.as_bytes());
    key.push(0);
    key.extend_from_slice(reference);
    key
}

/// The first key of the due class.
pub(crate) fn due_start() -> Vec<u8> {
    vec![DUE]
}

/// The first due key after every timer due at or before `now_ms`.
pub(crate) fn due_end(now_ms: u64) -> Vec<u8> {
    match now_ms.checked_add(1) {
        Some(next) => {
            let mut key = vec![DUE];
            key.extend_from_slice(&next.to_be_bytes());
            key
        }
        // Everything is due at the end of time.
        None => vec![DUE + 1],
    }
}

/// Decodes a due row.
pub(crate) fn parse_due(key: &[u8], value: &[u8]) -> Result<Timer, TimerError> {
    let (due_ms, kind, reference) = parse_due_key(key)?;
    Ok(Timer {
        due_ms,
        kind: kind.to_owned(),
        reference: reference.to_vec(),
        state: TimerState::decode(value)?,
    })
}

/// Decodes a due row's key alone: its due time, kind and reference.
pub(crate) fn parse_due_key(key: &[u8]) -> Result<(u64, &str, &[u8]), TimerError> {
    let corrupt = || TimerError::Corrupt(format!("bad timer key {}", hex::encode(key)));
    let rest = key.strip_prefix(&[DUE]).ok_or_else(corrupt)?;
    let (due, rest) = rest.split_first_chunk::<8>().ok_or_else(corrupt)?;
    let split = rest.iter().position(|&b| b == 0).ok_or_else(corrupt)?;
    let kind = std::str::from_utf8(&rest[..split]).map_err(|_| corrupt())?;
    let reference = &rest[split + 1..];
    validate(kind, reference).map_err(|_| corrupt())?;
    Ok((u64::from_be_bytes(*due), kind, reference))
}

fn decode_due_ms(bytes: &[u8]) -> Result<u64, TimerError> {
    <[u8; 8]>::try_from(bytes)
        .map(u64::from_be_bytes)
        .map_err(|_| TimerError::Corrupt("timer index row is not 8 bytes".into()))
}

/// The guard and writes that move `timer`, as [`get`] read it, to `due_ms`
/// with its state kept: they commit only while its index still names the
/// due time it was read at.
///
/// # Errors
/// As [`plan_schedule`].
pub fn plan_move(timer: &Timer, due_ms: u64) -> Result<Batch, TimerError> {
    plan_schedule(
        &timer.kind,
        &timer.reference,
        due_ms,
        Some(&timer.due_ms.to_be_bytes()),
        &timer.state,
    )
}

/// The guard and writes that (re)schedule `(kind, reference)` at `due_ms`
/// with `state`, given the index row as read (`None`: no timer yet).
/// Commit them in one batch, with anything else that must happen with it.
///
/// # Errors
/// [`TimerError::InvalidArgument`] for a bad kind or reference;
/// [`TimerError::Corrupt`] for a bad index row.
pub fn plan_schedule(
    kind: &str,
    reference: &[u8],
    due_ms: u64,
    observed_index: Option<&[u8]>,
    state: &TimerState,
) -> Result<Batch, TimerError> {
    validate(kind, reference)?;
    let partition = partition();
    let index = index_key(kind, reference);
    let mut batch = Batch::default();
    match observed_index {
        None => batch.preconditions.push(Precondition::Absent {
            partition: partition.clone(),
            key: index.clone(),
        }),
        Some(old) => {
            let old_due = decode_due_ms(old)?;
            batch.preconditions.push(Precondition::Equals {
                partition: partition.clone(),
                key: index.clone(),
                value: old.to_vec(),
            });
            batch.writes.push(Write::Delete {
                partition: partition.clone(),
                key: due_key(old_due, kind, reference),
            });
        }
    }
    batch.writes.push(Write::Put {
        partition: partition.clone(),
        key: due_key(due_ms, kind, reference),
        value: state.encode(),
    });
    batch.writes.push(Write::Put {
        partition,
        key: index,
        value: due_ms.to_be_bytes().to_vec(),
    });
    Ok(batch)
}

/// Schedules `(kind, reference)` at `due_ms`, moving it if it exists (its
/// counters start afresh).
///
/// # Errors
/// See [`TimerError`].
pub async fn schedule(
    kv: &dyn Kv,
    kind: &str,
    reference: &[u8],
    due_ms: u64,
) -> Result<(), TimerError> {
    validate(kind, reference)?;
    for _ in 0..SCHEDULE_ATTEMPTS {
        let observed = kv.get(&partition(), &index_key(kind, reference)).await?;
        let batch = plan_schedule(
            kind,
            reference,
            due_ms,
            observed.as_deref(),
            &TimerState::default(),
        )?;
        if kv.apply(&batch).await? == Outcome::Committed {
            return Ok(());
        }
    }
    Err(TimerError::Contention)
}

/// Removes the timer `(kind, reference)` and any worker's claim on it;
/// `false` if there was none.
///
/// # Errors
/// See [`TimerError`].
pub async fn cancel(kv: &dyn Kv, kind: &str, reference: &[u8]) -> Result<bool, TimerError> {
    validate(kind, reference)?;
    let partition = partition();
    let index = index_key(kind, reference);
    for _ in 0..SCHEDULE_ATTEMPTS {
        let Some(observed) = kv.get(&partition, &index).await? else {
            return Ok(false);
        };
        let due = decode_due_ms(&observed)?;
        let batch = Batch {
            preconditions: vec![Precondition::Equals {
                partition: partition.clone(),
                key: index.clone(),
                value: observed,
            }],
            writes: vec![
                Write::Delete {
                    partition: partition.clone(),
                    key: due_key(due, kind, reference),
                },
                Write::Delete {
                    partition: partition.clone(),
                    key: index.clone(),
                },
                // A claim outlives nothing it was for: without this, the
                // row would stay until the same timer is claimed again.
                Write::Delete {
                    partition: partition.clone(),
                    key: claim::claim_key(kind, reference),
                },
            ],
        };
        if kv.apply(&batch).await? == Outcome::Committed {
            return Ok(true);
        }
    }
    Err(TimerError::Contention)
}

/// The timer `(kind, reference)`, if scheduled.
///
/// # Errors
/// See [`TimerError`].
pub async fn get(kv: &dyn Kv, kind: &str, reference: &[u8]) -> Result<Option<Timer>, TimerError> {
    validate(kind, reference)?;
    let partition = partition();
    let index_key = index_key(kind, reference);
    let Some(mut index) = kv.get(&partition, &index_key).await? else {
        return Ok(None);
    };
    // The index and the due row are two reads: a step committed between
    // them moves (or deletes) the due row the index named. A missing row
    // is corruption only if the index still names it.
    for _ in 0..SCHEDULE_ATTEMPTS {
        let key = due_key(decode_due_ms(&index)?, kind, reference);
        if let Some(value) = kv.get(&partition, &key).await? {
            return parse_due(&key, &value).map(Some);
        }
        match kv.get(&partition, &index_key).await? {
            None => return Ok(None),
            Some(again) if again == index => {
                return Err(TimerError::Corrupt(format!(
                    "the index of timer {kind}/{} names a missing row",
                    display_reference(reference)
                )));
            }
            Some(again) => index = again,
        }
    }
    Err(TimerError::Contention)
}

/// Timer `kind`/`reference` if it is due at exactly `due_ms`; `None` if
/// it is absent or due at another time. Its index row and the due row
/// `due_ms` names are read in one snapshot, so one round trip answers
/// what [`get`] needs two for, and an index naming `due_ms` beside no
/// such row is corruption, never a race.
///
/// # Errors
/// Invalid arguments, the KV's errors, or a corrupt row.
pub async fn get_due_at(
    kv: &dyn Kv,
    kind: &str,
    reference: &[u8],
    due_ms: u64,
) -> Result<Option<Timer>, TimerError> {
    validate(kind, reference)?;
    let partition = partition();
    let key = due_key(due_ms, kind, reference);
    let reads = [
        Read::Get {
            partition: partition.clone(),
            key: index_key(kind, reference),
        },
        Read::Get {
            partition,
            key: key.clone(),
        },
    ];
    let answers = kv.read(&reads).await?;
    let [Answer::Value(index), Answer::Value(row)] = answers.as_slice() else {
        return Err(TimerError::Corrupt(
            "the KV answered a read of two rows with something else".into(),
        ));
    };
    let Some(index) = index else {
        return Ok(None);
    };
    if decode_due_ms(index)? != due_ms {
        return Ok(None);
    }
    match row {
        Some(value) => parse_due(&key, value).map(Some),
        None => Err(TimerError::Corrupt(format!(
            "the index of timer {kind}/{} names a missing row",
            display_reference(reference)
        ))),
    }
}

/// One page of timers in due order, resuming after `cursor` (the `next`
/// of the previous page).
///
/// # Errors
/// See [`TimerError`].
pub async fn list(
    kv: &dyn Kv,
    cursor: Option<&[u8]>,
    limit: u32,
) -> Result<(Vec<Timer>, Option<Vec<u8>>), TimerError> {
    let page = kv
        .scan(
            &partition(),
            &due_start(),
            Some(&due_end(u64::MAX)),
            cursor,
            limit,
        )
        .await?;
    let timers = page
        .entries
        .iter()
        .map(|(key, value)| parse_due(key, value))
        .collect::<Result<_, _>>()?;
    Ok((timers, page.next))
}

/// When the first timer due after `now_ms` is due; `None` if none is.
/// What a simulated clock jumps to when nothing is due yet.
///
/// # Errors
/// See [`TimerError`].
pub async fn next_due_after(kv: &dyn Kv, now_ms: u64) -> Result<Option<u64>, TimerError> {
    let page = due_after(kv, now_ms, 1).await?;
    page.entries
        .first()
        .map(|(key, value)| parse_due(key, value).map(|t| t.due_ms))
        .transpose()
}

/// The first page of at most `limit` due rows of timers due after
/// `now_ms`, in due order.
pub(crate) async fn due_after(kv: &dyn Kv, now_ms: u64, limit: u32) -> Result<Page, TimerError> {
    if now_ms == u64::MAX {
        return Ok(Page::default());
    }
    Ok(kv
        .scan(
            &partition(),
            &due_end(now_ms),
            Some(&due_end(u64::MAX)),
            None,
            limit,
        )
        .await?)
}

/// A reference as people read it: the text if it is printable UTF-8 (and
/// does not itself start with `0x`), else `0x` and hex, so that
/// [`parse_reference`] reads back exactly the same bytes.
pub fn display_reference(reference: &[u8]) -> String {
    match std::str::from_utf8(reference) {
        Ok(text) if !text.starts_with("0x") && text.chars().all(|c| !c.is_control()) => {
            text.to_owned()
        }
        _ => format!("0x{}", hex::encode(reference)),
    }
}

/// Parses what [`display_reference`] prints.
pub fn parse_reference(text: &str) -> Vec<u8> {
    text.strip_prefix("0x")
        .and_then(|h| hex::decode(h).ok())
        .unwrap_or_else(|| text.as_bytes().to_vec())
}

#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod tests;
