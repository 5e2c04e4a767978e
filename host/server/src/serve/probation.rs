//! A swapped plugin's probation: for a while after a swap made on this
//! host, the steps that plugin runs (takedown) or is asked in (retention)
//! are counted, and when more than the allowed share of them fail it is
//! rolled back to the plugin it replaced, through the same fenced swap
//! path, audited as `plugin/rollback` with the failure counts; or, in
//! `alert` mode, only reported (`plugin/probation-failed`, a metric, an
//! error in the log).
//!
//! A smoke call proves a plugin loads and answers; only real steps prove
//! it works. What counts as the plugin's failure is what errors and
//! metrics blame on it: a takedown step's failure is the takedown
//! plugin's unless it is blamed on the retention plugin the step asked.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde::Deserialize;

use super::metrics::Metrics;
use custodian_core::audit::{self, Record};
use custodian_core::timers::{FireOutcome, FiredTimer};
use custodian_kv::Kv;
use custodian_runtime::World;
use custodian_runtime::plugin_set::PluginSet;

/// What a failing plugin on probation gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Rollback {
    /// Restored to the plugin it replaced.
    #[default]
    Auto,
    /// Reported only: the operator decides.
    Alert,
}

/// How a probation runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProbationSettings {
    /// How long after a swap its plugin is on probation, ms.
    pub window_ms: u64,
    /// Steps counted before a verdict: fewer prove nothing either way.
    pub min_steps: u32,
    /// The share of counted steps that may fail, 0..=1.
    pub max_failure_ratio: f64,
    /// What a plugin past that share gets.
    pub rollback: Rollback,
    /// Takedown timers a swap replays, read-only, through the serving and
    /// the new plugin before it publishes (0: none).
    pub replay_timers: u32,
}

impl Default for ProbationSettings {
    /// Ten minutes, twenty steps, half of them failing: a plugin that
    /// fails every step is rolled back within its first twenty steps; one
    /// whose steps fail now and then (a backend's hiccup) is not.
    fn default() -> Self {
        Self {
            window_ms: 600_000,
            min_steps: 20,
            max_failure_ratio: 0.5,
            rollback: Rollback::Auto,
            replay_timers: 8,
        }
    }
}

/// The counts of one plugin on probation.
#[derive(Debug, Clone, Default)]
struct Watch {
    /// The plugin on probation (its full hash).
    plugin: String,
    steps: u32,
    failures: u32,
    /// A verdict was given: counting stops.
    decided: bool,
}

/// A plugin found failing on probation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Its world.
    pub world: World,
    /// Its hash.
    pub plugin: String,
    /// The counts, for the audit record.
    pub reason: String,
}

/// The probations of a host's swaps.
pub struct Probation {
    settings: ProbationSettings,
    plugins: Arc<PluginSet>,
    kv: Arc<dyn Kv>,
    metrics: Arc<Metrics>,
    watches: Mutex<BTreeMap<World, Watch>>,
}

/// Whether `actor` (`plugin:WORLD@<12 hex>`) names the plugin `hash`.
fn names(actor: &str, hash: &str) -> bool {
    actor
        .rsplit_once('@')
        .is_some_and(|(_, short)| !short.is_empty() && hash.starts_with(short))
}

impl Probation {
    /// Probation for the swaps `plugins` makes on this host.
    pub fn new(
        settings: ProbationSettings,
        plugins: Arc<PluginSet>,
        kv: Arc<dyn Kv>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            settings,
            plugins,
            kv,
            metrics,
            watches: Mutex::new(BTreeMap::new()),
        }
    }

    /// Counts `fired` against every plugin on probation; a verdict when it
    /// makes one fail.
    pub fn observe(&self, fired: &FiredTimer, now_ms: u64) -> Option<Verdict> {
        let mut watches = self
            .watches
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for world in [World::Takedown, World::Retention] {
            let Some(swap) = self.plugins.last_swap(world) else {
                watches.remove(&world);
                continue;
            };
            if now_ms.saturating_sub(swap.at_ms) > self.settings.window_ms {
                continue;
            }
            let watch = watches.entry(world).or_default();
            if watch.plugin != swap.to {
                *watch = Watch {
                    plugin: swap.to.clone(),
                    ..Watch::default()
                };
            }
            let counted = match world {
                // Its own steps; a failure blamed on another plugin is not
                // its own.
                World::Takedown => names(&fired.actor, &swap.to)
                    .then(|| fired.outcome == FireOutcome::Failed && fired.failed_plugin.is_none()),
                // Every takedown step may ask it; the failures blamed on
                // it are its own.
                _ => Some(
                    fired
                        .failed_plugin
                        .as_deref()
                        .is_some_and(|failed| names(failed, &swap.to)),
                ),
            };
            // Steps that neither committed nor failed (lost to another
            // worker, fenced, deferred) say nothing about the plugin.
            let settled = matches!(
                fired.outcome,
                FireOutcome::Rescheduled | FireOutcome::Done | FireOutcome::Failed
            );
            let Some(failed) = counted.filter(|_| settled && !watch.decided) else {
                continue;
            };
            watch.steps += 1;
            watch.failures += u32::from(failed);
            let ratio = f64::from(watch.failures) / f64::from(watch.steps);
            if watch.steps >= self.settings.min_steps && ratio > self.settings.max_failure_ratio {
                watch.decided = true;
                return Some(Verdict {
                    world,
                    plugin: swap.to,
                    reason: format!(
                        "{} of its first {} steps on probation failed (at most {:.0} % may); \
                         last error: {}",
                        watch.failures,
                        watch.steps,
                        self.settings.max_failure_ratio * 100.0,
                        fired.error.as_deref().unwrap_or("none")
                    ),
                });
            }
        }
        None
    }

    /// Acts on `verdict`: rolls back, or only reports, as configured.
    pub async fn act(&self, verdict: Verdict) {
        const ACTOR: &str = "system:probation";
        match self.settings.rollback {
            Rollback::Auto => {
                match self
                    .plugins
                    .roll_back(verdict.world, &verdict.plugin, &verdict.reason, ACTOR)
                    .await
                {
                    Ok(Some(_)) => self.metrics.rollback(verdict.world.name(), "rolled_back"),
                    Ok(None) => {}
                    Err(error) => {
                        self.metrics.rollback(verdict.world.name(), "failed");
                        tracing::error!(
                            world = %verdict.world,
                            plugin = %verdict.plugin,
                            "cannot roll back a plugin failing its probation: {error}"
                        );
                    }
                }
            }
            Rollback::Alert => {
                self.metrics.rollback(verdict.world.name(), "alerted");
                tracing::error!(
                    world = %verdict.world,
                    plugin = %verdict.plugin,
                    "a plugin fails its probation (rollback = \"alert\": not rolled back): {}",
                    verdict.reason
                );
                let record = Record {
                    at_ms: self.plugins.services().clock.now_ms(),
                    actor: ACTOR.into(),
                    event: "plugin/probation-failed".into(),
                    targets: vec![
                        format!("world:{}", verdict.world),
                        format!("plugin:{}", verdict.plugin),
                    ],
                    detail: Some(verdict.reason),
                };
                if let Err(error) = audit::append(self.kv.as_ref(), &record).await {
                    tracing::error!("cannot audit a failed probation: {error}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_actor_names_a_plugin_by_its_hash_prefix() {
        assert!(names("plugin:takedown@0123456789ab", "0123456789abcdef"));
        assert!(!names("plugin:takedown@0123456789ab", "ffff"));
        assert!(!names("plugin:takedown@", "0123"));
        assert!(!names("system:timer", "0123"));
    }
}
