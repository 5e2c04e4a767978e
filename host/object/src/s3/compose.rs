//! Composing a generation on S3: one multipart upload, its metadata
//! declared at creation (where S3 takes it), local parts read and uploaded
//! concurrently, base ranges copied server-side (UploadPartCopy guarded by
//! the base's etag), the part CRCs folded in part order with
//! [`checksum::combine`], and the whole published by a guarded
//! CompleteMultipartUpload with the full-object CRC.
//!
//! The same rules as the generic assembly ([`super::super::compose`]):
//! the spec is checked before anything moves, the base is checked before
//! the upload is created, and every failure after that aborts the upload:
//! an error return leaves nothing pending, and so does a caller that
//! drops the future midway (the abort is then spawned).

use custodian_base::detail::Detail;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use aws_sdk_s3::Client;
use bytes::Bytes;
use tokio::sync::Semaphore;

use super::super::compose::{ComposeSpec, PartSource, validate};
use super::super::{ObjectError, ObjectMeta};
use super::multipart::{Landed, RangeCopy, Upload};
use super::{MAX_PART_NUMBER, MIN_PART_SIZE, S3Store, meta};
use custodian_base::buffer;
use custodian_base::checksum::{self, crc64_nvme};

/// Most bytes of local parts held in memory at once. Bounds a compose's
/// memory whatever the part size: a part larger than this waits until it
/// can hold the whole budget alone.
const LOCAL_BYTES_IN_FLIGHT: u32 = 256 << 20;

/// Aborts the upload if dropped armed: a caller that abandons the compose
/// future must not leave the upload pending.
struct AbortOnDrop {
    client: Client,
    bucket: String,
    full: String,
    upload_id: String,
    armed: bool,
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                key = %self.full,
                upload = %self.upload_id,
                "a compose was dropped outside a runtime; its upload is left to the sweep"
            );
            return;
        };
        let abort = self
            .client
            .abort_multipart_upload()
            .bucket(std::mem::take(&mut self.bucket))
            .key(std::mem::take(&mut self.full))
            .upload_id(std::mem::take(&mut self.upload_id));
        runtime.spawn(async move {
            // Best effort; the uploads sweep catches what this misses.
            let _ = abort.send().await;
        });
    }
}

/// Where a part's bytes come from, with its place in the object.
fn bounds(part: &PartSource) -> (u64, u64) {
    match *part {
        PartSource::Local { offset, len } | PartSource::BaseCopy { offset, len } => (offset, len),
    }
}

/// Reads `len` bytes at `offset` of `path` off the async threads, with
/// their CRC.
async fn read_local(path: PathBuf, offset: u64, len: u64) -> Result<(Bytes, u64), ObjectError> {
    tokio::task::spawn_blocking(move || {
        use std::io::{Read, Seek, SeekFrom};
        let io = |e: std::io::Error| {
            ObjectError::Io(Detail::caused_by(format!("reading {}", path.display()), e))
        };
        let size = usize::try_from(len)
            .map_err(|_| ObjectError::InvalidArgument(format!("a part of {len} bytes").into()))?;
        let mut file = std::fs::File::open(&path).map_err(io)?;
        file.seek(SeekFrom::Start(offset)).map_err(io)?;
        let mut buffer = buffer::zeroed(size);
        file.read_exact(&mut buffer).map_err(io)?;
        let crc = crc64_nvme(&buffer);
        Ok((Bytes::from(buffer), crc))
    })
    .await
    .map_err(|e| ObjectError::Io(Detail::caused_by("a part reader failed", e)))?
}

/// The CRC of all of `path`'s first `len` bytes (only needed when the
/// server keeps no CRC and the spec gave none: metadata is fixed before
/// the first part is read).
async fn file_crc(path: &Path, len: u64) -> Result<u64, ObjectError> {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let file = std::fs::File::open(&path).map_err(|e| {
            ObjectError::Io(Detail::caused_by(format!("opening {}", path.display()), e))
        })?;
        let found = checksum::crc64_nvme_read(file.take(len), 1, |_| {}).map_err(|e| {
            ObjectError::Io(Detail::caused_by(format!("reading {}", path.display()), e))
        })?;
        Ok(found.crc)
    })
    .await
    .map_err(|e| ObjectError::Io(Detail::caused_by("a reader failed", e)))?
}

