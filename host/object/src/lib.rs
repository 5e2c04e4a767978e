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
//!   [`ObjectError::Conflict`]; refused credentials are [`ObjectError::Auth`].
//! - The full-object CRC-64/NVME is validated at publish: a mismatch fails
//!   the publish with [`ObjectError::ChecksumMismatch`] and leaves nothing.
//!   The multipart etag is never a content hash.
//! - A copy's destination has the source's CRC but never inherits its
//!   metadata (stamps describe a publish, not bytes; see [`stamps`]).
//! - A composed generation ([`compose`]) is assembled from local and
//!   server-side-copied parts in object order, and every failure path
//!   aborts the assembly: an error return leaves nothing pending.
//! - "Cannot" is an error, never an empty answer: a store without versions,
//!   lifecycle rules or presigning says [`ObjectError::Unsupported`].
//! - Epoch leases ([`epoch`]) are compare-and-swap re-publishes of one
//!   small object; every backend gets them from its conditional publish.
//!
//! # Shape
//!
//! [`ObjectStore`] is the primitives a backend implements and a wrapper
//! forwards, each taking an [`ObjectKey`] (checked once, where it is made)
//! and an option struct (`options`). Written once over them: the
//! shorthands of [`ObjectStoreExt`], the leases of [`EpochCells`], and
//! [`ObjectStore::compose`] (a backend overrides it only to do the same
//! faster). Operator-time calls are [`ObjectAdmin`]'s. The one decorator,
//! [`observed::Observed`], shows every primitive call to a hook: budgets,
//! metrics and tests hang theirs on it rather than forwarding the trait.
//!
//! Backends: [`memory`] (the full semantics; the test double), [`fs`]
//! (the embedded default: durable, versioned, safe for several processes)
//! and [`s3`]. Every backend runs the same conformance suite.

pub mod compose;
pub mod epoch;
mod ext;
/// The filesystem backend (Unix: it relies on `flock`, `pread` and
/// directory fsync).
#[cfg(unix)]
pub mod fs;
mod key;
/// The in-memory backend.
pub mod memory;
pub mod observed;
#[cfg(unix)]
pub mod open;
mod options;
/// The S3 backend (AWS and S3-compatible servers).
pub mod s3;
pub mod stamps;
mod streamed;

/// The conformance suite every backend runs (`cargo test` of a third
/// party's backend can run it too, with the `conformance` feature).
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;

use std::collections::BTreeMap;
use std::ops::Range;

use async_trait::async_trait;
use bytes::Bytes;
use custodian_base::detail::Detail;
use custodian_base::error::ErrorKind;

pub use compose::{ComposeSpec, PartSource};
pub use epoch::{EpochCells, EpochLease, EpochState};
pub use ext::ObjectStoreExt;
pub use key::ObjectKey;
pub use options::{
    CompleteOptions, CopyOptions, DeleteOptions, GetOptions, GetResult, HeadOptions, PartData,
    PutOptions, UploadOptions,
};
pub use streamed::{BodySender, BodySums, Piece, StreamedBody};

/// Longest object key, most user-metadata bytes and entries on one object
/// (S3's limits, and why, are written once in the contract crate, which
/// the SDK's native host shares).
pub use custodian_contract::limits::{
    MAX_METADATA_BYTES, MAX_METADATA_ENTRIES, MAX_OBJECT_KEY_BYTES,
};

/// Most items in one listing page: bounds one call's memory and matches
/// S3's page size (the contract's page bound).
pub const MAX_LIST_PAGE: u32 = custodian_contract::limits::MAX_PAGE_ENTRIES;

/// User metadata, keys without any backend prefix.
pub type Metadata = BTreeMap<String, String>;

