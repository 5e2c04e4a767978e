//! The `[server]`, `[kv]`, `[retention]` and `[plugins.WORLD]` sections:
//! what `custodian serve` runs with.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use std::time::Duration;

use crate::serve::http::listen::ListenLimits;
use crate::serve::{ReadAccess, RequestLimits};
use custodian_runtime::{Limits, World};

/// The address `custodian serve` listens on when nothing says otherwise:
/// loopback only, so a fresh install is not reachable from the network.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7420";

/// `[server]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// The address to listen on (`--listen` overrides).
    pub listen: Option<SocketAddr>,
    /// The data directory (`--data` overrides).
    pub data: Option<PathBuf>,
    /// Timer worker loops: how many steps of different timers run at once.
    pub workers: Option<u32>,
    /// A file holding the bootstrap token, a credential of the `admin`
    /// principal (`$CUSTODIAN_TOKEN` overrides). Without either, the
    /// server writes a fresh token to `DATA/token`.
    pub token_file: Option<PathBuf>,
    /// Whether reads need a credential: `token` (the default) or `open`
    /// (the access policy still decides, for principal `anonymous`).
    #[serde(default)]
    pub read_access: ReadAccess,
    /// Whether the access plugin is asked about every request (default
    /// true). Off, any authenticated principal may do anything.
    pub access_checks: Option<bool>,
    /// How long a credential lookup is trusted, in ms (default
    /// [`DEFAULT_CREDENTIAL_CACHE_MS`]): the bound on how late a
    /// revocation made on another host sharing the KV takes effect here.
    pub credential_cache_ms: Option<u64>,
    /// How long shutdown waits for requests and steps in flight, in ms.
    pub drain_ms: Option<u64>,
    /// Largest object body a `PUT` may send, in MiB.
    pub max_object_mib: Option<u64>,
    /// Most request-body bytes held at once across all requests, in MiB
    /// (default 256); a body beyond is refused 503 `busy` with
    /// `Retry-After`.
    pub bodies_in_flight_mib: Option<u64>,
    /// Longest pause between two pieces of one request body, in ms
    /// (default 30000); beyond it, 408 `request_timeout`.
    pub body_timeout_ms: Option<u64>,
    /// How long a connection may take to send a request's headers, from
    /// its opening or its previous response, in ms (default 10000).
    pub header_timeout_ms: Option<u64>,
    /// Most connections open at once that have not presented a valid
    /// credential, in all (default 512).
    pub max_unauthenticated_connections: Option<u32>,
    /// The same, from one peer address (default 64).
    pub max_unauthenticated_per_ip: Option<u32>,
    /// Largest plugin answer copied into a response (a takedown's
    /// status), in KiB (default 256).
    pub max_plugin_answer_kib: Option<u64>,
    /// This host's name among the hosts sharing one KV: it names the
    /// workers' fence leases and step claims. Without it the host takes the
    /// one kept in `DATA/node`, made on first start, so a restarted host
    /// keeps its name. `[a-z0-9._-]`, 1..=32 bytes.
    pub node: Option<String>,
}

/// Checks `value` of `[server] name` is within `range`.
fn in_range<T: PartialOrd + std::fmt::Display>(
    name: &str,
    value: T,
    range: std::ops::RangeInclusive<T>,
) -> Result<T, String> {
    if range.contains(&value) {
        Ok(value)
    } else {
        Err(format!(
            "[server] {name} = {value} is out of range ({}..={})",
            range.start(),
            range.end()
        ))
    }
}

