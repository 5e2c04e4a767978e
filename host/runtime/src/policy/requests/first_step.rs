//! A serving host's first step of a request it files: due at once, and
//! taken by this host's workers as soon as the filing's denial work is
//! over.
//!
//! A filer outside a serving host (the CLI) defers the first step by
//! [`super::SETTLE_WITHIN`] and moves it to "now" with [`super::start`]
//! once its denial work ([`super::settle`]) ends, so that no worker's step
//! races that work (a step does the same denial work, and the racing side
//! loses at commit and backs off). That costs a transaction of its own
//! per filing, and on a KV that hosts share another: the first step's
//! claim, written by whichever host's worker finds the timer first.
//!
//! A serving host knows its workers, so its filings do better
//! ([`FirstSteps`]): the filing's own commit schedules the first step at
//! once, and
//! - holds the timer from the host's own workers until the filer releases
//!   it ([`custodian_core::timers::in_flight::InFlight::hold`]);
//! - on a shared KV, claims the step for this host in the same commit,
//!   until [`claim_until`] ([`custodian_core::timers::claim::claim_created`]),
//!   so other hosts' workers keep away too;
//! - on release, notes that claim for the host's workers, so the first of
//!   them to find the timer fires it without reading the due row and the
//!   claim again.
//!
//! Nothing else changes for the step: a filer that dies holding the timer
//! leaves it to the other hosts once the claim lapses (after at most as
//! long as a deferred step would wait, or a crashed claimer's step), and
//! its own host's workers take it as soon as the hold is gone. Two
//! filings of one keyed request race as before: only one commits, and
//! the other (answered "exists") moves a deferred timer with
//! [`super::start`] in case the committed filing was a CLI's.

use custodian_core::timers::claim::{self, ClaimConfig};
use custodian_core::timers::in_flight::{Hold, InFlight};
use custodian_kv::Batch;

use super::SETTLE_WITHIN;
use crate::policy::takedown::KIND;

/// What a serving host's filings need to take their first steps: its
/// workers' shared in-flight set, and their claim configuration when
/// hosts share the KV.
#[derive(Debug, Clone)]
pub struct FirstSteps {
    /// The host's workers' in-flight set.
    pub in_flight: InFlight,
    /// How the host's workers claim steps; `None` for a host alone on its
    /// KV, which has nobody to keep away.
    pub claim: Option<ClaimConfig>,
}

impl FirstSteps {
    /// Holds request `id`'s timer from the host's workers for a filing
    /// (`None` when a worker is firing it: a replayed filing of a request
    /// already being stepped, which files the way the CLI does).
    pub fn hold(&self, id: &[u8; 32]) -> Option<Held> {
        Some(Held {
            hold: self.in_flight.hold(KIND, id)?,
            claim: self.claim.clone(),
        })
    }
}

/// A filing's hold on its request's first step ([`FirstSteps::hold`]);
/// dropping it releases the timer to the host's workers with no note.
#[derive(Debug)]
pub struct Held {
    hold: Hold,
    claim: Option<ClaimConfig>,
}

impl Held {
    /// Adds to `batch`, the filing's commit at `now_ms` that schedules the
    /// first step at once, this host's claim on that step (when hosts
    /// share the KV).
    pub(super) fn claim(&self, batch: &mut Batch, id: &[u8; 32], now_ms: u64) {
        if let Some(config) = &self.claim {
            let until = claim_until(config, now_ms);
            batch
                .writes
                .push(claim::claim_created(config, KIND, id, now_ms, until));
        }
    }

    /// Releases the timer to the host's workers once the filing at
    /// `filed_ms` committed and its denial work is over, noting the claim
    /// its commit wrote, if any (see the module doc).
    pub fn release_filed(self, filed_ms: u64, now_ms: u64) {
        match &self.claim {
            Some(config) => {
                let until = claim_until(config, filed_ms);
                self.hold.release_claimed(filed_ms, until, now_ms);
            }
            None => drop(self.hold),
        }
    }
}

/// Until when a filing at `now_ms` claims its first step: as long as a
/// step claim lasts, and at least as long as the filer's denial work may
/// run ([`SETTLE_WITHIN`]), so the claim still has half its life left when
/// that work ends quickly (the worker then needs no new claim), and a
/// filer that dies mid-filing delays the step no longer than a deferred
/// step or a crashed claimer would.
fn claim_until(config: &ClaimConfig, now_ms: u64) -> u64 {
    let settle_ms = u64::try_from(SETTLE_WITHIN.as_millis()).unwrap_or(u64::MAX);
    now_ms.saturating_add(config.ttl_ms.max(settle_ms))
}
