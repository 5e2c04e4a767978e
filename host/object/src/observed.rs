//! The one decorator: a store that shows every primitive call to an
//! [`Observer`] before and after passing it on. Metrics count calls with
//! it, the core's budgets charge with it, and tests count requests or
//! inject failures with it; nothing else forwards the trait by hand.
//!
//! Only the [`ObjectStore`] primitives are observed, and each is forwarded
//! to the inner store's own method, so a backend's override (S3's native
//! compose) stays in effect behind the wrapper. A call is therefore
//! observed once, as its caller made it: what the inner store does to
//! serve it (the parts of a compose) is not observed again, and the
//! shorthands of [`ObjectStoreExt`](super::ObjectStoreExt) and the epoch
//! cells are seen as the primitives they are made of.
//!
//! Not observed: the capability getters (constant properties of the
//! backend, not requests to it) and [`ObjectAdmin`] calls (operator-time
//! set-up, handed through as the inner store's).

use std::future::Future;
use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

use super::{
    CompleteOptions, ComposeSpec, CopyOptions, DeleteOptions, GetOptions, GetResult, HeadOptions,
    ListPage, ListedObject, ListedVersion, ObjectAdmin, ObjectError, ObjectKey, ObjectMeta,
    ObjectStore, PartData, PendingUpload, PutOptions, StreamedBody, UploadOptions,
};

/// One [`ObjectStore`] primitive call, with what it is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call<'a> {
    /// [`ObjectStore::put_opts`] or [`ObjectStore::put_stream`].
    Put {
        /// The key published.
        key: &'a str,
    },
    /// [`ObjectStore::copy_opts`].
    Copy {
        /// The key copied from.
        source: &'a str,
        /// The key published.
        destination: &'a str,
    },
    /// [`ObjectStore::compose`].
    Compose {
        /// The key published.
        key: &'a str,
        /// How many parts the generation is assembled from.
        parts: u32,
    },
    /// [`ObjectStore::head_opts`].
    Head {
        /// The key.
        key: &'a str,
        /// The exact version, if one was named.
        version_id: Option<&'a str>,
    },
    /// [`ObjectStore::get_opts`].
    Get {
        /// The key.
        key: &'a str,
        /// The exact version, if one was named.
        version_id: Option<&'a str>,
        /// The range, if one was asked for.
        range: Option<&'a Range<u64>>,
    },
    /// [`ObjectStore::delete_opts`].
    Delete {
        /// The key.
        key: &'a str,
        /// The exact version, if one was named.
        version_id: Option<&'a str>,
    },
    /// [`ObjectStore::list`].
    List {
        /// The prefix listed.
        prefix: &'a str,
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
        /// The key copied from, for a server-side copy.
        source: Option<&'a str>,
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
    /// [`ObjectStore::list_parts`].
    ListParts {
        /// The key the upload would publish.
        key: &'a str,
    },
}

