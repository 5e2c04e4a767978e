//! The facts of Custodian's plugin contract that both sides must agree
//! on, written once: the host enforces them, the SDK and plugins plan by
//! them. The WIT files in `wit/` are the contract's types; this crate is
//! what they cannot say.
//!
//! - [`version`]: which contract version the host speaks and which
//!   plugin versions link;
//! - [`limits`]: the bounds of every guest-controlled size;
//! - [`name`]: the alphabet of names that become key segments.
//!
//! No dependencies, so every plugin can link it.

#![no_std]

pub mod limits;
pub mod name;
pub mod version;
