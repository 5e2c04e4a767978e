//! The journal: a small publish or a removal made durable by one sync
//! that concurrent changes share, instead of a sync of its file and one
//! of its directory (format 3 stores; see `layout::Format`).
//!
//! A publish of a whole body of at most [`MAX_BODY`] bytes writes its
//! version file to `staging/` as usual but does not sync it. Its group's
//! leader (`group`), holding the arbiter, decides it, appends a record —
//! the version file's path below the root and its exact bytes — to this
//! process's segment in `journal/`, syncs the segment once for the whole
//! group (`fdatasync`), and only then renames the file in. A removal (a
//! delete, or a version's) is a record of the path alone, appended and
//! synced the same way before the file is unlinked. Nothing else is
//! synced before the change is acknowledged: if a crash loses the file,
//! its directories or their names, or brings back an unlinked file, the
//! records put it right.
//!
//! **Settling** makes the filesystem hold, durably, everything the
//! journal says, and empties the journal: every file a removal record
//! names is removed, every other record whose file is missing or differs
//! is restored (written and renamed in), then the whole filesystem is
//! flushed once (`syncfs`), then the segments are removed and `journal/`
//! synced. A segment this process is appending to has had every record
//! made already, so it is not read back.
//!
//! The rules that keep this exactly as safe as syncing every change:
//! - **A change is made only once its record is durable.** The rename or
//!   unlink follows the segment's sync, under the same hold of the
//!   arbiter. So a version anyone can see (or stops seeing) is one the
//!   journal can restore (or remove again), and a crash never leaves a
//!   visible version with unsynced bytes nobody can repair.
//! - **Nothing the journal holds is removed or built upon behind its
//!   back.** A synced publish may land below a directory a journaled
//!   change created, whose name only the journal makes durable, so its
//!   group first syncs every directory that gained such an entry (this
//!   store notes them; another writer's segments are settled anyway,
//!   below). Every other change that does not go through the journal (a
//!   multipart call, recovery's sweep) settles the journal first, under
//!   the arbiter ([`super::FsStore::settled`]). Otherwise a restore after
//!   a crash could bring back a version removed meanwhile, or a synced
//!   publish could be lost with a directory whose own name a crash loses.
//!   The one exception is the removal of versions an unversioned publish
//!   superseded: restoring one of those brings back an older version,
//!   which reads ignore and the next publish or open removes, as after a
//!   crash before that removal.
//! - **No decision is made while a record may be missing from the
//!   filesystem.** A segment not being appended to by this store (another
//!   process's, a crashed one's, or this store's own after a rename or
//!   unlink failed) may hold a record that was never made: its writer was
//!   killed between the sync and the rename. A group's leader settles
//!   such segments before it decides anything, so a guard never passes on
//!   a key such a record would fill (two creates of one key both winning),
//!   and a removal never names a file another segment still holds. With
//!   one process writing, that is never needed.
//! - **Version paths are never reused** (a version id carries 64 random
//!   bits), so a segment's records say the same in any order: a file and
//!   a removal of it in one segment mean the file is gone.
//! - **A record that is not whole ends its segment.** Records are
//!   appended only under the arbiter by the segment's one writer, which
//!   stops using a segment after any failed write or sync; a record is
//!   acknowledged only after a sync that covers it. So only the tail of
//!   a segment can be torn, every record before a torn one was
//!   acknowledged or never answered, and replay stops at the first record
//!   whose length, magic, kind or CRC-64/NVME is wrong.
//! - **A segment's name is durable before its first record counts:**
//!   `journal/` is synced when a segment is created.
//!
//! A segment is settled once it holds [`SEGMENT_BYTES`], so a restore
//! after a crash reads at most that much per writer, and files wait in
//! the page cache no longer than that much publishing. That settle holds
//! the arbiter only to retire the segment and, after the flush, to remove
//! it: changes go on into a new segment meanwhile. `syncfs` flushes
//! the whole filesystem the store is on: on a filesystem shared with
//! other busy writers a settle also waits for their dirty pages.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use custodian_base::checksum::crc64_nvme;

use crate::ObjectError;

use super::ids::Ids;
use super::layout::OBJECTS;
use super::lock::Held;
use super::syncer::fsync_dir;
use super::syncs;
use super::{io_error, locked};

