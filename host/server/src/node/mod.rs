//! One node, opened one way: the data directory, the configured KV (the
//! redb file in the directory, or an etcd cluster, with the lock that then
//! keeps a second process out of the directory), the node's name, its
//! fence settings and its named object stores; and assembled one way
//! ([`Node::assemble`]): the runtime, the plugin set and its guarded timer
//! handlers.
//!
//! `custodian serve` and every command that opens a data directory open
//! it here, so a command run on a server's directory reads and writes the
//! same KV and stores the server does, under the same rules, and commits
//! under the same plugin-set guard.
//!
//! # Locks
//!
//! This is the one place the KV and the stores are wrapped in the locks
//! no caller can waive ([`custodian_core::locks`]): the KV a node opens is
//! only ever handed out behind a [`LockGuard`], and every store it opens
//! ([`Node::store`], [`open_named_store`]) behind its lock, so the HTTP
//! API, every command on a data directory, plugins' host calls and jobs
//! all go through them. The retention plugin the stores ask exists only
//! once [`Node::assemble`] has loaded the plugin set, which is given the
//! stores: it is bound then ([`LateRetention`]), and until then a request
//! that needs its answer is refused. A command that never assembles
//! plugins can therefore write and delete what no lock keeps, and nothing
//! a lock keeps.
//!
//! `custodian object` opens a store by URL with no data directory and no
//! KV: it is a client of the backend itself, as the backend's own tools
//! are, and what it can do is bounded by the backend's credentials, not by
//! these locks (a preserved bucket wants the backend's own object lock
//! too).

mod plugins;

#[cfg(test)]
mod lock_tests;

pub use plugins::{Assembly, AssemblyError, AssemblyOptions, Entry, PluginPlan};

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use custodian_base::clock::Clock;
use custodian_base::error::ErrorKind;
use custodian_core::decisions::retention::RetentionOracle;
use custodian_core::fence::FenceConfig;
use custodian_core::locks::{LateRetention, LockGuard, Locks};
use custodian_kv::etcd::{EtcdConfig, EtcdKv};
use custodian_kv::{Kv, KvError, Partition};
use custodian_object::ObjectStore;
use custodian_object::open::StoreUrl;

use crate::config::{Config, DEFAULT_ETCD_PREFIX, DEFAULT_ETCD_REQUEST_TIMEOUT_MS, KvBackend};
use crate::data_dir::{DataDir, DirLock};

/// Why a node could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// Another process holds the data directory or its KV: nothing was
    /// done, and trying again later may succeed.
    #[error("{what}")]
    Busy {
        /// What could not be held.
        what: String,
        /// The KV's refusal.
        #[source]
        source: KvError,
    },
    /// The configuration names something that cannot be used (a store
    /// URL, etcd settings): nothing was done, and retrying cannot help.
    #[error("{what}")]
    Config {
        /// The setting at fault.
        what: String,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Opening failed: the directory, the KV or a store.
    #[error("{what}")]
    Open {
        /// What could not be opened.
        what: String,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl NodeError {
    /// What kind of failure this is (see [`ErrorKind`]).
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Busy { .. } => ErrorKind::Busy,
            Self::Config { .. } => ErrorKind::InvalidArgument,
            Self::Open { .. } => ErrorKind::Unavailable,
        }
    }

    fn open(what: String, source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::Open {
            what,
            source: source.into(),
        }
    }

    /// A KV failure opening `what`: busy when another process holds it.
    fn kv(what: String, source: KvError) -> Self {
        match source {
            KvError::InUse(_) => Self::Busy { what, source },
            other => Self::open(what, other),
        }
    }
}

/// A data directory opened with its KV.
pub struct Node {
    dir: DataDir,
    /// The KV behind its lock guard: never handed out bare.
    kv: Arc<dyn Kv>,
    config: Config,
    clock: Arc<dyn Clock>,
    /// The retention plugin every store's lock asks, bound by
    /// [`Node::assemble`].
    retention: Arc<LateRetention>,
    /// What every store this node opens is locked with.
    locks: Locks,
    /// Held while the KV is not a file in the directory (a redb file
    /// holds its own lock).
    _lock: Option<DirLock>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("dir", &self.dir)
            .field("kv", &self.config.kv.backend)
            .finish_non_exhaustive()
    }
}

