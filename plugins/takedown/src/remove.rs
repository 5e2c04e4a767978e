//! Remove: once an object is preserved and verified, its serving copy
//! goes, so the preserved copy is the only copy kept. A withdrawal puts
//! it back ([`crate::restore`]).
//!
//! # When
//!
//! The phase `remove` follows `discover` (so every object the request
//! acquired is verified, manifests' reassemblies included, or recorded as
//! corrupt) and precedes `retain`. Each step looks at the next few of the
//! request's `object` rows (a cursor in the state, `remove_after`) and
//! decides for each verified one, once:
//!
//! - **removed** when every condition below holds: an intent is committed,
//!   every version of `content/<hex>` in `serving` is deleted (delete
//!   markers too), and the step's commit replaces the intent with a
//!   `removed` row, counts it (`denial.removed`) and audits
//!   `ServingCopyRemoved`;
//! - **kept** otherwise, with a `kept` row saying why; the request does not
//!   look at it again. An object whose serving copy is gone already
//!   (another request denying it removed it) is kept too, and not counted.
//!
//! An object not verified by this request (its source was corrupt or
//! missing; a walked pack, which is not copied) is neither: it keeps its
//! serving copy, having no preserved copy to be restored from.
//!
//! # Conditions (all read at removal time)
//!
//! 1. The request is not withdrawn and its denial is settled; it is not
//!    purged (a request filed before denial existed removes nothing).
//! 2. This request's copy is verified: the `object` row, and for a
//!    manifest its reassembly (no `closure` row; acquisition that ended
//!    incomplete skips closure, so such a manifest is kept).
//! 3. The content index's `o` row agrees with the preserved copy (size,
//!    CRC) and the object is at most [`MAX_BODY_BYTES`] (16 MiB, the
//!    largest put a plugin can make, so a withdrawal can restore it
//!    whole). Larger objects keep their serving copy and stay denied by
//!    id. (Acquisition records them as corrupt already; the check stands
//!    on its own.)
//! 4. The object's denial row lists this request, names at most
//!    [`MAX_DENIERS`] requests, and **every** request in it has verified
//!    its own copy (2. for each): whichever of them is withdrawn last can
//!    restore the object from its own pieces.
//! 5. **Shared chunks.** If the object is a chunk of any manifest (its
//!    `c` rows in the content index; at most [`MAX_MANIFESTS`]), every
//!    such manifest is taken down by a request that also denies this
//!    object and is not withdrawn. A chunk of a file that is not taken
//!    down keeps its serving copy: that file is still served through it.
//!    (A request denying the manifest denies its chunks, so on its
//!    withdrawal its restore pass visits the chunk and puts it back
//!    before the file is served again.)
//!
//! An object whose condition 4 fails only because another request has not
//! verified it *yet* is kept by this request too: that request passes
//! through its own remove phase once it has verified the object, and then
//! finds every denier verified (this one included) and removes it. So the
//! last denier to verify removes the object; none re-checks forever.
//!
//! # Crash safety and races
//!
//! As with preservation's piece intents ([`crate::copy`]), the intent
//! (`remove` id object) is committed on its own, with [`Batch::apply`],
//! *before* anything is deleted. That commit is guarded on what the
//! decision read: this request's state and `denial` row, the object's
//! denial row, every other denier's `denial` row (so no withdrawal lands
//! between the check and the intent), and the denial rows of the
//! manifests it is part of. A step that finds an intent pending (a crash
//! after it) finishes it first, before anything else, even a purge
//! (deleting what is absent is fine) rather than deciding again; a
//! withdrawal's first lifting chunk does the same. A withdrawal's restore
//! pass waits for another request's pending removal of an object it
//! visits (`unavailable`, retried), so it never decides on a serving
//! copy that is about to go.
//!
//! # Bounds
//!
//! A step looks at [`OBJECTS_PER_STEP`] `object` rows (at most three host
//! reads for all of them beside the step's first: the page of rows,
//! their other rows in one snapshot, and what other deniers hold; plus a
//! `head` of the serving copy each) and removes at most
//! [`REMOVALS_PER_STEP`]: the intent commit has at most [`INTENT_OPS`]
//! operations (3 of its own; per object, the guards on its row, on at
//! most 15 other deniers and 16 manifests, and the intent), and deleting a
//! serving copy lists at most [`VERSION_PAGES`] pages of 16 versions.
//! The step's commit adds at most 2 writes per object looked at (a
//! `kept` row, or the `removed` row and the intent's delete) and one
//! audit entry per removal.

