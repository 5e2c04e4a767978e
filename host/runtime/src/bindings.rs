//! Host bindings generated from `sdk/wit/`, in this one private module.
//!
//! The host capabilities (`custodian:host`) are generated once; every
//! policy world maps them here with `with`, so all worlds share one set of
//! host types and one implementation of each capability.
//!
//! These are the bindings of the contract the host speaks (0.2). Plugins
//! built against the 0.1 contract are linked through a second generation,
//! [`v0_1`], generated from the frozen copy in `host/runtime/wit-0.1`.
#![allow(missing_docs, clippy::all, clippy::pedantic)]

pub(crate) mod v0_1;

use crate::limits::LimitExceeded;

pub(crate) mod host {
    wasmtime::component::bindgen!({
        path: "../../sdk/wit",
        world: "custodian:host/capabilities@0.2.0",
        imports: { default: trappable },
        trappable_error_type: {
            "custodian:host/types.error" => crate::bindings::HostError,
        },
    });
}

/// The policy worlds' export bindings.
pub(crate) mod policy {
    pub(crate) mod retention {
        wasmtime::component::bindgen!({
            path: "../../sdk/wit",
            world: "custodian:policy/retention@0.2.0",
            with: { "custodian:host": crate::bindings::host::custodian::host },
        });
    }
    pub(crate) mod archive {
        wasmtime::component::bindgen!({
            path: "../../sdk/wit",
            world: "custodian:policy/archive@0.2.0",
            with: { "custodian:host": crate::bindings::host::custodian::host },
        });
    }
    pub(crate) mod purge {
        wasmtime::component::bindgen!({
            path: "../../sdk/wit",
            world: "custodian:policy/purge@0.2.0",
            with: { "custodian:host": crate::bindings::host::custodian::host },
        });
    }
    pub(crate) mod access {
        wasmtime::component::bindgen!({
            path: "../../sdk/wit",
            world: "custodian:policy/access@0.2.0",
            with: { "custodian:host": crate::bindings::host::custodian::host },
        });
    }
    pub(crate) mod takedown {
        wasmtime::component::bindgen!({
            path: "../../sdk/wit",
            world: "custodian:policy/takedown@0.2.0",
            imports: { default: trappable },
            trappable_error_type: {
                "custodian:host/types.error" => crate::bindings::HostError,
            },
            with: {
                "custodian:host": crate::bindings::host::custodian::host,
                // One `Item` whether a plugin decides retention or asks.
                "custodian:policy/retention-types":
                    crate::bindings::policy::retention::custodian::policy::retention_types,
            },
        });
    }
}

/// A failed host call: either an answer for the guest or a reason to stop
/// it.
pub(crate) enum HostError {
    /// Returned to the guest as the WIT `error`.
    Guest(host::custodian::host::types::Error),
    /// Stops the guest: a limit was exceeded.
    Stop(LimitExceeded),
}

impl From<host::custodian::host::types::Error> for HostError {
    fn from(error: host::custodian::host::types::Error) -> Self {
        Self::Guest(error)
    }
}
