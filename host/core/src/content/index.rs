//! The content index's keys and rows (partition `content`; the layout is
//! in the [module documentation](super)), and paged reads of holders and
//! repository entries. The key layouts and row codecs are
//! [`custodian_contract::content::index`]; this module gives them the
//! host's types and errors.
//!
//! Every row read back is decoded strictly: a row that does not have the
//! documented shape is [`ContentError::Corrupt`], never a panic.

use custodian_contract::content::index::{self as layout, EntryValue, HolderError, RowError};
use custodian_kv::{Kv, MAX_KEY_BYTES, MAX_PAGE_ENTRIES};

use super::{ContentError, MAX_REPO_PART_BYTES, ObjectId, ObjectKind, RepoName, partition};

pub use layout::{CHUNK_OF_TAG, ENTRY_TAG, HOLDER_TAG, MAX_PATH_BYTES, OBJECT_TAG, SEAL_TAG};

// The contract bounds entry keys by its own key bound; the KV this host
// runs must accept them too.
const _: () = assert!(1 + 2 * MAX_REPO_PART_BYTES + 2 + MAX_PATH_BYTES <= MAX_KEY_BYTES);

/// The key of `id`'s object row.
pub fn object_row_key(id: &ObjectId) -> Vec<u8> {
    layout::object_key(id.as_bytes())
}

/// The prefix of every holder row of `id`.
pub fn holder_prefix(id: &ObjectId) -> Vec<u8> {
    layout::holder_prefix(id.as_bytes())
}

/// The key of the row saying `repo` holds `id`.
pub fn holder_key(id: &ObjectId, repo: &RepoName) -> Vec<u8> {
    layout::holder_key(id.as_bytes(), repo.namespace(), repo.name())
}

/// The key of the row saying `chunk` is part of `manifest`'s file.
pub fn chunk_of_key(chunk: &ObjectId, manifest: &ObjectId) -> Vec<u8> {
    layout::chunk_of_key(chunk.as_bytes(), manifest.as_bytes())
}

/// The key of pack `id`'s seal row.
pub fn seal_key(id: &ObjectId) -> Vec<u8> {
    layout::seal_key(id.as_bytes())
}

/// The prefix of every entry of `repo` (ends with the 0x00 before the
/// path).
pub fn entry_prefix(repo: &RepoName) -> Vec<u8> {
    layout::entry_prefix(repo.namespace(), repo.name())
}

/// The key of `repo`'s entry at `path`.
pub fn entry_key(repo: &RepoName, path: &str) -> Vec<u8> {
    layout::entry_key(repo.namespace(), repo.name(), path)
}

/// The first key after every key starting with `prefix`; `None` when no
/// key is (the prefix is all 0xff).
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last != u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// Checks an entry path: 1..=[`MAX_PATH_BYTES`] bytes of `/`-separated
/// segments, none empty (except after a directory's trailing `/`), `.` or
/// `..`, and no control characters (they would corrupt listings on a
/// terminal, and NUL separates key parts).
///
/// # Errors
/// [`ContentError::InvalidArgument`] naming what is wrong.
pub fn validate_path(path: &str) -> Result<(), ContentError> {
    let refuse = |why: &str| {
        Err(ContentError::InvalidArgument(format!(
            "path {path:?}: {why}"
        )))
    };
    if path.is_empty() || path.len() > MAX_PATH_BYTES {
        return refuse(&format!(
            "must be 1..={MAX_PATH_BYTES} bytes, not {}",
            path.len()
        ));
    }
    if path.chars().any(char::is_control) {
        return refuse("contains a control character");
    }
    let body = path.strip_suffix('/').unwrap_or(path);
    for segment in body.split('/') {
        match segment {
            "" => return refuse("has an empty segment"),
            "." | ".." => return refuse("has a '.' or '..' segment"),
            _ => {}
        }
    }
    Ok(())
}

/// What the index records about an object (the value of its `o` row).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectRow {
    /// Its kind.
    pub kind: ObjectKind,
    /// Its size in bytes.
    pub size: u64,
    /// The CRC-64/NVME of its bytes.
    pub crc64: u64,
}

impl ObjectRow {
    /// The row's value: kind, size (u64 BE), CRC (u64 BE).
    pub fn encode(&self) -> Vec<u8> {
        layout::ObjectRow {
            kind: self.kind.byte(),
            size: self.size,
            crc64: self.crc64,
        }
        .encode()
        .to_vec()
    }

