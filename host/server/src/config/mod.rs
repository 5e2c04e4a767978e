//! The host's configuration file (TOML): named object stores, so commands
//! and scripts say `--store preserved` instead of repeating a URL, an
//! endpoint and a region; and what `custodian serve` runs with (see
//! [`server`], and `custodian config example` for a commented file).
//!
//! ```toml
//! [stores.serving]
//! url = "file:///var/lib/custodian/serving"
//!
//! [stores.preserved]
//! url = "s3://custodian-preserved/v1"
//! endpoint = "http://127.0.0.1:9000"   # an S3-compatible server; omit for AWS
//! region = "us-east-1"                 # omit to take AWS's configured region
//! ```
//!
//! Where cache invalidations are delivered is the `[invalidation]`
//! section ([`invalidation`]); how fast plugins' timers may step, the
//! `[timers]` section ([`timers`]); how a swapped plugin is watched and
//! rolled back, the `[probation]` section ([`probation`]); where the S3
//! endpoint listens, the `[s3]` section ([`S3Config`]).
//!
//! Secrets never go here: S3 credentials come from the standard AWS chain
//! (environment, profile, instance role). Unknown keys are refused, so a
//! misspelt setting is an error rather than silently ignored.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use custodian_object::open::StoreUrl;

pub mod invalidation;
pub mod probation;
pub mod server;
pub mod timers;

pub use invalidation::InvalidationConfig;
pub use probation::ProbationConfig;
pub use server::{
    DEFAULT_ETCD_PREFIX, DEFAULT_ETCD_REQUEST_TIMEOUT_MS, DEFAULT_LISTEN, GrantsConfig, KvBackend,
    KvConfig, MAX_NODE_BYTES, PluginConfig, PluginsConfig, RetentionConfig, ServerConfig,
    validate_node,
};
pub use timers::TimersConfig;

/// A commented configuration file with every setting, as `custodian
/// config example` prints it. A test parses it, so it stays valid.
pub const EXAMPLE: &str = include_str!("example.toml");

/// Largest configuration file read: a few named stores take a few
/// hundred bytes; anything near this is not a configuration file.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Why a configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("cannot read the configuration file {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid configuration.
    #[error("the configuration file {path} is invalid: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, with its line.
        reason: String,
    },
    /// A store is asked for by a name the configuration does not have.
    #[error("no store named {name:?} in the configuration (it has: {known})")]
    UnknownStore {
        /// The name asked for.
        name: String,
        /// The names it has.
        known: String,
    },
}

/// The configuration file's contents.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Object stores by name.
    #[serde(default)]
    pub stores: BTreeMap<String, StoreConfig>,
    /// What `custodian serve` listens on and how.
    #[serde(default)]
    pub server: ServerConfig,
    /// The KV backend.
    #[serde(default)]
    pub kv: KvConfig,
    /// Retention settings.
    #[serde(default)]
    pub retention: RetentionConfig,
    /// Plugins by world.
    #[serde(default)]
    pub plugins: PluginsConfig,
    /// Where cache invalidations are delivered.
    #[serde(default)]
    pub invalidation: InvalidationConfig,
    /// How fast plugins' timers may step.
    #[serde(default)]
    pub timers: TimersConfig,
    /// How a plugin swapped in is watched, and rolled back.
    #[serde(default)]
    pub probation: ProbationConfig,
    /// The S3 endpoint.
    #[serde(default)]
    pub s3: S3Config,
    /// What the audit log keeps of routine plugin decisions.
    #[serde(default)]
    pub audit: AuditConfig,
}

/// The `[audit]` section: how much of the decision log is sampled.
///
/// ```toml
/// [audit]
/// routine_decisions = 0.01   # of allows and other routine decisions;
///                            # denials and destructive ones: always
/// ```
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditConfig {
    /// The fraction of routine plugin decisions logged, `0..=1`.
    #[serde(default = "default_routine_decisions")]
    pub routine_decisions: f64,
}

impl Default for AuditConfig {
    fn default() -> Self {
        Self {
            routine_decisions: default_routine_decisions(),
        }
    }
}

fn default_routine_decisions() -> f64 {
    f64::from(custodian_core::decisions::log::ROUTINE_PER_MILLION) / 1e6
}