/// Largest body a publish sends through the journal. Larger ones sync
/// their own file as before. The journal saves a sync's fixed cost but
/// writes a body twice (its record, then the file's writeback) and syncs
/// under the arbiter, so it pays only for small bodies (`object_store`
/// bench, AMD EPYC, on this VM's disk): one writer of 4 KiB reached
/// 0.73–0.84× write+fsync through it against 0.40–0.44× synced, but one
/// of 1 MiB 0.72× against 0.76×, and 16 concurrent rewrites of 64 KiB
/// 2 011–2 124 publishes/s against 3 569.
pub(super) const MAX_BODY: usize = 16 * 1024;
/// Bytes a segment holds before it is settled: what a restore reads per
/// writer at most, and how much publishing may wait in the page cache.
pub(super) const SEGMENT_BYTES: u64 = 32 * 1024 * 1024;
/// Zeros written past a segment's records when they reach the end of
/// what was written: one sync in this many bytes of records changes the
/// segment's size.
const ZEROS_AHEAD: u64 = 1024 * 1024;
/// What starts every record.
const MAGIC: [u8; 4] = *b"cjr1";
/// Magic, payload length (u32) and the payload's CRC-64/NVME (u64). The
/// payload: kind (u8), path length (u16), path, bytes.
const RECORD_HEADER: usize = 4 + 4 + 8;
/// Kind and path length, before the path.
const PAYLOAD_HEADER: usize = 1 + 2;
/// Suffix of a segment's file name.
const SEGMENT_SUFFIX: &str = ".log";

/// Proof that a durable journal record holds a file's exact bytes: only
/// this module makes one, after a segment's sync or while restoring from
/// a segment.
#[derive(Debug)]
pub(super) struct Synced(());

/// What a journaled removal takes away: one version, or every version
/// of the key (an unversioned delete).
#[derive(Debug)]
pub(super) enum Removal {
    Version(String),
    Every,
}

/// What a record says of its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// The file there holds exactly the record's bytes.
    File = 0,
    /// No file is there (a version removed; the record has no bytes).
    Removal = 1,
}

/// One record for the journal: a path below the root, and what it holds.
#[derive(Debug, Clone, Copy)]
pub(super) struct Entry<'a> {
    pub kind: Kind,
    /// `/`-separated, below `objects/` (`objects/a/b%v/<version id>`).
    pub path: &'a str,
    pub bytes: &'a [u8],
}

/// The path a record names for version `name` in the version directory
/// whose names below `objects/` are `names`.
pub(super) fn record_path(names: &[String], name: &str) -> String {
    format!("{OBJECTS}/{}/{name}", names.join("/"))
}

/// A file a record holds and the filesystem does not (missing, or with
/// other bytes), to write and rename in.
#[derive(Debug, Clone, Copy)]
pub(super) struct Lost<'a> {
    /// The directories below `objects/` it goes in, outermost first.
    pub dirs: &'a [&'a str],
    /// Its name in the innermost one.
    pub name: &'a str,
    /// Its exact bytes.
    pub bytes: &'a [u8],
}

/// What settling did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Settled {
    /// Segments read back (not this store's own).
    pub read: usize,
    /// Files restored from them.
    pub restored: usize,
    /// Files removed again (a removal a crash undid).
    pub removed: usize,
}

/// The segment this store appends to.
#[derive(Debug)]
struct Segment {
    file: File,
    path: PathBuf,
    /// Bytes of records.
    len: u64,
    /// Bytes written so far, records and the zeros after them.
    written: u64,
}

/// This store's segments: the one it appends to, and full ones whose
/// every record is made, waiting for a flush to be removed.
#[derive(Debug, Default)]
struct Own {
    segment: Option<Segment>,
    retired: Vec<PathBuf>,
}

impl Own {
    /// Whether the segment appended to holds [`SEGMENT_BYTES`].
    fn full(&self) -> bool {
        self.segment
            .as_ref()
            .is_some_and(|s| s.len >= SEGMENT_BYTES)
    }

    /// Whether `path` is one of this store's segments.
    fn holds(&self, path: &Path) -> bool {
        self.segment.as_ref().is_some_and(|s| s.path == path)
            || self.retired.iter().any(|r| r == path)
    }
}

