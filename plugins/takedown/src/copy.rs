//! Pieces: each is recorded as a durable intent *before* its bytes are
//! published to the preserved store, so a purge pass always finds every
//! write that may exist, even one delayed past the purge. The intent's
//! commit also locks the piece's key to the request ([`crate::lock`]), so
//! the host keeps the piece from its first byte; the piece is published
//! with `if-none-match: *`, never over an existing object. The intents of
//! every piece a step writes are one commit ([`commit_intents`]), made
//! before the first of them is published, unless an earlier step
//! committed them: a selection commits, with the room it has left, the
//! intents of the objects it selected that are one piece each
//! ([`intend_in_step`]), since their one piece is known from the source
//! alone (its length the size, its CRC the content index's).

use custodian_sdk::audit::Entry;
use custodian_sdk::kv::Outcome;
use custodian_sdk::objects::{self, PutCondition};
use custodian_sdk::{Batch, Error, checksum};
use serde::{Deserialize, Serialize};

use crate::codec::{Id, corrupt, encode, hex, id_from_hex};
use crate::context::Step;
use crate::keys::{self, PARTITION, PRESERVED};
use crate::lock;
use crate::request::APPLY_WINDOW_MS;
use crate::state::ObjectInfo;

/// Bytes per piece: a piece is one publish, small enough to retry cheaply.
pub const PIECE_BYTES: u64 = 1024 * 1024;
/// Pieces copied per step, over all the objects it copies: their intents
/// are one commit, audited one entry each within a commit's
/// [`crate::context::MAX_AUDIT`]; each piece is a publish, maybe a head
/// and two checksum calls, well inside the step's call budget.
pub const PIECES_PER_STEP: usize = crate::context::MAX_AUDIT;

/// The `piece` row: a piece intent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Piece {
    /// The object the piece belongs to (hex).
    pub object: String,
    /// Where in the object it starts.
    pub offset: u64,
    /// Its length.
    pub len: u64,
    /// CRC-64/NVME of its bytes.
    pub crc64: u64,
    /// Its key in the preserved store.
    pub key: String,
}

impl Piece {
    /// Checks that `row` (a piece row key of request `id`) is this piece's
    /// and the preserved key is where this piece belongs; returns the
    /// object.
    pub fn check(&self, id: &Id, row: &[u8]) -> Result<Id, Error> {
        let object = id_from_hex(&self.object, "a piece's object")?;
        if row != keys::piece_key(id, &object, self.offset).as_slice()
            || self.key != keys::preserved_key(id, &object, self.offset)
            || self.len == 0
            || self.len > PIECE_BYTES
            || !self.offset.is_multiple_of(PIECE_BYTES)
        {
            return Err(corrupt(format!(
                "a piece row of {} does not match its content",
                hex(&object)
            )));
        }
        Ok(object)
    }
}

/// Plans the next pieces of `object` (its verified whole `bytes`) from
/// `info.copied` on, at most `limit` of them.
pub fn plan(step: &Step, object: &Id, info: &ObjectInfo, bytes: &[u8], limit: usize) -> Vec<Piece> {
    let size = bytes.len() as u64;
    let mut pieces = Vec::new();
    let mut offset = info.copied;
    while offset < size && pieces.len() < limit {
        let len = PIECE_BYTES.min(size - offset);
        // Both fit in usize: they are bounded by `bytes.len()`.
        let body = &bytes[offset as usize..(offset + len) as usize];
        pieces.push(Piece {
            object: hex(object),
            offset,
            len,
            crc64: checksum::crc64_nvme(body),
            key: keys::preserved_key(&step.id, object, offset),
        });
        offset += len;
    }
    pieces
}

/// The one piece of an object of `size` bytes and CRC-64/NVME `crc64`
/// that fits in a piece (`None` for an empty or a larger one): known
/// from its selected source alone, before its bytes are read.
pub fn single_piece(step: &Step, object: &Id, size: u64, crc64: u64) -> Option<Piece> {
    (size > 0 && size <= PIECE_BYTES).then(|| Piece {
        object: hex(object),
        offset: 0,
        len: size,
        crc64,
        key: keys::preserved_key(&step.id, object, 0),
    })
}

/// Until when an intent may land: never once retention could have let a
/// purge begin (a hold pushes that out).
fn deadline(step: &Step) -> u64 {
    if step.state.hold {
        step.now.saturating_add(APPLY_WINDOW_MS)
    } else {
        step.lock.retain_until(&step.state)
    }
}

/// Whether intents may ride in the step's own commit: it lands within
/// [`APPLY_WINDOW_MS`] of the step (its deadline), so no later than an
/// intent may.
pub fn fits_step(step: &Step) -> bool {
    deadline(step) >= step.now.saturating_add(APPLY_WINDOW_MS)
}