impl AuditConfig {
    /// The sampling the fraction sets.
    ///
    /// # Errors
    /// A fraction outside `0..=1`, named.
    pub fn sampling(&self) -> Result<custodian_core::decisions::log::Sampling, String> {
        custodian_core::decisions::log::Sampling::of(self.routine_decisions)
            .map_err(|e| format!("[audit] routine_decisions: {e}"))
    }
}

/// The `[s3]` section: the S3-compatible endpoint `custodian serve`
/// answers beside its own API.
///
/// ```toml
/// [s3]
/// listen = "127.0.0.1:9000"   # off unless set (or `custodian serve --s3-listen`)
/// domain = "s3.example.com"   # also virtual-host style: BUCKET.s3.example.com
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct S3Config {
    /// Where the S3 endpoint listens; `None` serves none.
    pub listen: Option<std::net::SocketAddr>,
    /// The endpoint's own host name, for virtual-host addressing: a
    /// request whose `Host` is `BUCKET.DOMAIN` (any port) addresses
    /// BUCKET, its path being the key. Path style is served either way.
    pub domain: Option<String>,
}

/// One named object store.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// `file:///path`, `mem://` or `s3://bucket/prefix`.
    pub url: String,
    /// For `s3://`: an S3-compatible server's endpoint (path-style).
    pub endpoint: Option<String>,
    /// For `s3://`: the region.
    pub region: Option<String>,
    /// Every version is under retention: a delete of a version, a delete
    /// that leaves no current version, and an overwrite each ask the
    /// retention plugin about the version they would destroy, and are
    /// refused (`retained`) if it says no.
    #[serde(default)]
    pub locked: bool,
}

impl Config {
    /// Reads and checks the file at `path`: every store URL must parse.
    ///
    /// # Errors
    /// [`ConfigError::Read`] or [`ConfigError::Invalid`].
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let read = |source| ConfigError::Read {
            path: path.to_owned(),
            source,
        };
        let size = std::fs::metadata(path).map_err(read)?.len();
        if size > MAX_CONFIG_BYTES {
            return Err(ConfigError::Invalid {
                path: path.to_owned(),
                reason: format!("{size} bytes is over the {MAX_CONFIG_BYTES}-byte limit"),
            });
        }
        let text = std::fs::read_to_string(path).map_err(read)?;
        Self::parse(&text).map_err(|reason| ConfigError::Invalid {
            path: path.to_owned(),
            reason,
        })
    }

    /// Parses configuration text.
    ///
    /// # Errors
    /// What is wrong, with its place in the text.
    pub fn parse(text: &str) -> Result<Self, String> {
        let config: Self = toml::from_str(text).map_err(|e| e.to_string())?;
        for (name, store) in &config.stores {
            store
                .url
                .parse::<StoreUrl>()
                .map_err(|e| format!("store {name:?}: {e}"))?;
        }
        server::validate_plugins(&config.plugins)?;
        if config.retention.retention_ms == 0 {
            return Err("[retention] retention_ms must be positive".into());
        }
        config.kv.validate()?;
        config.invalidation.settings()?;
        config.timers.limits()?;
        config.probation.settings()?;
        config.audit.sampling()?;
        if let Some(node) = &config.server.node {
            server::validate_node(node).map_err(|e| format!("[server] node: {e}"))?;
        }
        config.server.request_limits()?;
        config.server.listen_limits()?;
        if config.server.workers == Some(0) {
            return Err("[server] workers must be at least 1".into());
        }
        if config
            .server
            .credential_cache_ms
            .is_some_and(|ms| ms > server::MAX_CREDENTIAL_CACHE_MS)
        {
            return Err(format!(
                "[server] credential_cache_ms is at most {}: a revocation must take effect",
                server::MAX_CREDENTIAL_CACHE_MS
            ));
        }
        Ok(config)
    }

    /// Whether the store named `name` is configured `locked` (an
    /// unconfigured store is not).
    pub fn store_locked(&self, name: &str) -> bool {
        self.stores.get(name).is_some_and(|store| store.locked)
    }

    /// The store named `name`, with its endpoint and region applied.
    ///
    /// # Errors
    /// [`ConfigError::UnknownStore`].
    pub fn store(&self, name: &str) -> Result<StoreUrl, ConfigError> {
        let store = self
            .stores
            .get(name)
            .ok_or_else(|| ConfigError::UnknownStore {
                name: name.to_owned(),
                known: if self.stores.is_empty() {
                    "none".to_owned()
                } else {
                    self.stores.keys().cloned().collect::<Vec<_>>().join(", ")
                },
            })?;
        let url: StoreUrl = store
            .url
            .parse()
            .expect("store URLs are checked when the configuration is parsed");
        Ok(url.reached_at(store.endpoint.clone(), store.region.clone()))
    }
}

