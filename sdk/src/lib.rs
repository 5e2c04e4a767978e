//! `custodian-sdk`: everything a Rust author needs to write a Custodian
//! policy plugin.
//!
//! A plugin is a `cdylib` crate built for `wasm32-wasip2`. It implements
//! the trait of one policy world and names its type in that world's export
//! macro:
//!
//! ```ignore
//! use custodian_sdk::retention::{RetentionRules, Settings, Item, Assessment};
//! struct Policy;
//! impl RetentionRules for Policy { /* assess, set_hold */ }
//! custodian_sdk::export_retention!(Policy);
//! ```
//!
//! The capability modules ([`kv`], [`objects`], [`checksum`], [`clock`],
//! [`audit`], [`log`]) call the host when built for wasm. Built natively
//! (`cargo test`), the same functions run against an in-memory host —
//! see [`testing`] — so policy logic is unit-testable without wasm and the
//! same code can be benchmarked natively against its component build.

pub mod arena;
pub mod audit;
pub mod batch;
#[doc(hidden)]
pub mod bindings;
pub mod checksum;
pub mod clock;
pub mod key;
pub mod kv;
pub mod log;
pub mod objects;
pub mod policies;
pub mod retention_oracle;
#[cfg(not(target_arch = "wasm32"))]
pub mod testing;

#[cfg(not(target_arch = "wasm32"))]
mod native;

pub use batch::{Batch, Commit};
/// The contract facts the host enforces: limits, version, names.
pub use custodian_contract as contract;
pub use policies::{access, archive, purge, retention, steps, takedown};

/// Why a host call failed; see `wit/deps/host/types.wit` for each case.
/// Since contract 0.2 it has [`Error::Unsupported`] (the store or backend
/// cannot do this at all, e.g. versions on an unversioned store: do not
/// retry) and [`Error::Other`] (none of the other kinds; the message says
/// what). A plugin answers them like any other case.
pub use bindings::host::custodian::host::types::Error;

/// Milliseconds since the Unix epoch, UTC.
pub type TimestampMs = u64;

/// Makes [`arena::CallArena`] this plugin's global allocator in its wasm
/// build (a native build keeps the standard one). Write it once, at the
/// crate's top level:
///
/// ```ignore
/// custodian_sdk::use_call_arena!();
/// ```
///
/// For a plugin whose calls keep nothing on the heap from one call to the
/// next it makes allocation a pointer bump; for one that does, it is
/// merely no faster (see the module's documentation).
#[macro_export]
macro_rules! use_call_arena {
    () => {
        #[cfg(target_arch = "wasm32")]
        #[global_allocator]
        static CUSTODIAN_CALL_ARENA: $crate::arena::CallArena = $crate::arena::CallArena::new();
    };
}

/// Exports a type implementing [`retention::RetentionRules`] as this
/// component's retention policy. Expands to nothing in a native build.
#[macro_export]
macro_rules! export_retention {
    ($ty:ident) => {
        #[cfg(target_arch = "wasm32")]
        $crate::bindings::retention::export_retention!($ty with_types_in $crate::bindings::retention);
    };
}

/// Exports a type implementing [`takedown::TakedownSteps`] as this
/// component's takedown policy. Expands to nothing in a native build.
#[macro_export]
macro_rules! export_takedown {
    ($ty:ident) => {
        #[cfg(target_arch = "wasm32")]
        $crate::bindings::takedown::export_takedown!($ty with_types_in $crate::bindings::takedown);
    };
}

/// Exports a type implementing [`purge::PurgeRules`] as this component's
/// purge policy. Expands to nothing in a native build.
#[macro_export]
macro_rules! export_purge {
    ($ty:ident) => {
        #[cfg(target_arch = "wasm32")]
        $crate::bindings::purge::export_purge!($ty with_types_in $crate::bindings::purge);
    };
}

/// Exports a type implementing [`archive::ArchiveMap`] as this component's
/// archive-mapping policy. Expands to nothing in a native build.
#[macro_export]
macro_rules! export_archive {
    ($ty:ident) => {
        #[cfg(target_arch = "wasm32")]
        $crate::bindings::archive::export_archive!($ty with_types_in $crate::bindings::archive);
    };
}

/// Exports a type implementing [`access::AccessRules`] as this component's
/// access policy. Expands to nothing in a native build.
#[macro_export]
macro_rules! export_access {
    ($ty:ident) => {
        #[cfg(target_arch = "wasm32")]
        $crate::bindings::access::export_access!($ty with_types_in $crate::bindings::access);
    };
}
