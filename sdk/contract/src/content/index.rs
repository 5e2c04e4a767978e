//! The content index's keys and row values (KV partition
//! [`PARTITION`](super::PARTITION)). Keys are ordered bytewise; integers
//! in values are big-endian.
//!
//! | key | value |
//! |---|---|
//! | `o` id | kind (1 byte), size (u64), CRC-64/NVME of the bytes (u64) |
//! | `h` id namespace `0x00` name | empty: the repository holds the object |
//! | `s` pack-id | sealed-at ms (u64): the pack is complete and immutable |
//! | `r` namespace `0x00` name `0x00` path | id, kind (1 byte), size (u64) |
//! | `c` chunk-id manifest-id | empty: the chunk is part of that manifest's file |
//!
//! `c` rows let a takedown tell a chunk only its own files hold from one
//! another file shares: a chunk's serving copy may go only when every
//! manifest listing it is taken down. A push writes them with the
//! manifest's `o` row.
//!
//! Repository parts never contain `0x00` ([`crate::name`]), so the
//! separator ends a namespace unambiguously: all holders of an object are
//! one key range, sorted by namespace then name, and one repository's
//! entries never interleave with another's (`a/b` then `0x00` sorts before
//! any byte of `a/bc`).

use alloc::vec::Vec;
use core::fmt;

use super::{ID_BYTES, Id, UnknownKind, field, kind};
use crate::limits::MAX_KEY_BYTES;
use crate::name::MAX_REPOSITORY_PART_BYTES;

/// Tag of an object row: `o` id.
pub const OBJECT_TAG: u8 = b'o';
/// Tag of a holder row: `h` id namespace 0x00 name.
pub const HOLDER_TAG: u8 = b'h';
/// Tag of a seal row: `s` pack-id.
pub const SEAL_TAG: u8 = b's';
/// Tag of a repository entry: `r` namespace 0x00 name 0x00 path.
pub const ENTRY_TAG: u8 = b'r';
/// Tag of a chunk-of row: `c` chunk-id manifest-id.
pub const CHUNK_OF_TAG: u8 = b'c';
/// The byte between a namespace and a name, and between a repository and
/// an entry's path: it sorts before every byte a name may hold.
pub const SEPARATOR: u8 = 0;

/// Longest entry path, in bytes (a directory's with its trailing `/`).
/// With two repository parts at their bound, an entry key stays within
/// the KV's key bound, so a deep or long-named tree is refused before
/// anything is pushed rather than halfway through its index rows.
pub const MAX_PATH_BYTES: usize = 768;

const _: () = assert!(1 + 2 * MAX_REPOSITORY_PART_BYTES + 2 + MAX_PATH_BYTES <= MAX_KEY_BYTES);

/// Bytes of an object row's value.
pub const OBJECT_ROW_BYTES: usize = 17;
/// Bytes of an entry row's value.
pub const ENTRY_VALUE_BYTES: usize = 41;
/// Bytes of a seal row's value.
pub const SEAL_BYTES: usize = 8;

/// Why a row's value does not decode. Displayed as the host words it; a
/// plugin may word it its own way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowError {
    /// A value of the wrong length.
    Length {
        /// Its length.
        len: usize,
        /// The length rows of its kind have.
        expected: usize,
    },
    /// A kind byte that names no kind.
    Kind(UnknownKind),
}

impl From<UnknownKind> for RowError {
    fn from(kind: UnknownKind) -> Self {
        Self::Kind(kind)
    }
}

impl fmt::Display for RowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Length { len, expected } => write!(f, "{len} bytes, not {expected}"),
            Self::Kind(kind) => kind.fmt(f),
        }
    }
}

/// Why a holder key's tail is not `namespace 0x00 name`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HolderError {
    /// There is no [`SEPARATOR`].
    NoSeparator,
    /// A part is not UTF-8.
    NotUtf8,
}

fn tagged(tag: u8, id: &Id) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + ID_BYTES);
    key.push(tag);
    key.extend_from_slice(id);
    key
}

fn push_repository(key: &mut Vec<u8>, namespace: &str, name: &str) {
    key.extend_from_slice(namespace.as_bytes());
    key.push(SEPARATOR);
    key.extend_from_slice(name.as_bytes());
}

/// The key of `id`'s object row.
pub fn object_key(id: &Id) -> Vec<u8> {
    tagged(OBJECT_TAG, id)
}

/// The prefix of every holder row of `id`.
pub fn holder_prefix(id: &Id) -> Vec<u8> {
    tagged(HOLDER_TAG, id)
}

/// The key of the row saying repository `namespace/name` holds `id`.
pub fn holder_key(id: &Id, namespace: &str, name: &str) -> Vec<u8> {
    let mut key = holder_prefix(id);
    push_repository(&mut key, namespace, name);
    key
}

