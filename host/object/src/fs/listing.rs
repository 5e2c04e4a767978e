//! Listings: keys in ascending byte order, straight from the directory
//! tree, reading only what a page needs.
//!
//! Key order is not directory order: the keys below directory `a` (`a/x`,
//! `a…` continued in a `%+` chunk, and in format 1 `a` itself) interleave
//! with those of a sibling like `a!` (`a!` < `a/x`). So the walk is best-first: a
//! min-heap of pending entries, each a concrete key (found by its
//! version directory, in either spelling of `layout`) or an unread
//! directory keyed by the decoded prefix every key below it starts with
//! (a lower bound of them all). Popping the least entry either yields a
//! key — no unread directory can hold a smaller one — or reads that
//! directory and pushes its children. A page of `n` keys thus reads the
//! directories on the paths to those keys and their siblings' names, not
//! the store.
//!
//! Directories that cannot hold a key with the prefix, or hold only keys
//! at or before the cursor, are never read. One read of a directory puts
//! at most [`EXPAND_CAP`] children on the heap (the least ones); the rest
//! wait as a single entry, keyed by the least of them, and the directory
//! is read again when that entry comes up. A listing's memory is thus
//! bounded whatever the size of a directory, at the price of re-reading a
//! directory once per `EXPAND_CAP` of its children that a listing passes.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::{Path, PathBuf};

use crate::{
    ListPage, ListedObject, ListedVersion, MAX_OBJECT_KEY_BYTES, ObjectError, ObjectKey,
    validate_limit,
};

use super::ids::version_seq;
use super::layout::{Entry, KeyPath, Layout, decode_entry};
use super::version_file::VersionFile;
use super::versions::version_ids;
use super::{FsStore, io_error};

/// Where a listing starts.
#[derive(Debug, Clone, Copy)]
pub(super) enum Lower<'a> {
    /// At the first key.
    Start,
    /// Strictly after this key.
    After(&'a [u8]),
    /// At this key, inclusive.
    From(&'a [u8]),
}

/// Most children one directory read puts on the heap. The rest of the
/// directory waits as one entry and is read again when its turn comes,
/// so a page's memory is bounded by the tree's depth times this, not by
/// the size of the largest directory. (Small under test, so every
/// listing test goes through the re-reads.)
const EXPAND_CAP: usize = if cfg!(test) { 8 } else { 1024 };

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    /// Sorts first: a key equal to a directory's bound precedes
    /// everything in that directory.
    Key,
    /// A directory to read.
    Dir {
        /// `objects/` itself: its children start keys, with no `/`.
        root: bool,
        /// Only its children above this bound and kind (`true`: a
        /// directory, which sorts after a key of the same bound): the
        /// rest of a directory whose first children were already taken.
        after: Option<(Vec<u8>, bool)>,
        /// The bound of the directory itself (for a rest, the entry's
        /// bound is its least remaining child's).
        prefix: Vec<u8>,
    },
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Pending {
    /// The key, or a lower bound of every key in the directory (a prefix
    /// of them all, for a whole directory).
    bound: Vec<u8>,
    kind: Kind,
    /// The key's version directory, or the directory to read.
    path: PathBuf,
}

/// The keys with a version directory under a prefix, in ascending order.
pub(super) struct KeyWalk<'a> {
    layout: &'a Layout,
    prefix: &'a [u8],
    lower: Lower<'a>,
    heap: BinaryHeap<Reverse<Pending>>,
}

impl<'a> KeyWalk<'a> {
    pub fn new(layout: &'a Layout, prefix: &'a str, lower: Lower<'a>) -> Result<Self, ObjectError> {
        let mut walk = Self {
            layout,
            prefix: prefix.as_bytes(),
            lower,
            heap: BinaryHeap::new(),
        };
        // No key is longer than this, so no key can have the prefix.
        if prefix.len() <= MAX_OBJECT_KEY_BYTES {
            walk.expand(&layout.objects, &[], true, None)?;
        }
        Ok(walk)
    }

    fn key_wanted(&self, key: &[u8]) -> bool {
        key.starts_with(self.prefix)
            && match self.lower {
                Lower::Start => true,
                Lower::After(after) => key > after,
                Lower::From(from) => key >= from,
            }
    }

    /// Whether a directory whose keys all start with `bound` can hold a
    /// wanted key.
    fn dir_wanted(&self, bound: &[u8]) -> bool {
        let prefix_possible = bound.starts_with(self.prefix) || self.prefix.starts_with(bound);
        // Every key starting with `bound` is below `lower` when `bound`
        // is below it and not a prefix of it.
        let all_before = match self.lower {
            Lower::Start => false,
            Lower::After(lower) | Lower::From(lower) => bound < lower && !lower.starts_with(bound),
        };
        prefix_possible && !all_before
    }

