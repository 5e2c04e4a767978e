//! A guest built against `custodian:host@0.3.0`, which this host does not
//! speak: loading it must fail naming that import.
// wit-bindgen generates the ABI glue (unsafe, undocumented) in this crate.
#![allow(unsafe_code, missing_docs)]

wit_bindgen::generate!({
    path: "wit",
    world: "custodian-test:next/next-contract@0.1.0",
    generate_all,
});

struct Future;

impl exports::custodian_test::next::api::Guest for Future {
    fn now() -> u64 {
        custodian::host::clock::now_ms()
    }
}

export!(Future);