    /// Decodes a row's value.
    ///
    /// # Errors
    /// [`ContentError::Corrupt`] unless it is 17 bytes with a valid kind.
    pub fn decode(value: &[u8]) -> Result<Self, ContentError> {
        let row = layout::ObjectRow::decode(value).map_err(|why| match why {
            RowError::Length { .. } => ContentError::Corrupt(format!("an object row of {why}")),
            RowError::Kind(unknown) => unknown.into(),
        })?;
        Ok(Self {
            kind: ObjectKind::from_byte(row.kind)?,
            size: row.size,
            crc64: row.crc64,
        })
    }
}

/// One entry of a repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Where in the repository: a file's path, or a directory's with a
    /// trailing `/`.
    pub path: String,
    /// The object it names.
    pub id: ObjectId,
    /// The object's kind.
    pub kind: ObjectKind,
    /// The object's size, or for a manifest the length of its file.
    pub size: u64,
}

impl Entry {
    /// The entry row's value: id, kind, size (u64 BE).
    pub fn encode_value(&self) -> Vec<u8> {
        EntryValue {
            id: self.id.0,
            kind: self.kind.byte(),
            size: self.size,
        }
        .encode()
        .to_vec()
    }

    /// The entry at `path` from its row's value.
    ///
    /// # Errors
    /// [`ContentError::Corrupt`] unless it is 41 bytes with a valid kind.
    pub fn decode_value(path: String, value: &[u8]) -> Result<Self, ContentError> {
        let value = EntryValue::decode(value).map_err(|why| match why {
            RowError::Length { .. } => {
                ContentError::Corrupt(format!("the entry {path:?} has {why}"))
            }
            RowError::Kind(unknown) => unknown.into(),
        })?;
        Ok(Self {
            id: ObjectId(value.id),
            kind: ObjectKind::from_byte(value.kind)?,
            size: value.size,
            path,
        })
    }
}

/// A page of a repository's entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EntryPage {
    /// Entries, ascending by path (bytewise).
    pub entries: Vec<Entry>,
    /// Pass back as the cursor to continue; `None` at the end.
    pub next: Option<String>,
}

/// A page of an object's holders.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HolderPage {
    /// Repositories, ascending (by namespace, then name).
    pub holders: Vec<RepoName>,
    /// Pass back as the cursor to continue; `None` at the end.
    pub next: Option<RepoName>,
}

fn check_limit(limit: u32) -> Result<(), ContentError> {
    if (1..=MAX_PAGE_ENTRIES).contains(&limit) {
        Ok(())
    } else {
        Err(ContentError::InvalidArgument(format!(
            "limit {limit} is outside 1..={MAX_PAGE_ENTRIES}"
        )))
    }
}

/// What the index records about `id`; `None` if it has no object row.
///
/// # Errors
/// [`ContentError::Corrupt`] for an undecodable row;
/// [`ContentError::Index`] if the KV fails.
pub async fn object_row(kv: &dyn Kv, id: &ObjectId) -> Result<Option<ObjectRow>, ContentError> {
    kv.get(&partition(), &object_row_key(id))
        .await?
        .map(|value| ObjectRow::decode(&value))
        .transpose()
}

/// When pack `id` was sealed (ms since the epoch); `None` if it is not.
///
/// # Errors
/// [`ContentError::Corrupt`] for an undecodable row;
/// [`ContentError::Index`] if the KV fails.
pub async fn sealed_at(kv: &dyn Kv, id: &ObjectId) -> Result<Option<u64>, ContentError> {
    kv.get(&partition(), &seal_key(id))
        .await?
        .map(|value| {
            layout::decode_seal(&value)
                .map_err(|why| ContentError::Corrupt(format!("the seal of pack {id} has {why}")))
        })
        .transpose()
}

