//! The lock on an object store: every request that would delete or
//! overwrite an object is checked (see `gate`) before it reaches the
//! store, whoever makes it.
//!
//! Checked: `put_opts`, `copy_opts` (its destination), `complete_upload`
//! and `compose` (unless their guard is `IfNoneMatchAny`, which replaces
//! nothing), `delete_opts` with or without a version, and the early steps
//! of an upload (`create_upload`, `upload_part`: refused at once when
//! completing now would be). Passed through: reads, listings,
//! `abort_upload` (which drops only pending parts) and admin calls.
//!
//! Cost: a create-only write and every read cost nothing; any other write
//! or delete reads one KV row (the key's piece row), and more only when
//! the key is locked or the store is configured `locked` (a `head`, a
//! version listing for an exact delete, one retention call).
//!
//! # Residual races, and why they are bounded
//!
//! A check reads the lock rows and the store, then the request runs; they
//! are not one transaction. Writes are made exact (see `gate`), so only
//! deletes, which the store contract cannot guard, have a window:
//!
//! - *A lock written after the check.* A piece row is committed before
//!   its piece is written, and the takedown writes the piece with
//!   `IfNoneMatchAny`. A delete checked before the row existed can
//!   therefore only meet the piece if both the row's commit and the
//!   piece's write land between its check and its own arrival at the
//!   store: on a versioned store a delete without a version then leaves
//!   a marker over the intact piece (which the lock then keeps, and
//!   removing the marker restores), and an exact-version delete names a
//!   version that cannot be the new piece's; only an unversioned store
//!   can lose the piece, and the takedown's verification of what it
//!   preserved then sees it gone. Piece keys embed the request's id, so
//!   nobody can aim at one before the request is filed.
//! - *A version that changes after the check* on a locked store: a
//!   delete without a version checked against one current version may
//!   remove a newer one written in between (on a versioned store, it
//!   only hides it behind a marker), and a current version checked as
//!   current may have become noncurrent, which can lengthen what
//!   retention would have said. The window is one retention call and one
//!   store round trip; closing it needs conditional deletes.
//! - *A lock released after the check* only makes a refusal stale, never
//!   a destruction wrong: locks move only towards release, and every
//!   refusal changes nothing.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use custodian_base::clock::Clock;
use custodian_kv::Kv;
use custodian_object::{
    CompleteOptions, ComposeSpec, CopyOptions, DeleteOptions, GetOptions, GetResult, HeadOptions,
    ListPage, ListedObject, ListedVersion, ObjectAdmin, ObjectError, ObjectKey, ObjectMeta,
    ObjectStore, PartData, PendingUpload, PutCondition, PutOptions, StreamedBody, UploadOptions,
};

use super::gate::Gate;
use crate::decisions::retention::RetentionOracle;

/// How many times a write made exact is tried when the object moved
/// between its check and the write: each retry follows another writer's
/// write of the same key.
pub const MAX_WRITE_ATTEMPTS: u32 = 3;

/// What every store's lock reads: the KV holding the lock rows, the
/// clock, and the retention plugin the host asks.
#[derive(Clone)]
pub struct Locks {
    kv: Arc<dyn Kv>,
    clock: Arc<dyn Clock>,
    retention: Arc<dyn RetentionOracle>,
}

impl Locks {
    /// Locks reading `kv` at `clock`'s time, asking `retention` (which
    /// must follow the current retention plugin; see
    /// [`LateRetention`](super::LateRetention)).
    pub fn new(
        kv: Arc<dyn Kv>,
        clock: Arc<dyn Clock>,
        retention: Arc<dyn RetentionOracle>,
    ) -> Self {
        Self {
            kv,
            clock,
            retention,
        }
    }

    /// `inner`, the store called `name`, under its locks; `locked` puts
    /// every version of it under retention.
    pub fn store(
        &self,
        name: &str,
        inner: Arc<dyn ObjectStore>,
        locked: bool,
    ) -> Arc<dyn ObjectStore> {
        Arc::new(LockedStore {
            inner,
            gate: Gate {
                store: name.to_owned(),
                kv: self.kv.clone(),
                clock: self.clock.clone(),
                retention: self.retention.clone(),
                locked,
                partition: super::partition(),
            },
        })
    }
}

/// A store whose locked versions no caller can destroy; made by
/// [`Locks::store`].
pub struct LockedStore {
    inner: Arc<dyn ObjectStore>,
    gate: Gate,
}

impl LockedStore {
    /// Whether a failed write made exact should be tried again: its guard
    /// was the gate's, and the object moved since the check.
    fn again<T>(
        exact: &Option<PutCondition>,
        result: &Result<T, ObjectError>,
        attempt: &mut u32,
    ) -> bool {
        *attempt += 1;
        exact.is_some()
            && matches!(result, Err(ObjectError::PreconditionFailed(_)))
            && *attempt < MAX_WRITE_ATTEMPTS
    }
}

