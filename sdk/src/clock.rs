//! The host's notion of "now" for this call.

#[cfg(target_arch = "wasm32")]
pub use crate::bindings::host::custodian::host::clock::now_ms;
#[cfg(not(target_arch = "wasm32"))]
pub use crate::native::clock::now_ms;
