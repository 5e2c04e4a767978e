//! A store that shows every call to an [`Observer`] before and after
//! passing it on: metrics count calls with it, and tests count requests
//! or inject failures with it, without a forwarding implementation of the
//! whole trait in each place.
//!
//! Every operation is forwarded to the inner store's own method, never to
//! the trait's default, so a backend's override (S3's streaming
//! `get_range_segments`, its native compose, presigning, lifecycle rules)
//! stays in effect behind the wrapper. A call is therefore observed once,
//! as its caller made it: what the inner store does to serve it (the parts
//! of a compose, the publishes of an epoch renewal) is not observed again.
//!
//! The capability getters (`versioned`, `min_part_size`, `max_parts`) are
//! not observed: they are constant properties of the backend, not requests
//! to it, and counting them would only add noise.

use std::future::Future;
use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

use super::{
    BootstrapReport, ComposeSpec, EpochLease, EpochState, LifecycleView, ListPage, ListedObject,
    ListedVersion, Metadata, ObjectError, ObjectMeta, ObjectStore, PendingUpload, PutCondition,
    RetentionOutcome,
};

/// One [`ObjectStore`] operation, with the key (or prefix) it is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call<'a> {
    /// [`ObjectStore::put_whole`].
    PutWhole {
        /// The key published.
        key: &'a str,
    },
    /// [`ObjectStore::copy_object`].
    CopyObject {
        /// The key copied from.
        source: &'a str,
        /// The key published.
        destination: &'a str,
    },
    /// [`ObjectStore::compose_generation`].
    ComposeGeneration {
        /// The key published.
        key: &'a str,
    },
    /// [`ObjectStore::head`].
    Head {
        /// The key.
        key: &'a str,
    },
    /// [`ObjectStore::get_whole`].
    GetWhole {
        /// The key.
        key: &'a str,
    },
    /// [`ObjectStore::get_range`].
    GetRange {
        /// The key.
        key: &'a str,
    },
    /// [`ObjectStore::get_range_segments`].
    GetRangeSegments {
        /// The key.
        key: &'a str,
    },
    /// [`ObjectStore::delete`].
    Delete {
        /// The key.
        key: &'a str,
    },
    /// [`ObjectStore::list`].
    List {
        /// The prefix listed.
        prefix: &'a str,
    },
    /// [`ObjectStore::head_version`].
    HeadVersion {
        /// The key.
        key: &'a str,
        /// The version.
        version_id: &'a str,
    },
    /// [`ObjectStore::get_version`].
    GetVersion {
        /// The key.
        key: &'a str,
        /// The version.
        version_id: &'a str,
    },
    /// [`ObjectStore::get_version_range`].
    GetVersionRange {
        /// The key.
        key: &'a str,
        /// The version.
        version_id: &'a str,
    },
    /// [`ObjectStore::delete_version`].
    DeleteVersion {
        /// The key.
        key: &'a str,
        /// The version.
        version_id: &'a str,
    },
    /// [`ObjectStore::list_versions`].
    ListVersions {
        /// The prefix listed.
        prefix: &'a str,
    },
    /// [`ObjectStore::create_upload`].
    CreateUpload {
        /// The key the upload will publish.
        key: &'a str,
    },
    /// [`ObjectStore::upload_part`].
    UploadPart {
        /// The key the upload will publish.
        key: &'a str,
        /// The part number.
        part: u32,
    },
    /// [`ObjectStore::upload_part_copy`].
    UploadPartCopy {
        /// The key the upload will publish.
        key: &'a str,
        /// The part number.
        part: u32,
        /// The key copied from.
        source: &'a str,
    },
    /// [`ObjectStore::complete_upload`].
    CompleteUpload {
        /// The key published.
        key: &'a str,
    },
    /// [`ObjectStore::abort_upload`].
    AbortUpload {
        /// The key the upload would have published.
        key: &'a str,
    },
    /// [`ObjectStore::list_uploads`].
    ListUploads {
        /// The prefix listed.
        prefix: &'a str,
    },
    /// [`ObjectStore::bootstrap`].
    Bootstrap {
        /// The prefix checked.
        prefix: &'a str,
    },
    /// [`ObjectStore::lifecycle_rules`].
    LifecycleRules,
    /// [`ObjectStore::ensure_noncurrent_retention`].
    EnsureNoncurrentRetention {
        /// The prefix retained.
        prefix: &'a str,
    },
    /// [`ObjectStore::presign_get`].
    PresignGet {
        /// The key.
        key: &'a str,
    },
    /// [`ObjectStore::presign_put`].
    PresignPut {
        /// The key.
        key: &'a str,
    },
    /// [`ObjectStore::epoch_read`].
    EpochRead {
        /// The epoch cell's key.
        key: &'a str,
    },
    /// [`ObjectStore::epoch_acquire`].
    EpochAcquire {
        /// The epoch cell's key.
        key: &'a str,
    },
    /// [`ObjectStore::epoch_renew`].
    EpochRenew {
        /// The epoch cell's key.
        key: &'a str,
    },
    /// [`ObjectStore::epoch_release`].
    EpochRelease {
        /// The epoch cell's key.
        key: &'a str,
    },
}

