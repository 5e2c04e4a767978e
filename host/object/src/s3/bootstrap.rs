//! Bootstrap: what the bucket and the server really do, found by asking
//! and by probing, and the store's checks adjusted to it.
//!
//! - Versioning is reported, never switched on: enabling it is a
//!   bucket-wide, irreversible decision (it can only be suspended) that
//!   belongs to the bucket's owner.
//! - A lifecycle rule aborting abandoned multipart uploads is added
//!   (read-merge-append) when none covers the prefix.
//! - Probes, all under one fresh key prefix that is removed afterwards on
//!   every path: a publish with a deliberately wrong CRC64NVME (a server
//!   that accepts it does not validate checksums: a loud warning, and the
//!   store keeps verifying every publish by reading it back); whether a
//!   stored CRC64NVME comes back on HEAD (if not, publishes record it in
//!   metadata); whether CopyObject and CompleteMultipartUpload honour
//!   their conditions (if not, the store's HEAD pre-check is the only
//!   guard, with its window).

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    ChecksumAlgorithm, ChecksumMode, ChecksumType, CompletedMultipartUpload, CompletedPart,
};

use super::super::{BootstrapReport, ObjectError, ObjectKey};
use super::errors::{self, Class};
use super::{S3Store, keys, lifecycle, meta};
use custodian_base::checksum::{self, crc64_nvme};

/// The probe's body: small, and recognisable to anyone who finds it.
const PROBE_BODY: &[u8] = b"custodian bootstrap probe: safe to delete";

impl S3Store {
    /// See [`super::super::ObjectAdmin::bootstrap`].
    pub(super) async fn check_posture(&self, prefix: &str) -> Result<BootstrapReport, ObjectError> {
        let mut report = BootstrapReport::default();
        report.notes.push(format!(
            "S3 bucket {:?}, key prefix {:?}",
            self.bucket,
            self.keys.prefix()
        ));
        if self.versioned {
            report
                .notes
                .push("the bucket keeps versions (versioning Enabled)".into());
        } else {
            report.warnings.push(
                "the bucket does not keep versions: replaced and deleted objects are gone, \
                 identical publishes share an etag, and version calls are unsupported; its owner \
                 can enable versioning (put-bucket-versioning Status=Enabled)"
                    .into(),
            );
        }
        let dir = format!("{prefix}.custodian-probe-{}/", self.unique());
        let probed = self.probe(&dir, &mut report).await;
        if let Err(e) = self.clean_probe(&dir).await {
            report.warnings.push(format!(
                "bootstrap probe objects may remain under {dir:?}: {e}"
            ));
        }
        probed?;
        match self.ensure_abort_rule(prefix).await {
            Ok((rule, true)) => report.notes.push(format!(
                "added lifecycle rule {rule:?}: uploads abandoned for {} days are aborted",
                lifecycle::ABORT_UPLOADS_AFTER_DAYS
            )),
            Ok((rule, false)) => report
                .notes
                .push(format!("lifecycle rule {rule:?} aborts abandoned uploads")),
            Err(e @ (ObjectError::Unavailable(_) | ObjectError::Io(_))) => return Err(e),
            Err(e) => report.warnings.push(format!(
                "no lifecycle rule aborts abandoned uploads, and one could not be added ({e}): \
                 parts of failed uploads stay billed until list_uploads/abort_upload sweep them"
            )),
        }
        let pending = self.pending_uploads(prefix).await?.len();
        if pending > 0 {
            report
                .warnings
                .push(format!("{pending} uploads under {prefix:?} are pending"));
        }
        Ok(report)
    }

