//! Custodian's core: the mechanisms built on the object and KV stores,
//! and the vocabulary of the decisions policies make about them.
//!
//! - [`fence`]: epoch fencing of writers (a plugin swap is one bump);
//! - [`timers`]: durable timers, stepped by workers, each step committed
//!   once, guarded on its timer row;
//! - [`audit`]: the append-only record of who did what;
//! - [`principals`]: who may call, and the credentials that prove it;
//! - [`budget`]: per-step bounds on host calls;
//! - [`content`]: content-addressed repositories (blobs, manifests,
//!   packs) and the index of who holds what;
//! - [`versions`]: exact-version reads through archive registries;
//! - [`purge`]: permanent retirement of exact versions;
//! - [`locks`]: object locks no caller can waive, on the KV and every
//!   store;
//! - [`decisions`]: what the host asks policies, and their answers.
//!
//! Nothing here links the WebAssembly runtime: policies are reached
//! through the traits in [`decisions`], which the runtime implements.

pub mod audit;
pub mod budget;
pub mod content;
pub mod decisions;
pub mod fence;
pub mod locks;
pub mod principals;
pub mod purge;
pub mod timers;
pub mod versions;
