//! The options of each [`ObjectStore`](super::ObjectStore) primitive, and
//! what a read returns.
//!
//! One struct per operation rather than one method per combination: a read
//! of a range of an exact version guarded by an etag is one call with
//! three options set, and a new option (S3's conditional delete, say) is a
//! field, not a new method on every backend and wrapper.

use std::ops::Range;

use bytes::{Bytes, BytesMut};

use super::{Metadata, ObjectKey, ObjectMeta, PutCondition};

/// How to publish a whole object.
#[derive(Debug, Clone, Copy)]
pub struct PutOptions<'a> {
    /// The guard on the publish.
    pub condition: &'a PutCondition,
    /// The new object's user metadata.
    pub metadata: &'a Metadata,
    /// The body's CRC-64/NVME, checked before anything is written.
    pub crc64: u64,
    /// The body's MD5, recorded with the version when the backend can
    /// (the filesystem and memory backends do; the S3 backend reports
    /// none, since a server's ETag is not reliably an MD5 and the
    /// CRC-64/NVME already guards the upload). S3
    /// clients read a single-part object's MD5 as its ETag, which is why a
    /// writer that speaks S3 supplies it. The store does not hash the body
    /// a second time to check it: the writer computed it over these very
    /// bytes, and the CRC-64/NVME stays the store's integrity check.
    pub content_md5: Option<[u8; 16]>,
}

/// How to copy an object server-side.
#[derive(Debug, Clone, Copy)]
pub struct CopyOptions<'a> {
    /// Copy only while the source has this etag.
    pub source_if_match: Option<&'a str>,
    /// The guard on the destination.
    pub condition: &'a PutCondition,
    /// The destination's metadata: exactly this, never the source's
    /// (stamps describe a publish, not bytes).
    pub metadata: &'a Metadata,
}

/// Which object [`ObjectStore::head_opts`](super::ObjectStore::head_opts)
/// describes.
#[derive(Debug, Clone, Copy, Default)]
pub struct HeadOptions<'a> {
    /// An exact version; `None` is the current object.
    pub version_id: Option<&'a str>,
}

/// What [`ObjectStore::get_opts`](super::ObjectStore::get_opts) reads.
#[derive(Debug, Clone, Default)]
pub struct GetOptions<'a> {
    /// An exact version; `None` is the current object.
    pub version_id: Option<&'a str>,
    /// Only these bytes, truncated at the object's end; `None` is all of
    /// them. A long read in several ranges pins one generation by passing
    /// the first answer's etag as `if_match` to every later range.
    pub range: Option<Range<u64>>,
    /// Read only while the object read has this etag; otherwise
    /// `PreconditionFailed` (a missing object is `NotFound` either way).
    pub if_match: Option<&'a str>,
}

/// Which object [`ObjectStore::delete_opts`](super::ObjectStore::delete_opts)
/// removes.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeleteOptions<'a> {
    /// Permanently remove this exact version or delete marker; `None`
    /// removes the current object (a delete marker on a versioned store).
    pub version_id: Option<&'a str>,
}

/// How a multipart assembly starts.
#[derive(Debug, Clone, Copy)]
pub struct UploadOptions<'a> {
    /// The published object's user metadata. Declared at creation because
    /// S3 fixes an object's metadata when its upload is created.
    pub metadata: &'a Metadata,
}

/// Where one part of a multipart assembly comes from.
#[derive(Debug, Clone)]
pub enum PartData<'a> {
    /// These bytes, whose CRC-64/NVME is checked before the part is kept.
    Bytes {
        /// The part's bytes.
        body: Bytes,
        /// Their CRC-64/NVME.
        crc64: u64,
    },
    /// A server-side copy of `range` of the current object at `source`,
    /// guarded by its etag.
    Copy {
        /// The object copied from.
        source: &'a ObjectKey,
        /// Copy only while the source has this etag.
        source_if_match: &'a str,
        /// The bytes of the source to copy (must lie inside it).
        range: Range<u64>,
    },
}

/// How a multipart assembly is published.
#[derive(Debug, Clone, Copy)]
pub struct CompleteOptions<'a> {
    /// Parts `1..=parts` make up the object.
    pub parts: u32,
    /// The guard on the publish.
    pub condition: &'a PutCondition,
    /// The whole object's CRC-64/NVME, checked before it is published.
    pub crc64: u64,
}

/// What a read returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetResult {
    /// The object read (the whole object's size and etag, also for a
    /// range).
    pub meta: ObjectMeta,
    /// The bytes read, in order, as the backend produced them: a streaming
    /// backend hands over its frames rather than copying them into one
    /// buffer.
    pub body: Vec<Bytes>,
}

impl GetResult {
    /// How many bytes were read.
    pub fn len(&self) -> u64 {
        self.body.iter().map(|b| b.len() as u64).sum()
    }

    /// Whether no bytes were read.
    pub fn is_empty(&self) -> bool {
        self.body.iter().all(Bytes::is_empty)
    }

    /// The bytes as one buffer: free for one segment, one copy otherwise.
    pub fn bytes(self) -> (ObjectMeta, Bytes) {
        (self.meta, join(self.body))
    }
}

/// Joins segments into one buffer.
pub(crate) fn join(segments: Vec<Bytes>) -> Bytes {
    match <[Bytes; 1]>::try_from(segments) {
        Ok([only]) => only,
        Err(segments) => {
            let len = segments.iter().map(Bytes::len).sum();
            let mut joined = BytesMut::with_capacity(len);
            for segment in &segments {
                joined.extend_from_slice(segment);
            }
            joined.freeze()
        }
    }
}
