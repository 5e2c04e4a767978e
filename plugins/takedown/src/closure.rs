//! Closure: verify each manifest's reassembly over the *preserved* bytes —
//! every chunk's pieces against their intents, every chunk against its
//! BLAKE3 id, and the whole file against the manifest's length and CRC.
//!
//! A manifest that does not reassemble (a chunk missing, short, changed
//! or not hashing to its id; a length or CRC that differs) is recorded
//! once — a `PreservationClosureMismatch` event naming the manifest and
//! the chunk, counted with the objects that could not be preserved whole,
//! verification `closure-mismatch` — and the request moves on, as
//! acquisition does for a corrupt source: what is preserved stays
//! preserved, and retrying cannot make the bytes match. Only a failure to
//! *read* (the KV or store unavailable) fails the step, to be retried.

use std::collections::BTreeMap;

use custodian_sdk::contract::content::manifest as layout;
use custodian_sdk::objects::{self, MAX_BODY_BYTES};
use custodian_sdk::{Error, checksum, kv};
use serde::{Deserialize, Serialize};

use crate::codec::{Id, corrupt, decode, encode, hex};
use crate::content::{MANIFEST, manifest};
use crate::context::Step;
use crate::copy::{PIECE_BYTES, Piece};
use crate::keys::{self, PARTITION, PRESERVED};
use crate::state::{self, Phase, Verification};

/// Chunks verified per step: each costs a scan, and a get and two
/// checksum calls per piece.
const CHUNKS_PER_STEP: u32 = 8;
/// Preserved chunk bytes read per step (at least one chunk is read, and a
/// chunk is at most 16 MiB): bounds the step's memory and time.
const BYTES_PER_STEP: u64 = 8 * 1024 * 1024;
/// Most pieces an object can have: objects are at most 16 MiB.
const MAX_PIECES: u32 = (MAX_BODY_BYTES / PIECE_BYTES) as u32;

/// The `closure` row: how far a manifest's reassembly is verified.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checkpoint {
    /// The next chunk to verify.
    pub next: u32,
    /// CRC-64/NVME of the chunks verified so far, in order.
    pub crc64: u64,
    /// Their total length.
    pub length: u64,
}

impl Checkpoint {
    fn append(&mut self, crc64: u64, len: u64) {
        self.crc64 = if self.length == 0 {
            crc64
        } else {
            checksum::combine(self.crc64, crc64, len)
        };
        self.length += len;
    }
}

/// Why a step of closure stopped short.
#[derive(Debug)]
enum Failure {
    /// The preserved bytes do not reassemble the manifest: what differs,
    /// and the chunk, when one is to blame.
    Mismatch(String, Option<Id>),
    /// Something could not be read or decoded: the step fails and is
    /// retried.
    Host(Error),
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        Self::Host(error)
    }
}

/// One closure step.
pub fn run(step: &mut Step) -> Result<(), Error> {
    let (start, end) = keys::range(keys::CLOSURE, &step.id);
    let page = kv::scan(PARTITION, &start, Some(&end), None, 1)?;
    let Some(row) = page.entries.into_iter().next() else {
        step.state.phase = Phase::Discover;
        if step.state.verification == Verification::ClosureMismatch {
            step.event(
                "PreservationClosureIncomplete",
                &[],
                Some(format!(
                    "{} objects could not be preserved whole",
                    step.state.counts.corrupt
                )),
            );
        } else {
            step.state.verification = Verification::Verified;
            step.event(
                "PreservationVerified",
                &[],
                Some("every manifest's reassembly verified".into()),
            );
        }
        return Ok(());
    };
    let manifest_id = keys::object_of(&row.key, &start, "closure")?;
    match verify(step, &row.key, &row.value, &manifest_id) {
        Ok(()) => Ok(()),
        Err(Failure::Host(error)) => Err(error),
        Err(Failure::Mismatch(what, chunk)) => {
            let message = format!(
                "manifest {} does not reassemble from the preserved copy: {what}",
                hex(&manifest_id)
            );
            let mut targets = vec![hex(&manifest_id)];
            targets.extend(chunk.map(|c| hex(&c)));
            step.event(
                "PreservationClosureMismatch",
                &targets,
                Some(message.clone()),
            );
            // Recorded once: the row goes with this commit, so the
            // manifest is never verified (nor reported) again.
            step.delete(row.key);
            step.state.counts.corrupt += 1;
            step.state.verification = Verification::ClosureMismatch;
            step.state.set_error(&message);
            Ok(())
        }
    }
}