impl<'a> Call<'a> {
    /// What kind of request this is (`"put_whole"`, `"get_range"`,
    /// `"delete_version"`, ...): a fixed set, so it is safe as a metric
    /// label, and finer than the primitive (a read of a version's range is
    /// told from a whole read of the current object).
    pub fn operation(&self) -> &'static str {
        match self {
            Call::Put { .. } => "put_whole",
            Call::Copy { .. } => "copy_object",
            Call::Compose { .. } => "compose_generation",
            Call::Head {
                version_id: None, ..
            } => "head",
            Call::Head { .. } => "head_version",
            Call::Get {
                version_id, range, ..
            } => match (version_id, range) {
                (None, None) => "get_whole",
                (None, Some(_)) => "get_range",
                (Some(_), None) => "get_version",
                (Some(_), Some(_)) => "get_version_range",
            },
            Call::Delete {
                version_id: None, ..
            } => "delete",
            Call::Delete { .. } => "delete_version",
            Call::List { .. } => "list",
            Call::ListVersions { .. } => "list_versions",
            Call::CreateUpload { .. } => "create_upload",
            Call::UploadPart { source: None, .. } => "upload_part",
            Call::UploadPart { .. } => "upload_part_copy",
            Call::CompleteUpload { .. } => "complete_upload",
            Call::AbortUpload { .. } => "abort_upload",
            Call::ListUploads { .. } => "list_uploads",
            Call::ListParts { .. } => "list_parts",
        }
    }

    /// The object key the call is about (the destination of a copy);
    /// `None` for listings.
    pub fn key(&self) -> Option<&'a str> {
        match *self {
            Call::Put { key }
            | Call::Copy {
                destination: key, ..
            }
            | Call::Compose { key, .. }
            | Call::Head { key, .. }
            | Call::Get { key, .. }
            | Call::Delete { key, .. }
            | Call::CreateUpload { key }
            | Call::UploadPart { key, .. }
            | Call::CompleteUpload { key }
            | Call::AbortUpload { key }
            | Call::ListParts { key } => Some(key),
            Call::List { .. } | Call::ListVersions { .. } | Call::ListUploads { .. } => None,
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
    /// returned, with whether it failed.
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

    fn streams_bodies(&self) -> bool {
        self.inner.streams_bodies()
    }

    async fn put_opts(
        &self,
        key: &ObjectKey,
        body: Bytes,
        options: PutOptions<'_>,
    ) -> Result<ObjectMeta, ObjectError> {
        let run = self.inner.put_opts(key, body, options);
        self.observe(Call::Put { key }, run).await
    }

    async fn put_stream(
        &self,
        key: &ObjectKey,
        body: StreamedBody,
        limit: u64,
        options: PutOptions<'_>,
    ) -> Result<ObjectMeta, ObjectError> {
        let run = self.inner.put_stream(key, body, limit, options);
        self.observe(Call::Put { key }, run).await
    }

    async fn copy_opts(
        &self,
        source: &ObjectKey,
        destination: &ObjectKey,
        options: CopyOptions<'_>,
    ) -> Result<ObjectMeta, ObjectError> {
        let run = self.inner.copy_opts(source, destination, options);
        let call = Call::Copy {
            source,
            destination,
        };
        self.observe(call, run).await
    }

    async fn head_opts(
        &self,
        key: &ObjectKey,
        options: HeadOptions<'_>,
    ) -> Result<ObjectMeta, ObjectError> {
        let call = Call::Head {
            key,
            version_id: options.version_id,
        };
        self.observe(call, self.inner.head_opts(key, options)).await
    }

    async fn get_opts(
        &self,
        key: &ObjectKey,
        options: GetOptions<'_>,
    ) -> Result<GetResult, ObjectError> {
        let range = options.range.clone();
        let call = Call::Get {
            key,
            version_id: options.version_id,
            range: range.as_ref(),
        };
        self.observe(call, self.inner.get_opts(key, options)).await
    }

    async fn delete_opts(
        &self,
        key: &ObjectKey,
        options: DeleteOptions<'_>,
    ) -> Result<(), ObjectError> {
        let call = Call::Delete {
            key,
            version_id: options.version_id,
        };
        self.observe(call, self.inner.delete_opts(key, options))
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

    async fn list_versions(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<ListPage<ListedVersion>, ObjectError> {
        let run = self.inner.list_versions(prefix, cursor, limit);
        self.observe(Call::ListVersions { prefix }, run).await
    }

    async fn list_key_versions(
        &self,
        key: &ObjectKey,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<ListPage<ListedVersion>, ObjectError> {
        let run = self.inner.list_key_versions(key, cursor, limit);
        let call = Call::ListVersions {
            prefix: key.as_str(),
        };
        self.observe(call, run).await
    }

    async fn create_upload(
        &self,
        key: &ObjectKey,
        options: UploadOptions<'_>,
    ) -> Result<String, ObjectError> {
        let run = self.inner.create_upload(key, options);
        self.observe(Call::CreateUpload { key }, run).await
    }

    async fn upload_part(
        &self,
        key: &ObjectKey,
        upload_id: &str,
        part: u32,
        data: PartData<'_>,
    ) -> Result<u64, ObjectError> {
        // The source key is borrowed for the call's lifetime, not from
        // `data`, so `data` moves on to the store uncopied.
        let source = match data {
            PartData::Bytes { .. } => None,
            PartData::Copy { source, .. } => Some(source.as_str()),
        };
        let call = Call::UploadPart { key, part, source };
        let run = self.inner.upload_part(key, upload_id, part, data);
        self.observe(call, run).await
    }

    async fn upload_part_stream(
        &self,
        key: &ObjectKey,
        upload_id: &str,
        part: u32,
        body: StreamedBody,
        limit: u64,
    ) -> Result<u64, ObjectError> {
        let call = Call::UploadPart {
            key,
            part,
            source: None,
        };
        let run = self
            .inner
            .upload_part_stream(key, upload_id, part, body, limit);
        self.observe(call, run).await
    }

    async fn complete_upload(
        &self,
        key: &ObjectKey,
        upload_id: &str,
        options: CompleteOptions<'_>,
    ) -> Result<ObjectMeta, ObjectError> {
        let run = self.inner.complete_upload(key, upload_id, options);
        self.observe(Call::CompleteUpload { key }, run).await
    }

    async fn abort_upload(&self, key: &ObjectKey, upload_id: &str) -> Result<(), ObjectError> {
        let run = self.inner.abort_upload(key, upload_id);
        self.observe(Call::AbortUpload { key }, run).await
    }

    async fn list_uploads(&self, prefix: &str) -> Result<Vec<PendingUpload>, ObjectError> {
        let run = self.inner.list_uploads(prefix);
        self.observe(Call::ListUploads { prefix }, run).await
    }

    async fn list_parts(
        &self,
        key: &ObjectKey,
        upload_id: &str,
    ) -> Result<Vec<crate::UploadedPart>, ObjectError> {
        let run = self.inner.list_parts(key, upload_id);
        self.observe(Call::ListParts { key }, run).await
    }

    async fn compose(&self, spec: &ComposeSpec<'_>) -> Result<ObjectMeta, ObjectError> {
        let call = Call::Compose {
            key: spec.key,
            // At most `max_parts`, a u32; a longer spec is refused anyway.
            parts: u32::try_from(spec.parts.len()).unwrap_or(u32::MAX),
        };
        self.observe(call, self.inner.compose(spec)).await
    }

    fn admin(&self) -> &dyn ObjectAdmin {
        self.inner.admin()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::memory::MemoryStore;
    use crate::{Metadata, ObjectStoreExt, PutCondition};
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
        store.get_range("a/b", 0..1, &meta.etag).await.unwrap();
        store.head("missing").await.unwrap_err();
        store.list_versions("a/", None, 10).await.unwrap();
        assert_eq!(
            *recorder.0.lock().unwrap(),
            [
                "before:put_whole:a/b",
                "after:put_whole:false",
                "before:get_range:a/b",
                "after:get_range:false",
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
            Call::Put { key: "refused" } => Err(ObjectError::Unavailable("injected".into())),
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
    async fn admin_calls_reach_the_backend_behind_the_wrapper() {
        // The memory store overrides `lifecycle_rules`; the trait's default
        // says `Unsupported`. Handing admin through must reach the override.
        let store = Observed::before(memory(), |_| Ok(()));
        assert_eq!(store.admin().lifecycle_rules().await, Ok(vec![]));
    }

    #[test]
    fn every_request_shape_has_its_own_operation_label() {
        let range = 0..1;
        let get = |version_id, range| Call::Get {
            key: "k",
            version_id,
            range,
        };
        assert_eq!(get(None, None).operation(), "get_whole");
        assert_eq!(get(None, Some(&range)).operation(), "get_range");
        assert_eq!(get(Some("v"), None).operation(), "get_version");
        assert_eq!(
            get(Some("v"), Some(&range)).operation(),
            "get_version_range"
        );
        let part = |source| Call::UploadPart {
            key: "k",
            part: 1,
            source,
        };
        assert_eq!(part(None).operation(), "upload_part");
        assert_eq!(part(Some("s")).operation(), "upload_part_copy");
    }
}
