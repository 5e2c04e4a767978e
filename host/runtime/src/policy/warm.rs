//! Warm instances, for worlds the host calls often (access on every API
//! request, takedown on every step, retention on every destructive
//! operation): an instance that answered a call serves later ones, so a
//! call costs the call itself rather than a fresh store and instance
//! (about 10 µs, more than the rest of a small request; far more for a
//! component carrying a language runtime).
//!
//! What a fresh instance per call guarantees, a warm one keeps as follows:
//! - every call runs under its own call context (its services, grants,
//!   budget of host calls and log lines, and deadline): the store is
//!   rebound to the call's context before each call, so nothing an earlier
//!   call was granted or charged reaches a later one;
//! - an instance is reused only under the limits it was made with, since
//!   its memory, grown under them, persists;
//! - an instance whose call trapped or hit a limit, or whose guest wrote
//!   to stderr, is dropped, never called again;
//! - every instance is retired after [`CALLS_PER_INSTANCE`] calls, which
//!   bounds what a plugin leaking memory from call to call accumulates
//!   before its memory cap would fail a call;
//! - at most [`IDLE_INSTANCES`] are kept between calls.
//!
//! What it does not keep is a blank guest state: a plugin sees whatever it
//! left behind in an earlier call on the same instance. Each world's WIT
//! says so, and its plugins must decide from their arguments (and, for a
//! takedown step, the host state it reads) alone. That is safe for the
//! host because a plugin's reach is its grants, which are the same for
//! every call of one plugin: an instance can carry nothing from one call
//! into another that the plugin could not have read in either.

use std::sync::{Arc, Mutex, PoisonError};

use wasmtime::Store;

use crate::call::arm_deadline;
use crate::host::CallState;
use crate::{CallContext, CallError, Plugin};

/// Calls one instance answers before it is retired.
pub(crate) const CALLS_PER_INSTANCE: u32 = 1024;

/// Instances kept between calls. Each idle one holds a slot of the
/// runtime's instance pool that every other plugin call needs too, so only
/// about as many as calls run at once on a small host are kept; a burst
/// past it instantiates afresh and drops the extra instances after.
pub(crate) const IDLE_INSTANCES: usize = 4;

/// One instance and the store it lives in.
struct Warm<I> {
    store: Store<CallState>,
    instance: I,
    calls: u32,
}

/// The idle instances of one plugin, for one call context. Dropped with
/// the driver that owns it, so a swapped-out plugin keeps no instance.
pub(crate) struct WarmInstances<I> {
    idle: Mutex<Vec<Warm<I>>>,
}

impl<I> WarmInstances<I> {
    pub(crate) fn new() -> Self {
        Self {
            idle: Mutex::new(Vec::with_capacity(IDLE_INSTANCES)),
        }
    }

    /// Calls `f` on an idle instance made under `context`'s limits and
    /// rebound to `context`, or on a fresh one made in a store for
    /// `context` (`instantiate` is the world's `*Pre::instantiate`); keeps
    /// the instance for later calls if it may serve again.
    pub(crate) fn call<R>(
        &self,
        plugin: &Plugin,
        context: &Arc<CallContext>,
        instantiate: impl FnOnce(&mut Store<CallState>) -> wasmtime::Result<I>,
        f: impl FnOnce(&I, &mut Store<CallState>) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        let mut warm = match self.take(context) {
            Some(mut warm) => {
                warm.store.data_mut().rebind(context.clone());
                arm_deadline(&mut warm.store);
                warm
            }
            None => {
                let (store, instance) = super::instantiate(plugin, context.clone(), instantiate)?;
                Warm {
                    store,
                    instance,
                    calls: 0,
                }
            }
        };
        let answer = f(&warm.instance, &mut warm.store)
            .map_err(|e| crate::classify(e, warm.store.data()))?;
        warm.calls += 1;
        if warm.calls < CALLS_PER_INSTANCE && warm.store.data().reusable() {
            self.keep(warm);
        }
        Ok(answer)
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Warm<I>>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An idle instance made under `context`'s limits. One made under
    /// others (the deployer changed them) is dropped: it will never match
    /// again.
    fn take(&self, context: &CallContext) -> Option<Warm<I>> {
        let warm = self.idle().pop()?;
        (warm.store.data().call.limits == context.limits).then_some(warm)
    }

    fn keep(&self, warm: Warm<I>) {
        let extra = {
            let mut idle = self.idle();
            if idle.len() < IDLE_INSTANCES {
                idle.push(warm);
                None
            } else {
                Some(warm)
            }
        };
        // Releasing an instance resets its pool slot: not under the lock.
        drop(extra);
    }

    /// How many instances are idle now.
    #[cfg(test)]
    pub(crate) fn idle_count(&self) -> usize {
        self.idle().len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::WarmInstances;
    use crate::bindings::policy::access::exports::custodian::policy::access_rules as wit;
    use crate::bindings::policy::access::{Access, AccessPre};
    use crate::{CallContext, Grants, Limits, Services};
    use custodian_base::clock::SystemClock;
    use custodian_core::decisions::access::{AccessRequest, Action, Principal, Target};

    /// What the gatekeeper answers `counter`: `call N`, N counting the
    /// calls its instance has answered.
    fn counted(
        warm: &WarmInstances<Access>,
        plugin: &crate::Plugin,
        pre: &AccessPre<crate::host::CallState>,
        context: &Arc<CallContext>,
    ) -> String {
        let request = wit::AccessRequest::from(&AccessRequest {
            principal: Principal {
                name: "counter".into(),
                roles: Vec::new(),
            },
            action: Action::Read,
            target: Target::default(),
            headers: Vec::new(),
        });
        let answer = warm
            .call(
                plugin,
                context,
                |s| pre.instantiate(s),
                |i, s| i.custodian_policy_access_rules().call_decide(s, &request),
            )
            .expect("the gatekeeper answers");
        match answer {
            wit::Decision::Deny(reason) => reason,
            wit::Decision::Allow => panic!("the counter is denied"),
        }
    }

    #[test]
    fn an_idle_instance_made_under_other_limits_is_not_reused() {
        let plugin = crate::test_guests::runtime()
            .load_bytes(crate::test_guests::gatekeeper(), "gatekeeper")
            .unwrap();
        let pre = AccessPre::new(plugin.pre.clone()).unwrap();
        let io = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let services = Services::isolated(Arc::new(SystemClock), io.handle().clone());
        let under = |limits: Limits| {
            Arc::new(CallContext {
                services: services.clone(),
                grants: Grants::none(),
                limits,
                actor: "gatekeeper".into(),
            })
        };
        let (usual, tighter) = (
            under(Limits::default()),
            under(Limits {
                memory_bytes: 32 << 20,
                ..Limits::default()
            }),
        );
        let warm = WarmInstances::new();
        assert_eq!(counted(&warm, &plugin, &pre, &usual), "call 1");
        assert_eq!(counted(&warm, &plugin, &pre, &usual), "call 2");
        assert_eq!(counted(&warm, &plugin, &pre, &tighter), "call 1");
        assert_eq!(counted(&warm, &plugin, &pre, &tighter), "call 2");
        assert_eq!(warm.idle_count(), 1);
    }
}
