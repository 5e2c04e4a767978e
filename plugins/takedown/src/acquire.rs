//! Acquire: select each queued object's source, copy it into the preserved
//! store piece by piece, verify it, and queue a manifest's chunks; up to
//! a page of the queue ([`crate::context::QUEUE_PAGE`], 8) of objects a
//! step.
//!
//! The source is the serving copy. When another request has removed it
//! ([`crate::remove`]), the source is that request's preserved copy: a
//! request denying the object whose copy is verified and not being purged
//! ([`preserved::pick`]). It is copied through the same path (an intent
//! before each piece), verified the same way (size, CRC-64/NVME against
//! the content index, BLAKE3 against the id, structure), and the `source`
//! row names the request it came from. With neither, the source is
//! missing (data loss), recorded like corruption.

use std::collections::BTreeMap;

use custodian_sdk::objects::{self, MAX_BODY_BYTES};
use custodian_sdk::{Error, checksum, kv};
use serde::{Deserialize, Serialize};

use crate::closure::Checkpoint;
use crate::codec::{Id, corrupt, decode, describe, encode, hex, id_from_hex};
use crate::content::{self, MANIFEST, PACK, SERVING, manifest, pack};
use crate::context::{MAX_AUDIT, Step};
use crate::keys::{self, PARTITION};
use crate::preserved::{self, ReadError};
use crate::reads::Reads;
use crate::state::{self, ObjectInfo, Phase, Verification};
use crate::{copy, queue};

/// Manifest chunks queued per step: each costs a commit write, and their
/// progress rows are read in one `get-many`.
const CHUNKS_PER_STEP: u32 = 64;
/// Object bytes a step reads before it takes no further object (the first
/// is always taken, up to the largest a step may read): this bounds the
/// step's time against its time limit where each publish is a network
/// round trip (S3), and the bytes it holds until its pieces are published.
const BYTES_PER_STEP: u64 = 4 * 1024 * 1024;
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

/// One acquire step: up to [`crate::context::QUEUE_PAGE`] queued objects, each
/// selected or acquired, while the step's bounds leave room for another.
/// Their progress, source and index rows are read at once: only each
/// object's own handling writes them, so no earlier object of the step
/// changes them.
///
/// The objects being copied are read and verified first, then the
/// intents of all their pieces this step writes are one commit, and only
/// then are the pieces published and the objects completed: one intent
/// commit a step, not one per object.
pub fn run(step: &mut Step) -> Result<(), Error> {
    let start = keys::range(keys::TODO, &step.id).0;
    let page = step.queue(keys::TODO)?;
    if page.entries.is_empty() {
        finish(step);
        return Ok(());
    }
    let objects = keys::objects_of(&page.entries, &start, "todo")?;
    // Each object's progress and source rows, its content index row
    // (needed only to select a source, when it has none yet) and its first
    // piece's intent (which its selection may have committed), in one
    // snapshot read: 4 reads an object, at most 32 of MAX_READS.
    const _: () = assert!(crate::context::QUEUE_PAGE as usize * 4 <= kv::MAX_READS);
    let mut reads = Reads::new();
    let asked: Vec<[usize; 4]> = objects
        .iter()
        .map(|object| {
            [
                reads.get(PARTITION, keys::object_key(keys::OBJECT, &step.id, object)),
                reads.get(PARTITION, keys::object_key(keys::SOURCE, &step.id, object)),
                reads.get(content::CONTENT, content::object_key(object)),
                reads.get(PARTITION, keys::piece_key(&step.id, object, 0)),
            ]
        })
        .collect();
    let mut answers = reads.run()?;
    let mut rows = Vec::with_capacity(3 * objects.len());
    let mut index: BTreeMap<Id, Option<content::ObjectRow>> = BTreeMap::new();
    for (object, [info, source, row, first]) in objects.iter().zip(asked) {
        let source = answers.value(source)?;
        let row = answers.value(row)?;
        if source.is_none() {
            index.insert(*object, content::decode_object_row(object, row)?);
        }
        rows.push(answers.value(info)?);
        rows.push(source);
        rows.push(answers.value(first)?);
    }
    let mut rows = rows.into_iter();
    let mut read = 0;
    let mut copying: Vec<Copying> = Vec::new();
    let mut selected: Vec<(Id, copy::Piece)> = Vec::new();
    // Operations the objects being copied will add once completed.
    let mut reserved = 0;
    let mut pieces_left = copy::PIECES_PER_STEP;
    for (taken, (todo, object)) in page.entries.into_iter().zip(objects).enumerate() {
        let (info, source, first) = (
            rows.next().flatten(),
            rows.next().flatten(),
            rows.next().flatten(),
        );
        let room = step.room().saturating_sub(reserved);
        if taken > 0
            && (read >= BYTES_PER_STEP
                || room < OBJECT_OPS
                || step.audit_len() >= MAX_AUDIT
                || pieces_left == 0)
        {
            break;
        }
        let queued = Queued {
            object,
            todo,
            info,
            source,
            index: index.remove(&object).flatten(),
            first,
        };
        let copy = match one(step, queued, pieces_left, &mut read)? {
            Taken::Copying(copy) => *copy,
            Taken::Selected(Some(piece)) => {
                selected.push((object, piece));
                continue;
            }
            Taken::Selected(None) | Taken::Done => continue,
        };
        pieces_left -= copy.pieces.len();
        reserved += OBJECT_OPS;
        // Two manifests queued in one step could both queue a chunk they
        // share: each reads the committed rows, which do not yet hold the
        // other's. One queueing per step keeps every object queued once,
        // and the manifest's chunks get the room the step has left.
        let queues = copy.queues_chunks();
        copying.push(copy);
        if queues {
            break;
        }
    }
    intend_selected(step, &selected)?;
    let pieces: Vec<(&Id, &copy::Piece)> = copying
        .iter()
        .flat_map(|c| {
            c.pieces
                .iter()
                .filter(|p| c.intended.as_ref() != Some(*p))
                .map(|p| (&c.object, p))
        })
        .collect();
    copy::commit_intents(step, &pieces)?;
    for copy in copying {
        complete(step, copy)?;
    }
    Ok(())
}