use std::collections::{BTreeMap, BTreeSet};

use custodian_sdk::audit::Entry;
use custodian_sdk::contract::denial as rows;
use custodian_sdk::kv::{MAX_READS, Outcome};
use custodian_sdk::objects::{self, MAX_BODY_BYTES};
use custodian_sdk::{Batch, Error, kv};
use serde::{Deserialize, Serialize};

use crate::codec::{Id, bounded, corrupt, decode, encode, hex};
use crate::content::{self, SERVING};
use crate::context::{QUEUE_PAGE, Step};
use crate::denial::{self, DenialState};
use crate::keys::{self, PARTITION};
use crate::reads::Reads;
use crate::request::APPLY_WINDOW_MS;
use crate::state::{self, ObjectInfo, Phase};
use crate::survey;
use crate::versions;

/// `object` rows looked at per step: as many as a page of a queue (see
/// [`QUEUE_PAGE`]).
pub const OBJECTS_PER_STEP: u32 = QUEUE_PAGE;
/// Serving copies removed per step (and so pending intents at once). As
/// many as the rows looked at: a step decides on every row it looks at
/// (reading its rows and heading its serving copy), and a row left for
/// the next step is decided on again, so with fewer removals than rows a
/// request would decide on most objects twice.
pub const REMOVALS_PER_STEP: usize = OBJECTS_PER_STEP as usize;
/// Pending removals a withdrawal's lifting chunk finishes: each is an
/// audit entry, and a chunk's entries stay within 7 (see
/// [`crate::denial_work::Work`]).
pub const LIFT_REMOVALS: usize = 4;
/// Most requests denying an object whose serving copy is removed: each
/// is a guard of the intent commit.
pub const MAX_DENIERS: usize = 16;
/// Most manifests a removed chunk may be part of: each is a guard of the
/// intent commit.
pub const MAX_MANIFESTS: u32 = 16;
/// Most operations of an intent commit (the host's 96 less headroom).
pub const INTENT_OPS: usize = kv::MAX_BATCH_OPS - 24;
/// Version pages listed when deleting one serving copy: a copy has one
/// version, plus one per rewrite.
pub const VERSION_PAGES: usize = 2;

/// A `remove` row: the intent to remove an object's serving copy,
/// committed before anything is deleted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Intent {
    /// The serving key.
    pub key: String,
    /// When the removal was decided.
    pub planned_ms: u64,
}

/// A `removed` row: this request removed the object's serving copy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Removed {
    /// The serving key.
    pub key: String,
    /// When the removal finished.
    pub removed_ms: u64,
    /// Versions with bytes deleted (0: they were gone already, e.g.
    /// deleted before a crash).
    pub versions: u32,
}

/// A removal finished: the writes that record it and its audit detail.
#[derive(Debug)]
pub struct Finished {
    /// The intent row, to delete.
    pub intent: Vec<u8>,
    /// The `removed` row's key and value.
    pub removed: (Vec<u8>, Vec<u8>),
    /// `ServingCopyRemoved`'s detail.
    pub detail: String,
}

/// The first `limit` pending removal intents of request `id` (a step
/// leaves at most [`REMOVALS_PER_STEP`]).
pub fn pending(id: &Id, limit: usize) -> Result<Vec<(Vec<u8>, Id, Intent)>, Error> {
    let (start, end) = keys::range(keys::REMOVE, id);
    let page = kv::scan(PARTITION, &start, Some(&end), None, limit as u32)?;
    intents(id, page)
}

