//! The plugin set: the loaded policy plugins, one per world, and their
//! hot swap. `serve` and every command that opens a data directory
//! assemble it the one way the server's node module does, so each
//! commits under the same set guard.
//!
//! # One plugin set per KV
//! Hosts sharing a KV run one plugin set, kept in that KV ([`shared`]):
//! each world's plugin hash, and the plugins' bytes. Every host follows
//! it ([`PluginSet::follow`], polled by `serve`), and every step commit
//! and operator action carries an `Equals` guard on the set row its host
//! installed, so nothing planned by a plugin the set no longer names
//! commits, on any host.
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
//! Then it replays the takedown timers due next through the serving
//! plugin and the new one, read-only (`proof::replay`): a new plugin
//! that traps on the deployment's own state, or fails a step the serving
//! plugin answers, is refused too.
//!
//! Then, one swap at a time on this host:
//! 1. the host catches up with the shared set, stores the new plugin's
//!    bytes, and publishes the set naming it, compare-and-set on the row
//!    it caught up with (another host's concurrent swap makes it catch up
//!    and try again): from here no step or action guarded on the old set
//!    commits anywhere;
//! 2. the timer fence's *authority* generation is raised and revoked to
//!    completion ([`custodian_core::fence`]), so each step's audit record
//!    shows by its authority which side of the swap it committed on: no
//!    step of the new plugin commits under the old generation;
//! 3. the world's slot points at the new plugin, the timer handler of a
//!    timer-driven world is replaced, and both carry the new set's guard:
//!    calls already running finish on the old plugin (and cannot commit),
//!    calls starting now use the new one;
//! 4. the swap is audited (`plugin/swap`, both content hashes, the new
//!    authority generation) and only then reported complete.
//!
//! Readers take the set guard *before* the plugin (see
//! [`PluginSet::takedown_for_action`]): a plugin newer than its guard is
//! harmless, an older one would not be.
//!
//! # Commands
//! A one-shot command that opens a data directory runs the set as it finds
//! it ([`PluginSet::attach`]) and writes nothing to it: each world's plugin
//! is the set's, or the one the command names (refused, when the command
//! changes state, unless it is the set's); where no host published a set,
//! the configured or bundled ones. Its commits carry the same guard as a
//! server's: the set row it found, or that row's absence.
//!
//! # At start
//! A host proves its configured plugins, then joins the shared set: the
//! first host publishes its own; a world whose configured plugin changed
//! since this node's last start is a swap (audited `plugin/swap` by
//! `host:NODE`); any other difference follows the set, so a restart with
//! an old configuration does not undo a swap.

mod dry_run;
mod events;
mod proof;
mod rollback;
pub mod shared;
#[cfg(test)]
mod tests;

pub use dry_run::{Change, DryRun, MAX_DRY_RUN_ITEMS, PlanReplay, Progress, Replay};
pub use events::{NoEvents, SetEvents};
use proof::read_source;
pub use proof::smoke_test;
pub use rollback::LastSwap;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use serde::Serialize;

use crate::policy::PolicyError;
use crate::policy::access::{AccessJudge, AccessPolicy, AccessRequest, Decision, Unanswered};
use crate::policy::archive::ArchivePolicy;
use crate::policy::purge::PurgePolicy;
use crate::policy::retention::{
    Assessment, Item, RetentionOracle, RetentionPolicy, RetentionRoute, Settings,
};
use crate::policy::takedown::{self, TakedownHandler, TakedownPolicy};
use crate::signature::{Signature, Trust};
use crate::{
    CallContext, Grants, Limits, Plugin, PluginInfo, Runtime, Services, World, content_hash,
};
use custodian_base::clock::Clock;
use custodian_base::error::ErrorKind;
use custodian_core::audit::{self, Record};
use custodian_core::decisions::log::Sampling;
use custodian_core::fence::{Coordinator, FenceError, FenceKind, Namespace};
use custodian_core::timers::{self, Handlers};
use custodian_kv::{Kv, KvError, Precondition};
use custodian_object::ObjectStore;
use proof::prove;
use shared::{Member, SetRow, SharedError, SharedSet};

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
    /// Told when the set is followed and swapped (the server's metrics).
    pub events: Arc<dyn SetEvents>,
    /// The deployer's retention settings.
    pub retention: Settings,
    /// Limits and grants by world.
    pub settings: BTreeMap<World, WorldSettings>,
    /// This host's node name: the shared set remembers what each node's
    /// configuration named, and audits which node adopted what.
    pub node: String,
    /// The keys trusted to sign plugins (`[plugins] trusted_keys`): with
    /// any, every plugin this host loads, from any source, must carry a
    /// signature by one ([`crate::signature`], "The rule").
    pub trust: Trust,
    /// How much of the routine decision log is kept.
    pub sampling: Sampling,
}

