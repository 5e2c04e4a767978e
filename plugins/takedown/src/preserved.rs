//! Preserved copies read back: by a withdrawal restoring a serving copy
//! ([`crate::restore`]), and, once a serving copy is removed, by a later
//! request acquiring the object ([`crate::acquire`]) or walking a pack or
//! manifest to seed or deny it ([`crate::source`]).
//!
//! A copy is read from its pieces: each piece row (the intent) gives the
//! piece's offset, length, CRC and key; every piece is checked against
//! its intent. Whole-object checks (BLAKE3 against the id, CRC against
//! the content index) are the caller's, which knows what it expects.
//!
//! Another request's copy is used only when it can be read whole: its
//! `object` row is verified (for a manifest, its reassembly too) and the
//! request is neither purging nor purged (a purge deletes the pieces).

use std::collections::BTreeSet;

use custodian_sdk::objects::{self, MAX_BODY_BYTES};
use custodian_sdk::{Error, checksum};

use crate::codec::{Id, decode, describe, hex};
use crate::copy::{PIECE_BYTES, Piece};
use crate::keys::{self, PARTITION, PRESERVED};
use crate::state::{self, ObjectInfo, Phase, State};
use crate::survey::{self, get_paged};

/// Why a preserved copy could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// The copy is not there, or not what its intents say (the reason).
    Unreadable(String),
    /// The host failed.
    Host(Error),
}

impl From<Error> for ReadError {
    fn from(error: Error) -> Self {
        Self::Host(error)
    }
}

/// A request's verified preserved copy of an object.
#[derive(Debug, Clone)]
pub struct Copy {
    /// The request.
    pub request: Id,
    /// Its `object` row.
    pub info: ObjectInfo,
}

/// The first of `requests` (in order) whose preserved copy of `object` is
/// verified and not being purged; `None` if there is none.
pub fn pick_among(object: &Id, requests: &[Id]) -> Result<Option<Copy>, Error> {
    if requests.is_empty() {
        return Ok(None);
    }
    let pairs: Vec<(Id, Id)> = requests.iter().map(|r| (*r, *object)).collect();
    let held = survey::held(&pairs)?;
    let verified: Vec<Id> = requests
        .iter()
        .filter(|r| {
            held.get(&(**r, *object))
                .is_some_and(survey::Held::verified)
        })
        .copied()
        .collect();
    let states = get_paged(
        PARTITION,
        &verified.iter().map(state::key).collect::<Vec<_>>(),
    )?;
    for (request, state) in verified.iter().zip(states) {
        let live = state
            .as_deref()
            .and_then(|raw| decode::<State>(raw, "a takedown state").ok())
            .is_some_and(|state| {
                !state.purged && !matches!(state.phase, Phase::Purging | Phase::Purged)
            });
        if live && let Some(info) = held.get(&(*request, *object)).and_then(|h| h.info.clone()) {
            return Ok(Some(Copy {
                request: *request,
                info,
            }));
        }
    }
    Ok(None)
}

/// A verified, readable preserved copy of `object` held by a request
/// denying it (other than `exclude`); `None` if there is none.
pub fn pick(object: &Id, exclude: Option<&Id>) -> Result<Option<Copy>, Error> {
    let denials = survey::denials(&[*object])?.remove(0);
    let mut seen = BTreeSet::new();
    let requests: Vec<Id> = denials
        .requests
        .into_iter()
        .filter(|r| Some(r) != exclude && seen.insert(*r))
        .collect();
    pick_among(object, &requests)
}

/// Bytes `[offset, offset + length)` of `request`'s preserved copy of
/// `object` (`size` bytes; cut at its end), each piece read whole and
/// checked against its intent.
pub fn read_range(
    request: &Id,
    object: &Id,
    size: u64,
    offset: u64,
    length: u64,
) -> Result<Vec<u8>, ReadError> {
    let unreadable = |what: String| {
        ReadError::Unreadable(format!(
            "the preserved copy of {} in request {}: {what}",
            hex(object),
            hex(request)
        ))
    };
    if size > MAX_BODY_BYTES {
        return Err(unreadable(format!("{size} bytes, more than any copy")));
    }
    let end = offset.saturating_add(length).min(size);
    if offset >= end {
        return Ok(Vec::new());
    }
    let first = offset / PIECE_BYTES * PIECE_BYTES;
    let offsets: Vec<u64> = (first..end).step_by(PIECE_BYTES as usize).collect();
    let rows: Vec<Vec<u8>> = offsets
        .iter()
        .map(|at| keys::piece_key(request, object, *at))
        .collect();
    let intents = get_paged(PARTITION, &rows)?;
    // Both bounded by `size` (at most 16 MiB).
    let mut out = Vec::with_capacity((end - offset) as usize);
    for ((at, row), intent) in offsets.iter().zip(&rows).zip(intents) {
        let Some(raw) = intent else {
            return Err(unreadable(format!("no piece intent at offset {at}")));
        };
        let piece: Piece =
            decode(&raw, "a piece intent").map_err(|error| unreadable(describe(&error)))?;
        let expected = PIECE_BYTES.min(size - at);
        let placed = piece.check(request, row).ok() == Some(*object) && piece.len == expected;
        if !placed {
            return Err(unreadable(format!(
                "the piece at {at} is not where it belongs"
            )));
        }
        let bytes = match objects::get(PRESERVED, &piece.key, None) {
            Ok((_, bytes)) => bytes,
            Err(Error::NotFound(_)) => {
                return Err(unreadable(format!("piece {} is missing", piece.key)));
            }
            Err(other) => return Err(ReadError::Host(other)),
        };
        if bytes.len() as u64 != piece.len || checksum::crc64_nvme(&bytes) != piece.crc64 {
            return Err(unreadable(format!(
                "piece {} differs from its intent",
                piece.key
            )));
        }
        // Within the piece: `from < to <= piece.len`.
        let from = offset.saturating_sub(*at) as usize;
        let to = (end - at).min(piece.len) as usize;
        out.extend_from_slice(&bytes[from..to]);
    }
    Ok(out)
}

/// `request`'s whole preserved copy of `object` (`size` bytes).
pub fn read(request: &Id, object: &Id, size: u64) -> Result<Vec<u8>, ReadError> {
    read_range(request, object, size, 0, size)
}
