//! `custodian serve`: the long-running host.
//!
//! One process holds the data directory's KV and the named object stores,
//! runs the timer workers ([`workers`]) and the delivery of cache
//! invalidations ([`delivery`]), serves the HTTP API ([`http`]) and lets
//! an operator replace a policy plugin while it runs (the plugin set,
//! [`custodian_runtime::plugin_set`], assembled by [`crate::node`]).
//!
//! # Shutdown
//!
//! On SIGTERM or SIGINT the server stops accepting connections and reports
//! not-ready, lets requests in flight finish, stops the workers between
//! steps (a step still running after the drain period is abandoned: its
//! result is dropped before commit, so it commits nothing and its timer
//! fires again later), lets a webhook delivery in flight finish within
//! the same period (one abandoned leaves its entry, delivered again after
//! a restart) and exits 0. Every commit is durable when it is
//! acknowledged, so there is nothing left to flush but the log.

pub mod delivery;
pub mod http;
pub mod jobs;
pub mod metered;
pub mod metrics;
pub mod probation;
pub mod s3;
#[cfg(test)]
mod test_host;
pub(crate) mod user_metadata;
pub mod workers;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use custodian_base::clock::Clock;
use custodian_core::decisions::access::AccessJudge;
use custodian_core::principals::Principals;
use custodian_kv::Kv;
use custodian_object::ObjectStore;
use custodian_runtime::plugin_set::PluginSet;
use custodian_runtime::policy::requests::FirstSteps;

pub use http::auth::{ReadAccess, Token};

/// Who may call the API, and who decides what they may do.
#[derive(Clone)]
pub struct Auth {
    /// The principals and their credentials.
    pub principals: Arc<Principals>,
    /// Whether read routes need a credential.
    pub read_access: ReadAccess,
    /// The access policy asked about every request; `None` turns access
    /// checks off (`[server] access_checks = false`): every authenticated
    /// principal may then do anything, as with one shared token.
    pub access: Option<Arc<dyn AccessJudge>>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("read_access", &self.read_access)
            .field("access_checks", &self.access.is_some())
            .finish_non_exhaustive()
    }
}

/// Bounds on what one request may ask of the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestLimits {
    /// Largest object body a `PUT` may send, in bytes: a body is held in
    /// memory to be checked against its CRC before it is published, so
    /// this bounds the memory one request can pin.
    pub max_object_bytes: u64,
    /// Largest plugin a swap may upload, in bytes.
    pub max_plugin_bytes: u64,
    /// Most request-body bytes held at once across all requests (see
    /// [`http::Bodies`]); at least the largest single body, so every
    /// allowed upload can be taken when the server is otherwise idle.
    pub bodies_in_flight_bytes: u64,
    /// Longest pause between two pieces of one request body.
    pub body_timeout: Duration,
    /// Largest plugin answer copied into a response, in bytes (a
    /// takedown's status): the answer is serialized and sent on every
    /// request for it, so a plugin cannot make each one cost megabytes.
    pub max_plugin_answer_bytes: u64,
}

/// The default of [`RequestLimits::bodies_in_flight_bytes`]: four
/// largest-size uploads at once, or many smaller ones.
pub const DEFAULT_BODIES_IN_FLIGHT_BYTES: u64 = 256 << 20;

impl RequestLimits {
    /// The bodies' shared budget these limits set, its refusals counted
    /// in `metrics`.
    pub fn bodies(&self, metrics: Arc<metrics::Metrics>) -> http::Bodies {
        http::Bodies::new(self.bodies_in_flight_bytes, self.body_timeout, metrics)
    }
}

impl Default for RequestLimits {
    fn default() -> Self {
        Self {
            max_object_bytes: 64 << 20,
            max_plugin_bytes: 64 << 20,
            bodies_in_flight_bytes: DEFAULT_BODIES_IN_FLIGHT_BYTES,
            // Far longer than any pause of a client that is sending, short
            // enough that a stalled upload gives its bytes back soon.
            body_timeout: Duration::from_secs(30),
            // A status is a few hundred bytes; a thousandfold of room.
            max_plugin_answer_bytes: 256 << 10,
        }
    }
}

/// Everything the API and the workers share.
pub struct Host {
    /// The durable KV.
    pub kv: Arc<dyn Kv>,
    /// "Now" for every decision.
    pub clock: Arc<dyn Clock>,
    /// The named object stores (`serving`, `preserved`, and any other the
    /// configuration names), each counted by [`metrics`].
    pub stores: BTreeMap<String, Arc<dyn ObjectStore>>,
    /// The loaded policy plugins, swappable.
    pub plugins: Arc<PluginSet>,
    /// Counters and histograms for `/metrics`.
    pub metrics: Arc<metrics::Metrics>,
    /// Purge and verification jobs.
    pub jobs: Arc<jobs::Jobs>,
    /// Who may call.
    pub auth: Auth,
    /// Per-request bounds.
    pub limits: RequestLimits,
    /// The request bodies held, within their shared budget.
    pub bodies: http::Bodies,
    /// Whether the host takes new work.
    pub readiness: Readiness,
    /// Wakes idle timer workers: a request just scheduled a timer.
    pub wake_workers: workers::Wake,
    /// How filings hand their first steps to this host's workers; `None`
    /// where no workers run here (filings then defer their first steps
    /// for any host to take).
    pub first_steps: Option<FirstSteps>,
}

/// Whether the host takes new work: set at start, cleared when shutdown
/// begins so `/readyz` turns load balancers away while requests drain.
#[derive(Debug)]
pub struct Readiness(AtomicBool);

impl Default for Readiness {
    fn default() -> Self {
        Self(AtomicBool::new(true))
    }
}

impl Readiness {
    /// Whether the host takes new work.
    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// Marks the host as draining.
    pub fn begin_shutdown(&self) {
        self.0.store(false, Ordering::Release);
    }
}

impl Host {
    /// The store named `name`.
    ///
    /// # Errors
    /// A 404 naming the stores there are.
    pub fn store(&self, name: &str) -> Result<&Arc<dyn ObjectStore>, http::ApiError> {
        self.stores.get(name).ok_or_else(|| {
            http::ApiError::not_found(format!(
                "no store named {name:?} (the stores are: {})",
                self.stores.keys().cloned().collect::<Vec<_>>().join(", ")
            ))
        })
    }
}
