//! What every request denying an object holds of it: the reads a removal
//! ([`crate::remove`]) and a withdrawal's restore pass
//! ([`crate::restore`]) decide on. Requests keep their rows in the same
//! partition (`takedown`), so one request reads another's `object`,
//! `closure`, `remove` and `denial` rows, and the manifests a chunk is
//! part of from the content index's `c` rows.
//!
//! Rows of *other* requests that do not decode are read conservatively
//! (an object not verified, a request withdrawn), never as this request's
//! corruption: a removal then keeps the serving copy, a restore pass
//! restores it.

use std::collections::{BTreeMap, BTreeSet};

use custodian_sdk::contract::content::index;
use custodian_sdk::contract::denial as rows;
use custodian_sdk::kv::MAX_READS;
use custodian_sdk::{Error, kv};

use crate::codec::{Id, corrupt, decode, hex};
use crate::content::CONTENT;
use crate::denial::{self, DenialState};
use crate::keys::{self, PARTITION};
use crate::reads::Reads;
use crate::state::{self, ObjectInfo};

/// Most keys of one `get-many` (the host's page bound).
const PAGE: usize = kv::MAX_PAGE_ENTRIES as usize;

/// `get-many` of any number of keys, a page at a time, checked to answer
/// each key.
pub fn get_paged(partition: &str, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>, Error> {
    let mut out = Vec::with_capacity(keys.len());
    for group in keys.chunks(PAGE) {
        let rows = kv::get_many(partition, group)?;
        if rows.len() != group.len() {
            return Err(corrupt("get-many answered a different number of keys"));
        }
        out.extend(rows);
    }
    Ok(out)
}

/// An object's denial row as read: the raw value (for a guard) and the
/// requests denying it, in order.
#[derive(Debug, Clone, Default)]
pub struct Denials {
    /// The row's value; `None` when the object is not denied.
    pub raw: Option<Vec<u8>>,
    /// The requests in it.
    pub requests: Vec<Id>,
}

impl Denials {
    /// Whether `request` denies the object.
    pub fn lists(&self, request: &Id) -> bool {
        self.requests.contains(request)
    }
}

/// The denial rows of `objects`, in order. A row that does not decode is
/// the denial partition corrupt.
pub fn denials(objects: &[Id]) -> Result<Vec<Denials>, Error> {
    let row_keys: Vec<Vec<u8>> = objects.iter().map(rows::key).collect();
    get_paged(rows::PARTITION, &row_keys)?
        .into_iter()
        .zip(objects)
        .map(|(raw, object)| denials_of(object, raw))
        .collect()
}

/// The key of `object`'s denial row in [`DENIAL`].
pub fn denial_key(object: &Id) -> Vec<u8> {
    rows::key(object)
}

/// The partition of denial rows.
pub const DENIAL: &str = rows::PARTITION;

/// `object`'s denial row `raw` as read; one that does not decode is the
/// denial partition corrupt.
pub fn denials_of(object: &Id, raw: Option<Vec<u8>>) -> Result<Denials, Error> {
    let requests = match &raw {
        Some(value) => rows::decode(value)
            .map_err(|why| corrupt(format!("the denial row of {}: {why}", hex(object))))?
            .iter()
            .map(|d| d.request)
            .collect(),
        None => Vec::new(),
    };
    Ok(Denials { raw, requests })
}

/// What one request holds of one object.
#[derive(Debug, Clone, Default)]
pub struct Held {
    /// Its `object` row (`None`: absent, or not decodable).
    pub info: Option<ObjectInfo>,
    /// A `closure` row: a manifest whose reassembly is not verified yet.
    pub closure: bool,
    /// A `remove` row: a removal of the serving copy is pending.
    pub removing: bool,
}

impl Held {
    /// The request's preserved copy is complete and verified: every byte
    /// checked against the object's id, and for a manifest its reassembly
    /// too.
    pub fn verified(&self) -> bool {
        !self.closure && self.info.as_ref().is_some_and(|info| info.verified)
    }
}

/// What each `(request, object)` of `pairs` holds: one `get-many` per
/// 333 pairs.
pub fn held(pairs: &[(Id, Id)]) -> Result<BTreeMap<(Id, Id), Held>, Error> {
    let unique: BTreeSet<(Id, Id)> = pairs.iter().copied().collect();
    let keys: Vec<Vec<u8>> = unique
        .iter()
        .flat_map(|(request, object)| {
            [keys::OBJECT, keys::CLOSURE, keys::REMOVE]
                .map(|tag| keys::object_key(tag, request, object))
        })
        .collect();
    let values = get_paged(PARTITION, &keys)?;
    Ok(unique
        .into_iter()
        .zip(values.chunks_exact(3))
        .map(|((request, object), found)| {
            let info = found[0]
                .as_deref()
                .and_then(|raw| state::decode_info(&object, Some(raw)).ok());
            let held = Held {
                info,
                closure: found[1].is_some(),
                removing: found[2].is_some(),
            };
            ((request, object), held)
        })
        .collect())
}

/// A request's `denial` row as read: the raw value (for a guard) and
/// whether the request is withdrawn.
#[derive(Debug, Clone)]
pub struct Standing {
    /// The row's value.
    pub raw: Option<Vec<u8>>,
    /// Withdrawn (also when the row is absent or does not decode: such a
    /// request's denial is not one to rely on).
    pub withdrawn: bool,
}

/// The standing of each of `requests`.
pub fn standing(requests: &BTreeSet<Id>) -> Result<BTreeMap<Id, Standing>, Error> {
    let keys: Vec<Vec<u8>> = requests.iter().map(denial::state_key).collect();
    let values = get_paged(PARTITION, &keys)?;
    Ok(requests
        .iter()
        .zip(values)
        .map(|(request, raw)| {
            let withdrawn = raw
                .as_deref()
                .and_then(|raw| decode::<DenialState>(raw, "a denial state").ok())
                .is_none_or(|state| state.withdrawn_ms.is_some());
            (*request, Standing { raw, withdrawn })
        })
        .collect())
}

/// The manifests whose files each of `chunks` is part of (its `c` rows),
/// in order, `None` for a chunk of more than `max` (at most 999): the
/// rows of up to [`MAX_READS`] chunks in one snapshot read.
pub fn manifests_of(chunks: &[Id], max: u32) -> Result<Vec<Option<Vec<Id>>>, Error> {
    // Each scan may answer max entries; a read answers at most a page.
    let per_read = (kv::MAX_PAGE_ENTRIES / max.max(1)) as usize;
    let mut out = Vec::with_capacity(chunks.len());
    for group in chunks.chunks(per_read.clamp(1, MAX_READS)) {
        let mut reads = Reads::new();
        let asked: Vec<usize> = group
            .iter()
            .map(|chunk| manifests_read(&mut reads, chunk, max))
            .collect();
        let mut answers = reads.run()?;
        for (chunk, at) in group.iter().zip(asked) {
            out.push(manifests_in(chunk, answers.page(at)?)?);
        }
    }
    Ok(out)
}

/// Adds to `reads` a scan of at most `max` of `chunk`'s `c` rows (a
/// cursor on the page says there are more); the index of its answer, for
/// [`manifests_in`].
pub fn manifests_read(reads: &mut Reads, chunk: &Id, max: u32) -> usize {
    let range = keys::prefix_range(index::chunk_of_prefix(chunk));
    reads.scan(CONTENT, range, None, max)
}

/// The manifests a scan of [`manifests_read`] found, or `None` when
/// `chunk` is part of more (the page has a cursor).
pub fn manifests_in(chunk: &Id, page: kv::Page) -> Result<Option<Vec<Id>>, Error> {
    if page.next.is_some() {
        return Ok(None);
    }
    let prefix = index::chunk_of_prefix(chunk);
    page.entries
        .iter()
        .map(|entry| {
            entry
                .key
                .strip_prefix(prefix.as_slice())
                .and_then(|tail| Id::try_from(tail).ok())
                .ok_or_else(|| corrupt(format!("a chunk-of row of {} does not parse", hex(chunk))))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}
