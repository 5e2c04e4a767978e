//! The policy plugins built from `plugins/` and embedded in the host, so
//! `custodian` works with no plugin path. `--plugin PATH` overrides them.

use std::path::Path;

use crate::World;

/// The bundled plugin of `world`, if the host ships one.
pub fn plugin(world: World) -> Option<&'static [u8]> {
    match world {
        World::Retention => Some(include_bytes!(env!("CUSTODIAN_BUNDLED_RETENTION"))),
        World::Takedown => Some(include_bytes!(env!("CUSTODIAN_BUNDLED_TAKEDOWN"))),
        World::Archive => Some(include_bytes!(env!("CUSTODIAN_BUNDLED_ARCHIVE"))),
        World::Purge => Some(include_bytes!(env!("CUSTODIAN_BUNDLED_PURGE"))),
        World::Access => Some(include_bytes!(env!("CUSTODIAN_BUNDLED_ACCESS"))),
    }
}

/// How a bundled plugin is named in messages and on the command line.
pub fn name(world: World) -> String {
    format!("builtin:{world}")
}

/// Where the build left the bundled plugin of `world`: for tests and
/// benchmarks that hand a plugin *file* to the host or the command.
pub fn path(world: World) -> Option<&'static Path> {
    match world {
        World::Retention => Some(Path::new(env!("CUSTODIAN_BUNDLED_RETENTION"))),
        World::Takedown => Some(Path::new(env!("CUSTODIAN_BUNDLED_TAKEDOWN"))),
        World::Archive => Some(Path::new(env!("CUSTODIAN_BUNDLED_ARCHIVE"))),
        World::Purge => Some(Path::new(env!("CUSTODIAN_BUNDLED_PURGE"))),
        World::Access => Some(Path::new(env!("CUSTODIAN_BUNDLED_ACCESS"))),
    }
}

/// The directory the build compiled the bundled plugins in: tests and
/// benchmarks build their own guest plugins there too, so one nested
/// cargo cache serves them all.
pub fn wasm_target_dir() -> &'static Path {
    Path::new(env!("CUSTODIAN_WASM_TARGET_DIR_USED"))
}
