//! A store that shows a test the calls it cares about before passing
//! them on, and lets the test refuse them: counting requests and
//! injecting failures without a forwarding implementation in every test
//! module.

use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

use super::{
    BootstrapReport, ListPage, ListedObject, ListedVersion, Metadata, ObjectError, ObjectMeta,
    ObjectStore, PendingUpload, PutCondition,
};

/// A call the hook sees; every other call passes unseen.
#[derive(Debug)]
pub(crate) enum Call<'a> {
    /// `list_versions`.
    ListVersions,
    /// `head_version`.
    HeadVersion,
    /// `delete_version` of a version of `key`.
    DeleteVersion { key: &'a str },
}

type Hook = Box<dyn Fn(&Call<'_>) -> Result<(), ObjectError> + Send + Sync>;

/// `inner`, with `hook` run before the calls of [`Call`]; an error from
/// the hook is the call's answer and the store is not reached.
pub(crate) struct Intercepted {
    inner: Arc<dyn ObjectStore>,
    hook: Hook,
}

impl Intercepted {
    /// Wraps `inner`.
    pub(crate) fn new(
        inner: Arc<dyn ObjectStore>,
        hook: impl Fn(&Call<'_>) -> Result<(), ObjectError> + Send + Sync + 'static,
    ) -> Self {
        Self {
            inner,
            hook: Box::new(hook),
        }
    }
}

#[async_trait]
impl ObjectStore for Intercepted {
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
        self.inner
            .put_whole(key, body, condition, metadata, crc64)
            .await
    }
    async fn copy_object(
        &self,
        source: &str,
        source_if_match: Option<&str>,
        destination: &str,
        condition: &PutCondition,
        metadata: &Metadata,
    ) -> Result<ObjectMeta, ObjectError> {
        self.inner
            .copy_object(source, source_if_match, destination, condition, metadata)
            .await
    }
    async fn head(&self, key: &str) -> Result<ObjectMeta, ObjectError> {
        self.inner.head(key).await
    }
    async fn get_whole(
        &self,
        key: &str,
        if_match: Option<&str>,
    ) -> Result<(ObjectMeta, Bytes), ObjectError> {
        self.inner.get_whole(key, if_match).await
    }
    async fn get_range(
        &self,
        key: &str,
        range: Range<u64>,
        if_match: &str,
    ) -> Result<Bytes, ObjectError> {
        self.inner.get_range(key, range, if_match).await
    }
    async fn delete(&self, key: &str) -> Result<(), ObjectError> {
        self.inner.delete(key).await
    }
    async fn list(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<ListPage<ListedObject>, ObjectError> {
        self.inner.list(prefix, cursor, limit).await
    }
    async fn head_version(&self, key: &str, version_id: &str) -> Result<ObjectMeta, ObjectError> {
        (self.hook)(&Call::HeadVersion)?;
        self.inner.head_version(key, version_id).await
    }
    async fn get_version(
        &self,
        key: &str,
        version_id: &str,
    ) -> Result<(ObjectMeta, Bytes), ObjectError> {
        self.inner.get_version(key, version_id).await
    }
    async fn get_version_range(
        &self,
        key: &str,
        version_id: &str,
        range: Range<u64>,
    ) -> Result<Bytes, ObjectError> {
        self.inner.get_version_range(key, version_id, range).await
    }
    async fn delete_version(&self, key: &str, version_id: &str) -> Result<(), ObjectError> {
        (self.hook)(&Call::DeleteVersion { key })?;
        self.inner.delete_version(key, version_id).await
    }
    async fn list_versions(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<ListPage<ListedVersion>, ObjectError> {
        (self.hook)(&Call::ListVersions)?;
        self.inner.list_versions(prefix, cursor, limit).await
    }
    async fn create_upload(&self, key: &str) -> Result<String, ObjectError> {
        self.inner.create_upload(key).await
    }
    async fn upload_part(
        &self,
        key: &str,
        upload_id: &str,
        part: u32,
        body: Bytes,
        crc64: u64,
    ) -> Result<(), ObjectError> {
        self.inner
            .upload_part(key, upload_id, part, body, crc64)
            .await
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
        self.inner
            .upload_part_copy(key, upload_id, part, source, source_if_match, range)
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
        self.inner
            .complete_upload(key, upload_id, parts, condition, metadata, crc64)
            .await
    }
    async fn abort_upload(&self, key: &str, upload_id: &str) -> Result<(), ObjectError> {
        self.inner.abort_upload(key, upload_id).await
    }
    async fn list_uploads(&self, prefix: &str) -> Result<Vec<PendingUpload>, ObjectError> {
        self.inner.list_uploads(prefix).await
    }
    async fn bootstrap(&self, prefix: &str) -> Result<BootstrapReport, ObjectError> {
        self.inner.bootstrap(prefix).await
    }
}