/// One store's view of the journal in `journal/`.
#[derive(Debug)]
pub(super) struct Journal {
    /// The store's root, which records' paths are relative to.
    root: PathBuf,
    dir: PathBuf,
    own: Mutex<Own>,
    /// Directories that gained an entry for a directory this store's
    /// journaled changes created, not synced since: only the journal
    /// makes those names durable (see the module doc).
    new_dirs: Mutex<BTreeSet<PathBuf>>,
}

/// Whose segments a settle removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Keep {
    /// Every segment: the journal is empty afterwards.
    Nothing,
    /// All but this store's own: they stay in use.
    Own,
}

impl Journal {
    /// The journal in `dir` (which exists) of the store at `root`.
    pub fn new(root: PathBuf, dir: PathBuf) -> Self {
        Self {
            root,
            dir,
            own: Mutex::new(Own::default()),
            new_dirs: Mutex::default(),
        }
    }

    /// Appends a record of each entry to this store's segment and syncs
    /// it. On any failure the segment is given up (a later settle reads it
    /// back) and nothing may be made: a record may or may not have
    /// reached the disk, so the changes' outcomes are unknown.
    pub fn append(
        &self,
        _held: &Held<'_>,
        ids: &Ids,
        entries: &[Entry<'_>],
    ) -> Result<Synced, ObjectError> {
        let mut buffer = Vec::with_capacity(
            entries
                .iter()
                .map(|e| RECORD_HEADER + PAYLOAD_HEADER + e.path.len() + e.bytes.len())
                .sum(),
        );
        for entry in entries {
            encode(entry, &mut buffer)?;
        }
        let mut own = locked(&self.own);
        // Another process's settle may have removed it: appending to an
        // unlinked file would be appending to nothing.
        if let Some(segment) = own.segment.as_ref()
            && !segment.file.metadata().is_ok_and(|m| m.nlink() > 0)
        {
            own.segment = None;
        }
        let segment = match own.segment.as_mut() {
            Some(segment) => segment,
            None => own.segment.insert(self.create(ids)?),
        };
        let end = segment.len + buffer.len() as u64;
        // Zeros past the records, written with them now and then, so
        // that most syncs change the file's data and not its size (a sync
        // that changes the size writes the inode too). Zeros end a
        // segment as a torn record does: no record starts with them.
        if end > segment.written {
            let zeros = (end - segment.len).max(ZEROS_AHEAD) as usize;
            buffer.resize(buffer.len() + zeros, 0);
        }
        let written = segment
            .file
            .write_all_at(&buffer, segment.len)
            .and_then(|()| {
                syncs::count(syncs::Kind::Journal);
                segment.file.sync_data()
            });
        if let Err(e) = written {
            let path = segment.path.clone();
            own.segment = None;
            return Err(io_error("appending to journal segment", &path, e));
        }
        segment.written = segment.written.max(segment.len + buffer.len() as u64);
        segment.len = end;
        Ok(Synced(()))
    }

    /// A new segment, its name durable.
    fn create(&self, ids: &Ids) -> Result<Segment, ObjectError> {
        let path = self.dir.join(ids.segment_name());
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| io_error("creating journal segment", &path, e))?;
        fsync_dir(&self.dir)?;
        Ok(Segment {
            file,
            path,
            len: 0,
            written: 0,
        })
    }

    /// Notes `dirs`, which journaled changes gave new directories.
    pub fn note_new_dirs(&self, dirs: impl IntoIterator<Item = PathBuf>) {
        locked(&self.new_dirs).extend(dirs);
    }

    /// The directories noted since they were last taken or the journal
    /// was settled, for a synced publish to sync before it is answered;
    /// whoever takes them notes back any it could not sync.
    pub fn take_new_dirs(&self, _held: &Held<'_>) -> BTreeSet<PathBuf> {
        std::mem::take(&mut *locked(&self.new_dirs))
    }

    /// Stops appending to this store's segment (a change after its sync
    /// failed): the next settle reads it back like any other.
    pub fn abandon(&self) {
        locked(&self.own).segment = None;
    }

