//! A node's plugins, assembled one way for `serve` and every command that
//! opens a data directory: the runtime, the named stores, the plugin set
//! (joined by a server, attached to by a command: see
//! [`custodian_runtime::plugin_set`]), the fence coordinator and the timer
//! handlers the set keeps guarded. The set's guard is applied inside the
//! set, so whatever commits through this assembly carries it.

use std::collections::BTreeMap;
use std::sync::Arc;

use custodian_base::error::ErrorKind;
use custodian_core::decisions::log::Sampling;
use custodian_core::fence::Coordinator;
use custodian_core::timers::Handlers;
use custodian_kv::Kv;
use custodian_object::ObjectStore;
use custodian_runtime::plugin_set::{
    Attach, NoEvents, PluginSet, PluginSetParts, SetEvents, Source, SwapError, WorldSettings,
    default_grants,
};
use custodian_runtime::policy::retention::Settings;
use custodian_runtime::policy::takedown;
use custodian_runtime::signature::Trust;
use custodian_runtime::{Runtime, RuntimeConfig, World};

use super::{Node, NodeError};
use crate::config::Config;
use crate::serve::metered;
use crate::serve::metrics::Metrics;

/// Where each world's plugin comes from, how each runs, and the retention
/// settings retention questions are asked with.
#[derive(Debug, Clone)]
pub struct PluginPlan {
    /// Each world's plugin (bundled when missing).
    pub sources: BTreeMap<World, Source>,
    /// Each world's limits and grants.
    pub settings: BTreeMap<World, WorldSettings>,
    /// The deployer's retention settings.
    pub retention: Settings,
    /// The keys trusted to sign plugins.
    pub trust: Trust,
    /// How much of the routine decision log is kept.
    pub sampling: Sampling,
}

impl PluginPlan {
    /// The plan `config` describes (`[plugins.*]`, `[retention]`).
    ///
    /// # Errors
    /// [`NodeError::Config`] for limits or grants that cannot work.
    pub fn configured(config: &Config) -> Result<Self, NodeError> {
        let mut sources = BTreeMap::new();
        let mut settings = BTreeMap::new();
        for world in World::ALL {
            let section = config
                .plugins
                .worlds
                .get(world.name())
                .cloned()
                .unwrap_or_default();
            let invalid = |e: String| NodeError::Config {
                what: format!("[plugins.{world}]"),
                source: e.into(),
            };
            sources.insert(
                world,
                section.path.clone().map_or(Source::Bundled, Source::File),
            );
            settings.insert(
                world,
                WorldSettings {
                    limits: section.limits().map_err(invalid)?,
                    grants: section.grants(default_grants(world)).map_err(invalid)?,
                },
            );
        }
        let trust = Trust::new(&config.plugins.trusted_keys).map_err(|e| NodeError::Config {
            what: "[plugins] trusted_keys".to_owned(),
            source: e.into(),
        })?;
        let sampling = config.audit.sampling().map_err(|e| NodeError::Config {
            what: "[audit]".to_owned(),
            source: e.into(),
        })?;
        Ok(Self {
            sources,
            settings,
            trust,
            sampling,
            retention: Settings {
                retention_ms: config.retention.retention_ms,
                noncurrent_retention_ms: config.retention.noncurrent_retention_ms,
            },
        })
    }
}

/// How a node's plugins enter the shared set.
#[derive(Debug, Clone)]
pub enum Entry {
    /// A server: joins the set ([`PluginSet::load`]) and follows it.
    Join,
    /// A one-shot command: runs the set as it finds it
    /// ([`PluginSet::attach`]).
    Attach(Attach),
}

/// What [`Node::assemble`] builds from.
pub struct AssemblyOptions {
    /// The WebAssembly runtime's settings.
    pub runtime: RuntimeConfig,
    /// The plugins and how they run.
    pub plan: PluginPlan,
    /// How the plugins enter the shared set.
    pub entry: Entry,
    /// A server's metrics: the KV and stores are then counted, and so are
    /// the plugin set's events. `None` for a command.
    pub metrics: Option<Arc<Metrics>>,
}

