//! The timers a host's workers are firing right now, so that its workers
//! share one queue of due timers instead of splitting them up front.
//!
//! Splitting the timers among a host's workers by a hash of their
//! reference kept two workers from firing one timer, but it balanced
//! badly: ten requests hashed onto eight workers leave, more often than
//! not, some worker with two or three of them, whose steps it runs one
//! after another while other workers have nothing to do. With a shared
//! set, every worker takes the earliest due timer no other worker of the
//! host is firing, so no timer waits while a worker is free.
//!
//! Invariants:
//! - At most one worker of a host fires a given timer (kind and
//!   reference) at a time: a worker fires only under a `Firing` it
//!   took, and `InFlight::take` refuses a timer already taken. The
//!   timer row's guard would make a second firing commit nothing, but
//!   it would be a wasted plugin call and a spurious "lost" step.
//! - A `Firing` releases its timer when dropped, so a step that ends
//!   in any way (an error, a panic unwinding, a cancelled tick) frees it.
//! - The set holds at most one entry per worker: each worker holds at
//!   most one `Firing` at a time (it fires steps one after another).
//!
//! Hosts sharing a KV do not see each other's sets; between hosts, step
//! claims keep workers apart (see [`super::claim`]).
//!
//! The set also remembers, for the host's workers together, the timers
//! another host was found to hold a live claim on, and until when. A
//! worker that finds such a timer due again skips it without reading its
//! claim until that expiry, at the row the claim was read on or at any
//! later one. While the claim lives only its holder steps the timer, and
//! a holder's step that reschedules the timer soon carries the claim to
//! the new due row in its commit ([`super::claim`]), so there was nothing
//! to read that would let this host fire: before, a note matched only the
//! due row it was read on, and each step of the holder moved the row, so
//! every other host read the claim again once per step, and reads per
//! step grew by about 0.6 with each host added (`scale_out`). A row moved
//! some other way while the old claim lives (the holder's step failed and
//! backed off, or was due too late to carry its claim, or an operator
//! moved it) is fired meanwhile by the holder's own host, which reads its
//! stale claim and claims again; only if that host is gone does the
//! timer wait for the old claim's expiry, as it would for any crashed
//! claimer. Forgetting is always safe (it costs a read).
//!
//! A worker that reads a timer's claim reads, in the same read, the
//! claims of the timers after it on its page that the host knows nothing
//! of (at most a page's worth), and remembers those another host holds
//! live on the row it found or a later one (`claim::live_elsewhere`): a
//! host joining others that already work through a page of timers learns
//! their claims in one read, not one read per timer. Before, each host
//! read each timer's claim once on its own, and reads per step grew by
//! about 0.3 with each host added (`scale_out`, three hosts).
//!
//! It remembers the host's own claims too: a step that reschedules its
//! timer soon carries the claim to the new due row in its commit, and the
//! set notes that due row and the claim's expiry. A worker that then finds
//! the timer due at exactly that row, with the claim far enough from
//! lapsing to be held (`claim::still_held`), fires it without reading the
//! due row and claim again: both are as the host's own commit left them,
//! since no worker of the host has stepped the timer since (it would have
//! moved the due row and the note) and no other host may claim a row
//! under a live claim. Were the rows changed anyway (an operator cancels
//! the timer, which removes its claim, and schedules it again at that
//! very time), another host could run the same step, and the guard on the
//! due row lets at most one of them commit: correctness never rests on the
//! note, as it never rests on a claim. The note is used up when a worker
//! looks at it, so only a step that commits and carries the claim leaves
//! one (a step that failed, lost or was put off leaves none). One read
//! less per step, on every step after a timer's first on a host.
//!
//! It shares the first page of due rows the host's workers scanned last,
//! so that they need not each scan it (the `carry` module).
//!
//! And it remembers when the host's workers last ended a step of each
//! timer, so that a worker firing from rows carried over from an earlier
//! tick (the `carry` module) skips, without a read, those whose timer
//! another worker has stepped since their page was read. Forgetting is
//! safe here too: a forgotten step costs the re-read it would have cost
//! anyway.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use super::carry::{DeepPasses, LatestPage, MAX_AGE_MS};

