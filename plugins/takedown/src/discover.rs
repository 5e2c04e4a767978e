//! Discover: find every repository holding the preserved objects, and plan
//! one cache invalidation per holder repository (an entry in the host's
//! outbox, the contract's `invalidation` layout, which the host delivers).

use std::collections::BTreeSet;

use custodian_sdk::contract::invalidation;
use custodian_sdk::{Error, kv};
use serde::{Deserialize, Serialize};

use crate::codec::{Id, corrupt, encode, hex};
use crate::content;
use crate::context::Step;
use crate::keys::{self, PARTITION};
use crate::state::{self, ObjectInfo, Phase};
use crate::survey::get_paged;

/// Holders handled per step: each costs up to three commit operations
/// (marker guard and write, invalidation entry).
const HOLDERS_PER_STEP: u32 = 16;
/// Objects a step looks at most: the step's fixed costs are shared by
/// them, so a request of many objects held by few repositories (the
/// usual case) is not a step per object.
const OBJECTS_PER_STEP: u32 = 8;
/// Operations a new holder costs: its marker's guard and write, and its
/// invalidation entry.
const HOLDER_OPS: usize = 3;
/// Operations an object's own rows cost: its discover row deleted, its
/// progress written.
const OBJECT_OPS: usize = 2;

/// The `holder` marker: which object revealed the holder, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HolderMarker {
    /// The object (hex) whose holders listed the repository first.
    pub object: String,
    /// When it was discovered.
    pub discovered_ms: u64,
}

/// One discover step: the holders of up to `OBJECTS_PER_STEP` objects,
/// at most `HOLDERS_PER_STEP` each, while the commit has room for them.
/// Their progress rows are read at once: only each object's own handling
/// writes its row.
pub fn run(step: &mut Step) -> Result<(), Error> {
    let (start, end) = keys::range(keys::DISCOVER, &step.id);
    let page = kv::scan(PARTITION, &start, Some(&end), None, OBJECTS_PER_STEP)?;
    if page.entries.is_empty() {
        return finish(step);
    }
    let objects = keys::objects_of(&page.entries, &start, "discover")?;
    let infos = get_paged(
        PARTITION,
        &keys::object_keys(&step.id, &objects, &[keys::OBJECT]),
    )?;
    // Holders planned by this step: markers it wrote are not yet in the
    // KV, so an object later in the step sharing a holder must skip it here.
    let mut planned = BTreeSet::new();
    for (taken, ((row, object), info)) in
        page.entries.into_iter().zip(objects).zip(infos).enumerate()
    {
        let room = step.room().saturating_sub(OBJECT_OPS) / HOLDER_OPS;
        // Within u32: at most HOLDERS_PER_STEP.
        let limit = HOLDERS_PER_STEP.min(u32::try_from(room).unwrap_or(u32::MAX));
        if taken > 0 && limit == 0 {
            break;
        }
        let info = state::decode_info(&object, info.as_deref())?;
        one(step, object, row, info, limit.max(1), &mut planned)?;
    }
    Ok(())
}

/// Plans the invalidations of up to `limit` holders of `object` (its
/// discover `row` and progress `info` as read) not in `planned`, adding
/// them to it.
fn one(
    step: &mut Step,
    object: Id,
    row: kv::Entry,
    mut info: ObjectInfo,
    limit: u32,
    planned: &mut BTreeSet<Vec<u8>>,
) -> Result<(), Error> {
    if !matches!(row.value.as_slice(), [0] | [1]) {
        return Err(corrupt(format!(
            "the discover row of {} is neither an object nor a pack",
            hex(&object)
        )));
    }
    let info_key = keys::object_key(keys::OBJECT, &step.id, &object);
    if info.holders_done {
        step.delete(row.key);
        return Ok(());
    }
    let cursor = info.holders_cursor()?;
    let holders = content::holders(&object, cursor.as_deref(), limit)?;
    if !holders.holders.is_empty() {
        let markers: Vec<Vec<u8>> = holders
            .holders
            .iter()
            .map(|h| keys::holder_key(&step.id, &h.namespace, &h.name))
            .collect();
        let known = kv::get_many(PARTITION, &markers)?;
        for ((holder, marker), existing) in holders.holders.iter().zip(markers).zip(known) {
            if existing.is_some() || !planned.insert(marker.clone()) {
                continue;
            }
            // Absent-guarded: a holder is planned once per request, even if
            // two steps raced to it.
            step.require_observed(marker.clone(), None);
            step.put(
                marker,
                encode(&HolderMarker {
                    object: hex(&object),
                    discovered_ms: step.now,
                })?,
            );
            // The responsibility to invalidate commits with the marker and
            // the cursor: planned exactly once, delivered by the host.
            let entry = invalidation::Entry {
                requested_ms: step.now,
                request: step.id,
                repository: format!("{}/{}", holder.namespace, holder.name),
                objects: vec![object],
            };
            step.put_in(invalidation::PARTITION, entry.key(), entry.value());
            step.state.counts.holders += 1;
        }
    }
    match holders.next {
        Some(next) => info.holders = Some(hex(&next)),
        None => {
            info.holders = None;
            info.holders_done = true;
            step.delete(row.key);
        }
    }
    step.put(info_key, encode(&info)?);
    Ok(())
}

/// No object left to discover: the serving copies of what is verified
/// go next ([`crate::remove`]).
///
/// Discovery is complete when the request's denial was in force all
/// along: the host commits every holder row of the content index guarded
/// on its object not being taken down, and steps run only once the
/// denial has settled, so no repository can become a holder after the
/// scan began and the scan found every holder there will ever be (the
/// addressing model: a repository `namespace/name` holds an object iff
/// the index has its holder row). Otherwise it is incomplete, and says
/// why: a request filed before denial existed kept nothing from gaining
/// the content, a withdrawn one no longer does, and objects a purge left
/// unacquired were never queued for discovery.
fn finish(step: &mut Step) -> Result<(), Error> {
    let (start, end) = keys::range(keys::TODO, &step.id);
    let unacquired = !kv::scan(PARTITION, &start, Some(&end), None, 1)?
        .entries
        .is_empty();
    let why_incomplete = match &step.denial_state {
        _ if unacquired => Some(
            "purging began before acquisition finished: the holders of objects never acquired were not looked for",
        ),
        None => Some(
            "the request was filed before denial existed: nothing kept repositories from gaining the content after the scan",
        ),
        Some(denial) if denial.withdrawn_ms.is_some() => {
            Some("the request was withdrawn: its content may be pushed again")
        }
        Some(_) => None,
    };
    let state = &mut step.state;
    state.phase = if state.purged {
        Phase::Purged
    } else {
        Phase::Remove
    };
    state.discovery_complete = why_incomplete.is_none();
    let (event, detail) = match why_incomplete {
        None => (
            "PreservationDiscoveryComplete",
            format!(
                "{} holder repositories; verification {}",
                state.counts.holders,
                state.verification.name()
            ),
        ),
        Some(why) => {
            state.set_error(&format!("discovery incomplete: {why}"));
            (
                "PreservationDiscoveryIncomplete",
                format!("{} holder repositories; {why}", state.counts.holders),
            )
        }
    };
    step.event(event, &[], Some(detail));
    Ok(())
}
