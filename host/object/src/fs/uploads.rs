//! Multipart uploads, the primitives `compose` is built on.
//!
//! `uploads/<id>/` holds `meta` (JSON: key, initiated_ms) and one file per
//! part, `part-NNNNN`: the part's bytes followed by a footer (CRC-64/NVME,
//! length, magic). Every file is staged, fsynced and renamed in under the
//! arbiter like a version, so a part is either absent or whole, and
//! re-uploading a part number replaces it atomically. An upload exists
//! exactly while its `meta` does: `create_upload` creates the directory
//! and `meta` in one arbiter hold, abort removes `meta` first, and
//! recovery removes any directory without a readable `meta`.
//!
//! `complete_upload` streams the parts, in order, into one staged version
//! file — checking each part against its footer (a damaged part is
//! `Corrupt`) and the whole against the caller's CRC (`ChecksumMismatch`:
//! nothing published, the upload stays for the caller to abort) — then
//! commits it like a put, and removes the upload in the same arbiter hold,
//! so an upload completes at most once.

use std::fs::File;
use std::io::Read;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{
    CompleteOptions, Metadata, ObjectError, ObjectKey, ObjectMeta, PendingUpload, UploadedPart,
    validate_metadata,
};
use custodian_base::buffer;
use custodian_base::checksum::{Crc64Nvme, crc64_nvme};

use super::durable::{NewDirs, Staged, Target};
use super::ids::is_upload_id;
use super::layout::KeyPath;
use super::lock::Held;
use super::version_file::{BLOCK_SIZE, BlockCrcs, Header};
use super::{FsStore, MIN_PART_SIZE, io_error};
use crate::{MAX_PART_NUMBER, StreamedBody, validate_part_number, validate_range};

/// The upload's record.
pub(super) const META: &str = "meta";
const PART_MAGIC: [u8; 8] = *b"CUSTPRT\n";
/// CRC, length, magic.
const FOOTER_LEN: u64 = 24;
/// Bound on a `meta` file a reader will load (a key is at most 1 KiB).
const MAX_META_BYTES: u64 = 16 * 1024;
/// Bytes moved per read while assembling.
const COPY_CHUNK: usize = 1 << 20;

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct UploadMeta {
    pub key: String,
    pub initiated_ms: u64,
    /// Declared at creation, published at completion. Absent in uploads
    /// created before metadata moved to creation: those publish none, as
    /// every caller of that time completed them with none.
    #[serde(default)]
    pub metadata: Metadata,
}

fn part_name(part: u32) -> String {
    format!("part-{part:05}")
}

fn part_number(name: &str) -> Option<u32> {
    let digits = name.strip_prefix("part-")?;
    if digits.len() != 5 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits
        .parse()
        .ok()
        .filter(|n| (1..=MAX_PART_NUMBER).contains(n))
}

fn no_such_upload(key: &str, upload_id: &str) -> ObjectError {
    ObjectError::NoSuchUpload(format!("{upload_id:?} for {key:?}").into())
}

/// Reads an upload's `meta`; `None` if it has none (aborted, completed, or
/// never finished being created) or it does not decode.
pub(super) fn read_meta(dir: &Path) -> Result<Option<UploadMeta>, ObjectError> {
    let path = dir.join(META);
    let mut bytes = Vec::new();
    match File::open(&path) {
        Ok(file) => file
            .take(MAX_META_BYTES)
            .read_to_end(&mut bytes)
            .map_err(|e| io_error("reading", &path, e))?,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            return Ok(None);
        }
        Err(e) => return Err(io_error("opening", &path, e)),
    };
    Ok(serde_json::from_slice(&bytes).ok())
}

/// One part's file, its footer checked against its length.
struct Part {
    file: File,
    path: PathBuf,
    crc64: u64,
    len: u64,
}

