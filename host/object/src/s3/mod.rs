//! The S3 backend: an [`ObjectStore`] over `aws-sdk-s3`, for AWS and for
//! S3-compatible servers (custom endpoint, path-style addressing).
//!
//! One module per concern:
//!
//! - `config`: bucket, prefix, endpoint, region, timeouts and retries
//!   ([`S3Config`](crate::s3::S3Config)); credentials only from
//!   the standard chain;
//! - `errors`: S3 status and code → [`ObjectError`] (412 vs 409, Auth,
//!   checksum, not found, unavailable);
//! - `etag`: the etags handed out, S3's etag joined with the version id,
//!   because S3's own is a content hash shared by identical publishes;
//! - `keys`: store keys under the prefix, copy sources;
//! - `meta`: S3 responses → [`ObjectMeta`], the stored CRC;
//! - `publish`, `read`, `versions`, `listing`, `multipart`, `compose`,
//!   `lifecycle`, `presign`: the trait's calls;
//! - `bootstrap`: versioning, the abort-incomplete-uploads rule, and probes
//!   of what the server really enforces.
//!
//! Integrity: every publish sends the full-object CRC-64/NVME
//! (`x-amz-checksum-crc64nvme`; `FULL_OBJECT` on multipart) for the server
//! to validate, checks the CRC the server returns, and whole reads check
//! the bytes against the stored CRC ([`ObjectError::Corrupt`] on a
//! mismatch). A server that does not validate checksums is found by the
//! bootstrap probe; until a probe has shown that it does, the store
//! verifies every publish by reading it back (and removes a version that
//! does not match). Fail-safe: a store that was never bootstrapped is slow,
//! not unchecked.
//!
//! Conditions the server cannot check atomically are checked by a HEAD just
//! before the write, which leaves a window: the version part of an `IfMatch`
//! etag (S3 matches only its content-hash etag, so a writer publishing
//! byte-identical content inside the window also passes), and, on servers
//! that ignore them (bootstrap reports which), destination conditions of a
//! copy and `If-Match` on CompleteMultipartUpload.
//!
//! S3 fixes an object's metadata when its multipart upload is created, so
//! [`ObjectStore::complete_upload`] takes metadata only as it was declared
//! then: [`ObjectStore::compose`] (overridden here: parts go up
//! concurrently) declares it at creation; the bare `create_upload` declares
//! none, and completing such an upload with metadata is `Unsupported`.

mod bootstrap;
mod compose;
mod config;
mod errors;
mod etag;
mod keys;
mod lifecycle;
mod listing;
mod meta;
mod multipart;
mod presign;
mod publish;
mod quirks;
mod read;
mod versions;

#[cfg(any(test, feature = "local-servers"))]
pub mod local_server;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use async_trait::async_trait;
use aws_sdk_s3::Client;
use aws_sdk_s3::config::ProvideCredentials;
use bytes::Bytes;

pub use self::config::{
    DEFAULT_ATTEMPT_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_ATTEMPTS,
    DEFAULT_OPERATION_TIMEOUT, S3Config,
};
pub use self::presign::MAX_PRESIGN_TTL_SECS;

use self::keys::Keys;
use super::{
    BootstrapReport, CompleteOptions, ComposeSpec, CopyOptions, DeleteOptions, GetOptions,
    GetResult, HeadOptions, LifecycleView, ListPage, ListedObject, ListedVersion, MAX_PART_NUMBER,
    ObjectAdmin, ObjectError, ObjectKey, ObjectMeta, ObjectStore, PartData, PendingUpload,
    PutOptions, RetentionOutcome, UploadOptions,
};
use custodian_base::clock::Clock;

/// S3's smallest part but the last.
const MIN_PART_SIZE: u64 = 5 << 20;

/// What this store has learned about the server, deciding how much it
/// checks itself. Starts at the safe end; bootstrap's probes relax it.
#[derive(Debug)]
struct Checks {
    /// Read every publish back and compare its CRC: the server has not
    /// been shown to validate checksums.
    verify_by_reading: AtomicBool,
    /// Record the CRC in metadata: the server returns no stored CRC64NVME.
    crc_in_metadata: AtomicBool,
    /// Version listings interleave versions and delete markers in S3's
    /// order (LocalStack and moto group them by kind instead).
    listing_interleaves: AtomicBool,
}

/// An object store in one S3 bucket, under one key prefix.
pub struct S3Store {
    client: Client,
    bucket: String,
    keys: Keys,
    versioned: bool,
    clock: Arc<dyn Clock>,
    checks: Checks,
    /// Makes probe keys unique within this process.
    nonce: AtomicU64,
}

impl std::fmt::Debug for S3Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Store")
            .field("bucket", &self.bucket)
            .field("prefix", &self.keys.prefix())
            .field("versioned", &self.versioned)
            .field("checks", &self.checks)
            .finish_non_exhaustive()
    }
}