/// Adds to the selection step's own commit the intents of the objects it
/// selected that are one piece each, while its audit bound and its room
/// allow and its commit lands in time for an intent ([`copy::fits_step`]):
/// their copy step then publishes without an intent commit of its own,
/// one transaction less for each step that copies only such objects.
/// Selection comes first (a step selects as many objects as it may), so
/// this takes only the room selection left: a step selecting a whole
/// page of eight audits eight selections and adds no intent.
fn intend_selected(step: &mut Step, selected: &[(Id, copy::Piece)]) -> Result<(), Error> {
    if !copy::fits_step(step) {
        return Ok(());
    }
    for (object, piece) in selected {
        if step.audit_len() >= MAX_AUDIT || step.room() < 2 {
            break;
        }
        copy::intend_in_step(step, object, piece)?;
    }
    Ok(())
}

/// What a step did with one queued object.
enum Taken {
    /// Its source was selected (or found unusable) in this step's commit;
    /// with its one piece when the selected object is one piece.
    Selected(Option<copy::Piece>),
    /// It is being copied or completed by this step (boxed: it holds the
    /// object's rows and plan, many times the other variants).
    Copying(Box<Copying>),
    /// Nothing was left to do but what was added to the step.
    Done,
}

/// A queued object and its rows as the step read them.
struct Queued {
    object: Id,
    todo: kv::Entry,
    /// Its progress row.
    info: Option<Vec<u8>>,
    /// Its source row.
    source: Option<Vec<u8>>,
    /// Its content index row, read when it has no source row.
    index: Option<content::ObjectRow>,
    /// Its first piece's intent row, if committed.
    first: Option<Vec<u8>>,
}

/// An object this step copies (or, all copied, completes): its source,
/// its verified bytes when anything is left to copy or queue, and the
/// pieces planned.
struct Copying {
    object: Id,
    source: Source,
    info: ObjectInfo,
    todo: Vec<u8>,
    /// Its manifest chunks (0 for any other kind).
    count: u32,
    bytes: Option<Vec<u8>>,
    pieces: Vec<copy::Piece>,
    /// The planned first piece, when its intent is committed already (by
    /// the object's selection, or an earlier attempt of this step).
    intended: Option<copy::Piece>,
}

impl Copying {
    /// Whether completing it queues manifest chunks.
    fn queues_chunks(&self) -> bool {
        self.info.chunks < self.count
    }
}

/// Selects a queued object, or reads what acquiring it needs (adding the
/// bytes to `read`) and plans at most `pieces` of its pieces.
fn one(step: &mut Step, queued: Queued, pieces: usize, read: &mut u64) -> Result<Taken, Error> {
    let Queued {
        object,
        todo,
        info,
        source,
        index,
        first,
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
        return Ok(Taken::Done);
    }
    let source_key = keys::object_key(keys::SOURCE, &step.id, &object);
    let Some(raw) = source else {
        let source = select(step, &object, expected, info, index)?;
        let piece = source.and_then(|s| copy::single_piece(step, &object, s.size, s.crc64));
        return Ok(Taken::Selected(piece));
    };
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
    let first = first
        .map(|raw| decode::<copy::Piece>(&raw, "a piece intent"))
        .transpose()?;
    let copy = prepare(step, object, source, info, todo.key, pieces, read)?;
    Ok(copy.map_or(Taken::Done, |mut copy| {
        copy.intended = first.filter(|first| copy.pieces.first() == Some(first));
        Taken::Copying(Box::new(copy))
    }))
}

