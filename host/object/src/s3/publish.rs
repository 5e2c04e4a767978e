//! Whole-object publishes, copies and deletes, and the checks that make a
//! publish trustworthy: the local CRC check before anything is sent, the
//! server's validation of the CRC sent with the bytes, the comparison with
//! the CRC the server returns, and (until bootstrap has shown that the
//! server validates) reading the new version back.

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{ChecksumAlgorithm, MetadataDirective};
use bytes::Bytes;

use super::super::{Metadata, ObjectError, ObjectKey, ObjectMeta, PutCondition, validate_metadata};
use super::errors::{self, Class};
use super::{S3Store, etag, keys, meta, read};
use custodian_base::checksum::{self, crc64_nvme};

/// The S3 headers of a publish's guard.
#[derive(Debug, Default)]
pub(super) struct WriteHeaders {
    /// `If-Match`: S3's etag of the object to replace.
    pub if_match: Option<String>,
    /// `If-None-Match: *`.
    pub if_none_match: Option<String>,
}

impl WriteHeaders {
    /// The headers for `condition` (the version part of an `IfMatch` is
    /// not among them: see [`S3Store::check_condition`]).
    pub fn of(condition: &PutCondition) -> Self {
        match condition {
            PutCondition::Unconditional => Self::default(),
            PutCondition::IfNoneMatchAny => Self {
                if_match: None,
                if_none_match: Some("*".into()),
            },
            PutCondition::IfMatch(etag) => Self {
                if_match: Some(etag::guard(etag).s3_etag),
                if_none_match: None,
            },
        }
    }
}

/// What a publish is checked with after S3 accepted it.
pub(super) struct Written<'a> {
    /// The store key.
    pub key: &'a str,
    /// The bucket key.
    pub full: &'a str,
    /// The version S3 created, if versioned.
    pub version_id: Option<&'a str>,
    /// The CRC the bytes must have.
    pub crc64: u64,
    /// The CRC S3 says it stored, if it says.
    pub returned: Option<&'a str>,
}

/// What a failed guarded write means. S3 answers `If-Match` on a key
/// with no current object (absent, or behind a delete marker) with 404
/// NoSuchKey; for the contract that guard failed.
pub(super) fn guarded_failure(condition: &PutCondition, failure: errors::Failure) -> ObjectError {
    match (condition, failure.class, failure.code.as_deref()) {
        (PutCondition::IfMatch(etag), Class::NotFound, None | Some("NoSuchKey")) => {
            ObjectError::PreconditionFailed(
                format!("no current object to match {etag} ({})", failure.detail).into(),
            )
        }
        _ => failure.into_error(),
    }
}

impl S3Store {
    /// See [`super::super::ObjectStore::put_opts`].
    pub(super) async fn publish_whole(
        &self,
        key: &ObjectKey,
        body: Bytes,
        condition: &PutCondition,
        metadata: &Metadata,
        crc64: u64,
    ) -> Result<ObjectMeta, ObjectError> {
        let full = self.keys.full(key)?;
        validate_metadata(metadata)?;
        // Checked here first: the contract checks the CRC before the
        // condition and writes nothing on a mismatch, which a server can
        // only promise for the bytes it received, not for the caller's
        // claim. The server still validates what arrives.
        let actual = crc64_nvme(&body);
        if actual != crc64 {
            return Err(ObjectError::ChecksumMismatch(format!(
                "{key:?}: the body's CRC-64/NVME is {actual:016x}, the caller claimed {crc64:016x}"
            ).into()));
        }
        let sent = meta::publish_metadata(metadata, self.crc_record(crc64))?;
        self.check_condition(key, &full, condition, false).await?;
        let headers = WriteHeaders::of(condition);
        let size = body.len() as u64;
        let out = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(&full)
            .body(ByteStream::from(body))
            .checksum_algorithm(ChecksumAlgorithm::Crc64Nvme)
            .checksum_crc64_nvme(checksum::to_wire(crc64))
            .set_metadata(Some(sent))
            .set_if_match(headers.if_match)
            .set_if_none_match(headers.if_none_match)
            .send()
            .await
            .map_err(|e| {
                guarded_failure(
                    condition,
                    errors::failure(&e, "PutObject", &errors::quoted(key)),
                )
            })?;
        let version_id = etag::real_version(out.version_id());
        self.settle(&Written {
            key,
            full: &full,
            version_id,
            crc64,
            returned: out.checksum_crc64_nvme(),
        })
        .await?;
        let e_tag = out.e_tag().ok_or_else(|| {
            ObjectError::Corrupt(format!("{key:?}: PutObject returned no etag").into())
        })?;
        Ok(ObjectMeta {
            key: key.to_string(),
            version_id: self
                .versioned
                .then(|| version_id.map(str::to_owned))
                .flatten(),
            etag: etag::issue(e_tag, version_id),
            size,
            crc64: Some(crc64),
            content_md5: None,
            // PutObject returns no Last-Modified; a HEAD would cost a
            // round trip every publish pays for a field few read.
            last_modified_ms: None,
            metadata: metadata.clone(),
            storage_class: None,
        })
    }

