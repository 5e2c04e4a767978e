//! A plugin named on the command line: a `.wasm` path, or `builtin:WORLD`
//! for a bundled plugin.

use std::path::Path;

use anyhow::anyhow;
use custodian::bundled;
use custodian::plugin_set::Source;
use custodian::runtime::{Plugin, Runtime, World};

use super::Failure;

/// The bundled plugin `builtin:NAME` names: its world and bytes.
fn bundled_named(name: &str) -> Result<(World, &'static [u8]), Failure> {
    let world: World = name
        .parse()
        .map_err(|e: String| Failure::Usage(anyhow!(e)))?;
    let bytes = bundled::plugin(world)
        .ok_or_else(|| Failure::Usage(anyhow!("no plugin is bundled for the {world} world")))?;
    Ok((world, bytes))
}

/// The bytes of `spec` (a `.wasm` path, or `builtin:WORLD`) and, for a
/// bundled plugin, its world.
///
/// # Errors
/// [`Failure::Usage`] for an unknown world or an unreadable file.
pub(super) fn bytes(spec: &str) -> Result<(Vec<u8>, Option<World>), Failure> {
    match spec.strip_prefix("builtin:") {
        Some(name) => bundled_named(name).map(|(world, bytes)| (bytes.to_vec(), Some(world))),
        None => std::fs::read(spec)
            .map(|bytes| (bytes, None))
            .map_err(|e| Failure::Usage(anyhow!(e).context(format!("cannot read {spec}")))),
    }
}

/// Loads `spec`: a `.wasm` path, or `builtin:WORLD`.
pub(super) fn load(runtime: &Runtime, spec: &str) -> Result<Plugin, Failure> {
    let loaded = match spec.strip_prefix("builtin:") {
        Some(name) => {
            let (world, bytes) = bundled_named(name)?;
            runtime.load_bytes(bytes, &bundled::name(world))
        }
        None => runtime.load_file(Path::new(spec)),
    };
    loaded.map_err(|e| Failure::Usage(e.into()))
}

/// Where the plugin `spec` (a `.wasm` file or `builtin:WORLD`) comes from,
/// as `world`'s plugin.
///
/// # Errors
/// [`Failure::Usage`] for a `builtin:` of an unknown or another world.
pub(super) fn source(spec: &str, world: World) -> Result<Source, Failure> {
    match spec.strip_prefix("builtin:") {
        Some(name) => {
            let named: World = name
                .parse()
                .map_err(|e: String| Failure::Usage(anyhow!(e)))?;
            if named == world {
                Ok(Source::Bundled)
            } else {
                Err(Failure::Usage(anyhow!("{spec} is not a {world} plugin")))
            }
        }
        None => Ok(Source::File(spec.into())),
    }
}
