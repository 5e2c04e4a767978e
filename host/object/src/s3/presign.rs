//! Presigned GET and PUT URLs (SigV4 query signing). A URL carries the
//! access key id (never the secret) and grants its one call to whoever
//! holds it until it expires: callers must not log it.

use custodian_base::detail::Detail;
use std::time::Duration;

use aws_sdk_s3::presigning::PresigningConfig;

use super::super::{ObjectError, ObjectKey};
use super::errors::quoted;
use super::{S3Store, errors};

/// Longest lifetime S3 accepts for a SigV4 presigned URL (7 days). A
/// caller wanting longer must re-sign on a schedule.
pub const MAX_PRESIGN_TTL_SECS: u64 = 7 * 24 * 3600;

fn presigning(ttl_secs: u64) -> Result<PresigningConfig, ObjectError> {
    if !(1..=MAX_PRESIGN_TTL_SECS).contains(&ttl_secs) {
        return Err(ObjectError::InvalidArgument(
            format!("a presigned URL lives 1..={MAX_PRESIGN_TTL_SECS} seconds, not {ttl_secs}")
                .into(),
        ));
    }
    PresigningConfig::expires_in(Duration::from_secs(ttl_secs)).map_err(|e| {
        ObjectError::InvalidArgument(Detail::caused_by(format!("presigning for {ttl_secs} s"), e))
    })
}

impl S3Store {
    /// See [`super::super::ObjectAdmin::presign_get`].
    pub(super) async fn presigned_get(
        &self,
        key: &ObjectKey,
        ttl_secs: u64,
    ) -> Result<String, ObjectError> {
        let full = self.keys.full(key)?;
        let request = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(full)
            .presigned(presigning(ttl_secs)?)
            .await
            .map_err(|e| errors::object_error(&e, "presigning GetObject", &quoted(key)))?;
        Ok(request.uri().to_owned())
    }

    /// See [`super::super::ObjectAdmin::presign_put`].
    pub(super) async fn presigned_put(
        &self,
        key: &ObjectKey,
        ttl_secs: u64,
    ) -> Result<String, ObjectError> {
        let full = self.keys.full(key)?;
        let request = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(full)
            .presigned(presigning(ttl_secs)?)
            .await
            .map_err(|e| errors::object_error(&e, "presigning PutObject", &quoted(key)))?;
        Ok(request.uri().to_owned())
    }
}
