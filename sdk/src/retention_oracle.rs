//! Asking the deployer's retention policy about an item this policy keeps
//! (takedown world only). The host routes each question to the configured
//! retention plugin with the deployer's settings; see
//! `wit/retention.wit`, interface `retention-oracle`.

#[cfg(target_arch = "wasm32")]
pub use crate::bindings::takedown::custodian::policy::retention_oracle::{assess, set_hold};
#[cfg(not(target_arch = "wasm32"))]
pub use crate::native::retention_oracle::{assess, set_hold};
