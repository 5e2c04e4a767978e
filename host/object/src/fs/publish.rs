//! Everything that changes a key: publish (whole, copy, composed), delete,
//! delete one version. Every change to `objects/` happens under the
//! arbiter; every new version arrives through [`durable`](super::durable).

use std::path::{Path, PathBuf};

use crate::{
    CopyOptions, Metadata, ObjectError, ObjectKey, ObjectMeta, PutCondition, PutOptions,
    StreamedBody, validate_metadata,
};

use super::durable::{NewDirs, Payload, Sealed, Staged, Target, Unsynced};
use super::ids::version_seq;
use super::journal::{self, Removal};
use super::layout::KeyPath;
use super::lock::Held;
use super::syncer::{fsync_dir, sync_dir};
use super::version_file::{BLOCK_SIZE, BlockCrcs, Header, VersionFile, checksums};
use super::versions::version_ids;
use super::{FsStore, io_error};

/// Whether a publish under `condition` may replace `newest` (the key's
/// newest version, a delete marker included).
fn check_condition(
    key: &str,
    newest: Option<&Header>,
    condition: &PutCondition,
) -> Result<(), ObjectError> {
    condition.check(
        key,
        newest.filter(|h| !h.delete_marker).map(|h| h.etag.as_str()),
    )
}

/// A publish decided under the arbiter, not yet renamed in.
#[derive(Debug)]
pub(super) struct Decision {
    /// The new version's id, its file's name.
    pub version_id: String,
    /// The names below `objects/` of the key's version directory.
    names: Vec<String>,
    /// What it replaces on an unversioned store.
    pub superseded: Superseded,
}

impl Decision {
    /// The names below `objects/` of the key's version directory.
    pub fn dirs(&self) -> Vec<&str> {
        self.names.iter().map(String::as_str).collect()
    }

    /// The file's path below the root, `/`-separated, for its journal
    /// record.
    pub fn journal_path(&self) -> String {
        journal::record_path(&self.names, &self.version_id)
    }
}

/// The versions an unversioned publish replaced.
///
/// Removed after the arbiter is released (freeing a large file's blocks
/// takes a while, and nobody needs to wait for it): only versions older
/// than the one just published are named, so the current object is never
/// touched, and a concurrent delete or publish removing the same files
/// first is harmless. Not fsynced: a removal a crash undoes leaves an
/// older version that reads ignore and the next publish or open removes.
#[derive(Debug)]
#[must_use = "superseded versions are removed by `remove`"]
pub(super) struct Superseded(Vec<PathBuf>);

