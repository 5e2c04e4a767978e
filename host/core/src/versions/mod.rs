//! Exact-version reads of pinned objects on a versioned store.
//!
//! - [`pins`]: pins and their manifests (Custodian JSON, DVC `.dvc`);
//!   [`digest`]: the digests a pin carries and how bytes are hashed;
//! - [`aliases`]: pending aliases from planned archive receipts;
//! - [`registry`]: archive registries and the bounded walk through them,
//!   whose next hop a [`hops::HopPolicy`] chooses ([`exact_row`] is the
//!   simplest one; the archive plugin is the real one);
//! - [`verify`]: checking pins without reading bytes (listing-batched);
//! - [`fetch`]: downloading pinned bytes into a content-addressed cache.

pub mod aliases;
pub mod digest;
pub mod error;
pub mod exact_row;
pub mod fetch;
pub mod hops;
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