/// One loaded plugin of a world, wrapped for its driver.
#[derive(Clone)]
pub struct Loaded {
    plugin: Arc<Plugin>,
    since_ms: u64,
    policy: Policy,
    /// Its verified signature, `None` for an unsigned or bundled plugin.
    signature: Option<Signature>,
}

#[derive(Clone)]
enum Policy {
    Takedown(Arc<TakedownPolicy>),
    Retention(Arc<RetentionPolicy>),
    Purge(Arc<PurgePolicy>),
    Archive(Arc<ArchivePolicy>),
    Access(Arc<AccessPolicy>),
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
    /// The public key that signed it (`ed25519:BASE64`); `None` when it
    /// is unsigned or bundled.
    pub signer: Option<String>,
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
    /// The new plugin is the shared set's (nothing of the old one
    /// commits), but the authority generation could not be raised yet, so
    /// this host does not run it until it follows the set (within a
    /// poll); retrying the swap with the same plugin finishes it.
    #[error("the new plugin serves, but the authority generation could not be raised yet: {0}")]
    Fence(#[from] FenceError),
    /// The swap could not be audited (the new plugin serves, fenced).
    #[error("the swap took effect but could not be audited")]
    Audit(#[from] KvError),
    /// The shared plugin set could not be read or written, or another
    /// host's plugin in it could not be loaded here; nothing was swapped
    /// unless the error says the outcome is unknown.
    #[error("the shared plugin set: {0}")]
    Shared(#[from] SharedError),
    /// Other hosts kept swapping plugins while this swap tried to publish.
    #[error("other hosts changed the plugin set {0} times during this swap; try again")]
    Contended(u32),
}

impl SwapError {
    /// What kind of failure this is (see [`ErrorKind`]): a refused plugin
    /// is the caller's argument; a swap that took effect unaudited is the
    /// host's own failure; anything else left a retry to finish or redo
    /// the swap (unavailable), whatever failed below.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Refused(_) => ErrorKind::InvalidArgument,
            Self::Audit(_) => ErrorKind::Internal,
            Self::Fence(_) | Self::Shared(_) | Self::Contended(_) => ErrorKind::Unavailable,
        }
    }
}

/// How this host stands with the shared plugin set.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SharedView {
    /// This host runs exactly the set's plugins.
    pub in_sync: bool,
    /// Why the last attempt to follow the set failed, if it did.
    pub last_error: Option<String>,
}

/// How a one-shot command runs the shared set ([`PluginSet::attach`]).
#[derive(Debug, Clone, Default)]
pub struct Attach {
    /// The plugins the command names, by world: they run instead of the
    /// set's, which a command that changes state allows only when they
    /// are the set's (else it would commit a policy a swap replaced).
    pub named: BTreeMap<World, Source>,
    /// Whether the command changes state.
    pub changes: bool,
}

