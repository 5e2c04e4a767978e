//! Seed: queue the request's objects, or walk its pack's inventory (and
//! every sealed pack nested in it, once).

use std::collections::BTreeSet;

use custodian_sdk::{Error, kv};
use serde::{Deserialize, Serialize};

use crate::codec::{Id, decode, encode};
use crate::content;
use crate::context::Step;
use crate::keys::{self, PARTITION};
use crate::queue;
use crate::reads;
use crate::source;
use crate::state::Phase;

/// Actions or inventory entries handled per step: bounds the writes of
/// one commit (two per entry at most) and the reads of one step.
const PER_STEP: u32 = 32;

/// The `pack-todo` row: how far a pack's inventory has been walked.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PackCursor {
    /// The next entry to read.
    pub next: u32,
    /// The member count, once the header was read and validated.
    pub count: Option<u32>,
}

/// One seed step.
pub fn run(step: &mut Step) -> Result<(), Error> {
    match step.request.pack {
        Some(root) => walk(step, root),
        None => actions(step),
    }
}

fn actions(step: &mut Step) -> Result<(), Error> {
    let from = step.state.seed as usize;
    let batch: Vec<Id> = crate::request::actions(&step.id, &step.request)?
        .iter()
        .skip(from)
        .take(PER_STEP as usize)
        .copied()
        .collect();
    for object in &batch {
        step.put(keys::object_key(keys::TODO, &step.id, object), vec![0]);
        step.put(keys::object_key(keys::DISCOVER, &step.id, object), vec![0]);
        step.state.seed += 1;
        step.state.counts.objects += 1;
    }
    if step.state.seed == step.request.seed_steps() {
        step.state.phase = Phase::Acquire;
    }
    Ok(())
}

fn walk(step: &mut Step, root: Id) -> Result<(), Error> {
    if step.state.seed == 0 {
        step.put(
            keys::object_key(keys::PACK_TODO, &step.id, &root),
            encode(&PackCursor::default())?,
        );
        step.put(
            keys::object_key(keys::PACK_SEEN, &step.id, &root),
            Vec::new(),
        );
        step.state.seed = 1;
        return Ok(());
    }
    let (start, end) = keys::range(keys::PACK_TODO, &step.id);
    let page = kv::scan(PARTITION, &start, Some(&end), None, 1)?;
    let Some(entry) = page.entries.into_iter().next() else {
        step.state.phase = Phase::Acquire;
        return Ok(());
    };
    let pack_id = keys::object_of(&entry.key, &start, "pack-todo")?;
    let mut cursor: PackCursor = decode(&entry.value, "a pack cursor")?;
    let (count, members) = source::pack_inventory(&pack_id, cursor.next, cursor.count, PER_STEP)?;
    // At most PER_STEP entries.
    let take = members.len() as u32;
    let nested: Vec<Id> = members
        .iter()
        .filter(|(_, kind)| *kind == content::PACK)
        .map(|(id, _)| *id)
        .collect();
    let sealed: BTreeSet<Id> = nested
        .iter()
        .zip(content::sealed(&nested)?)
        .filter(|(_, sealed)| *sealed)
        .map(|(id, _)| *id)
        .collect();
    let seen = reads::tagged(keys::PACK_SEEN, &step.id, &sealed)?;
    let mut walk_next = BTreeSet::new();
    let mut objects = Vec::new();
    for (member, kind) in members {
        if sealed.contains(&member) {
            // A sealed pack is complete and immutable: walk it (once)
            // rather than preserving it as one opaque object.
            if !seen.contains(&member) && walk_next.insert(member) {
                step.put(
                    keys::object_key(keys::PACK_SEEN, &step.id, &member),
                    Vec::new(),
                );
                step.put(
                    keys::object_key(keys::PACK_TODO, &step.id, &member),
                    encode(&PackCursor::default())?,
                );
            }
        } else {
            objects.push((member, kind));
        }
    }
    queue::enqueue(step, &objects)?;
    cursor.next += take;
    if cursor.next == count {
        step.delete(entry.key);
        step.put(
            keys::object_key(keys::DISCOVER, &step.id, &pack_id),
            vec![1],
        );
    } else {
        cursor.count = Some(count);
        step.put(entry.key, encode(&cursor)?);
    }
    Ok(())
}
