//! The `[timers]` section: how fast a plugin's timers may step before the
//! host quarantines the plugin (see `custodian_core::timers::governor`).
//!
//! ```toml
//! [timers]
//! min_step_interval_ms = 1     # least time between two steps of one timer
//! window_ms = 60000            # the counting window
//! max_timer_steps = 30000      # steps of one timer in a row per window, each committing the same
//! max_plugin_steps = 120000    # steps of one plugin's timers per window that committed nothing new
//! ```

use serde::Deserialize;

use custodian_core::timers::governor::GovernorConfig;

/// Longest least step interval, ms: past a minute a timer is a schedule,
/// not a throttle, and takedowns with work would crawl.
pub const MAX_MIN_STEP_INTERVAL_MS: u64 = 60_000;
/// Shortest counting window, ms: a shorter one makes every burst of a busy
/// plugin look like a runaway.
pub const MIN_WINDOW_MS: u64 = 1_000;
/// Longest counting window, ms (a day).
pub const MAX_WINDOW_MS: u64 = 86_400_000;

/// `[timers]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct TimersConfig {
    /// Least time between two steps of one timer, ms (default 1, at most
    /// [`MAX_MIN_STEP_INTERVAL_MS`]).
    pub min_step_interval_ms: Option<u64>,
    /// The window steps are counted in, ms (default 60000).
    pub window_ms: Option<u64>,
    /// Most steps of one timer in a row in a window that each committed
    /// what the step before it did (default 30000).
    pub max_timer_steps: Option<u32>,
    /// Most steps of one plugin's timers in a window that committed
    /// nothing new (default 120000).
    pub max_plugin_steps: Option<u32>,
}

/// What the `[timers]` section sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimerLimits {
    /// Least time between two steps of one timer, ms.
    pub min_step_interval_ms: u64,
    /// The step ceilings.
    pub governor: GovernorConfig,
}

impl TimersConfig {
    /// The limits this section describes.
    ///
    /// # Errors
    /// What is wrong, naming the setting.
    pub fn limits(&self) -> Result<TimerLimits, String> {
        let defaults = GovernorConfig::default();
        let within = |name: &str, value: u64, low: u64, high: u64| {
            if (low..=high).contains(&value) {
                Ok(value)
            } else {
                Err(format!("[timers] {name} {value} is outside {low}..={high}"))
            }
        };
        let positive = |name: &str, value: u32| {
            if value == 0 {
                Err(format!("[timers] {name} must be at least 1"))
            } else {
                Ok(value)
            }
        };
        Ok(TimerLimits {
            min_step_interval_ms: within(
                "min_step_interval_ms",
                self.min_step_interval_ms.unwrap_or(1),
                1,
                MAX_MIN_STEP_INTERVAL_MS,
            )?,
            governor: GovernorConfig {
                window_ms: within(
                    "window_ms",
                    self.window_ms.unwrap_or(defaults.window_ms),
                    MIN_WINDOW_MS,
                    MAX_WINDOW_MS,
                )?,
                max_timer_steps: positive(
                    "max_timer_steps",
                    self.max_timer_steps.unwrap_or(defaults.max_timer_steps),
                )?,
                max_kind_steps: positive(
                    "max_plugin_steps",
                    self.max_plugin_steps.unwrap_or(defaults.max_kind_steps),
                )?,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_section_takes_the_defaults() {
        let limits = TimersConfig::default().limits().unwrap();
        assert_eq!(limits.min_step_interval_ms, 1);
        assert_eq!(limits.governor, GovernorConfig::default());
    }

    #[test]
    fn out_of_range_settings_are_refused_by_name() {
        for (config, name) in [
            (
                TimersConfig {
                    min_step_interval_ms: Some(0),
                    ..TimersConfig::default()
                },
                "min_step_interval_ms",
            ),
            (
                TimersConfig {
                    window_ms: Some(10),
                    ..TimersConfig::default()
                },
                "window_ms",
            ),
            (
                TimersConfig {
                    max_timer_steps: Some(0),
                    ..TimersConfig::default()
                },
                "max_timer_steps",
            ),
            (
                TimersConfig {
                    max_plugin_steps: Some(0),
                    ..TimersConfig::default()
                },
                "max_plugin_steps",
            ),
        ] {
            let error = config.limits().unwrap_err();
            assert!(error.contains(name), "{error}");
        }
    }
}
