//! Exact-version reads of pinned objects on a versioned store.
//!
//! - [`pins`]: pins and Custodian's JSON manifests; [`dvc`]: DVC pointer
//!   files; [`manifest`]: reading a manifest file of either; [`addressed`]: DVC outputs on content-addressed
//!   remotes, resolved against the store; [`history`]: manifests read
//!   from a git repository's history;
//!   [`digest`]: the digests a pin carries and how bytes are hashed;
//! - [`aliases`]: pending aliases from planned archive receipts;
//! - [`registry`]: archive registries and the bounded walk through them,
//!   whose next hop a [`hops::HopPolicy`] chooses ([`exact_row`] is the
//!   simplest one; the archive plugin is the real one);
//! - [`verify`]: checking pins without reading bytes (listing-batched);
//! - [`fetch`]: downloading pinned bytes into a content-addressed cache.

pub mod addressed;
pub mod aliases;
pub mod digest;
pub mod dvc;
pub mod error;
pub mod exact_row;
pub mod fetch;
pub mod history;
pub mod hops;
pub mod manifest;
pub mod pins;
pub mod prefixes;
pub mod registry;
pub mod target;
pub mod verify;

#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod tests;

pub use error::VersionsError;