/// The `(namespace, name)` of a holder key's tail (what follows
/// [`holder_prefix`]), split at the first [`SEPARATOR`]; the parts are
/// not validated as names.
///
/// # Errors
/// [`HolderError`] if there is no separator or a part is not UTF-8.
pub fn holder_of(tail: &[u8]) -> Result<(&str, &str), HolderError> {
    let split = tail
        .iter()
        .position(|&b| b == SEPARATOR)
        .ok_or(HolderError::NoSeparator)?;
    match (
        core::str::from_utf8(&tail[..split]),
        core::str::from_utf8(&tail[split + 1..]),
    ) {
        (Ok(namespace), Ok(name)) => Ok((namespace, name)),
        _ => Err(HolderError::NotUtf8),
    }
}

/// The prefix of every chunk-of row of `chunk`: one per manifest listing
/// it.
pub fn chunk_of_prefix(chunk: &Id) -> Vec<u8> {
    tagged(CHUNK_OF_TAG, chunk)
}

/// The key of the row saying `chunk` is part of `manifest`'s file.
pub fn chunk_of_key(chunk: &Id, manifest: &Id) -> Vec<u8> {
    let mut key = chunk_of_prefix(chunk);
    key.extend_from_slice(manifest);
    key
}

/// The key of pack `id`'s seal row.
pub fn seal_key(id: &Id) -> Vec<u8> {
    tagged(SEAL_TAG, id)
}

/// The prefix of every entry of repository `namespace/name` (ends with
/// the separator before the path, so `a/b`'s entries are not `a/bc`'s).
pub fn entry_prefix(namespace: &str, name: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(2 + namespace.len() + 1 + name.len());
    key.push(ENTRY_TAG);
    push_repository(&mut key, namespace, name);
    key.push(SEPARATOR);
    key
}

/// The key of repository `namespace/name`'s entry at `path`.
pub fn entry_key(namespace: &str, name: &str, path: &str) -> Vec<u8> {
    let mut key = entry_prefix(namespace, name);
    key.extend_from_slice(path.as_bytes());
    key
}

/// What the index records about an object (the value of its `o` row).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectRow {
    /// Its kind byte ([`BLOB`](super::BLOB), [`MANIFEST`](super::MANIFEST)
    /// or [`PACK`](super::PACK)).
    pub kind: u8,
    /// Its size in bytes.
    pub size: u64,
    /// The CRC-64/NVME of its bytes.
    pub crc64: u64,
}

impl ObjectRow {
    /// The row's value: kind, size (u64 BE), CRC (u64 BE).
    pub fn encode(&self) -> [u8; OBJECT_ROW_BYTES] {
        let mut value = [0; OBJECT_ROW_BYTES];
        value[0] = self.kind;
        value[1..9].copy_from_slice(&self.size.to_be_bytes());
        value[9..].copy_from_slice(&self.crc64.to_be_bytes());
        value
    }

    /// Decodes a row's value: its length first, then its kind.
    ///
    /// # Errors
    /// [`RowError`] unless it is [`OBJECT_ROW_BYTES`] with a valid kind.
    pub fn decode(value: &[u8]) -> Result<Self, RowError> {
        let value: &[u8; OBJECT_ROW_BYTES] = value.try_into().map_err(|_| RowError::Length {
            len: value.len(),
            expected: OBJECT_ROW_BYTES,
        })?;
        Ok(Self {
            kind: kind(value[0])?,
            size: u64::from_be_bytes(field(value, 1)),
            crc64: u64::from_be_bytes(field(value, 9)),
        })
    }
}

/// What an `r` row says about the object at its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryValue {
    /// The object's id.
    pub id: Id,
    /// Its kind byte.
    pub kind: u8,
    /// The object's size, or for a manifest the length of its file.
    pub size: u64,
}

impl EntryValue {
    /// The row's value: id, kind, size (u64 BE).
    pub fn encode(&self) -> [u8; ENTRY_VALUE_BYTES] {
        let mut value = [0; ENTRY_VALUE_BYTES];
        value[..ID_BYTES].copy_from_slice(&self.id);
        value[ID_BYTES] = self.kind;
        value[ID_BYTES + 1..].copy_from_slice(&self.size.to_be_bytes());
        value
    }

    /// Decodes a row's value: its length first, then its kind.
    ///
    /// # Errors
    /// [`RowError`] unless it is [`ENTRY_VALUE_BYTES`] with a valid kind.
    pub fn decode(value: &[u8]) -> Result<Self, RowError> {
        let value: &[u8; ENTRY_VALUE_BYTES] = value.try_into().map_err(|_| RowError::Length {
            len: value.len(),
            expected: ENTRY_VALUE_BYTES,
        })?;
        Ok(Self {
            id: field(value, 0),
            kind: kind(value[ID_BYTES])?,
            size: u64::from_be_bytes(field(value, ID_BYTES + 1)),
        })
    }
}

/// A seal row's value: when the pack was sealed (ms since the epoch).
pub fn encode_seal(sealed_at_ms: u64) -> [u8; SEAL_BYTES] {
    sealed_at_ms.to_be_bytes()
}

