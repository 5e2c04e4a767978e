//! The versions a purge plan would touch, as a run would tell retention
//! of them: what a dry run of a retention plugin replays against a plan
//! (`custodian plugin diff --world retention --plan FILE --store NAME`).
//!
//! A run judges every version of each generic key the plan names (all of
//! them, when no archive governs the key) and the requested versions
//! under each retired prefix; those are the versions listed here, each
//! with the item a run builds (its write time, when the next newer
//! version was written, no hold, stage `Retaining`). Nothing is deleted
//! or checked against a registry: this only reads the listings.

use super::error::PurgeError;
use super::plan::Plan;
use super::run::list;
use crate::decisions::retention::Item;
use custodian_object::ObjectStore;

/// One version a run would ask retention about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Touched {
    /// The key.
    pub key: String,
    /// The exact version.
    pub version_id: String,
    /// What retention would be told of it.
    pub item: Item,
}

/// Up to `limit` versions of `store` that a run of `plan` would ask
/// retention about, in the plan's order (generic keys, then retired
/// prefixes).
///
/// # Errors
/// The store's failure to list, named.
pub async fn touched(
    store: &dyn ObjectStore,
    plan: &Plan,
    limit: usize,
) -> Result<Vec<Touched>, PurgeError> {
    let mut found = Vec::new();
    let keep = |found: &mut Vec<Touched>, version: &super::run::Found| {
        found.push(Touched {
            key: version.version.key.clone(),
            version_id: version.version.version_id.clone(),
            item: version.retention_item(),
        });
    };
    for key in plan.generic.keys() {
        for version in list(store, key, true).await? {
            if found.len() >= limit {
                return Ok(found);
            }
            keep(&mut found, &version);
        }
    }
    for objects in plan.archives.values() {
        for (key, requested) in objects {
            for version in list(store, key, true).await? {
                let wanted = requested
                    .iter()
                    .any(|c| c.version_id == version.version.version_id);
                if !wanted {
                    continue;
                }
                if found.len() >= limit {
                    return Ok(found);
                }
                keep(&mut found, &version);
            }
        }
    }
    Ok(found)
}
