//! The guests of `tests/guests/` this crate's own tests need, built for
//! wasm32-wasip2 once per test process, beside the bundled plugins, and
//! the one runtime the tests load plugins into.

use std::path::Path;
use std::sync::OnceLock;

use crate::{Runtime, RuntimeConfig};

/// The runtime every test of this crate loads its plugins into: one
/// engine and epoch ticker per test process. Its pool has room for the
/// idle warm instances of every policy the tests hold at once.
pub(crate) fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        Runtime::new(&RuntimeConfig {
            cache_dir: None,
            concurrent_calls: 32,
        })
        .expect("a WebAssembly runtime")
    })
}

include!("../build/wasm.rs");

/// Every guest below, by package, in one build (one cargo run, however
/// many tests ask).
const GUESTS: [&str; 2] = ["custodian-guest-gatekeeper", "custodian-guest-stepper"];

fn built(index: usize) -> &'static [u8] {
    static BYTES: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    &BYTES.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        build_wasm(&root, crate::bundled::wasm_target_dir(), &GUESTS)
            .unwrap_or_else(|e| panic!("{e}"))
            .iter()
            .map(|path| std::fs::read(path).expect("the built guest is readable"))
            .collect()
    })[index]
}

/// `tests/guests/gatekeeper`: an access-world guest that lets reads
/// through, denies the rest, and misbehaves when its principal's name
/// asks it to.
pub(crate) fn gatekeeper() -> &'static [u8] {
    built(0)
}

/// `tests/guests/stepper`: a takedown-world guest whose step does what
/// its timer's reference says (count, trap, fail, spin, overspend).
pub(crate) fn stepper() -> &'static [u8] {
    built(1)
}
