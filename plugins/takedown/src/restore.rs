//! Restore: a withdrawal puts back the serving copies its content needs
//! before any of its denials is lifted.
//!
//! Lifting a withdrawn request's denials ([`crate::denial_work`]) runs in
//! three stages, each in bounded chunks:
//!
//! 1. pending removals of the request are finished
//!    ([`crate::remove::finish_for_lift`]), so none lands later;
//! 2. the **restore pass** (this module) visits every object the request
//!    denies (its `denied` rows, a cursor in the `denial` row) and puts
//!    back each serving copy that is missing and needed;
//! 3. the denials are lifted, only once the pass is complete.
//!
//! So no denial of the request is lifted while content it makes served
//! again lacks its serving copy.
//!
//! # Needed
//!
//! Call a request *gone* if it is this one or is withdrawn. A missing
//! serving copy (`head` answers not-found) of an object is needed when
//!
//! - no request denying it that is not gone holds a verified preserved
//!   copy of it (its last such denier is going, so nobody would be left
//!   to restore it: this is the case of an object this request was the
//!   last to deny), or
//! - it is a chunk of a manifest (a `c` row) every denier of which is gone
//!   (that file is about to be served again), or of more manifests than
//!   the pass reads ([`MANIFESTS_PER_OBJECT`]; restoring is the safe
//!   side).
//!
//! A copy restored while another request still denies the object is
//! harmless (a denied object is refused whatever the store holds).
//! Two withdrawals racing each see the other as gone (each pass starts
//! after its own withdrawal committed, and reads the other's `denial`
//! row), so at least one restores what both make needed.
//!
//! Before deciding, the pass waits (`unavailable`, retried) while another
//! request denying an object it visits has a removal of it pending: that
//! removal was decided before this withdrawal (its intent commit is
//! guarded on this request's `denial` row), and its delete may still be
//! under way.
//!
//! # How
//!
//! From this request's own preserved copy when it is verified, else from
//! the copy of another request denying the object (verified, not being
//! purged; [`crate::preserved::pick_among`]): its pieces are read (each
//! checked against its intent), reassembled, checked (BLAKE3 against the
//! object id, CRC-64/NVME against the content index's `o` row), and put
//! to `serving` at `content/<hex>` with `if-none-match: *` and the CRC (a
//! copy put back meanwhile is fine). Counted (`denial.restored`) and
//! audited (`ServingCopyRestored`). A copy missing when the pass looked
//! and found put back when it went to restore it is counted and audited
//! too: most often another run of the same chunk wrote it and lost the
//! commit (both are guarded on the `denial` row), so the run that commits
//! counts every copy that was missing and is served again. So is a copy
//! this request removed (its `removed` row) that is already back when
//! the pass looks: the losing run got to it first, and its count and
//! audit entry went with its lost commit.
//!
//! With no usable copy the pass records `last_error` (in the `denial`
//! row, shown by `status`) and goes on: the object's serving copy was not
//! removed by rule (every denier had verified it before a removal, and
//! the last one going restores it), so it was lost some other way, and
//! keeping the denial would not bring it back.
//!
//! # Bounds
//!
//! A chunk visits at most [`OBJECTS_PER_CHUNK`] objects (a `head` each,
//! and for missing ones a `c`-row scan, in about 8 other reads for all)
//! and restores at most [`RESTORES_PER_CHUNK`] objects and
//! [`BYTES_PER_CHUNK`] bytes (one object at least; an object is at most
//! 16 MiB, so a chunk holds at most one in memory at a time, under the
//! plugin's 64 MiB): ~150 host calls at the most.

use std::collections::{BTreeMap, BTreeSet};

use custodian_sdk::audit::Entry;
use custodian_sdk::objects::{self, PutCondition};
use custodian_sdk::{Error, checksum, kv};

use crate::codec::{Id, bounded, hex};
use crate::content::{self, ObjectRow, SERVING};
use crate::denial::DenialState;
use crate::keys::{self, PARTITION};
use crate::preserved::{self, ReadError};
use crate::reads;
use crate::survey::{self, Held};

/// `denied` rows visited per chunk.
pub const OBJECTS_PER_CHUNK: u32 = 24;
/// Objects restored (or tried from a copy) per chunk: each is an audit
/// entry, and a commit carries at most 8.
pub const RESTORES_PER_CHUNK: usize = 6;
/// Bytes restored per chunk (at least one object).
pub const BYTES_PER_CHUNK: u64 = 32 * 1024 * 1024;
/// `c` rows read per missing object; a chunk of more manifests is
/// restored.
pub const MANIFESTS_PER_OBJECT: u32 = 64;