/// Verifies the next part of `manifest_id`'s reassembly (its `closure`
/// row `key` holding `value`), writing the checkpoint, or deleting the row
/// once the whole file is verified.
fn verify(step: &mut Step, key: &[u8], value: &[u8], manifest_id: &Id) -> Result<(), Failure> {
    let manifest_id = *manifest_id;
    let mut checkpoint: Checkpoint = decode(value, "a closure checkpoint")?;
    let info = state::load_info(&step.id, &manifest_id)?;
    let count = manifest::count_for_size(info.size)
        .filter(|_| info.kind == MANIFEST && info.verified)
        .ok_or_else(|| {
            corrupt(format!(
                "closure of {} which is not a preserved manifest",
                hex(&manifest_id)
            ))
        })?;
    if checkpoint.next > count {
        return Err(corrupt(format!(
            "the closure checkpoint of {} is past its chunks",
            hex(&manifest_id)
        ))
        .into());
    }
    let mut reader = Reader::new(step.id, manifest_id, info.size);
    let take = CHUNKS_PER_STEP.min(count - checkpoint.next);
    if take > 0 {
        let ids = reader.read(
            manifest::chunk_offset(checkpoint.next),
            32 * u64::from(take),
        )?;
        let chunks: Vec<Id> = ids
            .chunks_exact(32)
            .map(|c| Id::try_from(c).map_err(|_| corrupt("a chunk id")))
            .collect::<Result<_, _>>()?;
        let info_keys: Vec<Vec<u8>> = chunks
            .iter()
            .map(|c| keys::object_key(keys::OBJECT, &step.id, c))
            .collect();
        let infos = kv::get_many(PARTITION, &info_keys)?;
        let mut read = 0u64;
        for (chunk, raw) in chunks.iter().zip(infos) {
            let chunk_info = state::decode_info(chunk, raw.as_deref())?;
            if !chunk_info.verified {
                return Err(mismatch(chunk, "is not preserved"));
            }
            if read > 0 && read + chunk_info.size > BYTES_PER_STEP {
                break;
            }
            verify_chunk(step, chunk, chunk_info.size, &mut checkpoint)?;
            read += chunk_info.size;
            checkpoint.next += 1;
        }
    }
    if checkpoint.next < count {
        step.put(key.to_vec(), encode(&checkpoint)?);
        return Ok(());
    }
    let header = reader.read(0, manifest::HEADER)?;
    let length = manifest::file_length(
        header
            .get(layout::FILE_LEN_AT)
            .and_then(|field| field.try_into().ok())
            .ok_or_else(|| corrupt("a manifest header"))?,
    );
    let declared = u32::from_le_bytes(
        header
            .get(layout::COUNT_AT)
            .and_then(|field| field.try_into().ok())
            .ok_or_else(|| corrupt("a manifest header"))?,
    );
    let trailer = reader.read(info.size - manifest::TRAILER, manifest::TRAILER)?;
    let crc64 = layout::decode_trailer(
        trailer
            .as_slice()
            .try_into()
            .map_err(|_| corrupt("a manifest trailer"))?,
    );
    if declared != count || length != checkpoint.length || crc64 != checkpoint.crc64 {
        return Err(Failure::Mismatch(
            format!(
                "reassembled {} bytes with CRC {:016x}; the manifest declares {length} bytes with CRC {crc64:016x}",
                checkpoint.length, checkpoint.crc64
            ),
            None,
        ));
    }
    step.delete(key.to_vec());
    Ok(())
}

/// A mismatch to blame on `chunk`.
fn mismatch(chunk: &Id, what: &str) -> Failure {
    Failure::Mismatch(format!("chunk {} {what}", hex(chunk)), Some(*chunk))
}

/// A mismatch in the manifest's own preserved bytes.
fn own(what: String) -> Failure {
    Failure::Mismatch(what, None)
}