/// Adds the intent of `piece` of `object` to the step's own commit (see
/// [`fits_step`]): a selection records the intent of an object that is
/// one piece with its source, so the step that copies it publishes at
/// once, without an intent commit of its own. Operations: two.
pub fn intend_in_step(step: &mut Step, object: &Id, piece: &Piece) -> Result<(), Error> {
    let (row, lock) = rows(&step.id, object, piece)?;
    step.put(row.0, row.1);
    step.put_in(lock::PARTITION, lock.0, lock.1);
    step.audit(entry(&step.id, object, piece));
    Ok(())
}

/// A row as its key and value.
type Row = (Vec<u8>, Vec<u8>);

/// A piece intent's rows: the piece row (in [`PARTITION`]) and its key's
/// lock (in [`lock::PARTITION`]).
fn rows(id: &Id, object: &Id, piece: &Piece) -> Result<(Row, Row), Error> {
    let row = (keys::piece_key(id, object, piece.offset), encode(piece)?);
    Ok((row, lock::piece_row(id, &piece.key)))
}

/// An intent's audit entry, in the intent's own commit: the log shows
/// every piece that may exist, as the purge will look for it.
fn entry(id: &Id, object: &Id, piece: &Piece) -> Entry {
    Entry {
        event: "PreservationPieceIntent".into(),
        targets: vec![hex(id), hex(object), piece.key.clone()],
        detail: Some(format!(
            "offset {}, {} bytes, crc64 {:016x}",
            piece.offset, piece.len, piece.crc64
        )),
    }
}

/// Commits the intents of `pieces` (each with its object) in one commit,
/// before any of them is published: each piece row, its key's lock and its
/// `PreservationPieceIntent` entry.
pub fn commit_intents(step: &Step, pieces: &[(&Id, &Piece)]) -> Result<(), Error> {
    if pieces.is_empty() {
        return Ok(());
    }
    let old = step
        .old
        .clone()
        .ok_or_else(|| corrupt("acquiring before any state was stored"))?;
    // An intent may land only while the state is unchanged.
    let mut intent = Batch::new()
        .require_equals(PARTITION, step.state_key(), old)
        .not_after(deadline(step));
    let mut audited = Vec::with_capacity(pieces.len());
    for &(object, piece) in pieces {
        let (row, lock) = rows(&step.id, object, piece)?;
        intent = intent
            .put(PARTITION, row.0, row.1)
            .put(lock::PARTITION, lock.0, lock.1);
        audited.push(entry(&step.id, object, piece));
    }
    if intent.apply_audited(&audited)? != Outcome::Committed {
        return Err(Error::Unavailable("preservation intent raced".into()));
    }
    Ok(())
}

/// Publishes `piece` of `bytes` (the verified whole object), its intent
/// committed, advancing `info` and the counts.
pub fn write(
    step: &mut Step,
    piece: &Piece,
    info: &mut ObjectInfo,
    bytes: &[u8],
) -> Result<(), Error> {
    // Both fit in usize: a planned piece lies within `bytes`.
    let body = &bytes[piece.offset as usize..(piece.offset + piece.len) as usize];
    publish(piece, body)?;
    info.crc64 = if piece.offset == 0 {
        piece.crc64
    } else {
        checksum::combine(info.crc64, piece.crc64, piece.len)
    };
    info.copied = piece.offset + piece.len;
    step.state.counts.pieces += 1;
    step.state.counts.bytes += piece.len;
    Ok(())
}

/// Publishes a piece once. If it is already there (a run that crashed
/// after the write), it is accepted only with the intent's CRC. The host
/// may refuse the put as an overwrite of a locked key (`access-denied`)
/// before it judges the condition; that is the same case.
fn publish(piece: &Piece, body: &[u8]) -> Result<(), Error> {
    match objects::put(
        PRESERVED,
        &piece.key,
        body,
        &PutCondition::IfNoneMatchAny,
        Some(piece.crc64),
        &[],
    ) {
        Ok(_) => Ok(()),
        Err(refused @ (Error::PreconditionFailed(_) | Error::AccessDenied(_))) => {
            let meta = match objects::head(PRESERVED, &piece.key) {
                Ok(meta) => meta,
                Err(Error::NotFound(_)) => return Err(refused),
                Err(other) => return Err(other),
            };
            if meta.crc64 == Some(piece.crc64) && meta.size == piece.len {
                Ok(())
            } else {
                Err(corrupt(format!(
                    "preserved piece {} exists with other content",
                    piece.key
                )))
            }
        }
        Err(other) => Err(other),
    }
}
