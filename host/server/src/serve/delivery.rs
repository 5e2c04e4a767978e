//! The delivery worker: delivers the invalidation outbox to the
//! configured webhook ([`crate::invalidation`]), at least once, for as
//! long as the server runs.
//!
//! A *pass* reads the whole outbox in key (planning) order, a page at a
//! time, and POSTs each entry that is due; a 2xx deletes it (a guarded
//! delete: only the entry as read goes), anything else records the
//! attempt — its count, its error, when to try again — and ends the
//! pass's deliveries. The pass still counts the rest, for
//! `custodian_invalidations_pending`.
//!
//! - **Back-off.** An entry that failed waits its own exponential
//!   back-off; and after a failure the worker waits the back-off of its
//!   failures in a row before it tries anything again, so a receiver that
//!   is down sees one attempt per back-off period, not one per entry. The
//!   first 2xx resets it: a receiver back after an outage gets everything
//!   within the longest back-off.
//! - **No head-of-line blocking.** The pass after a failure starts just
//!   after the failed entry (and wraps round to it), so an entry the
//!   receiver keeps refusing does not hold up the ones behind it.
//! - **At least once.** An entry is deleted only after a 2xx, in a batch
//!   that audits the delivery (`invalidation/delivered` by `host:NODE`); a
//!   host that dies between the POST and the delete (or whose delete
//!   fails) leaves it, and it is POSTed again with the same idempotency
//!   key.
//! - **Several hosts.** On a shared KV each delivery is first claimed (a
//!   guarded write of the entry's state naming this node, for the timeout
//!   plus [`CLAIM_MARGIN`]), and other hosts skip a live claim; a host
//!   restarted under the same node name takes its own claims back at
//!   once. The claim only saves duplicate POSTs: correctness rests on the
//!   guarded delete alone.
//! - **Prompt.** An idle worker looks again every [`IDLE_POLL`], so an
//!   entry is posted within that of being planned. Without a webhook it
//!   only counts the outbox, every [`CENSUS_POLL`].

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::metrics::Metrics;
use crate::invalidation::outbox::{self, OutboxError, Row};
use crate::invalidation::webhook::{self, Endpoint};
use crate::invalidation::{DeliverySettings, Entry};
use custodian_base::clock::Clock;
use custodian_kv::Kv;

/// Longest idle sleep with a webhook: a newly planned entry is posted
/// within this.
pub const IDLE_POLL: Duration = Duration::from_millis(500);

/// How often the outbox is counted when there is no webhook (only the
/// gauge needs it; acknowledgements lower it at once): a pass reads the
/// whole outbox, which a pull consumer may leave large.
pub const CENSUS_POLL: Duration = Duration::from_secs(5);

/// How much longer than a delivery's timeout its claim lasts: the
/// record of its outcome, and a loaded machine's scheduling delays.
pub const CLAIM_MARGIN: Duration = Duration::from_secs(10);

/// Pause after a pass failed on the KV: long enough not to spin on a
/// persistent fault.
const ERROR_PAUSE: Duration = Duration::from_secs(1);

/// Entries read per scan of a pass (with their state rows: two KV reads
/// per page).
const PASS_PAGE: u32 = 256;

/// What the worker needs from the server.
pub struct DeliveryParts {
    /// The durable KV holding the outbox.
    pub kv: Arc<dyn Kv>,
    /// "Now", for back-off and claims.
    pub clock: Arc<dyn Clock>,
    /// Where deliveries and the outbox's size are counted.
    pub metrics: Arc<Metrics>,
    /// This host's node name: its claims name it.
    pub node: String,
    /// Whether other hosts share the KV (and so the outbox): deliveries
    /// are claimed only then.
    pub shares_kv: bool,
}

/// The running worker.
pub struct Delivery {
    handle: JoinHandle<()>,
    stop: watch::Sender<bool>,
}

impl Delivery {
    /// Starts the worker on the current runtime; at shutdown a delivery in
    /// flight may finish within `drain`.
    pub fn start(parts: DeliveryParts, settings: DeliverySettings, drain: Duration) -> Self {
        let (stop, stopped) = watch::channel(false);
        let handle = tokio::spawn(run(Deliverer::new(parts, settings), stopped, drain));
        Self { handle, stop }
    }