impl ServerConfig {
    /// The per-request bounds: the defaults with this section's
    /// overrides.
    ///
    /// # Errors
    /// A bound out of range, naming the setting, or a body budget that
    /// could never hold the largest body allowed.
    pub fn request_limits(&self) -> Result<RequestLimits, String> {
        let mut limits = RequestLimits::default();
        if let Some(mib) = self.max_object_mib {
            // Up to 4 GiB: the stores take a body in one piece.
            limits.max_object_bytes = in_range("max_object_mib", mib, 1..=4096)? << 20;
        }
        if let Some(mib) = self.bodies_in_flight_mib {
            // Up to 1 TiB: far beyond any host's memory, and no overflow.
            limits.bodies_in_flight_bytes =
                in_range("bodies_in_flight_mib", mib, 1..=1 << 20)? << 20;
        }
        let largest = limits.max_object_bytes.max(limits.max_plugin_bytes);
        if limits.bodies_in_flight_bytes < largest {
            return Err(format!(
                "[server] bodies_in_flight_mib = {} is less than the largest body a request \
                 may send ({} MiB: max_object_mib, or a plugin upload): that body could \
                 never be taken",
                limits.bodies_in_flight_bytes >> 20,
                largest >> 20
            ));
        }
        if let Some(ms) = self.body_timeout_ms {
            limits.body_timeout =
                Duration::from_millis(in_range("body_timeout_ms", ms, 100..=600_000)?);
        }
        if let Some(kib) = self.max_plugin_answer_kib {
            limits.max_plugin_answer_bytes =
                in_range("max_plugin_answer_kib", kib, 1..=64 << 10)? << 10;
        }
        Ok(limits)
    }

    /// The listener's bounds: the defaults with this section's overrides.
    ///
    /// # Errors
    /// A bound out of range, naming the setting, or a per-address cap
    /// over the whole.
    pub fn listen_limits(&self) -> Result<ListenLimits, String> {
        let mut limits = ListenLimits::default();
        if let Some(ms) = self.header_timeout_ms {
            // At least 100 ms: a real client's headers take a round trip.
            limits.header_timeout =
                Duration::from_millis(in_range("header_timeout_ms", ms, 100..=300_000)?);
        }
        if let Some(n) = self.max_unauthenticated_connections {
            limits.unauthenticated = in_range("max_unauthenticated_connections", n, 1..=1 << 20)?;
        }
        if let Some(n) = self.max_unauthenticated_per_ip {
            limits.unauthenticated_per_ip = in_range("max_unauthenticated_per_ip", n, 1..=1 << 20)?;
        }
        if limits.unauthenticated_per_ip > limits.unauthenticated {
            return Err(format!(
                "[server] max_unauthenticated_per_ip = {} is more than \
                 max_unauthenticated_connections = {}",
                limits.unauthenticated_per_ip, limits.unauthenticated
            ));
        }
        Ok(limits)
    }
}

/// How long a credential lookup is trusted by default, in ms: a second
/// is short enough for a revocation to matter and saves a KV read (an etcd
/// round trip) on all but one request a second per credential.
pub const DEFAULT_CREDENTIAL_CACHE_MS: u64 = 1_000;

/// Longest credential cache bound, in ms: a revocation must take effect.
pub const MAX_CREDENTIAL_CACHE_MS: u64 = 60_000;

/// Longest node name: it prefixes fence shard names (at most 64 bytes)
/// with room for a worker index.
pub const MAX_NODE_BYTES: usize = 32;

/// Whether `name` may name a node.
///
/// # Errors
/// What is wrong with it.
pub fn validate_node(name: &str) -> Result<(), String> {
    // A node name heads its workers' fence shard names, so it must be one.
    if name.len() <= MAX_NODE_BYTES && custodian_core::fence::is_name(name) {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a node name (1..={MAX_NODE_BYTES} bytes of [a-z0-9._-])"
        ))
    }
}

/// `[kv]`: the durable key-value store.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct KvConfig {
    /// The backend.
    #[serde(default)]
    pub backend: KvBackend,
    /// For `etcd`: the cluster's client URLs (`http://host:2379`, or
    /// `https://` with `CUSTODIAN_ETCD_CA` set). Any member will do; the
    /// client fails over between them.
    #[serde(default)]
    pub endpoints: Vec<String>,
    /// For `etcd`: the prefix of every key this deployment writes, so
    /// several deployments can share one cluster; it ends in `/`. Default
    /// [`DEFAULT_ETCD_PREFIX`].
    pub prefix: Option<String>,
    /// For `etcd`: how long one request may take before it fails as
    /// unavailable, in ms. Default [`DEFAULT_ETCD_REQUEST_TIMEOUT_MS`].
    pub request_timeout_ms: Option<u64>,
    /// For `redb`: how much of the file's pages the process keeps in
    /// memory, in MiB. Default [`custodian_kv::redb::DEFAULT_CACHE_BYTES`].
    pub cache_mib: Option<u64>,
}

