//! Multipart uploads: create (CRC64NVME, `FULL_OBJECT`), checksummed parts,
//! server-side part copies, the guarded complete, abort and listing.
//!
//! Completing sends the whole object's CRC with `FULL_OBJECT`, so the
//! server validates the assembled object against local truth; the CRC it
//! returns is compared, and in verify mode the object is read back.

use std::ops::Range;

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{ChecksumAlgorithm, ChecksumType, CompletedMultipartUpload, CompletedPart};
use bytes::Bytes;

use super::super::{
    Metadata, ObjectError, ObjectKey, ObjectMeta, PendingUpload, PutCondition,
    validate_part_number, validate_range,
};
use super::errors::quoted;
use super::errors::{self, Class};
use super::meta::{self, millis};
use super::publish::{WriteHeaders, Written, guarded_failure};
use super::{S3Store, etag, keys, quirks, read};
use custodian_base::checksum::{self, crc64_nvme};

/// Most pages of pending uploads one `list_uploads` reads (1000 each).
/// Bounds one call's memory; a prefix past it is refused rather than
/// answered partially, because "every pending upload" is the promise.
const MAX_UPLOAD_PAGES: usize = 100;

/// A part to copy server-side: `range` of the current object at
/// `source` (bucket key `source_full`), guarded by `source_if_match`.
#[derive(Debug, Clone)]
pub(super) struct RangeCopy<'a> {
    /// The store key of the source.
    pub source: &'a str,
    /// Its bucket key.
    pub source_full: &'a str,
    /// The etag the source must still have.
    pub source_if_match: &'a str,
    /// The bytes to copy.
    pub range: Range<u64>,
}

/// One multipart upload: the store key, its bucket key, its id.
#[derive(Debug, Clone, Copy)]
pub(super) struct Upload<'a> {
    /// The store key.
    pub key: &'a str,
    /// Its bucket key.
    pub full: &'a str,
    /// The upload id.
    pub id: &'a str,
}

/// One landed part, as CompleteMultipartUpload wants it.
#[derive(Debug, Clone)]
pub(super) struct Landed {
    /// The part's CRC-64/NVME.
    pub crc64: u64,
    /// Its length.
    pub len: u64,
    /// What Complete names it by.
    pub part: CompletedPart,
}

/// A listed part as Complete wants it.
fn landed_part(
    number: Option<i32>,
    e_tag: Option<&str>,
    size: Option<i64>,
    crc64: Option<u64>,
) -> Landed {
    let mut completed = CompletedPart::builder()
        .set_part_number(number)
        .set_e_tag(e_tag.map(str::to_owned));
    if let Some(crc) = crc64 {
        completed = completed.checksum_crc64_nvme(checksum::to_wire(crc));
    }
    Landed {
        crc64: crc64.unwrap_or(0),
        len: size.and_then(|s| u64::try_from(s).ok()).unwrap_or(0),
        part: completed.build(),
    }
}

/// The parts of a ListParts answer the SDK could not parse (see
/// [`quirks`]); one page, as the server sends every part of a small
/// upload in one.
fn landed_from_raw(key: &str, body: &str) -> Result<Vec<Landed>, ObjectError> {
    if quirks::text(body, "IsTruncated").as_deref() == Some("true") {
        return Err(ObjectError::Unsupported(
            format!("{key:?}: this server's part listing is unreadable past its first page").into(),
        ));
    }
    quirks::elements(body, "Part")
        .into_iter()
        .map(|part| {
            let crc64 = match quirks::text(part, "ChecksumCRC64NVME") {
                Some(wire) => meta::stored_crc(key, Some(&wire), None)?,
                None => None,
            };
            let number = quirks::text(part, "PartNumber").and_then(|n| n.parse().ok());
            let size = quirks::text(part, "Size").and_then(|n| n.parse().ok());
            Ok(landed_part(
                number,
                quirks::text(part, "ETag").as_deref(),
                size,
                crc64,
            ))
        })
        .collect()
}

impl S3Store {
    /// Creates an upload of `key` whose object will carry `metadata`.
    pub(super) async fn start_upload(
        &self,
        key: &ObjectKey,
        metadata: &Metadata,
    ) -> Result<String, ObjectError> {
        let full = self.keys.full(key)?;
        let sent = meta::publish_metadata(metadata, None)?;
        self.start_upload_full(key, &full, sent).await
    }

