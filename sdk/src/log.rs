//! Diagnostics to the host's log.

pub use crate::bindings::host::custodian::host::log::Level;

#[cfg(target_arch = "wasm32")]
pub use crate::bindings::host::custodian::host::log::log;
#[cfg(not(target_arch = "wasm32"))]
pub use crate::native::log::log;

/// Logs at `info`.
pub fn info(message: &str) {
    log(Level::Info, message);
}

/// Logs at `warn`.
pub fn warn(message: &str) {
    log(Level::Warn, message);
}

/// Logs at `error`.
pub fn error(message: &str) {
    log(Level::Error, message);
}