impl S3Store {
    /// Connects to the bucket of `config` with credentials from the
    /// standard chain, and reads whether it keeps versions.
    ///
    /// # Errors
    /// `InvalidArgument` for a bad configuration or no region; `NotFound`
    /// when the bucket does not exist; `Auth` when the credentials are
    /// refused; `Unavailable` when the endpoint cannot be reached.
    pub async fn connect(config: S3Config, clock: Arc<dyn Clock>) -> Result<Self, ObjectError> {
        let client = config.client(None).await?;
        Self::with_client(client, &config, clock).await
    }

    /// [`S3Store::connect`] with credentials from `credentials` instead of
    /// the standard chain (an embedder's own provider; tests).
    ///
    /// # Errors
    /// As [`S3Store::connect`].
    pub async fn connect_with_credentials(
        config: S3Config,
        clock: Arc<dyn Clock>,
        credentials: impl ProvideCredentials + 'static,
    ) -> Result<Self, ObjectError> {
        let client = config
            .client(Some(config::shared_credentials(credentials)))
            .await?;
        Self::with_client(client, &config, clock).await
    }

    async fn with_client(
        client: Client,
        config: &S3Config,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, ObjectError> {
        let versioned = bucket_versioned(&client, &config.bucket).await?;
        Ok(Self {
            client,
            bucket: config.bucket.clone(),
            keys: Keys::new(config.prefix.clone()),
            versioned,
            clock,
            checks: Checks {
                verify_by_reading: AtomicBool::new(true),
                crc_in_metadata: AtomicBool::new(false),
                listing_interleaves: AtomicBool::new(false),
            },
            nonce: AtomicU64::new(0),
        })
    }

    /// The bucket.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The key prefix (`""` or `/`-terminated).
    pub fn prefix(&self) -> &str {
        self.keys.prefix()
    }

    /// Whether publishes are read back and checked here, because the
    /// server has not been shown to validate checksums.
    pub fn verifies_by_reading(&self) -> bool {
        self.checks.verify_by_reading.load(Ordering::Relaxed)
    }

    fn set_verify_by_reading(&self, on: bool) {
        self.checks.verify_by_reading.store(on, Ordering::Relaxed);
    }

    fn crc_in_metadata(&self) -> bool {
        self.checks.crc_in_metadata.load(Ordering::Relaxed)
    }

    fn set_crc_in_metadata(&self, on: bool) {
        self.checks.crc_in_metadata.store(on, Ordering::Relaxed);
    }

    fn listing_interleaves(&self) -> bool {
        self.checks.listing_interleaves.load(Ordering::Relaxed)
    }

    fn set_listing_interleaves(&self, on: bool) {
        self.checks.listing_interleaves.store(on, Ordering::Relaxed);
    }

    /// The CRC to record in metadata, when the server keeps none.
    fn crc_record(&self, crc64: u64) -> Option<u64> {
        self.crc_in_metadata().then_some(crc64)
    }

    /// A string no other call of this process (and, by the clock, no
    /// earlier process) has used.
    fn unique(&self) -> String {
        let n = self.nonce.fetch_add(1, Ordering::Relaxed);
        format!("{}-{}-{n}", self.clock.now_ms(), std::process::id())
    }

    fn require_versions(&self, call: &str) -> Result<(), ObjectError> {
        if self.versioned {
            Ok(())
        } else {
            Err(ObjectError::Unsupported(
                format!("{call}: bucket {:?} does not keep versions", self.bucket).into(),
            ))
        }
    }
}

/// Whether `bucket` keeps versions (status `Enabled`; `Suspended` and
/// never-enabled do not).
async fn bucket_versioned(client: &Client, bucket: &str) -> Result<bool, ObjectError> {
    match client.get_bucket_versioning().bucket(bucket).send().await {
        Ok(out) => Ok(matches!(
            out.status(),
            Some(aws_sdk_s3::types::BucketVersioningStatus::Enabled)
        )),
        Err(e) if let Some(body) = quirks::unparsed_success(&e) => {
            Ok(quirks::text(&body, "Status").as_deref() == Some("Enabled"))
        }
        Err(e) => Err(errors::object_error(
            &e,
            "GetBucketVersioning",
            &format!("bucket {bucket:?}"),
        )),
    }
}

#[async_trait]
impl ObjectStore for S3Store {
    fn versioned(&self) -> bool {
        self.versioned
    }

    fn min_part_size(&self) -> u64 {
        MIN_PART_SIZE
    }

    fn max_parts(&self) -> u32 {
        MAX_PART_NUMBER
    }

    async fn put_opts(
        &self,
        key: &ObjectKey,
        body: Bytes,
        options: PutOptions<'_>,
    ) -> Result<ObjectMeta, ObjectError> {
        let PutOptions {
            condition,
            metadata,
            crc64,
            content_md5: _,
        } = options;
        self.publish_whole(key, body, condition, metadata, crc64)
            .await
    }