/// A timer's identity: its kind and reference.
type TimerId = (String, Vec<u8>);

/// Most claims remembered, and most step ends. Past this the lapsed
/// claims (the step ends no carry can still need) are dropped, and if
/// none is, all are (each costs one read to learn again): the memory
/// stays bounded whatever the number of timers.
const MAX_REMEMBERED: usize = 4096;

/// A claim the host knows of: on the due row of `due_ms`, until
/// `until_ms`, held by this host or by another.
#[derive(Debug, Clone, Copy)]
struct Known {
    due_ms: u64,
    until_ms: u64,
    ours: bool,
}

/// The set of timers being fired, shared by a host's workers (clone it
/// into each; see [`super::Worker::share_in_flight`]), and the claims
/// other hosts hold that its workers have read.
#[derive(Debug, Clone, Default)]
pub struct InFlight {
    firing: Arc<Mutex<HashSet<TimerId>>>,
    claims: Arc<Mutex<HashMap<TimerId, Known>>>,
    /// When a step of each timer last ended on this host.
    stepped: Arc<Mutex<HashMap<TimerId, u64>>>,
    /// The first page of due rows the host's workers scanned last (see
    /// the `carry` module).
    latest_page: LatestPage,
    /// When a worker of the host last read past that first page (see the
    /// `carry` module).
    deep_passes: DeepPasses,
}

impl InFlight {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the timer of `kind` and `reference` for the caller, unless
    /// another worker is firing it.
    pub(crate) fn take(&self, kind: &str, reference: &[u8]) -> Option<Firing> {
        let id = (kind.to_owned(), reference.to_vec());
        let fresh = self.lock().insert(id.clone());
        fresh.then(|| Firing {
            set: self.clone(),
            id,
        })
    }

    /// Holds the timer of `kind` and `reference` away from the host's
    /// workers until the [`Hold`] is released or dropped, unless a worker
    /// is firing it: for a caller that makes a timer due at once but must
    /// finish its own work on the timer's subject first (a filing settling
    /// its request's denial before the first step may run).
    pub fn hold(&self, kind: &str, reference: &[u8]) -> Option<Hold> {
        self.take(kind, reference).map(|firing| Hold { firing })
    }

    /// Whether a step of the timer of `kind` and `reference` ended on
    /// this host at or after `since_ms`: then a due row of it read at
    /// `since_ms` may have moved. At the very millisecond the row may or
    /// may not have moved before the read; it counts as moved, which at
    /// worst puts its step off to the next scan.
    pub(crate) fn stepped_since(&self, kind: &str, reference: &[u8], since_ms: u64) -> bool {
        let id = (kind.to_owned(), reference.to_vec());
        self.stepped_record()
            .get(&id)
            .is_some_and(|&ended| ended >= since_ms)
    }

    /// Whether the host knows of a claim on the timer of `kind` and
    /// `reference` that spares reading it at `now_ms`: its own noted
    /// claim, or another host's that has not lapsed.
    pub(crate) fn knows_claim(&self, kind: &str, reference: &[u8], now_ms: u64) -> bool {
        let id = (kind.to_owned(), reference.to_vec());
        self.remembered()
            .get(&id)
            .is_some_and(|known| known.ours || known.until_ms > now_ms)
    }

    /// Until when the host noted another host's claim on the timer of
    /// `kind` and `reference`, if it did (lapsed or not).
    pub(crate) fn claimed_elsewhere_until(&self, kind: &str, reference: &[u8]) -> Option<u64> {
        let id = (kind.to_owned(), reference.to_vec());
        self.remembered()
            .get(&id)
            .filter(|known| !known.ours)
            .map(|known| known.until_ms)
    }

    /// Remembers, for every worker of the host, that another host holds a
    /// claim on the timer of `kind` and `reference` at its due row of
    /// `due_ms` until `until_ms`: read by a worker that did not take the
    /// timer (read ahead, see the module doc).
    pub(crate) fn remember_claim_elsewhere(
        &self,
        kind: &str,
        reference: &[u8],
        due_ms: u64,
        until_ms: u64,
        now_ms: u64,
    ) {
        let id = (kind.to_owned(), reference.to_vec());
        self.remember(
            &id,
            Known {
                due_ms,
                until_ms,
                ours: false,
            },
            now_ms,
        );
    }

