//! The README's "Write your own retention policy" example, as written
//! there (a test keeps the two equal): nothing is deleted within 30 days
//! of creation, whatever the deployer configured, and a legal hold always
//! wins.

// The README's code is unchanged here, and it has no doc comments.
#![allow(missing_docs)]

use custodian_sdk::Error;
use custodian_sdk::retention::{Assessment, Item, RetentionRules, Settings, Stage, Verdict};

const MIN_RETENTION_MS: u64 = 30 * 24 * 3_600_000;

pub struct Strict;

impl RetentionRules for Strict {
    fn assess(settings: Settings, item: Item, now_ms: u64) -> Result<Assessment, Error> {
        let retention = settings.retention_ms.max(MIN_RETENTION_MS);
        let retain_until_ms = item
            .created_ms
            .checked_add(retention)
            .ok_or_else(|| Error::InvalidArgument("retention overflows".into()))?;
        let verdict = if item.hold {
            Verdict::Deny("legal hold".into())
        } else if now_ms < retain_until_ms {
            Verdict::Deny(format!("kept until {retain_until_ms}"))
        } else {
            Verdict::Allow
        };
        Ok(Assessment {
            retain_until_ms,
            may_delete: verdict.clone(),
            may_purge: verdict,
            next_check_ms: now_ms + 3_600_000,
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

custodian_sdk::export_retention!(Strict);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_goes_within_thirty_days() {
        let settings = Settings {
            retention_ms: 1,
            noncurrent_retention_ms: 0,
        };
        let item = Item {
            created_ms: 0,
            noncurrent_since_ms: None,
            hold: false,
            stage: Stage::Retaining,
        };
        let a = Strict::assess(settings, item, 1_000).unwrap();
        assert_eq!(a.retain_until_ms, MIN_RETENTION_MS);
        assert!(matches!(a.may_delete, Verdict::Deny(_)));
    }
}