/// Why a command may not change state with `loaded` as `world`'s plugin.
fn not_the_sets(loaded: &Loaded, world: World, member: &Member, row: &SetRow) -> String {
    format!(
        "{} is not the {world} plugin this data directory's shared plugin set names \
         ({}, hash {}, set by {}): a server swapped it in, and a step of another plugin \
         would commit a policy the swap replaced; leave --plugin out to run the set's \
         plugin, or swap this one in through the server",
        loaded.plugin.info().source,
        member.source,
        &member.hash[..12.min(member.hash.len())],
        row.set.by
    )
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
            signer: self.signature.as_ref().map(|s| s.key.clone()),
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
        Self::route_to(&self.slot.get(), self)
    }

    /// The route to `loaded`, the retention slot's plugin read once.
    fn route_to(loaded: &Loaded, this: &Self) -> Result<RetentionRoute, PolicyError> {
        let settings = this.settings;
        let (services, limits) = (this.call.services.clone(), this.call.limits.clone());
        match &loaded.policy {
            Policy::Retention(policy) => Ok(RetentionRoute::new(
                policy.clone(),
                settings,
                services,
                limits,
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

    fn assess_by(
        &self,
        item: Item,
        now_ms: u64,
    ) -> (Result<Assessment, PolicyError>, Option<String>) {
        // One read of the slot: the hash is the plugin that answered,
        // even if a swap lands between the two.
        let loaded = self.slot.get();
        let hash = loaded.plugin.info().hash.clone();
        let answer = Self::route_to(&loaded, self).and_then(|route| route.assess(item, now_ms));
        (answer, Some(hash))
    }
}

/// Access questions answered by whichever access plugin is current when
/// each is asked: a judge obtained before a swap decides with the new
/// plugin after it. Finding the current plugin is a read lock and an `Arc`
/// clone, nothing next to the call.
struct CurrentAccess {
    slot: Arc<Slot>,
}

impl CurrentAccess {
    fn policy(&self) -> Result<Arc<AccessPolicy>, Unanswered> {
        match &self.slot.get().policy {
            Policy::Access(policy) => Ok(policy.clone()),
            _ => Err(Unanswered("the access slot holds no access plugin".into())),
        }
    }
}

impl AccessJudge for CurrentAccess {
    fn decide(&self, request: &AccessRequest) -> Result<Decision, Unanswered> {
        AccessJudge::decide(self.policy()?.as_ref(), request)
    }

    fn decide_now(&self, request: &AccessRequest) -> Option<Result<Decision, Unanswered>> {
        match self.policy() {
            Ok(policy) => AccessJudge::decide_now(policy.as_ref(), request),
            Err(unanswered) => Some(Err(unanswered)),
        }
    }

    /// The current plugin's hash: during a swap, possibly the plugin that
    /// replaced the one a racing `decide` asked.
    fn plugin_hash(&self) -> String {
        self.slot.get().plugin.info().hash.clone()
    }
}

/// The loaded plugins, one per world.
pub struct PluginSet {
    runtime: Arc<Runtime>,
    kv: Arc<dyn Kv>,
    clock: Arc<dyn Clock>,
    handlers: Arc<Handlers>,
    coordinator: Arc<Coordinator>,
    events: Arc<dyn SetEvents>,
    settings: BTreeMap<World, WorldSettings>,
    node: String,
    trust: Trust,
    /// What takedown steps and operator calls run with: the real KV and
    /// stores, retention routed to the current retention plugin.
    services: Arc<Services>,
    /// What plugins granted nothing run with: a clock and the I/O runtime.
    isolated: Arc<Services>,
    retention: Arc<CurrentRetention>,
    /// How much of the routine decision log is kept.
    sampling: Sampling,
    slots: BTreeMap<World, Arc<Slot>>,
    /// The shared set row the slots hold the plugins of: the guard of
    /// every commit planned with them. Replaced only after the slots.
    /// `None` only for a command attached to a KV without a set.
    installed: RwLock<Arc<Option<SetRow>>>,
    /// How the last attempt to follow the set went.
    sync: std::sync::Mutex<SharedView>,
    /// One swap or follow at a time: two concurrent swaps of a world would
    /// each audit a "previous" plugin the other already replaced.
    swapping: tokio::sync::Mutex<SwapState>,
    /// The last swap made on this host, per world, with the replaced
    /// plugin's bytes: what a rollback restores (see [`rollback`]).
    last_swaps: std::sync::Mutex<BTreeMap<World, rollback::Remembered>>,
    /// Takedown timers a swap replays through both plugins first.
    replay_timers: std::sync::atomic::AtomicU32,
}

/// What one swap leaves for the next.
#[derive(Default)]
struct SwapState {
    /// A swap installed its plugin but could not raise the fence: the
    /// next swap (even of the same bytes) raises it before reporting.
    unfenced: bool,
}

/// Swaps that lose the set to other hosts this many times in a row give
/// up ([`SwapError::Contended`]) rather than retry forever.
const PUBLISH_ATTEMPTS: u32 = 8;

/// What proving a plugin needs.
struct Prover<'a> {
    runtime: &'a Arc<Runtime>,
    isolated: &'a Arc<Services>,
    clock: &'a Arc<dyn Clock>,
    settings: &'a BTreeMap<World, WorldSettings>,
    trust: &'a Trust,
}

impl Prover<'_> {
    /// Admits `bytes` by their `signature` (see [`crate::signature`],
    /// "The rule"), then proves them: every plugin any host loads, from
    /// a file, an upload or the shared set, passes here.
    async fn prove(
        &self,
        world: World,
        bytes: Vec<u8>,
        source: String,
        signature: Option<Signature>,
    ) -> Result<Loaded, SwapError> {
        let hash = crate::content_hash(&bytes);
        let bundled = crate::bundled::plugin(world)
            .is_some_and(|own| own.len() == bytes.len() && crate::content_hash(own) == hash);
        let signature = self
            .trust
            .admit(&hash, &source, signature.as_ref(), bundled)
            .map_err(|e| SwapError::Refused(e.to_string()))?;
        let mut loaded = prove(
            self.runtime,
            self.isolated,
            self.clock,
            world,
            &world_settings(self.settings, world),
            bytes,
            source,
        )
        .await?;
        loaded.signature = signature;
        Ok(loaded)
    }

    /// The plugin `member` names: the bundled one when the hashes match
    /// (no need to read it), else its stored bytes, proven here.
    async fn load_member(
        &self,
        kv: &dyn Kv,
        world: World,
        member: &Member,
    ) -> Result<Loaded, SwapError> {
        let bytes = shared::plugin_bytes(kv, world, member).await?;
        self.prove(
            world,
            bytes,
            member.source.clone(),
            member.signature.clone(),
        )
        .await
    }
}

/// A configured plugin at start: proven, with its bytes for the set.
struct Configured {
    loaded: Loaded,
    bytes: Vec<u8>,
}

fn member_of(loaded: &Loaded) -> Member {
    let info = loaded.plugin.info();
    Member {
        hash: info.hash.clone(),
        size: info.size,
        source: info.source.clone(),
        signature: loaded.signature.clone(),
    }
}

fn adopt_record(node: &str, world: World, from: &str, to: &Member, at_ms: u64) -> Record {
    Record {
        at_ms,
        actor: format!("host:{node}"),
        event: "plugin/adopt".into(),
        targets: vec![
            format!("world:{world}"),
            format!("from:{from}"),
            format!("to:{}", to.hash),
            format!("node:{node}"),
        ],
        detail: Some(format!(
            "node {node} now runs {} as the shared plugin set names it",
            to.source
        )),
    }
}

/// After publishing `row`: stores the `published` plugins again (undoing
/// a collection that ran between their first store and the publish; see
/// [`shared`], "Collecting") and collects the plugins `row` no longer
/// names. Best effort: a failure is logged, and the next swap collects.
async fn settle(kv: &dyn Kv, row: &SetRow, published: &[(&str, &[u8])]) {
    for (hash, bytes) in published {
        if let Err(error) = shared::store_blob(kv, hash, bytes).await {
            tracing::warn!(plugin = %hash, "cannot store the published plugin again: {error}");
        }
    }
    match shared::collect_garbage(kv, row).await {
        Ok(0) => {}
        Ok(deleted) => tracing::info!(deleted, "plugins no longer in the shared set deleted"),
        Err(error) => tracing::warn!("cannot collect unused plugins: {error}"),
    }
}

/// Reconciles the configured plugins with the shared set (see the module
/// documentation, "At start"): what this host serves, and the set row
/// that guards it.
async fn join(
    prover: &Prover<'_>,
    kv: &dyn Kv,
    node: &str,
    configured: BTreeMap<World, Configured>,
) -> Result<(BTreeMap<World, Loaded>, SetRow), SwapError> {
    let remembered = shared::configured(kv, node).await?;
    let hashes: BTreeMap<String, String> = configured
        .iter()
        .map(|(world, c)| (world.name().to_owned(), c.loaded.plugin.info().hash.clone()))
        .collect();
    for _ in 0..PUBLISH_ATTEMPTS {
        let now = prover.clock.now_ms();
        let row = shared::read(kv).await?;
        let mut serving = BTreeMap::new();
        let mut records = Vec::new();
        let mut set = match &row {
            Some(row) => row.set.clone(),
            None => SharedSet {
                worlds: BTreeMap::new(),
                by: format!("host:{node}"),
                at_ms: now,
            },
        };
        // The worlds whose configured plugin this host publishes.
        let mut publishing = Vec::new();
        for (world, mine) in &configured {
            let hash = &hashes[world.name()];
            let publish = match set.member(*world) {
                Some(member) if &member.hash == hash => false,
                // This node's configuration names a plugin other than at
                // its last start: a deliberate change, so a swap.
                Some(member)
                    if remembered
                        .get(world.name())
                        .is_some_and(|before| before != hash) =>
                {
                    records.push(Record {
                        at_ms: now,
                        actor: format!("host:{node}"),
                        event: "plugin/swap".into(),
                        targets: vec![
                            format!("world:{world}"),
                            format!("from:{}", member.hash),
                            format!("to:{hash}"),
                        ],
                        detail: Some(format!(
                            "the configuration of node {node} changed to {}; the shared set \
                             follows it",
                            mine.loaded.plugin.info().source
                        )),
                    });
                    true
                }
                Some(member) => {
                    let member = member.clone();
                    tracing::warn!(
                        %world,
                        configured = %hash,
                        shared = %member.hash,
                        "this host's configured plugin differs from the shared set's; \
                         following the set (swap to change it)"
                    );
                    records.push(adopt_record(node, *world, hash, &member, now));
                    serving.insert(*world, prover.load_member(kv, *world, &member).await?);
                    continue;
                }
                None => true,
            };
            if publish {
                shared::store_blob(kv, hash, &mine.bytes).await?;
                set.worlds
                    .insert(world.name().to_owned(), member_of(&mine.loaded));
                publishing.push((hash.as_str(), &mine.bytes[..]));
            }
            serving.insert(*world, mine.loaded.clone());
        }
        let installed = if publishing.is_empty() {
            row.expect("a set that needed nothing of this host was read")
        } else {
            set.by = format!("host:{node}");
            set.at_ms = now;
            let Some(written) = shared::publish(kv, row.as_ref(), set).await? else {
                continue;
            };
            settle(kv, &written, &publishing).await;
            written
        };
        for record in &records {
            audit::append(kv, record).await?;
        }
        shared::remember_configured(kv, node, &hashes).await?;
        return Ok((serving, installed));
    }
    Err(SwapError::Contended(PUBLISH_ATTEMPTS))
}

impl PluginSet {
    /// The timer handlers this set keeps current: a swap replaces a
    /// timer-driven world's handler here, with the new set's guard.
    pub fn handlers(&self) -> &Handlers {
        &self.handlers
    }

    /// Loads every world's plugin from `sources` (bundled when missing),
    /// smoke-tests each, joins the shared plugin set (see the module
    /// documentation), and registers the takedown handler: how a host
    /// that serves enters the set.
    ///
    /// # Errors
    /// The first plugin that cannot serve, with the reason, or a shared
    /// set that cannot be read or written.
    pub async fn load(
        parts: PluginSetParts,
        sources: &BTreeMap<World, Source>,
    ) -> Result<Arc<Self>, SwapError> {
        let isolated = Services::isolated(parts.clock.clone(), parts.io.clone());
        let prover = Prover {
            runtime: &parts.runtime,
            isolated: &isolated,
            clock: &parts.clock,
            settings: &parts.settings,
            trust: &parts.trust,
        };
        let mut configured = BTreeMap::new();
        for world in World::ALL {
            let source = sources.get(&world).cloned().unwrap_or(Source::Bundled);
            let (bytes, name, signature) = read_source(world, &source)?;
            let loaded = prover.prove(world, bytes.clone(), name, signature).await?;
            configured.insert(world, Configured { loaded, bytes });
        }
        let (serving, installed) =
            join(&prover, parts.kv.as_ref(), &parts.node, configured).await?;
        Ok(Self::assemble(parts, isolated, serving, Some(installed)))
    }

    /// The plugin set a one-shot command runs (see the module
    /// documentation, "Commands"): the shared set's plugins, except the
    /// worlds `attach` names; where no host published a set, the plugins
    /// of `sources` (bundled when missing). Writes nothing to the KV.
    ///
    /// # Errors
    /// [`SwapError::Refused`] for a plugin that cannot serve, or, when the
    /// command changes state, a named plugin the set does not name;
    /// [`SwapError::Shared`] when the set or a plugin it names cannot be
    /// read.
    pub async fn attach(
        parts: PluginSetParts,
        sources: &BTreeMap<World, Source>,
        attach: &Attach,
    ) -> Result<Arc<Self>, SwapError> {
        let isolated = Services::isolated(parts.clock.clone(), parts.io.clone());
        let prover = Prover {
            runtime: &parts.runtime,
            isolated: &isolated,
            clock: &parts.clock,
            settings: &parts.settings,
            trust: &parts.trust,
        };
        let row = shared::read(parts.kv.as_ref()).await?;
        let mut serving = BTreeMap::new();
        for world in World::ALL {
            let member = row.as_ref().and_then(|row| row.set.member(world));
            let loaded = match (attach.named.get(&world), member) {
                (Some(source), member) => {
                    let (bytes, name, signature) = read_source(world, source)?;
                    let loaded = prover.prove(world, bytes, name, signature).await?;
                    if let (Some(member), Some(row)) = (member, &row)
                        && attach.changes
                        && loaded.plugin.info().hash != member.hash
                    {
                        return Err(SwapError::Refused(not_the_sets(
                            &loaded, world, member, row,
                        )));
                    }
                    loaded
                }
                (None, Some(member)) => {
                    prover.load_member(parts.kv.as_ref(), world, member).await?
                }
                (None, None) => {
                    let source = sources.get(&world).cloned().unwrap_or(Source::Bundled);
                    let (bytes, name, signature) = read_source(world, &source)?;
                    prover.prove(world, bytes, name, signature).await?
                }
            };
            serving.insert(world, loaded);
        }
        Ok(Self::assemble(parts, isolated, serving, row))
    }

    /// The set serving `serving`, installed under `installed`, with the
    /// takedown handler registered under its guard.
    fn assemble(
        parts: PluginSetParts,
        isolated: Arc<Services>,
        serving: BTreeMap<World, Loaded>,
        installed: Option<SetRow>,
    ) -> Arc<Self> {
        let slots: BTreeMap<World, Arc<Slot>> = serving
            .into_iter()
            .map(|(world, loaded)| (world, Arc::new(Slot(RwLock::new(Arc::new(loaded))))))
            .collect();
        let retention_settings = world_settings(&parts.settings, World::Retention);
        let retention = Arc::new(CurrentRetention {
            slot: slots[&World::Retention].clone(),
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
            events: parts.events,
            settings: parts.settings,
            node: parts.node,
            trust: parts.trust,
            services,
            isolated,
            retention,
            sampling: parts.sampling,
            slots,
            installed: RwLock::new(Arc::new(installed)),
            sync: std::sync::Mutex::new(SharedView {
                in_sync: true,
                last_error: None,
            }),
            swapping: tokio::sync::Mutex::new(SwapState::default()),
            last_swaps: std::sync::Mutex::new(BTreeMap::new()),
            replay_timers: std::sync::atomic::AtomicU32::new(proof::DEFAULT_REPLAY_TIMERS),
        });
        set.register_handler();
        set.events.in_sync(true);
        set
    }

    fn prover(&self) -> Prover<'_> {
        Prover {
            runtime: &self.runtime,
            isolated: &self.isolated,
            clock: &self.clock,
            settings: &self.settings,
            trust: &self.trust,
        }
    }

    fn slot(&self, world: World) -> &Arc<Slot> {
        &self.slots[&world]
    }

    fn settings(&self, world: World) -> WorldSettings {
        world_settings(&self.settings, world)
    }

    /// The set row the slots' plugins were installed under.
    fn installed(&self) -> Arc<Option<SetRow>> {
        self.installed
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The guard of a commit planned with the slots' plugins: the set row
    /// they were installed under (or its absence) is still the set.
    fn set_guard(&self) -> Precondition {
        shared::guard(self.installed().as_ref().as_ref())
    }

    /// Marks the slots as holding `row`'s plugins (after replacing them)
    /// and registers the takedown handler under its guard.
    fn install(&self, row: SetRow) {
        *self
            .installed
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(Some(row));
        self.register_handler();
    }

    /// Registers the current takedown plugin's handler, guarded on the set
    /// row as it is installed now (read before the plugin, so the handler
    /// never carries a newer guard than its plugin).
    fn register_handler(&self) {
        let guard = self.set_guard();
        if let Policy::Takedown(policy) = &self.slot(World::Takedown).get().policy {
            let settings = self.settings(World::Takedown);
            self.handlers.register(Arc::new(
                TakedownHandler::new(
                    policy.clone(),
                    self.services.clone(),
                    settings.grants,
                    settings.limits,
                )
                .guarded(vec![guard])
                .logging(self.sampling),
            ));
        }
    }

    /// A set naming every world's current plugin.
    fn running(&self) -> SharedSet {
        SharedSet {
            worlds: World::ALL
                .into_iter()
                .map(|world| (world.name().to_owned(), member_of(&self.slot(world).get())))
                .collect(),
            by: format!("host:{}", self.node),
            at_ms: self.clock.now_ms(),
        }
    }

    /// Every world's current plugin.
    pub fn list(&self) -> Vec<LoadedView> {
        World::ALL
            .into_iter()
            .map(|world| self.slot(world).get().view(world))
            .collect()
    }

    /// How this host stands with the shared plugin set.
    pub fn shared_view(&self) -> SharedView {
        self.sync
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// How much of the routine decision log is kept (`[audit]
    /// routine_decisions`).
    pub fn sampling(&self) -> Sampling {
        self.sampling
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

    /// The current takedown policy for an operator action, with the guards
    /// its commit must carry: the authority epoch and the shared plugin
    /// set as they are now, read *before* the policy, so an action planned
    /// by a plugin that a swap then replaces (on this host or any other)
    /// cannot commit once the swap has published its set.
    ///
    /// # Errors
    /// The epoch cannot be read.
    pub async fn takedown_for_action(
        &self,
    ) -> Result<(Arc<TakedownPolicy>, Vec<Precondition>), FenceError> {
        let epoch = self
            .coordinator
            .epoch_guard(&fence_namespace(), FenceKind::Authority)
            .await?;
        let set = self.set_guard();
        Ok((self.takedown(), vec![epoch, set]))
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

    /// Access questions, answered by the access plugin current when each
    /// is asked: the judge follows swaps, so it may be kept.
    pub fn access(&self) -> Arc<dyn AccessJudge> {
        Arc::new(CurrentAccess {
            slot: self.slot(World::Access).clone(),
        })
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

    /// Brings this host to the shared set: loads, proves and installs
    /// every plugin another host swapped in, and audits each adoption.
    /// Returns the worlds whose plugin changed. `serve` calls this about
    /// once a second.
    ///
    /// # Errors
    /// The set cannot be read, or a plugin it names cannot be loaded or
    /// proven here; this host keeps its plugins, and its commits fail
    /// their set guard until it follows.
    pub async fn follow(&self) -> Result<Vec<World>, SwapError> {
        let _state = self.swapping.lock().await;
        self.follow_locked().await
    }

    async fn follow_locked(&self) -> Result<Vec<World>, SwapError> {
        let followed = self.catch_up().await;
        self.events.in_sync(followed.is_ok());
        let mut sync = self
            .sync
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match &followed {
            Ok(_) => {
                *sync = SharedView {
                    in_sync: true,
                    last_error: None,
                }
            }
            Err(error) => {
                *sync = SharedView {
                    in_sync: false,
                    last_error: Some(error.to_string()),
                };
            }
        }
        followed
    }

    async fn catch_up(&self) -> Result<Vec<World>, SwapError> {
        let installed = self.installed();
        let row = match (shared::read(self.kv.as_ref()).await?, installed.as_ref()) {
            (Some(row), Some(installed)) if row.bytes == installed.bytes => return Ok(Vec::new()),
            (Some(row), _) => row,
            // The set row is gone (a KV restored from an old backup):
            // publish what this host runs.
            (None, Some(installed)) => {
                if shared::publish(self.kv.as_ref(), None, installed.set.clone())
                    .await?
                    .is_some()
                {
                    tracing::warn!("the shared plugin set was missing; republished this host's");
                }
                return Ok(Vec::new());
            }
            // Attached where no host published a set: nothing to follow.
            (None, None) => return Ok(Vec::new()),
        };
        let prover = self.prover();
        let mut adopted = Vec::new();
        for world in World::ALL {
            let member = row
                .set
                .member(world)
                .ok_or_else(|| SharedError::Corrupt(format!("the set names no {world} plugin")))?;
            let current = self.slot(world).get();
            if current.plugin.info().hash != member.hash {
                let loaded = prover.load_member(self.kv.as_ref(), world, member).await?;
                adopted.push((world, current, Arc::new(loaded), member.clone()));
            }
        }
        // Slots first, then the guard: nothing pairs an old plugin with
        // the new set's guard.
        for (world, _, loaded, _) in &adopted {
            self.slot(*world).replace(loaded.clone());
        }
        self.install(row);
        let now = self.clock.now_ms();
        for (world, previous, _, member) in &adopted {
            let from = &previous.plugin.info().hash;
            self.events.swap(world.name(), "adopted");
            tracing::info!(%world, %from, to = %member.hash, "plugin adopted from the shared set");
            let record = adopt_record(&self.node, *world, from, member, now);
            audit::append(self.kv.as_ref(), &record).await?;
        }
        Ok(adopted.into_iter().map(|(world, ..)| world).collect())
    }

    /// How many of the takedown timers due next a swap of the takedown
    /// plugin replays, read-only, through the serving plugin and the new
    /// one before it publishes (0: none; default 8).
    pub fn replay_before_swap(&self, timers: u32) {
        self.replay_timers
            .store(timers, std::sync::atomic::Ordering::Relaxed);
    }

    /// Proves `loaded`, about to replace `world`'s plugin, on the
    /// deployment's own state (takedown only: the other worlds decide
    /// from what the host hands them, which the smoke call covers).
    async fn replay(&self, world: World, loaded: &Loaded) -> Result<(), SwapError> {
        let serving = self.slot(world).get();
        let (Policy::Takedown(candidate), Policy::Takedown(serving)) =
            (&loaded.policy, &serving.policy)
        else {
            return Ok(());
        };
        let count = self
            .replay_timers
            .load(std::sync::atomic::Ordering::Relaxed);
        let settings = self.settings(world);
        let replayed = proof::replay(
            &self.services,
            &settings,
            serving.clone(),
            candidate.clone(),
            count,
        )
        .await?;
        tracing::info!(
            %world,
            timers = replayed.timers,
            answered = replayed.answered,
            "the new plugin answered every replayed timer the serving one did"
        );
        Ok(())
    }

    /// Replaces the plugin of `world` with the component in `bytes`
    /// (named `source` in messages, signed by `signature` if at all), by
    /// `actor` (as the audit names who acts: `principal:NAME`,
    /// `operator:NAME`), on every host sharing the KV; see the module
    /// documentation for the protocol.
    ///
    /// # Errors
    /// [`SwapError::Refused`] leaves the old plugin serving, as do
    /// [`SwapError::Contended`] and a [`SwapError::Shared`] before the
    /// set was written; the other errors come after the new plugin began
    /// serving.
    pub async fn swap(
        &self,
        world: World,
        bytes: Vec<u8>,
        source: String,
        signature: Option<Signature>,
        actor: &str,
    ) -> Result<SwapReport, SwapError> {
        let started = Instant::now();
        let proven = self
            .prover()
            .prove(world, bytes.clone(), source, signature)
            .await;
        let loaded = match proven {
            Ok(loaded) => Arc::new(loaded),
            Err(error) => {
                self.events.swap(world.name(), "refused");
                tracing::warn!(%world, "plugin swap refused: {error}");
                return Err(error);
            }
        };
        let mut state = self.swapping.lock().await;
        if let Err(error) = self.replay(world, &loaded).await {
            self.events.swap(world.name(), "refused");
            tracing::warn!(%world, "plugin swap refused: {error}");
            return Err(error);
        }
        let new_member = member_of(&loaded);
        let mut attempts = 0;
        // The set row this swap published, installed once fenced.
        let mut published = None;
        let previous = loop {
            self.follow_locked().await?;
            let previous = self.slot(world).get();
            if previous.plugin.info().hash == new_member.hash {
                break previous;
            }
            if attempts == PUBLISH_ATTEMPTS {
                return Err(SwapError::Contended(attempts));
            }
            attempts += 1;
            // Kept for a rollback, read while the set still names it (a
            // publish collects the blobs the new set no longer names).
            let kept = self.keep(world, &previous).await;
            // 1. The set names the new plugin: the old one's commits fail.
            shared::store_blob(self.kv.as_ref(), &new_member.hash, &bytes).await?;
            let installed = self.installed();
            let mut set = match installed.as_ref() {
                Some(row) => row.set.clone(),
                // No host published a set yet: this one names what runs here.
                None => self.running(),
            };
            set.worlds
                .insert(world.name().to_owned(), new_member.clone());
            set.by = actor.to_owned();
            set.at_ms = self.clock.now_ms();
            let Some(row) =
                shared::publish(self.kv.as_ref(), installed.as_ref().as_ref(), set).await?
            else {
                // Another host swapped first: catch up and try again.
                continue;
            };
            state.unfenced = true;
            published = Some((row, kept));
            break previous;
        };
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
        // 2. The authority moves on before the new plugin runs here: every
        // step it commits holds a lease of the new generation.
        let generation = self.authority().await? + 1;
        self.coordinator
            .transition_and_revoke(&fence_namespace(), generation, FenceKind::Authority)
            .await?;
        state.unfenced = false;
        // 3. New calls use the new plugin, under the new set's guard.
        if let Some((row, kept)) = published {
            self.slot(world).replace(loaded.clone());
            self.remember_swap(world, kept, &new_member.hash);
            self.install(row.clone());
            settle(self.kv.as_ref(), &row, &[(&new_member.hash, &bytes)]).await;
        }
        if !changed {
            return Ok(unchanged(generation));
        }
        // 4. Audited, then reported.
        let (old, new) = (previous.plugin.info(), loaded.plugin.info());
        let mut targets = vec![
            format!("world:{world}"),
            format!("from:{}", old.hash),
            format!("to:{}", new.hash),
        ];
        if let Some(signature) = &loaded.signature {
            targets.push(format!("signer:{}", signature.key));
        }
        let record = Record {
            at_ms: self.clock.now_ms(),
            actor: actor.to_owned(),
            event: "plugin/swap".into(),
            targets,
            detail: Some(format!(
                "{} replaced by {}; authority generation {generation}: no step of the \
                 previous plugin commits from now on",
                old.source, new.source
            )),
        };
        audit::append(self.kv.as_ref(), &record).await?;
        self.events.swap(world.name(), "completed");
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

    /// Applies a reloaded configuration of this node: swaps each world
    /// whose configured plugin (bundled when `sources` names none) changed
    /// since this node last applied its configuration, by `actor`; the
    /// outcome of each world swapped. A world whose configured plugin did
    /// not change follows the shared set, as at start, so reloading an old
    /// file does not undo another host's swap. What was swapped is
    /// remembered as this node's configuration.
    pub async fn reconfigure(
        &self,
        sources: &BTreeMap<World, Source>,
        actor: &str,
    ) -> Vec<(World, Result<SwapReport, SwapError>)> {
        let mut outcomes = Vec::new();
        let mut hashes = match shared::configured(self.kv.as_ref(), &self.node).await {
            Ok(hashes) => hashes,
            Err(error) => {
                let error = SwapError::from(error);
                tracing::error!("cannot read this node's configured plugins: {error}");
                BTreeMap::new()
            }
        };
        for world in World::ALL {
            let source = sources.get(&world).cloned().unwrap_or(Source::Bundled);
            let swapped = match read_source(world, &source) {
                Ok((bytes, _, _)) if hashes.get(world.name()) == Some(&content_hash(&bytes)) => {
                    continue;
                }
                Ok((bytes, name, signature)) => {
                    self.swap(world, bytes, name, signature, actor).await
                }
                Err(error) => Err(error),
            };
            if let Ok(report) = &swapped {
                hashes.insert(world.name().to_owned(), report.current.hash.clone());
            }
            outcomes.push((world, swapped));
        }
        if let Err(error) = shared::remember_configured(self.kv.as_ref(), &self.node, &hashes).await
        {
            tracing::error!("cannot record this node's configured plugins: {error}");
        }
        outcomes
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
        World::Retention | World::Purge | World::Archive | World::Access => Grants::none(),
    }
}