    /// Stops the worker: a delivery in flight finishes within the drain
    /// period or is abandoned (its entry stays, and is delivered again).
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.handle.await;
    }
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Pass {
    /// Rows in the outbox as the pass read them.
    entries: u64,
    /// Of those, rows that do not decode (never delivered).
    corrupt: u64,
    /// Entries delivered (each with a 2xx).
    delivered: u64,
    /// A delivery failed, which ended the pass's deliveries.
    failed: bool,
    /// The earliest time an entry the pass left for later is due.
    next_due_ms: Option<u64>,
    /// Shutdown began during the pass, which stopped it.
    stopped: bool,
}

/// What became of one entry.
enum Attempt {
    Delivered,
    Failed,
    /// Another host claimed it first, or it changed or went meanwhile.
    Skipped,
}

/// The worker's state between passes.
struct Deliverer {
    kv: Arc<dyn Kv>,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    settings: DeliverySettings,
    node: String,
    /// How long a claim lasts, in ms; `None` when the KV is not shared.
    claim_ms: Option<u64>,
    /// Where the next pass starts: just after the entry whose delivery
    /// failed last.
    resume_after: Option<Vec<u8>>,
    /// Deliveries failed in a row, which space attempts at a failing
    /// receiver.
    failures_in_a_row: u32,
    /// Undecodable rows the last pass found, logged when it changes.
    corrupt: u64,
}

impl Deliverer {
    fn new(parts: DeliveryParts, settings: DeliverySettings) -> Self {
        let claim = settings.timeout + CLAIM_MARGIN;
        Self {
            kv: parts.kv,
            clock: parts.clock,
            metrics: parts.metrics,
            claim_ms: parts
                .shares_kv
                .then(|| u64::try_from(claim.as_millis()).unwrap_or(u64::MAX)),
            settings,
            node: parts.node,
            resume_after: None,
            failures_in_a_row: 0,
            corrupt: 0,
        }
    }

