//! Reading the host's content index (partition `content`, read only) and
//! the formats of the objects it describes; see `sdk/wit/takedown.wit`. The
//! layouts themselves (constants, keys, header checks, row decoding) are
//! the contract's ([`layout`]), shared with the host that writes them;
//! this module does the reads and words the errors as this policy stores
//! them.

use custodian_sdk::contract::content::{self as layout, index};
use custodian_sdk::{Error, kv};

use crate::codec::{Id, corrupt, hex};

/// The host's content index.
pub const CONTENT: &str = layout::PARTITION;
/// The store users' content is served from.
pub const SERVING: &str = layout::SERVING_STORE;

pub use layout::{BLOB, MANIFEST, PACK, is_kind};

/// Most keys one `get-many` may ask for (the host's page bound).
const GET_MANY_KEYS: usize = kv::MAX_PAGE_ENTRIES as usize;

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

/// What the index's `o` row says about an object: its kind ([`BLOB`],
/// [`MANIFEST`] or [`PACK`]), size and CRC-64/NVME.
pub use index::ObjectRow;

/// The `o` row of `object`, `None` if the index has none. A row that does
/// not decode is the host's index corrupt.
pub fn object_row(object: &Id) -> Result<Option<ObjectRow>, Error> {
    let Some(raw) = kv::get(CONTENT, &index::object_key(object))? else {
        return Ok(None);
    };
    ObjectRow::decode(&raw)
        .map(Some)
        .map_err(|_| corrupt(format!("the content row o{} does not decode", hex(object))))
}

/// The `o` rows of `objects` (at most 1000), in order, `None` where the
/// index has none; one `get-many`. A row that does not decode is the
/// host's index corrupt.
pub fn object_rows(objects: &[Id]) -> Result<Vec<Option<ObjectRow>>, Error> {
    if objects.is_empty() {
        return Ok(Vec::new());
    }
    let keys: Vec<Vec<u8>> = objects.iter().map(index::object_key).collect();
    let rows = kv::get_many(CONTENT, &keys)?;
    if rows.len() != keys.len() {
        return Err(corrupt("get-many answered a different number of keys"));
    }
    objects
        .iter()
        .zip(rows)
        .map(|(object, raw)| decode_object_row(object, raw))
        .collect()
}

/// The key of `object`'s `o` row in [`CONTENT`].
pub fn object_key(object: &Id) -> Vec<u8> {
    index::object_key(object)
}

/// `object`'s `o` row `raw` as read; one that does not decode is the
/// host's index corrupt.
pub fn decode_object_row(object: &Id, raw: Option<Vec<u8>>) -> Result<Option<ObjectRow>, Error> {
    raw.map(|raw| {
        ObjectRow::decode(&raw)
            .map_err(|_| corrupt(format!("the content row o{} does not decode", hex(object))))
    })
    .transpose()
}

/// The key of the index row saying `repository` holds `object` (in
/// [`CONTENT`]).
pub fn held_key(object: &Id, repository: &Repository) -> Vec<u8> {
    index::holder_key(object, &repository.namespace, &repository.name)
}

