//! Reads of current objects and of exact versions: HEAD, whole GETs
//! (checked against the stored CRC) and ranged GETs (returned as the SDK's
//! frames).
//!
//! A read guarded by an etag sends S3's part as `If-Match` and checks the
//! version S3 reports having served, so the guard is exact: there is no
//! window between a check and the read.

use std::ops::Range;

use aws_sdk_s3::operation::get_object::GetObjectOutput;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::ChecksumMode;
use bytes::Bytes;

use super::super::{ObjectError, ObjectKey, ObjectMeta, validate_range};
use super::errors::quoted;
use super::errors::{self, Class, Failure};
use super::meta::{self, Described};
use super::{S3Store, etag};
use custodian_base::checksum::Crc64Nvme;

fn described(out: &GetObjectOutput) -> Described<'_> {
    Described {
        e_tag: out.e_tag(),
        version_id: out.version_id(),
        // A ranged answer's length is the range's; its `Content-Range`
        // (`bytes a-b/total`) names the whole object's.
        size: out
            .content_range()
            .and_then(|range| range.rsplit_once('/')?.1.parse().ok())
            .or(out.content_length()),
        crc64: out.checksum_crc64_nvme(),
        last_modified: out.last_modified(),
        metadata: out.metadata(),
        storage_class: out.storage_class(),
    }
}

/// A body, frame by frame, with the CRC of what arrived.
pub(super) struct Received {
    /// The frames as the SDK delivered them.
    pub frames: Vec<Bytes>,
    /// Bytes received.
    pub len: u64,
    /// CRC of the bytes received.
    pub crc: Crc64Nvme,
    /// The transfer failed after `len` bytes.
    pub error: Option<String>,
}

/// Reads `body` to its end, with its CRC, keeping the frames as they came
/// when `keep` (otherwise memory stays at one frame, whatever the size).
pub(super) async fn receive(mut body: ByteStream, keep: bool) -> Received {
    let mut received = Received {
        frames: Vec::new(),
        len: 0,
        crc: Crc64Nvme::new(),
        error: None,
    };
    while let Some(frame) = body.next().await {
        match frame {
            Ok(frame) => {
                received.len += frame.len() as u64;
                received.crc.update(&frame);
                if keep && !frame.is_empty() {
                    received.frames.push(frame);
                }
            }
            Err(e) => {
                received.error = Some(e.to_string());
                break;
            }
        }
    }
    received
}

impl S3Store {
    /// See [`super::super::ObjectStore::head_opts`].
    pub(super) async fn head_current(&self, key: &ObjectKey) -> Result<ObjectMeta, ObjectError> {
        let full = self.keys.full(key)?;
        self.head_full(key, &full).await
    }

    /// The current object at bucket key `full` (store key `key`).
    pub(super) async fn head_full(&self, key: &str, full: &str) -> Result<ObjectMeta, ObjectError> {
        let out = self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(full)
            .checksum_mode(ChecksumMode::Enabled)
            .send()
            .await
            .map_err(|e| errors::object_error(&e, "HeadObject", &quoted(key)))?;
        meta::object_meta(
            key,
            self.versioned,
            &Described {
                e_tag: out.e_tag(),
                version_id: out.version_id(),
                size: out.content_length(),
                crc64: out.checksum_crc64_nvme(),
                last_modified: out.last_modified(),
                metadata: out.metadata(),
                storage_class: out.storage_class(),
            },
        )
    }

    /// See [`super::super::ObjectStore::get_opts`].
    pub(super) async fn read_whole(
        &self,
        key: &ObjectKey,
        if_match: Option<&str>,
    ) -> Result<(ObjectMeta, Vec<Bytes>), ObjectError> {
        let full = self.keys.full(key)?;
        let guard = if_match.map(etag::guard);
        let out = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(&full)
            .checksum_mode(ChecksumMode::Enabled)
            .set_if_match(guard.as_ref().map(|g| g.s3_etag.clone()))
            .send()
            .await
            .map_err(|e| errors::object_error(&e, "GetObject", &quoted(key)))?;
        if let Some(guard) = &guard
            && !guard.holds_for(etag::real_version(out.version_id()))
        {
            return Err(ObjectError::PreconditionFailed(
                format!(
                    "{key:?} is now version {:?}, not the one guarded",
                    out.version_id()
                )
                .into(),
            ));
        }
        self.whole_body(key, out).await
    }

