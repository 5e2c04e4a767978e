//! Warm instances, for a world the host calls on every API request
//! (access): an instance that answered a call serves later ones, so a call
//! costs the call itself rather than a fresh store and instance (about
//! 10 µs, more than the rest of a small request).
//!
//! What a fresh instance per call guarantees, a warm one keeps as follows:
//! - every call gets its own deadline and budget of host calls and log
//!   lines (the store is re-armed before each);
//! - an instance whose call trapped or hit a limit, or whose guest wrote
//!   to stderr, is dropped, never called again;
//! - every instance is retired after [`CALLS_PER_INSTANCE`] calls, which
//!   bounds what a plugin leaking memory from call to call accumulates
//!   before its memory cap would fail a request;
//! - at most [`IDLE_INSTANCES`] are kept between calls.
//!
//! What it does not keep is a blank guest state: a plugin sees whatever it
//! left behind in an earlier call on the same instance. The world's WIT
//! says so, and its plugins must decide from their arguments alone.

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

    /// Calls `f` on an idle instance re-armed for this call, or on a fresh
    /// one made in a store for `context` (`instantiate` is the world's
    /// `*Pre::instantiate`); keeps the instance for later calls if it may
    /// serve again.
    pub(crate) fn call<R>(
        &self,
        plugin: &Plugin,
        context: &Arc<CallContext>,
        instantiate: impl FnOnce(&mut Store<CallState>) -> wasmtime::Result<I>,
        f: impl FnOnce(&I, &mut Store<CallState>) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        let mut warm = match self.take() {
            Some(mut warm) => {
                arm_deadline(&mut warm.store);
                warm.store.data_mut().rearm();
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

    fn take(&self) -> Option<Warm<I>> {
        self.idle().pop()
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
