//! The ETags S3 clients see, and the conditions that name them.
//!
//! A store's etag is an opaque generation id (on the filesystem store, 32
//! random hex digits): it changes at every publish, which is what a guard
//! needs. S3 clients read more into an ETag: 32 hex digits are taken for
//! the MD5 of the bytes and checked against the file sent or received
//! (rclone deletes an upload whose ETag is not its MD5), while an ETag
//! holding a `-` (S3's multipart form) is taken for "no MD5 here". So:
//!
//! - an object whose MD5 the store recorded (every PutObject through this
//!   endpoint records it; see [`super::body`]) has the ETag `"<md5>"`, as
//!   on S3;
//! - any other object (assembled from parts, copied from a store that
//!   records none, or written through `/v1`) has the ETag
//!   `"<store etag>-1"`, which no client mistakes for an MD5.
//!
//! A condition naming an ETag (`If-Match`, `If-None-Match`, the copy
//! source's) is compared with the object's ETag as clients see it. A
//! write's `If-Match` is then carried to the store as the store's own etag
//! of the object matched, so the store's guard still makes the write
//! atomic: a publish in between fails it with 412. Two versions with the
//! same bytes share an MD5 ETag, so `If-Match` with that ETag holds for
//! either, exactly as on S3.

use custodian_object::{ObjectError, ObjectKey, ObjectMeta, ObjectStore, PutCondition};
use custodian_s3_wire::error::{Code, S3Error};

use super::errors;

/// The ETag clients see for a version with store etag `etag` and
/// recorded MD5 `md5`.
pub(super) fn of(etag: &str, md5: Option<[u8; 16]>) -> String {
    match md5 {
        Some(md5) => format!("\"{}\"", hex::encode(md5)),
        None => format!("\"{}-1\"", etag.trim_matches('"')),
    }
}

/// The ETag clients see for `meta`.
pub(super) fn of_meta(meta: &ObjectMeta) -> String {
    of(&meta.etag, meta.content_md5)
}

/// The store-level guard for a write whose condition is `condition`, as
/// the client wrote it: an `If-Match` naming the current object's ETag
/// becomes `If-Match` on its store etag.
///
/// # Errors
/// `PreconditionFailed` when the current object has another ETag; an
/// absent object is left to the store, which fails the guard the same
/// way.
pub(super) async fn store_condition(
    store: &dyn ObjectStore,
    object: &ObjectKey,
    condition: PutCondition,
) -> Result<PutCondition, S3Error> {
    let PutCondition::IfMatch(wanted) = condition else {
        return Ok(condition);
    };
    match store.head_opts(object, Default::default()).await {
        Ok(current) if of_meta(&current) == wanted => Ok(PutCondition::IfMatch(current.etag)),
        Ok(_) => Err(S3Error::new(
            Code::PreconditionFailed,
            "At least one of the pre-conditions you specified did not hold (If-Match)",
        )),
        Err(ObjectError::NotFound(_)) => Ok(PutCondition::IfMatch(wanted)),
        Err(e) => Err(errors::of_store(e, false)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_md5_is_the_etag_and_an_object_without_one_is_never_taken_for_an_md5() {
        let md5 = [
            0xd4, 0x1d, 0x8c, 0xd9, 0x8f, 0x00, 0xb2, 0x04, 0xe9, 0x80, 0x09, 0x98, 0xec, 0xf8,
            0x42, 0x7e,
        ];
        assert_eq!(
            of("\"0123\"", Some(md5)),
            "\"d41d8cd98f00b204e9800998ecf8427e\""
        );
        let without = of("\"0123456789abcdef0123456789abcdef\"", None);
        assert_eq!(without, "\"0123456789abcdef0123456789abcdef-1\"");
        // rclone's test for an MD5: 32 hex digits between the quotes.
        let inner = without.trim_matches('"');
        assert!(!(inner.len() == 32 && inner.bytes().all(|b| b.is_ascii_hexdigit())));
    }
}