impl Part {
    /// Opens part `number` of the upload in `dir`. A part that is not
    /// there was listed a moment ago, so the upload was aborted or
    /// completed meanwhile: `NoSuchUpload`.
    fn open(dir: &Path, number: u32, key: &str, upload_id: &str) -> Result<Self, ObjectError> {
        let path = dir.join(part_name(number));
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(no_such_upload(key, upload_id));
            }
            Err(e) => return Err(io_error("opening", &path, e)),
        };
        let corrupt = |what: &str| {
            ObjectError::Corrupt(format!("part file {}: {what}", path.display()).into())
        };
        let total = file
            .metadata()
            .map_err(|e| io_error("inspecting", &path, e))?
            .len();
        if total < FOOTER_LEN {
            return Err(corrupt("shorter than its footer"));
        }
        let mut footer = [0u8; FOOTER_LEN as usize];
        file.read_exact_at(&mut footer, total - FOOTER_LEN)
            .map_err(|e| io_error("reading", &path, e))?;
        let field =
            |range: Range<usize>| u64::from_le_bytes(footer[range].try_into().expect("8 bytes"));
        if footer[16..] != PART_MAGIC {
            return Err(corrupt("bad magic"));
        }
        let (crc64, len) = (field(0..8), field(8..16));
        if len != total - FOOTER_LEN {
            return Err(corrupt("its footer disagrees with its length"));
        }
        Ok(Self {
            file,
            path,
            crc64,
            len,
        })
    }
}

fn footer(crc64: u64, len: u64) -> [u8; FOOTER_LEN as usize] {
    let mut footer = [0u8; FOOTER_LEN as usize];
    footer[..8].copy_from_slice(&crc64.to_le_bytes());
    footer[8..16].copy_from_slice(&len.to_le_bytes());
    footer[16..].copy_from_slice(&PART_MAGIC);
    footer
}

impl FsStore {
    /// The directory of upload `upload_id` of `key`, if it exists.
    fn upload_dir(&self, key: &str, upload_id: &str) -> Result<PathBuf, ObjectError> {
        self.upload(key, upload_id).map(|(dir, _)| dir)
    }

    /// The directory and description of upload `upload_id` of `key`, if it
    /// exists.
    fn upload(&self, key: &str, upload_id: &str) -> Result<(PathBuf, UploadMeta), ObjectError> {
        // Anything but a well-formed id names no directory (and never a
        // path outside `uploads/`).
        if !is_upload_id(upload_id) {
            return Err(no_such_upload(key, upload_id));
        }
        let dir = self.layout.upload_dir(upload_id);
        match read_meta(&dir)? {
            Some(meta) if meta.key == key => Ok((dir, meta)),
            _ => Err(no_such_upload(key, upload_id)),
        }
    }

    /// `create_upload`.
    pub(super) fn start_upload(
        &self,
        key: &ObjectKey,
        metadata: &Metadata,
    ) -> Result<String, ObjectError> {
        validate_metadata(metadata)?;
        let upload_id = self.ids.upload_id();
        let meta = UploadMeta {
            key: key.as_str().to_owned(),
            initiated_ms: self.clock.now_ms(),
            metadata: metadata.clone(),
        };
        let mut staged = Staged::create(&self.layout, &self.ids)?;
        staged.write(&serde_json::to_vec(&meta).expect("upload meta serializes"))?;
        let sealed = staged.seal()?;
        let held = self.settled()?;
        let unsynced = sealed.publish(
            &held,
            Target {
                base: &self.layout.uploads,
                dirs: &[&upload_id],
                name: META,
            },
        )?;
        drop(held);
        unsynced.sync()?;
        Ok(upload_id)
    }

    /// Renames a sealed part in, if the upload still exists.
    fn commit_part(
        &self,
        key: &str,
        upload_id: &str,
        part: u32,
        staged: Staged,
    ) -> Result<(), ObjectError> {
        let sealed = staged.seal()?;
        let held = self.settled()?;
        self.upload_dir(key, upload_id)?;
        let unsynced = sealed.publish(
            &held,
            Target {
                base: &self.layout.uploads,
                dirs: &[upload_id],
                name: &part_name(part),
            },
        )?;
        drop(held);
        unsynced.sync()
    }

