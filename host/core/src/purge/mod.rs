//! Permanent retirement of exact object versions on a versioned store.
//!
//! - [`plan`]: what to retire (candidates, archive prefixes, coordination
//!   proofs) and the history candidates of pin manifests;
//! - [`published`]: archive registries as published (exact version and
//!   etag) and the check against the plan's proofs;
//! - [`crate::decisions::purge`]: the purge policy's decision per version;
//! - [`run`]: the runner, which establishes the facts, asks the purge and
//!   retention policies, deletes exact versions and verifies they are gone;
//! - [`report`]: what it did;
//! - [`touched`]: the versions a run of a plan would ask retention about,
//!   for a dry run of a retention plugin.

pub mod error;
pub mod plan;
pub mod published;
pub mod report;
pub mod run;
pub mod touched;

#[cfg(test)]
mod tests;

pub use error::PurgeError;
pub use report::PurgeFailure;
