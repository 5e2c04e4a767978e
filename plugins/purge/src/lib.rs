//! The bundled purge policy: whether one exact version may be permanently
//! deleted, as the `versioned-reads-and-purge` seed decides it.
//!
//! - A version the published, coordinated archive registry maps is
//!   deleted: its bytes live on at the mapped destination. The mapping
//!   must describe the candidate (same key and version, else the host
//!   asked wrongly: `invalid-argument`), and a candidate whose size or
//!   etag contradicts the row is kept — the registry does not prove
//!   those bytes were copied.
//! - A version under a registry that does not map it is kept: nothing
//!   proves its bytes survive elsewhere.
//! - A managed key no registry covers is retired outright: every version
//!   goes.
//!
//! Retention (may this version be deleted yet?) is the retention plugin's
//! question; the host asks it separately before every deletion.

use custodian_sdk::Error;
use custodian_sdk::purge::{Candidate, Governance, Mapping, PurgeRules, Verdict};

/// The policy; stateless: a call may run on a fresh instance or on one
/// that served earlier calls, so it decides from its arguments alone.
pub struct Policy;

/// An etag as compared: S3 quotes them, registries may not.
fn bare(etag: &str) -> &str {
    etag.trim_matches('"')
}

fn judge_mapped(candidate: &Candidate, mapping: &Mapping) -> Result<Verdict, Error> {
    if mapping.source_key != candidate.key || mapping.source_version_id != candidate.version_id {
        return Err(Error::InvalidArgument(format!(
            "the mapping of {}@{} was offered for {}@{}",
            mapping.source_key, mapping.source_version_id, candidate.key, candidate.version_id
        )));
    }
    if candidate.is_delete_marker {
        // A marker carries no bytes; the registry moved the key's history.
        return Ok(Verdict::Delete);
    }
    if candidate.size != mapping.size {
        return Ok(Verdict::Retain(format!(
            "{} bytes here, {} in the registry row: the copy is not proven",
            candidate.size, mapping.size
        )));
    }
    if let Some(recorded) = &mapping.source_etag
        && !candidate.etag.is_empty()
        && bare(recorded) != bare(&candidate.etag)
        && !bare(&candidate.etag).starts_with(&format!("{}:", bare(recorded)))
    {
        return Ok(Verdict::Retain(format!(
            "etag {} here, {recorded} in the registry row: the copy is not proven",
            candidate.etag
        )));
    }
    Ok(Verdict::Delete)
}

impl PurgeRules for Policy {
    fn judge(candidate: Candidate, governance: Governance, _now_ms: u64) -> Result<Verdict, Error> {
        match governance {
            Governance::Unarchived => Ok(Verdict::Delete),
            Governance::Mapped(mapping) => judge_mapped(&candidate, &mapping),
            Governance::Unmapped(registry) => Ok(Verdict::Retain(format!(
                "not mapped by the published registry of {registry}"
            ))),
        }
    }
}

custodian_sdk::export_purge!(Policy);

// Allocation in wasm: a call's small allocations are cut from one region
// that starts over once the call has freed them all; the policy keeps
// nothing on the heap between calls (see `custodian_sdk::arena`).
custodian_sdk::use_call_arena!();
