//! The due rows a tick left for later, carried into the worker's next
//! ticks so that they fire without a new scan.
//!
//! A kind with a per-tick cap (takedown: one step a tick, as the seed's
//! worker does) leaves most of a scanned page unfired, and the next tick,
//! straight after, scanned the same rows again: one scan per step, the
//! largest of the host's own KV reads per step on etcd (`scale_out`). So
//! the rows a cap left are kept with the time their page was read, and
//! the next tick fires from them. It scans instead when they have run
//! out, when none of them could be fired, or when they are older than
//! [`MAX_AGE_MS`].
//!
//! Why it is safe: a carried row is a due row as a scan read it, and the
//! tick handles it exactly as a scanned one (the in-flight set, claims,
//! the re-read of a row another worker may have stepped, the guard on the
//! timer row at commit). A tick never relied on its page being fresh: its
//! own earlier steps take time too. Rows of timers another worker of this
//! host has stepped since the page was read are skipped without a read
//! ([`InFlight::stepped_since`](super::in_flight::InFlight::stepped_since)):
//! their row has moved.
//!
//! A worker also carries the due row its own step just wrote, when the
//! timer's next step is due within [`MAX_AGE_MS`] (a takedown with work
//! left is due at once): before, only a scan could find it, so each step
//! of a busy timer cost a scan by some worker, and a host's scans kept
//! pace with its steps. The row is as the worker's commit left it; a
//! later step of the timer by another worker of the host makes it stale
//! as for any carried row, and it fires no sooner than it is due.
//!
//! A host's workers share the first page of due rows the last of them
//! scanned ([`LatestPage`]). A worker with nothing carried fires from it,
//! while it is fresh, as from carried rows, and scans only when that
//! fires nothing or it is too old. Each worker loop of a busy host
//! scanned every [`MAX_AGE_MS`] on its own, so the host's scans grew with
//! its loops (8 by default) and a cluster's with its hosts; now a busy
//! host scans about once in that time, whatever its loops.
//!
//! A tick that fired a step from the first page of due rows (shared or
//! scanned) reads the pages past it only when it makes the host's deep
//! pass, which one tick of the host makes at most once every
//! [`DEEP_PASS_MS`] ([`DeepPasses`]). Those pages hold a capped kind's
//! backlog (a takedown fires one step a tick, and the rest of its due
//! rows are only carried) and any timer of another kind that fell due
//! behind it. Every such tick used to read them all, so each step of a
//! busy host cost a scan for every page of due rows behind the first:
//! 1.00–1.08 scans a step with 240 takedowns in flight against 0.43–0.47
//! with 60 (`scale_out -- 240 3 workers=8`, one host; 0.49 with 240
//! since). A tick asks for the pass by the clock when it gets there, not
//! at its start: its step may have taken longer than a window on a
//! loaded host, and asked by a start before the latest pass began, it
//! read that pass as one from a clock gone back and made its own (with
//! three hosts, 70–90 passes a host in a 12 s run instead of ~20). A due
//! row past the first page is still read within
//! [`DEEP_PASS_MS`] by the next tick that fires from a first page; and a
//! tick that fired nothing from the first page reads on, as before, so a
//! host never idles while due rows it could fire lie further on.
//!
//! What a carry delays, by at most [`MAX_AGE_MS`]: a timer that became
//! due after its page was read fires at the first scan after; and a
//! timer cancelled meanwhile may still be fired from its old row, which
//! the guard then refuses to commit (a lost step, as when two workers
//! race).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use custodian_kv::Page;

/// How long rows are carried after their page was read. Long enough for
/// several steps (a takedown step takes milliseconds to tens of them), so
/// most steps need no scan; short enough that a newly due timer of any
/// kind waits no longer than this for the next scan.
pub(super) const MAX_AGE_MS: u64 = 100;

/// Least time between two of a host's deep passes (see the module
/// documentation): the idle poll ([`super::IDLE_POLL_MS`]), so a timer
/// due behind a capped kind's backlog waits no longer than one an idle
/// host would find at its next poll. A pass reads a page per 64 due
/// rows; at [`MAX_AGE_MS`] apart, 240 takedowns in flight cost each host
/// ~40 scans a second.
pub(super) const DEEP_PASS_MS: u64 = super::IDLE_POLL_MS;

/// Most rows carried. A tick over thousands of due timers of a capped
/// kind leaves thousands; the rest wait for the next scan. A due row is a
/// key of at most a few hundred bytes and a small value, so a carry stays
/// within a few hundred KiB.
pub(super) const MAX_ROWS: usize = 1_024;