    /// Creates an upload of bucket key `full` with the S3 metadata `sent`.
    pub(super) async fn start_upload_full(
        &self,
        key: &str,
        full: &str,
        sent: std::collections::HashMap<String, String>,
    ) -> Result<String, ObjectError> {
        let out = self
            .client
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(full)
            .checksum_algorithm(ChecksumAlgorithm::Crc64Nvme)
            .checksum_type(ChecksumType::FullObject)
            .set_metadata(Some(sent))
            .send()
            .await
            .map_err(|e| errors::object_error(&e, "CreateMultipartUpload", &quoted(key)))?;
        out.upload_id().map(str::to_owned).ok_or_else(|| {
            ObjectError::Corrupt(
                format!("{key:?}: CreateMultipartUpload returned no upload id").into(),
            )
        })
    }

    /// See [`super::super::ObjectStore::upload_part`].
    pub(super) async fn put_part(
        &self,
        key: &ObjectKey,
        upload_id: &str,
        part: u32,
        body: Bytes,
        crc64: u64,
    ) -> Result<(), ObjectError> {
        let full = self.keys.full(key)?;
        self.put_part_full(key, &full, upload_id, part, body, crc64)
            .await
            .map(|_| ())
    }

    /// Uploads part `part` of an upload of bucket key `full`, checksummed.
    pub(super) async fn put_part_full(
        &self,
        key: &str,
        full: &str,
        upload_id: &str,
        part: u32,
        body: Bytes,
        crc64: u64,
    ) -> Result<Landed, ObjectError> {
        validate_part_number(part)?;
        let actual = crc64_nvme(&body);
        if actual != crc64 {
            return Err(ObjectError::ChecksumMismatch(format!(
                "part {part} of {key:?}: the body's CRC-64/NVME is {actual:016x}, not {crc64:016x}"
            ).into()));
        }
        let len = body.len() as u64;
        let wire = checksum::to_wire(crc64);
        let result = self
            .client
            .upload_part()
            .bucket(&self.bucket)
            .key(full)
            .upload_id(upload_id)
            .part_number(i32::try_from(part).unwrap_or(i32::MAX))
            .body(ByteStream::from(body))
            .checksum_algorithm(ChecksumAlgorithm::Crc64Nvme)
            .checksum_crc64_nvme(wire.clone())
            .send()
            .await;
        let out = match result {
            Ok(out) => out,
            Err(e) => {
                let failure = errors::failure(&e, "UploadPart", &format!("{part} of {key:?}"));
                // moto answers a part for an aborted upload with a 500;
                // whether the upload exists settles what it meant.
                if failure.class == Class::Unavailable
                    && matches!(
                        self.upload_exists(full, upload_id).await,
                        Err(ObjectError::NoSuchUpload(_))
                    )
                {
                    return Err(ObjectError::NoSuchUpload(
                        format!("{upload_id:?} of {key:?} ({})", failure.detail).into(),
                    ));
                }
                return Err(failure.into_error());
            }
        };
        if let Some(stored) = meta::stored_crc(key, out.checksum_crc64_nvme(), None)?
            && stored != crc64
        {
            return Err(ObjectError::ChecksumMismatch(
                format!(
                    "part {part} of {key:?}: the server stored CRC {stored:016x}, not {crc64:016x}"
                )
                .into(),
            ));
        }
        let e_tag = out.e_tag().ok_or_else(|| {
            ObjectError::Corrupt(
                format!("part {part} of {key:?}: UploadPart returned no etag").into(),
            )
        })?;
        Ok(Landed {
            crc64,
            len,
            part: CompletedPart::builder()
                .part_number(i32::try_from(part).unwrap_or(i32::MAX))
                .e_tag(e_tag)
                .checksum_crc64_nvme(wire)
                .build(),
        })
    }

    /// Whether an upload is still pending (ListParts, one part).
    async fn upload_exists(&self, full: &str, upload_id: &str) -> Result<(), ObjectError> {
        self.client
            .list_parts()
            .bucket(&self.bucket)
            .key(full)
            .upload_id(upload_id)
            .max_parts(1)
            .send()
            .await
            .map(|_| ())
            .or_else(|e| match quirks::unparsed_success(&e) {
                Some(_) => Ok(()),
                None => Err(errors::object_error(&e, "ListParts", &quoted(full))),
            })
    }