/// The removal intents of request `id` a page of its `remove` rows holds.
fn intents(id: &Id, page: kv::Page) -> Result<Vec<(Vec<u8>, Id, Intent)>, Error> {
    let start = keys::range(keys::REMOVE, id).0;
    page.entries
        .into_iter()
        .map(|entry| {
            let object = keys::object_of(&entry.key, &start, "remove")?;
            let intent: Intent = decode(&entry.value, "a removal intent")?;
            if intent.key != keys::serving_key(&object) {
                return Err(corrupt(format!(
                    "the removal intent of {} names another key",
                    hex(&object)
                )));
            }
            Ok((entry.key, object, intent))
        })
        .collect()
}

/// Deletes every version of `object`'s serving copy for request `id`'s
/// committed `intent` (at `intent_key`), and returns what records it.
pub fn finish(
    id: &Id,
    object: &Id,
    intent_key: Vec<u8>,
    intent: &Intent,
    now: u64,
) -> Result<Finished, Error> {
    let versions = versions::destroy(SERVING, &intent.key, VERSION_PAGES)?;
    let removed = Removed {
        key: intent.key.clone(),
        removed_ms: now,
        versions,
    };
    let detail = if versions == 0 {
        format!("{} was gone already", intent.key)
    } else {
        format!("{} removed ({versions} versions)", intent.key)
    };
    Ok(Finished {
        intent: intent_key,
        removed: (
            keys::object_key(keys::REMOVED, id, object),
            encode(&removed)?,
        ),
        detail,
    })
}

/// Finishes up to [`LIFT_REMOVALS`] pending removals for a lifting chunk
/// (a withdrawal found them): their rows for the chunk's batch, counted in
/// `state`, with their audit entries. `None` when none is pending; the
/// next chunk finishes any left.
pub fn finish_for_lift(
    id: &Id,
    state: &mut DenialState,
    now: u64,
) -> Result<Option<(Batch, Vec<Entry>)>, Error> {
    let found = pending(id, LIFT_REMOVALS)?;
    if found.is_empty() {
        return Ok(None);
    }
    let mut batch = Batch::new();
    let mut events = Vec::new();
    for (key, object, intent) in found {
        let done = finish(id, &object, key, &intent, now)?;
        batch = batch
            .delete(PARTITION, done.intent)
            .put(PARTITION, done.removed.0, done.removed.1);
        state.removed += 1;
        events.push(Entry {
            event: "ServingCopyRemoved".into(),
            targets: vec![hex(id), hex(&object)],
            detail: Some(done.detail),
        });
    }
    Ok(Some((batch, events)))
}

/// Finishes the step's pending removals, if any (the step does nothing
/// else then); returns whether there were any. Runs before the purge
/// check, so a purge never starts over a half-done removal.
pub fn finish_pending(step: &mut Step) -> Result<bool, Error> {
    let page = step.queue(keys::REMOVE)?;
    let found = intents(&step.id, page)?;
    if found.is_empty() {
        return Ok(false);
    }
    let removing = step.removing();
    for (key, object, intent) in found {
        if removing {
            let done = finish(&step.id, &object, key, &intent, step.now)?;
            record(step, &object, done);
        } else {
            // A withdrawal's lifting finishes pending removals before it
            // restores anything; an intent left after it is dropped, never
            // carried out.
            step.delete(key);
        }
    }
    Ok(true)
}

fn record(step: &mut Step, object: &Id, done: Finished) {
    step.delete(done.intent);
    step.put(done.removed.0, done.removed.1);
    step.count_removed();
    step.event("ServingCopyRemoved", &[hex(object)], Some(done.detail));
}

/// A guard of an intent commit: `key` in `partition` still holds `value`.
#[derive(Debug, Clone)]
struct Guard {
    partition: &'static str,
    key: Vec<u8>,
    value: Option<Vec<u8>>,
}

/// What the remove phase does with one verified object.
#[derive(Debug)]
enum Decision {
    /// Removed or kept already (a step replayed after a crash).
    Skip,
    /// Kept, for this reason.
    Keep(String),
    /// Removed, guarded on these rows.
    Remove(Vec<Guard>),
}