/// A due row a worker holds: as a scan read it, or as the worker's own
/// step wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Row {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    /// When it was read; for a row the worker's own step wrote, just after
    /// that step's end as the host noted it, so that only a later step of
    /// the timer makes it stale
    /// ([`InFlight::stepped_since`](super::in_flight::InFlight::stepped_since)).
    pub read_at_ms: u64,
    /// Written by the worker's own step: the row is as that commit left
    /// it unless a later step of the host moved it.
    pub written: bool,
}

impl Row {
    /// The rows of a page read at `read_at_ms`.
    pub fn read(entries: Vec<(Vec<u8>, Vec<u8>)>, read_at_ms: u64) -> Vec<Row> {
        entries
            .into_iter()
            .map(|(key, value)| Row {
                key,
                value,
                read_at_ms,
                written: false,
            })
            .collect()
    }
}

/// Due rows left for a later tick, and when the earliest of them was read.
#[derive(Debug, Default)]
pub(super) struct Carry {
    pub rows: Vec<Row>,
    pub read_at_ms: u64,
}

impl Carry {
    /// Adds `row`, unless [`MAX_ROWS`] are carried already.
    pub fn push(&mut self, row: Row) {
        if self.rows.len() >= MAX_ROWS {
            return;
        }
        self.read_at_ms = if self.rows.is_empty() {
            row.read_at_ms
        } else {
            self.read_at_ms.min(row.read_at_ms)
        };
        self.rows.push(row);
    }

    /// Keeps only the rows the worker's own steps wrote: for a tick that
    /// fired nothing from its carried rows and scans instead, since the
    /// scan reads the others again but not these, which are not due yet.
    pub fn keep_written(&mut self) {
        let rows = std::mem::take(&mut self.rows);
        *self = Carry::default();
        for row in rows.into_iter().filter(|row| row.written) {
            self.push(row);
        }
    }
}

/// A worker's carried rows, between its ticks.
#[derive(Debug, Default)]
pub(super) struct Carried(Mutex<Option<Carry>>);

impl Carried {
    /// The rows carried, taken, if there are any and they are fresh at
    /// `now_ms`.
    pub fn take(&self, now_ms: u64) -> Option<Carry> {
        self.lock()
            .take()
            .filter(|carry| !carry.rows.is_empty())
            .filter(|carry| now_ms.saturating_sub(carry.read_at_ms) <= MAX_AGE_MS)
    }

    /// Keeps `carry` for the next tick, in place of anything carried.
    pub fn keep(&self, carry: Carry) {
        *self.lock() = (!carry.rows.is_empty()).then_some(carry);
    }

