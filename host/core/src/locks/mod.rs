//! Locks the host enforces for every caller: what no policy can waive.
//!
//! The takedown plugin writes lock rows (partition
//! [`custodian_contract::lock::PARTITION`]; layout and rules there) in its
//! commits: a request's lock when it is filed, hold and purging changes,
//! and each piece's row with the piece's durable intent, *before* the
//! piece is written. Two decorators, wrapped around the node's KV and
//! every store it opens, hold every caller to them — API principals,
//! plugins, jobs, commands on a data directory alike:
//!
//! - [`guard::LockGuard`] (a [`custodian_kv::Kv`]): every write to the
//!   partition is checked against the contract's transition rules;
//! - [`store::LockedStore`] (a [`custodian_object::ObjectStore`]): every
//!   request that would delete or overwrite an object asks the lock its
//!   key carries or, on a store configured `locked`, the retention plugin
//!   about the version it would destroy;
//! - [`late::LateRetention`]: the retention plugin, bound once the plugin
//!   set has loaded (the set is given the stores, so the stores exist
//!   first), refusing until then.
//!
//! # Invariants
//!
//! 1. **A lock only gets stronger until it is released.** Every batch that
//!    writes the lock partition commits only if each of its writes, in
//!    order, is a legal transition from the rows as they are *at commit*:
//!    the guard reads the rows, checks, and commits guarded on the rows it
//!    checked (`Equals`/`Absent`), so a concurrent writer makes the batch
//!    fail its guard and be checked again, never slip past. Lock rows are
//!    never deleted, and a piece row never changes hands.
//! 2. **A locked object goes only when its lock lets it.** A delete of
//!    any version of a key with a piece row, or a write over its existing
//!    object, is refused unless the request's lock
//!    [`releases`](custodian_contract::lock::RequestLock::releases) now.
//!    No plugin can unlock on its own: a release needs the lock rows,
//!    which only move forward. The retention plugin is not asked again:
//!    the lock's retain-until is its answer, recorded when the request
//!    was filed, so a later change of retention governs new requests and
//!    an existing one is kept longer only by an explicit, audited
//!    extension of its lock.
//! 3. **On a locked store, nothing is destroyed without retention's yes.**
//!    A delete of a version, a delete that leaves no current version, and
//!    an overwrite of the current object each ask the retention plugin
//!    about the version they would destroy; a denial changes nothing.
//! 4. **Fail closed.** A lock row that does not decode, a KV or store
//!    that cannot be read, and a retention plugin that cannot answer (a
//!    trap, a limit, none loaded) all refuse the destructive request.
//! 5. **Creating never needs a lock's permission.** A write that cannot
//!    replace anything (`IfNoneMatchAny`), a first write of a locked key,
//!    every read and listing pass; that is how the takedown writes a
//!    piece after its row.

pub mod guard;
pub mod late;
pub mod store;

mod ask;
mod gate;
mod piece;
mod writes;

#[cfg(test)]
mod tests;

/// The lock rows' layout and transition rules, as the contract states them
/// for the host, the SDK and the plugins alike.
pub use custodian_contract::lock as rows;
pub use guard::LockGuard;
pub use late::LateRetention;
pub use store::{LockedStore, Locks};

use custodian_contract::lock::PARTITION;
use custodian_kv::Partition;

/// The lock partition, as the KV names it.
pub fn partition() -> Partition {
    Partition::new(PARTITION).expect("the lock partition's name is valid")
}
