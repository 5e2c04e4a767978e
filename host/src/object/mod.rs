//! Object stores with conditional publish, checked content and versions.
//!
//! The contract (from the conditional-publish object-store seed):
//!
//! - Every publish names a [`PutCondition`]. `IfMatch` replaces a known
//!   generation, `IfNoneMatchAny` creates a new key, and the explicit,
//!   narrow `Unconditional` is only for content-addressed keys where every
//!   writer writes the same bytes.
//! - A failed guard (S3's 412) is [`ObjectError::PreconditionFailed`]; a
//!   concurrent conditional writer in flight (S3's 409) is the distinct
//!   [`ObjectError::Conflict`].
//! - The full-object CRC-64/NVME is validated at publish: a mismatch fails
//!   the publish with [`ObjectError::ChecksumMismatch`] and leaves nothing.
//! - A copy's destination has the source's CRC but never inherits its
//!   metadata (stamps describe a publish, not bytes).
//! - "Cannot" is an error, never an empty answer: an unversioned store
//!   asked for versions says [`ObjectError::Unsupported`].
//!
//! Backends: [`memory`] (full semantics; the test double). The filesystem
//! and S3 backends implement the same trait and run the same conformance
//! suite.

/// The in-memory backend.
pub mod memory;

#[cfg(test)]
pub(crate) mod conformance;

use std::collections::BTreeMap;
use std::ops::Range;

use async_trait::async_trait;
use bytes::Bytes;

/// Longest object key, in bytes (S3's limit).
pub const MAX_OBJECT_KEY_BYTES: usize = 1024;
/// Most bytes of user metadata on one object, keys and values together:
/// S3's limit, so a publish that passes here also passes on S3.
pub const MAX_METADATA_BYTES: usize = 2048;
/// Most items in one listing page: bounds one call's memory and matches
/// S3's page size.
pub const MAX_LIST_PAGE: u32 = 1000;

/// User metadata, keys without any backend prefix.
pub type Metadata = BTreeMap<String, String>;

/// Why an object-store call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ObjectError {
    /// No such key, version or store.
    #[error("not found: {0}")]
    NotFound(String),
    /// The caller's guard did not hold (412).
    #[error("precondition failed: {0}")]
    PreconditionFailed(String),
    /// A concurrent conditional writer was in flight (409).
    #[error("conflicting concurrent write: {0}")]
    Conflict(String),
    /// The bytes do not have the CRC-64/NVME the caller claimed.
    #[error("checksum mismatch: {0}")]
    ChecksumMismatch(String),
    /// An argument is outside its bounds.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The backend cannot do this at all (e.g. versions on an unversioned
    /// store).
    #[error("unsupported by this store: {0}")]
    Unsupported(String),
    /// Credentials refused (401/403, clock skew).
    #[error("not authorized: {0}")]
    Auth(String),
    /// The backend is unreachable or timed out.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// Stored data or metadata cannot be decoded.
    #[error("corrupt: {0}")]
    Corrupt(String),
}

/// The guard on a publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutCondition {
    /// Replace only while the current object has this etag.
    IfMatch(String),
    /// Create only if the key has no current object.
    IfNoneMatchAny,
    /// No guard. Only for content-addressed keys, where a concurrent writer
    /// cannot write different bytes; anywhere else this is last-writer-wins.
    Unconditional,
}

/// What a store knows about one object version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    /// The object's key.
    pub key: String,
    /// The version described, on a versioned store.
    pub version_id: Option<String>,
    /// Opaque identity of these bytes for `IfMatch`; not a content hash.
    pub etag: String,
    /// Length in bytes.
    pub size: u64,
    /// Full-object CRC-64/NVME, when recorded.
    pub crc64: Option<u64>,
    /// Last modification, ms since the epoch.
    pub last_modified_ms: Option<u64>,
    /// User metadata.
    pub metadata: Metadata,
}

/// One current object in a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedObject {
    /// The key.
    pub key: String,
    /// Length in bytes.
    pub size: u64,
    /// Its etag.
    pub etag: String,
    /// Last modification, ms since the epoch.
    pub last_modified_ms: Option<u64>,
}

/// One version or delete marker in a version listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedVersion {
    /// The key.
    pub key: String,
    /// The version.
    pub version_id: String,
    /// Its etag; empty for a delete marker.
    pub etag: String,
    /// Length in bytes; 0 for a delete marker.
    pub size: u64,
    /// Whether this is the key's newest version.
    pub is_current: bool,
    /// A delete marker: the key reads absent while older versions remain.
    pub is_delete_marker: bool,
    /// When this version was written, ms since the epoch.
    pub last_modified_ms: Option<u64>,
}

/// A page of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListPage<T> {
    /// The items, ascending by key (versions newest first within a key).
    pub items: Vec<T>,
    /// Pass back to continue; `None` when the listing is complete.
    pub next: Option<String>,
}