impl<'a> Call<'a> {
    /// The trait method's name (`"put_whole"`, `"get_range"`, ...): a
    /// fixed set, so it is safe as a metric label.
    pub fn operation(&self) -> &'static str {
        match self {
            Call::PutWhole { .. } => "put_whole",
            Call::CopyObject { .. } => "copy_object",
            Call::ComposeGeneration { .. } => "compose_generation",
            Call::Head { .. } => "head",
            Call::GetWhole { .. } => "get_whole",
            Call::GetRange { .. } => "get_range",
            Call::GetRangeSegments { .. } => "get_range_segments",
            Call::Delete { .. } => "delete",
            Call::List { .. } => "list",
            Call::HeadVersion { .. } => "head_version",
            Call::GetVersion { .. } => "get_version",
            Call::GetVersionRange { .. } => "get_version_range",
            Call::DeleteVersion { .. } => "delete_version",
            Call::ListVersions { .. } => "list_versions",
            Call::CreateUpload { .. } => "create_upload",
            Call::UploadPart { .. } => "upload_part",
            Call::UploadPartCopy { .. } => "upload_part_copy",
            Call::CompleteUpload { .. } => "complete_upload",
            Call::AbortUpload { .. } => "abort_upload",
            Call::ListUploads { .. } => "list_uploads",
            Call::Bootstrap { .. } => "bootstrap",
            Call::LifecycleRules => "lifecycle_rules",
            Call::EnsureNoncurrentRetention { .. } => "ensure_noncurrent_retention",
            Call::PresignGet { .. } => "presign_get",
            Call::PresignPut { .. } => "presign_put",
            Call::EpochRead { .. } => "epoch_read",
            Call::EpochAcquire { .. } => "epoch_acquire",
            Call::EpochRenew { .. } => "epoch_renew",
            Call::EpochRelease { .. } => "epoch_release",
        }
    }

    /// The object key the call is about (the destination of a copy);
    /// `None` for listings, bootstrap and lifecycle calls.
    pub fn key(&self) -> Option<&'a str> {
        match *self {
            Call::PutWhole { key }
            | Call::CopyObject {
                destination: key, ..
            }
            | Call::ComposeGeneration { key }
            | Call::Head { key }
            | Call::GetWhole { key }
            | Call::GetRange { key }
            | Call::GetRangeSegments { key }
            | Call::Delete { key }
            | Call::HeadVersion { key, .. }
            | Call::GetVersion { key, .. }
            | Call::GetVersionRange { key, .. }
            | Call::DeleteVersion { key, .. }
            | Call::CreateUpload { key }
            | Call::UploadPart { key, .. }
            | Call::UploadPartCopy { key, .. }
            | Call::CompleteUpload { key }
            | Call::AbortUpload { key }
            | Call::PresignGet { key }
            | Call::PresignPut { key }
            | Call::EpochRead { key }
            | Call::EpochAcquire { key }
            | Call::EpochRenew { key }
            | Call::EpochRelease { key } => Some(key),
            Call::List { .. }
            | Call::ListVersions { .. }
            | Call::ListUploads { .. }
            | Call::Bootstrap { .. }
            | Call::LifecycleRules
            | Call::EnsureNoncurrentRetention { .. } => None,
        }
    }
}

/// Sees every call an [`Observed`] store makes.
pub trait Observer: Send + Sync {
    /// Runs before the call reaches the store. An error is the call's
    /// answer, the store is not reached, and [`Observer::after`] is not
    /// run: the call did not happen.
    ///
    /// # Errors
    /// Whatever the observer wants the caller to see instead.
    fn before(&self, call: &Call<'_>) -> Result<(), ObjectError> {
        let _ = call;
        Ok(())
    }