    /// Reads a whole GET's body and checks it against the stored CRC.
    pub(super) async fn whole_body(
        &self,
        key: &str,
        out: GetObjectOutput,
    ) -> Result<(ObjectMeta, Vec<Bytes>), ObjectError> {
        let meta = meta::object_meta(key, self.versioned, &described(&out))?;
        let received = receive(out.body, true).await;
        if received.len == meta.size
            && let Some(stored) = meta.crc64
        {
            let read = received.crc.finalize();
            if read != stored {
                return Err(ObjectError::Corrupt(format!(
                    "{key:?}: the bytes read have CRC {read:016x}, the object was published with \
                     {stored:016x}"
                ).into()));
            }
        }
        if let Some(error) = received.error {
            return Err(ObjectError::Unavailable(
                format!(
                    "reading {key:?} failed after {} of {} bytes: {error}",
                    received.len, meta.size
                )
                .into(),
            ));
        }
        if received.len != meta.size {
            return Err(ObjectError::Unavailable(
                format!(
                    "reading {key:?}: {} bytes arrived of {}",
                    received.len, meta.size
                )
                .into(),
            ));
        }
        Ok((meta, received.frames))
    }

    /// Bytes `range` of the current object or of version `version_id`
    /// (guarded by `if_match`), truncated at its end, as the SDK's frames,
    /// with the whole object's metadata.
    pub(super) async fn read_range(
        &self,
        key: &ObjectKey,
        version_id: Option<&str>,
        range: Range<u64>,
        if_match: Option<&str>,
    ) -> Result<(ObjectMeta, Vec<Bytes>), ObjectError> {
        validate_range(&range)?;
        let full = self.keys.full(key)?;
        let guard = if_match.map(etag::guard);
        if range.is_empty() {
            // HTTP cannot ask for zero bytes; the guard and the key still
            // have to be checked.
            let meta = self.confirm(key, &full, version_id, if_match).await?;
            return Ok((meta, Vec::new()));
        }
        let result = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(&full)
            .set_version_id(version_id.map(str::to_owned))
            .range(format!("bytes={}-{}", range.start, range.end - 1))
            .set_if_match(guard.as_ref().map(|g| g.s3_etag.clone()))
            .send()
            .await;
        let out = match result {
            Ok(out) => out,
            Err(e) => {
                let failure = errors::failure(&e, "GetObject (range)", &quoted(key));
                if failure.class == Class::BadRange {
                    // The range starts at or past the end: empty, once the
                    // guard is known to hold.
                    let meta = self.confirm(key, &full, version_id, if_match).await?;
                    return Ok((meta, Vec::new()));
                }
                return Err(match version_id {
                    Some(version) => self.version_read_failure(key, version, failure).await,
                    None => failure.into_error(),
                });
            }
        };
        if let Some(guard) = &guard
            && !guard.holds_for(etag::real_version(out.version_id()))
        {
            return Err(ObjectError::PreconditionFailed(
                format!(
                    "{key:?} is now version {:?}, not the one guarded",
                    out.version_id()
                )
                .into(),
            ));
        }
        let expected = out.content_length().and_then(|l| u64::try_from(l).ok());
        let meta = meta::object_meta(key, self.versioned, &described(&out))?;
        let received = receive(out.body, true).await;
        if let Some(error) = received.error {
            return Err(ObjectError::Unavailable(
                format!(
                    "reading {}..{} of {key:?} failed after {} bytes: {error}",
                    range.start, range.end, received.len
                )
                .into(),
            ));
        }
        if expected.is_some_and(|e| e != received.len) || received.len > range.end - range.start {
            return Err(ObjectError::Unavailable(
                format!(
                    "reading {}..{} of {key:?}: {} bytes arrived, {expected:?} announced",
                    range.start, range.end, received.len
                )
                .into(),
            ));
        }
        Ok((meta, received.frames))
    }

    /// Checks that the object read matches `if_match` (and that version
    /// `version_id` has bytes), for reads that fetch nothing; returns its
    /// metadata.
    async fn confirm(
        &self,
        key: &ObjectKey,
        full: &str,
        version_id: Option<&str>,
        if_match: Option<&str>,
    ) -> Result<ObjectMeta, ObjectError> {
        let head = match version_id {
            Some(version) => self.head_exact(key, version).await?,
            None => self.head_full(key, full).await?,
        };
        match if_match {
            Some(want) if head.etag != want => Err(ObjectError::PreconditionFailed(
                format!("{key:?} is {}, not {want}", head.etag).into(),
            )),
            _ => Ok(head),
        }
    }

    /// What a failed version-scoped read means. A delete marker answers
    /// 405 on AWS and LocalStack; moto answers a GET of one with 404, so a
    /// 404 is settled by a HEAD of the version (moto's HEAD says 405).
    pub(super) async fn version_read_failure(
        &self,
        key: &ObjectKey,
        version_id: &str,
        failure: Failure,
    ) -> ObjectError {
        match failure.class {
            Class::NotFound => match self.head_exact(key, version_id).await {
                Err(marker @ ObjectError::PreconditionFailed(_)) => marker,
                _ => ObjectError::NotFound(failure.detail.into()),
            },
            _ => self.version_failure(key, version_id, failure),
        }
    }
}
