//! Custodian: a storage host whose policy runs as WebAssembly components.
//!
//! This crate is the `custodian` command and the whole house under one
//! name. The house is several crates, each importing only those below it:
//!
//! | crate | holds |
//! |---|---|
//! | `custodian_contract` | the plugin contract's facts: version, limits, names, content codecs |
//! | [`custodian_base`] | CRC-64/NVME ([`checksum`]), clocks ([`clock`]), the kinds of failure ([`error`]) |
//! | [`custodian_object`] ([`object`]) | object stores: memory, filesystem, S3 |
//! | [`custodian_kv`] ([`kv`]) | key-value stores with guarded batches: memory, redb, etcd |
//! | [`custodian_core`] | [`fence`], [`timers`], [`audit`], [`budget`], [`content`], [`versions`], [`purge`], [`decisions`] |
//! | [`custodian_runtime`] ([`runtime`]) | the WebAssembly runtime, the [`policy`] drivers, the [`bundled`] plugins, the [`plugin_set`] |
//! | [`custodian_server`] | [`node`], [`serve`], [`invalidation`], [`config`], [`data_dir`] |
//!
//! The modules below re-export those crates under the names the command,
//! the end-to-end tests and the benchmarks use.

pub use custodian_base::{checksum, clock, error};
pub use custodian_core::{
    audit, budget, content, decisions, fence, principals, purge, timers, versions,
};
pub use custodian_kv as kv;
pub use custodian_object as object;
pub use custodian_runtime as runtime;
pub use custodian_runtime::{bundled, plugin_set, policy};
pub use custodian_server::{config, data_dir, invalidation, node, serve};
