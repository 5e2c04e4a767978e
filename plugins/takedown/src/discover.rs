//! Discover: find every repository holding the preserved objects, and plan
//! one cache invalidation per holder repository (an entry in the host's
//! outbox, the contract's `invalidation` layout, which the host delivers).

use std::collections::BTreeSet;

use custodian_sdk::contract::invalidation;
use custodian_sdk::{Error, kv};
use serde::{Deserialize, Serialize};

use crate::codec::{Id, corrupt, encode, hex};
use crate::content::{self, HolderPage};
use crate::context::Step;
use crate::keys::{self, PARTITION};
use crate::reads::Reads;
use crate::state::{self, ObjectInfo, Phase};
use crate::survey::get_paged;

/// Holders handled per step: each costs up to three commit operations
/// (marker guard and write, invalidation entry).
const HOLDERS_PER_STEP: u32 = 16;
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

/// One discover step: the holders of up to a queue page of objects
/// ([`crate::context::QUEUE_PAGE`]: a request of many objects held by
/// few repositories, the usual case, is not a step per object), at most
/// `HOLDERS_PER_STEP` each, while the commit has room for them.
///
/// Its reads are two host calls however many objects it takes (the
/// queue, and whether anything is still to acquire, which finishing
/// asks, came with the step's first read): the objects' progress rows
/// with a page of holders of each, and the holders' markers (one more
/// for objects resuming after a cursor). Only each object's own handling
/// writes its row, and markers this step writes are in `planned`, so
/// reading them all first decides as reading each in turn would.
pub fn run(step: &mut Step) -> Result<(), Error> {
    let start = keys::range(keys::DISCOVER, &step.id).0;
    let page = step.queue(keys::DISCOVER)?;
    if page.entries.is_empty() {
        let unacquired = !step.queue(keys::TODO)?.entries.is_empty();
        return finish(step, unacquired);
    }
    let objects = keys::objects_of(&page.entries, &start, "discover")?;
    // Each object's progress row and the first page of its holders in one
    // read: an object is usually new to discovery, so the page from the
    // start is the one it needs. One whose row holds a cursor (it had
    // more holders than a step takes) is read again from there, and one
    // done needs none.
    let mut reads = Reads::new();
    let mut asked = Vec::with_capacity(objects.len());
    for object in &objects {
        let info = reads.get(PARTITION, keys::object_key(keys::OBJECT, &step.id, object));
        let range = content::holders_range(object, None)?;
        asked.push((
            info,
            reads.scan(content::CONTENT, range, None, HOLDERS_PER_STEP),
        ));
    }
    let mut answers = reads.run()?;
    let mut infos = Vec::with_capacity(objects.len());
    let mut pages = Vec::with_capacity(objects.len());
    let mut again = Reads::new();
    let mut resumed = Vec::new();
    for (object, (info, first)) in objects.iter().zip(asked) {
        let info = state::decode_info(object, answers.value(info)?.as_deref())?;
        let first = answers.page(first)?;
        pages.push(match info.holders_cursor()? {
            _ if info.holders_done => None,
            None => Some(content::holders_of(object, first)?),
            Some(cursor) => {
                let range = content::holders_range(object, Some(&cursor))?;
                let at = again.scan(content::CONTENT, range, Some(cursor), HOLDERS_PER_STEP);
                resumed.push((pages.len(), *object, at));
                None
            }
        });
        infos.push(info);
    }
    if !resumed.is_empty() {
        let mut answers = again.run()?;
        for (slot, object, at) in resumed {
            pages[slot] = Some(content::holders_of(&object, answers.page(at)?)?);
        }
    }
    let markers: Vec<Vec<u8>> = pages
        .iter()
        .flatten()
        .flat_map(|page| &page.holders)
        .map(|h| keys::holder_key(&step.id, &h.repository.namespace, &h.repository.name))
        .collect();
    let mut known = get_paged(PARTITION, &markers)?.into_iter();
    // Holders planned by this step: markers it wrote are not yet in the
    // KV, so an object later in the step sharing a holder must skip it here.
    let mut planned = BTreeSet::new();
    for (taken, (((row, object), info), holders)) in page
        .entries
        .into_iter()
        .zip(objects)
        .zip(infos)
        .zip(pages)
        .enumerate()
    {
        let room = step.room().saturating_sub(OBJECT_OPS) / HOLDER_OPS;
        // Within u32: at most HOLDERS_PER_STEP.
        let limit = HOLDERS_PER_STEP.min(u32::try_from(room).unwrap_or(u32::MAX));
        if taken > 0 && limit == 0 {
            break;
        }
        let found = holders.as_ref().map_or(0, |page| page.holders.len());
        let markers: Vec<Option<Vec<u8>>> = known.by_ref().take(found).collect();
        let read = Read {
            row,
            info,
            holders,
            markers,
        };
        one(step, object, read, limit.max(1), &mut planned)?;
    }
    Ok(())
}

/// What a discover step read of one object: its discover row, its
/// progress, a page of its holders (`None` once all were handled) and
/// their markers.
struct Read {
    row: kv::Entry,
    info: ObjectInfo,
    holders: Option<HolderPage>,
    markers: Vec<Option<Vec<u8>>>,
}

/// Plans the invalidations of up to `limit` holders of `object` not in
/// `planned`, adding them to it; the holders after those wait for the
/// next step.
fn one(
    step: &mut Step,
    object: Id,
    read: Read,
    limit: u32,
    planned: &mut BTreeSet<Vec<u8>>,
) -> Result<(), Error> {
    let Read {
        row,
        mut info,
        holders,
        markers,
    } = read;
    if !matches!(row.value.as_slice(), [0] | [1]) {
        return Err(corrupt(format!(
            "the discover row of {} is neither an object nor a pack",
            hex(&object)
        )));
    }
    let info_key = keys::object_key(keys::OBJECT, &step.id, &object);
    let Some(holders) = holders else {
        step.delete(row.key);
        return Ok(());
    };
    // Within usize: a u32.
    let limit = limit as usize;
    // Cut short, the page resumes after the last holder handled.
    let next = match holders.holders.get(limit.saturating_sub(1)) {
        Some(last) if holders.holders.len() > limit => Some(last.key.clone()),
        _ => holders.next,
    };
    for (holder, existing) in holders.holders.iter().zip(markers).take(limit) {
        let repository = &holder.repository;
        let marker = keys::holder_key(&step.id, &repository.namespace, &repository.name);
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
            repository: format!("{}/{}", repository.namespace, repository.name),
            objects: vec![object],
        };
        step.put_in(invalidation::PARTITION, entry.key(), entry.value());
        step.state.counts.holders += 1;
    }
    match next {
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
/// unacquired (`unacquired`: the acquisition queue is not empty) were
/// never queued for discovery.
fn finish(step: &mut Step, unacquired: bool) -> Result<(), Error> {
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
