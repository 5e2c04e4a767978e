//! Composing a generation: one published object assembled, in object
//! order, from local byte ranges and server-side copies of ranges of a
//! base generation.
//!
//! Written once over the multipart primitives of [`ObjectStore`], so every
//! backend has the same rules:
//!
//! - parts are contiguous from offset 0; every part but the last is at
//!   least the store's `min_part_size`, and there are at most `max_parts`;
//! - `base_etag` is required exactly when a base-copy part exists, and the
//!   base is checked (etag, copy-source storage class) before anything
//!   moves;
//! - the full-object CRC comes from local truth (`crc64`) or, when it is
//!   `None`, is accumulated from the local parts as they are read — which
//!   is only possible with no base-copy part, so such a spec is refused
//!   before any part moves;
//! - `progress` advances by each part's length as it lands;
//! - every failure after the upload is created aborts it: an error return
//!   leaves nothing pending under the key.

use custodian_base::detail::Detail;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

use super::{
    CompleteOptions, HeadOptions, Metadata, ObjectError, ObjectKey, ObjectMeta, ObjectStore,
    PartData, PutCondition, UploadOptions,
};
use custodian_base::{buffer, checksum};

/// One part of a composed generation, in object order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartSource {
    /// Bytes `[offset, offset + len)` read from the local file.
    Local {
        /// Where the part starts, in the object and in the file.
        offset: u64,
        /// Its length.
        len: u64,
    },
    /// Bytes `[offset, offset + len)` copied server-side from the base
    /// generation, guarded by the base's etag.
    BaseCopy {
        /// Where the part starts, in the object and in the base.
        offset: u64,
        /// Its length.
        len: u64,
    },
}

impl PartSource {
    fn range(self) -> (u64, u64) {
        match self {
            PartSource::Local { offset, len } | PartSource::BaseCopy { offset, len } => {
                (offset, len)
            }
        }
    }
}

/// The order for one composed publish.
#[derive(Debug, Clone)]
pub struct ComposeSpec<'a> {
    /// The key to publish.
    pub key: &'a ObjectKey,
    /// Where `Local` parts are read from. Clean ranges are identical locally
    /// and remotely, so the whole object's CRC is computable from this file.
    pub local_path: &'a Path,
    /// Contiguous from offset 0, in object order.
    pub parts: Vec<PartSource>,
    /// Where the base generation lives when it is not `key` (a renamed
    /// file still copies its clean ranges from the old key).
    pub base_key: Option<&'a ObjectKey>,
    /// The base generation's etag; required iff a part is `BaseCopy`.
    pub base_etag: Option<&'a str>,
    /// The guard on the publish.
    pub condition: PutCondition,
    /// Metadata (stamps) of the new generation.
    pub metadata: Metadata,
    /// The whole object's CRC-64/NVME from local truth; `None` accumulates
    /// it from the local parts (refused when a part is `BaseCopy`).
    pub crc64: Option<u64>,
    /// Bytes landed so far, for a caller proving liveness on a long
    /// compose. Advanced by each part's length, local or copied.
    pub progress: Option<Arc<AtomicU64>>,
}

fn invalid(message: String) -> ObjectError {
    ObjectError::InvalidArgument(message.into())
}

/// Checks a spec against every rule that does not need the store (backends
/// that assemble a spec their own way check it with this too).
pub(crate) fn validate(
    spec: &ComposeSpec<'_>,
    min_part: u64,
    max_parts: u32,
) -> Result<(), ObjectError> {
    super::validate_metadata(&spec.metadata)?;
    if spec.parts.is_empty() {
        return Err(invalid("a composed object needs at least one part".into()));
    }
    if spec.parts.len() > max_parts as usize {
        return Err(invalid(format!(
            "{} parts exceed this store's {max_parts}",
            spec.parts.len()
        )));
    }
    let mut end = 0u64;
    for (index, part) in spec.parts.iter().enumerate() {
        let (offset, len) = part.range();
        if offset != end {
            return Err(invalid(format!(
                "part {} starts at {offset}, not at {end}: parts must be contiguous from 0",
                index + 1
            )));
        }
        if len == 0 {
            return Err(invalid(format!("part {} is empty", index + 1)));
        }
        if index + 1 < spec.parts.len() && len < min_part {
            return Err(invalid(format!(
                "part {} is {len} bytes, under this store's minimum part of {min_part}",
                index + 1
            )));
        }
        end = offset
            .checked_add(len)
            .ok_or_else(|| invalid("parts overflow u64".into()))?;
    }
    let copies = spec
        .parts
        .iter()
        .any(|p| matches!(p, PartSource::BaseCopy { .. }));
    match (copies, spec.base_etag) {
        (true, None) => Err(invalid("a base-copy part needs the base etag".into())),
        (false, Some(_)) => Err(invalid("a base etag without any base-copy part".into())),
        (true, Some(_)) if spec.crc64.is_none() => Err(invalid(
            "no CRC given and a base-copy part is never read locally, so the object's CRC \
             cannot be accumulated; refused before any part moves"
                .into(),
        )),
        _ => Ok(()),
    }
}