#[async_trait]
impl ObjectStore for LockedStore {
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
        let mut attempt = 0;
        loop {
            let inner = self.inner.as_ref();
            let exact = self.gate.write(inner, key, Some(options.condition)).await?;
            let condition = exact.as_ref().unwrap_or(options.condition);
            let options = PutOptions {
                condition,
                ..options
            };
            let result = inner.put_opts(key, body.clone(), options).await;
            if !Self::again(&exact, &result, &mut attempt) {
                return result;
            }
        }
    }

    /// Checked like `put_opts`, but tried once: a streamed body cannot
    /// be sent twice. If the gate made the write exact and the object
    /// moved while the body arrived, nothing is stored and the caller is
    /// told to try again (`Conflict`) instead.
    async fn put_stream(
        &self,
        key: &ObjectKey,
        body: StreamedBody,
        limit: u64,
        options: PutOptions<'_>,
    ) -> Result<ObjectMeta, ObjectError> {
        let inner = self.inner.as_ref();
        let exact = self.gate.write(inner, key, Some(options.condition)).await?;
        let condition = exact.as_ref().unwrap_or(options.condition);
        let options = PutOptions {
            condition,
            ..options
        };
        match inner.put_stream(key, body, limit, options).await {
            Err(ObjectError::PreconditionFailed(_)) if exact.is_some() => {
                Err(ObjectError::Conflict(
                    format!(
                        "another writer published {:?} while this body was arriving; nothing \
                         was stored, send it again",
                        key.as_str()
                    )
                    .into(),
                ))
            }
            outcome => outcome,
        }
    }

    async fn copy_opts(
        &self,
        source: &ObjectKey,
        destination: &ObjectKey,
        options: CopyOptions<'_>,
    ) -> Result<ObjectMeta, ObjectError> {
        let mut attempt = 0;
        loop {
            let inner = self.inner.as_ref();
            let exact = self
                .gate
                .write(inner, destination, Some(options.condition))
                .await?;
            let condition = exact.as_ref().unwrap_or(options.condition);
            let options = CopyOptions {
                condition,
                ..options
            };
            let result = inner.copy_opts(source, destination, options).await;
            if !Self::again(&exact, &result, &mut attempt) {
                return result;
            }
        }
    }

    async fn head_opts(
        &self,
        key: &ObjectKey,
        options: HeadOptions<'_>,
    ) -> Result<ObjectMeta, ObjectError> {
        self.inner.head_opts(key, options).await
    }

    async fn get_opts(
        &self,
        key: &ObjectKey,
        options: GetOptions<'_>,
    ) -> Result<GetResult, ObjectError> {
        self.inner.get_opts(key, options).await
    }

    async fn delete_opts(
        &self,
        key: &ObjectKey,
        options: DeleteOptions<'_>,
    ) -> Result<(), ObjectError> {
        let inner = self.inner.as_ref();
        self.gate.delete(inner, key, options.version_id).await?;
        inner.delete_opts(key, options).await
    }

    async fn list(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<ListPage<ListedObject>, ObjectError> {
        self.inner.list(prefix, cursor, limit).await
    }

    async fn list_versions(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<ListPage<ListedVersion>, ObjectError> {
        self.inner.list_versions(prefix, cursor, limit).await
    }

    async fn list_key_versions(
        &self,
        key: &ObjectKey,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<ListPage<ListedVersion>, ObjectError> {
        self.inner.list_key_versions(key, cursor, limit).await
    }

    async fn create_upload(
        &self,
        key: &ObjectKey,
        options: UploadOptions<'_>,
    ) -> Result<String, ObjectError> {
        let inner = self.inner.as_ref();
        self.gate.write(inner, key, None).await?;
        inner.create_upload(key, options).await
    }

    async fn upload_part(
        &self,
        key: &ObjectKey,
        upload_id: &str,
        part: u32,
        data: PartData<'_>,
    ) -> Result<u64, ObjectError> {
        let inner = self.inner.as_ref();
        self.gate.write(inner, key, None).await?;
        inner.upload_part(key, upload_id, part, data).await
    }

    async fn upload_part_stream(
        &self,
        key: &ObjectKey,
        upload_id: &str,
        part: u32,
        body: StreamedBody,
        limit: u64,
    ) -> Result<u64, ObjectError> {
        let inner = self.inner.as_ref();
        self.gate.write(inner, key, None).await?;
        inner
            .upload_part_stream(key, upload_id, part, body, limit)
            .await
    }

    async fn complete_upload(
        &self,
        key: &ObjectKey,
        upload_id: &str,
        options: CompleteOptions<'_>,
    ) -> Result<ObjectMeta, ObjectError> {
        let mut attempt = 0;
        loop {
            let inner = self.inner.as_ref();
            let exact = self.gate.write(inner, key, Some(options.condition)).await?;
            let condition = exact.as_ref().unwrap_or(options.condition);
            let options = CompleteOptions {
                condition,
                ..options
            };
            let result = inner.complete_upload(key, upload_id, options).await;
            if !Self::again(&exact, &result, &mut attempt) {
                return result;
            }
        }
    }

    async fn abort_upload(&self, key: &ObjectKey, upload_id: &str) -> Result<(), ObjectError> {
        self.inner.abort_upload(key, upload_id).await
    }

    async fn list_uploads(&self, prefix: &str) -> Result<Vec<PendingUpload>, ObjectError> {
        self.inner.list_uploads(prefix).await
    }

    async fn list_parts(
        &self,
        key: &ObjectKey,
        upload_id: &str,
    ) -> Result<Vec<custodian_object::UploadedPart>, ObjectError> {
        self.inner.list_parts(key, upload_id).await
    }

    async fn compose(&self, spec: &ComposeSpec<'_>) -> Result<ObjectMeta, ObjectError> {
        let mut attempt = 0;
        loop {
            let inner = self.inner.as_ref();
            let exact = self
                .gate
                .write(inner, spec.key, Some(&spec.condition))
                .await?;
            let result = match &exact {
                Some(condition) => {
                    let mut exact_spec = spec.clone();
                    exact_spec.condition = condition.clone();
                    inner.compose(&exact_spec).await
                }
                None => inner.compose(spec).await,
            };
            if !Self::again(&exact, &result, &mut attempt) {
                return result;
            }
        }
    }

    fn admin(&self) -> &dyn ObjectAdmin {
        self.inner.admin()
    }
}