    /// Whether this store's segment holds [`SEGMENT_BYTES`], asked
    /// without the arbiter: segments only grow, so the leader whose
    /// append filled it finds it full here, and
    /// [`Journal::retire_if_full`] decides again under the arbiter.
    pub fn full(&self) -> bool {
        locked(&self.own).full()
    }

    /// Retires this store's segment if it holds [`SEGMENT_BYTES`]: every
    /// record in it is made (the arbiter is held, `_held`), so once the
    /// filesystem is flushed ([`Journal::flush`]) it may go
    /// ([`Journal::remove_retired`]). Later changes go to a new segment.
    /// The retired segment, if one was.
    pub fn retire_if_full(&self, _held: &Held<'_>) -> Option<PathBuf> {
        let mut own = locked(&self.own);
        if !own.full() {
            return None;
        }
        let path = own.segment.take()?.path;
        own.retired.push(path.clone());
        Some(path)
    }

    /// Flushes the filesystem holding the store (`syncfs`): every change
    /// made before this call is durable after it. Needs no arbiter.
    pub fn flush(&self) -> Result<(), ObjectError> {
        let dir = File::open(&self.dir).map_err(|e| io_error("opening", &self.dir, e))?;
        syncs::count(syncs::Kind::Filesystem);
        rustix::fs::syncfs(&dir).map_err(|e| {
            io_error(
                "flushing the filesystem holding",
                &self.root,
                std::io::Error::from(e),
            )
        })
    }

    /// Removes `retired`, a segment this store retired and whose changes
    /// a flush since has made durable (another settle may have removed it
    /// already).
    pub fn remove_retired(&self, _held: &Held<'_>, retired: &Path) -> Result<(), ObjectError> {
        locked(&self.own).retired.retain(|r| r != retired);
        self.remove_segments(&[retired.to_path_buf()])
    }

    /// Removes `segments` durably: before anything they hold may be
    /// removed, or a crash could bring it back.
    fn remove_segments(&self, segments: &[PathBuf]) -> Result<(), ObjectError> {
        for segment in segments {
            match std::fs::remove_file(segment) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_error("removing journal segment", segment, e)),
            }
        }
        fsync_dir(&self.dir)
    }

    /// Settles the journal (see the module doc), keeping this store's
    /// segments if `keep` says so; `restore` writes and renames in each
    /// file a record holds and the filesystem lost, vouched for by the
    /// record (`Synced`). Does nothing when there is nothing to settle,
    /// which costs one listing of `journal/`.
    pub fn settle(
        &self,
        _held: &Held<'_>,
        keep: Keep,
        restore: impl FnMut(Lost<'_>, &Synced) -> Result<(), ObjectError>,
    ) -> Result<Settled, ObjectError> {
        let mut own = locked(&self.own);
        let mut others = Vec::new();
        let mut mine = Vec::new();
        let entries =
            std::fs::read_dir(&self.dir).map_err(|e| io_error("listing", &self.dir, e))?;
        for entry in entries {
            let path = entry.map_err(|e| io_error("listing", &self.dir, e))?.path();
            if !path.to_string_lossy().ends_with(SEGMENT_SUFFIX) {
                continue;
            }
            if own.holds(&path) {
                mine.push(path);
            } else {
                others.push(path);
            }
        }
        if keep == Keep::Own {
            mine.clear();
        }
        if others.is_empty() && mine.is_empty() {
            return Ok(Settled::default());
        }
        // This store's own records are all made; the others' are read
        // back and made.
        let mut settled = self.restore(&others, restore)?;
        settled.read = others.len();
        self.flush()?;
        if keep == Keep::Nothing {
            *own = Own::default();
            // The flush made every directory durable, and nothing can
            // have been created since: the arbiter is held.
            locked(&self.new_dirs).clear();
        }
        others.append(&mut mine);
        self.remove_segments(&others)?;
        Ok(settled)
    }

    /// Makes the filesystem show what the records of `segments` say:
    /// removes what a removal record names, and restores, with `restore`,
    /// every file a record holds (and no removal names) that the
    /// filesystem does not (missing, or with other bytes). Version paths
    /// are never reused, so the order of the records, and of the
    /// segments, does not matter: a file and a removal of it mean the
    /// file is gone.
    fn restore(
        &self,
        segments: &[PathBuf],
        mut restore: impl FnMut(Lost<'_>, &Synced) -> Result<(), ObjectError>,
    ) -> Result<Settled, ObjectError> {
        let mut settled = Settled::default();
        let mut read = Vec::new();
        for segment in segments {
            match std::fs::read(segment) {
                Ok(bytes) => read.push((segment, bytes)),
                // Settled meanwhile by another process.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_error("reading journal segment", segment, e)),
            }
        }
        let mut checked = Vec::new();
        for (segment, bytes) in &read {
            for entry in decode(bytes) {
                let names = checked_dirs(entry.path).ok_or_else(|| {
                    ObjectError::Corrupt(
                        format!(
                            "journal segment {} names {:?}, not a path below {OBJECTS}/",
                            segment.display(),
                            entry.path
                        )
                        .into(),
                    )
                })?;
                checked.push((entry, names));
            }
        }
        let mut removed = BTreeSet::new();
        for (entry, _) in checked.iter().filter(|(e, _)| e.kind == Kind::Removal) {
            removed.insert(entry.path);
            let path = self.root.join(entry.path);
            match std::fs::remove_file(&path) {
                Ok(()) => settled.removed += 1,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_error("removing", &path, e)),
            }
        }
        for (entry, names) in checked.iter().filter(|(e, _)| e.kind == Kind::File) {
            if removed.contains(entry.path)
                || std::fs::read(self.root.join(entry.path)).is_ok_and(|found| found == entry.bytes)
            {
                continue;
            }
            let (name, dirs) = names.split_last().expect("checked_dirs names a file");
            restore(
                Lost {
                    dirs,
                    name,
                    bytes: entry.bytes,
                },
                &Synced(()),
            )?;
            settled.restored += 1;
        }
        Ok(settled)
    }
}