fn read_local(
    file: &mut std::fs::File,
    path: &Path,
    offset: u64,
    len: u64,
) -> Result<Bytes, ObjectError> {
    let io = |e: std::io::Error| {
        ObjectError::Io(Detail::caused_by(format!("reading {}", path.display()), e))
    };
    let len = usize::try_from(len).map_err(|_| invalid(format!("a part of {len} bytes")))?;
    let mut buffer = buffer::zeroed(len);
    file.seek(SeekFrom::Start(offset)).map_err(io)?;
    file.read_exact(&mut buffer).map_err(io)?;
    Ok(Bytes::from(buffer))
}

/// Composes `spec` on `store`; see the module documentation.
///
/// # Errors
/// A spec breaking a rule is `InvalidArgument` before anything moves; a
/// base that moved is `PreconditionFailed`; a local read failure is `Io`;
/// a CRC that does not match the assembled bytes is `ChecksumMismatch`.
/// Whatever the error, the upload has been aborted.
pub async fn compose<S: ObjectStore + ?Sized>(
    store: &S,
    spec: &ComposeSpec<'_>,
) -> Result<ObjectMeta, ObjectError> {
    validate(spec, store.min_part_size(), store.max_parts())?;
    let base_key = spec.base_key.unwrap_or(spec.key);
    if let Some(base_etag) = spec.base_etag {
        let base = store.head_opts(base_key, HeadOptions::default()).await?;
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
            return Err(invalid(format!(
                "the base {base_key:?} is in storage class {:?}; copying from it would pay \
                 retrieval on every clean byte",
                base.storage_class
            )));
        }
    }
    let mut local = std::fs::File::open(spec.local_path).map_err(|e| {
        ObjectError::Io(Detail::caused_by(
            format!("opening {}", spec.local_path.display()),
            e,
        ))
    })?;
    let key = spec.key;
    let declared = UploadOptions {
        metadata: &spec.metadata,
    };
    let upload_id = store.create_upload(key, declared).await?;
    let result = assemble(store, spec, base_key, &upload_id, &mut local).await;
    if result.is_err() {
        // The error is what the caller needs; an abort that fails too is
        // left to the uploads sweep, which `list_uploads` exposes.
        let _ = store.abort_upload(key, &upload_id).await;
    }
    result
}

async fn assemble<S: ObjectStore + ?Sized>(
    store: &S,
    spec: &ComposeSpec<'_>,
    base_key: &ObjectKey,
    upload_id: &str,
    local: &mut std::fs::File,
) -> Result<ObjectMeta, ObjectError> {
    let key = spec.key;
    let mut accumulated = checksum::crc64_nvme(b"");
    for (index, part) in spec.parts.iter().enumerate() {
        // Bounded by max_parts, a u32.
        let number = u32::try_from(index + 1).unwrap_or(u32::MAX);
        let (offset, len) = part.range();
        let crc = match part {
            PartSource::Local { .. } => {
                let body = read_local(local, spec.local_path, offset, len)?;
                let crc64 = checksum::crc64_nvme(&body);
                let data = PartData::Bytes { body, crc64 };
                store.upload_part(key, upload_id, number, data).await?
            }
            PartSource::BaseCopy { .. } => {
                let data = PartData::Copy {
                    source: base_key,
                    source_if_match: spec.base_etag.unwrap_or_default(),
                    range: offset..offset + len,
                };
                store.upload_part(key, upload_id, number, data).await?
            }
        };
        accumulated = checksum::combine(accumulated, crc, len);
        if let Some(progress) = &spec.progress {
            progress.fetch_add(len, Ordering::Relaxed);
        }
    }
    let crc64 = spec.crc64.unwrap_or(accumulated);
    let parts = u32::try_from(spec.parts.len()).unwrap_or(u32::MAX);
    let options = CompleteOptions {
        parts,
        condition: &spec.condition,
        crc64,
    };
    store.complete_upload(key, upload_id, options).await
}
