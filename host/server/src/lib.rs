//! Custodian's server: what runs a node. [`node`] opens one (the data
//! directory, its KV and stores) and assembles its plugins (the runtime,
//! the plugin set, the guarded timer handlers) the one way `serve` and
//! every command open it; [`serve`] holds the HTTP API, the workers, jobs
//! and metrics; [`invalidation`] the outbox of cache invalidations and
//! their delivery to a webhook; [`config`] the configuration file;
//! [`data_dir`] the embedded default's on-disk layout.

pub mod config;
pub mod data_dir;
pub mod invalidation;
pub mod node;
pub mod serve;