/// Selects the serving copy of `object` (or, when it was removed, another
/// request's preserved copy) and records it as provenance; `index` is its
/// content index row as read. The source selected, if one could be
/// (otherwise the object is recorded as corrupt).
fn select(
    step: &mut Step,
    object: &Id,
    expected: u8,
    mut info: ObjectInfo,
    index: Option<content::ObjectRow>,
) -> Result<Option<Source>, Error> {
    let serving = keys::serving_key(object);
    let head = match objects::head(SERVING, &serving) {
        Ok(meta) => Some(meta),
        Err(Error::NotFound(_)) => None,
        Err(other) => return Err(other),
    };
    let Some(row) = index else {
        return source_corrupt(
            step,
            object,
            info,
            false,
            "missing from the content index (data loss)".into(),
        )
        .map(|()| None);
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
                )
                .map(|()| None);
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
                )
                .map(|()| None);
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
        return source_corrupt(step, object, info, false, problem).map(|()| None);
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
    Ok(Some(source))
}

/// Where a selected source is.
enum Origin {
    /// The serving copy, with its etag.
    Serving(String),
    /// The preserved copy of this request.
    Preserved(Id),
}

/// Reads and verifies `object` from its selected `source` when anything
/// is left to copy or queue (adding its size to `read`, usable or not),
/// and plans at most `pieces` of its pieces; an unusable source is
/// recorded instead (`None`).
fn prepare(
    step: &mut Step,
    object: Id,
    source: Source,
    info: ObjectInfo,
    todo: Vec<u8>,
    pieces: usize,
    read: &mut u64,
) -> Result<Option<Copying>, Error> {
    let count = if source.kind == MANIFEST {
        manifest::count_for_size(source.size)
            .ok_or_else(|| corrupt(format!("manifest {} has an impossible size", hex(&object))))?
    } else {
        0
    };
    let bytes = if info.copied < source.size || info.chunks < count {
        *read += source.size;
        match read_source(&object, &source) {
            Ok(bytes) => Some(bytes),
            Err(Ok(Unusable(reason))) => {
                source_corrupt(step, &object, info, true, reason)?;
                return Ok(None);
            }
            Err(Err(error)) => return Err(error),
        }
    } else {
        None
    };
    let planned = bytes
        .as_deref()
        .map(|bytes| copy::plan(step, &object, &info, bytes, pieces))
        .unwrap_or_default();
    Ok(Some(Copying {
        object,
        source,
        info,
        todo,
        count,
        bytes,
        pieces: planned,
        intended: None,
    }))
}

/// Publishes the planned pieces of `copying` (their intents committed),
/// then verifies and completes it once every piece is there, queueing as
/// many of a manifest's chunks as the step's commit has room for.
fn complete(step: &mut Step, copying: Copying) -> Result<(), Error> {
    let Copying {
        object,
        source,
        mut info,
        todo,
        count,
        bytes,
        pieces,
        intended: _,
    } = copying;
    let object = &object;
    if let Some(bytes) = &bytes {
        for piece in &pieces {
            copy::write(step, piece, &mut info, bytes)?;
        }
    }
    let info_key = keys::object_key(keys::OBJECT, &step.id, object);
    if info.copied < source.size {
        step.put(info_key, encode(&info)?);
        return Ok(());
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
        let room = step.room().saturating_sub(OBJECT_OPS);
        // Within u32: bounded by CHUNKS_PER_STEP.
        let take = CHUNKS_PER_STEP.min(u32::try_from(room).unwrap_or(u32::MAX));
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
        queue::enqueue(step, &chunks)?;
        info.chunks = upto;
        if info.chunks < count {
            step.put(info_key, encode(&info)?);
            return Ok(());
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
    Ok(())
}

/// The whole source copy, verified against the selected source: its
/// etag (a serving copy) or its pieces' intents (a preserved copy), size,
/// CRC, BLAKE3 id and structure. `Err(Ok(_))` when it cannot be
/// preserved; `Err(Err(_))` when the host failed.
fn read_source(object: &Id, source: &Source) -> Result<Vec<u8>, Result<Unusable, Error>> {
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
    if checksum::blake3(&bytes) != *object {
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
