//! A retention policy: an item is kept for the configured retention after
//! it was created, and a legal hold keeps it until the hold is cleared.
//! Edit the rules, then run `custodian plugin test` on the build with
//! `cases.json` (add a case for each rule you add).

use custodian_sdk::Error;
use custodian_sdk::retention::{Assessment, Item, RetentionRules, Settings, Stage, Verdict};

/// How long until the host asks again, while nothing else says when.
const RECHECK_MS: u64 = 60_000;

/// The policy; stateless: a call may run on a fresh instance or on one
/// that served earlier calls, so it decides from its arguments alone.
pub struct Policy;

impl RetentionRules for Policy {
    fn assess(settings: Settings, item: Item, now_ms: u64) -> Result<Assessment, Error> {
        if settings.retention_ms == 0 {
            return Err(Error::InvalidArgument("retention-ms must be positive".into()));
        }
        let retain_until_ms = item.created_ms.saturating_add(settings.retention_ms);
        let verdict = if item.hold {
            Verdict::Deny("a legal hold is set".into())
        } else if now_ms < retain_until_ms {
            Verdict::Deny(format!("retained until {retain_until_ms}"))
        } else {
            Verdict::Allow
        };
        Ok(Assessment {
            retain_until_ms,
            may_delete: verdict.clone(),
            may_purge: verdict,
            next_check_ms: now_ms.saturating_add(RECHECK_MS),
        })
    }

    fn set_hold(item: Item, enabled: bool) -> Result<Item, Error> {
        if enabled && matches!(item.stage, Stage::Purging | Stage::Purged) {
            return Err(Error::PreconditionFailed("purging has begun".into()));
        }
        Ok(Item {
            hold: enabled,
            ..item
        })
    }
}

custodian_sdk::export_retention!(Policy);

// Allocation in wasm: a call's small allocations are cut from one region
// that starts over once the call has freed them all. Keep it while the
// policy keeps nothing on the heap between calls; with a cache in a
// `static` it is merely no faster (see `custodian_sdk::arena`).
custodian_sdk::use_call_arena!();
