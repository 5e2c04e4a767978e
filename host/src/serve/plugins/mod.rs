//! The loaded policy plugins, one per world, and their hot swap.
//!
//! # Swap protocol
//!
//! A swap ([`PluginSet::swap`]) first proves the new component: it must
//! load (a component, not a core module, built against a compatible
//! contract), implement the world, link against the world's types, and
//! answer a smoke call in isolation (an empty in-memory KV and stores)
//! without trapping or hitting a limit. Anything else refuses the swap and
//! the old plugin keeps serving.
//!
//! Then, one swap at a time:
//! 1. the world's slot points at the new plugin, and the timer handler of a
//!    timer-driven world is replaced: calls already running finish on the
//!    old plugin, calls starting now use the new one;
//! 2. the timer fence's *authority* generation is raised and revoked to
//!    completion ([`crate::fence`]): every step commits under a lease guard,
//!    and revocation breaks every guard granted before it, so once it
//!    completes no step begun before step 1 — the only ones that can be
//!    running the old plugin — can commit;
//! 3. the swap is audited (`plugin/swap`, both content hashes, the new
//!    authority generation) and only then reported complete.
//!
//! Step 1 comes before step 2 on purpose: the other order would let a step
//! take a fresh lease after the bump and still run the old plugin.

mod proof;

pub use proof::read_source;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use serde::Serialize;

use super::metrics::Metrics;
use crate::audit::{self, Record};
use crate::clock::Clock;
use crate::fence::{Coordinator, FenceError, FenceKind, Namespace};
use crate::kv::memory::MemoryKv;
use crate::kv::{Kv, KvError, Precondition};
use crate::object::ObjectStore;
use crate::policy::PolicyError;
use crate::policy::archive::ArchivePolicy;
use crate::policy::purge::PurgePolicy;
use crate::policy::retention::{
    Assessment, Item, RetentionOracle, RetentionPolicy, RetentionRoute, Settings,
};
use crate::policy::takedown::{self, TakedownHandler, TakedownPolicy};
use crate::runtime::{CallContext, Grants, Limits, Plugin, PluginInfo, Runtime, Services, World};
use crate::timers::{self, Handlers};
use proof::prove;

/// How each world's plugin runs: its limits and grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorldSettings {
    /// Bounds on each call.
    pub limits: Limits,
    /// What it may reach.
    pub grants: Grants,
}

/// Where each world's plugin comes from at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The plugin bundled with the host.
    Bundled,
    /// A `.wasm` file.
    File(std::path::PathBuf),
}

/// What a plugin set is built from.
pub struct PluginSetParts {
    /// The WebAssembly runtime.
    pub runtime: Arc<Runtime>,
    /// The durable KV (policy state, audit, fences).
    pub kv: Arc<dyn Kv>,
    /// "Now".
    pub clock: Arc<dyn Clock>,
    /// The stores plugins may be granted.
    pub stores: BTreeMap<String, Arc<dyn ObjectStore>>,
    /// Where blocking plugin calls drive their I/O.
    pub io: tokio::runtime::Handle,
    /// The timer handlers the workers run.
    pub handlers: Arc<Handlers>,
    /// The fence coordinator over `kv`.
    pub coordinator: Arc<Coordinator>,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// The deployer's retention settings.
    pub retention: Settings,
    /// Limits and grants by world.
    pub settings: BTreeMap<World, WorldSettings>,
}

/// One loaded plugin of a world, wrapped for its driver.
pub struct Loaded {
    plugin: Arc<Plugin>,
    since_ms: u64,
    policy: Policy,
}

enum Policy {
    Takedown(Arc<TakedownPolicy>),
    Retention(Arc<RetentionPolicy>),
    Purge(Arc<PurgePolicy>),
    Archive(Arc<ArchivePolicy>),
}

/// A loaded plugin as `GET /v1/plugins` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct LoadedView {
    /// The world it serves.
    pub world: World,
    /// Where it came from.
    pub source: String,
    /// BLAKE3 of the `.wasm`, hex.
    pub hash: String,
    /// Size of the `.wasm`.
    pub size: u64,
    /// The `custodian:policy` version it was built against.
    pub policy_version: Option<String>,
    /// Its imports, with their package versions.
    pub imports: Vec<String>,
    /// When it began serving, ms since the epoch.
    pub since_ms: u64,
}