    async fn probe(&self, dir: &str, report: &mut BootstrapReport) -> Result<(), ObjectError> {
        let wrong = self
            .keys
            .full(&ObjectKey::new(format!("{dir}wrong-crc"))?)?;
        let right = self
            .keys
            .full(&ObjectKey::new(format!("{dir}right-crc"))?)?;
        let crc = crc64_nvme(PROBE_BODY);

        let refused = self.probe_put(&wrong, crc ^ 1).await;
        match refused {
            Err(ObjectError::ChecksumMismatch(_)) => {
                self.set_verify_by_reading(false);
                report.notes.push(
                    "the server validates CRC-64/NVME checksums (a wrong one was refused)".into(),
                );
            }
            Ok(()) => {
                self.set_verify_by_reading(true);
                let warning = "THE SERVER DOES NOT VALIDATE CHECKSUMS: a publish with a wrong \
                               CRC-64/NVME was accepted. Every publish is now read back and \
                               checked (twice the traffic), and a mismatch removes the version";
                tracing::warn!(bucket = %self.bucket, "{warning}");
                report.warnings.push(warning.into());
            }
            Err(e) => return Err(e),
        }

        self.probe_put(&right, crc).await?;
        let head = self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(&right)
            .checksum_mode(ChecksumMode::Enabled)
            .send()
            .await
            .map_err(|e| errors::object_error(&e, "HeadObject (probe)", &right))?;
        match meta::stored_crc(&right, head.checksum_crc64_nvme(), None)? {
            Some(stored) if stored == crc => {
                self.set_crc_in_metadata(false);
                report
                    .notes
                    .push("the server returns the stored CRC-64/NVME of an object".into());
            }
            Some(stored) => report.errors.push(format!(
                "the server reports CRC {stored:016x} for a probe published with {crc:016x}"
            )),
            None => {
                self.set_crc_in_metadata(true);
                report.warnings.push(
                    "the server returns no stored CRC-64/NVME: publishes record it in metadata \
                     (custodian-crc64), which costs 27 of the 2048 metadata bytes"
                        .into(),
                );
            }
        }

        let copy = self
            .client
            .copy_object()
            .bucket(&self.bucket)
            .key(&right)
            .copy_source(keys::copy_source(&self.bucket, &right, None))
            .metadata_directive(aws_sdk_s3::types::MetadataDirective::Replace)
            .if_none_match("*")
            .send()
            .await;
        report.notes.push(match copy {
            Err(e) if errors::failure(&e, "CopyObject", &right).class == Class::Precondition => {
                "the server honours conditions on CopyObject".into()
            }
            Err(e) => return Err(errors::object_error(&e, "CopyObject (probe)", &right)),
            Ok(_) => {
                report.warnings.push(
                    "the server ignores conditions on CopyObject: a copy's destination is \
                     checked by a HEAD just before it, which a concurrent writer can slip past"
                        .into(),
                );
                "copy conditions are checked by this host".into()
            }
        });

        if self.versioned {
            let ordered = self.keys.full(&ObjectKey::new(format!("{dir}order"))?)?;
            self.probe_put(&ordered, crc).await?;
            self.client
                .delete_object()
                .bucket(&self.bucket)
                .key(&ordered)
                .send()
                .await
                .map_err(|e| errors::object_error(&e, "DeleteObject (probe)", &ordered))?;
            self.probe_put(&ordered, crc).await?;
            let interleaves = self.probe_interleaving(&ordered).await?;
            self.set_listing_interleaves(interleaves);
            report.notes.push(if interleaves {
                "version listings interleave versions and delete markers".into()
            } else {
                "version listings group versions and delete markers by kind: a key whose \
                 noncurrent versions and markers share a timestamp is ordered by paging"
                    .into()
            });
        }

        let honoured = self.probe_complete_if_match(&right, crc).await?;
        if honoured {
            report
                .notes
                .push("the server honours If-Match on CompleteMultipartUpload".into());
        } else {
            report.warnings.push(
                "the server ignores If-Match on CompleteMultipartUpload: a composed publish's \
                 guard is checked by a HEAD just before it, which a concurrent writer can slip \
                 past"
                    .into(),
            );
        }
        Ok(())
    }

