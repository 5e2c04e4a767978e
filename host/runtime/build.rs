//! Builds the bundled policy plugins from `plugins/` for wasm32-wasip2, so
//! the host can embed them as its defaults (see `src/bundled.rs`).

use std::path::{Path, PathBuf};

include!("build/wasm.rs");

/// The bundled plugins: `plugins/<world>` is package
/// `custodian-plugin-<world>`, exposed as `CUSTODIAN_BUNDLED_<WORLD>`.
const BUNDLED: &[&str] = &["retention", "takedown", "archive", "purge", "access"];

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let root = manifest
        .parent()
        .and_then(Path::parent)
        .expect("the runtime crate lives in host/runtime below the workspace root");
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("set by cargo"));
    let packages: Vec<String> = BUNDLED
        .iter()
        .map(|w| format!("custodian-plugin-{w}"))
        .collect();
    let names: Vec<&str> = packages.iter().map(String::as_str).collect();
    let target_dir = wasm_target_dir(&out_dir);
    let built = build_wasm(root, &target_dir, &names).unwrap_or_else(|e| panic!("{e}"));
    println!(
        "cargo:rustc-env=CUSTODIAN_WASM_TARGET_DIR_USED={}",
        target_dir.display()
    );
    for (world, path) in BUNDLED.iter().zip(built) {
        println!(
            "cargo:rustc-env=CUSTODIAN_BUNDLED_{}={}",
            world.to_uppercase(),
            path.display()
        );
    }
    for dir in ["plugins", "sdk", "Cargo.toml", "Cargo.lock"] {
        println!(
            "cargo:rerun-if-changed={}",
            Path::new(root).join(dir).display()
        );
    }
    println!("cargo:rerun-if-env-changed=CUSTODIAN_WASM_TARGET_DIR");
}
