//! The policy plugins built from `plugins/` and embedded in the host, so
//! `custodian` works with no plugin path. `--plugin PATH` overrides them.

use crate::runtime::World;

/// The bundled plugin of `world`, if the host ships one.
pub fn plugin(world: World) -> Option<&'static [u8]> {
    match world {
        World::Retention => Some(include_bytes!(env!("CUSTODIAN_BUNDLED_RETENTION"))),
        World::Takedown => Some(include_bytes!(env!("CUSTODIAN_BUNDLED_TAKEDOWN"))),
        World::Archive => Some(include_bytes!(env!("CUSTODIAN_BUNDLED_ARCHIVE"))),
        World::Purge => Some(include_bytes!(env!("CUSTODIAN_BUNDLED_PURGE"))),
    }
}

/// How a bundled plugin is named in messages and on the command line.
pub fn name(world: World) -> String {
    format!("builtin:{world}")
}