    /// Checks what S3 cannot check atomically before a write to `full`:
    /// always the version part of an `IfMatch` (S3 matches only its etag),
    /// and with `whole`, the entire condition (for calls where the server
    /// may ignore the headers). A HEAD, so there is a window between it
    /// and the write.
    pub(super) async fn check_condition(
        &self,
        key: &str,
        full: &str,
        condition: &PutCondition,
        whole: bool,
    ) -> Result<(), ObjectError> {
        match condition {
            PutCondition::Unconditional => return Ok(()),
            PutCondition::IfNoneMatchAny if !whole => return Ok(()),
            PutCondition::IfMatch(etag) if !whole && etag::guard(etag).version_id.is_none() => {
                return Ok(());
            }
            _ => {}
        }
        let current = match self.head_full(key, full).await {
            Ok(head) => Some(head.etag),
            Err(ObjectError::NotFound(_)) => None,
            Err(e) => return Err(e),
        };
        condition.check(key, current.as_deref())
    }

    /// After S3 accepted a publish: compares the CRC it returned, and in
    /// verify mode reads the version back. On a mismatch the version is
    /// removed and the publish fails with `ChecksumMismatch`.
    pub(super) async fn settle(&self, written: &Written<'_>) -> Result<(), ObjectError> {
        let key = written.key;
        if let Some(stored) = meta::stored_crc(key, written.returned, None)?
            && stored != written.crc64
        {
            self.retract(written.full, written.version_id).await;
            return Err(ObjectError::ChecksumMismatch(format!(
                "{key:?}: the server stored CRC {stored:016x}, not {:016x}; the version was removed",
                written.crc64
            ).into()));
        }
        if self.verifies_by_reading() {
            let read = match self
                .read_back_crc(key, written.full, written.version_id)
                .await
            {
                Ok(read) => read,
                Err(e) => {
                    // Unverified bytes must not stay published.
                    self.retract(written.full, written.version_id).await;
                    return Err(e);
                }
            };
            if read != written.crc64 {
                self.retract(written.full, written.version_id).await;
                return Err(ObjectError::ChecksumMismatch(format!(
                    "{key:?}: read back, the bytes have CRC {read:016x}, not {:016x} (this server \
                     does not validate checksums); the version was removed",
                    written.crc64
                ).into()));
            }
        }
        Ok(())
    }

    /// The CRC-64/NVME of one version, streamed: never the whole object in
    /// memory.
    pub(super) async fn read_back_crc(
        &self,
        key: &str,
        full: &str,
        version_id: Option<&str>,
    ) -> Result<u64, ObjectError> {
        let out = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(full)
            .set_version_id(version_id.map(str::to_owned))
            .send()
            .await
            .map_err(|e| errors::object_error(&e, "GetObject (read back)", &errors::quoted(key)))?;
        let expected = out.content_length().and_then(|l| u64::try_from(l).ok());
        let received = read::receive(out.body, false).await;
        // The SDK checks a body against a checksum header the server sends
        // and fails the stream at its end on a mismatch; with every byte
        // in hand, this backend's own comparison is the verdict.
        if expected != Some(received.len) {
            return Err(ObjectError::Unavailable(
                format!(
                    "reading {key:?} back: {} bytes of {expected:?}{}",
                    received.len,
                    received.error.map(|e| format!(": {e}")).unwrap_or_default()
                )
                .into(),
            ));
        }
        Ok(received.crc.finalize())
    }

    /// Removes a version this call just wrote and must not leave behind.
    /// Best effort: the caller's error says what went wrong, and a version
    /// that survives is found by the next read's CRC check.
    pub(super) async fn retract(&self, full: &str, version_id: Option<&str>) {
        let result = self
            .client
            .delete_object()
            .bucket(&self.bucket)
            .key(full)
            .set_version_id(version_id.map(str::to_owned))
            .send()
            .await;
        if let Err(e) = result {
            tracing::warn!(
                key = full,
                version = version_id,
                error = %errors::failure(&e, "DeleteObject", full).detail,
                "could not remove a publish that failed its checksum"
            );
        }
    }