    async fn copy_opts(
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
        self.copy(source, source_if_match, destination, condition, metadata)
            .await
    }

    async fn head_opts(
        &self,
        key: &ObjectKey,
        options: HeadOptions<'_>,
    ) -> Result<ObjectMeta, ObjectError> {
        match options.version_id {
            None => self.head_current(key).await,
            Some(version_id) => {
                self.require_versions("reading a version")?;
                self.head_exact(key, version_id).await
            }
        }
    }

    /// A range comes back as the SDK's body frames as they arrived, never
    /// copied into one buffer.
    async fn get_opts(
        &self,
        key: &ObjectKey,
        options: GetOptions<'_>,
    ) -> Result<GetResult, ObjectError> {
        let GetOptions {
            version_id,
            range,
            if_match,
        } = options;
        if version_id.is_some() {
            self.require_versions("reading a version")?;
        }
        if let Some(range) = range {
            let (meta, body) = self.read_range(key, version_id, range, if_match).await?;
            return Ok(GetResult { meta, body });
        }
        let (meta, body) = match version_id {
            None => self.read_whole(key, if_match).await?,
            Some(version_id) => {
                let (meta, body) = self.read_exact(key, version_id).await?;
                // A version never changes; its guard is a plain check.
                if let Some(want) = if_match
                    && meta.etag != want
                {
                    return Err(ObjectError::PreconditionFailed(
                        format!(
                            "version {version_id:?} of {key:?} is {}, not {want}",
                            meta.etag
                        )
                        .into(),
                    ));
                }
                (meta, body)
            }
        };
        Ok(GetResult { meta, body })
    }

    async fn delete_opts(
        &self,
        key: &ObjectKey,
        options: DeleteOptions<'_>,
    ) -> Result<(), ObjectError> {
        match options.version_id {
            None => self.delete_current(key).await,
            Some(version_id) => {
                self.require_versions("deleting a version")?;
                self.delete_exact(key, version_id).await
            }
        }
    }

    async fn list(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<ListPage<ListedObject>, ObjectError> {
        self.list_current(prefix, cursor, limit).await
    }

    async fn list_versions(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<ListPage<ListedVersion>, ObjectError> {
        self.require_versions("list_versions")?;
        self.list_all_versions(prefix, cursor, limit).await
    }

    async fn create_upload(
        &self,
        key: &ObjectKey,
        options: UploadOptions<'_>,
    ) -> Result<String, ObjectError> {
        self.start_upload(key, options.metadata).await
    }

    async fn upload_part(
        &self,
        key: &ObjectKey,
        upload_id: &str,
        part: u32,
        data: PartData<'_>,
    ) -> Result<u64, ObjectError> {
        match data {
            PartData::Bytes { body, crc64 } => {
                self.put_part(key, upload_id, part, body, crc64).await?;
                Ok(crc64)
            }
            PartData::Copy {
                source,
                source_if_match,
                range,
            } => {
                self.copy_part(key, upload_id, part, source, source_if_match, range)
                    .await
            }
        }
    }

    async fn complete_upload(
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
        self.finish_upload(key, upload_id, parts, condition, crc64)
            .await
    }

    async fn abort_upload(&self, key: &ObjectKey, upload_id: &str) -> Result<(), ObjectError> {
        self.drop_upload(key, upload_id).await
    }

    async fn list_uploads(&self, prefix: &str) -> Result<Vec<PendingUpload>, ObjectError> {
        self.pending_uploads(prefix).await
    }

    async fn list_parts(
        &self,
        key: &ObjectKey,
        upload_id: &str,
    ) -> Result<Vec<crate::UploadedPart>, ObjectError> {
        self.uploaded_parts(key, upload_id).await
    }

    async fn compose(&self, spec: &ComposeSpec<'_>) -> Result<ObjectMeta, ObjectError> {
        self.compose_concurrently(spec).await
    }

    fn admin(&self) -> &dyn ObjectAdmin {
        self
    }
}

#[async_trait]
impl ObjectAdmin for S3Store {
    async fn bootstrap(&self, prefix: &str) -> Result<BootstrapReport, ObjectError> {
        self.check_posture(prefix).await
    }

    async fn lifecycle_rules(&self) -> Result<Vec<LifecycleView>, ObjectError> {
        self.read_lifecycle().await
    }

    async fn ensure_noncurrent_retention(
        &self,
        prefix: &str,
        days: u64,
    ) -> Result<RetentionOutcome, ObjectError> {
        self.ensure_retention(prefix, days).await
    }

    async fn presign_get(&self, key: &ObjectKey, ttl_secs: u64) -> Result<String, ObjectError> {
        self.presigned_get(key, ttl_secs).await
    }

    async fn presign_put(&self, key: &ObjectKey, ttl_secs: u64) -> Result<String, ObjectError> {
        self.presigned_put(key, ttl_secs).await
    }
}