/// The repositories holding `id`, at most `limit` (1..=1000) from after
/// `cursor`.
///
/// # Errors
/// [`ContentError::InvalidArgument`] for a limit out of bounds;
/// [`ContentError::Corrupt`] for an undecodable row;
/// [`ContentError::Index`] if the KV fails.
pub async fn holders(
    kv: &dyn Kv,
    id: &ObjectId,
    cursor: Option<&RepoName>,
    limit: u32,
) -> Result<HolderPage, ContentError> {
    check_limit(limit)?;
    let prefix = holder_prefix(id);
    let end = prefix_end(&prefix);
    let cursor = cursor.map(|repo| holder_key(id, repo));
    let page = kv
        .scan(
            &partition(),
            &prefix,
            end.as_deref(),
            cursor.as_deref(),
            limit,
        )
        .await?;
    let holders = page
        .entries
        .iter()
        .map(|(key, value)| {
            let corrupt = |why: &str| {
                ContentError::Corrupt(format!("a holder row of {id} {why}: {key:02x?}"))
            };
            if !value.is_empty() {
                return Err(corrupt("has a value"));
            }
            let (namespace, name) =
                layout::holder_of(&key[prefix.len()..]).map_err(|why| match why {
                    HolderError::NoSeparator => corrupt("has no separator"),
                    HolderError::NotUtf8 => corrupt("is not UTF-8"),
                })?;
            RepoName::new(namespace, name).map_err(|_| corrupt("does not name a repository"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let next = match page.next {
        Some(_) => holders.last().cloned(),
        None => None,
    };
    Ok(HolderPage { holders, next })
}

/// `repo`'s entries in path order, at most `limit` (1..=1000) from after
/// the path `cursor`.
///
/// # Errors
/// [`ContentError::InvalidArgument`] for a limit or cursor out of bounds;
/// [`ContentError::Corrupt`] for an undecodable row;
/// [`ContentError::Index`] if the KV fails.
pub async fn entries(
    kv: &dyn Kv,
    repo: &RepoName,
    cursor: Option<&str>,
    limit: u32,
) -> Result<EntryPage, ContentError> {
    check_limit(limit)?;
    if let Some(cursor) = cursor
        && cursor.len() > MAX_PATH_BYTES
    {
        return Err(ContentError::InvalidArgument(format!(
            "a cursor of {} bytes is longer than any path ({MAX_PATH_BYTES})",
            cursor.len()
        )));
    }
    let prefix = entry_prefix(repo);
    let end = prefix_end(&prefix);
    let cursor = cursor.map(|path| entry_key(repo, path));
    let page = kv
        .scan(
            &partition(),
            &prefix,
            end.as_deref(),
            cursor.as_deref(),
            limit,
        )
        .await?;
    let entries = page
        .entries
        .into_iter()
        .map(|(key, value)| {
            let path = String::from_utf8(key[prefix.len()..].to_vec()).map_err(|_| {
                ContentError::Corrupt(format!(
                    "an entry of {repo} has a path that is not UTF-8: {key:02x?}"
                ))
            })?;
            Entry::decode_value(path, &value)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let next = match page.next {
        Some(_) => entries.last().map(|entry| entry.path.clone()),
        None => None,
    };
    Ok(EntryPage { entries, next })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use custodian_base::clock::FixedClock;
    use custodian_kv::memory::MemoryKv;
    use custodian_kv::{Batch, Write};

    fn repo(text: &str) -> RepoName {
        RepoName::parse(text).unwrap()
    }

    fn kv() -> MemoryKv {
        MemoryKv::new(Arc::new(FixedClock::new(1_000)))
    }

    async fn put(kv: &MemoryKv, key: Vec<u8>, value: Vec<u8>) {
        let batch = Batch {
            preconditions: vec![],
            writes: vec![Write::Put {
                partition: partition(),
                key,
                value,
            }],
        };
        kv.apply(&batch).await.unwrap();
    }

    #[test]
    fn keys_follow_the_documented_layout() {
        let id = ObjectId([7; 32]);
        let r = repo("acme/site");
        assert_eq!(object_row_key(&id), [&b"o"[..], &[7; 32]].concat());
        assert_eq!(
            holder_key(&id, &r),
            [&b"h"[..], &[7; 32], b"acme\0site"].concat()
        );
        assert_eq!(seal_key(&id), [&b"s"[..], &[7; 32]].concat());
        assert_eq!(entry_key(&r, "d/x.txt"), b"racme\0site\0d/x.txt".to_vec());
    }

    #[test]
    fn rows_round_trip_and_malformed_rows_are_corrupt() {
        let row = ObjectRow {
            kind: ObjectKind::Manifest,
            size: 1 << 40,
            crc64: 0xAE8B_1486_0A79_9888,
        };
        let value = row.encode();
        assert_eq!(value[0], 2);
        assert_eq!(&value[1..9], &(1u64 << 40).to_be_bytes());
        assert_eq!(ObjectRow::decode(&value).unwrap(), row);
        assert!(matches!(
            ObjectRow::decode(&value[..16]),
            Err(ContentError::Corrupt(_))
        ));
        let mut bad_kind = value.clone();
        bad_kind[0] = 4;
        assert!(matches!(
            ObjectRow::decode(&bad_kind),
            Err(ContentError::Corrupt(_))
        ));
        let entry = Entry {
            path: "d/".into(),
            id: ObjectId([9; 32]),
            kind: ObjectKind::Pack,
            size: 47,
        };
        let value = entry.encode_value();
        assert_eq!(Entry::decode_value("d/".into(), &value).unwrap(), entry);
        assert!(matches!(
            Entry::decode_value("d/".into(), &value[1..]),
            Err(ContentError::Corrupt(_))
        ));
    }

    #[test]
    fn entry_paths_are_checked() {
        for good in ["a", "d/", "d/sub/file.txt", "weird name.txt"] {
            validate_path(good).unwrap();
        }
        let long = "x".repeat(MAX_PATH_BYTES + 1);
        for bad in [
            "", "/a", "a//b", "a/./b", "../a", "a/..", "a\0b", "a\nb", &long,
        ] {
            assert!(
                matches!(validate_path(bad), Err(ContentError::InvalidArgument(_))),
                "{bad:?}"
            );
        }
    }

    #[tokio::test]
    async fn holders_page_with_a_cursor_and_stay_within_their_object() {
        let kv = kv();
        let id = ObjectId([0xff; 32]);
        let other = ObjectId([0x01; 32]);
        let names = ["a/x", "a/y", "b/x", "b.c/z", "zz/top"];
        for name in names {
            put(&kv, holder_key(&id, &repo(name)), vec![]).await;
        }
        put(&kv, holder_key(&other, &repo("q/q")), vec![]).await;
        let mut seen = Vec::new();
        let mut cursor = None;
        loop {
            let page = holders(&kv, &id, cursor.as_ref(), 2).await.unwrap();
            assert!(page.holders.len() <= 2);
            seen.extend(page.holders.iter().map(ToString::to_string));
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        // By namespace, then name: the 0x00 ending a namespace sorts
        // before any name byte, so `b/x` comes before `b.c/z`.
        assert_eq!(seen, ["a/x", "a/y", "b/x", "b.c/z", "zz/top"]);
        let none = holders(&kv, &ObjectId([2; 32]), None, 10).await.unwrap();
        assert_eq!(none, HolderPage::default());
    }

    #[tokio::test]
    async fn a_malformed_holder_row_is_corrupt() {
        let kv = kv();
        let id = ObjectId([3; 32]);
        put(
            &kv,
            [holder_prefix(&id), b"no-separator".to_vec()].concat(),
            vec![],
        )
        .await;
        assert!(matches!(
            holders(&kv, &id, None, 10).await,
            Err(ContentError::Corrupt(_))
        ));
    }

    #[tokio::test]
    async fn a_limit_outside_the_page_bound_is_an_invalid_argument() {
        let kv = kv();
        for limit in [0, MAX_PAGE_ENTRIES + 1] {
            assert!(matches!(
                holders(&kv, &ObjectId([0; 32]), None, limit).await,
                Err(ContentError::InvalidArgument(_))
            ));
            assert!(matches!(
                entries(&kv, &repo("a/b"), None, limit).await,
                Err(ContentError::InvalidArgument(_))
            ));
        }
    }

    #[tokio::test]
    async fn entries_list_one_repository_in_path_order() {
        let kv = kv();
        let mine = repo("a/b");
        let entry = |path: &str| Entry {
            path: path.into(),
            id: ObjectId([1; 32]),
            kind: ObjectKind::Blob,
            size: 3,
        };
        for path in ["z", "d/", "d/x", "a"] {
            put(&kv, entry_key(&mine, path), entry(path).encode_value()).await;
        }
        // Neighbours whose keys share a prefix with `a/b`'s must not show.
        for other in ["a/bc", "a/b-"] {
            put(&kv, entry_key(&repo(other), "x"), entry("x").encode_value()).await;
        }
        let first = entries(&kv, &mine, None, 3).await.unwrap();
        let paths: Vec<_> = first.entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["a", "d/", "d/x"]);
        assert_eq!(first.next.as_deref(), Some("d/x"));
        let rest = entries(&kv, &mine, first.next.as_deref(), 3).await.unwrap();
        assert_eq!(rest.entries, vec![entry("z")]);
        assert_eq!(rest.next, None);
    }
}
