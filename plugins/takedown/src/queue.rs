//! Queueing objects for acquisition, each once per request.

use std::collections::BTreeSet;

use custodian_sdk::{Error, kv};

use crate::codec::{Id, corrupt};
use crate::context::Step;
use crate::keys::{self, PARTITION};

/// Most objects queued by one call: two keys each are read in one
/// `get-many`, and each queued object is one write of the commit.
pub const MAX_BATCH: usize = 64;

/// Queues each `(object, expected kind)` of `candidates` that this request
/// has not queued before (no `todo` and no `object` row, and not earlier in
/// `candidates`): a member of several packs or a chunk of several manifests
/// is acquired, and counted, once. Returns how many were queued.
pub fn enqueue(step: &mut Step, candidates: &[(Id, u8)]) -> Result<usize, Error> {
    if candidates.len() > MAX_BATCH {
        return Err(Error::InvalidArgument(format!(
            "{} objects queued at once",
            candidates.len()
        )));
    }
    let mut unique = BTreeSet::new();
    let fresh: Vec<(Id, u8)> = candidates
        .iter()
        .copied()
        .filter(|(object, _)| unique.insert(*object))
        .collect();
    if fresh.is_empty() {
        return Ok(0);
    }
    let keys: Vec<Vec<u8>> = fresh
        .iter()
        .flat_map(|(object, _)| {
            [
                keys::object_key(keys::TODO, &step.id, object),
                keys::object_key(keys::OBJECT, &step.id, object),
            ]
        })
        .collect();
    let rows = kv::get_many(PARTITION, &keys)?;
    if rows.len() != keys.len() {
        return Err(corrupt("get-many answered a different number of keys"));
    }
    let mut queued = 0;
    for ((object, kind), known) in fresh.iter().zip(rows.chunks_exact(2)) {
        if known.iter().any(Option::is_some) {
            continue;
        }
        step.put(keys::object_key(keys::TODO, &step.id, object), vec![*kind]);
        step.state.counts.objects += 1;
        queued += 1;
    }
    Ok(queued)
}
