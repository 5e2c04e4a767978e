//! The bundled archive-mapping policy.
//!
//! When a pinned version is missing from its key, the host reads the
//! archive registry rows recorded for that key and asks which one moves
//! the wanted version. The answer, as the `versioned-reads-and-purge`
//! seed decides it:
//!
//! - the row whose source is exactly the wanted key and version is
//!   followed; none means the version is missing (nothing moved it);
//! - two different rows moving the same version contradict each other:
//!   the registry is corrupt, not a choice to make;
//! - a row whose size differs from the pin's, or whose source etag differs
//!   from the pin's etag (when both are known), does not describe the
//!   pinned bytes: corrupt as well, never followed;
//! - a row must name a destination (key, version id and etag).
//!
//! The host bounds the walk (32 hops) and refuses cycles; this decides
//! one hop at a time and keeps no state.

use custodian_sdk::Error;
use custodian_sdk::archive::{ArchiveMap, Hop, RegistryRow, VersionRef};

/// The policy; stateless: a call may run on a fresh instance or on one
/// that served earlier calls, so it decides from its arguments alone.
pub struct Policy;

/// An etag as compared: S3 quotes them, registries and pins may not.
fn bare(etag: &str) -> &str {
    etag.trim_matches('"')
}

fn named(version: &VersionRef) -> String {
    format!("{}@{}", version.key, version.version_id)
}

impl ArchiveMap for Policy {
    fn next_hop(
        wanted: VersionRef,
        size: Option<u64>,
        etag: Option<String>,
        rows: Vec<RegistryRow>,
    ) -> Result<Hop, Error> {
        let mut moving = rows.into_iter().filter(|row| row.source == wanted);
        let Some(row) = moving.next() else {
            return Ok(Hop::Missing(format!(
                "no archive registry row moves {}",
                named(&wanted)
            )));
        };
        if moving.any(|other| other != row) {
            return Err(Error::Corrupt(format!(
                "the archive registry moves {} to more than one place",
                named(&wanted)
            )));
        }
        if size.is_some_and(|size| size != row.size) {
            return Err(Error::Corrupt(format!(
                "the archive registry row for {} records {} bytes, the pin {}",
                named(&wanted),
                row.size,
                size.unwrap_or_default()
            )));
        }
        if let (Some(expected), Some(recorded)) = (&etag, &row.source_etag)
            && bare(expected) != bare(recorded)
        {
            return Err(Error::Corrupt(format!(
                "the archive registry row for {} records source etag {recorded}, the pin {expected}",
                named(&wanted)
            )));
        }
        if row.destination.key.is_empty()
            || row.destination.version_id.is_empty()
            || bare(&row.destination_etag).is_empty()
        {
            return Err(Error::Corrupt(format!(
                "the archive registry row for {} has no complete destination",
                named(&wanted)
            )));
        }
        Ok(Hop::Follow(row))
    }
}

custodian_sdk::export_archive!(Policy);

// Allocation in wasm: a call's small allocations are cut from one region
// that starts over once the call has freed them all; the policy keeps
// nothing on the heap between calls (see `custodian_sdk::arena`).
custodian_sdk::use_call_arena!();