    fn remember(&self, id: &TimerId, claim: Known, now_ms: u64) {
        insert_bounded(&mut self.remembered(), id, claim, |claim| {
            claim.until_ms > now_ms
        });
    }

    /// The first page of due rows the host's workers scanned last.
    pub(super) fn latest_page(&self) -> &LatestPage {
        &self.latest_page
    }

    /// When a worker of the host last read past the first page of due
    /// rows.
    pub(super) fn deep_passes(&self) -> &DeepPasses {
        &self.deep_passes
    }

    fn stepped_record(&self) -> std::sync::MutexGuard<'_, HashMap<TimerId, u64>> {
        // Entries are only inserted, replaced and dropped whole.
        self.stepped.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<TimerId>> {
        // The set is only inserted into and removed from; a panic while
        // it was held cannot leave it half-changed.
        self.firing.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn remembered(&self) -> std::sync::MutexGuard<'_, HashMap<TimerId, Known>> {
        // Entries are only inserted, replaced and dropped whole.
        self.claims.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One timer taken for firing; released when dropped.
#[derive(Debug)]
pub(crate) struct Firing {
    set: InFlight,
    id: TimerId,
}

/// A timer held away from the host's workers by a caller outside them
/// ([`InFlight::hold`]); dropping it releases the timer with no note.
#[derive(Debug)]
pub struct Hold {
    firing: Firing,
}

impl Hold {
    /// Releases the timer, noting for the host's workers that the caller's
    /// commit created its due row of `due_ms` with this host's claim on it
    /// until `until_ms` ([`super::claim::claim_created`]): the first worker
    /// to find the timer due at that row fires it without reading the row
    /// and the claim again, as after a step of its own that carried the
    /// claim (see the module doc).
    pub fn release_claimed(self, due_ms: u64, until_ms: u64, now_ms: u64) {
        self.firing.remember_own_claim(due_ms, until_ms, now_ms);
    }
}

/// What the host knows of the claim on the due row a worker found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Noted {
    /// Another host's claim, lapsing at `until_ms`.
    Elsewhere { until_ms: u64 },
    /// This host's own, carried to the row by its last step of the timer,
    /// lapsing at `until_ms`.
    Ours { until_ms: u64 },
}

impl Firing {
    /// What the host noted of the claim on this timer, found due at its
    /// row of `due_ms`: one lookup for both kinds, asked of the `Firing` a
    /// worker already holds, so it builds no key. Another host's claim
    /// counts whatever the row (see the module doc); the host's own only
    /// on the very row its step carried it to. A note of the host's own
    /// claim is used up by the asking: the step about to run either
    /// carries the claim on and notes it again
    /// ([`Self::remember_own_claim`]) or leaves no note, whichever way it
    /// ends.
    pub(crate) fn noted_claim(&self, due_ms: u64) -> Option<Noted> {
        let mut remembered = self.set.remembered();
        let known = *remembered.get(&self.id)?;
        if !known.ours {
            return Some(Noted::Elsewhere {
                until_ms: known.until_ms,
            });
        }
        remembered.remove(&self.id);
        (known.due_ms == due_ms).then_some(Noted::Ours {
            until_ms: known.until_ms,
        })
    }

    /// Remembers, for every worker of the host, that another host holds a
    /// claim on this timer's due row of `due_ms` until `until_ms`.
    pub(crate) fn remember_claim_elsewhere(&self, due_ms: u64, until_ms: u64, now_ms: u64) {
        self.remember(
            Known {
                due_ms,
                until_ms,
                ours: false,
            },
            now_ms,
        );
    }

    /// Remembers that this host's step just committed this timer's due
    /// row of `due_ms` and carried its claim to it, until `until_ms`.
    pub(crate) fn remember_own_claim(&self, due_ms: u64, until_ms: u64, now_ms: u64) {
        self.remember(
            Known {
                due_ms,
                until_ms,
                ours: true,
            },
            now_ms,
        );
    }