    /// See [`super::super::ObjectStore::copy_opts`]: a server-side copy
    /// of the exact version the source guard was checked against, with
    /// exactly the caller's metadata.
    pub(super) async fn copy(
        &self,
        source: &ObjectKey,
        source_if_match: Option<&str>,
        destination: &ObjectKey,
        condition: &PutCondition,
        metadata: &Metadata,
    ) -> Result<ObjectMeta, ObjectError> {
        let source_full = self.keys.full(source)?;
        let full = self.keys.full(destination)?;
        validate_metadata(metadata)?;
        meta::publish_metadata(metadata, None)?;
        let from = self.head_full(source, &source_full).await?;
        if let Some(want) = source_if_match
            && from.etag != want
        {
            return Err(ObjectError::PreconditionFailed(
                format!("the copy source {source:?} is {}, not {want}", from.etag).into(),
            ));
        }
        // Servers that ignore CopyObject's destination conditions get this
        // HEAD's (windowed) check; the others check the headers atomically.
        self.check_condition(destination, &full, condition, true)
            .await?;
        let headers = WriteHeaders::of(condition);
        let sent = meta::publish_metadata(metadata, from.crc64.and_then(|c| self.crc_record(c)))?;
        // Pinned to the version just checked: a source replaced meanwhile
        // still copies exactly what the caller named.
        let copy_source = keys::copy_source(&self.bucket, &source_full, from.version_id.as_deref());
        let out = self
            .client
            .copy_object()
            .bucket(&self.bucket)
            .key(&full)
            .copy_source(copy_source)
            .copy_source_if_match(etag::guard(&from.etag).s3_etag)
            .metadata_directive(MetadataDirective::Replace)
            .set_metadata(Some(sent))
            .checksum_algorithm(ChecksumAlgorithm::Crc64Nvme)
            .set_if_match(headers.if_match)
            .set_if_none_match(headers.if_none_match)
            .send()
            .await
            .map_err(|e| {
                let what = format!("{source:?} to {destination:?}");
                guarded_failure(condition, errors::failure(&e, "CopyObject", &what))
            })?;
        let version_id = etag::real_version(out.version_id());
        let result = out.copy_object_result();
        let returned = result.and_then(|r| r.checksum_crc64_nvme());
        let copied = meta::stored_crc(destination, returned, None)?;
        let crc64 =
            match (from.crc64, copied) {
                (Some(want), Some(got)) if want != got => {
                    self.retract(&full, version_id).await;
                    return Err(ObjectError::Corrupt(format!(
                    "copying {source:?}: the copy has CRC {got:016x}, the source was published \
                     with {want:016x}; the copy was removed"
                ).into()));
                }
                (want, got) => want.or(got),
            };
        if copied.is_none()
            && let Some(crc64) = crc64
            && self.verifies_by_reading()
        {
            let read = self.read_back_crc(destination, &full, version_id).await?;
            if read != crc64 {
                self.retract(&full, version_id).await;
                return Err(ObjectError::Corrupt(format!(
                    "copying {source:?}: read back, the copy has CRC {read:016x}, not {crc64:016x}; \
                     the copy was removed"
                ).into()));
            }
        }
        let e_tag = result.and_then(|r| r.e_tag()).ok_or_else(|| {
            ObjectError::Corrupt(format!("{destination:?}: CopyObject returned no etag").into())
        })?;
        Ok(ObjectMeta {
            key: destination.to_string(),
            version_id: self
                .versioned
                .then(|| version_id.map(str::to_owned))
                .flatten(),
            etag: etag::issue(e_tag, version_id),
            size: from.size,
            crc64,
            content_md5: None,
            last_modified_ms: meta::millis(result.and_then(|r| r.last_modified())),
            metadata: metadata.clone(),
            storage_class: None,
        })
    }

    /// See [`super::super::ObjectStore::delete_opts`].
    pub(super) async fn delete_current(&self, key: &ObjectKey) -> Result<(), ObjectError> {
        let full = self.keys.full(key)?;
        match self
            .client
            .delete_object()
            .bucket(&self.bucket)
            .key(&full)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => {
                let failure = errors::failure(&e, "DeleteObject", &errors::quoted(key));
                match failure.class {
                    Class::NotFound if failure.code.as_deref() != Some("NoSuchBucket") => Ok(()),
                    _ => Err(failure.into_error()),
                }
            }
        }
    }
}