/// What a completed swap did.
#[derive(Debug, Clone, Serialize)]
pub struct SwapReport {
    /// The world.
    pub world: World,
    /// The plugin that served before.
    pub previous: LoadedView,
    /// The plugin serving now.
    pub current: LoadedView,
    /// Whether anything changed (swapping in the same bytes does not).
    pub changed: bool,
    /// The timer fence's authority generation after the swap: every step
    /// committed from now on is audited under it or a later one.
    pub authority_generation: u64,
    /// Time from receiving the plugin to the swap's completion, in ms.
    pub elapsed_ms: f64,
}

/// Why a swap did not complete.
#[derive(Debug, thiserror::Error)]
pub enum SwapError {
    /// The new plugin was refused; the old one keeps serving.
    #[error("the plugin was refused: {0}")]
    Refused(String),
    /// The new plugin serves, but the old one's steps could not be fenced
    /// off yet; retrying the swap with the same plugin finishes it.
    #[error("the new plugin serves, but the old one's steps are not yet fenced off: {0}")]
    Fence(#[from] FenceError),
    /// The swap could not be audited (the new plugin serves, fenced).
    #[error("the swap took effect but could not be audited")]
    Audit(#[from] KvError),
}

impl Loaded {
    /// The plugin.
    pub fn plugin(&self) -> &Arc<Plugin> {
        &self.plugin
    }

    fn view(&self, world: World) -> LoadedView {
        let info: &PluginInfo = self.plugin.info();
        LoadedView {
            world,
            source: info.source.clone(),
            hash: info.hash.clone(),
            size: info.size,
            policy_version: info.policy_version.clone(),
            imports: info.imports.clone(),
            since_ms: self.since_ms,
        }
    }
}

/// One world's current plugin. Readers clone the `Arc` and drop the lock
/// at once, so a call never holds it and a swap never waits on a call.
struct Slot(RwLock<Arc<Loaded>>);

impl Slot {
    fn get(&self) -> Arc<Loaded> {
        self.0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn replace(&self, loaded: Arc<Loaded>) -> Arc<Loaded> {
        let mut slot = self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        std::mem::replace(&mut *slot, loaded)
    }
}

/// Retention questions routed to whichever retention plugin is current
/// when each question is asked.
struct CurrentRetention {
    slot: Arc<Slot>,
    settings: Settings,
    call: Arc<CallContext>,
}

impl CurrentRetention {
    fn route(&self) -> Result<RetentionRoute, PolicyError> {
        match &self.slot.get().policy {
            Policy::Retention(policy) => Ok(RetentionRoute::new(
                policy.clone(),
                self.settings,
                self.call.services.clone(),
                self.call.limits.clone(),
            )),
            _ => Err(PolicyError::Unavailable(
                "the retention slot holds no retention plugin".into(),
            )),
        }
    }
}

impl RetentionOracle for CurrentRetention {
    fn assess(&self, item: Item, now_ms: u64) -> Result<Assessment, PolicyError> {
        self.route()?.assess(item, now_ms)
    }

    fn set_hold(&self, item: Item, enabled: bool) -> Result<Item, PolicyError> {
        self.route()?.set_hold(item, enabled)
    }
}

/// The loaded plugins, one per world.
pub struct PluginSet {
    runtime: Arc<Runtime>,
    kv: Arc<dyn Kv>,
    clock: Arc<dyn Clock>,
    handlers: Arc<Handlers>,
    coordinator: Arc<Coordinator>,
    metrics: Arc<Metrics>,
    settings: BTreeMap<World, WorldSettings>,
    /// What takedown steps and operator calls run with: the real KV and
    /// stores, retention routed to the current retention plugin.
    services: Arc<Services>,
    /// What plugins granted nothing run with: a clock and the I/O runtime.
    isolated: Arc<Services>,
    retention: Arc<CurrentRetention>,
    slots: BTreeMap<World, Arc<Slot>>,
    /// One swap at a time: two concurrent swaps of a world would each
    /// audit a "previous" plugin the other already replaced.
    swapping: tokio::sync::Mutex<SwapState>,
}

/// What one swap leaves for the next.
#[derive(Default)]
struct SwapState {
    /// A swap installed its plugin but could not raise the fence: the
    /// next swap (even of the same bytes) raises it before reporting.
    unfenced: bool,
}

fn isolated_services(clock: &Arc<dyn Clock>, io: &tokio::runtime::Handle) -> Arc<Services> {
    Arc::new(Services {
        kv: Arc::new(MemoryKv::new(clock.clone())),
        stores: BTreeMap::new(),
        clock: clock.clone(),
        io: io.clone(),
        retention: None,
    })
}

impl PluginSet {
    /// Loads every world's plugin from `sources` (bundled when missing),
    /// smoke-tests each, and registers the takedown handler.
    ///
    /// # Errors
    /// The first plugin that cannot serve, with the reason.
    pub async fn load(
        parts: PluginSetParts,
        sources: &BTreeMap<World, Source>,
    ) -> Result<Arc<Self>, SwapError> {
        let isolated = isolated_services(&parts.clock, &parts.io);
        let mut candidates = BTreeMap::new();
        for world in World::ALL {
            let source = sources.get(&world).cloned().unwrap_or(Source::Bundled);
            let (bytes, name) = read_source(world, &source)?;
            let settings = world_settings(&parts.settings, world);
            let loaded = prove(
                &parts.runtime,
                &isolated,
                &parts.clock,
                world,
                &settings,
                bytes,
                name,
            )
            .await?;
            candidates.insert(world, Arc::new(Slot(RwLock::new(Arc::new(loaded)))));
        }
        let retention_settings = world_settings(&parts.settings, World::Retention);
        let retention = Arc::new(CurrentRetention {
            slot: candidates[&World::Retention].clone(),
            settings: parts.retention,
            call: Arc::new(CallContext {
                services: isolated.clone(),
                grants: Grants::none(),
                limits: retention_settings.limits,
                actor: "host:retention-route".into(),
            }),
        });
        let services = Arc::new(Services {
            kv: parts.kv.clone(),
            stores: parts.stores,
            clock: parts.clock.clone(),
            io: parts.io,
            retention: Some(retention.clone()),
        });
        let set = Arc::new(Self {
            runtime: parts.runtime,
            kv: parts.kv,
            clock: parts.clock,
            handlers: parts.handlers,
            coordinator: parts.coordinator,
            metrics: parts.metrics,
            settings: parts.settings,
            services,
            isolated,
            retention,
            slots: candidates,
            swapping: tokio::sync::Mutex::new(SwapState::default()),
        });
        set.register_handler(&set.slot(World::Takedown).get());
        Ok(set)
    }

    fn slot(&self, world: World) -> &Arc<Slot> {
        &self.slots[&world]
    }

    fn settings(&self, world: World) -> WorldSettings {
        world_settings(&self.settings, world)
    }

    fn register_handler(&self, loaded: &Loaded) {
        if let Policy::Takedown(policy) = &loaded.policy {
            let settings = self.settings(World::Takedown);
            self.handlers.register(Arc::new(TakedownHandler::new(
                policy.clone(),
                self.services.clone(),
                settings.grants,
                settings.limits,
            )));
        }
    }

    /// Every world's current plugin.
    pub fn list(&self) -> Vec<LoadedView> {
        World::ALL
            .into_iter()
            .map(|world| self.slot(world).get().view(world))
            .collect()
    }

    /// The current plugin of `world`.
    pub fn current(&self, world: World) -> Arc<Loaded> {
        self.slot(world).get()
    }

    /// The current takedown policy.
    pub fn takedown(&self) -> Arc<TakedownPolicy> {
        match &self.slot(World::Takedown).get().policy {
            Policy::Takedown(policy) => policy.clone(),
            _ => unreachable!("the takedown slot only ever holds takedown plugins"),
        }
    }

    /// The current takedown policy for an operator action, with the guard
    /// its commit must carry: the authority epoch as it is now, read
    /// *before* the policy, so an action planned by a plugin that a swap
    /// then replaces cannot commit once the swap has raised the epoch
    /// (the guarantee steps have from their leases).
    ///
    /// # Errors
    /// The epoch cannot be read.
    pub async fn takedown_for_action(
        &self,
    ) -> Result<(Arc<TakedownPolicy>, Vec<Precondition>), FenceError> {
        let guard = self
            .coordinator
            .epoch_guard(&fence_namespace(), FenceKind::Authority)
            .await?;
        Ok((self.takedown(), vec![guard]))
    }

    /// A call context for `policy` (a takedown policy) with the takedown
    /// world's grants and limits, for operator calls.
    pub fn takedown_call(&self, policy: &TakedownPolicy) -> Arc<CallContext> {
        let settings = self.settings(World::Takedown);
        Arc::new(CallContext {
            services: self.services.clone(),
            grants: settings.grants,
            limits: settings.limits,
            actor: policy.plugin().info().actor(),
        })
    }

    /// The services takedown calls run with (for operator actions).
    pub fn services(&self) -> &Arc<Services> {
        &self.services
    }

    /// The current purge policy.
    pub fn purge(&self) -> Arc<PurgePolicy> {
        match &self.slot(World::Purge).get().policy {
            Policy::Purge(policy) => policy.clone(),
            _ => unreachable!("the purge slot only ever holds purge plugins"),
        }
    }

    /// The current archive policy.
    pub fn archive(&self) -> Arc<ArchivePolicy> {
        match &self.slot(World::Archive).get().policy {
            Policy::Archive(policy) => policy.clone(),
            _ => unreachable!("the archive slot only ever holds archive plugins"),
        }
    }

    /// Retention questions, answered by the current retention plugin with
    /// the configured settings.
    pub fn retention(&self) -> Arc<dyn RetentionOracle> {
        self.retention.clone()
    }

    /// The timer fence's current authority generation.
    async fn authority(&self) -> Result<u64, FenceError> {
        self.coordinator
            .current_epoch(&fence_namespace(), FenceKind::Authority)
            .await
    }

    /// Replaces the plugin of `world` with the component in `bytes`
    /// (named `source` in messages), by `operator`; see the module
    /// documentation for the protocol.
    ///
    /// # Errors
    /// [`SwapError::Refused`] leaves the old plugin serving; the other
    /// errors come after the new plugin began serving.
    pub async fn swap(
        &self,
        world: World,
        bytes: Vec<u8>,
        source: String,
        operator: &str,
    ) -> Result<SwapReport, SwapError> {
        let started = Instant::now();
        let settings = self.settings(world);
        let proven = prove(
            &self.runtime,
            &self.isolated,
            &self.clock,
            world,
            &settings,
            bytes,
            source,
        )
        .await;
        let loaded = match proven {
            Ok(loaded) => Arc::new(loaded),
            Err(error) => {
                self.metrics.swap(world.name(), "refused");
                tracing::warn!(%world, "plugin swap refused: {error}");
                return Err(error);
            }
        };
        let mut state = self.swapping.lock().await;
        let previous = self.slot(world).get();
        let changed = previous.plugin.info().hash != loaded.plugin.info().hash;
        let unchanged = |generation| SwapReport {
            world,
            previous: previous.view(world),
            current: previous.view(world),
            changed: false,
            authority_generation: generation,
            elapsed_ms: started.elapsed().as_secs_f64() * 1e3,
        };
        if !changed && !state.unfenced {
            let generation = self.authority().await?;
            return Ok(unchanged(generation));
        }
        if changed {
            // 1. New calls use the new plugin.
            self.slot(world).replace(loaded.clone());
            self.register_handler(&loaded);
        }
        // 2. Steps begun before this point cannot commit once it returns.
        state.unfenced = true;
        let generation = self.authority().await? + 1;
        self.coordinator
            .transition_and_revoke(&fence_namespace(), generation, FenceKind::Authority)
            .await?;
        state.unfenced = false;
        if !changed {
            return Ok(unchanged(generation));
        }
        // 3. Audited, then reported.
        let (old, new) = (previous.plugin.info(), loaded.plugin.info());
        let record = Record {
            at_ms: self.clock.now_ms(),
            actor: format!("operator:{operator}"),
            event: "plugin/swap".into(),
            targets: vec![
                format!("world:{world}"),
                format!("from:{}", old.hash),
                format!("to:{}", new.hash),
            ],
            detail: Some(format!(
                "{} replaced by {}; authority generation {generation}: no step of the \
                 previous plugin commits from now on",
                old.source, new.source
            )),
        };
        audit::append(self.kv.as_ref(), &record).await?;
        self.metrics.swap(world.name(), "completed");
        tracing::info!(
            %world,
            from = %old.hash,
            to = %new.hash,
            authority_generation = generation,
            "plugin swapped"
        );
        Ok(SwapReport {
            world,
            previous: previous.view(world),
            current: loaded.view(world),
            changed: true,
            authority_generation: generation,
            elapsed_ms: started.elapsed().as_secs_f64() * 1e3,
        })
    }
}

/// The namespace the timer workers' leases live in.
fn fence_namespace() -> Namespace {
    Namespace::new(timers::FENCE_NAMESPACE).expect("a valid name")
}

fn world_settings(settings: &BTreeMap<World, WorldSettings>, world: World) -> WorldSettings {
    settings
        .get(&world)
        .cloned()
        .unwrap_or_else(|| WorldSettings {
            limits: Limits::default(),
            grants: default_grants(world),
        })
}

/// What a world's plugin reaches unless the configuration says otherwise.
pub fn default_grants(world: World) -> Grants {
    match world {
        World::Takedown => takedown::grants(),
        // The others decide from what the host hands them.
        World::Retention | World::Purge | World::Archive => Grants::none(),
    }
}

#[cfg(test)]
mod tests;
