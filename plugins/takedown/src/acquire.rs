//! Acquire: select each queued object's source, copy it into the preserved
//! store piece by piece, verify it, and queue a manifest's chunks; up to
//! `OBJECTS_PER_STEP` (8) objects a step.
//!
//! The source is the serving copy. When another request has removed it
//! ([`crate::remove`]), the source is that request's preserved copy: a
//! request denying the object whose copy is verified and not being purged
//! ([`preserved::pick`]). It is copied through the same path (an intent
//! before each piece), verified the same way (size, CRC-64/NVME against
//! the content index, BLAKE3 against the id, structure), and the `source`
//! row names the request it came from. With neither, the source is
//! missing (data loss), recorded like corruption.

use custodian_sdk::objects::{self, MAX_BODY_BYTES};
use custodian_sdk::{Error, checksum, kv};
use serde::{Deserialize, Serialize};

use crate::closure::Checkpoint;
use crate::codec::{Id, corrupt, decode, describe, encode, hex, id_from_hex};
use crate::content::{self, MANIFEST, PACK, SERVING, manifest, pack};
use crate::context::{MAX_AUDIT, Step};
use crate::denial;
use crate::keys::{self, PARTITION};
use crate::preserved::{self, ReadError};
use crate::state::{self, ObjectInfo, Phase, Verification};
use crate::{copy, queue};

/// Manifest chunks queued per step: each costs a commit write, and their
/// progress rows are read in one `get-many`.
const CHUNKS_PER_STEP: u32 = 64;
/// Objects a step selects or acquires at most. A step's fixed costs (its
/// commit, the request's rows, the host's timer and claim) are shared by
/// them, so a request of many small objects is not one step per object
/// and phase. Eight keeps the audit bound: a selection is one entry each
/// ([`MAX_AUDIT`]).
const OBJECTS_PER_STEP: u32 = 8;
/// Object bytes a step reads before it takes no further object (the first
/// is always taken, up to the largest a step may read): one object is
/// held in memory at a time, and this bounds the step's time against its
/// time limit where each publish is a network round trip (S3).
const BYTES_PER_STEP: u64 = 4 * 1024 * 1024;
/// Commit operations of the step's own rows: the denial commit's bound,
/// leaving the host's headroom.
const STEP_OPS: usize = denial::COMMIT_OPS;
/// Operations [`context::finish`] adds (state, denial, lock, guards).
const FINISH_OPS: usize = 8;
/// Operations one object's selection or acquisition plans besides its
/// queued chunks: at most a guard and four writes.
const OBJECT_OPS: usize = 5;

/// The `source` row: the copy selected for an object (its serving copy,
/// or another request's preserved copy), kept as provenance even when it
/// turns out corrupt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    /// Its key in `serving`; for a preserved copy, the prefix of its
    /// pieces in `preserved` ([`keys::preserved_prefix`]).
    pub key: String,
    /// The etag it had when selected; every read is guarded on it. Empty
    /// for a preserved copy (each piece is checked against its intent).
    pub etag: String,
    /// Size in bytes.
    pub size: u64,
    /// CRC-64/NVME as the content index records it.
    pub crc64: u64,
    /// Kind as the content index records it.
    pub kind: u8,
    /// When it was selected.
    pub selected_at: u64,
    /// The request (hex) whose preserved copy was selected, the serving
    /// copy having been removed; absent for a serving copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
}

impl Source {
    /// The request whose preserved copy this is, if it is one.
    fn preserved_by(&self) -> Result<Option<Id>, Error> {
        self.request
            .as_deref()
            .map(|r| id_from_hex(r, "a source's request"))
            .transpose()
    }

    /// Where a source of `object` must be: its serving key, or the prefix
    /// of the preserving request's pieces.
    fn expected_key(&self, object: &Id) -> Result<String, Error> {
        Ok(match self.preserved_by()? {
            Some(request) => keys::preserved_prefix(&request, object),
            None => keys::serving_key(object),
        })
    }
}

/// Why a serving copy cannot be preserved (it is recorded, not retried).
struct Unusable(String);