impl S3Store {
    /// See [`super::super::ObjectStore::compose`] and the module
    /// documentation.
    pub(super) async fn compose_concurrently(
        &self,
        spec: &ComposeSpec<'_>,
    ) -> Result<ObjectMeta, ObjectError> {
        validate(spec, MIN_PART_SIZE, MAX_PART_NUMBER)?;
        let full = self.keys.full(spec.key)?;
        let base_key = spec.base_key.unwrap_or(spec.key);
        let base_full = self.keys.full(base_key)?;
        if let Some(base_etag) = spec.base_etag {
            let base = self.head_full(base_key, &base_full).await?;
            if base.etag != base_etag {
                return Err(ObjectError::PreconditionFailed(
                    format!(
                        "the base {base_key:?} is now {}, not {base_etag}",
                        base.etag
                    )
                    .into(),
                ));
            }
            if !base.copy_source_allowed() {
                return Err(ObjectError::InvalidArgument(
                    format!(
                        "the base {base_key:?} is in storage class {:?}; copying from it would pay \
                     retrieval on every clean byte",
                        base.storage_class
                    )
                    .into(),
                ));
            }
        }
        std::fs::File::open(spec.local_path).map_err(|e| {
            ObjectError::Io(Detail::caused_by(
                format!("opening {}", spec.local_path.display()),
                e,
            ))
        })?;
        let total: u64 = spec.parts.iter().map(|p| bounds(p).1).sum();
        let recorded = if self.crc_in_metadata() {
            Some(match spec.crc64 {
                Some(crc) => crc,
                None => file_crc(spec.local_path, total).await?,
            })
        } else {
            None
        };
        let sent = meta::publish_metadata(&spec.metadata, recorded)?;
        let upload_id = self.start_upload_full(spec.key, &full, sent).await?;
        let mut guard = AbortOnDrop {
            client: self.client.clone(),
            bucket: self.bucket.clone(),
            full: full.clone(),
            upload_id: upload_id.clone(),
            armed: true,
        };
        let result = self
            .assemble(spec, &full, &upload_id, base_key, &base_full)
            .await;
        if result.is_err() {
            // The error is what the caller needs; an abort that fails too
            // is left to the uploads sweep (`list_uploads` shows it).
            let _ = self.abort_full(spec.key, &full, &upload_id).await;
        }
        guard.armed = false;
        result
    }

    async fn assemble(
        &self,
        spec: &ComposeSpec<'_>,
        full: &str,
        upload_id: &str,
        base_key: &str,
        base_full: &str,
    ) -> Result<ObjectMeta, ObjectError> {
        let next = AtomicUsize::new(0);
        let landed: Mutex<Vec<Option<Landed>>> = Mutex::new(vec![None; spec.parts.len()]);
        let budget = Semaphore::new(LOCAL_BYTES_IN_FLIGHT as usize);
        let worker = || async {
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                let Some(part) = spec.parts.get(index) else {
                    return Ok::<(), ObjectError>(());
                };
                // Bounded by max_parts, a u32.
                let number = u32::try_from(index + 1).unwrap_or(u32::MAX);
                let (offset, len) = bounds(part);
                let done = match part {
                    PartSource::Local { .. } => {
                        let permits = u32::try_from(len)
                            .unwrap_or(u32::MAX)
                            .min(LOCAL_BYTES_IN_FLIGHT);
                        let _held = budget.acquire_many(permits).await.map_err(|_| {
                            ObjectError::Io("the compose memory budget closed".into())
                        })?;
                        let (body, crc) =
                            read_local(spec.local_path.to_owned(), offset, len).await?;
                        self.put_part_full(spec.key, full, upload_id, number, body, crc)
                            .await?
                    }
                    PartSource::BaseCopy { .. } => {
                        let base_etag = spec.base_etag.unwrap_or_default();
                        let copy = RangeCopy {
                            source: base_key,
                            source_full: base_full,
                            source_if_match: base_etag,
                            range: offset..offset + len,
                        };
                        self.copy_part_full(spec.key, full, upload_id, number, copy)
                            .await?
                    }
                };
                if let Some(progress) = &spec.progress {
                    progress.fetch_add(len, Ordering::Relaxed);
                }
                landed
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)[index] = Some(done);
            }
        };
        // Four workers: four parts in flight at most. Bounds the
        // connections one compose holds, while keeping several transfers
        // busy (one stream rarely fills a link to S3). The first error
        // drops the other workers, cancelling their requests.
        tokio::try_join!(worker(), worker(), worker(), worker())?;
        let landed: Vec<Landed> = landed
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .into_iter()
            .collect::<Option<_>>()
            .ok_or_else(|| ObjectError::Io("a part did not land".into()))?;
        // In part order: folding out of order is another object's CRC.
        let folded = landed.iter().fold(crc64_nvme(b""), |crc, part| {
            checksum::combine(crc, part.crc64, part.len)
        });
        let crc64 = match spec.crc64 {
            Some(claimed) if claimed != folded => {
                return Err(ObjectError::ChecksumMismatch(
                    format!(
                        "{:?}: the parts fold to CRC-64/NVME {folded:016x}, the caller claimed \
                     {claimed:016x}; nothing was published",
                        spec.key
                    )
                    .into(),
                ));
            }
            Some(claimed) => claimed,
            None => folded,
        };
        let upload = Upload {
            key: spec.key,
            full,
            id: upload_id,
        };
        self.complete_full(upload, landed, &spec.condition, &spec.metadata, crc64)
            .await
    }
}