    /// See [`super::super::ObjectStore::upload_part`].
    pub(super) async fn copy_part(
        &self,
        key: &ObjectKey,
        upload_id: &str,
        part: u32,
        source: &ObjectKey,
        source_if_match: &str,
        range: Range<u64>,
    ) -> Result<u64, ObjectError> {
        let full = self.keys.full(key)?;
        let source_full = self.keys.full(source)?;
        let landed = self
            .copy_part_full(
                key,
                &full,
                upload_id,
                part,
                RangeCopy {
                    source,
                    source_full: &source_full,
                    source_if_match,
                    range,
                },
            )
            .await?;
        Ok(landed.crc64)
    }

    /// Copies `range` of the current object at `source_full` into part
    /// `part`, guarded by `source_if_match` (S3 checks the etag, the
    /// reported source version settles the rest). The part's CRC is the
    /// one S3 computed, or, when it returns none, that of the source range
    /// read here.
    pub(super) async fn copy_part_full(
        &self,
        key: &str,
        full: &str,
        upload_id: &str,
        part: u32,
        copy: RangeCopy<'_>,
    ) -> Result<Landed, ObjectError> {
        let RangeCopy {
            source,
            source_full,
            source_if_match,
            range,
        } = copy;
        validate_part_number(part)?;
        validate_range(&range)?;
        if range.is_empty() {
            return Err(ObjectError::InvalidArgument(
                format!(
                    "part {part} of {key:?}: an empty copy range {}..{}",
                    range.start, range.end
                )
                .into(),
            ));
        }
        let guard = etag::guard(source_if_match);
        let out = self
            .client
            .upload_part_copy()
            .bucket(&self.bucket)
            .key(full)
            .upload_id(upload_id)
            .part_number(i32::try_from(part).unwrap_or(i32::MAX))
            .copy_source(keys::copy_source(&self.bucket, source_full, None))
            .copy_source_if_match(guard.s3_etag.clone())
            .copy_source_range(format!("bytes={}-{}", range.start, range.end - 1))
            .send()
            .await
            .map_err(|e| {
                let what = format!("{source:?} into part {part} of {key:?}");
                errors::object_error(&e, "UploadPartCopy", &what)
            })?;
        let mut source_version =
            etag::real_version(out.copy_source_version_id()).map(str::to_owned);
        if source_version.is_none() && guard.version_id.is_some() {
            // The server did not say which version it copied (moto): the
            // current one is asked for, with a window after the copy. S3
            // already matched the content etag, so the bytes are right;
            // only a byte-identical republish could slip through.
            let current = self.head_full(source, source_full).await?;
            if current.etag != source_if_match {
                return Err(ObjectError::PreconditionFailed(
                    format!(
                        "the copy source {source:?} is now {}, not {source_if_match}",
                        current.etag
                    )
                    .into(),
                ));
            }
            source_version = current.version_id;
        }
        if !guard.holds_for(source_version.as_deref()) {
            return Err(ObjectError::PreconditionFailed(format!(
                "the copy source {source:?} is now version {source_version:?}, not the one guarded"
            ).into()));
        }
        let source_version = source_version.as_deref();
        let result = out.copy_part_result();
        let e_tag = result.and_then(|r| r.e_tag()).ok_or_else(|| {
            ObjectError::Corrupt(
                format!("part {part} of {key:?}: UploadPartCopy returned no etag").into(),
            )
        })?;
        let crc64 = match meta::stored_crc(key, result.and_then(|r| r.checksum_crc64_nvme()), None)?
        {
            Some(crc) => crc,
            None => {
                self.range_crc(source, source_full, source_version, &range)
                    .await?
            }
        };
        Ok(Landed {
            crc64,
            len: range.end - range.start,
            part: CompletedPart::builder()
                .part_number(i32::try_from(part).unwrap_or(i32::MAX))
                .e_tag(e_tag)
                .checksum_crc64_nvme(checksum::to_wire(crc64))
                .build(),
        })
    }

    /// The CRC of `range` of one version, streamed.
    async fn range_crc(
        &self,
        key: &str,
        full: &str,
        version_id: Option<&str>,
        range: &Range<u64>,
    ) -> Result<u64, ObjectError> {
        let out = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(full)
            .set_version_id(version_id.map(str::to_owned))
            .range(format!("bytes={}-{}", range.start, range.end - 1))
            .send()
            .await
            .map_err(|e| errors::object_error(&e, "GetObject (part range)", &quoted(key)))?;
        let received = read::receive(out.body, false).await;
        if received.len != range.end - range.start {
            return Err(ObjectError::Unavailable(
                format!(
                    "reading {}..{} of {key:?}: {} bytes arrived{}",
                    range.start,
                    range.end,
                    received.len,
                    received.error.map(|e| format!(": {e}")).unwrap_or_default()
                )
                .into(),
            ));
        }
        Ok(received.crc.finalize())
    }