impl Superseded {
    pub fn remove(self) {
        for path in self.0 {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl FsStore {
    /// The header of a new version of `key` with a body.
    fn new_header(
        &self,
        key: &KeyPath,
        (size, crc64, content_md5): (u64, u64, Option<[u8; 16]>),
        metadata: &Metadata,
    ) -> Header {
        Header {
            key: key.key().to_owned(),
            etag: self.ids.etag(),
            size,
            crc64,
            block_size: BLOCK_SIZE,
            last_modified_ms: self.clock.now_ms(),
            delete_marker: false,
            metadata: metadata.clone(),
            content_md5,
        }
    }

    /// Fails fast, before any byte is written, when `condition` already
    /// does not hold. Sound without the arbiter: an etag is never issued
    /// twice, so a guard that fails now was false at a real instant, and
    /// the publish may be ordered there. The decisive check is repeated
    /// under the arbiter.
    pub(super) fn precheck(
        &self,
        key: &KeyPath,
        condition: &PutCondition,
    ) -> Result<(), ObjectError> {
        if *condition == PutCondition::Unconditional {
            return Ok(());
        }
        let newest = self.newest(key)?;
        check_condition(
            key.key(),
            newest.as_ref().map(|(_, f)| f.header()),
            condition,
        )
        .map_err(|refused| self.durable_refusal(key, refused))
    }

    /// `refused`, once what it was decided on is durable. A guard is
    /// judged on the versions the key's directory shows, and one of them
    /// may be a publish whose directory sync has not run yet (see
    /// `durable`); a caller must never act on a 412 a crash could undo
    /// (a create refused as "already there", after which nothing is).
    /// Syncing the directory makes every version in it durable.
    pub(super) fn durable_refusal(&self, key: &KeyPath, refused: ObjectError) -> ObjectError {
        if !matches!(refused, ObjectError::PreconditionFailed(_)) {
            return refused;
        }
        let dir = self.layout.versions_dir(key);
        // No directory, no version the refusal could rest on.
        if dir.exists()
            && let Err(e) = fsync_dir(&dir)
        {
            return e;
        }
        refused
    }

    /// Decides a publish of `key` under `condition`, the arbiter held
    /// (`_held`): the guard against the key's newest version, and the new
    /// version's id. The caller renames the file in before it releases the
    /// arbiter, or the decision means nothing.
    pub(super) fn decide(
        &self,
        _held: &Held<'_>,
        key: &KeyPath,
        condition: &PutCondition,
    ) -> Result<Decision, ObjectError> {
        let dir = self.layout.versions_dir(key);
        let existing = version_ids(&dir)?;
        if *condition != PutCondition::Unconditional {
            let newest = match existing.last() {
                // Under the arbiter nothing can remove it: a missing file
                // was removed behind the store's back.
                Some(id) => {
                    Some(VersionFile::open(&dir.join(id), key.key())?.ok_or_else(|| {
                        ObjectError::Io(
                            format!("{} vanished under the arbiter", dir.join(id).display()).into(),
                        )
                    })?)
                }
                None => None,
            };
            check_condition(
                key.key(),
                newest.as_ref().map(VersionFile::header),
                condition,
            )?;
        }
        let seq = match existing.last() {
            Some(id) => version_seq(id)
                .and_then(|seq| seq.checked_add(1))
                .ok_or_else(|| {
                    ObjectError::Unsupported(
                        format!("{:?} has run out of version numbers", key.key()).into(),
                    )
                })?,
            None => 1,
        };
        let superseded = if self.versioned {
            Vec::new()
        } else {
            existing.iter().map(|old| dir.join(old)).collect()
        };
        Ok(Decision {
            version_id: self.ids.version_id(seq),
            names: self.layout.versions_names(key),
            superseded: Superseded(superseded),
        })
    }

    /// Publishes a sealed version file of `key` if `condition` holds; the
    /// caller holds the arbiter. Directories the publish creates are added
    /// to `created`, which the caller syncs before it releases the
    /// arbiter. The rename is made durable by the returned [`Unsynced`],
    /// which the caller may sync after releasing the arbiter (see
    /// `durable`). On an unversioned store the versions it replaced are
    /// returned for the caller to remove once that sync has returned:
    /// removed before, a crash could lose the old version and the new
    /// one's name alike.
    pub(super) fn commit_locked(
        &self,
        held: &Held<'_>,
        key: &KeyPath,
        header: &Header,
        sealed: Sealed,
        condition: &PutCondition,
        created: &mut NewDirs,
    ) -> Result<(ObjectMeta, Superseded, Unsynced), ObjectError> {
        let decision = self.decide(held, key, condition)?;
        let unsynced = sealed.publish_recording(
            held,
            Target {
                base: &self.layout.objects,
                dirs: &decision.dirs(),
                name: &decision.version_id,
            },
            created,
        )?;
        Ok((
            self.meta(key.key(), &decision.version_id, header),
            decision.superseded,
            unsynced,
        ))
    }

    /// Seals and commits one version, in a group with concurrent
    /// publishes (see `group`).
    fn publish_staged(
        &self,
        key: &KeyPath,
        header: Header,
        staged: Staged,
        condition: &PutCondition,
    ) -> Result<ObjectMeta, ObjectError> {
        let sealed = staged.seal()?;
        self.publish_grouped(key, header, Payload::Sealed(sealed), condition)
    }

    /// Commits one version, in a group with concurrent publishes (see
    /// `group`).
    fn publish_grouped(
        &self,
        key: &KeyPath,
        header: Header,
        payload: Payload,
        condition: &PutCondition,
    ) -> Result<ObjectMeta, ObjectError> {
        let (meta, superseded, unsynced) = self
            .commit_grouped(key, header, payload, condition)
            .map_err(|refused| self.durable_refusal(key, refused))?;
        // Concurrent publishes sync their directories side by side.
        unsynced.sync()?;
        superseded.remove();
        Ok(meta)
    }

    /// `put_opts`.
    pub(super) fn put_bytes(
        &self,
        key: &ObjectKey,
        body: &[u8],
        options: PutOptions<'_>,
    ) -> Result<ObjectMeta, ObjectError> {
        let PutOptions {
            condition,
            metadata,
            crc64,
            content_md5,
        } = options;
        let key = KeyPath::new(key);
        validate_metadata(metadata)?;
        // One pass: the full-object CRC the caller is checked against and
        // the block CRCs reads are checked against.
        let sums = checksums(body);
        if sums.whole != crc64 {
            return Err(ObjectError::ChecksumMismatch(
                format!(
                    "{:?}: the body's CRC-64/NVME is {:016x}, the caller claimed {crc64:016x}",
                    key.key(),
                    sums.whole
                )
                .into(),
            ));
        }
        self.precheck(&key, condition)?;
        let header = self.new_header(&key, (sums.len, crc64, content_md5), metadata);
        let mut staged = Staged::create(&self.layout, &self.ids)?;
        if self.journal.is_some() && body.len() <= journal::MAX_BODY {
            // Through the journal: the file's bytes once more, in memory,
            // for its record.
            let encoded = header.encode();
            let mut bytes = Vec::with_capacity(encoded.len() + body.len() + sums.trailer.len());
            bytes.extend_from_slice(&encoded);
            bytes.extend_from_slice(body);
            bytes.extend_from_slice(&sums.trailer);
            staged.write(&bytes)?;
            return self.publish_grouped(
                &key,
                header,
                Payload::Logged { staged, bytes },
                condition,
            );
        }
        staged.write(&header.encode())?;
        staged.write(body)?;
        staged.write(&sums.trailer)?;
        self.publish_staged(&key, header, staged, condition)
    }

    /// `put_stream`: the body is written to the staging file as it
    /// arrives, after a hole the header fills once the size and
    /// checksums are known, so nothing but the piece in hand is held.
    pub(super) fn put_streamed(
        &self,
        key: &ObjectKey,
        body: StreamedBody,
        limit: u64,
        condition: &PutCondition,
        metadata: &Metadata,
    ) -> Result<ObjectMeta, ObjectError> {
        let key = KeyPath::new(key);
        validate_metadata(metadata)?;
        self.precheck(&key, condition)?;
        let mut header = self.new_header(&key, (0, 0, None), metadata);
        let reserved = header.encoded_len_at_most();
        let mut staged = Staged::create(&self.layout, &self.ids)?;
        staged.skip(reserved as u64)?;
        let mut crcs = BlockCrcs::default();
        let sent = body.blocking_drain(limit, |piece| {
            crcs.update(piece);
            staged.write(piece)
        })?;
        let sums = crcs.finish();
        if sums.whole != sent.crc64 {
            return Err(ObjectError::ChecksumMismatch(
                format!(
                    "{:?}: the streamed body's CRC-64/NVME is {:016x}, its sender computed \
                     {:016x}",
                    key.key(),
                    sums.whole,
                    sent.crc64
                )
                .into(),
            ));
        }
        header.size = sums.len;
        header.crc64 = sums.whole;
        header.content_md5 = sent.content_md5;
        // When the body was complete, as S3 dates an upload.
        header.last_modified_ms = self.clock.now_ms();
        staged.write(&sums.trailer)?;
        staged.write_at(&header.encode_padded(reserved), 0)?;
        self.publish_staged(&key, header, staged, condition)
    }

    /// `copy_opts`: the source's bytes (checked block by block as they
    /// are copied) under a new etag and exactly `metadata`.
    pub(super) fn copy(
        &self,
        source: &ObjectKey,
        destination: &ObjectKey,
        options: CopyOptions<'_>,
    ) -> Result<ObjectMeta, ObjectError> {
        let CopyOptions {
            source_if_match,
            condition,
            metadata,
        } = options;
        let source = KeyPath::new(source);
        let destination = KeyPath::new(destination);
        validate_metadata(metadata)?;
        // The open file is that version for good, whatever is published
        // at the source key meanwhile.
        let (_, file) = self.current(&source)?;
        if let Some(want) = source_if_match {
            super::check_etag(source.key(), file.header(), want)?;
        }
        self.precheck(&destination, condition)?;
        let (size, crc64) = (file.header().size, file.header().crc64);
        // Same bytes, same MD5: the copy keeps it like the CRC.
        let header = self.new_header(
            &destination,
            (size, crc64, file.header().content_md5),
            metadata,
        );
        let mut staged = Staged::create(&self.layout, &self.ids)?;
        staged.write(&header.encode())?;
        let mut crcs = BlockCrcs::default();
        file.stream_range(0..size, |piece| {
            crcs.update(piece);
            staged.write(piece)
        })?;
        let sums = crcs.finish();
        if (sums.whole, sums.len) != (crc64, size) {
            return Err(ObjectError::Corrupt(
                format!(
                    "{:?}: the copied bytes do not match the source's recorded CRC",
                    source.key()
                )
                .into(),
            ));
        }
        staged.write(&sums.trailer)?;
        self.publish_staged(&destination, header, staged, condition)
    }

    /// `delete_opts` of the current object: a delete marker on a versioned store (always, as on S3,
    /// even for an absent key); otherwise every version goes.
    pub(super) fn delete_key(&self, key: &ObjectKey) -> Result<(), ObjectError> {
        let key = KeyPath::new(key);
        if self.versioned {
            let header = Header {
                key: key.key().to_owned(),
                etag: String::new(),
                size: 0,
                crc64: 0,
                block_size: BLOCK_SIZE,
                last_modified_ms: self.clock.now_ms(),
                delete_marker: true,
                metadata: Metadata::new(),
                content_md5: None,
            };
            let mut staged = Staged::create(&self.layout, &self.ids)?;
            let bytes = header.encode();
            staged.write(&bytes)?;
            let payload = if self.journal.is_some() {
                // A header alone: as small as a publish gets.
                Payload::Logged { staged, bytes }
            } else {
                Payload::Sealed(staged.seal()?)
            };
            self.publish_grouped(&key, header, payload, &PutCondition::Unconditional)?;
            return Ok(());
        }
        if self.journal.is_some() {
            return self.remove_grouped(&key, Removal::Every);
        }
        let dir = self.layout.versions_dir(&key);
        {
            let _held = self.settled()?;
            remove_versions(&dir, &version_ids(&dir)?)?;
        }
        self.settle_removal(&dir)
    }

    /// `delete_opts` of a version: removes exactly that file; an absent one is fine.
    pub(super) fn remove_version(
        &self,
        key: &ObjectKey,
        version_id: &str,
    ) -> Result<(), ObjectError> {
        let key = KeyPath::new(key);
        if version_seq(version_id).is_none() {
            // Names no file this store can have written.
            return Ok(());
        }
        if self.journal.is_some() {
            return self.remove_grouped(&key, Removal::Version(version_id.to_owned()));
        }
        let dir = self.layout.versions_dir(&key);
        let path = dir.join(version_id);
        {
            let _held = self.settled()?;
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                // Gone already, perhaps by a removal whose sync has not
                // run yet: settled below all the same.
                Err(e) if is_gone(&e) => {}
                Err(e) => return Err(io_error("deleting", &path, e)),
            }
        }
        self.settle_removal(&dir)
    }

    /// Makes durable the removals just made from `versions_dir` under the
    /// arbiter, then prunes it if it is empty. Called after the arbiter
    /// was released, so removals from many keys wait on their directory
    /// syncs side by side rather than one after the other under it.
    ///
    /// Why the sync may run outside the arbiter:
    /// - a publisher whose guard was decided on the removal (a create
    ///   that found the key gone) fsyncs the same directory before it is
    ///   acknowledged, and a refusal decided on it is made durable first
    ///   (`durable_refusal`): nobody acts on a removal a crash could undo;
    /// - the directory may be pruned meanwhile by another removal from it,
    ///   whose sync may have run before our file went. Then the arbiter is
    ///   taken (so every directory created meanwhile has had its parent
    ///   synced) and the nearest ancestor still there is fsynced: the
    ///   pruning is durable, and what the directory held can no longer
    ///   come back.
    ///
    /// The caller returns only after this, so a removal is acknowledged
    /// only once durable, as before.
    fn settle_removal(&self, versions_dir: &Path) -> Result<(), ObjectError> {
        let gone = match sync_dir(versions_dir) {
            Ok(()) => false,
            Err(e) if is_gone(&e) => true,
            Err(e) => return Err(io_error("fsyncing directory", versions_dir, e)),
        };
        let _held = self.settled()?;
        if !gone {
            // Pruned only after the sync: a pruned directory whose
            // removal a crash undid would bring the version back.
            self.prune(versions_dir);
            return Ok(());
        }
        let mut at = versions_dir;
        while let Some(parent) = at.parent().filter(|_| at != self.layout.objects) {
            at = parent;
            match sync_dir(at) {
                Ok(()) => return Ok(()),
                Err(e) if is_gone(&e) => {}
                Err(e) => return Err(io_error("fsyncing directory", at, e)),
            }
        }
        Err(ObjectError::Io(
            format!(
                "no directory above {} is left to sync",
                versions_dir.display()
            )
            .into(),
        ))
    }

    /// Removes a version directory that has become empty, and then every
    /// ancestor below `objects/` that has too. Called under the arbiter
    /// (publishers create directories only under it). Not fsynced: an
    /// empty directory a crash brings back holds no key.
    pub(super) fn prune(&self, versions_dir: &Path) {
        let mut dir = versions_dir;
        while dir != self.layout.objects && dir.starts_with(&self.layout.objects) {
            if std::fs::remove_dir(dir).is_err() {
                // Not empty (or already gone): everything above stays.
                break;
            }
            match dir.parent() {
                Some(parent) => dir = parent,
                None => break,
            }
        }
    }
}

/// Removes each of `versions` from `dir`; one already gone is fine.
pub(super) fn remove_versions(dir: &Path, versions: &[String]) -> Result<(), ObjectError> {
    for id in versions {
        let path = dir.join(id);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error("deleting", &path, e)),
        }
    }
    Ok(())
}

/// Whether `error` says a path is no longer there (or a component of it
/// is no longer a directory).
fn is_gone(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
    )
}