/// When a pack was sealed, from its seal row's value.
///
/// # Errors
/// [`RowError::Length`] unless it is [`SEAL_BYTES`].
pub fn decode_seal(value: &[u8]) -> Result<u64, RowError> {
    <[u8; SEAL_BYTES]>::try_from(value)
        .map(u64::from_be_bytes)
        .map_err(|_| RowError::Length {
            len: value.len(),
            expected: SEAL_BYTES,
        })
}

#[cfg(test)]
mod tests {
    use alloc::string::ToString;

    use super::*;
    use crate::content::{MANIFEST, PACK};

    #[test]
    fn keys_follow_the_documented_layout() {
        let id = [7; 32];
        assert_eq!(object_key(&id), [&b"o"[..], &[7; 32]].concat());
        assert_eq!(
            holder_key(&id, "acme", "site"),
            [&b"h"[..], &[7; 32], b"acme\0site"].concat()
        );
        assert_eq!(seal_key(&id), [&b"s"[..], &[7; 32]].concat());
        assert_eq!(
            chunk_of_key(&id, &[9; 32]),
            [&b"c"[..], &[7; 32], &[9; 32]].concat()
        );
        assert!(chunk_of_key(&id, &[9; 32]).starts_with(&chunk_of_prefix(&id)));
        assert_eq!(
            entry_key("acme", "site", "d/x.txt"),
            b"racme\0site\0d/x.txt".to_vec()
        );
    }

    #[test]
    fn holder_keys_sort_by_object_then_namespace_then_name() {
        let id = [0x10; 32];
        let mut keys = [
            holder_key(&id, "zz", "top"),
            holder_key(&id, "b.c", "z"),
            holder_key(&id, "b", "x"),
            holder_key(&id, "a", "y"),
            holder_key(&id, "a", "x"),
        ];
        keys.sort();
        let names: Vec<_> = keys
            .iter()
            .map(|k| holder_of(&k[1 + ID_BYTES..]).unwrap())
            .collect();
        // The 0x00 ending a namespace sorts before any name byte, so `b/x`
        // comes before `b.c/z`.
        assert_eq!(
            names,
            [
                ("a", "x"),
                ("a", "y"),
                ("b", "x"),
                ("b.c", "z"),
                ("zz", "top")
            ]
        );
        let prefix = holder_prefix(&id);
        assert!(keys.iter().all(|k| k.starts_with(&prefix)));
        assert!(!holder_key(&[0x11; 32], "a", "a").starts_with(&prefix));
        assert!(holder_key(&[0x0f; 32], "zz", "zz") < keys[0]);
    }

    #[test]
    fn one_repositorys_entries_are_one_range_in_path_order() {
        let prefix = entry_prefix("a", "b");
        let mut keys = [
            entry_key("a", "b", "z"),
            entry_key("a", "bc", "x"),
            entry_key("a", "b", "d/"),
            entry_key("a", "b-", "x"),
            entry_key("a", "b", "a"),
            entry_key("a", "b", "d/x"),
        ];
        keys.sort();
        let mine: Vec<_> = keys
            .iter()
            .filter_map(|k| k.strip_prefix(prefix.as_slice()))
            .collect();
        assert_eq!(mine, [&b"a"[..], b"d/", b"d/x", b"z"]);
        let first = keys.iter().position(|k| k.starts_with(&prefix)).unwrap();
        assert!(
            keys[first..first + 4]
                .iter()
                .all(|k| k.starts_with(&prefix))
        );
    }

    #[test]
    fn a_malformed_holder_tail_is_refused() {
        assert_eq!(holder_of(b"acme\0site"), Ok(("acme", "site")));
        assert_eq!(holder_of(b"no-separator"), Err(HolderError::NoSeparator));
        assert_eq!(holder_of(b"a\xff\0b"), Err(HolderError::NotUtf8));
        assert_eq!(holder_of(b"a\0\xff"), Err(HolderError::NotUtf8));
    }

    #[test]
    fn rows_round_trip_and_truncated_or_unknown_kind_rows_are_refused() {
        let row = ObjectRow {
            kind: MANIFEST,
            size: 1 << 40,
            crc64: 0xAE8B_1486_0A79_9888,
        };
        let value = row.encode();
        assert_eq!(value[0], 2);
        assert_eq!(&value[1..9], &(1u64 << 40).to_be_bytes());
        assert_eq!(ObjectRow::decode(&value), Ok(row));
        assert_eq!(
            ObjectRow::decode(&value[..16]),
            Err(RowError::Length {
                len: 16,
                expected: 17
            })
        );
        let mut bad_kind = value;
        bad_kind[0] = 4;
        assert_eq!(
            ObjectRow::decode(&bad_kind),
            Err(RowError::Kind(UnknownKind(4)))
        );
        let entry = EntryValue {
            id: [9; 32],
            kind: PACK,
            size: 47,
        };
        let value = entry.encode();
        assert_eq!(EntryValue::decode(&value), Ok(entry));
        assert!(EntryValue::decode(&value[1..]).is_err());
        assert_eq!(decode_seal(&encode_seal(1_000)), Ok(1_000));
        assert_eq!(
            decode_seal(&[0; 9]).unwrap_err().to_string(),
            "9 bytes, not 8"
        );
    }
}