    /// See [`super::super::ObjectStore::complete_upload`] (metadata is
    /// what the upload was created with).
    pub(super) async fn finish_upload(
        &self,
        key: &ObjectKey,
        upload_id: &str,
        parts: u32,
        condition: &PutCondition,
        crc64: u64,
    ) -> Result<ObjectMeta, ObjectError> {
        let full = self.keys.full(key)?;
        let landed = self.landed_parts(key, &full, upload_id).await?;
        let numbers: Vec<i32> = landed
            .iter()
            .map(|l| l.part.part_number().unwrap_or(0))
            .collect();
        if parts == 0
            || numbers
                .iter()
                .copied()
                .ne(1..=i32::try_from(parts).unwrap_or(i32::MAX))
        {
            return Err(ObjectError::InvalidArgument(
                format!("upload {upload_id:?} holds parts {numbers:?}, not exactly 1..={parts}")
                    .into(),
            ));
        }
        let upload = Upload {
            key,
            full: &full,
            id: upload_id,
        };
        let mut meta = self
            .complete_full(upload, landed, condition, &Metadata::new(), crc64)
            .await?;
        // S3 keeps the metadata the upload was created with but does not
        // return it from Complete, and this store keeps no state of its
        // own: read it back from the version just published (or, without
        // versions, from the current object while it is still that one).
        let published = match &meta.version_id {
            Some(version) => self.head_exact(key, version).await?,
            None => self.head_full(key, &full).await?,
        };
        if published.etag == meta.etag {
            meta.metadata = published.metadata;
        }
        Ok(meta)
    }

    /// See [`super::super::ObjectStore::list_parts`].
    pub(super) async fn uploaded_parts(
        &self,
        key: &ObjectKey,
        upload_id: &str,
    ) -> Result<Vec<crate::UploadedPart>, ObjectError> {
        let full = self.keys.full(key)?;
        let landed = self.landed_parts(key, &full, upload_id).await?;
        Ok(landed
            .into_iter()
            .map(|l| crate::UploadedPart {
                number: l
                    .part
                    .part_number()
                    .and_then(|n| u32::try_from(n).ok())
                    .unwrap_or(0),
                size: l.len,
                crc64: l.part.checksum_crc64_nvme().map(|_| l.crc64),
                last_modified_ms: None,
            })
            .collect())
    }

    /// Every part of an upload, in order (ListParts, paged).
    async fn landed_parts(
        &self,
        key: &str,
        full: &str,
        upload_id: &str,
    ) -> Result<Vec<Landed>, ObjectError> {
        let mut landed = Vec::new();
        let mut marker: Option<String> = None;
        // 10 000 parts at 1000 a page; one spare page for a server that
        // pages differently.
        for _ in 0..11 {
            let result = self
                .client
                .list_parts()
                .bucket(&self.bucket)
                .key(full)
                .upload_id(upload_id)
                .set_part_number_marker(marker.take())
                .send()
                .await;
            let out = match result {
                Ok(out) => out,
                Err(e) => match quirks::unparsed_success(&e) {
                    Some(body) => return landed_from_raw(key, &body),
                    None => return Err(errors::object_error(&e, "ListParts", &quoted(key))),
                },
            };
            for part in out.parts() {
                let crc64 = meta::stored_crc(key, part.checksum_crc64_nvme(), None)?;
                landed.push(landed_part(
                    part.part_number(),
                    part.e_tag(),
                    part.size(),
                    crc64,
                ));
            }
            match (out.is_truncated(), out.next_part_number_marker()) {
                (Some(true), Some(next)) => marker = Some(next.to_owned()),
                _ => return Ok(landed),
            }
        }
        Err(ObjectError::Unavailable(
            format!("listing the parts of {upload_id:?} did not end").into(),
        ))
    }

