//! The bundled retention policy.
//!
//! - An item is retained until `created + retention` (and, once it is no
//!   longer the current version, until `noncurrent-since +
//!   noncurrent-retention` if that is later).
//! - A legal hold blocks deletion and purging; it cannot be placed once
//!   purging has begun, and an item held while purging is corrupt state.
//! - When to look again follows the takedown worker's cadence: every
//!   second while work is active, at the end of retention (clamped to
//!   1 s..=1 h) while retaining, and hourly when held or purged, to
//!   re-sweep for late writes.

use custodian_sdk::Error;
use custodian_sdk::retention::{Assessment, Item, RetentionRules, Settings, Stage, Verdict};

const SECOND_MS: u64 = 1_000;
const HOUR_MS: u64 = 3_600_000;
/// Instants are carried as signed milliseconds by some stores and
/// languages; a retain-until beyond `i64::MAX` could not be stored there.
const LATEST_MS: u64 = i64::MAX as u64;

/// The policy; stateless: a call may run on a fresh instance or on one
/// that served earlier calls, so it decides from its arguments alone.
pub struct Policy;

fn add(start: u64, duration: u64, what: &str) -> Result<u64, Error> {
    start
        .checked_add(duration)
        .filter(|end| *end <= LATEST_MS)
        .ok_or_else(|| Error::InvalidArgument(format!("{what} is past the representable range")))
}

fn retain_until(settings: &Settings, item: &Item) -> Result<u64, Error> {
    if settings.retention_ms == 0 {
        return Err(Error::InvalidArgument(
            "retention-ms must be positive".into(),
        ));
    }
    let created = add(
        item.created_ms,
        settings.retention_ms,
        "created + retention",
    )?;
    match item.noncurrent_since_ms {
        Some(since) => Ok(created.max(add(
            since,
            settings.noncurrent_retention_ms,
            "noncurrent-since + noncurrent retention",
        )?)),
        None => Ok(created),
    }
}

fn purge_owned(stage: Stage) -> bool {
    matches!(stage, Stage::Purging | Stage::Purged)
}

impl RetentionRules for Policy {
    fn assess(settings: Settings, item: Item, now_ms: u64) -> Result<Assessment, Error> {
        if item.hold && purge_owned(item.stage) {
            return Err(Error::Corrupt(
                "an item under legal hold cannot be purging or purged".into(),
            ));
        }
        let retain_until_ms = retain_until(&settings, &item)?;
        let retained = now_ms < retain_until_ms;
        let may_delete = if item.hold {
            Verdict::Deny("a legal hold is set".into())
        } else if retained {
            Verdict::Deny(format!("retained until {retain_until_ms}"))
        } else {
            Verdict::Allow
        };
        let may_purge = match item.stage {
            _ if item.hold => Verdict::Deny("a legal hold is set".into()),
            Stage::Purging => Verdict::Deny("purging is already under way".into()),
            Stage::Purged => Verdict::Allow,
            Stage::Active | Stage::Retaining if retained => {
                Verdict::Deny(format!("retained until {retain_until_ms}"))
            }
            Stage::Active | Stage::Retaining => Verdict::Allow,
        };
        let delay = match item.stage {
            Stage::Purged => HOUR_MS,
            Stage::Retaining if item.hold => HOUR_MS,
            Stage::Retaining => retain_until_ms
                .saturating_sub(now_ms)
                .clamp(SECOND_MS, HOUR_MS),
            Stage::Active | Stage::Purging => SECOND_MS,
        };
        Ok(Assessment {
            retain_until_ms,
            may_delete,
            may_purge,
            next_check_ms: now_ms.saturating_add(delay),
        })
    }

    fn set_hold(item: Item, enabled: bool) -> Result<Item, Error> {
        if enabled && purge_owned(item.stage) {
            return Err(Error::PreconditionFailed(
                "purging has begun; a legal hold can no longer be placed".into(),
            ));
        }
        Ok(Item {
            hold: enabled,
            ..item
        })
    }
}

custodian_sdk::export_retention!(Policy);

// Allocation in wasm: a call's small allocations are cut from one region
// that starts over once the call has freed them all; the policy keeps
// nothing on the heap between calls (see `custodian_sdk::arena`).
custodian_sdk::use_call_arena!();
