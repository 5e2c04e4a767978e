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

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

/// A timer's identity: its kind and reference.
type TimerId = (String, Vec<u8>);

/// The set of timers being fired, shared by a host's workers (clone it
/// into each; see [`super::Worker::share_in_flight`]).
#[derive(Debug, Clone, Default)]
pub struct InFlight {
    firing: Arc<Mutex<HashSet<TimerId>>>,
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

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<TimerId>> {
        // The set is only inserted into and removed from; a panic while
        // it was held cannot leave it half-changed.
        self.firing.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One timer taken for firing; released when dropped.
#[derive(Debug)]
pub(crate) struct Firing {
    set: InFlight,
    id: TimerId,
}

impl Drop for Firing {
    fn drop(&mut self) {
        self.set.lock().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn clones_share_one_set() {
        let in_flight = InFlight::new();
        let other = in_flight.clone();
        let _held = in_flight.take("takedown", b"r1").expect("free");
        assert!(other.take("takedown", b"r1").is_none());
    }
}
