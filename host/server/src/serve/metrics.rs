//! The server's metrics, rendered as Prometheus text for `/metrics`.
//!
//! Counters are keyed by their labels in ordered maps, so the output is
//! stable (families and series always in the same order) and a scrape
//! costs one pass. Label values come from the server itself (routes as
//! matched, plugin actors, store names, fixed outcome names), never from
//! a request's raw path, so the number of series stays bounded.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

use axum::http::{Method, StatusCode};

use custodian_core::timers::governor::Quarantine;
use custodian_core::timers::{FireOutcome, FiredTimer};
use custodian_runtime::plugin_set::SetEvents;

/// Histogram bucket bounds, in seconds: from a cached read to a step at
/// its time limit.
const BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// A latency histogram with [`BUCKETS`].
#[derive(Debug, Clone, Default)]
struct Histogram {
    /// Observations at or below each bound (not cumulative; summed when
    /// rendered).
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        if let Some(i) = BUCKETS.iter().position(|bound| seconds <= *bound) {
            self.counts[i] += 1;
        }
        self.count += 1;
        self.sum += seconds;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let mut cumulative = 0;
        let sep = if labels.is_empty() { "" } else { "," };
        for (bound, count) in BUCKETS.iter().zip(self.counts) {
            cumulative += count;
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {cumulative}"
            );
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let braces = |l: &str| {
            if l.is_empty() {
                String::new()
            } else {
                format!("{{{l}}}")
            }
        };
        let _ = writeln!(out, "{name}_sum{} {}", braces(labels), self.sum);
        let _ = writeln!(out, "{name}_count{} {}", braces(labels), self.count);
    }
}