    /// When the earliest row the worker's own steps wrote is due, of
    /// those carried (fresh or not; a row with a corrupt key is left to
    /// the tick to report).
    pub fn earliest_written_due(&self) -> Option<u64> {
        self.lock()
            .as_ref()?
            .rows
            .iter()
            .filter(|row| row.written)
            .filter_map(|row| super::parse_due_key(&row.key).ok())
            .map(|(due_ms, _, _)| due_ms)
            .min()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Carry>> {
        // Replaced whole; a panic cannot leave it half-changed.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The first page of due rows a worker of the host scanned last, and when
/// it was read: shared by the host's workers (a clone each) through their
/// in-flight set, which every worker of a host shares.
#[derive(Debug, Clone, Default)]
pub(super) struct LatestPage(Arc<Mutex<Option<(Page, u64)>>>);

impl LatestPage {
    /// Shares `page`, read at `read_at_ms`, in place of the one before.
    pub fn publish(&self, page: &Page, read_at_ms: u64) {
        *self.lock() = Some((page.clone(), read_at_ms));
    }

    /// A copy of the page shared last and when it was read, if it is
    /// fresh at `now_ms` (as carried rows must be).
    pub fn fresh(&self, now_ms: u64) -> Option<(Page, u64)> {
        self.lock()
            .as_ref()
            .filter(|(_, read_at_ms)| now_ms.saturating_sub(*read_at_ms) <= MAX_AGE_MS)
            .cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(Page, u64)>> {
        // Replaced whole; a panic cannot leave it half-changed.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// When a worker of the host last began reading past the first page of
/// due rows, shared like [`LatestPage`].
#[derive(Debug, Clone)]
pub(super) struct DeepPasses(Arc<AtomicU64>);

impl Default for DeepPasses {
    fn default() -> Self {
        // No pass yet: any now is more than a window from it, so the
        // first tick to ask makes one.
        Self(Arc::new(AtomicU64::new(u64::MAX)))
    }
}

impl DeepPasses {
    /// Whether the caller makes the host's deep pass at `now_ms`: none
    /// began within [`DEEP_PASS_MS`] of it, before or after (the clock
    /// gone back by more). At most one caller of a window gets `true`.
    pub fn begin(&self, now_ms: u64) -> bool {
        let mut last = self.0.load(Ordering::Relaxed);
        loop {
            // Inside the window on either side of the latest pass: another
            // loop may read the clock a moment after this caller and ask
            // first. Only a clock gone back by more than a window (or no
            // pass yet, `u64::MAX`) begins one early.
            if now_ms.abs_diff(last) < DEEP_PASS_MS {
                return false;
            }
            match self
                .0
                .compare_exchange_weak(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(seen) => last = seen,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(key: &[u8], read_at_ms: u64) -> Row {
        Row {
            key: key.to_vec(),
            value: b"v".to_vec(),
            read_at_ms,
            written: false,
        }
    }

    #[test]
    fn carried_rows_are_taken_once_and_only_while_fresh() {
        let carried = Carried::default();
        let mut carry = Carry::default();
        carry.push(row(b"k1", 1_000));
        carry.push(row(b"k2", 990));
        assert_eq!(carry.read_at_ms, 990, "the earliest page counts");
        carried.keep(carry);
        let taken = carried.take(990 + MAX_AGE_MS).expect("fresh");
        assert_eq!(taken.rows.len(), 2);
        assert!(carried.take(990).is_none(), "taken once");
        carried.keep(taken);
        assert!(carried.take(991 + MAX_AGE_MS).is_none(), "too old");
        carried.keep(Carry::default());
        assert!(carried.take(0).is_none(), "nothing to carry");
    }

    #[test]
    fn only_rows_the_workers_own_steps_wrote_bound_its_idle_wait() {
        let carried = Carried::default();
        assert_eq!(carried.earliest_written_due(), None, "nothing carried");
        let mut carry = Carry::default();
        let written = |due: u64, reference: &[u8]| Row {
            written: true,
            ..row(&super::super::due_key(due, "kind", reference), 1_000)
        };
        carry.push(row(&super::super::due_key(900, "kind", b"scanned"), 1_000));
        carry.push(written(1_003, b"a"));
        carry.push(written(1_001, b"b"));
        carried.keep(carry);
        assert_eq!(carried.earliest_written_due(), Some(1_001));
    }

    #[test]
    fn the_latest_page_is_shared_by_clones_while_fresh_and_replaced_by_the_next() {
        let latest = LatestPage::default();
        let other = latest.clone();
        assert!(other.fresh(1_000).is_none(), "nothing scanned yet");
        let page = |key: &[u8]| Page {
            entries: vec![(key.to_vec(), b"v".to_vec())],
            next: None,
        };
        latest.publish(&page(b"k1"), 1_000);
        assert_eq!(other.fresh(1_000 + MAX_AGE_MS), Some((page(b"k1"), 1_000)));
        assert_eq!(
            other.fresh(1_000),
            Some((page(b"k1"), 1_000)),
            "not used up"
        );
        assert!(other.fresh(1_001 + MAX_AGE_MS).is_none(), "too old");
        other.publish(&page(b"k2"), 1_050);
        assert_eq!(latest.fresh(1_100), Some((page(b"k2"), 1_050)));
    }

    #[test]
    fn a_carry_holds_at_most_its_bound() {
        let mut carry = Carry::default();
        for n in 0..MAX_ROWS as u64 + 10 {
            carry.push(row(&n.to_be_bytes(), 1_000));
        }
        assert_eq!(carry.rows.len(), MAX_ROWS);
        assert_eq!(
            carry.rows.last().unwrap().key,
            (MAX_ROWS as u64 - 1).to_be_bytes()
        );
    }

    #[test]
    fn one_deep_pass_begins_a_window_either_side_of_it_and_a_clock_gone_back_a_window_begins_another()
     {
        let passes = DeepPasses::default();
        assert!(passes.begin(1_000), "the first");
        assert!(!passes.begin(1_000), "the same instant");
        assert!(!passes.begin(1_000 + DEEP_PASS_MS - 1), "within the window");
        let next = 1_000 + DEEP_PASS_MS;
        assert!(passes.begin(next), "a window on");
        assert!(
            !passes.begin(next - DEEP_PASS_MS + 1),
            "a caller a little behind the latest pass (its tick began before it)"
        );
        assert!(
            passes.begin(next - DEEP_PASS_MS),
            "the clock went back a window"
        );
        assert!(!passes.begin(next - DEEP_PASS_MS + 1));
    }
}