/// One remove step.
pub fn run(step: &mut Step) -> Result<(), Error> {
    if !step.removing() || step.state.purged {
        leave(step);
        return Ok(());
    }
    let (start, end) = keys::range(keys::OBJECT, &step.id);
    let cursor = keys::cursor(
        step.state.remove_after.as_deref(),
        (&start, &end),
        "removal",
    )?;
    let page = kv::scan(
        PARTITION,
        &start,
        Some(&end),
        cursor.as_deref(),
        OBJECTS_PER_STEP,
    )?;
    let mut rows = Vec::with_capacity(page.entries.len());
    for entry in page.entries {
        let object = keys::object_of(&entry.key, &start, "object")?;
        let info = state::decode_info(&object, Some(&entry.value))?;
        rows.push((entry.key, object, info));
    }
    let verified: Vec<(Id, ObjectInfo)> = rows
        .iter()
        .filter(|(_, _, info)| info.verified)
        .map(|(_, object, info)| (*object, info.clone()))
        .collect();
    let mut decisions = decide(&step.id, &verified)?;
    let mut plan: Vec<(Id, Vec<Guard>)> = Vec::new();
    // This request's state and denial row, and the deadline.
    let mut ops = 3;
    let mut last = None;
    let mut stopped = false;
    for (key, object, _) in &rows {
        match decisions.remove(object) {
            None | Some(Decision::Skip) => {}
            Some(Decision::Keep(reason)) => step.put(
                keys::object_key(keys::KEPT, &step.id, object),
                bounded(&reason).into_bytes(),
            ),
            Some(Decision::Remove(guards)) => {
                let cost = guards.len() + 1;
                if plan.len() == REMOVALS_PER_STEP || ops + cost > INTENT_OPS {
                    // Left for the next step, which decides on it again.
                    stopped = true;
                    break;
                }
                ops += cost;
                plan.push((*object, guards));
            }
        }
        last = Some(key);
    }
    if let Some(key) = last {
        step.state.remove_after = Some(hex(key));
    }
    if !plan.is_empty() {
        remove(step, &plan)?;
    }
    if !stopped && page.next.is_none() {
        leave(step);
    }
    Ok(())
}

/// The remove phase is over (or has nothing to do).
fn leave(step: &mut Step) {
    let state = &mut step.state;
    state.remove_after = None;
    state.phase = if state.purged {
        Phase::Purged
    } else {
        Phase::Retain
    };
}

/// Commits the intents of `plan` on their own, then deletes the serving
/// copies; the step's commit records them.
fn remove(step: &mut Step, plan: &[(Id, Vec<Guard>)]) -> Result<(), Error> {
    let old = step
        .old
        .clone()
        .ok_or_else(|| corrupt("removing before any state was stored"))?;
    let mut batch = Batch::new()
        .require_equals(PARTITION, step.state_key(), old)
        .require_observed(
            PARTITION,
            denial::state_key(&step.id),
            step.denial.as_deref(),
        )
        .not_after(step.now.saturating_add(APPLY_WINDOW_MS));
    let mut intents = Vec::with_capacity(plan.len());
    for (object, guards) in plan {
        for guard in guards {
            batch =
                batch.require_observed(guard.partition, guard.key.clone(), guard.value.as_deref());
        }
        let intent = Intent {
            key: keys::serving_key(object),
            planned_ms: step.now,
        };
        let key = keys::object_key(keys::REMOVE, &step.id, object);
        batch = batch.put(PARTITION, key.clone(), encode(&intent)?);
        intents.push((key, *object, intent));
    }
    if batch.apply()? != Outcome::Committed {
        return Err(Error::Unavailable(
            "a removal intent raced: the request, an object's denial or a denier changed".into(),
        ));
    }
    for (key, object, intent) in intents {
        let done = finish(&step.id, &object, key, &intent, step.now)?;
        record(step, &object, done);
    }
    Ok(())
}

