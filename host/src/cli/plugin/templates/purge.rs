//! A purge policy: a version no archive governs goes once it is a day
//! old; a version an archive maps goes once its copy there is proven by
//! size; a version the archive does not map stays. Edit the rules, then
//! run `custodian plugin test` on the build with `cases.json` (add a case
//! for each rule you add).

use custodian_sdk::Error;
use custodian_sdk::purge::{Candidate, Governance, PurgeRules, Verdict};

/// How long a version is kept after it was written, whatever governs it.
const MIN_AGE_MS: u64 = 24 * 3_600_000;

/// The policy; asked once per version a purge would delete.
pub struct Policy;

impl PurgeRules for Policy {
    fn judge(candidate: Candidate, governance: Governance, now_ms: u64) -> Result<Verdict, Error> {
        // A version whose write time is unknown is treated as new.
        let written = candidate.last_modified_ms.unwrap_or(now_ms);
        if now_ms.saturating_sub(written) < MIN_AGE_MS {
            return Ok(Verdict::Retain(format!(
                "{} was written less than a day ago",
                candidate.key
            )));
        }
        Ok(match governance {
            Governance::Unarchived => Verdict::Delete,
            Governance::Mapped(mapping) if mapping.size == candidate.size => Verdict::Delete,
            Governance::Mapped(mapping) => Verdict::Retain(format!(
                "{} bytes here, {} in the archive: the copy is not proven",
                candidate.size, mapping.size
            )),
            Governance::Unmapped(registry) => {
                Verdict::Retain(format!("the archive at {registry} does not map it"))
            }
        })
    }
}

custodian_sdk::export_purge!(Policy);

// Allocation in wasm: a call's small allocations are cut from one region
// that starts over once the call has freed them all. Keep it while the
// policy keeps nothing on the heap between calls; with a cache in a
// `static` it is merely no faster (see `custodian_sdk::arena`).
custodian_sdk::use_call_arena!();
