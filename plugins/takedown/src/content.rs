//! Reading the host's content index (partition `content`, read only) and
//! the formats of the objects it describes; see `wit/takedown.wit`.

use custodian_sdk::{Error, kv};

use crate::codec::{Id, corrupt, hex};

/// The host's content index.
pub const CONTENT: &str = "content";
/// The store users' content is served from.
pub const SERVING: &str = "serving";

/// Kind byte of a blob.
pub const BLOB: u8 = 1;
/// Kind byte of a manifest.
pub const MANIFEST: u8 = 2;
/// Kind byte of a pack.
pub const PACK: u8 = 3;

/// Most keys one `get-many` may ask for (the host's page bound).
const GET_MANY_KEYS: usize = kv::MAX_PAGE_ENTRIES as usize;

/// Whether `kind` names a kind of object.
pub fn is_kind(kind: u8) -> bool {
    matches!(kind, BLOB | MANIFEST | PACK)
}

/// A repository, `namespace/name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repository {
    /// The namespace.
    pub namespace: String,
    /// The repository's name inside it.
    pub name: String,
}

use custodian_sdk::contract::name::is_repository_part as valid_part;

impl Repository {
    /// Parses `namespace/name` with the host's rules: exactly one `/`, each
    /// part 1..=64 bytes of `[a-z0-9._-]` not starting with `.` (so never
    /// a NUL, which separates the parts in keys).
    pub fn parse(text: &str) -> Option<Self> {
        let (namespace, name) = text.split_once('/')?;
        if !valid_part(namespace) || !valid_part(name) || name.contains('/') {
            return None;
        }
        Some(Self {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        })
    }
}

impl std::fmt::Display for Repository {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// What the index's `o` row says about an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectRow {
    /// [`BLOB`], [`MANIFEST`] or [`PACK`].
    pub kind: u8,
    /// Size in bytes.
    pub size: u64,
    /// CRC-64/NVME of the bytes.
    pub crc64: u64,
}

fn o_key(object: &Id) -> Vec<u8> {
    [b"o".as_slice(), object].concat()
}

/// The `o` row of `object`, `None` if the index has none. A row that does
/// not decode is the host's index corrupt.
pub fn object_row(object: &Id) -> Result<Option<ObjectRow>, Error> {
    let Some(raw) = kv::get(CONTENT, &o_key(object))? else {
        return Ok(None);
    };
    let bad = || corrupt(format!("the content row o{} does not decode", hex(object)));
    if raw.len() != 17 || !is_kind(raw[0]) {
        return Err(bad());
    }
    let size = u64::from_be_bytes(raw[1..9].try_into().map_err(|_| bad())?);
    let crc64 = u64::from_be_bytes(raw[9..17].try_into().map_err(|_| bad())?);
    Ok(Some(ObjectRow {
        kind: raw[0],
        size,
        crc64,
    }))
}

fn h_prefix(object: &Id) -> Vec<u8> {
    [b"h".as_slice(), object].concat()
}

fn h_key(object: &Id, repository: &Repository) -> Vec<u8> {
    let mut key = h_prefix(object);
    key.extend_from_slice(repository.namespace.as_bytes());
    key.push(0);
    key.extend_from_slice(repository.name.as_bytes());
    key
}

/// The objects of `objects` that `repository` does not hold, in order.
/// One `get-many` per 1000 objects.
pub fn not_held(repository: &Repository, objects: &[Id]) -> Result<Vec<Id>, Error> {
    let mut missing = Vec::new();
    for group in objects.chunks(GET_MANY_KEYS) {
        let keys: Vec<Vec<u8>> = group.iter().map(|o| h_key(o, repository)).collect();
        let rows = kv::get_many(CONTENT, &keys)?;
        if rows.len() != keys.len() {
            return Err(corrupt("get-many answered a different number of keys"));
        }
        missing.extend(
            group
                .iter()
                .zip(rows)
                .filter(|(_, row)| row.is_none())
                .map(|(object, _)| *object),
        );
    }
    Ok(missing)
}

/// Which of `packs` are sealed (have an `s` row). At most 1000 packs.
pub fn sealed(packs: &[Id]) -> Result<Vec<bool>, Error> {
    if packs.is_empty() {
        return Ok(Vec::new());
    }
    let keys: Vec<Vec<u8>> = packs
        .iter()
        .map(|p| [b"s".as_slice(), p].concat())
        .collect();
    let rows = kv::get_many(CONTENT, &keys)?;
    if rows.len() != keys.len() {
        return Err(corrupt("get-many answered a different number of keys"));
    }
    Ok(rows.iter().map(Option::is_some).collect())
}

/// One page of an object's holders.
#[derive(Debug)]
pub struct HolderPage {
    /// Holder repositories, in index order.
    pub holders: Vec<Repository>,
    /// The cursor to continue from; `None` when every holder was listed.
    pub next: Option<Vec<u8>>,
}