/// Decides on each of `verified` (objects request `id` holds verified).
fn decide(id: &Id, verified: &[(Id, ObjectInfo)]) -> Result<BTreeMap<Id, Decision>, Error> {
    let mut decisions = BTreeMap::new();
    if verified.is_empty() {
        return Ok(decisions);
    }
    let objects: Vec<Id> = verified.iter().map(|(object, _)| *object).collect();
    // Each object's marks, index row, denial row and `c` rows, and this
    // request's own `closure` and `remove` rows of it (only an object
    // passing the first checks needs the last three), in one snapshot
    // read: 7 reads an object, at most 56 of MAX_READS, and at most
    // 8 × (6 + MAX_MANIFESTS) entries of a read's 1000.
    const _: () = assert!(OBJECTS_PER_STEP as usize * 7 <= MAX_READS);
    let mut reads = Reads::new();
    let asked: Vec<[usize; 7]> = objects
        .iter()
        .map(|o| {
            [
                reads.get(PARTITION, keys::object_key(keys::REMOVED, id, o)),
                reads.get(PARTITION, keys::object_key(keys::KEPT, id, o)),
                reads.get(content::CONTENT, content::object_key(o)),
                reads.get(survey::DENIAL, survey::denial_key(o)),
                survey::manifests_read(&mut reads, o, MAX_MANIFESTS),
                reads.get(PARTITION, keys::object_key(keys::CLOSURE, id, o)),
                reads.get(PARTITION, keys::object_key(keys::REMOVE, id, o)),
            ]
        })
        .collect();
    let mut answers = reads.run()?;
    let (mut marks, mut index, mut denials) = (Vec::new(), Vec::new(), Vec::new());
    let mut manifests_of = BTreeMap::new();
    // What this request holds of each object: its progress row as the
    // step read it, with its `closure` and `remove` rows.
    let mut held = BTreeMap::new();
    for ((object, info), [removed, kept, row, denied, chunk_of, closure, removing]) in
        verified.iter().zip(asked)
    {
        marks.push(answers.value(removed)?);
        marks.push(answers.value(kept)?);
        index.push(content::decode_object_row(object, answers.value(row)?)?);
        denials.push(survey::denials_of(object, answers.value(denied)?)?);
        manifests_of.insert(
            *object,
            survey::manifests_in(object, answers.page(chunk_of)?)?,
        );
        let own = survey::Held {
            info: Some(info.clone()),
            closure: answers.value(closure)?.is_some(),
            removing: answers.value(removing)?.is_some(),
        };
        held.insert((*id, *object), own);
    }
    // Objects that pass the checks on their own rows.
    let mut open = Vec::new();
    for ((((object, info), marks), row), denied) in verified
        .iter()
        .zip(marks.chunks_exact(2))
        .zip(index)
        .zip(denials)
    {
        let keep = |reason: String| Some(Decision::Keep(reason));
        let decision = if marks.iter().any(Option::is_some) {
            Some(Decision::Skip)
        } else if let Some(row) = row.filter(|row| row.size > MAX_BODY_BYTES) {
            keep(format!(
                "{} bytes exceed the {MAX_BODY_BYTES} a withdrawal can restore in one put; \
                 it stays denied by id",
                row.size
            ))
        } else if row.is_none_or(|row| row.size != info.size || row.crc64 != info.crc64) {
            keep("the content index does not agree with the preserved copy".into())
        } else if !denied.lists(id) {
            keep("not denied by this request".into())
        } else if denied.requests.len() > MAX_DENIERS {
            keep(format!(
                "denied by {} requests, more than the {MAX_DENIERS} a removal checks",
                denied.requests.len()
            ))
        } else {
            None
        };
        match decision {
            Some(decision) => {
                decisions.insert(*object, decision);
            }
            None => open.push((*object, denied)),
        }
    }
    if open.is_empty() {
        return Ok(decisions);
    }
    // What the other requests denying each object hold of it.
    let pairs: Vec<(Id, Id)> = open
        .iter()
        .flat_map(|(object, denied)| denied.requests.iter().map(|r| (*r, *object)))
        .filter(|(r, _)| r != id)
        .collect();
    if !pairs.is_empty() {
        held.extend(survey::held(&pairs)?);
    }
    let others: BTreeSet<Id> = open
        .iter()
        .flat_map(|(_, denied)| denied.requests.iter().copied())
        .filter(|r| r != id)
        .collect();
    let standing = survey::standing(&others)?;
    let mut chunks = Vec::new();
    for (object, denied) in open {
        let of = manifests_of
            .remove(&object)
            .ok_or_else(|| corrupt("an open object's chunk-of rows were not read"))?;
        let unverified = denied
            .requests
            .iter()
            .find(|r| !held.get(&(**r, object)).is_some_and(survey::Held::verified));
        match unverified {
            Some(r) if r == id => {
                decisions.insert(
                    object,
                    Decision::Keep(
                        "its reassembly was not verified (acquisition ended incomplete)".into(),
                    ),
                );
            }
            Some(r) => {
                decisions.insert(
                    object,
                    Decision::Keep(format!(
                        "request {} has not verified its preserved copy yet; the last request \
                         to verify it removes the serving copy",
                        hex(r)
                    )),
                );
            }
            None => chunks.push((object, denied, of)),
        }
    }
    let manifests: Vec<Id> = chunks
        .iter()
        .flat_map(|(_, _, of)| of.iter().flatten().copied())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let manifest_denials: BTreeMap<Id, survey::Denials> = manifests
        .iter()
        .copied()
        .zip(survey::denials(&manifests)?)
        .collect();
    for (object, denied, of) in chunks {
        let active = |r: &Id| r == id || standing.get(r).is_some_and(|s| !s.withdrawn);
        let decision = match of {
            None => Decision::Keep(format!(
                "part of the files of more than {MAX_MANIFESTS} manifests"
            )),
            Some(of) => {
                let uncovered = of.iter().find(|m| {
                    !manifest_denials[*m]
                        .requests
                        .iter()
                        .any(|r| active(r) && denied.lists(r))
                });
                match uncovered {
                    Some(m) if manifest_denials[m].raw.is_none() => Decision::Keep(format!(
                        "shared with the file of manifest {}, which is not taken down",
                        hex(m)
                    )),
                    Some(m) => Decision::Keep(format!(
                        "shared with the file of manifest {}, which no request taking down \
                         this object (and not withdrawn) takes down",
                        hex(m)
                    )),
                    None if !serving(&object)? => Decision::Keep(
                        "its serving copy is gone already (another request removed it)".into(),
                    ),
                    None => Decision::Remove(guards(
                        id,
                        &object,
                        &denied,
                        &of,
                        &standing,
                        &manifest_denials,
                    )),
                }
            }
        };
        decisions.insert(object, decision);
    }
    Ok(decisions)
}