    /// Reads directory `dir`, whose keys all start with `bound`, and puts
    /// its wanted children (those above `after`, if given) on the heap:
    /// the least [`EXPAND_CAP`] of them, and the rest as one entry.
    fn expand(
        &mut self,
        dir: &Path,
        bound: &[u8],
        root: bool,
        after: Option<&(Vec<u8>, bool)>,
    ) -> Result<(), ObjectError> {
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            // Removed since it was seen (a delete pruned it), or a stray
            // file where a directory belongs.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                return Ok(());
            }
            Err(e) => return Err(io_error("listing", dir, e)),
        };
        let mut children = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| io_error("listing", dir, e))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let (child, versions) = match decode_entry(name) {
                Some(Entry::Versions) if !root => (bound.to_vec(), true),
                Some(Entry::Segment { bytes, versions }) => {
                    let mut child = bound.to_vec();
                    if !root {
                        child.push(b'/');
                    }
                    child.extend_from_slice(&bytes);
                    (child, versions)
                }
                Some(Entry::Continuation { bytes, versions }) if !root => {
                    ([bound, &bytes].concat(), versions)
                }
                _ => continue,
            };
            let kind = if versions {
                Kind::Key
            } else {
                whole_dir(child.clone())
            };
            if after.is_some_and(|(after, after_dir)| {
                (child.as_slice(), kind.is_dir()) <= (after.as_slice(), *after_dir)
            }) {
                continue;
            }
            let wanted = match kind {
                Kind::Key => self.key_wanted(&child),
                Kind::Dir { .. } => self.dir_wanted(&child),
            };
            if wanted {
                children.push(Pending {
                    bound: child,
                    kind,
                    path: entry.path(),
                });
            }
        }
        if children.len() > EXPAND_CAP {
            // Children are distinct by bound and kind (names decode
            // injectively; in format 2 key `a`'s `a%v` and prefix `a/`'s
            // `a` share a bound and differ in kind), so everything after
            // the cap is strictly above what it took in that order.
            children.select_nth_unstable(EXPAND_CAP - 1);
            let rest = children.split_off(EXPAND_CAP);
            let taken = children
                .iter()
                .map(|c| (c.bound.clone(), c.kind.is_dir()))
                .max()
                .expect("the cap is not zero");
            let least = rest
                .into_iter()
                .map(|c| c.bound)
                .min()
                .expect("there is a rest");
            self.heap.push(Reverse(Pending {
                bound: least,
                kind: Kind::Dir {
                    root,
                    after: Some(taken),
                    prefix: bound.to_vec(),
                },
                path: dir.to_path_buf(),
            }));
        }
        self.heap.extend(children.into_iter().map(Reverse));
        Ok(())
    }
}

impl Kind {
    fn is_dir(&self) -> bool {
        matches!(self, Self::Dir { .. })
    }
}

fn whole_dir(prefix: Vec<u8>) -> Kind {
    Kind::Dir {
        root: false,
        after: None,
        prefix,
    }
}

impl Iterator for KeyWalk<'_> {
    /// A key and its version directory.
    type Item = Result<(KeyPath, PathBuf), ObjectError>;

    fn next(&mut self) -> Option<Self::Item> {
        while let Some(Reverse(pending)) = self.heap.pop() {
            match pending.kind {
                Kind::Dir {
                    root,
                    after,
                    prefix,
                } => {
                    if let Err(e) = self.expand(&pending.path, &prefix, root, after.as_ref()) {
                        return Some(Err(e));
                    }
                }
                Kind::Key => {
                    // Only the canonical spelling of a valid key counts:
                    // anything else was not written by this store.
                    let Ok(key) = String::from_utf8(pending.bound) else {
                        continue;
                    };
                    let Ok(key) = ObjectKey::new(key) else {
                        continue;
                    };
                    let path = KeyPath::new(&key);
                    if self.layout.versions_dir(&path) == pending.path {
                        return Some(Ok((path, pending.path)));
                    }
                }
            }
        }
        None
    }
}

/// Splits a version-listing cursor, `key\0version_id`, refusing anything
/// this store could not have handed out.
fn parse_version_cursor(cursor: &str) -> Result<(&str, &str), ObjectError> {
    let malformed = || {
        ObjectError::InvalidArgument(
            format!("{cursor:?} is not a version-listing cursor (key, NUL, version id)").into(),
        )
    };
    let (key, version_id) = cursor.split_once('\0').ok_or_else(malformed)?;
    if ObjectKey::new(key).is_err() || version_seq(version_id).is_none() {
        return Err(malformed());
    }
    Ok((key, version_id))
}

