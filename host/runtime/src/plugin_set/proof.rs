//! Proving a plugin before it serves: it loads, implements its world,
//! links against the world's types, and answers a smoke call in
//! isolation.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Loaded, Policy, Source, SwapError, WorldSettings};
use crate::policy::PolicyError;
use crate::policy::access::{AccessPolicy, AccessRequest, Action, Principal, Target};
use crate::policy::archive::ArchivePolicy;
use crate::policy::purge::PurgePolicy;
use crate::policy::retention::{self, Item, RetentionPolicy, Stage};
use crate::policy::takedown::{self, TakedownPolicy};
use crate::signature::Signature;
use crate::{CallContext, CallError, LoadError, Plugin, Runtime, Services, World};
use custodian_base::clock::Clock;
use custodian_core::decisions::purge::{Candidate, Governance};
use custodian_core::versions::hops::VersionRef;
use custodian_kv::memory::MemoryKv;
use custodian_object::ObjectStore;
use custodian_object::memory::MemoryStore;

/// The bytes and name of `source`.
///
/// # Errors
/// [`SwapError::Refused`] when the file cannot be read.
pub fn read_source(
    world: World,
    source: &Source,
) -> Result<(Vec<u8>, String, Option<Signature>), SwapError> {
    match source {
        Source::Bundled => {
            let bytes = crate::bundled::plugin(world).ok_or_else(|| {
                SwapError::Refused(format!("no plugin is bundled for the {world} world"))
            })?;
            Ok((bytes.to_vec(), crate::bundled::name(world), None))
        }
        Source::File(path) => {
            let bytes = std::fs::read(path)
                .map_err(|e| SwapError::Refused(format!("cannot read {}: {e}", path.display())))?;
            let signature = crate::signature::read_file(&crate::signature::path_beside(path))
                .map_err(|e| SwapError::Refused(e.to_string()))?;
            Ok((bytes, path.display().to_string(), signature))
        }
    }
}

/// Loads `bytes` as a plugin of `world` and smoke-calls it in isolation.
pub(super) async fn prove(
    runtime: &Arc<Runtime>,
    isolated: &Arc<Services>,
    clock: &Arc<dyn Clock>,
    world: World,
    settings: &WorldSettings,
    bytes: Vec<u8>,
    source: String,
) -> Result<Loaded, SwapError> {
    let runtime = runtime.clone();
    let isolated = isolated.clone();
    let clock = clock.clone();
    let settings = settings.clone();
    // Compiling and the smoke call are synchronous and may take a while.
    // The bundled plugin's bytes, however they came (swapped back in
    // through the API, exported and loaded from a file), are named as the
    // bundled plugin: that is what they are.
    let source = if crate::bundled::plugin(world) == Some(bytes.as_slice()) {
        crate::bundled::name(world)
    } else {
        source
    };
    tokio::task::spawn_blocking(move || {
        let refused = |e: LoadError| SwapError::Refused(e.to_string());
        let plugin = Arc::new(runtime.load_bytes(&bytes, &source).map_err(refused)?);
        plugin.expect_world(world).map_err(refused)?;
        let limits = settings.limits.clone();
        let policy = match world {
            World::Takedown => Policy::Takedown(Arc::new(
                TakedownPolicy::new(plugin.clone()).map_err(refused)?,
            )),
            World::Retention => Policy::Retention(Arc::new(
                RetentionPolicy::new(plugin.clone()).map_err(refused)?,
            )),
            World::Purge => Policy::Purge(Arc::new(
                PurgePolicy::new(plugin.clone(), isolated.clone(), limits).map_err(refused)?,
            )),
            World::Archive => Policy::Archive(Arc::new(
                ArchivePolicy::new(plugin.clone(), isolated.clone(), limits).map_err(refused)?,
            )),
            World::Access => Policy::Access(Arc::new(
                AccessPolicy::new(plugin.clone(), isolated.clone(), limits).map_err(refused)?,
            )),
        };
        smoke(&policy, &plugin, &isolated, &clock, &settings)
            .map_err(|e| SwapError::Refused(format!("{source} failed its smoke call: {e}")))?;
        Ok(Loaded {
            plugin,
            since_ms: clock.now_ms(),
            policy,
            signature: None,
        })
    })
    .await
    .map_err(|e| SwapError::Refused(format!("the plugin's check could not finish: {e}")))?
}

