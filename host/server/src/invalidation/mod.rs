//! Cache invalidations: the host's side of the outbox the takedown policy
//! writes (KV partition [`PARTITION`], the contract's layout:
//! [`custodian_contract::invalidation`]). The policy plans one entry per
//! repository holding content a request took down; the host delivers
//! each entry, at least once, and deletes it only once delivered or
//! acknowledged:
//!
//! - to a **webhook** ([`webhook`]): `custodian serve` POSTs every entry
//!   to the configured URL (the worker is
//!   [`crate::serve::delivery`]); a 2xx answer deletes it, anything else
//!   is recorded and retried with exponential back-off ([`backoff`]),
//!   without end;
//! - or to a **pull consumer** ([`outbox`]): the feed
//!   (`GET /v1/invalidations`, `custodian invalidations list`) lists the
//!   entries in planning order, and an acknowledgement
//!   (`POST /v1/invalidations/ack`, `custodian invalidations ack`)
//!   deletes them.
//!
//! Every delivery of an entry carries the same idempotency key
//! ([`custodian_contract::invalidation::Entry::idempotency_key`]): a host
//! killed between a POST and the delete delivers the entry again, and the
//! receiver drops the duplicate by its key.
//!
//! # Delivery state (partition [`STATE_PARTITION`], the host's own)
//!
//! | key | value |
//! |---|---|
//! | the entry's key, as in [`PARTITION`] | format byte `1`, then [`outbox::State`] as JSON |
//!
//! A row exists once an entry was attempted (or claimed) and goes with
//! the entry, in the same batch, whoever deletes it.

pub mod backoff;
pub mod outbox;
pub mod webhook;

use std::time::Duration;

pub use custodian_contract::invalidation::{Entry, PARTITION};

use backoff::Backoff;
use webhook::Endpoint;

/// The host's partition of delivery state: attempts, the next attempt's
/// time, the last error and claims, one row per attempted entry.
pub const STATE_PARTITION: &str = "custodian.invalidation";

/// How long one delivery may take by default, in ms.
pub const DEFAULT_TIMEOUT_MS: u64 = 5_000;
/// Longest a delivery may be allowed, in ms: the worker delivers one
/// entry at a time, so a receiver that answers slowly holds every other
/// entry back for this long per attempt, and a claim on the entry lasts
/// this long plus a margin.
pub const MAX_TIMEOUT_MS: u64 = 60_000;
/// The back-off after a first failure by default, in ms.
pub const DEFAULT_INITIAL_BACKOFF_MS: u64 = 500;
/// The longest back-off by default, in ms: a receiver back after an
/// outage gets everything within about this long.
pub const DEFAULT_MAX_BACKOFF_MS: u64 = 60_000;
/// Longest back-off a deployer may set, in ms: an hour. Delivery never
/// gives up, so this is also how late a receiver may learn of a takedown
/// after coming back.
pub const MAX_MAX_BACKOFF_MS: u64 = 3_600_000;

/// How the host delivers the outbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliverySettings {
    /// Where entries are POSTed; `None`: nowhere, they wait for a pull
    /// consumer's acknowledgement.
    pub webhook: Option<Endpoint>,
    /// How long one delivery may take: connecting, sending, and the
    /// answer's status line and headers.
    pub timeout: Duration,
    /// How long to wait after failures.
    pub backoff: Backoff,
}

impl Default for DeliverySettings {
    fn default() -> Self {
        Self {
            webhook: None,
            timeout: Duration::from_millis(DEFAULT_TIMEOUT_MS),
            backoff: Backoff::new(
                Duration::from_millis(DEFAULT_INITIAL_BACKOFF_MS),
                Duration::from_millis(DEFAULT_MAX_BACKOFF_MS),
            ),
        }
    }
}