/// The names below `objects/` of a record's path (the file's last), if
/// it is one this store writes: relative, below `objects/`, no empty,
/// `.` or `..` name.
fn checked_dirs(path: &str) -> Option<Vec<&str>> {
    let mut names = path.split('/');
    if names.next() != Some(OBJECTS) {
        return None;
    }
    let names: Vec<&str> = names.collect();
    let fine = !names.is_empty()
        && names
            .iter()
            .all(|n| !n.is_empty() && *n != "." && *n != ".." && !n.contains('\0'));
    fine.then_some(names)
}

/// Appends `entry`'s record to `out`.
fn encode(entry: &Entry<'_>, out: &mut Vec<u8>) -> Result<(), ObjectError> {
    let too_long = || ObjectError::InvalidArgument("a journal record too long".into());
    let path_len = u16::try_from(entry.path.len()).map_err(|_| too_long())?;
    let payload_len = PAYLOAD_HEADER + entry.path.len() + entry.bytes.len();
    let payload_len = u32::try_from(payload_len).map_err(|_| too_long())?;
    let start = out.len();
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&payload_len.to_le_bytes());
    // The CRC, once the payload is there.
    out.extend_from_slice(&[0; 8]);
    let payload = out.len();
    out.push(entry.kind as u8);
    out.extend_from_slice(&path_len.to_le_bytes());
    out.extend_from_slice(entry.path.as_bytes());
    out.extend_from_slice(entry.bytes);
    let crc = crc64_nvme(&out[payload..]);
    out[start + 8..payload].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// The whole records at the start of `segment`, up to the first that is
/// not (see the module doc: only a tail can be torn).
fn decode(segment: &[u8]) -> Vec<Entry<'_>> {
    let mut entries = Vec::new();
    let mut rest = segment;
    while let Some((entry, after)) = decode_one(rest) {
        entries.push(entry);
        rest = after;
    }
    entries
}