/// Proves `bytes` as a plugin of `world` as a start or a swap proves it
/// (it loads, implements the world and answers a smoke call), with the
/// world's default limits and grants and no signature check: `custodian
/// plugin check --smoke`.
///
/// # Errors
/// [`SwapError::Refused`] with the reason.
pub async fn smoke_test(
    runtime: &Arc<Runtime>,
    clock: Arc<dyn Clock>,
    world: World,
    bytes: Vec<u8>,
    source: String,
) -> Result<(), SwapError> {
    let isolated = Services::isolated(clock.clone(), tokio::runtime::Handle::current());
    let settings = super::world_settings(&BTreeMap::new(), world);
    prove(runtime, &isolated, &clock, world, &settings, bytes, source)
        .await
        .map(drop)
}

/// One harmless call of the world's interface in isolation: an empty
/// in-memory KV and stores, the world's grants and limits. Any answer the
/// policy gives passes (an unknown request is `not-found`); a trap or a
/// limit fails.
fn smoke(
    policy: &Policy,
    plugin: &Plugin,
    isolated: &Arc<Services>,
    clock: &Arc<dyn Clock>,
    settings: &WorldSettings,
) -> Result<(), CallError> {
    let now = clock.now_ms();
    match policy {
        Policy::Takedown(policy) => {
            let stores: BTreeMap<String, Arc<dyn ObjectStore>> =
                [takedown::SERVING_STORE, takedown::PRESERVED_STORE]
                    .into_iter()
                    .map(|name| {
                        let store: Arc<dyn ObjectStore> =
                            Arc::new(MemoryStore::versioned(clock.clone()));
                        (name.to_owned(), store)
                    })
                    .collect();
            let services = Arc::new(Services {
                kv: Arc::new(MemoryKv::new(clock.clone())),
                stores,
                clock: clock.clone(),
                io: isolated.io.clone(),
                retention: None,
            });
            let call = Arc::new(CallContext {
                services,
                grants: settings.grants.clone(),
                limits: settings.limits.clone(),
                actor: plugin.info().actor(),
            });
            policy.status(call, &[0; 32]).map(drop)
        }
        Policy::Retention(policy) => {
            let call =
                crate::policy::isolated_call(plugin, isolated.clone(), settings.limits.clone());
            let item = Item {
                created_ms: now,
                noncurrent_since_ms: None,
                hold: false,
                stage: Stage::Active,
            };
            let sample = retention::Settings {
                retention_ms: 1,
                noncurrent_retention_ms: 0,
            };
            policy.assess(call, sample, item, now).map(drop)
        }
        Policy::Purge(policy) => {
            let candidate = Candidate {
                key: "smoke/key".into(),
                version_id: "smoke-version".into(),
                etag: "smoke-etag".into(),
                size: 0,
                is_delete_marker: false,
                last_modified_ms: Some(now),
            };
            policy
                .verdict(&candidate, &Governance::Unarchived, now)
                .map(drop)
        }
        Policy::Archive(policy) => {
            let wanted = VersionRef {
                key: "smoke/key".into(),
                version_id: "smoke-version".into(),
            };
            policy.choose(&wanted, None, None, &[]).map(drop)
        }
        Policy::Access(policy) => {
            let request = AccessRequest {
                principal: Principal {
                    name: "smoke".into(),
                    roles: Vec::new(),
                },
                action: Action::Inspect,
                target: Target::default(),
                headers: Vec::new(),
            };
            policy.decide(&request).map(drop)
        }
    }
}