/// Why an object-store call failed.
///
/// Each variant carries a [`Detail`]: a message, and the backend's own
/// error (an I/O error, the S3 SDK's, a decoding error) as the
/// [`std::error::Error::source`] when one caused it. Equality compares
/// kinds and messages only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ObjectError {
    /// No such key, version or store.
    NotFound(Detail),
    /// The caller's guard did not hold (412).
    PreconditionFailed(Detail),
    /// A concurrent conditional writer was in flight (409).
    Conflict(Detail),
    /// The bytes do not have the CRC-64/NVME the caller claimed.
    ChecksumMismatch(Detail),
    /// An argument is outside its bounds.
    InvalidArgument(Detail),
    /// The backend cannot do this at all (e.g. versions on an unversioned
    /// store).
    Unsupported(Detail),
    /// Credentials refused (401/403, clock skew).
    Auth(Detail),
    /// The backend is unreachable or timed out.
    Unavailable(Detail),
    /// Stored data or metadata cannot be decoded, or bytes read back do not
    /// have the CRC they were published with.
    Corrupt(Detail),
    /// No such multipart upload (it was aborted, or completed).
    NoSuchUpload(Detail),
    /// A local I/O failure that is none of the above (disk full, ...).
    Io(Detail),
    /// The caller's budget of store calls is spent (see
    /// the core crate's `budget`); the store was not called.
    BudgetExhausted(Detail),
    /// A lock or the retention policy protects the version the call
    /// would delete or overwrite; nothing was changed.
    Retained(Detail),
}

impl ObjectError {
    /// What kind of failure this is (see [`ErrorKind`]).
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::NotFound(_) | Self::NoSuchUpload(_) => ErrorKind::NotFound,
            Self::PreconditionFailed(_) => ErrorKind::PreconditionFailed,
            Self::Conflict(_) => ErrorKind::Conflict,
            Self::ChecksumMismatch(_) => ErrorKind::ChecksumMismatch,
            Self::InvalidArgument(_) => ErrorKind::InvalidArgument,
            Self::Unsupported(_) => ErrorKind::Unsupported,
            Self::Auth(_) => ErrorKind::AccessDenied,
            Self::Unavailable(_) | Self::Io(_) => ErrorKind::Unavailable,
            Self::Corrupt(_) => ErrorKind::Corrupt,
            Self::BudgetExhausted(_) => ErrorKind::BudgetExhausted,
            Self::Retained(_) => ErrorKind::Retained,
        }
    }

    /// The variant's detail: its message and underlying error.
    pub fn detail(&self) -> &Detail {
        match self {
            Self::NotFound(d)
            | Self::PreconditionFailed(d)
            | Self::Conflict(d)
            | Self::ChecksumMismatch(d)
            | Self::InvalidArgument(d)
            | Self::Unsupported(d)
            | Self::Auth(d)
            | Self::Unavailable(d)
            | Self::Corrupt(d)
            | Self::NoSuchUpload(d)
            | Self::Io(d)
            | Self::BudgetExhausted(d)
            | Self::Retained(d) => d,
        }
    }

    /// What went wrong, without the kind's prefix but with the causes
    /// (`message: cause…`): one line for a reader that sees no chain (a
    /// guest, an API answer).
    pub fn into_message(self) -> String {
        self.detail().to_line()
    }
}

// Written by hand, not derived: the source is inside the detail, and
// thiserror's `#[source]` would make the detail itself a link of the chain,
// printing its message twice.
impl std::fmt::Display for ObjectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let prefix = match self {
            Self::NotFound(_) => "not found",
            Self::PreconditionFailed(_) => "precondition failed",
            Self::Conflict(_) => "conflicting concurrent write",
            Self::ChecksumMismatch(_) => "checksum mismatch",
            Self::InvalidArgument(_) => "invalid argument",
            Self::Unsupported(_) => "unsupported by this store",
            Self::Auth(_) => "not authorized",
            Self::Unavailable(_) => "store unavailable",
            Self::Corrupt(_) => "corrupt",
            Self::NoSuchUpload(_) => "no such upload",
            Self::Io(_) => "store I/O",
            Self::BudgetExhausted(_) => "budget exhausted",
            Self::Retained(_) => "retained",
        };
        write!(f, "{prefix}: {}", self.detail())
    }
}

impl std::error::Error for ObjectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.detail()
            .source()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
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