/// The key prefix of a deployment on etcd when `[kv] prefix` is not set.
pub const DEFAULT_ETCD_PREFIX: &str = "custodian/";

/// How long one etcd request may take by default: long enough for a
/// leader election after a member dies (about a second with etcd's
/// defaults), short enough that a dead cluster is reported promptly.
pub const DEFAULT_ETCD_REQUEST_TIMEOUT_MS: u64 = 5_000;

/// Largest `[kv] cache_mib`: more than any host of this kind has memory,
/// so a larger value is a typo, not a plan.
pub const MAX_KV_CACHE_MIB: u64 = 1 << 20;

impl KvConfig {
    /// Bytes of redb pages to keep in memory.
    pub fn cache_bytes(&self) -> usize {
        self.cache_mib
            .map_or(custodian_kv::redb::DEFAULT_CACHE_BYTES, |mib| {
                // `validate` bounds it to MAX_KV_CACHE_MIB, far below usize.
                usize::try_from(mib << 20).unwrap_or(usize::MAX)
            })
    }

    /// Checks that the settings fit the backend.
    ///
    /// # Errors
    /// What is wrong, naming the setting.
    pub fn validate(&self) -> Result<(), String> {
        match self.backend {
            KvBackend::Redb => {
                if !self.endpoints.is_empty()
                    || self.prefix.is_some()
                    || self.request_timeout_ms.is_some()
                {
                    return Err(
                        "[kv] endpoints, prefix and request_timeout_ms are for backend = \"etcd\""
                            .into(),
                    );
                }
                if let Some(mib) = self.cache_mib
                    && !(1..=MAX_KV_CACHE_MIB).contains(&mib)
                {
                    return Err(format!(
                        "[kv] cache_mib = {mib} is out of range (1..={MAX_KV_CACHE_MIB})"
                    ));
                }
            }
            KvBackend::Etcd => {
                if self.cache_mib.is_some() {
                    return Err("[kv] cache_mib is for backend = \"redb\"".into());
                }
                if self.endpoints.is_empty() {
                    return Err("[kv] backend = \"etcd\" needs endpoints".into());
                }
                if self.request_timeout_ms == Some(0) {
                    return Err("[kv] request_timeout_ms must be positive".into());
                }
                custodian_kv::etcd::check_file_settings(
                    &self.endpoints,
                    self.prefix
                        .as_deref()
                        .unwrap_or(DEFAULT_ETCD_PREFIX)
                        .as_bytes(),
                    std::time::Duration::from_millis(
                        self.request_timeout_ms
                            .unwrap_or(DEFAULT_ETCD_REQUEST_TIMEOUT_MS),
                    ),
                )
                .map_err(|e| format!("[kv] {e}"))?;
            }
        }
        Ok(())
    }
}

/// The KV backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum KvBackend {
    /// redb in the data directory, fsync on every commit: the embedded
    /// default.
    #[default]
    Redb,
    /// An etcd v3 cluster, shared by every host of a deployment.
    Etcd,
}

/// `[retention]`: the deployer's retention settings, handed to the
/// retention plugin with every question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionConfig {
    /// How long preserved content is kept after its request was filed.
    #[serde(default = "default_retention_ms")]
    pub retention_ms: u64,
    /// How long a version is kept after it stopped being current.
    #[serde(default)]
    pub noncurrent_retention_ms: u64,
}

fn default_retention_ms() -> u64 {
    30 * 24 * 3_600_000
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self {
            retention_ms: default_retention_ms(),
            noncurrent_retention_ms: 0,
        }
    }
}

/// `[plugins.WORLD]`: which plugin runs a world, and its bounds.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct PluginConfig {
    /// The `.wasm` file; omitted, the bundled plugin of the world.
    pub path: Option<PathBuf>,
    /// Wall-clock limit of one call, in ms.
    pub timeout_ms: Option<u64>,
    /// Memory limit of one call, in MiB.
    pub memory_mib: Option<u64>,
    /// Host calls one call may make.
    pub host_calls: Option<u32>,
    /// Store calls one timer step may make (timer-driven worlds).
    pub step_store_calls: Option<u32>,
    /// What the plugin may reach; omitted, the world's default grants.
    pub grants: Option<GrantsConfig>,
}