/// One chunk of request `id`'s restore pass: advances `state`'s cursor
/// (setting `restore_done` at the end), counts what it restored and
/// records what it could not; returns its audit entries.
pub fn chunk(id: &Id, state: &mut DenialState) -> Result<Vec<Entry>, Error> {
    let (start, end) = keys::range(keys::DENIED, id);
    let cursor = keys::cursor(state.restore_after.as_deref(), (&start, &end), "restore")?;
    let page = kv::scan(
        PARTITION,
        &start,
        Some(&end),
        cursor.as_deref(),
        OBJECTS_PER_CHUNK,
    )?;
    let entries = page
        .entries
        .into_iter()
        .map(|entry| Ok((keys::object_of(&entry.key, &start, "denied")?, entry.key)))
        .collect::<Result<Vec<(Id, Vec<u8>)>, Error>>()?;
    let objects: Vec<Id> = entries.iter().map(|(object, _)| *object).collect();
    let denials: BTreeMap<Id, survey::Denials> = objects
        .iter()
        .copied()
        .zip(survey::denials(&objects)?)
        .filter(|(_, denied)| denied.lists(id))
        .collect();
    let pairs: Vec<(Id, Id)> = denials
        .iter()
        .flat_map(|(object, denied)| denied.requests.iter().map(|r| (*r, *object)))
        .collect();
    let held = survey::held(&pairs)?;
    if let Some((request, object)) = pairs
        .iter()
        .find(|(r, o)| r != id && held.get(&(*r, *o)).is_some_and(|h| h.removing))
    {
        return Err(Error::Unavailable(format!(
            "request {} is removing the serving copy of {}; the withdrawal waits for it",
            hex(request),
            hex(object)
        )));
    }
    let (mut missing, mut present) = (Vec::new(), Vec::new());
    for object in denials.keys() {
        match objects::head(SERVING, &keys::serving_key(object)) {
            Ok(_) => present.push(*object),
            Err(Error::NotFound(_)) => missing.push(*object),
            Err(other) => return Err(other),
        }
    }
    // Copies this request removed (its `removed` rows) that are back:
    // put back since by another writer, most often a run of the same chunk
    // that then lost its commit to this one (the withdrawal's own call and
    // the request's timer step both run it). Counted and audited here, or
    // nobody would: the losing run's count and audit entry went with its
    // commit.
    let put_back = reads::tagged(keys::REMOVED, id, &present)?;
    let needed = needed(id, &missing, &denials, &held)?;
    let index: BTreeMap<Id, Option<ObjectRow>> = needed
        .iter()
        .copied()
        .zip(content::object_rows(&needed)?)
        .collect();
    let mut events = Vec::new();
    let (mut tried, mut bytes) = (0, 0u64);
    let mut last = None;
    let mut stopped = false;
    for (object, key) in &entries {
        if put_back.contains(object) {
            state.restored += 1;
            events.push(Entry {
                event: "ServingCopyRestored".into(),
                targets: vec![hex(id), hex(object)],
                detail: Some(format!(
                    "{} was put back by another writer after this request removed it \
                     (present when this pass looked)",
                    keys::serving_key(object)
                )),
            });
        } else if let Some(row) = index.get(object) {
            let size = row.map_or(0, |row| row.size);
            if tried == RESTORES_PER_CHUNK || (tried > 0 && bytes + size > BYTES_PER_CHUNK) {
                stopped = true;
                break;
            }
            let own = held.get(&(*id, *object));
            let others: Vec<Id> = denials[object]
                .requests
                .iter()
                .filter(|r| *r != id)
                .copied()
                .collect();
            let (outcome, read) = restore(id, object, *row, own, &others)?;
            if read {
                tried += 1;
                bytes += size;
            }
            // How the copy came back; `None` when it did not.
            let how = match outcome {
                Outcome::Restored { from } => {
                    let whose = if from == *id {
                        "this request's".to_owned()
                    } else {
                        format!("request {}'s", hex(&from))
                    };
                    Some(format!(
                        "restored from {whose} preserved copy ({size} bytes)"
                    ))
                }
                // Missing when this chunk looked, there now: another run
                // of the same chunk put it back meanwhile (a timer step
                // racing the withdrawal's own call; both are guarded on
                // the `denial` row, so only one commits, and the one that
                // does must count what the other wrote), or another
                // writer did.
                Outcome::Present => Some(
                    "was put back meanwhile by another writer (missing when this pass \
                     looked, present when it went to restore it)"
                        .to_owned(),
                ),
                Outcome::Failed(why) => {
                    state.last_error = Some(bounded(&format!(
                        "object {}: its denial is lifted without a serving copy: {why}",
                        hex(object)
                    )));
                    None
                }
            };
            if let Some(how) = how {
                state.restored += 1;
                events.push(Entry {
                    event: "ServingCopyRestored".into(),
                    targets: vec![hex(id), hex(object)],
                    detail: Some(format!("{} {how}", keys::serving_key(object))),
                });
            }
        }
        last = Some(key);
    }
    if !stopped && page.next.is_none() {
        state.restore_done = true;
        state.restore_after = None;
    } else if let Some(key) = last {
        state.restore_after = Some(hex(key));
    }
    Ok(events)
}