impl PutCondition {
    /// Whether a publish to `key` may replace the current object, whose etag
    /// is `current` (`None`: no current object — absent, or behind a delete
    /// marker). Every backend decides with this one rule.
    ///
    /// # Errors
    /// [`ObjectError::PreconditionFailed`] saying what was found instead.
    pub fn check(&self, key: &str, current: Option<&str>) -> Result<(), ObjectError> {
        match (self, current) {
            (PutCondition::Unconditional, _) | (PutCondition::IfNoneMatchAny, None) => Ok(()),
            (PutCondition::IfNoneMatchAny, Some(etag)) => Err(ObjectError::PreconditionFailed(
                format!("{key:?} already exists with etag {etag}").into(),
            )),
            (PutCondition::IfMatch(want), Some(etag)) if want == etag => Ok(()),
            (PutCondition::IfMatch(want), Some(etag)) => Err(ObjectError::PreconditionFailed(
                format!("{key:?} has etag {etag}, not {want}").into(),
            )),
            (PutCondition::IfMatch(want), None) => Err(ObjectError::PreconditionFailed(
                format!("{key:?} has no current object to match {want}").into(),
            )),
        }
    }
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
    /// The body's MD5, when its writer supplied one (see
    /// [`PutOptions::content_md5`]); a copy keeps its source's.
    pub content_md5: Option<[u8; 16]>,
    /// Last modification, ms since the epoch.
    pub last_modified_ms: Option<u64>,
    /// User metadata.
    pub metadata: Metadata,
    /// The backend's storage class; `None` is the standard one.
    pub storage_class: Option<String>,
}

impl ObjectMeta {
    /// Whether this object may be a server-side copy source without
    /// per-byte retrieval charges: copying from an infrequent-access or
    /// archive class silently costs more than uploading the bytes.
    pub fn copy_source_allowed(&self) -> bool {
        matches!(self.storage_class.as_deref(), None | Some("STANDARD"))
    }
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
    /// The body's MD5, when recorded (as [`ObjectMeta::content_md5`]).
    pub content_md5: Option<[u8; 16]>,
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
    /// The body's MD5, when recorded (as [`ObjectMeta::content_md5`]).
    pub content_md5: Option<[u8; 16]>,
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

/// An in-progress multipart assembly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingUpload {
    /// The key it will publish.
    pub key: String,
    /// Its id.
    pub upload_id: String,
    /// When it was started, ms since the epoch.
    pub initiated_ms: Option<u64>,
}

/// One part of an in-progress multipart assembly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadedPart {
    /// Its number.
    pub number: u32,
    /// Length in bytes.
    pub size: u64,
    /// Its CRC-64/NVME, when the backend has it.
    pub crc64: Option<u64>,
    /// When it was uploaded, ms since the epoch, when known.
    pub last_modified_ms: Option<u64>,
}

/// One lifecycle rule, reduced to what version retention cares about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LifecycleView {
    /// The rule's id.
    pub id: String,
    /// Whether it is enabled.
    pub enabled: bool,
    /// Its prefix filter; `""` is the whole store.
    pub prefix: String,
    /// Noncurrent versions expire after this many days, if the rule says.
    pub noncurrent_days: Option<u64>,
    /// Whether it also expires orphaned delete markers.
    pub expired_delete_marker: bool,
}

/// What [`ObjectAdmin::ensure_noncurrent_retention`] found or did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionOutcome {
    /// The rule that now provides the retention.
    pub rule_id: String,
    /// Its noncurrent-version retention.
    pub noncurrent_days: u64,
    /// `false` when a conforming rule was already there and nothing was
    /// written.
    pub created: bool,
}

/// What [`ObjectAdmin::bootstrap`] found. Errors mean the store must not
/// be used; warnings are loud degradations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BootstrapReport {
    /// Facts worth showing.
    pub notes: Vec<String>,
    /// Usable, but degraded.
    pub warnings: Vec<String>,
    /// Not usable.
    pub errors: Vec<String>,
}

impl BootstrapReport {
    /// No errors.
    pub fn ok(&self) -> bool {
        self.errors.is_empty()
    }
}