#[cfg(test)]
mod fuzz_tests;

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
        [stores.serving]
        url = "file:///var/lib/custodian/serving"

        [stores.preserved]
        url = "s3://custodian-preserved/v1"
        endpoint = "http://127.0.0.1:9000"
        region = "us-east-1"
    "#;

    #[test]
    fn named_stores_resolve_to_their_urls_with_endpoint_and_region() {
        let config = Config::parse(EXAMPLE).unwrap();
        assert_eq!(
            config.store("serving").unwrap(),
            "file:///var/lib/custodian/serving".parse().unwrap()
        );
        let StoreUrl::S3(s3) = config.store("preserved").unwrap() else {
            panic!("an S3 store");
        };
        assert_eq!(s3.bucket, "custodian-preserved");
        assert_eq!(s3.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        assert_eq!(s3.region.as_deref(), Some("us-east-1"));
        assert!(s3.force_path_style);
    }

    #[test]
    fn a_store_is_locked_only_when_its_section_says_so() {
        let config = Config::parse(
            "[stores.docs]\nurl = \"mem://\"\nlocked = true\n[stores.tmp]\nurl = \"mem://\"",
        )
        .unwrap();
        assert!(config.store_locked("docs"));
        assert!(!config.store_locked("tmp"));
        assert!(!config.store_locked("unconfigured"));
        assert!(Config::parse("[stores.a]\nurl = \"mem://\"\nlocked = \"yes\"").is_err());
    }

    #[test]
    fn an_unknown_store_name_lists_the_known_ones() {
        let config = Config::parse(EXAMPLE).unwrap();
        let error = config.store("archive").unwrap_err().to_string();
        assert!(error.contains("preserved, serving"), "{error}");
    }

    #[test]
    fn misspelt_keys_and_bad_urls_are_refused() {
        for bad in [
            "[stores.a]\nurl = \"mem://\"\nendpiont = \"x\"",
            "[store.a]\nurl = \"mem://\"",
            "[stores.a]\nurl = \"ftp://x\"",
            "[stores.a]\nendpoint = \"x\"",
        ] {
            assert!(Config::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_printed_example_is_a_valid_configuration() {
        let config = Config::parse(super::EXAMPLE).unwrap();
        assert!(config.stores.contains_key("preserved"));
        assert!(config.plugins.worlds.contains_key("takedown"));
        assert_eq!(config.server.workers, Some(8));
    }

    #[test]
    fn trusted_keys_sit_beside_the_world_sections() {
        let key = custodian_runtime::signature::SecretKey::generate()
            .unwrap()
            .public()
            .to_string();
        let config = Config::parse(&format!(
            "[plugins]\ntrusted_keys = [\"{key}\"]\n[plugins.takedown]\ntimeout_ms = 100\n"
        ))
        .unwrap();
        assert_eq!(config.plugins.trusted_keys, [key]);
        assert_eq!(config.plugins.worlds["takedown"].timeout_ms, Some(100));
    }

    #[test]
    fn plugin_sections_must_name_a_world_and_keep_limits_in_range() {
        for bad in [
            "[plugins.takedwn]",
            "[plugins.takedown]\ntimeout_ms = 0",
            "[plugins.takedown]\nmemory_mib = 4096",
            "[plugins.takedown]\nstep_store_calls = 0",
            "[plugins.takedown.grants]\npartitions = [\"custodian.timers\"]",
            "[plugins]\ntrusted_keys = [\"ed25519:AAAA\"]",
            "[plugins]\ntrusted_keys = \"ed25519:AAAA\"",
            "[plugins]\ntrusted_key = []",
            "[server]\nworkers = 0",
            "[server]\nlisten = \"nowhere\"",
            "[kv]\nbackend = \"sqlite\"",
            "[kv]\nbackend = \"etcd\"",
            "[kv]\nendpoints = [\"http://127.0.0.1:2379\"]",
            "[kv]\nbackend = \"etcd\"\nendpoints = [\"http://a:2379\"]\nrequest_timeout_ms = 0",
            "[server]\nnode = \"Node A\"",
            "[kv]\ncache_mib = 0",
            "[kv]\ncache_mib = 2000000",
            "[kv]\nbackend = \"etcd\"\nendpoints = [\"http://a:2379\"]\ncache_mib = 8",
        ] {
            assert!(Config::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_redb_cache_bound_is_read_in_mib_and_defaults_to_the_stores_own() {
        assert_eq!(
            Config::parse("").unwrap().kv.cache_bytes(),
            custodian_kv::redb::DEFAULT_CACHE_BYTES
        );
        assert_eq!(
            Config::parse("[kv]\ncache_mib = 8")
                .unwrap()
                .kv
                .cache_bytes(),
            8 << 20
        );
        let error = Config::parse("[kv]\ncache_mib = 0").unwrap_err();
        assert!(error.contains("cache_mib = 0 is out of range"), "{error}");
    }

    #[test]
    fn server_bounds_out_of_range_or_inconsistent_are_refused_naming_the_setting() {
        for (bad, why) in [
            (
                "header_timeout_ms = 0",
                "header_timeout_ms = 0 is out of range",
            ),
            (
                "body_timeout_ms = 700000",
                "body_timeout_ms = 700000 is out of range",
            ),
            ("max_unauthenticated_connections = 0", "out of range"),
            (
                "max_unauthenticated_connections = 10\nmax_unauthenticated_per_ip = 11",
                "max_unauthenticated_per_ip = 11 is more than",
            ),
            ("bodies_in_flight_mib = 0", "out of range"),
            ("bodies_in_flight_mib = 32", "could never be taken"),
            ("max_object_mib = 512", "could never be taken"),
            ("max_object_mib = 0", "max_object_mib = 0 is out of range"),
            ("max_plugin_answer_kib = 0", "out of range"),
        ] {
            let error = Config::parse(&format!("[server]\n{bad}")).unwrap_err();
            assert!(error.contains(why), "{bad}: {error}");
        }
        let config = Config::parse(
            "[server]\nmax_object_mib = 512\nbodies_in_flight_mib = 1024\nheader_timeout_ms = 500\n\
             max_unauthenticated_per_ip = 8\nmax_plugin_answer_kib = 4",
        )
        .unwrap();
        let limits = config.server.request_limits().unwrap();
        assert_eq!(limits.max_object_bytes, 512 << 20);
        assert_eq!(limits.bodies_in_flight_bytes, 1 << 30);
        assert_eq!(limits.max_plugin_answer_bytes, 4 << 10);
        let listen = config.server.listen_limits().unwrap();
        assert_eq!(listen.header_timeout, std::time::Duration::from_millis(500));
        assert_eq!(listen.unauthenticated_per_ip, 8);
        assert_eq!(listen.unauthenticated, 512);
    }

    #[test]
    fn an_etcd_prefix_or_endpoint_of_the_wrong_form_is_refused_by_the_file_check() {
        for (kv, why) in [
            (
                "endpoints = [\"127.0.0.1:2379\"]\nprefix = \"prod\"",
                "must be empty or end in '/'",
            ),
            ("endpoints = [\"127.0.0.1\"]", "expected host:port"),
            (
                "endpoints = [\"ftp://h:1\"]",
                "the scheme must be http or https",
            ),
            (
                "endpoints = [\"h:1\"]\nrequest_timeout_ms = 400000",
                "is outside",
            ),
        ] {
            let text = format!("[kv]\nbackend = \"etcd\"\n{kv}");
            let error = Config::parse(&text).unwrap_err().to_string();
            assert!(error.contains(why), "{kv}: {error}");
        }
    }

    #[test]
    fn an_etcd_kv_section_names_its_endpoints_prefix_and_timeout() {
        let config = Config::parse(
            "[server]\nnode = \"host-1\"\n[kv]\nbackend = \"etcd\"\n\
             endpoints = [\"http://10.0.0.1:2379\", \"http://10.0.0.2:2379\"]\n\
             prefix = \"prod/\"\nrequest_timeout_ms = 2000",
        )
        .unwrap();
        assert_eq!(config.kv.backend, KvBackend::Etcd);
        assert_eq!(config.kv.endpoints.len(), 2);
        assert_eq!(config.kv.prefix.as_deref(), Some("prod/"));
        assert_eq!(config.kv.request_timeout_ms, Some(2000));
        assert_eq!(config.server.node.as_deref(), Some("host-1"));
    }

    #[test]
    fn an_empty_file_is_a_configuration_with_no_stores() {
        assert_eq!(Config::parse(""), Ok(Config::default()));
    }
}