    /// `upload_part`: the CRC is checked before anything is written.
    pub(super) fn store_part(
        &self,
        key: &str,
        upload_id: &str,
        part: u32,
        body: &[u8],
        crc64: u64,
    ) -> Result<(), ObjectError> {
        // The number first, as before any byte is looked at (`stage_part`
        // checks it again, for the streamed path).
        validate_part_number(part)?;
        let actual = crc64_nvme(body);
        if actual != crc64 {
            return Err(ObjectError::ChecksumMismatch(format!(
                "part {part} of {key:?}: the body's CRC-64/NVME is {actual:016x}, not {crc64:016x}"
            ).into()));
        }
        self.stage_part(key, upload_id, part, |staged| {
            staged.write(body)?;
            Ok((crc64, body.len() as u64))
        })
        .map(drop)
    }

    /// `upload_part_stream`: the part is written to its staging file as
    /// it arrives and checked against its sender's CRC at the end.
    pub(super) fn store_part_streamed(
        &self,
        key: &str,
        upload_id: &str,
        part: u32,
        body: StreamedBody,
        limit: u64,
    ) -> Result<u64, ObjectError> {
        self.stage_part(key, upload_id, part, |staged| {
            let (mut crc, mut len) = (Crc64Nvme::new(), 0u64);
            let sent = body.blocking_drain(limit, |piece| {
                crc.update(piece);
                len += piece.len() as u64;
                staged.write(piece)
            })?;
            let actual = crc.finalize();
            if actual != sent.crc64 {
                return Err(ObjectError::ChecksumMismatch(
                    format!(
                        "part {part} of {key:?}: the streamed body's CRC-64/NVME is \
                         {actual:016x}, its sender computed {:016x}",
                        sent.crc64
                    )
                    .into(),
                ));
            }
            Ok((actual, len))
        })
    }

    /// Stages part `part` of an upload: `fill` writes its body and
    /// answers its CRC and length, which the footer records; then it is
    /// committed. Returns the CRC.
    fn stage_part(
        &self,
        key: &str,
        upload_id: &str,
        part: u32,
        fill: impl FnOnce(&mut Staged) -> Result<(u64, u64), ObjectError>,
    ) -> Result<u64, ObjectError> {
        validate_part_number(part)?;
        // Fail before writing anything for an upload that is gone.
        self.upload_dir(key, upload_id)?;
        let mut staged = Staged::create(&self.layout, &self.ids)?;
        let (crc64, len) = fill(&mut staged)?;
        staged.write(&footer(crc64, len))?;
        self.commit_part(key, upload_id, part, staged)?;
        Ok(crc64)
    }

    /// `upload_part_copy`: a range of the source's current version, which
    /// must lie inside it (as on S3), checked block by block as it is
    /// copied.
    pub(super) fn copy_part(
        &self,
        key: &str,
        upload_id: &str,
        part: u32,
        source: &ObjectKey,
        source_if_match: &str,
        range: Range<u64>,
    ) -> Result<u64, ObjectError> {
        validate_part_number(part)?;
        let source = KeyPath::new(source);
        validate_range(&range)?;
        let (_, file) = self.current(&source)?;
        super::check_etag(source.key(), file.header(), source_if_match)?;
        let size = file.header().size;
        if range.end > size || range.is_empty() {
            return Err(ObjectError::InvalidArgument(
                format!(
                    "copy range {}..{} is outside {:?} ({size} bytes)",
                    range.start,
                    range.end,
                    source.key()
                )
                .into(),
            ));
        }
        self.upload_dir(key, upload_id)?;
        let mut staged = Staged::create(&self.layout, &self.ids)?;
        let mut crc = Crc64Nvme::new();
        file.stream_range(range.clone(), |piece| {
            crc.update(piece);
            staged.write(piece)
        })?;
        let crc64 = crc.finalize();
        staged.write(&footer(crc64, range.end - range.start))?;
        self.commit_part(key, upload_id, part, staged)?;
        Ok(crc64)
    }