    /// Runs when a call that [`Observer::before`] let through has
    /// returned (for a streaming read: when the stream's segments have
    /// been returned), with whether it failed.
    fn after(&self, call: &Call<'_>, failed: bool) {
        let _ = (call, failed);
    }
}

/// An observer that is one closure run before each call.
struct BeforeHook<F>(F);

impl<F> Observer for BeforeHook<F>
where
    F: Fn(&Call<'_>) -> Result<(), ObjectError> + Send + Sync,
{
    fn before(&self, call: &Call<'_>) -> Result<(), ObjectError> {
        (self.0)(call)
    }
}

/// `inner`, with every call shown to `observer`.
pub struct Observed {
    inner: Arc<dyn ObjectStore>,
    observer: Arc<dyn Observer>,
}

impl Observed {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn ObjectStore>, observer: Arc<dyn Observer>) -> Self {
        Self { inner, observer }
    }

    /// Wraps `inner` with `hook` run before every call; an error from the
    /// hook is the call's answer and the store is not reached. Written for
    /// counting and failure injection in a few lines.
    pub fn before(
        inner: Arc<dyn ObjectStore>,
        hook: impl Fn(&Call<'_>) -> Result<(), ObjectError> + Send + Sync + 'static,
    ) -> Self {
        Self::new(inner, Arc::new(BeforeHook(hook)))
    }

    /// The wrapped store.
    pub fn inner(&self) -> &Arc<dyn ObjectStore> {
        &self.inner
    }

    /// Runs `call` (the inner store's future, which does nothing until it
    /// is awaited) between the observer's two hooks.
    async fn observe<T>(
        &self,
        call: Call<'_>,
        run: impl Future<Output = Result<T, ObjectError>>,
    ) -> Result<T, ObjectError> {
        self.observer.before(&call)?;
        let result = run.await;
        self.observer.after(&call, result.is_err());
        result
    }
}

#[async_trait]
impl ObjectStore for Observed {
    fn versioned(&self) -> bool {
        self.inner.versioned()
    }

    fn min_part_size(&self) -> u64 {
        self.inner.min_part_size()
    }

    fn max_parts(&self) -> u32 {
        self.inner.max_parts()
    }

    async fn put_whole(
        &self,
        key: &str,
        body: Bytes,
        condition: &PutCondition,
        metadata: &Metadata,
        crc64: u64,
    ) -> Result<ObjectMeta, ObjectError> {
        let run = self.inner.put_whole(key, body, condition, metadata, crc64);
        self.observe(Call::PutWhole { key }, run).await
    }

    async fn copy_object(
        &self,
        source: &str,
        source_if_match: Option<&str>,
        destination: &str,
        condition: &PutCondition,
        metadata: &Metadata,
    ) -> Result<ObjectMeta, ObjectError> {
        let run = self
            .inner
            .copy_object(source, source_if_match, destination, condition, metadata);
        let call = Call::CopyObject {
            source,
            destination,
        };
        self.observe(call, run).await
    }

    async fn compose_generation(&self, spec: &ComposeSpec<'_>) -> Result<ObjectMeta, ObjectError> {
        let call = Call::ComposeGeneration { key: spec.key };
        self.observe(call, self.inner.compose_generation(spec))
            .await
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta, ObjectError> {
        self.observe(Call::Head { key }, self.inner.head(key)).await
    }

    async fn get_whole(
        &self,
        key: &str,
        if_match: Option<&str>,
    ) -> Result<(ObjectMeta, Bytes), ObjectError> {
        let run = self.inner.get_whole(key, if_match);
        self.observe(Call::GetWhole { key }, run).await
    }

    async fn get_range(
        &self,
        key: &str,
        range: Range<u64>,
        if_match: &str,
    ) -> Result<Bytes, ObjectError> {
        let run = self.inner.get_range(key, range, if_match);
        self.observe(Call::GetRange { key }, run).await
    }

    async fn get_range_segments(
        &self,
        key: &str,
        range: Range<u64>,
        if_match: &str,
    ) -> Result<Vec<Bytes>, ObjectError> {
        let run = self.inner.get_range_segments(key, range, if_match);
        self.observe(Call::GetRangeSegments { key }, run).await
    }

    async fn delete(&self, key: &str) -> Result<(), ObjectError> {
        self.observe(Call::Delete { key }, self.inner.delete(key))
            .await
    }

    async fn list(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<ListPage<ListedObject>, ObjectError> {
        let run = self.inner.list(prefix, cursor, limit);
        self.observe(Call::List { prefix }, run).await
    }

    async fn head_version(&self, key: &str, version_id: &str) -> Result<ObjectMeta, ObjectError> {
        let run = self.inner.head_version(key, version_id);
        self.observe(Call::HeadVersion { key, version_id }, run)
            .await
    }

    async fn get_version(
        &self,
        key: &str,
        version_id: &str,
    ) -> Result<(ObjectMeta, Bytes), ObjectError> {
        let run = self.inner.get_version(key, version_id);
        self.observe(Call::GetVersion { key, version_id }, run)
            .await
    }

    async fn get_version_range(
        &self,
        key: &str,
        version_id: &str,
        range: Range<u64>,
    ) -> Result<Bytes, ObjectError> {
        let run = self.inner.get_version_range(key, version_id, range);
        self.observe(Call::GetVersionRange { key, version_id }, run)
            .await
    }

    async fn delete_version(&self, key: &str, version_id: &str) -> Result<(), ObjectError> {
        let run = self.inner.delete_version(key, version_id);
        self.observe(Call::DeleteVersion { key, version_id }, run)
            .await
    }

    async fn list_versions(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<ListPage<ListedVersion>, ObjectError> {
        let run = self.inner.list_versions(prefix, cursor, limit);
        self.observe(Call::ListVersions { prefix }, run).await
    }

    async fn create_upload(&self, key: &str) -> Result<String, ObjectError> {
        let run = self.inner.create_upload(key);
        self.observe(Call::CreateUpload { key }, run).await
    }

    async fn upload_part(
        &self,
        key: &str,
        upload_id: &str,
        part: u32,
        body: Bytes,
        crc64: u64,
    ) -> Result<(), ObjectError> {
        let run = self.inner.upload_part(key, upload_id, part, body, crc64);
        self.observe(Call::UploadPart { key, part }, run).await
    }

    async fn upload_part_copy(
        &self,
        key: &str,
        upload_id: &str,
        part: u32,
        source: &str,
        source_if_match: &str,
        range: Range<u64>,
    ) -> Result<u64, ObjectError> {
        let run = self
            .inner
            .upload_part_copy(key, upload_id, part, source, source_if_match, range);
        self.observe(Call::UploadPartCopy { key, part, source }, run)
            .await
    }

    async fn complete_upload(
        &self,
        key: &str,
        upload_id: &str,
        parts: u32,
        condition: &PutCondition,
        metadata: &Metadata,
        crc64: u64,
    ) -> Result<ObjectMeta, ObjectError> {
        let run = self
            .inner
            .complete_upload(key, upload_id, parts, condition, metadata, crc64);
        self.observe(Call::CompleteUpload { key }, run).await
    }

    async fn abort_upload(&self, key: &str, upload_id: &str) -> Result<(), ObjectError> {
        let run = self.inner.abort_upload(key, upload_id);
        self.observe(Call::AbortUpload { key }, run).await
    }

    async fn list_uploads(&self, prefix: &str) -> Result<Vec<PendingUpload>, ObjectError> {
        let run = self.inner.list_uploads(prefix);
        self.observe(Call::ListUploads { prefix }, run).await
    }

    async fn bootstrap(&self, prefix: &str) -> Result<BootstrapReport, ObjectError> {
        let run = self.inner.bootstrap(prefix);
        self.observe(Call::Bootstrap { prefix }, run).await
    }

    async fn lifecycle_rules(&self) -> Result<Vec<LifecycleView>, ObjectError> {
        self.observe(Call::LifecycleRules, self.inner.lifecycle_rules())
            .await
    }

    async fn ensure_noncurrent_retention(
        &self,
        prefix: &str,
        days: u64,
    ) -> Result<RetentionOutcome, ObjectError> {
        let run = self.inner.ensure_noncurrent_retention(prefix, days);
        self.observe(Call::EnsureNoncurrentRetention { prefix }, run)
            .await
    }

    async fn presign_get(&self, key: &str, ttl_secs: u64) -> Result<String, ObjectError> {
        let run = self.inner.presign_get(key, ttl_secs);
        self.observe(Call::PresignGet { key }, run).await
    }

    async fn presign_put(&self, key: &str, ttl_secs: u64) -> Result<String, ObjectError> {
        let run = self.inner.presign_put(key, ttl_secs);
        self.observe(Call::PresignPut { key }, run).await
    }

    async fn epoch_read(&self, key: &str) -> Result<Option<EpochState>, ObjectError> {
        let run = self.inner.epoch_read(key);
        self.observe(Call::EpochRead { key }, run).await
    }

    async fn epoch_acquire(
        &self,
        key: &str,
        holder_id: &str,
        supersede: Option<&EpochState>,
    ) -> Result<EpochLease, ObjectError> {
        let run = self.inner.epoch_acquire(key, holder_id, supersede);
        self.observe(Call::EpochAcquire { key }, run).await
    }

    async fn epoch_renew(
        &self,
        key: &str,
        lease: &EpochLease,
        echo: Option<&str>,
    ) -> Result<EpochLease, ObjectError> {
        let run = self.inner.epoch_renew(key, lease, echo);
        self.observe(Call::EpochRenew { key }, run).await
    }

    async fn epoch_release(&self, key: &str, lease: &EpochLease) -> Result<(), ObjectError> {
        let run = self.inner.epoch_release(key, lease);
        self.observe(Call::EpochRelease { key }, run).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::memory::MemoryStore;
    use custodian_base::checksum::crc64_nvme;
    use custodian_base::clock::SystemClock;

    /// Records every hook run, as `before:op:key` / `after:op:failed`.
    #[derive(Default)]
    struct Recorder(Mutex<Vec<String>>);

    impl Observer for Recorder {
        fn before(&self, call: &Call<'_>) -> Result<(), ObjectError> {
            let key = call.key().unwrap_or("-");
            self.0
                .lock()
                .unwrap()
                .push(format!("before:{}:{key}", call.operation()));
            Ok(())
        }

        fn after(&self, call: &Call<'_>, failed: bool) {
            self.0
                .lock()
                .unwrap()
                .push(format!("after:{}:{failed}", call.operation()));
        }
    }

    fn memory() -> Arc<dyn ObjectStore> {
        Arc::new(MemoryStore::versioned(Arc::new(SystemClock)))
    }

    #[tokio::test]
    async fn every_call_is_seen_before_and_after_with_whether_it_failed() {
        let recorder = Arc::new(Recorder::default());
        let store = Observed::new(memory(), recorder.clone());
        let meta = store
            .put_whole(
                "a/b",
                Bytes::from_static(b"xy"),
                &PutCondition::IfNoneMatchAny,
                &Metadata::new(),
                crc64_nvme(b"xy"),
            )
            .await
            .unwrap();
        store
            .get_range_segments("a/b", 0..1, &meta.etag)
            .await
            .unwrap();
        store.head("missing").await.unwrap_err();
        store.list_versions("a/", None, 10).await.unwrap();
        assert_eq!(
            *recorder.0.lock().unwrap(),
            [
                "before:put_whole:a/b",
                "after:put_whole:false",
                "before:get_range_segments:a/b",
                "after:get_range_segments:false",
                "before:head:missing",
                "after:head:true",
                "before:list_versions:-",
                "after:list_versions:false",
            ]
        );
    }

    #[tokio::test]
    async fn a_refusal_before_the_call_is_its_answer_and_the_store_is_not_reached() {
        let inner = memory();
        let store = Observed::before(inner.clone(), |call| match call {
            Call::PutWhole { key: "refused" } => Err(ObjectError::Unavailable("injected".into())),
            _ => Ok(()),
        });
        let error = store
            .put_whole(
                "refused",
                Bytes::new(),
                &PutCondition::IfNoneMatchAny,
                &Metadata::new(),
                0,
            )
            .await
            .unwrap_err();
        assert_eq!(error, ObjectError::Unavailable("injected".into()));
        assert!(matches!(
            inner.head("refused").await,
            Err(ObjectError::NotFound(_))
        ));
    }

    #[tokio::test]
    async fn backend_overrides_stay_in_effect_behind_the_wrapper() {
        // The memory store overrides `lifecycle_rules`; the trait's default
        // says `Unsupported`. Forwarding must reach the override.
        let store = Observed::before(memory(), |_| Ok(()));
        assert_eq!(store.lifecycle_rules().await, Ok(vec![]));
    }
}
