//! [`ObjectStoreExt`]: shorthands for the common calls, each one
//! [`ObjectStore`] primitive with its options spelled out, written once
//! for every store and wrapper.

use std::ops::Range;

use async_trait::async_trait;
use bytes::Bytes;

use super::{
    CopyOptions, DeleteOptions, GetOptions, HeadOptions, Metadata, ObjectError, ObjectKey,
    ObjectMeta, ObjectStore, PutCondition, PutOptions,
};

/// Shorthands over the [`ObjectStore`] primitives. Keys are taken as text
/// and checked into an [`ObjectKey`] here, at the edge, once per call.
#[async_trait]
pub trait ObjectStoreExt: ObjectStore {
    /// Publishes `body` whole; see [`ObjectStore::put_opts`].
    ///
    /// # Errors
    /// As [`ObjectStore::put_opts`]; `InvalidArgument` for a bad key.
    async fn put_whole(
        &self,
        key: &str,
        body: Bytes,
        condition: &PutCondition,
        metadata: &Metadata,
        crc64: u64,
    ) -> Result<ObjectMeta, ObjectError> {
        let options = PutOptions {
            condition,
            metadata,
            crc64,
            content_md5: None,
        };
        self.put_opts(&ObjectKey::new(key)?, body, options).await
    }

    /// Copies the current object at `source` to `destination`; see
    /// [`ObjectStore::copy_opts`].
    ///
    /// # Errors
    /// As [`ObjectStore::copy_opts`]; `InvalidArgument` for a bad key.
    async fn copy_object(
        &self,
        source: &str,
        source_if_match: Option<&str>,
        destination: &str,
        condition: &PutCondition,
        metadata: &Metadata,
    ) -> Result<ObjectMeta, ObjectError> {
        let options = CopyOptions {
            source_if_match,
            condition,
            metadata,
        };
        let (source, destination) = (ObjectKey::new(source)?, ObjectKey::new(destination)?);
        self.copy_opts(&source, &destination, options).await
    }

    /// The current object's metadata.
    ///
    /// # Errors
    /// As [`ObjectStore::head_opts`].
    async fn head(&self, key: &str) -> Result<ObjectMeta, ObjectError> {
        self.head_opts(&ObjectKey::new(key)?, HeadOptions::default())
            .await
    }

    /// One exact version's metadata.
    ///
    /// # Errors
    /// As [`ObjectStore::head_opts`].
    async fn head_version(&self, key: &str, version_id: &str) -> Result<ObjectMeta, ObjectError> {
        let options = HeadOptions {
            version_id: Some(version_id),
        };
        self.head_opts(&ObjectKey::new(key)?, options).await
    }

    /// The current object, whole; with `if_match`, only while its etag
    /// matches.
    ///
    /// # Errors
    /// As [`ObjectStore::get_opts`].
    async fn get_whole(
        &self,
        key: &str,
        if_match: Option<&str>,
    ) -> Result<(ObjectMeta, Bytes), ObjectError> {
        let options = GetOptions {
            if_match,
            ..GetOptions::default()
        };
        Ok(self.get_opts(&ObjectKey::new(key)?, options).await?.bytes())
    }

    /// Bytes `range` of the current object while its etag is `if_match`,
    /// as one buffer.
    ///
    /// # Errors
    /// As [`ObjectStore::get_opts`].
    async fn get_range(
        &self,
        key: &str,
        range: Range<u64>,
        if_match: &str,
    ) -> Result<Bytes, ObjectError> {
        let options = GetOptions {
            range: Some(range),
            if_match: Some(if_match),
            ..GetOptions::default()
        };
        Ok(self
            .get_opts(&ObjectKey::new(key)?, options)
            .await?
            .bytes()
            .1)
    }

    /// One exact version, whole.
    ///
    /// # Errors
    /// As [`ObjectStore::get_opts`].
    async fn get_version(
        &self,
        key: &str,
        version_id: &str,
    ) -> Result<(ObjectMeta, Bytes), ObjectError> {
        let options = GetOptions {
            version_id: Some(version_id),
            ..GetOptions::default()
        };
        Ok(self.get_opts(&ObjectKey::new(key)?, options).await?.bytes())
    }

    /// Bytes `range` of one exact version, as one buffer.
    ///
    /// # Errors
    /// As [`ObjectStore::get_opts`].
    async fn get_version_range(
        &self,
        key: &str,
        version_id: &str,
        range: Range<u64>,
    ) -> Result<Bytes, ObjectError> {
        let options = GetOptions {
            version_id: Some(version_id),
            range: Some(range),
            ..GetOptions::default()
        };
        Ok(self
            .get_opts(&ObjectKey::new(key)?, options)
            .await?
            .bytes()
            .1)
    }

    /// Removes the current object.
    ///
    /// # Errors
    /// As [`ObjectStore::delete_opts`].
    async fn delete(&self, key: &str) -> Result<(), ObjectError> {
        self.delete_opts(&ObjectKey::new(key)?, DeleteOptions::default())
            .await
    }

    /// Permanently removes one exact version or delete marker.
    ///
    /// # Errors
    /// As [`ObjectStore::delete_opts`].
    async fn delete_version(&self, key: &str, version_id: &str) -> Result<(), ObjectError> {
        let options = DeleteOptions {
            version_id: Some(version_id),
        };
        self.delete_opts(&ObjectKey::new(key)?, options).await
    }
}

impl<S: ObjectStore + ?Sized> ObjectStoreExt for S {}
