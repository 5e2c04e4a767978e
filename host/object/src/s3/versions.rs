//! Version-scoped HEAD, GET and DELETE. S3's answers are normalised to the
//! contract: a delete marker addressed by id is `PreconditionFailed` (S3:
//! 405), an id S3 calls invalid (LocalStack's answer for another key's
//! version) is `NotFound`, and deleting an absent version is fine.

use aws_sdk_s3::types::ChecksumMode;
use bytes::Bytes;

use super::super::{ObjectError, ObjectKey, ObjectMeta};
use super::S3Store;
use super::errors::quoted;
use super::errors::{self, Class, Failure};
use super::meta::{self, Described};

/// Longest version id accepted (S3's documented bound), so a caller cannot
/// make this backend send an unbounded header.
const MAX_VERSION_ID_BYTES: usize = 1024;

/// Checks a version id before it is sent.
pub(super) fn validate_version_id(version_id: &str) -> Result<(), ObjectError> {
    if version_id.is_empty()
        || version_id.len() > MAX_VERSION_ID_BYTES
        || version_id.chars().any(char::is_control)
    {
        return Err(ObjectError::NotFound(
            format!("{version_id:?} is not a version id this store could have issued").into(),
        ));
    }
    Ok(())
}

impl S3Store {
    /// What a failed version-scoped call means.
    pub(super) fn version_failure(
        &self,
        key: &str,
        version_id: &str,
        failure: Failure,
    ) -> ObjectError {
        match failure.class {
            Class::MethodNotAllowed => ObjectError::PreconditionFailed(
                format!("version {version_id:?} of {key:?} is a delete marker and has no bytes")
                    .into(),
            ),
            Class::NotFound => ObjectError::NotFound(failure.detail.into()),
            Class::Invalid if failure.code.as_deref() == Some("InvalidArgument") => {
                ObjectError::NotFound(
                    format!("no version {version_id:?} of {key:?} ({})", failure.detail).into(),
                )
            }
            _ => failure.into_error(),
        }
    }

    /// See [`super::super::ObjectStore::head_opts`].
    pub(super) async fn head_exact(
        &self,
        key: &ObjectKey,
        version_id: &str,
    ) -> Result<ObjectMeta, ObjectError> {
        let full = self.keys.full(key)?;
        validate_version_id(version_id)?;
        let out = self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(&full)
            .version_id(version_id)
            .checksum_mode(ChecksumMode::Enabled)
            .send()
            .await
            .map_err(|e| {
                let failure = errors::failure(&e, "HeadObject (version)", &quoted(key));
                self.version_failure(key, version_id, failure)
            })?;
        if out.delete_marker() == Some(true) {
            return Err(ObjectError::PreconditionFailed(
                format!("version {version_id:?} of {key:?} is a delete marker and has no bytes")
                    .into(),
            ));
        }
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
    pub(super) async fn read_exact(
        &self,
        key: &ObjectKey,
        version_id: &str,
    ) -> Result<(ObjectMeta, Vec<Bytes>), ObjectError> {
        let full = self.keys.full(key)?;
        validate_version_id(version_id)?;
        let result = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(&full)
            .version_id(version_id)
            .checksum_mode(ChecksumMode::Enabled)
            .send()
            .await;
        match result {
            Ok(out) => self.whole_body(key, out).await,
            Err(e) => {
                let failure = errors::failure(&e, "GetObject (version)", &quoted(key));
                Err(self.version_read_failure(key, version_id, failure).await)
            }
        }
    }

    /// See [`super::super::ObjectStore::delete_opts`].
    pub(super) async fn delete_exact(
        &self,
        key: &ObjectKey,
        version_id: &str,
    ) -> Result<(), ObjectError> {
        let full = self.keys.full(key)?;
        if validate_version_id(version_id).is_err() {
            // Nothing this store issued: absent, and absent is fine.
            return Ok(());
        }
        let result = self
            .client
            .delete_object()
            .bucket(&self.bucket)
            .key(&full)
            .version_id(version_id)
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) => {
                let failure = errors::failure(&e, "DeleteObject (version)", &quoted(key));
                match self.version_failure(key, version_id, failure) {
                    ObjectError::NotFound(_) => Ok(()),
                    other => Err(other),
                }
            }
        }
    }
}