/// Whether `object` has a serving copy.
fn serving(object: &Id) -> Result<bool, Error> {
    match objects::head(SERVING, &keys::serving_key(object)) {
        Ok(_) => Ok(true),
        Err(Error::NotFound(_)) => Ok(false),
        Err(other) => Err(other),
    }
}

/// What a removal of `object` is guarded on: its denial row, the other
/// deniers' `denial` rows, and the denial rows of the manifests it is
/// part of, each as read.
fn guards(
    id: &Id,
    object: &Id,
    denied: &survey::Denials,
    manifests: &[Id],
    standing: &BTreeMap<Id, survey::Standing>,
    manifest_denials: &BTreeMap<Id, survey::Denials>,
) -> Vec<Guard> {
    let mut guards = vec![Guard {
        partition: rows::PARTITION,
        key: rows::key(object),
        value: denied.raw.clone(),
    }];
    for request in denied.requests.iter().filter(|r| *r != id) {
        guards.push(Guard {
            partition: PARTITION,
            key: denial::state_key(request),
            value: standing.get(request).and_then(|s| s.raw.clone()),
        });
    }
    for manifest in manifests {
        guards.push(Guard {
            partition: rows::PARTITION,
            key: rows::key(manifest),
            value: manifest_denials.get(manifest).and_then(|d| d.raw.clone()),
        });
    }
    guards
}