    /// One pass over the outbox; see the module documentation. Stops
    /// early, between deliveries, once `stopping` turns true.
    async fn pass(&mut self, stopping: &watch::Receiver<bool>) -> Result<Pass, OutboxError> {
        let mut pass = Pass::default();
        let webhook = self.settings.webhook.clone();
        let mut attempting = webhook.is_some();
        // After the failed entry to the end, then from the start through
        // it; the whole outbox in key order when nothing failed.
        let segments = match self.resume_after.take() {
            Some(key) => vec![(Some(key.clone()), None), (None, Some(key))],
            None => vec![(None, None)],
        };
        for (after, through) in segments {
            let mut cursor = after;
            'rows: loop {
                let page = outbox::page(self.kv.as_ref(), cursor.as_deref(), PASS_PAGE).await?;
                for row in &page.rows {
                    if through.as_ref().is_some_and(|last| row.key > *last) {
                        break 'rows;
                    }
                    pass.entries += 1;
                    let Ok(entry) = &row.entry else {
                        pass.corrupt += 1;
                        continue;
                    };
                    let Some(endpoint) = webhook.as_ref().filter(|_| attempting) else {
                        continue;
                    };
                    if *stopping.borrow() {
                        pass.stopped = true;
                        return Ok(pass);
                    }
                    let now = self.clock.now_ms();
                    let due = row.due_ms(&self.node);
                    if due > now {
                        pass.next_due_ms = Some(pass.next_due_ms.map_or(due, |d| d.min(due)));
                        continue;
                    }
                    match self.attempt(endpoint, row, entry, now).await? {
                        Attempt::Delivered => pass.delivered += 1,
                        Attempt::Failed => {
                            pass.failed = true;
                            attempting = false;
                            self.resume_after = Some(row.key.clone());
                        }
                        Attempt::Skipped => {}
                    }
                }
                match page.next {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
        }
        if pass.corrupt != self.corrupt {
            if pass.corrupt > 0 {
                tracing::warn!(
                    rows = pass.corrupt,
                    "the invalidation outbox holds rows that do not decode; they are never \
                     delivered (GET /v1/invalidations lists them as corrupt; acknowledge them \
                     to drop them)"
                );
            }
            self.corrupt = pass.corrupt;
        }
        Ok(pass)
    }

    /// Delivers `entry` (the row `row`) to `endpoint`, claimed first on a
    /// shared KV.
    async fn attempt(
        &mut self,
        endpoint: &Endpoint,
        row: &Row,
        entry: &Entry,
        now: u64,
    ) -> Result<Attempt, OutboxError> {
        let kv = self.kv.as_ref();
        let row = match self.claim_ms {
            Some(ttl) => match outbox::claim(kv, row, &self.node, now.saturating_add(ttl)).await? {
                Some(claimed) => claimed,
                None => return Ok(Attempt::Skipped),
            },
            None => row.clone(),
        };
        let key = entry.idempotency_key();
        match webhook::post(endpoint, self.settings.timeout, entry).await {
            Ok(status) => {
                if self.failures_in_a_row > 0 {
                    tracing::info!(%endpoint, "the invalidation webhook takes deliveries again");
                }
                self.failures_in_a_row = 0;
                self.metrics.invalidation_delivery(true);
                // A 2xx, and only then: the entry goes. An error here
                // leaves it, to be delivered again with the same key.
                let detail = format!("delivered to {endpoint} (HTTP {status})");
                let actor = format!("host:{}", self.node);
                let now = self.clock.now_ms();
                if !outbox::delivered(kv, &row, &actor, now, detail).await? {
                    tracing::debug!(%key, "delivered an entry already gone from the outbox");
                }
                tracing::debug!(%key, status, "invalidation delivered");
                Ok(Attempt::Delivered)
            }
            Err(error) => {
                self.failures_in_a_row = self.failures_in_a_row.saturating_add(1);
                self.metrics.invalidation_delivery(false);
                let attempts = row.state.attempts.saturating_add(1);
                let next = self
                    .clock
                    .now_ms()
                    .saturating_add(self.settings.backoff.after_ms(attempts));
                let message = error.to_string();
                if self.failures_in_a_row == 1 {
                    tracing::warn!(
                        %endpoint, %key, attempts, error = %message,
                        "an invalidation was not delivered; retrying with back-off"
                    );
                } else {
                    tracing::debug!(%endpoint, %key, attempts, error = %message, "still failing");
                }
                outbox::failed(kv, &row, &message, next).await?;
                Ok(Attempt::Failed)
            }
        }
    }

    /// How long to wait after `pass`, which ended at `now`.
    fn wait_after(&self, pass: &Pass, now: u64) -> Duration {
        if self.settings.webhook.is_none() {
            return CENSUS_POLL;
        }
        if pass.failed {
            return self.settings.backoff.after(self.failures_in_a_row);
        }
        if pass.delivered > 0 {
            // More may have been planned meanwhile: look again at once.
            return Duration::ZERO;
        }
        pass.next_due_ms
            .map_or(IDLE_POLL, |due| {
                Duration::from_millis(due.saturating_sub(now))
            })
            .min(IDLE_POLL)
    }
}

async fn run(mut deliverer: Deliverer, mut stopped: watch::Receiver<bool>, drain: Duration) {
    loop {
        if *stopped.borrow() {
            return;
        }
        let stopping = stopped.clone();
        let result = {
            let pass = deliverer.pass(&stopping);
            tokio::pin!(pass);
            tokio::select! {
                result = &mut pass => result,
                _ = stopped.changed() => match tokio::time::timeout(drain, &mut pass).await {
                    Ok(result) => result,
                    Err(_) => {
                        tracing::warn!(
                            "an invalidation delivery was still in flight after the drain \
                             period; abandoned (its entry stays and is delivered again)"
                        );
                        return;
                    }
                },
            }
        };
        let pass = match result {
            Ok(pass) => pass,
            Err(error) => {
                tracing::error!(
                    "the invalidation delivery pass failed: {:#}",
                    anyhow::Error::new(error)
                );
                pause(&mut stopped, ERROR_PAUSE).await;
                continue;
            }
        };
        if pass.stopped {
            return;
        }
        deliverer
            .metrics
            .invalidations_pending(pass.entries.saturating_sub(pass.delivered));
        let wait = deliverer.wait_after(&pass, deliverer.clock.now_ms());
        if !wait.is_zero() {
            pause(&mut stopped, wait).await;
        }
    }
}

async fn pause(stopped: &mut watch::Receiver<bool>, wait: Duration) {
    tokio::select! {
        () = tokio::time::sleep(wait) => {}
        _ = stopped.changed() => {}
    }
}

#[cfg(test)]
mod tests;
