//! The append-only audit log. Prefer putting entries in a step's
//! [`crate::Commit`], which writes them atomically with its effects.

pub use crate::bindings::host::custodian::host::audit::Entry;

#[cfg(target_arch = "wasm32")]
pub use crate::bindings::host::custodian::host::audit::{append, apply_with};
#[cfg(not(target_arch = "wasm32"))]
pub use crate::native::audit::{append, apply_with};

/// An entry with no detail.
pub fn entry(event: &str, targets: impl IntoIterator<Item = impl Into<String>>) -> Entry {
    Entry {
        event: event.to_owned(),
        targets: targets.into_iter().map(Into::into).collect(),
        detail: None,
    }
}