    /// Notes that a step of this timer ended at `now_ms`, whichever way
    /// (see [`InFlight::stepped_since`]).
    pub(crate) fn note_stepped(&self, now_ms: u64) {
        // Only carried rows are checked against the record, and none is
        // carried longer than `carry::MAX_AGE_MS`.
        insert_bounded(&mut self.set.stepped_record(), &self.id, now_ms, |&ended| {
            ended.saturating_add(MAX_AGE_MS) >= now_ms
        });
    }

    fn remember(&self, claim: Known, now_ms: u64) {
        self.set.remember(&self.id, claim, now_ms);
    }
}

/// Inserts `value` for `id`, first dropping the entries `still_useful`
/// refuses once [`MAX_REMEMBERED`] are held, and all of them if that is
/// not enough: the memory stays bounded whatever the number of timers.
fn insert_bounded<V>(
    map: &mut HashMap<TimerId, V>,
    id: &TimerId,
    value: V,
    still_useful: impl Fn(&V) -> bool,
) {
    if map.len() >= MAX_REMEMBERED {
        map.retain(|_, kept| still_useful(kept));
        if map.len() >= MAX_REMEMBERED {
            map.clear();
        }
    }
    map.insert(id.clone(), value);
}

impl Drop for Firing {
    fn drop(&mut self) {
        self.set.lock().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the host noted another host's claim on the due row of
    /// `due_ms`, live at `now_ms`.
    fn claimed_elsewhere(firing: &Firing, due_ms: u64, now_ms: u64) -> bool {
        matches!(firing.noted_claim(due_ms), Some(Noted::Elsewhere { until_ms }) if until_ms > now_ms)
    }

    /// When the host's own noted claim on the due row of `due_ms` lapses.
    fn own_claim(firing: &Firing, due_ms: u64) -> Option<u64> {
        match firing.noted_claim(due_ms)? {
            Noted::Ours { until_ms } => Some(until_ms),
            Noted::Elsewhere { .. } => None,
        }
    }

    #[test]
    fn a_timer_taken_cannot_be_taken_again_until_released() {
        let in_flight = InFlight::new();
        let firing = in_flight.take("takedown", b"r1").expect("free");
        assert!(in_flight.take("takedown", b"r1").is_none());
        drop(firing);
        assert!(in_flight.take("takedown", b"r1").is_some());
    }

    #[test]
    fn timers_of_other_kinds_or_references_are_taken_independently() {
        let in_flight = InFlight::new();
        let _a = in_flight.take("takedown", b"r1").expect("free");
        let _b = in_flight
            .take("takedown", b"r2")
            .expect("another reference");
        let _c = in_flight.take("sweep", b"r1").expect("another kind");
    }

    #[test]
    fn a_claim_elsewhere_is_remembered_for_its_timer_at_any_later_row_until_it_lapses() {
        let in_flight = InFlight::new();
        let other = in_flight.clone();
        let firing = in_flight.take("takedown", b"r1").expect("free");
        assert!(!claimed_elsewhere(&firing, 100, 50));
        firing.remember_claim_elsewhere(100, 200, 50);
        drop(firing);
        let firing = other.take("takedown", b"r1").expect("released");
        assert!(claimed_elsewhere(&firing, 100, 199), "shared by clones");
        assert!(!claimed_elsewhere(&firing, 100, 200), "lapsed");
        assert!(
            claimed_elsewhere(&firing, 150, 60),
            "the holder's step moved the due row on"
        );
        assert!(!claimed_elsewhere(&firing, 150, 200), "lapsed there too");
        let another = other.take("takedown", b"r2").expect("free");
        assert!(!claimed_elsewhere(&another, 100, 60), "another timer");
    }

    #[test]
    fn the_hosts_own_claim_is_noted_for_its_due_row_apart_from_claims_elsewhere() {
        let in_flight = InFlight::new();
        let firing = in_flight.take("takedown", b"r1").expect("free");
        firing.remember_own_claim(100, 300, 50);
        assert_eq!(own_claim(&firing, 100), Some(300));
        firing.remember_own_claim(100, 300, 50);
        assert_eq!(own_claim(&firing, 101), None, "another due row");
        firing.remember_own_claim(100, 300, 50);
        assert!(
            !claimed_elsewhere(&firing, 100, 60),
            "ours is not elsewhere"
        );
        firing.remember_claim_elsewhere(200, 400, 60);
        assert_eq!(own_claim(&firing, 200), None, "another host's is not ours");
        firing.remember_own_claim(200, 500, 70);
        assert_eq!(own_claim(&firing, 200), Some(500));
        assert_eq!(own_claim(&firing, 200), None, "used up by the asking");
        assert!(!claimed_elsewhere(&firing, 200, 70));
    }

    #[test]
    fn claims_remembered_stay_bounded_and_lapsed_ones_go_first() {
        let in_flight = InFlight::new();
        let remember = |kind: &str, reference: &[u8], until: u64, now: u64| {
            let firing = in_flight.take(kind, reference).expect("free");
            firing.remember_claim_elsewhere(1, until, now);
        };
        for n in 0..MAX_REMEMBERED as u64 {
            // Every other one has lapsed by 1_000.
            let until = if n % 2 == 0 { 500 } else { 5_000 };
            remember("t", &n.to_le_bytes(), until, 0);
        }
        remember("t", b"new", 5_000, 1_000);
        assert_eq!(in_flight.remembered().len(), MAX_REMEMBERED / 2 + 1);
        let kept = |reference: &[u8]| {
            claimed_elsewhere(&in_flight.take("t", reference).expect("free"), 1, 1_000)
        };
        assert!(kept(&1u64.to_le_bytes()));
        assert!(kept(b"new"));
        // None lapsed: all are forgotten rather than grow past the bound.
        for n in 0..MAX_REMEMBERED as u64 {
            remember("u", &n.to_le_bytes(), 9_000, 1_000);
        }
        assert!(in_flight.remembered().len() <= MAX_REMEMBERED);
    }

    #[test]
    fn a_step_is_noted_for_every_worker_and_counts_from_its_end() {
        let in_flight = InFlight::new();
        let other = in_flight.clone();
        assert!(!in_flight.stepped_since("takedown", b"r1", 0));
        in_flight
            .take("takedown", b"r1")
            .expect("free")
            .note_stepped(500);
        assert!(
            other.stepped_since("takedown", b"r1", 400),
            "shared by clones"
        );
        assert!(other.stepped_since("takedown", b"r1", 500), "the same ms");
        assert!(
            !other.stepped_since("takedown", b"r1", 501),
            "read after it"
        );
        assert!(!other.stepped_since("takedown", b"r2", 0), "another timer");
        assert!(!other.stepped_since("sweep", b"r1", 0), "another kind");
    }

    #[test]
    fn steps_noted_stay_bounded_and_those_no_carry_can_need_go_first() {
        let in_flight = InFlight::new();
        let note = |reference: &[u8], now: u64| {
            in_flight
                .take("t", reference)
                .expect("free")
                .note_stepped(now);
        };
        for n in 0..MAX_REMEMBERED as u64 {
            // Every other one ended too long ago to matter at 10_000.
            let ended = if n % 2 == 0 { 1_000 } else { 9_950 };
            note(&n.to_le_bytes(), ended);
        }
        note(b"new", 10_000);
        assert_eq!(in_flight.stepped_record().len(), MAX_REMEMBERED / 2 + 1);
        assert!(in_flight.stepped_since("t", &1u64.to_le_bytes(), 9_950));
        assert!(in_flight.stepped_since("t", b"new", 10_000));
        for n in 0..MAX_REMEMBERED as u64 {
            note(&(n + 1_000_000).to_le_bytes(), 10_000);
        }
        assert!(in_flight.stepped_record().len() <= MAX_REMEMBERED);
    }

    #[test]
    fn clones_share_one_set() {
        let in_flight = InFlight::new();
        let other = in_flight.clone();
        let _held = in_flight.take("takedown", b"r1").expect("free");
        assert!(other.take("takedown", b"r1").is_none());
    }
}