/// The objects of `objects` that `repository` does not hold, in order.
/// One `get-many` per 1000 objects.
pub fn not_held(repository: &Repository, objects: &[Id]) -> Result<Vec<Id>, Error> {
    let mut missing = Vec::new();
    for group in objects.chunks(GET_MANY_KEYS) {
        let keys: Vec<Vec<u8>> = group.iter().map(|o| held_key(o, repository)).collect();
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
    let keys: Vec<Vec<u8>> = packs.iter().map(index::seal_key).collect();
    let rows = kv::get_many(CONTENT, &keys)?;
    if rows.len() != keys.len() {
        return Err(corrupt("get-many answered a different number of keys"));
    }
    Ok(rows.iter().map(Option::is_some).collect())
}

/// One holder repository of an object.
#[derive(Debug)]
pub struct Holder {
    /// Its index row's key: a cursor that resumes after it.
    pub key: Vec<u8>,
    /// The repository.
    pub repository: Repository,
}

/// One page of an object's holders.
#[derive(Debug)]
pub struct HolderPage {
    /// Holder repositories, in index order.
    pub holders: Vec<Holder>,
    /// The cursor to continue from; `None` when every holder was listed.
    pub next: Option<Vec<u8>>,
}

/// The range of `object`'s holder rows in [`CONTENT`], checking that
/// `cursor` (a `next` of an earlier page) is inside it: one outside is
/// `Corrupt` (it came from this policy's own state).
pub fn holders_range(object: &Id, cursor: Option<&[u8]>) -> Result<(Vec<u8>, Vec<u8>), Error> {
    let (start, end) = crate::keys::prefix_range(index::holder_prefix(object));
    if cursor.is_some_and(|c| !c.starts_with(&start)) {
        return Err(corrupt(format!(
            "the holders cursor of {} is outside its rows",
            hex(object)
        )));
    }
    Ok((start, end))
}

/// The holders of `object` a scan of its [`holders_range`] answered; a
/// holder row that does not parse is `Corrupt`.
pub fn holders_of(object: &Id, page: kv::Page) -> Result<HolderPage, Error> {
    let prefix = index::holder_prefix(object);
    let mut holders = Vec::with_capacity(page.entries.len());
    for entry in page.entries {
        let bad = || corrupt(format!("a holder row of {} does not parse", hex(object)));
        let tail = entry.key.strip_prefix(prefix.as_slice()).ok_or_else(bad)?;
        let (namespace, name) = index::holder_of(tail).map_err(|_| bad())?;
        let repository = Repository::parse(&format!("{namespace}/{name}")).ok_or_else(bad)?;
        holders.push(Holder {
            key: entry.key,
            repository,
        });
    }
    Ok(HolderPage {
        holders,
        next: page.next,
    })
}

/// The manifest format ([`layout::manifest`]), with this policy's
/// wording of what is wrong.
pub mod manifest {
    use custodian_sdk::contract::content::manifest::{self as layout, ManifestError};

    pub use layout::{chunk_offset, count_for_size, file_length};

    /// Bytes before the first chunk id, as an object offset.
    pub const HEADER: u64 = layout::HEADER_BYTES as u64;
    /// Bytes after the last chunk id, as an object offset.
    pub const TRAILER: u64 = layout::TRAILER_BYTES as u64;

    /// Checks the structure of a whole manifest (the contract's
    /// [`layout::check`]); the reason it is not one otherwise.
    pub fn check(bytes: &[u8]) -> Result<u32, String> {
        layout::check(bytes)
            .map(|header| header.count)
            .map_err(|why| match why {
                ManifestError::Short { .. } | ManifestError::Magic => {
                    "not a manifest (magic)".into()
                }
                ManifestError::Format(_) => "an unknown manifest format".into(),
                ManifestError::Size { count, len } => {
                    format!("a manifest of {count} chunks cannot be {len} bytes")
                }
                // `check` judges neither the bounds nor the file length.
                other => other.to_string(),
            })
    }
}

/// The pack format ([`layout::pack`]), with this policy's wording of what
/// is wrong.
pub mod pack {
    use custodian_sdk::contract::content::pack::{self as layout, PackError};

    /// Bytes before the first entry, as an object offset.
    pub const HEADER: u64 = layout::HEADER_BYTES as u64;
    /// Bytes per entry (id, kind), as an object offset.
    pub const ENTRY: u64 = layout::MEMBER_BYTES as u64;

    fn reason(why: PackError) -> String {
        match why {
            PackError::Short { .. } => "shorter than a pack header".into(),
            PackError::Magic => "not a pack (magic)".into(),
            PackError::Format(_) => "an unknown pack format".into(),
            PackError::Size { count, len } => {
                format!("a pack of {count} members cannot be {len} bytes")
            }
            // Neither `count` nor `check` judges the member bound.
            other @ PackError::TooMany { .. } => other.to_string(),
        }
    }

    /// The member count of a pack header (exactly [`HEADER`] bytes); the
    /// reason it is not one otherwise.
    pub fn count(header: &[u8]) -> Result<u32, String> {
        let header = header.try_into().map_err(|_| reason(PackError::Magic))?;
        layout::decode_header(header).map_err(reason)
    }

    /// Checks the structure of a whole pack (the contract's
    /// [`layout::check`]).
    pub fn check(bytes: &[u8]) -> Result<u32, String> {
        layout::check(bytes).map_err(reason)
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