/// An object store with conditional publish: the primitives a backend
/// implements and a wrapper forwards. Everything else is written once over
/// them: the shorthands of [`ObjectStoreExt`], the epoch cells of
/// [`EpochCells`], and (unless a backend has a faster native assembly)
/// [`ObjectStore::compose`]. Operator-time calls live in [`ObjectAdmin`].
///
/// Reads of "the current object" never see a delete marker: a key whose
/// newest version is a marker reads as [`ObjectError::NotFound`]. On an
/// unversioned store every version-scoped call is
/// [`ObjectError::Unsupported`].
#[async_trait]
pub trait ObjectStore: Send + Sync {
    /// Whether the store keeps versions.
    fn versioned(&self) -> bool;

    /// Smallest part of a multipart assembly, except the last.
    fn min_part_size(&self) -> u64;

    /// Most parts in one multipart assembly.
    fn max_parts(&self) -> u32;

    /// Whether [`ObjectStore::put_stream`] and
    /// [`ObjectStore::upload_part_stream`] write the body as it arrives,
    /// holding a bounded buffer, rather than collecting it first (the
    /// provided methods). A server streams request bodies only into a
    /// store that does; for the others it reads them whole, within its
    /// body budget.
    fn streams_bodies(&self) -> bool {
        false
    }

    /// Publishes `body` whole if the condition holds and the CRC is the
    /// body's (checked before the condition; nothing is written on any
    /// failure). An `Io` or `Unavailable` error means the outcome is
    /// unknown (the new version may be visible), as with a timed-out S3
    /// PUT: re-read before deciding.
    async fn put_opts(
        &self,
        key: &ObjectKey,
        body: Bytes,
        options: PutOptions<'_>,
    ) -> Result<ObjectMeta, ObjectError>;

    /// [`ObjectStore::put_opts`] of a body that is still arriving (see
    /// [`StreamedBody`]): `options.crc64` and `options.content_md5` are
    /// ignored, the body's [`Piece::End`] carries them. The condition is
    /// checked before any byte is read and again at publish; nothing is
    /// published unless the body ends with `End` and its CRC-64/NVME
    /// matches. At most `limit` bytes (`InvalidArgument` beyond).
    ///
    /// The provided method collects the body and calls `put_opts`, so
    /// it holds the whole body; a backend that can write as the body
    /// arrives overrides it and says so in
    /// [`ObjectStore::streams_bodies`] (the filesystem store does).
    async fn put_stream(
        &self,
        key: &ObjectKey,
        body: StreamedBody,
        limit: u64,
        options: PutOptions<'_>,
    ) -> Result<ObjectMeta, ObjectError> {
        let (bytes, sums) = body.collect(limit).await?;
        let options = PutOptions {
            crc64: sums.crc64,
            content_md5: sums.content_md5,
            ..options
        };
        self.put_opts(key, bytes, options).await
    }

    /// Server-side copy of the current object at `source` to
    /// `destination`: the source's bytes and CRC, a new etag, and exactly
    /// the options' metadata.
    async fn copy_opts(
        &self,
        source: &ObjectKey,
        destination: &ObjectKey,
        options: CopyOptions<'_>,
    ) -> Result<ObjectMeta, ObjectError>;

    /// The current object's (or an exact version's) metadata. An exact
    /// version that is a delete marker is `PreconditionFailed`.
    async fn head_opts(
        &self,
        key: &ObjectKey,
        options: HeadOptions<'_>,
    ) -> Result<ObjectMeta, ObjectError>;

    /// Reads the current object or an exact version, whole or a range,
    /// optionally guarded by its etag. A whole read is checked against the
    /// CRC the object was published with (`Corrupt` if it differs).
    async fn get_opts(
        &self,
        key: &ObjectKey,
        options: GetOptions<'_>,
    ) -> Result<GetResult, ObjectError>;

    /// Removes the current object (a delete marker on a versioned store)
    /// or permanently removes an exact version or delete marker; absent
    /// keys and versions are fine.
    async fn delete_opts(
        &self,
        key: &ObjectKey,
        options: DeleteOptions<'_>,
    ) -> Result<(), ObjectError>;