/// Takedown timers replayed before a swap, unless the host sets another
/// count ([`super::PluginSet::replay_before_swap`]).
pub const DEFAULT_REPLAY_TIMERS: u32 = 8;

/// What a replay found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Replayed {
    /// Timers replayed.
    pub timers: u32,
    /// Of those, the steps the serving plugin answered.
    pub answered: u32,
}

/// The takedown timers due next, at most `count`, as a step sees them.
pub(super) async fn due_takedown_timers(
    services: &Services,
    count: u32,
) -> Result<Vec<custodian_core::timers::DueTimer>, SwapError> {
    use custodian_core::timers::{self, DueTimer};
    let (due, _) = timers::list(services.kv.as_ref(), None, count)
        .await
        .map_err(|e| SwapError::Refused(format!("cannot read the timers to replay: {e}")))?;
    Ok(due
        .into_iter()
        .filter(|t| t.kind == takedown::KIND)
        .map(|t| DueTimer {
            kind: t.kind,
            reference: t.reference,
            due_ms: t.due_ms,
            steps: t.state.steps,
            failures: t.state.failures,
        })
        .collect())
}

/// A call of `policy` on the deployment's services with every grant made
/// read-only: a plan that would write is refused its write (and answers
/// `access-denied`), so replaying it changes nothing.
pub(super) fn read_only_call(
    services: &Arc<Services>,
    settings: &WorldSettings,
    policy: &TakedownPolicy,
) -> Arc<CallContext> {
    Arc::new(CallContext {
        services: services.clone(),
        grants: settings.grants.read_only(),
        limits: settings.limits.clone(),
        actor: policy.plugin().info().actor(),
    })
}

/// Replays up to `count` takedown timers that are due next, as they are
/// now, through the serving plugin and the candidate, read-only (every
/// partition and store granted for reading only, and each step's commit
/// discarded), so neither changes anything. The smoke call proves the
/// candidate answers an empty world; this proves it on the deployment's
/// own state. The candidate is refused if a step traps or hits a limit,
/// or fails where the serving plugin answered.
///
/// A step that would write (an acquisition copying a piece) is refused
/// its write here and answers `access-denied`: for either plugin that
/// counts as answering, since it got as far as the write.
pub(super) async fn replay(
    services: &Arc<Services>,
    settings: &WorldSettings,
    serving: Arc<TakedownPolicy>,
    candidate: Arc<TakedownPolicy>,
    count: u32,
) -> Result<Replayed, SwapError> {
    use custodian_core::timers;
    if count == 0 {
        return Ok(Replayed::default());
    }
    let due = due_takedown_timers(services, count).await?;
    let now = services.clock.now_ms();
    let serving_call = read_only_call(services, settings, &serving);
    let candidate_call = read_only_call(services, settings, &candidate);
    tokio::task::spawn_blocking(move || {
        let mut replayed = Replayed::default();
        for timer in &due {
            replayed.timers += 1;
            let answered = |result: &Result<Result<_, PolicyError>, CallError>| {
                matches!(result, Ok(Ok(_) | Err(PolicyError::AccessDenied(_))))
            };
            let before = serving.step(serving_call.clone(), timer, now);
            let after = candidate.step(candidate_call.clone(), timer, now);
            let reference = timers::display_reference(&timer.reference);
            match after {
                Err(call) => {
                    return Err(SwapError::Refused(format!(
                        "replaying timer {reference} (read-only), the new plugin failed: {call}"
                    )));
                }
                Ok(Err(policy))
                    if answered(&before) && !matches!(policy, PolicyError::AccessDenied(_)) =>
                {
                    return Err(SwapError::Refused(format!(
                        "replaying timer {reference} (read-only), the serving plugin answered \
                         and the new one failed: {policy}"
                    )));
                }
                _ => replayed.answered += u32::from(answered(&before)),
            }
        }
        Ok(replayed)
    })
    .await
    .map_err(|e| SwapError::Refused(format!("the replay could not finish: {e}")))?
}