/// Up to `limit` holders of `object` after `cursor` (a `next` of an
/// earlier page). A cursor outside the object's rows is `Corrupt` (it came
/// from this policy's own state), as is a holder row that does not parse.
pub fn holders(object: &Id, cursor: Option<&[u8]>, limit: u32) -> Result<HolderPage, Error> {
    let (start, end) = crate::keys::prefix_range(h_prefix(object));
    if cursor.is_some_and(|c| !c.starts_with(&start)) {
        return Err(corrupt(format!(
            "the holders cursor of {} is outside its rows",
            hex(object)
        )));
    }
    let page = kv::scan(CONTENT, &start, Some(&end), cursor, limit)?;
    let mut holders = Vec::with_capacity(page.entries.len());
    for entry in &page.entries {
        let bad = || corrupt(format!("a holder row of {} does not parse", hex(object)));
        let tail = entry.key.strip_prefix(start.as_slice()).ok_or_else(bad)?;
        let split = tail.iter().position(|b| *b == 0).ok_or_else(bad)?;
        let namespace = std::str::from_utf8(&tail[..split]).map_err(|_| bad())?;
        let name = std::str::from_utf8(&tail[split + 1..]).map_err(|_| bad())?;
        let repository = Repository::parse(&format!("{namespace}/{name}")).ok_or_else(bad)?;
        holders.push(repository);
    }
    Ok(HolderPage {
        holders,
        next: page.next,
    })
}

/// The manifest format: `CUSTMNFT`, file length (u64 LE), format 1
/// (u16 LE), chunk count (u32 LE), chunk ids, trailer CRC (u64 LE).
pub mod manifest {
    /// Bytes before the first chunk id.
    pub const HEADER: u64 = 22;
    /// Bytes after the last chunk id.
    pub const TRAILER: u64 = 8;

    /// The chunk count of a manifest of `size` bytes, if a manifest can
    /// have that size.
    pub fn count_for_size(size: u64) -> Option<u32> {
        let ids = size.checked_sub(HEADER + TRAILER)?;
        if !ids.is_multiple_of(32) {
            return None;
        }
        u32::try_from(ids / 32).ok()
    }

    /// Offset of chunk `index`'s id.
    pub fn chunk_offset(index: u32) -> u64 {
        HEADER + u64::from(index) * 32
    }

    /// Checks the structure of a whole manifest; the reason it is not one
    /// otherwise.
    pub fn check(bytes: &[u8]) -> Result<u32, String> {
        if bytes.len() < 30 || &bytes[..8] != b"CUSTMNFT" {
            return Err("not a manifest (magic)".into());
        }
        if u16::from_le_bytes([bytes[16], bytes[17]]) != 1 {
            return Err("an unknown manifest format".into());
        }
        let count = u32::from_le_bytes([bytes[18], bytes[19], bytes[20], bytes[21]]);
        if count_for_size(bytes.len() as u64) != Some(count) {
            return Err(format!(
                "a manifest of {count} chunks cannot be {} bytes",
                bytes.len()
            ));
        }
        Ok(count)
    }

    /// The file length a manifest header declares.
    pub fn file_length(header: &[u8; 8]) -> u64 {
        u64::from_le_bytes(*header)
    }
}

/// The pack format: `CUSTPACK`, format 1 (u16 LE), member count (u32 LE),
/// then one 33-byte entry (id, kind) per member.
pub mod pack {
    /// Bytes before the first entry.
    pub const HEADER: u64 = 14;
    /// Bytes per entry.
    pub const ENTRY: u64 = 33;

    /// The member count of a pack header; the reason it is not one
    /// otherwise.
    pub fn count(header: &[u8]) -> Result<u32, String> {
        if header.len() != HEADER as usize || &header[..8] != b"CUSTPACK" {
            return Err("not a pack (magic)".into());
        }
        if u16::from_le_bytes([header[8], header[9]]) != 1 {
            return Err("an unknown pack format".into());
        }
        Ok(u32::from_le_bytes([
            header[10], header[11], header[12], header[13],
        ]))
    }

    /// Checks the structure of a whole pack.
    pub fn check(bytes: &[u8]) -> Result<u32, String> {
        let header = bytes
            .get(..HEADER as usize)
            .ok_or("shorter than a pack header")?;
        let count = count(header)?;
        if bytes.len() as u64 != HEADER + ENTRY * u64::from(count) {
            return Err(format!(
                "a pack of {count} members cannot be {} bytes",
                bytes.len()
            ));
        }
        Ok(count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repositories_are_exactly_namespace_slash_name() {
        assert!(Repository::parse("ns/name").is_some());
        assert!(Repository::parse("ns-1/name.v2_x").is_some());
        for bad in [
            "",
            "ns",
            "/name",
            "ns/",
            "a/b/c",
            "ns/na\0me",
            "NS/name",
            "ns/.hidden",
        ] {
            assert!(Repository::parse(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn manifest_sizes_follow_the_chunk_count() {
        assert_eq!(manifest::count_for_size(30), Some(0));
        assert_eq!(manifest::count_for_size(62), Some(1));
        assert_eq!(manifest::count_for_size(63), None);
        assert_eq!(manifest::count_for_size(29), None);
    }
}
