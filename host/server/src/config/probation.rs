//! The `[probation]` section: how a plugin swapped in on this host is
//! watched, and what happens when it fails (see `serve::probation`).
//!
//! ```toml
//! [probation]
//! window_ms = 600000          # how long after a swap its steps are counted
//! min_steps = 20              # steps counted before a verdict
//! max_failure_ratio = 0.5     # the share of them that may fail
//! rollback = "auto"           # or "alert": report, do not roll back
//! replay_timers = 8           # takedown timers a swap replays first (0..=256)
//! ```

use serde::Deserialize;

use crate::serve::probation::{ProbationSettings, Rollback};

/// `[probation]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ProbationConfig {
    /// How long after a swap its plugin is on probation, ms (default
    /// 600000, at most a day).
    pub window_ms: Option<u64>,
    /// Steps counted before a verdict (default 20, at least 1).
    pub min_steps: Option<u32>,
    /// The share of counted steps that may fail, 0..=1 (default 0.5).
    pub max_failure_ratio: Option<f64>,
    /// `auto` (default) rolls a failing plugin back; `alert` only reports.
    pub rollback: Option<Rollback>,
    /// Takedown timers due next that a swap replays, read-only, through
    /// the serving and the new plugin before publishing (default 8, at
    /// most [`MAX_REPLAY_TIMERS`]; 0 turns the replay off).
    pub replay_timers: Option<u32>,
}

/// Most timers a swap replays: each costs two plugin steps while the swap
/// holds this host's swap lock.
pub const MAX_REPLAY_TIMERS: u32 = 256;

/// Longest probation, ms: a day.
pub const MAX_WINDOW_MS: u64 = 86_400_000;

impl ProbationConfig {
    /// The settings this section describes.
    ///
    /// # Errors
    /// What is wrong, naming the setting.
    pub fn settings(&self) -> Result<ProbationSettings, String> {
        let defaults = ProbationSettings::default();
        let window_ms = self.window_ms.unwrap_or(defaults.window_ms);
        if !(1..=MAX_WINDOW_MS).contains(&window_ms) {
            return Err(format!(
                "[probation] window_ms {window_ms} is outside 1..={MAX_WINDOW_MS}"
            ));
        }
        let min_steps = self.min_steps.unwrap_or(defaults.min_steps);
        if min_steps == 0 {
            return Err("[probation] min_steps must be at least 1".into());
        }
        let ratio = self.max_failure_ratio.unwrap_or(defaults.max_failure_ratio);
        if !(0.0..=1.0).contains(&ratio) {
            return Err(format!(
                "[probation] max_failure_ratio {ratio} is outside 0..=1"
            ));
        }
        let replay_timers = self.replay_timers.unwrap_or(defaults.replay_timers);
        if replay_timers > MAX_REPLAY_TIMERS {
            return Err(format!(
                "[probation] replay_timers {replay_timers} is more than {MAX_REPLAY_TIMERS}"
            ));
        }
        Ok(ProbationSettings {
            window_ms,
            min_steps,
            max_failure_ratio: ratio,
            rollback: self.rollback.unwrap_or(defaults.rollback),
            replay_timers,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_section_takes_the_defaults_and_alert_mode_parses() {
        assert_eq!(
            ProbationConfig::default().settings().unwrap(),
            ProbationSettings::default()
        );
        let config: ProbationConfig = toml::from_str("rollback = \"alert\"").unwrap();
        assert_eq!(config.settings().unwrap().rollback, Rollback::Alert);
        assert!(toml::from_str::<ProbationConfig>("rollback = \"never\"").is_err());
    }

    #[test]
    fn out_of_range_settings_are_refused_by_name() {
        for (text, name) in [
            ("window_ms = 0", "window_ms"),
            ("min_steps = 0", "min_steps"),
            ("max_failure_ratio = 1.5", "max_failure_ratio"),
            ("max_failure_ratio = -0.1", "max_failure_ratio"),
            ("replay_timers = 257", "replay_timers"),
        ] {
            let config: ProbationConfig = toml::from_str(text).unwrap();
            let error = config.settings().unwrap_err();
            assert!(error.contains(name), "{text}: {error}");
        }
    }
}