    /// Completes an upload of bucket key `full` from `landed` (in part
    /// order) under `condition`, then settles the CRC like a whole publish.
    pub(super) async fn complete_full(
        &self,
        upload: Upload<'_>,
        landed: Vec<Landed>,
        condition: &PutCondition,
        metadata: &Metadata,
        crc64: u64,
    ) -> Result<ObjectMeta, ObjectError> {
        let Upload {
            key,
            full,
            id: upload_id,
        } = upload;
        // Some servers ignore conditions on Complete (moto ignores
        // If-Match): this HEAD checks them too, with a window. Where the
        // server honours the headers, its check is the atomic one.
        self.check_condition(key, full, condition, true).await?;
        let size: u64 = landed.iter().map(|l| l.len).sum();
        let headers = WriteHeaders::of(condition);
        let parts: Vec<CompletedPart> = landed.into_iter().map(|l| l.part).collect();
        let out = self
            .client
            .complete_multipart_upload()
            .bucket(&self.bucket)
            .key(full)
            .upload_id(upload_id)
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(parts))
                    .build(),
            )
            .checksum_crc64_nvme(checksum::to_wire(crc64))
            .checksum_type(ChecksumType::FullObject)
            .mpu_object_size(i64::try_from(size).unwrap_or(i64::MAX))
            .set_if_match(headers.if_match)
            .set_if_none_match(headers.if_none_match)
            .send()
            .await
            .map_err(|e| {
                guarded_failure(
                    condition,
                    errors::failure(&e, "CompleteMultipartUpload", &quoted(key)),
                )
            })?;
        let version_id = etag::real_version(out.version_id());
        self.settle(&Written {
            key,
            full,
            version_id,
            crc64,
            returned: out.checksum_crc64_nvme(),
        })
        .await?;
        let e_tag = out.e_tag().ok_or_else(|| {
            ObjectError::Corrupt(
                format!("{key:?}: CompleteMultipartUpload returned no etag").into(),
            )
        })?;
        Ok(ObjectMeta {
            key: key.to_owned(),
            version_id: self
                .versioned
                .then(|| version_id.map(str::to_owned))
                .flatten(),
            etag: etag::issue(e_tag, version_id),
            size,
            crc64: Some(crc64),
            content_md5: None,
            last_modified_ms: None,
            metadata: metadata.clone(),
            storage_class: None,
        })
    }

    /// See [`super::super::ObjectStore::abort_upload`].
    pub(super) async fn drop_upload(
        &self,
        key: &ObjectKey,
        upload_id: &str,
    ) -> Result<(), ObjectError> {
        let full = self.keys.full(key)?;
        self.abort_full(key, &full, upload_id).await
    }

    /// Aborts an upload of bucket key `full`; an absent one is fine.
    pub(super) async fn abort_full(
        &self,
        key: &str,
        full: &str,
        upload_id: &str,
    ) -> Result<(), ObjectError> {
        let result = self
            .client
            .abort_multipart_upload()
            .bucket(&self.bucket)
            .key(full)
            .upload_id(upload_id)
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) => {
                let failure = errors::failure(&e, "AbortMultipartUpload", &quoted(key));
                match failure.class {
                    Class::NoSuchUpload | Class::NotFound => Ok(()),
                    _ => Err(failure.into_error()),
                }
            }
        }
    }

    /// See [`super::super::ObjectStore::list_uploads`].
    pub(super) async fn pending_uploads(
        &self,
        prefix: &str,
    ) -> Result<Vec<PendingUpload>, ObjectError> {
        let full_prefix = self.keys.unchecked(prefix)?;
        let mut pending = Vec::new();
        let mut markers: (Option<String>, Option<String>) = (None, None);
        for _ in 0..MAX_UPLOAD_PAGES {
            let out = self
                .client
                .list_multipart_uploads()
                .bucket(&self.bucket)
                .prefix(&full_prefix)
                .set_key_marker(markers.0.take())
                .set_upload_id_marker(markers.1.take())
                .send()
                .await
                .map_err(|e| errors::object_error(&e, "ListMultipartUploads", &quoted(prefix)))?;
            for upload in out.uploads() {
                let (Some(full), Some(id)) = (upload.key(), upload.upload_id()) else {
                    continue;
                };
                if let Some(key) = self.keys.relative(full) {
                    pending.push(PendingUpload {
                        key: key.to_owned(),
                        upload_id: id.to_owned(),
                        initiated_ms: millis(upload.initiated()),
                    });
                }
            }
            if out.is_truncated() != Some(true) {
                return Ok(pending);
            }
            markers = (
                out.next_key_marker().map(str::to_owned),
                out.next_upload_id_marker().map(str::to_owned),
            );
            if markers.0.is_none() {
                return Err(ObjectError::Unavailable(
                    format!("listing uploads under {prefix:?}: a truncated page without a marker")
                        .into(),
                ));
            }
        }
        Err(ObjectError::Unsupported(
            format!(
                "more than {} pending uploads under {prefix:?}; list a narrower prefix",
                MAX_UPLOAD_PAGES * 1000
            )
            .into(),
        ))
    }
}
