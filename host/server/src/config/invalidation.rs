//! The `[invalidation]` section: where `custodian serve` delivers the
//! cache invalidations takedowns plan, and how patiently.
//!
//! ```toml
//! [invalidation]
//! webhook = "http://cache-purger.internal:8080/invalidate"
//! timeout_ms = 5000            # one delivery, at most 60000
//! initial_backoff_ms = 500     # after a first failure, doubling…
//! max_backoff_ms = 60000       # …up to this (at most 3600000)
//! ```
//!
//! Without `webhook`, entries stay in the outbox until a pull consumer
//! acknowledges them (`POST /v1/invalidations/ack`).

use std::time::Duration;

use serde::Deserialize;

use crate::invalidation::backoff::Backoff;
use crate::invalidation::{
    DEFAULT_INITIAL_BACKOFF_MS, DEFAULT_MAX_BACKOFF_MS, DEFAULT_TIMEOUT_MS, DeliverySettings,
    MAX_MAX_BACKOFF_MS, MAX_TIMEOUT_MS,
};

/// Shortest back-off a deployer may set, in ms: a failing receiver is
/// retried at most this often, so a typo cannot make the host hammer it.
pub const MIN_BACKOFF_MS: u64 = 10;

/// `[invalidation]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct InvalidationConfig {
    /// `http://host:port/path` every outbox entry is POSTed to; omitted,
    /// entries wait for a pull consumer.
    pub webhook: Option<String>,
    /// How long one delivery may take, in ms (default
    /// [`DEFAULT_TIMEOUT_MS`], at most [`MAX_TIMEOUT_MS`]).
    pub timeout_ms: Option<u64>,
    /// The wait after a first failure, in ms, doubling with each failure
    /// after it (default [`DEFAULT_INITIAL_BACKOFF_MS`]).
    pub initial_backoff_ms: Option<u64>,
    /// The longest wait between attempts, in ms (default
    /// [`DEFAULT_MAX_BACKOFF_MS`], at most [`MAX_MAX_BACKOFF_MS`]).
    pub max_backoff_ms: Option<u64>,
}

impl InvalidationConfig {
    /// The delivery settings this section describes.
    ///
    /// # Errors
    /// What is wrong, naming the setting.
    pub fn settings(&self) -> Result<DeliverySettings, String> {
        let webhook = self
            .webhook
            .as_deref()
            .map(str::parse)
            .transpose()
            .map_err(|e| format!("[invalidation] webhook: {e}"))?;
        let within = |name: &str, value: u64, low: u64, high: u64| {
            if (low..=high).contains(&value) {
                Ok(value)
            } else {
                Err(format!(
                    "[invalidation] {name} {value} is outside {low}..={high}"
                ))
            }
        };
        let timeout = within(
            "timeout_ms",
            self.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS),
            1,
            MAX_TIMEOUT_MS,
        )?;
        let max = within(
            "max_backoff_ms",
            self.max_backoff_ms.unwrap_or(DEFAULT_MAX_BACKOFF_MS),
            MIN_BACKOFF_MS,
            MAX_MAX_BACKOFF_MS,
        )?;
        let initial = within(
            "initial_backoff_ms",
            self.initial_backoff_ms
                .unwrap_or(DEFAULT_INITIAL_BACKOFF_MS.min(max)),
            MIN_BACKOFF_MS,
            max,
        )?;
        Ok(DeliverySettings {
            webhook,
            timeout: Duration::from_millis(timeout),
            backoff: Backoff::new(Duration::from_millis(initial), Duration::from_millis(max)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn without_the_section_nothing_is_posted_and_the_defaults_apply() {
        let settings = Config::parse("").unwrap().invalidation.settings().unwrap();
        assert_eq!(settings, DeliverySettings::default());
        assert_eq!(settings.webhook, None);
        assert_eq!(settings.timeout, Duration::from_millis(5_000));
        assert_eq!(settings.backoff.initial(), Duration::from_millis(500));
        assert_eq!(settings.backoff.max(), Duration::from_millis(60_000));
    }

    #[test]
    fn a_webhook_section_sets_the_url_the_timeout_and_the_backoff() {
        let config = Config::parse(
            "[invalidation]\nwebhook = \"http://127.0.0.1:9000/hook\"\ntimeout_ms = 2000\n\
             initial_backoff_ms = 100\nmax_backoff_ms = 1000",
        )
        .unwrap();
        let settings = config.invalidation.settings().unwrap();
        assert_eq!(
            settings.webhook.unwrap().to_string(),
            "http://127.0.0.1:9000/hook"
        );
        assert_eq!(settings.timeout, Duration::from_millis(2_000));
        assert_eq!(settings.backoff.after_ms(1), 100);
        assert_eq!(settings.backoff.after_ms(9), 1_000);
    }

    #[test]
    fn a_short_cap_lowers_the_default_initial_backoff_to_it() {
        let config = Config::parse("[invalidation]\nmax_backoff_ms = 200").unwrap();
        let settings = config.invalidation.settings().unwrap();
        assert_eq!(settings.backoff.initial(), Duration::from_millis(200));
    }

    #[test]
    fn bad_settings_are_refused_by_the_file_check_naming_the_setting() {
        for (section, why) in [
            ("webhook = \"https://cache/x\"", "https is not supported"),
            ("webhook = \"gopher://cache/x\"", "the scheme must be http"),
            ("webhook = \"cache:80\"", "webhook"),
            ("timeout_ms = 0", "timeout_ms 0 is outside 1..=60000"),
            ("timeout_ms = 60001", "timeout_ms"),
            ("max_backoff_ms = 3600001", "max_backoff_ms"),
            ("max_backoff_ms = 5", "max_backoff_ms"),
            ("initial_backoff_ms = 5", "initial_backoff_ms"),
            (
                "initial_backoff_ms = 2000\nmax_backoff_ms = 1000",
                "initial_backoff_ms 2000 is outside 10..=1000",
            ),
            ("webhok = \"http://cache/x\"", "unknown field"),
        ] {
            let text = format!("[invalidation]\n{section}");
            let error = Config::parse(&text).unwrap_err();
            assert!(error.contains(why), "{section}: {error}");
        }
    }
}