/// Which of `missing` the content needs back (see the module doc).
fn needed(
    id: &Id,
    missing: &[Id],
    denials: &BTreeMap<Id, survey::Denials>,
    held: &BTreeMap<(Id, Id), Held>,
) -> Result<Vec<Id>, Error> {
    if missing.is_empty() {
        return Ok(Vec::new());
    }
    let manifests: BTreeMap<Id, Option<Vec<Id>>> = missing
        .iter()
        .copied()
        .zip(survey::manifests_of(missing, MANIFESTS_PER_OBJECT)?)
        .collect();
    let listed: Vec<Id> = manifests
        .values()
        .flatten()
        .flatten()
        .copied()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let manifest_denials: BTreeMap<Id, survey::Denials> = listed
        .iter()
        .copied()
        .zip(survey::denials(&listed)?)
        .collect();
    let requests: BTreeSet<Id> = missing
        .iter()
        .flat_map(|o| denials[o].requests.iter())
        .chain(manifest_denials.values().flat_map(|d| d.requests.iter()))
        .filter(|r| *r != id)
        .copied()
        .collect();
    let standing = survey::standing(&requests)?;
    let gone = |r: &Id| r == id || standing.get(r).is_none_or(|s| s.withdrawn);
    Ok(missing
        .iter()
        .filter(|object| {
            let kept_by_another = denials[*object]
                .requests
                .iter()
                .any(|r| !gone(r) && held.get(&(*r, **object)).is_some_and(Held::verified));
            let file_served = match &manifests[*object] {
                None => true,
                Some(of) => of
                    .iter()
                    .any(|m| manifest_denials[m].requests.iter().all(&gone)),
            };
            !kept_by_another || file_served
        })
        .copied()
        .collect())
}

/// What restoring one object came to.
enum Outcome {
    /// Put back from `from`'s preserved copy.
    Restored { from: Id },
    /// Missing when the chunk looked, put back meanwhile by someone else.
    Present,
    /// No usable copy, and why.
    Failed(String),
}

/// Restores `object` (index row `row`) from request `id`'s own copy
/// (`own`) if verified, else from one of `others`'; also says whether a
/// copy was read.
fn restore(
    id: &Id,
    object: &Id,
    row: Option<ObjectRow>,
    own: Option<&Held>,
    others: &[Id],
) -> Result<(Outcome, bool), Error> {
    let Some(row) = row else {
        return Ok((
            Outcome::Failed("the content index has no row for it".into()),
            false,
        ));
    };
    let mut reasons = Vec::new();
    let mut read = false;
    for attempt in 0..2 {
        let source = if attempt == 0 {
            own.filter(|h| h.verified()).map(|_| *id)
        } else {
            preserved::pick_among(object, others)?.map(|copy| copy.request)
        };
        let Some(source) = source else {
            continue;
        };
        read = true;
        let bytes = match preserved::read(&source, object, row.size) {
            Ok(bytes) => bytes,
            Err(ReadError::Unreadable(why)) => {
                reasons.push(why);
                continue;
            }
            Err(ReadError::Host(error)) => return Err(error),
        };
        if checksum::blake3(&bytes) != *object {
            reasons.push(format!(
                "request {}'s preserved copy does not hash to the object id (BLAKE3)",
                hex(&source)
            ));
            continue;
        }
        if checksum::crc64_nvme(&bytes) != row.crc64 {
            reasons.push(format!(
                "request {}'s preserved copy has another CRC than the content index",
                hex(&source)
            ));
            continue;
        }
        let key = keys::serving_key(object);
        return match objects::put(
            SERVING,
            &key,
            &bytes,
            &PutCondition::IfNoneMatchAny,
            Some(row.crc64),
            &[],
        ) {
            Ok(_) => Ok((Outcome::Restored { from: source }, read)),
            Err(Error::PreconditionFailed(_)) => Ok((Outcome::Present, read)),
            Err(other) => Err(other),
        };
    }
    let why = if reasons.is_empty() {
        "no request holds a verified preserved copy".to_owned()
    } else {
        reasons.join("; ")
    };
    Ok((Outcome::Failed(why), read))
}
