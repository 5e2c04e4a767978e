//! The facts of Custodian's plugin contract that both sides must agree
//! on, written once: the host enforces them, the SDK and plugins plan by
//! them. The WIT files in `wit/` are the contract's types; this crate is
//! what they cannot say.
//!
//! - [`version`]: which contract version the host speaks and which
//!   plugin versions link;
//! - [`limits`]: the bounds of every guest-controlled size;
//! - [`name`]: the alphabet of names that become key segments;
//! - [`object_key`] and [`object_metadata`]: which object keys and which
//!   user metadata a publish may carry;
//! - [`content`]: the content model's byte layouts (manifests, packs, the
//!   content index's keys and rows), which the host writes and a takedown
//!   plugin reads;
//! - [`denial`]: the rows by which a takedown withholds content, which a
//!   takedown plugin writes and the host checks on every read and push;
//! - [`invalidation`]: the outbox of cache invalidations a takedown plans
//!   and the host delivers.
//!
//! No dependencies, so every plugin can link it.

#![no_std]

extern crate alloc;

pub mod content;
pub mod denial;
pub mod invalidation;
pub mod limits;
pub mod lock;
pub mod name;
pub mod object_key;
pub mod object_metadata;
pub mod version;