/// One acquire step: up to `OBJECTS_PER_STEP` queued objects, each
/// selected or acquired, while the step's bounds leave room for another.
/// Their progress and source rows are read at once: only each object's
/// own handling writes them, so no earlier object of the step changes them.
pub fn run(step: &mut Step) -> Result<(), Error> {
    let (start, end) = keys::range(keys::TODO, &step.id);
    let page = kv::scan(PARTITION, &start, Some(&end), None, OBJECTS_PER_STEP)?;
    if page.entries.is_empty() {
        finish(step);
        return Ok(());
    }
    let objects = keys::objects_of(&page.entries, &start, "todo")?;
    let rows = state::object_rows(&step.id, &objects, &[keys::OBJECT, keys::SOURCE])?;
    let mut rows = rows.into_iter();
    let mut read = 0;
    for (taken, (todo, object)) in page.entries.into_iter().zip(objects).enumerate() {
        let (info, source) = (rows.next().flatten(), rows.next().flatten());
        let room = STEP_OPS.saturating_sub(step.ops() + FINISH_OPS);
        if taken > 0
            && (read >= BYTES_PER_STEP || room < OBJECT_OPS || step.audit_len() >= MAX_AUDIT)
        {
            break;
        }
        let queued = Queued {
            object,
            todo,
            info,
            source,
        };
        let done = one(step, queued, room - OBJECT_OPS)?;
        read += done.read;
        // Two manifests queued in one step could both queue a chunk they
        // share: each reads the committed rows, which do not yet hold the
        // other's. One queueing per step keeps every object queued once.
        if done.queued {
            break;
        }
    }
    Ok(())
}

/// A queued object and its rows as the step read them.
struct Queued {
    object: Id,
    todo: kv::Entry,
    /// Its progress row.
    info: Option<Vec<u8>>,
    /// Its source row.
    source: Option<Vec<u8>>,
}

/// What handling one queued object did.
#[derive(Default)]
struct Done {
    /// Object bytes read.
    read: u64,
    /// Whether manifest chunks were queued.
    queued: bool,
}

/// Selects or acquires a queued object, queueing at most `chunk_room`
/// manifest chunks.
fn one(step: &mut Step, queued: Queued, chunk_room: usize) -> Result<Done, Error> {
    let Queued {
        object,
        todo,
        info,
        source,
    } = queued;
    let expected = match todo.value.as_slice() {
        [kind] if *kind == 0 || content::is_kind(*kind) => *kind,
        _ => {
            return Err(corrupt(format!(
                "the todo row of {} is not a kind",
                hex(&object)
            )));
        }
    };
    let info = state::decode_info(&object, info.as_deref())?;
    if info.source_failed || info.verified {
        // Queued again by a later manifest or pack: nothing left to do.
        step.delete(todo.key);
        return Ok(Done::default());
    }
    let source_key = keys::object_key(keys::SOURCE, &step.id, &object);
    match source {
        None => select(step, &object, expected, info).map(|()| Done::default()),
        Some(raw) => {
            let source: Source = decode(&raw, "a source checkpoint")?;
            if source.key != source.expected_key(&object)?
                || !content::is_kind(source.kind)
                || info.kind != source.kind
                || info.size != source.size
                || (expected != 0 && expected != source.kind)
            {
                return Err(corrupt(format!(
                    "the source checkpoint of {} does not match its object",
                    hex(&object)
                )));
            }
            step.require_observed(source_key, Some(&raw));
            acquire(step, &object, &source, info, todo.key, chunk_room)
        }
    }
}

/// Selects the serving copy of `object` (or, when it was removed, another
/// request's preserved copy) and records it as provenance.
fn select(step: &mut Step, object: &Id, expected: u8, mut info: ObjectInfo) -> Result<(), Error> {
    let serving = keys::serving_key(object);
    let head = match objects::head(SERVING, &serving) {
        Ok(meta) => Some(meta),
        Err(Error::NotFound(_)) => None,
        Err(other) => return Err(other),
    };
    let Some(row) = content::object_row(object)? else {
        return source_corrupt(
            step,
            object,
            info,
            false,
            "missing from the content index (data loss)".into(),
        );
    };
    let origin = match head {
        Some(head) => {
            if head.size != row.size || head.crc64.is_some_and(|crc| crc != row.crc64) {
                return source_corrupt(
                    step,
                    object,
                    info,
                    false,
                    "the serving copy disagrees with the content index".into(),
                );
            }
            Origin::Serving(head.etag)
        }
        None => match preserved::pick(object, Some(&step.id))? {
            Some(copy)
                if copy.info.size == row.size
                    && copy.info.crc64 == row.crc64
                    && copy.info.kind == row.kind =>
            {
                Origin::Preserved(copy.request)
            }
            _ => {
                return source_corrupt(
                    step,
                    object,
                    info,
                    false,
                    "missing from serving, and no request denying it holds a verified \
                     preserved copy (data loss)"
                        .into(),
                );
            }
        },
    };
    let problem = if expected != 0 && expected != row.kind {
        Some(format!(
            "expected kind {expected}, the index says {}",
            row.kind
        ))
    } else if row.size > MAX_BODY_BYTES {
        // A step reads the whole object to check its BLAKE3 id; larger
        // objects cannot be verified within one host call.
        Some(format!(
            "{} bytes exceed the {MAX_BODY_BYTES} bytes a step may read",
            row.size
        ))
    } else if row.kind == MANIFEST && manifest::count_for_size(row.size).is_none() {
        Some("no manifest has that size".into())
    } else if row.kind == PACK
        && (row.size < pack::HEADER || !(row.size - pack::HEADER).is_multiple_of(pack::ENTRY))
    {
        Some("no pack has that size".into())
    } else {
        None
    };
    if let Some(problem) = problem {
        return source_corrupt(step, object, info, false, problem);
    }
    let (key, etag, request) = match origin {
        Origin::Serving(etag) => (serving, etag, None),
        Origin::Preserved(request) => (
            keys::preserved_prefix(&request, object),
            String::new(),
            Some(hex(&request)),
        ),
    };
    let source = Source {
        key,
        etag,
        size: row.size,
        crc64: row.crc64,
        kind: row.kind,
        selected_at: step.now,
        request,
    };
    let source_key = keys::object_key(keys::SOURCE, &step.id, object);
    step.require_observed(source_key.clone(), None);
    step.put(source_key, encode(&source)?);
    info.kind = source.kind;
    info.size = source.size;
    step.put(
        keys::object_key(keys::OBJECT, &step.id, object),
        encode(&info)?,
    );
    let detail = match &source.request {
        Some(request) => format!(
            "request {request}'s preserved copy {} (the serving copy was removed) kind {} size {}",
            source.key, source.kind, source.size
        ),
        None => format!(
            "{} kind {} size {} etag {}",
            source.key, source.kind, source.size, source.etag
        ),
    };
    step.event("PreservationSourceSelected", &[hex(object)], Some(detail));
    Ok(())
}

