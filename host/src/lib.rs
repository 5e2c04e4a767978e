//! Custodian: a storage host whose policy runs as WebAssembly components.
//!
//! The host implements the mechanisms — CRC-64/NVME content identity
//! ([`checksum`]), conditional-publish object stores ([`object`]), a
//! key-value store with guarded batches ([`kv`]), the audit log
//! ([`audit`]) — and runs policy plugins ([`runtime`]) that decide what
//! happens. [`policy`] holds the host-side drivers of each policy world.

pub mod audit;
pub mod bundled;
pub mod checksum;
pub mod clock;
pub mod kv;
pub mod object;
pub mod policy;
pub mod runtime;