/// Verifies one chunk from its preserved pieces and appends it to the
/// running reassembly.
fn verify_chunk(
    step: &Step,
    chunk: &Id,
    size: u64,
    checkpoint: &mut Checkpoint,
) -> Result<(), Failure> {
    let (start, end) = keys::prefix_range(keys::object_key(keys::PIECE, &step.id, chunk));
    let page = kv::scan(PARTITION, &start, Some(&end), None, MAX_PIECES + 1)?;
    if page.next.is_some() || page.entries.len() > MAX_PIECES as usize {
        return Err(mismatch(chunk, "has too many pieces"));
    }
    // The chunk reassembled, to be hashed by the host in one call. It is
    // at most an object's size (pieces past `size` are refused before
    // they are kept), as much as acquisition holds of one object.
    let mut bytes: Vec<u8> = Vec::new();
    let mut offset = 0u64;
    for entry in &page.entries {
        let piece: Piece = decode(&entry.value, "a piece intent")?;
        if piece.check(&step.id, &entry.key)? != *chunk || piece.offset != offset {
            return Err(mismatch(chunk, "has a gap"));
        }
        if offset + piece.len > size {
            return Err(mismatch(
                chunk,
                &format!("has more than its {size} bytes preserved"),
            ));
        }
        let (piece_bytes, crc64) = fetch(&piece, Some(chunk))?;
        if bytes.is_empty() {
            bytes = piece_bytes;
        } else {
            bytes.extend_from_slice(&piece_bytes);
        }
        checkpoint.append(crc64, piece.len);
        offset += piece.len;
    }
    if offset != size {
        return Err(mismatch(
            chunk,
            &format!("has {offset} of {size} bytes preserved"),
        ));
    }
    if checksum::blake3(&bytes) != *chunk {
        return Err(mismatch(chunk, "does not hash to its id"));
    }
    Ok(())
}

/// A preserved piece's bytes and CRC, checked against its intent; a
/// mismatch is blamed on `chunk` (`None`: the manifest's own bytes).
fn fetch(piece: &Piece, chunk: Option<&Id>) -> Result<(Vec<u8>, u64), Failure> {
    let blame = |what: String| Failure::Mismatch(what, chunk.copied());
    let bytes = match objects::get(PRESERVED, &piece.key, None) {
        Ok((_, bytes)) => bytes,
        Err(Error::NotFound(_)) => {
            return Err(blame(format!("preserved piece {} is missing", piece.key)));
        }
        Err(other) => return Err(other.into()),
    };
    let crc64 = checksum::crc64_nvme(&bytes);
    if bytes.len() as u64 != piece.len || crc64 != piece.crc64 {
        return Err(blame(format!(
            "preserved piece {} differs from its intent",
            piece.key
        )));
    }
    Ok((bytes, crc64))
}

/// Reads ranges of one object from its preserved pieces, each piece
/// fetched (and checked) at most once.
struct Reader {
    id: Id,
    object: Id,
    size: u64,
    pieces: BTreeMap<u64, Vec<u8>>,
}

impl Reader {
    fn new(id: Id, object: Id, size: u64) -> Self {
        Self {
            id,
            object,
            size,
            pieces: BTreeMap::new(),
        }
    }

    fn read(&mut self, start: u64, len: u64) -> Result<Vec<u8>, Failure> {
        let end = start
            .checked_add(len)
            .filter(|end| *end <= self.size)
            .ok_or_else(|| own("a read past its end".into()))?;
        let mut out = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
        let mut at = start;
        while at < end {
            let base = at / PIECE_BYTES * PIECE_BYTES;
            let piece = self.piece(base)?;
            // `at - base` < PIECE_BYTES; both ends fit the piece or fail.
            let from = (at - base) as usize;
            let to = ((end - base).min(piece.len() as u64)) as usize;
            if from >= to {
                return Err(own("a piece shorter than its place".into()));
            }
            out.extend_from_slice(&piece[from..to]);
            at = base + to as u64;
        }
        Ok(out)
    }

    fn piece(&mut self, offset: u64) -> Result<&[u8], Failure> {
        if !self.pieces.contains_key(&offset) {
            let row = keys::piece_key(&self.id, &self.object, offset);
            let raw = kv::get(PARTITION, &row)?
                .ok_or_else(|| own(format!("no piece intent at offset {offset}")))?;
            let piece: Piece = decode(&raw, "a piece intent")?;
            piece.check(&self.id, &row)?;
            let (bytes, _) = fetch(&piece, None)?;
            self.pieces.insert(offset, bytes);
        }
        Ok(self
            .pieces
            .get(&offset)
            .map(Vec::as_slice)
            .unwrap_or_default())
    }
}