/// A node's plugins and what they run on.
pub struct Assembly {
    /// The KV as plugins and workers use it (counted under metrics).
    pub kv: Arc<dyn Kv>,
    /// The named stores: every configured one, `serving` and `preserved`.
    pub stores: BTreeMap<String, Arc<dyn ObjectStore>>,
    /// The plugin set.
    pub plugins: Arc<PluginSet>,
    /// The timer handlers the set keeps current and guarded, for workers.
    pub handlers: Arc<Handlers>,
    /// The fence coordinator over `kv`.
    pub coordinator: Arc<Coordinator>,
}

/// Why a node's plugins could not be assembled.
#[derive(Debug, thiserror::Error)]
pub enum AssemblyError {
    /// The node: a store, its name, the fence settings, the runtime.
    #[error(transparent)]
    Node(#[from] NodeError),
    /// The plugin set: a plugin refused, or the shared set unusable.
    #[error(transparent)]
    Plugins(#[from] SwapError),
}

impl AssemblyError {
    /// What kind of failure this is (see [`ErrorKind`]).
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Node(error) => error.kind(),
            Self::Plugins(error) => error.kind(),
        }
    }
}

impl Node {
    /// Assembles this node's plugins as `options` say, on the current
    /// tokio runtime (where blocking plugin calls drive their I/O).
    ///
    /// # Errors
    /// [`AssemblyError::Node`] when a store cannot be opened or the node
    /// named; [`AssemblyError::Plugins`] when a plugin cannot serve or the
    /// shared set cannot be used.
    pub async fn assemble(&self, options: AssemblyOptions) -> Result<Assembly, AssemblyError> {
        let failed = |what: &str, e: Box<dyn std::error::Error + Send + Sync>| NodeError::Open {
            what: what.into(),
            source: e,
        };
        let mut names: Vec<String> = self.config().stores.keys().cloned().collect();
        for name in [takedown::SERVING_STORE, takedown::PRESERVED_STORE] {
            if !names.iter().any(|n| n == name) {
                names.push(name.to_owned());
            }
        }
        let kv = match &options.metrics {
            Some(metrics) => metered::metered_kv(self.kv().clone(), metrics.clone()),
            None => self.kv().clone(),
        };
        let mut stores = BTreeMap::new();
        for name in names {
            let store = self.store(&name).await?;
            let store = match &options.metrics {
                Some(metrics) => metered::metered(&name, store, metrics.clone()),
                None => store,
            };
            stores.insert(name, store);
        }
        let runtime = Runtime::new(&options.runtime)
            .map_err(|e| failed("cannot start the WebAssembly runtime", e.into()))?;
        let coordinator = Arc::new(
            Coordinator::new(kv.clone(), self.clock().clone(), self.fence_config())
                .map_err(|e| failed("cannot fence the timers", e.into()))?,
        );
        let handlers = Arc::new(Handlers::new());
        let events: Arc<dyn SetEvents> = match options.metrics {
            Some(metrics) => metrics,
            None => Arc::new(NoEvents),
        };
        let parts = PluginSetParts {
            runtime: Arc::new(runtime),
            kv: kv.clone(),
            clock: self.clock().clone(),
            stores: stores.clone(),
            io: tokio::runtime::Handle::current(),
            handlers: handlers.clone(),
            coordinator: coordinator.clone(),
            events,
            retention: options.plan.retention,
            settings: options.plan.settings,
            node: self.name()?,
            trust: options.plan.trust,
            sampling: options.plan.sampling,
        };
        let plugins = match &options.entry {
            Entry::Join => PluginSet::load(parts, &options.plan.sources).await?,
            Entry::Attach(attach) => {
                PluginSet::attach(parts, &options.plan.sources, attach).await?
            }
        };
        // The set's route follows hot swaps: the stores ask whichever
        // retention plugin is current when they ask.
        self.bind_retention(plugins.retention());
        Ok(Assembly {
            kv,
            stores,
            plugins,
            handlers,
            coordinator,
        })
    }
}