/// Where a selected source is.
enum Origin {
    /// The serving copy, with its etag.
    Serving(String),
    /// The preserved copy of this request.
    Preserved(Id),
}

/// Copies, verifies and completes `object` from its selected `source`,
/// queueing at most `chunk_room` of a manifest's chunks.
fn acquire(
    step: &mut Step,
    object: &Id,
    source: &Source,
    mut info: ObjectInfo,
    todo: Vec<u8>,
    chunk_room: usize,
) -> Result<Done, Error> {
    let count = if source.kind == MANIFEST {
        manifest::count_for_size(source.size)
            .ok_or_else(|| corrupt(format!("manifest {} has an impossible size", hex(object))))?
    } else {
        0
    };
    let bytes = if info.copied < source.size || info.chunks < count {
        match read(object, source) {
            Ok(bytes) => Some(bytes),
            Err(Ok(Unusable(reason))) => {
                source_corrupt(step, object, info, true, reason)?;
                return Ok(Done {
                    read: source.size,
                    queued: false,
                });
            }
            Err(Err(error)) => return Err(error),
        }
    } else {
        None
    };
    let mut done = Done {
        read: bytes.as_ref().map_or(0, |b| b.len() as u64),
        queued: false,
    };
    if let Some(bytes) = &bytes {
        copy::pieces(step, object, &mut info, bytes)?;
    }
    let info_key = keys::object_key(keys::OBJECT, &step.id, object);
    if info.copied < source.size {
        step.put(info_key, encode(&info)?);
        return Ok(done);
    }
    // The CRC-64/NVME verification against the serving copy: the pieces'
    // CRCs, combined in order, must be the whole object's.
    if info.crc64 != source.crc64 {
        return Err(corrupt(format!(
            "the preserved pieces of {} combine to CRC {:016x}, the serving copy's is {:016x}",
            hex(object),
            info.crc64,
            source.crc64
        )));
    }
    if source.kind == MANIFEST {
        if step.state.verification != Verification::SourceCorrupt {
            step.state.verification = Verification::ManifestClosurePending;
        }
        // Within u32: bounded by CHUNKS_PER_STEP.
        let take = CHUNKS_PER_STEP.min(u32::try_from(chunk_room).unwrap_or(u32::MAX));
        let upto = count.min(info.chunks.saturating_add(take));
        let chunks = (info.chunks..upto)
            .map(|index| {
                let at = usize::try_from(manifest::chunk_offset(index))
                    .map_err(|_| corrupt("a chunk offset"))?;
                let id = bytes
                    .as_deref()
                    .and_then(|b| b.get(at..at + 32))
                    .and_then(|b| Id::try_from(b).ok())
                    .ok_or_else(|| corrupt(format!("manifest {} is truncated", hex(object))))?;
                Ok((id, content::BLOB))
            })
            .collect::<Result<Vec<_>, Error>>()?;
        done.queued = !chunks.is_empty();
        queue::enqueue(step, &chunks)?;
        info.chunks = upto;
        if info.chunks < count {
            step.put(info_key, encode(&info)?);
            return Ok(done);
        }
        step.put(
            keys::object_key(keys::CLOSURE, &step.id, object),
            encode(&Checkpoint::default())?,
        );
    }
    info.verified = true;
    step.state.counts.verified += 1;
    step.put(info_key, encode(&info)?);
    step.delete(todo);
    step.put(keys::object_key(keys::DISCOVER, &step.id, object), vec![0]);
    Ok(done)
}