/// An object store with conditional publish.
#[async_trait]
pub trait ObjectStore: Send + Sync {
    /// Whether the store keeps versions.
    fn versioned(&self) -> bool;

    /// The current object's metadata; `NotFound` if absent or behind a
    /// delete marker.
    async fn head(&self, key: &str) -> Result<ObjectMeta, ObjectError>;

    /// The current object; with `if_match`, `PreconditionFailed` unless
    /// its etag matches.
    async fn get(
        &self,
        key: &str,
        if_match: Option<&str>,
    ) -> Result<(ObjectMeta, Bytes), ObjectError>;

    /// Bytes `range` of the current object, truncated at its end.
    async fn get_range(
        &self,
        key: &str,
        range: Range<u64>,
        if_match: Option<&str>,
    ) -> Result<Bytes, ObjectError>;

    /// Publishes `body` if `condition` holds and `crc64` is its CRC.
    async fn put(
        &self,
        key: &str,
        body: Bytes,
        condition: &PutCondition,
        crc64: u64,
        metadata: &Metadata,
    ) -> Result<ObjectMeta, ObjectError>;

    /// Server-side copy of the current object at `source` to `destination`.
    /// The destination has the source's CRC and exactly `metadata`.
    async fn copy(
        &self,
        source: &str,
        source_if_match: Option<&str>,
        destination: &str,
        condition: &PutCondition,
        metadata: &Metadata,
    ) -> Result<ObjectMeta, ObjectError>;

    /// Removes the current object (a delete marker on a versioned store);
    /// absent keys are fine.
    async fn delete(&self, key: &str) -> Result<(), ObjectError>;

    /// Current objects under `prefix`, ascending, resuming after `cursor`.
    async fn list(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<ListPage<ListedObject>, ObjectError>;

    /// One exact version's metadata; `NotFound` if it does not exist,
    /// `PreconditionFailed` if it is a delete marker.
    async fn head_version(&self, key: &str, version_id: &str) -> Result<ObjectMeta, ObjectError>;

    /// Bytes `range` of one exact version.
    async fn get_version_range(
        &self,
        key: &str,
        version_id: &str,
        range: Range<u64>,
    ) -> Result<Bytes, ObjectError>;

    /// Permanently removes one exact version or delete marker; absent
    /// versions are fine.
    async fn delete_version(&self, key: &str, version_id: &str) -> Result<(), ObjectError>;

    /// Every version and delete marker under `prefix`.
    async fn list_versions(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<ListPage<ListedVersion>, ObjectError>;
}

/// Checks an object key: 1..=1024 bytes, no NUL (NUL separates a key from
/// a version in listing cursors).
///
/// # Errors
/// [`ObjectError::InvalidArgument`] otherwise.
pub fn validate_key(key: &str) -> Result<(), ObjectError> {
    if !(1..=MAX_OBJECT_KEY_BYTES).contains(&key.len()) {
        Err(ObjectError::InvalidArgument(format!(
            "an object key is 1..={MAX_OBJECT_KEY_BYTES} bytes, got {}",
            key.len()
        )))
    } else if key.contains('\0') {
        Err(ObjectError::InvalidArgument(
            "an object key cannot contain NUL".into(),
        ))
    } else {
        Ok(())
    }
}

/// Checks user metadata the way S3 will: at most [`MAX_METADATA_BYTES`]
/// in total, keys of lowercase `[a-z0-9_-]` (S3 lowercases header names, so
/// `A` and `a` would collide), values of printable ASCII (S3 re-encodes
/// anything else).
///
/// # Errors
/// [`ObjectError::InvalidArgument`] naming the offending pair or the total.
pub fn validate_metadata(metadata: &Metadata) -> Result<(), ObjectError> {
    let total: usize = metadata.iter().map(|(k, v)| k.len() + v.len()).sum();
    if total > MAX_METADATA_BYTES {
        return Err(ObjectError::InvalidArgument(format!(
            "{total} bytes of metadata exceed {MAX_METADATA_BYTES}"
        )));
    }
    for (key, value) in metadata {
        let key_ok = !key.is_empty()
            && key
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        let value_ok = value.bytes().all(|b| (b' '..=b'~').contains(&b));
        if !key_ok || !value_ok {
            return Err(ObjectError::InvalidArgument(format!(
                "metadata {key:?}: keys are lowercase [a-z0-9_-], values printable ASCII"
            )));
        }
    }
    Ok(())
}

/// Checks a listing limit.
///
/// # Errors
/// [`ObjectError::InvalidArgument`] outside `1..=MAX_LIST_PAGE`.
pub fn validate_limit(limit: u32) -> Result<(), ObjectError> {
    if (1..=MAX_LIST_PAGE).contains(&limit) {
        Ok(())
    } else {
        Err(ObjectError::InvalidArgument(format!(
            "limit {limit} is outside 1..={MAX_LIST_PAGE}"
        )))
    }
}
