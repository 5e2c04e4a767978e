//! An archive-mapping policy: a pinned version that left its key is
//! followed to where the one registry row that moves it says, if the row
//! agrees with the pin's size; with no such row it is missing. Edit the
//! rules, then run `custodian plugin test` on the build with `cases.json`
//! (add a case for each rule you add).

use custodian_sdk::Error;
use custodian_sdk::archive::{ArchiveMap, Hop, RegistryRow, VersionRef};

/// The policy; asked once per hop while a pin is followed.
pub struct Policy;

impl ArchiveMap for Policy {
    fn next_hop(
        wanted: VersionRef,
        size: Option<u64>,
        _etag: Option<String>,
        rows: Vec<RegistryRow>,
    ) -> Result<Hop, Error> {
        let name = format!("{}@{}", wanted.key, wanted.version_id);
        let moving: Vec<RegistryRow> = rows.into_iter().filter(|r| r.source == wanted).collect();
        match moving.as_slice() {
            [] => Ok(Hop::Missing(format!("no registry row moves {name}"))),
            [row] if size.is_some_and(|size| size != row.size) => Err(Error::Corrupt(format!(
                "the row for {name} records {} bytes, the pin {}",
                row.size,
                size.unwrap_or_default()
            ))),
            [row] => Ok(Hop::Follow(row.clone())),
            _ => Err(Error::Corrupt(format!(
                "{} registry rows move {name}",
                moving.len()
            ))),
        }
    }
}

custodian_sdk::export_archive!(Policy);

// Allocation in wasm: a call's small allocations are cut from one region
// that starts over once the call has freed them all. Keep it while the
// policy keeps nothing on the heap between calls; with a cache in a
// `static` it is merely no faster (see `custodian_sdk::arena`).
custodian_sdk::use_call_arena!();