/// Everything counted, under one lock: each update is a map lookup, far
/// cheaper than the request or step it counts.
#[derive(Default)]
struct Families {
    http_requests: BTreeMap<(String, String, u16), u64>,
    http_latency: BTreeMap<(String, String), Histogram>,
    steps: BTreeMap<(String, &'static str), u64>,
    step_latency: BTreeMap<String, Histogram>,
    step_failures: BTreeMap<(String, &'static str), u64>,
    store_calls: BTreeMap<(String, &'static str), u64>,
    store_errors: BTreeMap<(String, &'static str), u64>,
    timer_lag: Histogram,
    /// Quarantines declared by this host, by plugin and timer kind.
    quarantines: BTreeMap<(String, String), u64>,
    /// Due timers skipped because their plugin is quarantined.
    paused_steps: u64,
    /// Verdicts on plugins failing their probation, by world and what
    /// became of them (`rolled_back`, `alerted`, `failed`).
    rollbacks: BTreeMap<(String, &'static str), u64>,
    swaps: BTreeMap<(String, &'static str), u64>,
    /// Whether this host runs exactly the shared plugin set (1) or not
    /// (0); a gauge, so an alert can fire on a host that cannot follow.
    in_sync: u64,
    kv_calls: BTreeMap<&'static str, u64>,
    kv_errors: BTreeMap<&'static str, u64>,
    kv_batch: BatchSizes,
    /// Access decisions by action, principal and outcome. Principals are
    /// the deployer's (a bounded set), never a request's claim.
    access: BTreeMap<(&'static str, String, &'static str), u64>,
    /// Requests refused for want of a valid credential.
    unauthenticated: u64,
    /// Connections and requests refused or closed by a resource bound,
    /// by [`Refusal`].
    refusals: BTreeMap<&'static str, u64>,
    /// Entries in the invalidation outbox, as of the delivery worker's
    /// last pass, less those delivered or acknowledged since.
    invalidations_pending: u64,
    /// Webhook deliveries that got a 2xx.
    invalidations_delivered: u64,
    /// Webhook deliveries that failed (and will be retried).
    invalidations_failed: u64,
}

/// What the KV's batches have weighed: totals and the largest seen.
#[derive(Debug, Clone, Copy, Default)]
struct BatchSizes {
    ops: u64,
    bytes: u64,
    max_ops: u64,
    max_bytes: u64,
}

/// Why a resource bound refused a connection or a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A connection closed at once: its peer, or all peers together,
    /// already hold as many unauthenticated connections as allowed.
    ConnectionCap,
    /// A connection closed for not sending a request's headers in time
    /// (or, idle between requests, a next request).
    HeaderTimeout,
    /// A request refused 503: its body does not fit the bytes in flight.
    BodyBudget,
    /// A request refused 408: its body paused for too long.
    BodyTimeout,
    /// A plugin's answer too large to copy into a response.
    PluginAnswer,
}

impl Refusal {
    /// Its label value.
    pub fn name(self) -> &'static str {
        match self {
            Self::ConnectionCap => "connection_cap",
            Self::HeaderTimeout => "header_timeout",
            Self::BodyBudget => "body_budget",
            Self::BodyTimeout => "body_timeout",
            Self::PluginAnswer => "plugin_answer",
        }
    }
}

/// The server's metrics.
#[derive(Default)]
pub struct Metrics {
    families: Mutex<Families>,
}

/// Escapes a label value for the text format.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn outcome_name(outcome: FireOutcome) -> &'static str {
    match outcome {
        FireOutcome::Rescheduled => "rescheduled",
        FireOutcome::Done => "done",
        FireOutcome::Failed => "failed",
        FireOutcome::Lost => "lost",
        FireOutcome::Fenced => "fenced",
        FireOutcome::Deferred => "deferred",
    }
}

impl Metrics {
    /// No observations yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts one access decision (`allowed`, `denied`, `unanswered`) on
    /// `action` by `principal`.
    pub fn access_decision(&self, action: &'static str, principal: &str, outcome: &'static str) {
        self.with(|f| {
            *f.access
                .entry((action, principal.to_owned(), outcome))
                .or_default() += 1;
        });
    }

    /// Counts one request refused for want of a valid credential.
    pub fn unauthenticated(&self) {
        self.with(|f| f.unauthenticated += 1);
    }

    /// Counts one connection or request refused or closed by a resource
    /// bound.
    pub fn refused(&self, refusal: Refusal) {
        self.with(|f| *f.refusals.entry(refusal.name()).or_default() += 1);
    }

    /// The invalidation outbox holds `entries`, as a pass over it counted.
    pub fn invalidations_pending(&self, entries: u64) {
        self.with(|f| f.invalidations_pending = entries);
    }

    /// One webhook delivery: `delivered` (a 2xx; the entry leaves the
    /// outbox) or failed.
    pub fn invalidation_delivery(&self, delivered: bool) {
        self.with(|f| {
            if delivered {
                f.invalidations_delivered += 1;
                f.invalidations_pending = f.invalidations_pending.saturating_sub(1);
            } else {
                f.invalidations_failed += 1;
            }
        });
    }

    /// A pull consumer acknowledged `entries`: they left the outbox.
    pub fn invalidations_acknowledged(&self, entries: u64) {
        self.with(|f| f.invalidations_pending = f.invalidations_pending.saturating_sub(entries));
    }

    fn with<T>(&self, update: impl FnOnce(&mut Families) -> T) -> T {
        let mut families = self
            .families
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        update(&mut families)
    }

    /// One HTTP request, by method, matched route and status.
    pub fn http_request(&self, method: &Method, route: &str, status: StatusCode, took: Duration) {
        self.with(|f| {
            *f.http_requests
                .entry((method.to_string(), route.to_owned(), status.as_u16()))
                .or_default() += 1;
            f.http_latency
                .entry((method.to_string(), route.to_owned()))
                .or_default()
                .observe(took.as_secs_f64());
        });
    }

    /// One fired timer: its outcome by plugin, its step's latency, its
    /// failure's cause, and how late it fired (`now_ms` minus due time).
    pub fn step(&self, fired: &FiredTimer, now_ms: u64) {
        self.with(|f| {
            *f.steps
                .entry((fired.actor.clone(), outcome_name(fired.outcome)))
                .or_default() += 1;
            f.step_latency
                .entry(fired.actor.clone())
                .or_default()
                .observe(fired.step_us as f64 / 1e6);
            if let Some(cause) = fired.cause {
                // The plugin that failed: a retention plugin a step asked
                // is blamed for its own trap, not the step's plugin.
                let failed = fired.failed_plugin.as_ref().unwrap_or(&fired.actor);
                *f.step_failures
                    .entry((failed.clone(), cause.name()))
                    .or_default() += 1;
            }
            f.timer_lag
                .observe(now_ms.saturating_sub(fired.due_ms) as f64 / 1e3);
        });
    }

    /// What a tick reported beyond its steps: quarantines it declared
    /// and due timers it skipped because their plugin is quarantined.
    pub fn containment(&self, quarantined: &[Quarantine], paused: u64) {
        self.with(|f| {
            for q in quarantined {
                *f.quarantines
                    .entry((q.actor.clone(), q.kind.clone()))
                    .or_default() += 1;
            }
            f.paused_steps += paused;
        });
    }

    /// A plugin failed its probation; `outcome` is what became of it.
    pub fn rollback(&self, world: &str, outcome: &'static str) {
        self.with(|f| {
            *f.rollbacks.entry((world.to_owned(), outcome)).or_default() += 1;
        });
    }

    /// One object-store call, and whether it failed.
    pub fn store_call(&self, store: &str, operation: &'static str, failed: bool) {
        self.with(|f| {
            *f.store_calls
                .entry((store.to_owned(), operation))
                .or_default() += 1;
            if failed {
                *f.store_errors
                    .entry((store.to_owned(), operation))
                    .or_default() += 1;
            }
        });
    }

    /// One KV call, by operation, and whether it failed.
    pub fn kv_call(&self, operation: &'static str, failed: bool) {
        self.with(|f| {
            *f.kv_calls.entry(operation).or_default() += 1;
            if failed {
                *f.kv_errors.entry(operation).or_default() += 1;
            }
        });
    }

    /// One KV batch of `ops` preconditions and writes and `bytes` of
    /// partition names, keys and values.
    pub fn kv_batch(&self, ops: u64, bytes: u64) {
        self.with(|f| {
            let sizes = &mut f.kv_batch;
            sizes.ops += ops;
            sizes.bytes += bytes;
            sizes.max_ops = sizes.max_ops.max(ops);
            sizes.max_bytes = sizes.max_bytes.max(bytes);
        });
    }

    /// Everything, as Prometheus text (format 0.0.4).
    pub fn render(&self) -> String {
        let f = self.with(|f| {
            // Rendering formats strings; do it outside the lock.
            Families {
                http_requests: f.http_requests.clone(),
                http_latency: f.http_latency.clone(),
                steps: f.steps.clone(),
                step_latency: f.step_latency.clone(),
                step_failures: f.step_failures.clone(),
                store_calls: f.store_calls.clone(),
                store_errors: f.store_errors.clone(),
                timer_lag: f.timer_lag.clone(),
                quarantines: f.quarantines.clone(),
                paused_steps: f.paused_steps,
                rollbacks: f.rollbacks.clone(),
                swaps: f.swaps.clone(),
                in_sync: f.in_sync,
                kv_calls: f.kv_calls.clone(),
                kv_errors: f.kv_errors.clone(),
                kv_batch: f.kv_batch,
                access: f.access.clone(),
                unauthenticated: f.unauthenticated,
                refusals: f.refusals.clone(),
                invalidations_pending: f.invalidations_pending,
                invalidations_delivered: f.invalidations_delivered,
                invalidations_failed: f.invalidations_failed,
            }
        });
        let mut out = String::new();
        let header = |out: &mut String, name: &str, kind: &str, help: &str| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        };
        header(
            &mut out,
            "custodian_http_requests_total",
            "counter",
            "HTTP requests by method, route and status.",
        );
        for ((method, route, status), n) in &f.http_requests {
            let _ = writeln!(
                out,
                "custodian_http_requests_total{{method=\"{method}\",route=\"{}\",status=\"{status}\"}} {n}",
                escape(route)
            );
        }
        header(
            &mut out,
            "custodian_http_request_seconds",
            "histogram",
            "HTTP request latency by method and route.",
        );
        for ((method, route), h) in &f.http_latency {
            let labels = format!("method=\"{method}\",route=\"{}\"", escape(route));
            h.render(&mut out, "custodian_http_request_seconds", &labels);
        }
        header(
            &mut out,
            "custodian_steps_total",
            "counter",
            "Timer steps by plugin and outcome.",
        );
        for ((actor, outcome), n) in &f.steps {
            let _ = writeln!(
                out,
                "custodian_steps_total{{plugin=\"{}\",outcome=\"{outcome}\"}} {n}",
                escape(actor)
            );
        }
        header(
            &mut out,
            "custodian_step_seconds",
            "histogram",
            "Time in a plugin's step, by plugin.",
        );
        for (actor, h) in &f.step_latency {
            let labels = format!("plugin=\"{}\"", escape(actor));
            h.render(&mut out, "custodian_step_seconds", &labels);
        }
        header(
            &mut out,
            "custodian_step_failures_total",
            "counter",
            "Failed steps by plugin and cause (policy, trap, timeout, limit, budget, contention, other).",
        );
        for ((actor, cause), n) in &f.step_failures {
            let _ = writeln!(
                out,
                "custodian_step_failures_total{{plugin=\"{}\",cause=\"{cause}\"}} {n}",
                escape(actor)
            );
        }
        header(
            &mut out,
            "custodian_plugin_quarantines_total",
            "counter",
            "Plugins this host quarantined for passing a step ceiling, by plugin and timer kind.",
        );
        for ((actor, kind), n) in &f.quarantines {
            let _ = writeln!(
                out,
                "custodian_plugin_quarantines_total{{plugin=\"{}\",kind=\"{}\"}} {n}",
                escape(actor),
                escape(kind)
            );
        }
        header(
            &mut out,
            "custodian_timers_paused_total",
            "counter",
            "Due timer steps skipped because their plugin is quarantined.",
        );
        let _ = writeln!(out, "custodian_timers_paused_total {}", f.paused_steps);
        header(
            &mut out,
            "custodian_plugin_rollbacks_total",
            "counter",
            "Plugins that failed their probation after a swap, by world and outcome \
             (rolled_back, alerted, failed).",
        );
        for ((world, outcome), n) in &f.rollbacks {
            let _ = writeln!(
                out,
                "custodian_plugin_rollbacks_total{{world=\"{}\",outcome=\"{outcome}\"}} {n}",
                escape(world)
            );
        }
        header(
            &mut out,
            "custodian_store_calls_total",
            "counter",
            "Object-store calls by store and operation.",
        );
        for ((store, op), n) in &f.store_calls {
            let _ = writeln!(
                out,
                "custodian_store_calls_total{{store=\"{}\",operation=\"{op}\"}} {n}",
                escape(store)
            );
        }
        header(
            &mut out,
            "custodian_store_errors_total",
            "counter",
            "Failed object-store calls by store and operation.",
        );
        for ((store, op), n) in &f.store_errors {
            let _ = writeln!(
                out,
                "custodian_store_errors_total{{store=\"{}\",operation=\"{op}\"}} {n}",
                escape(store)
            );
        }
        header(
            &mut out,
            "custodian_timer_lag_seconds",
            "histogram",
            "How late timers fired after they were due.",
        );
        f.timer_lag
            .render(&mut out, "custodian_timer_lag_seconds", "");
        header(
            &mut out,
            "custodian_plugin_swaps_total",
            "counter",
            "Plugin swaps by world and result (completed, refused; adopted: a swap made on another host, followed here).",
        );
        for ((world, result), n) in &f.swaps {
            let _ = writeln!(
                out,
                "custodian_plugin_swaps_total{{world=\"{}\",result=\"{result}\"}} {n}",
                escape(world)
            );
        }
        header(
            &mut out,
            "custodian_plugin_set_in_sync",
            "gauge",
            "1 while this host runs exactly the shared plugin set; 0 while it cannot follow it (its steps and actions fail their set guard).",
        );
        let _ = writeln!(out, "custodian_plugin_set_in_sync {}", f.in_sync);
        header(
            &mut out,
            "custodian_kv_calls_total",
            "counter",
            "KV calls by operation (get, get_many, scan, apply).",
        );
        for (op, n) in &f.kv_calls {
            let _ = writeln!(out, "custodian_kv_calls_total{{operation=\"{op}\"}} {n}");
        }
        header(
            &mut out,
            "custodian_kv_errors_total",
            "counter",
            "Failed KV calls by operation.",
        );
        for (op, n) in &f.kv_errors {
            let _ = writeln!(out, "custodian_kv_errors_total{{operation=\"{op}\"}} {n}");
        }
        let sizes = f.kv_batch;
        for (name, kind, help, value) in [
            (
                "custodian_kv_batch_ops_total",
                "counter",
                "Preconditions and writes over all KV batches.",
                sizes.ops,
            ),
            (
                "custodian_kv_batch_bytes_total",
                "counter",
                "Partition-name, key and value bytes over all KV batches.",
                sizes.bytes,
            ),
            (
                "custodian_kv_batch_ops_max",
                "gauge",
                "Most operations in one KV batch so far (the limit is 128).",
                sizes.max_ops,
            ),
            (
                "custodian_kv_batch_bytes_max",
                "gauge",
                "Most bytes in one KV batch so far (the limit is 1.25 MiB).",
                sizes.max_bytes,
            ),
        ] {
            header(&mut out, name, kind, help);
            let _ = writeln!(out, "{name} {value}");
        }
        header(
            &mut out,
            "custodian_access_decisions_total",
            "counter",
            "Access decisions by action, principal and outcome (allowed, denied, unanswered).",
        );
        for ((action, principal, outcome), n) in &f.access {
            let _ = writeln!(
                out,
                "custodian_access_decisions_total{{action=\"{action}\",principal=\"{}\",outcome=\"{outcome}\"}} {n}",
                escape(principal)
            );
        }
        header(
            &mut out,
            "custodian_unauthenticated_total",
            "counter",
            "Requests refused for want of a valid credential.",
        );
        let _ = writeln!(out, "custodian_unauthenticated_total {}", f.unauthenticated);
        header(
            &mut out,
            "custodian_resource_refusals_total",
            "counter",
            "Connections and requests refused or closed by a resource bound, by reason \
             (connection_cap, header_timeout, body_budget, body_timeout, plugin_answer).",
        );
        for (reason, n) in &f.refusals {
            let _ = writeln!(
                out,
                "custodian_resource_refusals_total{{reason=\"{reason}\"}} {n}"
            );
        }
        header(
            &mut out,
            "custodian_invalidations_pending",
            "gauge",
            "Cache invalidations in the outbox, not yet delivered or acknowledged.",
        );
        let _ = writeln!(
            out,
            "custodian_invalidations_pending {}",
            f.invalidations_pending
        );
        header(
            &mut out,
            "custodian_invalidation_deliveries_total",
            "counter",
            "Webhook deliveries of cache invalidations by outcome (delivered: a 2xx; failed: retried later).",
        );
        for (outcome, n) in [
            ("delivered", f.invalidations_delivered),
            ("failed", f.invalidations_failed),
        ] {
            let _ = writeln!(
                out,
                "custodian_invalidation_deliveries_total{{outcome=\"{outcome}\"}} {n}"
            );
        }
        // The process's durable writes, which its stores count themselves
        // (the embedded KV's commits are 0 on a host whose KV is etcd).
        // Divided by the work done meanwhile (requests, steps, objects),
        // they show how much the journal and group commits shared.
        let syncs = custodian_object::fs::syncs();
        header(
            &mut out,
            "custodian_fs_syncs_total",
            "counter",
            "Syncs the filesystem stores made, by what they made durable (file: a file's bytes; \
             directory: names; journal: a group's records; filesystem: a journal's settle).",
        );
        for (what, n) in [
            ("file", syncs.file),
            ("directory", syncs.directory),
            ("journal", syncs.journal),
            ("filesystem", syncs.filesystem),
        ] {
            let _ = writeln!(out, "custodian_fs_syncs_total{{what=\"{what}\"}} {n}");
        }
        header(
            &mut out,
            "custodian_redb_commits_total",
            "counter",
            "Write transactions the embedded KV committed, one durable write per group of batches.",
        );
        let _ = writeln!(
            out,
            "custodian_redb_commits_total {}",
            custodian_kv::redb::commits()
        );
        out
    }
}

/// The plugin set's events, counted for `/metrics`.
impl SetEvents for Metrics {
    fn in_sync(&self, in_sync: bool) {
        self.with(|f| f.in_sync = u64::from(in_sync));
    }

    fn swap(&self, world: &str, outcome: &'static str) {
        self.with(|f| *f.swaps.entry((world.to_owned(), outcome)).or_default() += 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use custodian_core::timers::FailureCause;

    fn fired(outcome: FireOutcome, cause: Option<FailureCause>) -> FiredTimer {
        FiredTimer {
            kind: "takedown".into(),
            reference: "r".into(),
            due_ms: 1_000,
            step: 1,
            outcome,
            next_due_ms: None,
            error: None,
            cause,
            failed_plugin: None,
            actor: "plugin:takedown@abc".into(),
            step_us: 2_000,
            commit_digest: None,
        }
    }

    #[test]
    fn the_plugin_sets_events_are_counted() {
        let metrics = Metrics::new();
        let events: &dyn SetEvents = &metrics;
        events.swap("takedown", "completed");
        events.swap("purge", "refused");
        events.in_sync(false);
        let text = metrics.render();
        assert!(
            text.contains(
                "custodian_plugin_swaps_total{world=\"takedown\",result=\"completed\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("custodian_plugin_swaps_total{world=\"purge\",result=\"refused\"} 1"),
            "{text}"
        );
        assert!(text.contains("custodian_plugin_set_in_sync 0"), "{text}");
        events.in_sync(true);
        assert!(metrics.render().contains("custodian_plugin_set_in_sync 1"));
    }

    #[test]
    fn steps_are_counted_by_plugin_and_outcome_with_failures_by_cause() {
        let metrics = Metrics::new();
        metrics.step(&fired(FireOutcome::Rescheduled, None), 1_500);
        metrics.step(&fired(FireOutcome::Rescheduled, None), 1_500);
        metrics.step(&fired(FireOutcome::Failed, Some(FailureCause::Trap)), 3_000);
        let text = metrics.render();
        assert!(
            text.contains(
                "custodian_steps_total{plugin=\"plugin:takedown@abc\",outcome=\"rescheduled\"} 2"
            ),
            "{text}"
        );
        assert!(text.contains(
            "custodian_step_failures_total{plugin=\"plugin:takedown@abc\",cause=\"trap\"} 1"
        ));
        assert!(text.contains("custodian_step_seconds_count{plugin=\"plugin:takedown@abc\"} 3"));
        // A failure blamed on the retention plugin a step asked is its own.
        let mut blamed = fired(FireOutcome::Failed, Some(FailureCause::Policy));
        blamed.failed_plugin = Some("plugin:retention@def".into());
        metrics.step(&blamed, 3_000);
        assert!(metrics.render().contains(
            "custodian_step_failures_total{plugin=\"plugin:retention@def\",cause=\"policy\"} 1"
        ));
        // Lags of 0.5 s, 0.5 s and 2 s: two at or below 0.5, all three by 2.5.
        assert!(text.contains("custodian_timer_lag_seconds_bucket{le=\"0.5\"} 2"));
        assert!(text.contains("custodian_timer_lag_seconds_bucket{le=\"2.5\"} 3"));
        assert!(text.contains("custodian_timer_lag_seconds_bucket{le=\"+Inf\"} 3"));
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_end_with_the_count() {
        let metrics = Metrics::new();
        for ms in [0, 3, 30, 20_000] {
            metrics.http_request(
                &Method::GET,
                "/healthz",
                StatusCode::OK,
                Duration::from_millis(ms),
            );
        }
        let text = metrics.render();
        let labels = "method=\"GET\",route=\"/healthz\"";
        assert!(text.contains(&format!(
            "custodian_http_request_seconds_bucket{{{labels},le=\"0.0005\"}} 1"
        )));
        assert!(text.contains(&format!(
            "custodian_http_request_seconds_bucket{{{labels},le=\"0.005\"}} 2"
        )));
        assert!(text.contains(&format!(
            "custodian_http_request_seconds_bucket{{{labels},le=\"10\"}} 3"
        )));
        assert!(text.contains(&format!(
            "custodian_http_request_seconds_bucket{{{labels},le=\"+Inf\"}} 4"
        )));
        assert!(text.contains(&format!(
            "custodian_http_requests_total{{{labels},status=\"200\"}} 4"
        )));
    }

    #[test]
    fn store_errors_are_counted_beside_the_calls() {
        let metrics = Metrics::new();
        metrics.store_call("serving", "put_whole", false);
        metrics.store_call("serving", "put_whole", true);
        let text = metrics.render();
        assert!(
            text.contains(
                "custodian_store_calls_total{store=\"serving\",operation=\"put_whole\"} 2"
            )
        );
        assert!(
            text.contains(
                "custodian_store_errors_total{store=\"serving\",operation=\"put_whole\"} 1"
            )
        );
    }

    #[test]
    fn invalidations_pending_fall_with_each_delivery_and_acknowledgement() {
        let metrics = Metrics::new();
        metrics.invalidations_pending(5);
        metrics.invalidation_delivery(true);
        metrics.invalidation_delivery(false);
        metrics.invalidations_acknowledged(2);
        let text = metrics.render();
        assert!(
            text.contains("custodian_invalidations_pending 2\n"),
            "{text}"
        );
        assert!(
            text.contains("custodian_invalidation_deliveries_total{outcome=\"delivered\"} 1\n")
        );
        assert!(text.contains("custodian_invalidation_deliveries_total{outcome=\"failed\"} 1\n"));
        metrics.invalidations_acknowledged(10);
        assert!(
            metrics
                .render()
                .contains("custodian_invalidations_pending 0\n")
        );
    }

    #[test]
    fn the_durable_writes_of_the_process_are_rendered_with_their_help() {
        let text = Metrics::new().render();
        for what in ["file", "directory", "journal", "filesystem"] {
            let series = format!("custodian_fs_syncs_total{{what=\"{what}\"}} ");
            assert!(text.contains(&series), "{series} in {text}");
        }
        assert!(
            text.contains("# TYPE custodian_fs_syncs_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE custodian_redb_commits_total counter\n"),
            "{text}"
        );
        assert!(text.contains("\ncustodian_redb_commits_total "), "{text}");
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