/// The whole source copy, verified against the selected source: its
/// etag (a serving copy) or its pieces' intents (a preserved copy), size,
/// CRC, BLAKE3 id and structure. `Err(Ok(_))` when it cannot be
/// preserved; `Err(Err(_))` when the host failed.
fn read(object: &Id, source: &Source) -> Result<Vec<u8>, Result<Unusable, Error>> {
    let unusable = |reason: String| Err(Ok(Unusable(reason)));
    let bytes = match source.preserved_by().map_err(Err)? {
        Some(request) => match preserved::read(&request, object, source.size) {
            Ok(bytes) => {
                if checksum::crc64_nvme(&bytes) != source.crc64 {
                    return unusable(format!(
                        "request {}'s preserved copy has another CRC than the index",
                        hex(&request)
                    ));
                }
                bytes
            }
            Err(ReadError::Unreadable(why)) => return unusable(why),
            Err(ReadError::Host(error)) => return Err(Err(error)),
        },
        None => {
            let (meta, bytes) = match objects::get(SERVING, &source.key, Some(&source.etag)) {
                Ok(found) => found,
                Err(error @ Error::PreconditionFailed(_)) => {
                    return unusable(format!(
                        "the serving copy changed since it was selected ({})",
                        describe(&error)
                    ));
                }
                Err(error @ Error::NotFound(_)) => {
                    return unusable(format!(
                        "the serving copy disappeared ({})",
                        describe(&error)
                    ));
                }
                Err(other) => return Err(Err(other)),
            };
            if bytes.len() as u64 != source.size || meta.crc64.is_some_and(|c| c != source.crc64) {
                return unusable("the serving copy's size or CRC differs from the index".into());
            }
            bytes
        }
    };
    if bytes.len() as u64 != source.size {
        return unusable("the preserved copy's size differs from the index".into());
    }
    if blake3::hash(&bytes).as_bytes() != object {
        let what = if source.request.is_some() {
            "preserved"
        } else {
            "serving"
        };
        return unusable(format!(
            "the {what} bytes do not hash to the object id (BLAKE3)"
        ));
    }
    let structure = match source.kind {
        MANIFEST => manifest::check(&bytes).map(drop),
        PACK => pack::check(&bytes).map(drop),
        _ => Ok(()),
    };
    if let Err(reason) = structure {
        return unusable(reason);
    }
    Ok(bytes)
}

/// Records that `object`'s serving copy cannot be preserved (`selected`:
/// after its source was recorded): the source row stays as provenance, the object leaves the queue and is still
/// discovered, and the request's acquisition is incomplete.
fn source_corrupt(
    step: &mut Step,
    object: &Id,
    mut info: ObjectInfo,
    selected: bool,
    reason: String,
) -> Result<(), Error> {
    info.source_failed = true;
    info.verified = false;
    step.state.verification = Verification::SourceCorrupt;
    step.state.counts.corrupt += 1;
    step.state
        .set_error(&format!("object {}: {reason}", hex(object)));
    // A selected source is already guarded (equals) by the caller.
    if !selected {
        step.require_observed(keys::object_key(keys::SOURCE, &step.id, object), None);
    }
    step.put(
        keys::object_key(keys::OBJECT, &step.id, object),
        encode(&info)?,
    );
    step.delete(keys::object_key(keys::TODO, &step.id, object));
    step.put(keys::object_key(keys::DISCOVER, &step.id, object), vec![0]);
    step.event("PreservationSourceCorrupt", &[hex(object)], Some(reason));
    Ok(())
}

/// No object left to acquire: decide what verification still needs.
fn finish(step: &mut Step) {
    let state = &mut step.state;
    if state.verification == Verification::CanonicalPending {
        state.verification = Verification::Verified;
    }
    state.phase = if state.verification == Verification::ManifestClosurePending {
        Phase::Closure
    } else {
        Phase::Discover
    };
    let event = match state.verification {
        Verification::Verified => "PreservationVerified",
        Verification::SourceCorrupt => "PreservationAcquisitionIncomplete",
        _ => "PreservationClosurePending",
    };
    let detail = Some(format!(
        "{} of {} objects verified, {} corrupt",
        state.counts.verified, state.counts.objects, state.counts.corrupt
    ));
    step.event(event, &[], detail);
}
