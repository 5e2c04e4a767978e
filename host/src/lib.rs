//! Custodian: a storage host whose policy runs as WebAssembly components.
//!
//! The host implements the mechanisms — CRC-64/NVME content identity
//! ([`checksum`]), conditional-publish object stores ([`object`]), a
//! durable key-value store with guarded batches ([`kv`]), durable timers
//! ([`timers`]), per-step budgets ([`budget`]), epoch fencing
//! ([`fence`]), the audit log ([`audit`]) — and runs policy plugins
//! ([`runtime`]) that decide what happens. [`policy`] holds the host-side
//! drivers of each policy world; [`content`] the content model
//! (content-addressed repositories) policies act on; [`data_dir`] the
//! embedded default's on-disk layout.

pub mod audit;
pub mod budget;
pub mod bundled;
pub mod checksum;
#[cfg(test)]
mod child_tests;
pub mod clock;
pub mod config;
pub mod content;
pub mod data_dir;
pub mod fence;
pub mod kv;
pub mod object;
pub mod policy;
pub mod purge;
pub mod runtime;
pub mod serve;
pub mod timers;
pub mod versions;