/// A plugin's capability grants.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct GrantsConfig {
    /// KV partitions it may read and write.
    #[serde(default)]
    pub partitions: Vec<String>,
    /// KV partitions it may only read.
    #[serde(default)]
    pub read_partitions: Vec<String>,
    /// Object stores it may read and write.
    #[serde(default)]
    pub stores: Vec<String>,
    /// Object stores it may only read.
    #[serde(default)]
    pub read_stores: Vec<String>,
}

impl PluginConfig {
    /// The call limits, from the defaults with this section's overrides.
    ///
    /// # Errors
    /// A limit outside the host's ceilings.
    pub fn limits(&self) -> Result<Limits, String> {
        let mut limits = Limits::default();
        if let Some(ms) = self.timeout_ms {
            limits.timeout = std::time::Duration::from_millis(ms);
        }
        if let Some(mib) = self.memory_mib {
            limits.memory_bytes = usize::try_from(mib)
                .ok()
                .and_then(|m| m.checked_mul(1 << 20))
                .ok_or_else(|| format!("memory_mib {mib} is out of range"))?;
        }
        if let Some(calls) = self.host_calls {
            limits.host_calls = calls;
        }
        limits.validate()?;
        Ok(limits)
    }

    /// The grants, from `default` unless this section names its own.
    ///
    /// # Errors
    /// A partition name that is invalid or reserved for the host.
    pub fn grants(
        &self,
        default: custodian_runtime::Grants,
    ) -> Result<custodian_runtime::Grants, String> {
        let Some(config) = &self.grants else {
            return Ok(default);
        };
        let mut grants = custodian_runtime::Grants::none();
        for name in &config.partitions {
            grants = grants.partition(name).map_err(|e| e.to_string())?;
        }
        for name in &config.read_partitions {
            grants = grants.read_partition(name).map_err(|e| e.to_string())?;
        }
        for name in &config.stores {
            grants = grants.store(name);
        }
        for name in &config.read_stores {
            grants = grants.read_store(name);
        }
        Ok(grants)
    }
}

/// `[plugins]`: the keys trusted to sign plugins, and a `[plugins.WORLD]`
/// section per world (a key that names no world is refused when the file
/// is parsed).
///
/// ```toml
/// [plugins]
/// trusted_keys = ["ed25519:…"]   # then every plugin must be signed by one
/// [plugins.retention]
/// path = "retention.wasm"        # its signature: retention.wasm.sig
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
pub struct PluginsConfig {
    /// Public keys (`ed25519:BASE64`, as `custodian plugin keygen` prints
    /// them) trusted to sign plugins. With any, this host loads no plugin
    /// (configured, swapped in, or adopted from the shared set) without a
    /// valid signature by one of them; the bundled plugins need none.
    #[serde(default)]
    pub trusted_keys: Vec<String>,
    /// `[plugins.WORLD]` sections by world name.
    #[serde(flatten)]
    pub worlds: BTreeMap<String, PluginConfig>,
}

/// Checks every `[plugins.*]` key names a world, every limit is in range
/// and every trusted key is one.
pub(super) fn validate_plugins(plugins: &PluginsConfig) -> Result<(), String> {
    custodian_runtime::signature::Trust::new(&plugins.trusted_keys)
        .map_err(|e| format!("[plugins] trusted_keys: {e}"))?;
    for (name, plugin) in &plugins.worlds {
        name.parse::<World>()
            .map_err(|e| format!("[plugins.{name}]: {e}"))?;
        plugin
            .limits()
            .map_err(|e| format!("[plugins.{name}]: {e}"))?;
        plugin
            .grants(custodian_runtime::Grants::none())
            .map_err(|e| format!("[plugins.{name}.grants]: {e}"))?;
        if plugin.step_store_calls == Some(0) {
            return Err(format!(
                "[plugins.{name}]: step_store_calls must be at least 1"
            ));
        }
    }
    Ok(())
}