    /// `complete_upload`.
    pub(super) fn finish_upload(
        &self,
        key: &ObjectKey,
        upload_id: &str,
        options: CompleteOptions<'_>,
    ) -> Result<ObjectMeta, ObjectError> {
        let CompleteOptions {
            parts,
            condition,
            crc64,
        } = options;
        let key_path = KeyPath::new(key);
        let (dir, upload) = self.upload(key, upload_id)?;
        let present = self.part_numbers(&dir)?;
        if parts == 0 || present.iter().copied().ne(1..=parts) {
            return Err(ObjectError::InvalidArgument(
                format!("upload {upload_id:?} holds parts {present:?}, not exactly 1..={parts}")
                    .into(),
            ));
        }
        // Parts are opened one at a time (an upload may hold 10 000): a
        // first pass for the sizes the header needs, a second to copy.
        let mut sizes = Vec::with_capacity(present.len());
        for &number in &present {
            let part = Part::open(&dir, number, key, upload_id)?;
            if number < parts && part.len < MIN_PART_SIZE {
                return Err(ObjectError::InvalidArgument(
                    format!(
                        "part {number} is {} bytes, under the minimum part of {MIN_PART_SIZE}",
                        part.len
                    )
                    .into(),
                ));
            }
            sizes.push(part.len);
        }
        let size = sizes
            .iter()
            .try_fold(0u64, |total, &len| total.checked_add(len))
            .ok_or_else(|| ObjectError::InvalidArgument("the parts' total overflows u64".into()))?;
        self.precheck(&key_path, condition)?;
        let header = Header {
            key: key.to_string(),
            etag: self.ids.etag(),
            size,
            crc64,
            block_size: BLOCK_SIZE,
            last_modified_ms: self.clock.now_ms(),
            delete_marker: false,
            metadata: upload.metadata,
            // An assembly's MD5 would cost a second pass over every part.
            content_md5: None,
        };
        let mut staged = Staged::create(&self.layout, &self.ids)?;
        staged.write(&header.encode())?;
        let mut crcs = BlockCrcs::default();
        let mut buffer = buffer::zeroed(COPY_CHUNK);
        for (&number, &len) in present.iter().zip(&sizes) {
            let part = Part::open(&dir, number, key, upload_id)?;
            if part.len != len {
                return Err(ObjectError::Conflict(
                    format!("part {number} of upload {upload_id:?} was replaced while completing")
                        .into(),
                ));
            }
            copy_part_body(&part, &mut buffer, |piece| {
                crcs.update(piece);
                staged.write(piece)
            })?;
        }
        let sums = crcs.finish();
        if sums.whole != crc64 {
            return Err(ObjectError::ChecksumMismatch(
                format!(
                    "{key:?}: the assembled object's CRC-64/NVME is {:016x}, not {crc64:016x}",
                    sums.whole
                )
                .into(),
            ));
        }
        staged.write(&sums.trailer)?;
        let sealed = staged.seal()?;
        let held = self.settled()?;
        // Aborted (or completed by someone else) meanwhile?
        let dir = self.upload_dir(key, upload_id)?;
        let mut created = NewDirs::default();
        let committed =
            self.commit_locked(&held, &key_path, &header, sealed, condition, &mut created);
        created.sync(&held)?;
        let (meta, superseded, unsynced) =
            committed.map_err(|refused| self.durable_refusal(&key_path, refused))?;
        // Synced before the upload goes, under the arbiter: removed first,
        // a crash could lose the upload and the object it became alike.
        unsynced.sync()?;
        remove_upload(&held, &dir);
        drop(held);
        superseded.remove();
        Ok(meta)
    }

