//! Host-side drivers of the policy worlds: typed calls into a loaded
//! plugin, with host types on this side of the boundary.
//!
//! A plugin built against the 0.1 contract is called through the 0.1
//! bindings (`Linked::V0_1`); each driver converts its arguments to, and
//! its answers from, the 0.1 types right at the call, so everything after
//! the call (what an answer means to the host) is written once, against
//! the 0.2 types. See `crate::bindings::v0_1` for why there are two
//! generations and when the 0.1 one may be dropped.

/// Calls one export of a loaded policy, whichever contract generation
/// its plugin was built against: `$linked` is its [`Linked`] bindings,
/// `$current` the call on instance `$i` in store `$s` of the current
/// bindings and `$v0_1` the same call on the 0.1 bindings (written out
/// only when its arguments need converting; otherwise the same tokens
/// serve both). A 0.1 answer is converted to the current types, so the
/// caller reads one answer type. Evaluates to the answer; a call that
/// fails (a trap, a limit) returns its [`CallError`] from the enclosing
/// function.
///
/// With `warm: $warm;` first, a plugin of the current contract is called
/// on `$warm`'s instances ([`warm::WarmInstances`]) and a 0.1 one on a
/// fresh instance, as it was promised; the call's tokens serve both.
macro_rules! call_export {
    (warm: $warm:expr; $linked:expr, $plugin:expr, $call:expr, |$i:ident, $s:ident| $current:expr) => {
        match $linked {
            $crate::policy::Linked::Current(pre) => {
                $warm.call($plugin, &$call, |s| pre.instantiate(s), |$i, $s| $current)?
            }
            $crate::policy::Linked::V0_1(pre) => $crate::bindings::v0_1::Convert::convert(
                $crate::policy::call($plugin, $call, |s| pre.instantiate(s), |$i, $s| $current)?,
            ),
        }
    };
    ($linked:expr, $plugin:expr, $call:expr, |$i:ident, $s:ident| $current:expr) => {
        call_export!($linked, $plugin, $call, |$i, $s| $current, v0_1: $current)
    };
    ($linked:expr, $plugin:expr, $call:expr, |$i:ident, $s:ident| $current:expr, v0_1: $v0_1:expr) => {
        match $linked {
            $crate::policy::Linked::Current(pre) => {
                $crate::policy::call($plugin, $call, |s| pre.instantiate(s), |$i, $s| $current)?
            }
            $crate::policy::Linked::V0_1(pre) => $crate::bindings::v0_1::Convert::convert(
                $crate::policy::call($plugin, $call, |s| pre.instantiate(s), |$i, $s| $v0_1)?,
            ),
        }
    };
}

pub mod access;
pub mod archive;
pub mod purge;
pub mod requests;
pub mod retention;
pub mod takedown;
mod warm;

use std::sync::Arc;

use custodian_base::error::ErrorKind;
use wasmtime::Store;
use wasmtime::component::InstancePre;

pub use custodian_core::decisions::PolicyError;

use crate::bindings_error::WitError;
use crate::host::CallState;
use crate::load::Generation;
use crate::{CallContext, CallError, Grants, Limits, LoadError, Plugin, Services, World};

/// A world's bindings for one plugin: those of the contract the host
/// speaks, or the 0.1 ones for a plugin built against 0.1.
enum Linked<Current, V0_1> {
    Current(Current),
    V0_1(V0_1),
}

/// Links `plugin` to a world's bindings of its generation (`current` and
/// `v0_1` are the world's `*Pre::new` of each), after checking it
/// implements `world`.
fn link_either<C, O>(
    plugin: &Plugin,
    world: World,
    current: impl FnOnce(InstancePre<CallState>) -> wasmtime::Result<C>,
    v0_1: impl FnOnce(InstancePre<CallState>) -> wasmtime::Result<O>,
) -> Result<Linked<C, O>, LoadError> {
    match plugin.generation {
        Generation::Current => link(plugin, world, current).map(Linked::Current),
        Generation::V0_1 => link(plugin, world, v0_1).map(Linked::V0_1),
    }
}

/// One call on a fresh instance: `instantiate` is the world's
/// `*Pre::instantiate`, `f` calls the export; a trap or a limit is the
/// [`CallError`].
fn call<I, R>(
    plugin: &Plugin,
    context: Arc<CallContext>,
    instantiate: impl FnOnce(&mut Store<CallState>) -> wasmtime::Result<I>,
    f: impl FnOnce(&I, &mut Store<CallState>) -> wasmtime::Result<R>,
) -> Result<R, CallError> {
    let (mut store, instance) = self::instantiate(plugin, context, instantiate)?;
    f(&instance, &mut store).map_err(|e| crate::classify(e, store.data()))
}

/// Links `plugin` to a world's generated bindings (`make` is the world's
/// `*Pre::new`), after checking it implements `world`.
fn link<P>(
    plugin: &Plugin,
    world: World,
    make: impl FnOnce(InstancePre<CallState>) -> wasmtime::Result<P>,
) -> Result<P, LoadError> {
    plugin.expect_world(world)?;
    make(plugin.pre.clone()).map_err(|e| LoadError::Link {
        source_name: plugin.info().source.clone(),
        reason: format!("{e:#}"),
    })
}

/// A fresh store for one call, and the world's instance in it
/// (`instantiate` is the world's `*Pre::instantiate`).
fn instantiate<T>(
    plugin: &Plugin,
    call: Arc<CallContext>,
    instantiate: impl FnOnce(&mut Store<CallState>) -> wasmtime::Result<T>,
) -> Result<(Store<CallState>, T), CallError> {
    let mut store = plugin.new_store(call);
    let instance =
        instantiate(&mut store).map_err(|e| crate::classify_instantiate(e, store.data()))?;
    Ok((store, instance))
}

/// A call context for `plugin` granting nothing: for policies that decide
/// from what the host hands them (`services` supplies only the clock and
/// the I/O runtime).
pub(crate) fn isolated_call(
    plugin: &Plugin,
    services: Arc<Services>,
    limits: Limits,
) -> Arc<CallContext> {
    Arc::new(CallContext {
        services,
        grants: Grants::none(),
        limits,
        actor: plugin.info().actor(),
    })
}

/// Runs a synchronous plugin call from async code: on a multi-threaded
/// runtime the other workers take this one's tasks while it runs. Only for
/// plugins granted nothing, which make no host call needing the runtime.
fn blocking<T>(call: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(call)
        }
        _ => call(),
    }
}

impl From<WitError> for PolicyError {
    /// A policy's answer. [`PolicyError`] has no case for `unsupported` or
    /// `other`; they arrive as the case of their kind's nearest
    /// (`invalid-argument`, `unavailable`), the message naming the case.
    fn from(error: WitError) -> Self {
        let (kind, message) = crate::host::error_kind(error);
        let message = match kind {
            ErrorKind::Unsupported => format!("unsupported: {message}"),
            ErrorKind::Internal => format!("the policy failed: {message}"),
            _ => message,
        };
        Self::from_kind(kind, message)
    }
}

#[cfg(test)]
mod tests {
    use super::{PolicyError, WitError};

    #[test]
    fn a_policys_unsupported_or_other_answer_keeps_its_case_in_the_message() {
        assert_eq!(
            PolicyError::from(WitError::Unsupported("m".into())),
            PolicyError::InvalidArgument("unsupported: m".into())
        );
        assert_eq!(
            PolicyError::from(WitError::Other("m".into())),
            PolicyError::Unavailable("the policy failed: m".into())
        );
        assert_eq!(
            PolicyError::from(WitError::NotFound("m".into())),
            PolicyError::NotFound("m".into())
        );
    }
}
