//! The rows of partition `takedown` (the layout is documented in the
//! crate's module doc) and the preserved store's keys.

use custodian_sdk::Error;
use custodian_sdk::contract::content::OBJECT_KEY_PREFIX;
use custodian_sdk::key::prefix_end;

use crate::codec::{Id, corrupt, hex};

/// The policy's own partition.
pub const PARTITION: &str = "takedown";
/// The store preserved pieces are written to.
pub const PRESERVED: &str = "preserved";

/// The request record.
pub const REQUEST: &str = "request";
/// The request's objects, 32 bytes each, in the order filed: apart from
/// the record, so a step that does not seed never reads them.
pub const ACTIONS: &str = "actions";
/// The request's state.
pub const STATE: &str = "state";
/// An object waiting for acquisition; value: the expected kind byte.
pub const TODO: &str = "todo";
/// Per-object progress ([`crate::state::ObjectInfo`]).
pub const OBJECT: &str = "object";
/// The selected source of an object, kept as provenance.
pub const SOURCE: &str = "source";
/// A piece intent, recorded before its bytes are written.
pub const PIECE: &str = "piece";
/// An object (or pack) whose holders are still to be discovered.
pub const DISCOVER: &str = "discover";
/// A manifest whose reassembly is still to be verified.
pub const CLOSURE: &str = "closure";
/// A pack whose inventory is still being walked.
pub const PACK_TODO: &str = "pack-todo";
/// A pack this request has walked or is walking.
pub const PACK_SEEN: &str = "pack-seen";
/// A holder repository whose cache purge this request planned.
pub const HOLDER: &str = "holder";
/// The request's denial progress ([`crate::denial::DenialState`]).
pub const DENIAL: &str = "denial";
/// A pack or manifest whose members this request still has to deny
/// ([`crate::denial::Cursor`]).
pub const DENY_TODO: &str = "deny-todo";
/// An object this request denies (empty value).
pub const DENIED: &str = "denied";
/// A removal intent: the object's serving copy is being removed, recorded
/// before anything is deleted ([`crate::remove::Intent`]).
pub const REMOVE: &str = "remove";
/// An object whose serving copy this request removed
/// ([`crate::remove::Removed`]).
pub const REMOVED: &str = "removed";
/// A verified object whose serving copy this request keeps, and why (the
/// reason, UTF-8).
pub const KEPT: &str = "kept";

/// `TAG 0x00 id TAIL`.
pub fn key(tag: &str, id: &Id, tail: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(tag.len() + 1 + id.len() + tail.len());
    key.extend_from_slice(tag.as_bytes());
    key.push(0);
    key.extend_from_slice(id);
    key.extend_from_slice(tail);
    key
}

/// `TAG 0x00 id object`.
pub fn object_key(tag: &str, id: &Id, object: &Id) -> Vec<u8> {
    key(tag, id, object)
}

/// The piece row of `object` at `offset`.
pub fn piece_key(id: &Id, object: &Id, offset: u64) -> Vec<u8> {
    let mut tail = object.to_vec();
    tail.extend_from_slice(&offset.to_be_bytes());
    key(PIECE, id, &tail)
}

/// `holder id namespace 0x00 repo`.
pub fn holder_key(id: &Id, namespace: &str, repo: &str) -> Vec<u8> {
    key(HOLDER, id, &repo_tail(namespace, repo))
}

fn repo_tail(namespace: &str, repo: &str) -> Vec<u8> {
    let mut tail = namespace.as_bytes().to_vec();
    tail.push(0);
    tail.extend_from_slice(repo.as_bytes());
    tail
}

/// `[start, end)` of every `TAG id …` row.
pub fn range(tag: &str, id: &Id) -> (Vec<u8>, Vec<u8>) {
    prefix_range(key(tag, id, &[]))
}

/// `[prefix, prefix_end)`.
pub fn prefix_range(prefix: Vec<u8>) -> (Vec<u8>, Vec<u8>) {
    // A prefix starting with a tag (ASCII) always has an end.
    let end = prefix_end(&prefix).unwrap_or_else(|| vec![0xff; prefix.len() + 1]);
    (prefix, end)
}

/// A scan's resume cursor, stored as hex: `None` to start at `start`,
/// else a key inside `[start, end)`; anything else is a corrupt cursor
/// (`what` names it).
pub fn cursor(
    text: Option<&str>,
    (start, end): (&[u8], &[u8]),
    what: &str,
) -> Result<Option<Vec<u8>>, Error> {
    text.map(|text| {
        crate::codec::unhex(text)
            .filter(|c| c.as_slice() >= start && c.as_slice() < end)
            .ok_or_else(|| corrupt(format!("the {what} cursor is outside its rows")))
    })
    .transpose()
}

/// The object id a `TAG id object` row is about.
pub fn object_of(row: &[u8], start: &[u8], what: &str) -> Result<Id, Error> {
    row.strip_prefix(start)
        .and_then(|tail| Id::try_from(tail).ok())
        .ok_or_else(|| corrupt(format!("a {what} row key does not end in an object id")))
}

/// The keys of the rows tagged `tags` of each of `objects` in request
/// `id`: object by object, each object's rows in `tags`' order.
pub fn object_keys(id: &Id, objects: &[Id], tags: &[&str]) -> Vec<Vec<u8>> {
    objects
        .iter()
        .flat_map(|object| tags.iter().map(|tag| object_key(tag, id, object)))
        .collect()
}

/// The objects of `rows` (keys under `start`, rows of `what`), in order.
pub fn objects_of(
    rows: &[custodian_sdk::kv::Entry],
    start: &[u8],
    what: &str,
) -> Result<Vec<Id>, Error> {
    rows.iter()
        .map(|row| object_of(&row.key, start, what))
        .collect()
}

/// Where the piece of `object` at `offset` is written in `preserved`:
/// `pieces/<id>/<first byte of object>/<object>/<offset>`. The fan-out by
/// the object's first byte keeps directories of a filesystem store small
/// (a 10,000-object request puts ~40 objects in each of 256 directories,
/// not 10,000 in one that every listing of a piece would read).
pub fn preserved_key(id: &Id, object: &Id, offset: u64) -> String {
    let object = hex(object);
    format!("pieces/{}/{}/{object}/{offset:016x}", hex(id), &object[..2])
}

/// The prefix of every piece of `object` that request `id` preserved:
/// `pieces/<id>/<first byte of object>/<object>/`. A `source` row names it
/// when an object was acquired from that request's preserved copy.
pub fn preserved_prefix(id: &Id, object: &Id) -> String {
    let object = hex(object);
    format!("pieces/{}/{}/{object}/", hex(id), &object[..2])
}

/// Where `object` is served from in `serving`.
pub fn serving_key(object: &Id) -> String {
    format!("{OBJECT_KEY_PREFIX}{}", hex(object))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn piece_rows_sort_by_object_then_offset() {
        let id = [1; 32];
        let a = piece_key(&id, &[2; 32], 255);
        let b = piece_key(&id, &[2; 32], 256);
        let c = piece_key(&id, &[3; 32], 0);
        assert!(a < b && b < c);
        let (start, end) = range(PIECE, &id);
        assert!(start <= a && c < end);
    }

    #[test]
    fn preserved_keys_name_request_object_and_offset() {
        let key = preserved_key(&[0xab; 32], &[0x01; 32], 1 << 20);
        assert_eq!(
            key,
            format!(
                "pieces/{}/01/{}/0000000000100000",
                "ab".repeat(32),
                "01".repeat(32)
            )
        );
        assert!(key.starts_with(&preserved_prefix(&[0xab; 32], &[0x01; 32])));
    }
}
