//! The guests of `tests/guests/` this crate's own tests need, built for
//! wasm32-wasip2 once per test process, beside the bundled plugins.

use std::path::Path;
use std::sync::OnceLock;

include!("../build/wasm.rs");

/// `tests/guests/gatekeeper`: an access-world guest that lets reads
/// through, denies the rest, and misbehaves when its principal's name
/// asks it to.
pub(crate) fn gatekeeper() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let built = build_wasm(
            &root,
            crate::bundled::wasm_target_dir(),
            &["custodian-guest-gatekeeper"],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        std::fs::read(&built[0]).expect("the built guest is readable")
    })
}