    /// Current objects under `prefix`, ascending, resuming strictly after
    /// `cursor`, at most `limit` (1..=[`MAX_LIST_PAGE`]).
    async fn list(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<ListPage<ListedObject>, ObjectError>;

    /// Every version and delete marker under `prefix`: keys ascending,
    /// newest first within a key.
    async fn list_versions(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<ListPage<ListedVersion>, ObjectError>;

    /// Every version and delete marker of exactly `key`, newest first,
    /// resuming strictly after `cursor`, at most `limit`
    /// (1..=[`MAX_LIST_PAGE`]). Unlike `list_versions(key)` it never
    /// returns keys that merely start with `key`.
    ///
    /// The provided method pages `list_versions` by the key as a prefix
    /// and stops at the first other key (the key sorts first under its
    /// own prefix). Backends that can read one key's versions directly
    /// override it: on the file store a prefix listing reads the whole
    /// parent directory, which a takedown removing thousands of objects
    /// side by side pays once per object.
    async fn list_key_versions(
        &self,
        key: &ObjectKey,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<ListPage<ListedVersion>, ObjectError> {
        let mut page = self.list_versions(key.as_str(), cursor, limit).await?;
        if let Some(other) = page.items.iter().position(|v| v.key != key.as_str()) {
            page.items.truncate(other);
            page.next = None;
        }
        Ok(page)
    }

    /// Starts a multipart assembly of `key`; returns its id.
    async fn create_upload(
        &self,
        key: &ObjectKey,
        options: UploadOptions<'_>,
    ) -> Result<String, ObjectError>;

    /// Stores part `part` (1-based) of an upload from bytes or a
    /// server-side copy; returns the part's CRC-64/NVME.
    async fn upload_part(
        &self,
        key: &ObjectKey,
        upload_id: &str,
        part: u32,
        data: PartData<'_>,
    ) -> Result<u64, ObjectError>;

    /// [`ObjectStore::upload_part`] of bytes that are still arriving
    /// (see [`StreamedBody`]); at most `limit` bytes. Returns the part's
    /// CRC-64/NVME.
    ///
    /// The provided method collects the body and calls `upload_part`; a
    /// backend that can write as the body arrives overrides it.
    async fn upload_part_stream(
        &self,
        key: &ObjectKey,
        upload_id: &str,
        part: u32,
        body: StreamedBody,
        limit: u64,
    ) -> Result<u64, ObjectError> {
        let (body, sums) = body.collect(limit).await?;
        let data = PartData::Bytes {
            body,
            crc64: sums.crc64,
        };
        self.upload_part(key, upload_id, part, data).await
    }

    /// Publishes the parts as one object if the condition holds and the
    /// whole has the given CRC. On failure the upload stays pending (the
    /// caller aborts it).
    async fn complete_upload(
        &self,
        key: &ObjectKey,
        upload_id: &str,
        options: CompleteOptions<'_>,
    ) -> Result<ObjectMeta, ObjectError>;

    /// Abandons an upload; an absent one is fine (the abort-on-failure
    /// paths race each other and the cleanup sweep).
    async fn abort_upload(&self, key: &ObjectKey, upload_id: &str) -> Result<(), ObjectError>;

    /// Every pending upload under `prefix`.
    async fn list_uploads(&self, prefix: &str) -> Result<Vec<PendingUpload>, ObjectError>;

    /// The parts uploaded so far to `upload_id` of `key`, ascending by
    /// number; `NoSuchUpload` for an upload that is not pending (or is
    /// another key's).
    async fn list_parts(
        &self,
        key: &ObjectKey,
        upload_id: &str,
    ) -> Result<Vec<UploadedPart>, ObjectError>;

    /// Assembles and publishes one generation from local and copied parts;
    /// see [`compose`]. Every failure aborts the assembly. Written once
    /// over the multipart primitives; a backend overrides it only to do
    /// the same faster (S3 moves parts concurrently).
    async fn compose(&self, spec: &ComposeSpec<'_>) -> Result<ObjectMeta, ObjectError> {
        compose::compose(self, spec).await
    }

    /// The store's operator-time calls.
    fn admin(&self) -> &dyn ObjectAdmin;
}

/// Operator-time calls: setting a store up and the things only some
/// backends can do. Not data-plane requests, so wrappers hand them through
/// unobserved and unbudgeted.
#[async_trait]
pub trait ObjectAdmin: Send + Sync {
    /// Checks (and where needed sets up) the store: versioning, cleanup of
    /// abandoned uploads, whether checksums are validated.
    async fn bootstrap(&self, prefix: &str) -> Result<BootstrapReport, ObjectError>;

    /// Every lifecycle rule. A store without lifecycle rules says
    /// `Unsupported`: "no rules" and "cannot see the rules" must differ.
    async fn lifecycle_rules(&self) -> Result<Vec<LifecycleView>, ObjectError> {
        Err(ObjectError::Unsupported("lifecycle rules".into()))
    }

    /// Makes sure noncurrent versions under `prefix` are kept for at least
    /// `days`, reading, merging and appending: never dropping a rule this
    /// host did not write.
    async fn ensure_noncurrent_retention(
        &self,
        prefix: &str,
        days: u64,
    ) -> Result<RetentionOutcome, ObjectError> {
        let _ = (prefix, days);
        Err(ObjectError::Unsupported("lifecycle rules".into()))
    }

    /// A URL that GETs `key` for `ttl_secs` with no credentials of the
    /// caller's; stores that cannot presign say `Unsupported`.
    async fn presign_get(&self, key: &ObjectKey, ttl_secs: u64) -> Result<String, ObjectError> {
        let _ = (key, ttl_secs);
        Err(ObjectError::Unsupported("presigned URLs".into()))
    }

    /// A URL that PUTs `key` for `ttl_secs`. It carries no content check:
    /// issue it only for content-addressed keys and verify afterwards.
    async fn presign_put(&self, key: &ObjectKey, ttl_secs: u64) -> Result<String, ObjectError> {
        let _ = (key, ttl_secs);
        Err(ObjectError::Unsupported("presigned URLs".into()))
    }
}

/// Checks user metadata the way S3 will, by the contract's rule
/// ([`custodian_contract::object_metadata::check`], which the SDK's native
/// host applies too): at most [`MAX_METADATA_ENTRIES`] entries and
/// [`MAX_METADATA_BYTES`] in total, keys of lowercase `[a-z0-9_-]` (S3
/// lowercases header names, so `A` and `a` would collide), values of
/// printable ASCII (S3 re-encodes anything else).
///
/// # Errors
/// [`ObjectError::InvalidArgument`] naming the offending pair or the total.
pub fn validate_metadata(metadata: &Metadata) -> Result<(), ObjectError> {
    let pairs = metadata.iter().map(|(k, v)| (k.as_str(), v.as_str()));
    custodian_contract::object_metadata::check(pairs)
        .map_err(|why| ObjectError::InvalidArgument(why.to_string().into()))
}

/// Refuses an inverted range before anything is looked up, so the answer
/// does not depend on whether the key exists.
///
/// # Errors
/// [`ObjectError::InvalidArgument`] when `range` ends before it starts.
pub fn validate_range(range: &Range<u64>) -> Result<(), ObjectError> {
    if range.start > range.end {
        return Err(ObjectError::InvalidArgument(
            format!("range {}..{} ends before it starts", range.start, range.end).into(),
        ));
    }
    Ok(())
}

/// Most parts any backend accepts in one multipart assembly (S3's limit);
/// part numbers are `1..=MAX_PART_NUMBER`.
pub const MAX_PART_NUMBER: u32 = 10_000;

/// Checks a multipart part number.
///
/// # Errors
/// [`ObjectError::InvalidArgument`] outside `1..=MAX_PART_NUMBER`.
pub fn validate_part_number(part: u32) -> Result<(), ObjectError> {
    if (1..=MAX_PART_NUMBER).contains(&part) {
        Ok(())
    } else {
        Err(ObjectError::InvalidArgument(
            format!("part number {part} is outside 1..={MAX_PART_NUMBER}").into(),
        ))
    }
}

/// Checks a listing limit.
///
/// # Errors
/// [`ObjectError::InvalidArgument`] outside `1..=MAX_LIST_PAGE`.
pub fn validate_limit(limit: u32) -> Result<(), ObjectError> {
    if (1..=MAX_LIST_PAGE).contains(&limit) {
        Ok(())
    } else {
        Err(ObjectError::InvalidArgument(
            format!("limit {limit} is outside 1..={MAX_LIST_PAGE}").into(),
        ))
    }
}