impl Node {
    /// Opens the data directory `data` (created, owner-only, if missing)
    /// and the KV `config` names, whose `NotAfter` guards read `clock`. On
    /// etcd it first reads once, which needs a quorum, so a node that
    /// cannot reach one says so now rather than failing every later call.
    ///
    /// # Errors
    /// [`NodeError::Busy`] when another process holds the directory or its
    /// KV; [`NodeError::Config`] for unusable etcd settings;
    /// [`NodeError::Open`] otherwise.
    pub async fn open(
        data: &Path,
        config: Config,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, NodeError> {
        if config.kv.backend == KvBackend::Redb {
            return Self::local(data, config, clock);
        }
        let dir = create(data)?;
        let lock = dir
            .lock()
            .map_err(|e| NodeError::kv(format!("cannot hold {}", data.display()), e))?;
        let section = &config.kv;
        let prefix = section.prefix.as_deref().unwrap_or(DEFAULT_ETCD_PREFIX);
        let mut etcd =
            EtcdConfig::from_env(section.endpoints.clone(), prefix.into()).map_err(|e| {
                NodeError::Config {
                    what: "[kv] etcd settings".into(),
                    source: e.into(),
                }
            })?;
        etcd.request_timeout = Duration::from_millis(etcd_request_timeout_ms(&config));
        let unreachable = |e: KvError| {
            NodeError::open(
                format!("cannot reach etcd at {}", section.endpoints.join(", ")),
                e,
            )
        };
        let etcd = EtcdKv::connect(etcd, clock.clone())
            .await
            .map_err(unreachable)?;
        // The client connects lazily; a read needs a quorum.
        let timers = Partition::new(custodian_core::timers::PARTITION)
            .expect("the timers partition has a valid name");
        etcd.get(&timers, b"r").await.map_err(unreachable)?;
        Ok(Self::locked(dir, Arc::new(etcd), config, clock, Some(lock)))
    }

    /// Opens the data directory `data` on the embedded default: the KV is
    /// the redb file in it, whatever a configuration file would say. For
    /// commands that take no configuration.
    ///
    /// # Errors
    /// As for [`Node::open`].
    pub fn open_local(data: &Path, clock: Arc<dyn Clock>) -> Result<Self, NodeError> {
        Self::local(data, Config::default(), clock)
    }

    fn local(data: &Path, config: Config, clock: Arc<dyn Clock>) -> Result<Self, NodeError> {
        let dir = create(data)?;
        let kv = dir
            .open_kv(clock.clone(), config.kv.cache_bytes())
            .map_err(|e| NodeError::kv(format!("cannot open the KV in {}", data.display()), e))?;
        Ok(Self::locked(dir, kv, config, clock, None))
    }

    /// The node over `kv`, which is wrapped in the lock guard here and
    /// only here, as every store it opens is in its lock.
    fn locked(
        dir: DataDir,
        kv: Arc<dyn Kv>,
        config: Config,
        clock: Arc<dyn Clock>,
        lock: Option<DirLock>,
    ) -> Self {
        let kv: Arc<dyn Kv> = Arc::new(LockGuard::new(kv, clock.clone()));
        let retention = Arc::new(LateRetention::new());
        let locks = Locks::new(kv.clone(), clock.clone(), retention.clone());
        Self {
            dir,
            kv,
            config,
            clock,
            retention,
            locks,
            _lock: lock,
        }
    }

    /// The KV, behind its lock guard.
    pub fn kv(&self) -> &Arc<dyn Kv> {
        &self.kv
    }

    /// The clock the node was opened with.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The data directory.
    pub fn dir(&self) -> &DataDir {
        &self.dir
    }

    /// The configuration the node was opened with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// This node's name among the hosts sharing its KV: `[server] node`,
    /// else the one kept in the data directory.
    ///
    /// # Errors
    /// [`NodeError::Open`] when the directory's name cannot be read or
    /// written.
    pub fn name(&self) -> Result<String, NodeError> {
        match &self.config.server.node {
            Some(node) => Ok(node.clone()),
            None => self.dir.node_name().map_err(|e| {
                NodeError::open(
                    format!("cannot name this node in {}", self.dir.root().display()),
                    e,
                )
            }),
        }
    }

    /// The fence settings for this node's KV.
    pub fn fence_config(&self) -> FenceConfig {
        match self.config.kv.backend {
            KvBackend::Redb => FenceConfig::default(),
            // A step's lease deadline is checked before its request travels
            // to etcd, which may take up to the request timeout: revocation
            // waits that much longer before it counts a lease as over.
            KvBackend::Etcd => FenceConfig {
                lease_margin_ms: FenceConfig::default().lease_margin_ms
                    + etcd_request_timeout_ms(&self.config),
                ..FenceConfig::default()
            },
        }
    }

    /// Whether other hosts may share this node's KV (and so its timers).
    pub fn shares_kv(&self) -> bool {
        self.config.kv.backend == KvBackend::Etcd
    }

    /// Opens the store called `name`, behind its lock: the
    /// configuration's `[stores.NAME]` when present, else the filesystem
    /// store `DATA/NAME` (versioned when new).
    ///
    /// # Errors
    /// [`NodeError::Config`] when the configured store's URL is unusable;
    /// [`NodeError::Open`] when the store cannot be opened.
    pub async fn store(&self, name: &str) -> Result<Arc<dyn ObjectStore>, NodeError> {
        let store = open_store(
            Some(&self.config),
            || Ok(self.dir.clone()),
            name,
            self.clock.clone(),
        )
        .await?;
        Ok(self
            .locks
            .store(name, store, self.config.store_locked(name)))
    }

    /// Lets every store this node opened, and will open, ask `oracle` (one
    /// that follows the current retention plugin) before it destroys a
    /// locked version.
    pub fn bind_retention(&self, oracle: Arc<dyn RetentionOracle>) {
        self.retention.bind(oracle);
    }
}

/// The etcd request timeout `config` sets, or the default.
pub fn etcd_request_timeout_ms(config: &Config) -> u64 {
    config
        .kv
        .request_timeout_ms
        .unwrap_or(DEFAULT_ETCD_REQUEST_TIMEOUT_MS)
}

/// Opens the store called `name` for a command that loads no plugins,
/// behind its lock read from `kv` (a [`Node::kv`]): the configuration's
/// `[stores.NAME]` when present, else `NAME` in the data directory `data`
/// (which is then created, owner-only, if missing). With no retention
/// plugin to ask, a request that needs its answer is refused. See
/// [`Node::store`].
///
/// # Errors
/// As for [`Node::store`].
pub async fn open_named_store(
    config: Option<&Config>,
    data: &Path,
    name: &str,
    kv: Arc<dyn Kv>,
    clock: Arc<dyn Clock>,
) -> Result<Arc<dyn ObjectStore>, NodeError> {
    let store = open_store(config, || create(data), name, clock.clone()).await?;
    let locked = config.is_some_and(|config| config.store_locked(name));
    let unbound = Arc::new(LateRetention::new());
    Ok(Locks::new(kv, clock, unbound).store(name, store, locked))
}

/// The data directory `data`, created owner-only if missing.
fn create(data: &Path) -> Result<DataDir, NodeError> {
    DataDir::create(data).map_err(|e| {
        NodeError::open(
            format!("cannot use the data directory {}", data.display()),
            e,
        )
    })
}

/// Opens the store `name` as `config` names it, else in the data
/// directory `dir` gives (asked for only then: a command on configured
/// stores leaves no directory behind).
async fn open_store(
    config: Option<&Config>,
    dir: impl FnOnce() -> Result<DataDir, NodeError>,
    name: &str,
    clock: Arc<dyn Clock>,
) -> Result<Arc<dyn ObjectStore>, NodeError> {
    let url = match config.filter(|config| config.stores.contains_key(name)) {
        Some(config) => config.store(name).map_err(|e| NodeError::Config {
            what: format!("[stores.{name}]"),
            source: e.into(),
        })?,
        None => StoreUrl::File {
            // Store URLs are absolute: a store's identity must not depend
            // on the working directory.
            root: absolute(dir()?.root())?.join(name),
            versioned: None,
        },
    };
    url.open(clock)
        .await
        .map_err(|e| NodeError::open(format!("cannot open the {name} store"), e))
}

fn absolute(path: &Path) -> Result<PathBuf, NodeError> {
    std::path::absolute(path)
        .map_err(|e| NodeError::open(format!("cannot resolve {}", path.display()), e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use custodian_base::clock::FixedClock;

    #[tokio::test]
    async fn a_second_node_on_the_same_directory_is_busy_until_the_first_closes() {
        let root = tempfile::tempdir().unwrap();
        let clock: Arc<dyn Clock> = Arc::new(FixedClock::new(1));
        let first = Node::open(root.path(), Config::default(), clock.clone())
            .await
            .unwrap();
        let second = Node::open(root.path(), Config::default(), clock.clone()).await;
        assert!(matches!(second, Err(NodeError::Busy { .. })), "{second:?}");
        drop(first);
        Node::open(root.path(), Config::default(), clock)
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn an_unconfigured_store_is_a_directory_of_the_data_directory() {
        let root = tempfile::tempdir().unwrap();
        let clock: Arc<dyn Clock> = Arc::new(FixedClock::new(1));
        let node = Node::open(root.path(), Config::default(), clock)
            .await
            .unwrap();
        node.store("serving").await.unwrap();
        assert!(root.path().join("serving").is_dir());
        assert_eq!(node.fence_config(), FenceConfig::default());
        assert!(!node.shares_kv());
    }
}