/// The record at the start of `bytes` and what follows it, if it is
/// whole.
fn decode_one(bytes: &[u8]) -> Option<(Entry<'_>, &[u8])> {
    let header = bytes.get(..RECORD_HEADER)?;
    if header[..4] != MAGIC {
        return None;
    }
    let len = u32::from_le_bytes(header[4..8].try_into().ok()?) as usize;
    let crc = u64::from_le_bytes(header[8..16].try_into().ok()?);
    let payload = bytes.get(RECORD_HEADER..RECORD_HEADER.checked_add(len)?)?;
    if crc64_nvme(payload) != crc {
        return None;
    }
    let kind = match payload.first()? {
        0 => Kind::File,
        1 => Kind::Removal,
        _ => return None,
    };
    let path_len = u16::from_le_bytes(payload.get(1..PAYLOAD_HEADER)?.try_into().ok()?) as usize;
    let path = std::str::from_utf8(payload.get(PAYLOAD_HEADER..PAYLOAD_HEADER + path_len)?).ok()?;
    let entry = Entry {
        kind,
        path,
        bytes: &payload[PAYLOAD_HEADER + path_len..],
    };
    Some((entry, &bytes[RECORD_HEADER + len..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(path: &str, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let kind = Kind::File;
        encode(&Entry { kind, path, bytes }, &mut out).unwrap();
        out
    }

    #[test]
    fn records_read_back_as_written_until_one_is_torn() {
        let mut segment = record("objects/a%v/1", b"first");
        segment.extend(record("objects/b%v/2", b""));
        let whole = segment.len();
        segment.extend(record("objects/c%v/3", b"third, cut short"));
        let read: Vec<(&str, &[u8])> = decode(&segment[..whole])
            .iter()
            .map(|e| (e.path, e.bytes))
            .collect();
        assert_eq!(
            read,
            [
                ("objects/a%v/1", &b"first"[..]),
                ("objects/b%v/2", &b""[..])
            ]
        );
        // Every cut inside the third record leaves the first two.
        for cut in whole..segment.len() {
            assert_eq!(decode(&segment[..cut]).len(), 2, "cut at {cut}");
        }
        assert_eq!(decode(&segment).len(), 3);
    }

    #[test]
    fn a_record_with_a_flipped_bit_ends_the_segment_there() {
        let records = [
            record("objects/a%v/1", b"first"),
            record("objects/b%v/2", b"second"),
            record("objects/c%v/3", b"third"),
        ];
        let segment = records.concat();
        let mut start = 0;
        for (n, one) in records.iter().enumerate() {
            for byte in start..start + one.len() {
                let mut flipped = segment.clone();
                flipped[byte] ^= 0x10;
                assert_eq!(decode(&flipped).len(), n, "flip at {byte}");
            }
            start += one.len();
        }
    }

    #[test]
    fn a_removal_in_any_segment_wins_over_the_file_in_another_whatever_their_order() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("journal");
        std::fs::create_dir(&dir).unwrap();
        let (first, second) = (dir.join("a.log"), dir.join("b.log"));
        let files = [
            record("objects/k%v/1", b"one"),
            record("objects/k%v/2", b"two"),
        ];
        std::fs::write(&first, files.concat()).unwrap();
        let mut removal = Vec::new();
        let (kind, path, bytes) = (Kind::Removal, "objects/k%v/1", &[][..]);
        encode(&Entry { kind, path, bytes }, &mut removal).unwrap();
        std::fs::write(&second, removal).unwrap();
        let journal = Journal::new(root.path().to_path_buf(), dir);
        let removed = root.path().join("objects/k%v/1");
        for order in [[&first, &second], [&second, &first]] {
            // As a crash that undid the unlink leaves it.
            std::fs::create_dir_all(removed.parent().unwrap()).unwrap();
            std::fs::write(&removed, b"one").unwrap();
            let mut restored = Vec::new();
            let segments: Vec<PathBuf> = order.iter().map(|p| p.to_path_buf()).collect();
            let settled = journal
                .restore(&segments, |lost, _| {
                    restored.push(lost.name.to_owned());
                    Ok(())
                })
                .unwrap();
            assert_eq!(restored, ["2"], "{order:?}");
            assert_eq!((settled.restored, settled.removed), (1, 1));
            assert!(!removed.exists(), "{order:?}");
        }
    }

    #[test]
    fn only_paths_below_objects_are_restored() {
        assert_eq!(checked_dirs("objects/a/b%v/1"), Some(vec!["a", "b%v", "1"]));
        for bad in [
            "",
            "objects",
            "objects/",
            "staging/x",
            "/objects/a",
            "objects/../lock",
            "objects/a/./b",
            "objects/a//b",
        ] {
            assert_eq!(checked_dirs(bad), None, "{bad:?}");
        }
    }
}
