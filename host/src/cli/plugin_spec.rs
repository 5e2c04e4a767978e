//! A plugin named on the command line: a `.wasm` path, or `builtin:WORLD`
//! for a bundled plugin.

use std::path::Path;

use anyhow::anyhow;
use custodian::bundled;
use custodian::plugin_set::Source;
use custodian::runtime::{Plugin, Runtime, World};

use super::Failure;

/// Loads `spec`: a `.wasm` path, or `builtin:WORLD`.
pub(super) fn load(runtime: &Runtime, spec: &str) -> Result<Plugin, Failure> {
    let loaded = match spec.strip_prefix("builtin:") {
        Some(world) => {
            let world: World = world
                .parse()
                .map_err(|e: String| Failure::Usage(anyhow!(e)))?;
            let bytes = bundled::plugin(world).ok_or_else(|| {
                Failure::Usage(anyhow!("no plugin is bundled for the {world} world"))
            })?;
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