    /// The part numbers present in an upload, ascending.
    fn part_numbers(&self, dir: &Path) -> Result<Vec<u32>, ObjectError> {
        let mut numbers = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(|e| io_error("listing", dir, e))? {
            let entry = entry.map_err(|e| io_error("listing", dir, e))?;
            if let Some(number) = entry.file_name().to_str().and_then(part_number) {
                numbers.push(number);
            }
        }
        numbers.sort_unstable();
        Ok(numbers)
    }

    /// `list_parts`: each part's footer (checked against its length) and
    /// its file's modification time.
    pub(super) fn uploaded_parts(
        &self,
        key: &str,
        upload_id: &str,
    ) -> Result<Vec<UploadedPart>, ObjectError> {
        let (dir, _) = self.upload(key, upload_id)?;
        let mut parts = Vec::new();
        for number in self.part_numbers(&dir)? {
            let part = Part::open(&dir, number, key, upload_id)?;
            let modified = part
                .file
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .and_then(|d| u64::try_from(d.as_millis()).ok());
            parts.push(UploadedPart {
                number,
                size: part.len,
                crc64: Some(part.crc64),
                last_modified_ms: modified,
            });
        }
        Ok(parts)
    }

    /// `abort_upload`: an absent upload (or one of another key) is fine.
    pub(super) fn drop_upload(&self, key: &str, upload_id: &str) -> Result<(), ObjectError> {
        let held = self.settled()?;
        if let Ok(dir) = self.upload_dir(key, upload_id) {
            remove_upload(&held, &dir);
        }
        Ok(())
    }

    /// `list_uploads`, ordered by id.
    pub(super) fn pending_uploads(&self, prefix: &str) -> Result<Vec<PendingUpload>, ObjectError> {
        let uploads = &self.layout.uploads;
        let mut pending = Vec::new();
        for entry in std::fs::read_dir(uploads).map_err(|e| io_error("listing", uploads, e))? {
            let entry = entry.map_err(|e| io_error("listing", uploads, e))?;
            let Some(id) = entry
                .file_name()
                .to_str()
                .filter(|n| is_upload_id(n))
                .map(str::to_owned)
            else {
                continue;
            };
            let Some(meta) = read_meta(&entry.path())? else {
                continue;
            };
            if meta.key.starts_with(prefix) && ObjectKey::new(meta.key.as_str()).is_ok() {
                pending.push(PendingUpload {
                    key: meta.key,
                    upload_id: id,
                    initiated_ms: Some(meta.initiated_ms),
                });
            }
        }
        pending.sort_by(|a, b| a.upload_id.cmp(&b.upload_id));
        Ok(pending)
    }
}

/// Streams a part's body to `sink`, checking it against its footer.
fn copy_part_body(
    part: &Part,
    buffer: &mut [u8],
    mut sink: impl FnMut(&[u8]) -> Result<(), ObjectError>,
) -> Result<(), ObjectError> {
    let mut crc = Crc64Nvme::new();
    let mut offset = 0;
    while offset < part.len {
        let want =
            usize::try_from(part.len - offset).map_or(buffer.len(), |left| left.min(buffer.len()));
        let piece = &mut buffer[..want];
        part.file
            .read_exact_at(piece, offset)
            .map_err(|e| io_error("reading", &part.path, e))?;
        crc.update(piece);
        sink(piece)?;
        offset += want as u64;
    }
    if crc.finalize() != part.crc64 {
        return Err(ObjectError::Corrupt(
            format!("part file {} does not match its CRC", part.path.display()).into(),
        ));
    }
    Ok(())
}

/// Removes an upload: `meta` first, so a crash midway leaves a directory
/// that is no longer an upload (recovery removes it). Not fsynced: an
/// upload a crash brings back is pending again, and the sweep that
/// lists uploads aborts it.
fn remove_upload(_held: &Held<'_>, dir: &Path) {
    let _ = std::fs::remove_file(dir.join(META));
    let _ = std::fs::remove_dir_all(dir);
}