    /// A raw publish of the probe body claiming `crc` (no local check, no
    /// read-back: the point is what the server does).
    async fn probe_put(&self, full: &str, crc: u64) -> Result<(), ObjectError> {
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(full)
            .body(ByteStream::from_static(PROBE_BODY))
            .checksum_algorithm(ChecksumAlgorithm::Crc64Nvme)
            .checksum_crc64_nvme(checksum::to_wire(crc))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| errors::object_error(&e, "PutObject (probe)", full))
    }

    /// Whether CompleteMultipartUpload refuses an `If-Match` that cannot
    /// hold. The probe upload is aborted whatever happens.
    async fn probe_complete_if_match(&self, full: &str, crc: u64) -> Result<bool, ObjectError> {
        let upload_id = self
            .client
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(full)
            .checksum_algorithm(ChecksumAlgorithm::Crc64Nvme)
            .checksum_type(ChecksumType::FullObject)
            .send()
            .await
            .map_err(|e| errors::object_error(&e, "CreateMultipartUpload (probe)", full))?
            .upload_id()
            .unwrap_or_default()
            .to_owned();
        let result = async {
            let wire = checksum::to_wire(crc);
            let part = self
                .client
                .upload_part()
                .bucket(&self.bucket)
                .key(full)
                .upload_id(&upload_id)
                .part_number(1)
                .body(ByteStream::from_static(PROBE_BODY))
                .checksum_algorithm(ChecksumAlgorithm::Crc64Nvme)
                .checksum_crc64_nvme(wire.clone())
                .send()
                .await
                .map_err(|e| errors::object_error(&e, "UploadPart (probe)", full))?;
            let completed = CompletedPart::builder()
                .part_number(1)
                .set_e_tag(part.e_tag().map(str::to_owned))
                .checksum_crc64_nvme(wire.clone())
                .build();
            let complete = self
                .client
                .complete_multipart_upload()
                .bucket(&self.bucket)
                .key(full)
                .upload_id(&upload_id)
                .multipart_upload(CompletedMultipartUpload::builder().parts(completed).build())
                .checksum_crc64_nvme(wire)
                .checksum_type(ChecksumType::FullObject)
                .if_match("\"00000000000000000000000000000000\"")
                .send()
                .await;
            match complete {
                Ok(_) => Ok(false),
                Err(e) => {
                    let failure = errors::failure(&e, "CompleteMultipartUpload (probe)", full);
                    match failure.class {
                        Class::Precondition => Ok(true),
                        _ => Err(failure.into_error()),
                    }
                }
            }
        }
        .await;
        let _ = self.abort_full(full, full, &upload_id).await;
        result
    }

    /// Removes every version and upload under the probe prefix.
    async fn clean_probe(&self, dir: &str) -> Result<(), ObjectError> {
        let full = self.keys.unchecked(dir)?;
        let listed = self
            .client
            .list_object_versions()
            .bucket(&self.bucket)
            .prefix(&full)
            .send()
            .await
            .map_err(|e| errors::object_error(&e, "ListObjectVersions (probe)", &full))?;
        let versions = listed
            .versions()
            .iter()
            .map(|v| (v.key(), v.version_id()))
            .chain(
                listed
                    .delete_markers()
                    .iter()
                    .map(|m| (m.key(), m.version_id())),
            );
        for (key, version) in versions {
            let Some(key) = key else { continue };
            self.client
                .delete_object()
                .bucket(&self.bucket)
                .key(key)
                .set_version_id(version.filter(|v| *v != "null").map(str::to_owned))
                .send()
                .await
                .map_err(|e| errors::object_error(&e, "DeleteObject (probe)", key))?;
        }
        for upload in self.pending_uploads(dir).await? {
            let key = ObjectKey::new(upload.key)?;
            self.drop_upload(&key, &upload.upload_id).await?;
        }
        Ok(())
    }
}
