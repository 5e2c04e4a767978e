// Shared by `host/runtime/build.rs`, the end-to-end tests and the
// benchmarks (through `include!`):
// compiles workspace packages for wasm32-wasip2 with a nested cargo.

/// The directory the wasm builds use, beside the host's own target
/// directory (`<target>/wasm-plugins`), found from an `OUT_DIR` (which is
/// `<target>/<profile>/build/<package>-<hash>/out`). A directory of its own
/// means the nested cargo never waits on the outer one's lock, and stays
/// warm between builds. `CUSTODIAN_WASM_TARGET_DIR` overrides it.
#[allow(dead_code)] // Each includer uses part of this file.
fn wasm_target_dir(out_dir: &std::path::Path) -> std::path::PathBuf {
    if let Some(dir) = std::env::var_os("CUSTODIAN_WASM_TARGET_DIR") {
        return std::path::PathBuf::from(dir);
    }
    out_dir
        .ancestors()
        .nth(4)
        .expect("OUT_DIR is inside the target directory")
        .join("wasm-plugins")
}

/// Builds `packages` of the workspace at `root` for wasm32-wasip2 with the
/// workspace's `plugin` profile into `target_dir`; returns each `.wasm`.
#[allow(dead_code)] // Each includer uses part of this file.
fn build_wasm(
    root: &std::path::Path,
    target_dir: &std::path::Path,
    packages: &[&str],
) -> Result<Vec<std::path::PathBuf>, String> {
    let mut cargo = std::process::Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cargo
        .current_dir(root)
        .args(["build", "--quiet", "--target", "wasm32-wasip2", "--profile", "plugin"])
        .arg("--target-dir")
        .arg(target_dir);
    for package in packages {
        cargo.args(["-p", package]);
    }
    // What the outer build was asked to do to the host (flags, clippy's
    // wrapper, coverage) is not meant for the plugins.
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
    ] {
        cargo.env_remove(var);
    }
    let status = cargo
        .status()
        .map_err(|e| format!("cannot run cargo to build {packages:?} for wasm32-wasip2: {e}"))?;
    if !status.success() {
        return Err(format!(
            "building {packages:?} for wasm32-wasip2 failed (is the target installed? \
             `rustup target add wasm32-wasip2`)"
        ));
    }
    packages
        .iter()
        .map(|package| {
            let file = format!("{}.wasm", package.replace('-', "_"));
            let path = target_dir.join("wasm32-wasip2").join("plugin").join(file);
            if path.exists() {
                Ok(path)
            } else {
                Err(format!("{} was not produced", path.display()))
            }
        })
        .collect()
}