impl FsStore {
    /// `list`.
    pub(super) fn list_current(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<ListPage<ListedObject>, ObjectError> {
        validate_limit(limit)?;
        let lower = cursor.map_or(Lower::Start, |c| Lower::After(c.as_bytes()));
        let mut items: Vec<ListedObject> = Vec::new();
        let mut more = false;
        for found in KeyWalk::new(&self.layout, prefix, lower)? {
            let (key, _) = found?;
            let Some((_, file)) = self.newest(&key)? else {
                continue;
            };
            let header = file.header();
            if header.delete_marker {
                continue;
            }
            if items.len() == limit as usize {
                more = true;
                break;
            }
            items.push(ListedObject {
                key: key.key().to_owned(),
                size: header.size,
                etag: header.etag.clone(),
                content_md5: header.content_md5,
                last_modified_ms: Some(header.last_modified_ms),
            });
        }
        let next = if more {
            items.last().map(|item| item.key.clone())
        } else {
            None
        };
        Ok(ListPage { items, next })
    }

    /// `list_versions`. The cursor is `key\0version_id` of the last item
    /// returned; resuming compares ids rather than looking the version
    /// up, so a page boundary survives that version being deleted.
    pub(super) fn list_all_versions(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<ListPage<ListedVersion>, ObjectError> {
        validate_limit(limit)?;
        let after = cursor.map(parse_version_cursor).transpose()?;
        let lower = after.map_or(Lower::Start, |(key, _)| Lower::From(key.as_bytes()));
        let mut page = VersionPage::new(after, limit);
        for found in KeyWalk::new(&self.layout, prefix, lower)? {
            let (key, dir) = found?;
            if !page.add_key(&key, &dir)? {
                break;
            }
        }
        Ok(page.finish())
    }

    /// `list_key_versions`: only `key`'s own version directory is read,
    /// never its parent (which may hold every other key of the prefix).
    /// Cursors are the same as `list_versions`'s, so one key's listing
    /// can resume from either.
    pub(super) fn list_one_key_versions(
        &self,
        key: &ObjectKey,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<ListPage<ListedVersion>, ObjectError> {
        validate_limit(limit)?;
        let after = cursor.map(parse_version_cursor).transpose()?;
        let mut page = VersionPage::new(after, limit);
        // A cursor of another key: past it (or before it) this key has
        // nothing to resume from; the listing is over or starts whole,
        // as `list_versions(key)` would by key order.
        match after {
            Some((after_key, _)) if after_key > key.as_str() => return Ok(page.finish()),
            _ => {}
        }
        let path = KeyPath::new(key);
        let dir = self.layout.versions_dir(&path);
        page.add_key(&path, &dir)?;
        Ok(page.finish())
    }
}

/// A version listing's page being filled, key by key.
struct VersionPage<'a> {
    after: Option<(&'a str, &'a str)>,
    limit: usize,
    items: Vec<ListedVersion>,
    more: bool,
}

impl<'a> VersionPage<'a> {
    fn new(after: Option<(&'a str, &'a str)>, limit: u32) -> Self {
        Self {
            after,
            limit: limit as usize,
            items: Vec::new(),
            more: false,
        }
    }

    /// Adds `key`'s versions from `dir`, newest first, skipping those the
    /// cursor has passed; `false` once the page is full and more remain.
    fn add_key(&mut self, key: &KeyPath, dir: &Path) -> Result<bool, ObjectError> {
        let ids = version_ids(dir)?;
        let newest = ids.last().cloned();
        for id in ids.iter().rev() {
            if let Some((after_key, after_id)) = self.after
                && key.key() == after_key
                && id.as_str() >= after_id
            {
                continue;
            }
            // Deleted since the directory was read: not listed.
            let Some(file) = VersionFile::open(&dir.join(id), key.key())? else {
                continue;
            };
            if self.items.len() == self.limit {
                self.more = true;
                return Ok(false);
            }
            let header = file.header();
            self.items.push(ListedVersion {
                key: key.key().to_owned(),
                version_id: id.clone(),
                etag: header.etag.clone(),
                content_md5: header.content_md5,
                size: header.size,
                is_current: Some(id) == newest.as_ref(),
                is_delete_marker: header.delete_marker,
                last_modified_ms: Some(header.last_modified_ms),
            });
        }
        Ok(true)
    }

    fn finish(self) -> ListPage<ListedVersion> {
        let next = if self.more {
            self.items
                .last()
                .map(|item| format!("{}\0{}", item.key, item.version_id))
        } else {
            None
        };
        ListPage {
            items: self.items,
            next,
        }
    }
}
