//! Content-addressed bytes in the serving store: uploaded once, checked
//! when already there.

use bytes::Bytes;

use super::{ContentError, ObjectId, object_key};
use custodian_object::ObjectStoreExt;
use custodian_object::{Metadata, ObjectError, ObjectMeta, ObjectStore, PutCondition};

/// Attempts at storing one object while concurrent writers of the same
/// key are in flight (each attempt heads first, so a finished concurrent
/// write ends the loop); bounded so a store that keeps answering
/// `Conflict` cannot hold a push forever.
const MAX_ATTEMPTS: usize = 4;

/// What storing an object did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stored {
    /// The bytes were uploaded.
    Uploaded,
    /// The store already had them.
    Present,
}

/// Makes sure the serving store holds `body` (whose id is `id` and
/// CRC-64/NVME `crc64`) at its content key. Looks first, so bytes already
/// there are not sent again; creates with `IfNoneMatchAny`, and takes a
/// lost race as success once the winner's object checks out, since every
/// writer of a content address writes the same bytes.
///
/// # Errors
/// [`ContentError::Corrupt`] when the store holds different bytes (size
/// or CRC) at the key; [`ContentError::Conflict`] when concurrent writers
/// kept the key busy; [`ContentError::Store`] when the store fails.
pub(super) async fn store(
    serving: &dyn ObjectStore,
    id: &ObjectId,
    body: Bytes,
    crc64: u64,
) -> Result<Stored, ContentError> {
    let key = object_key(id);
    let size = body.len() as u64;
    for _ in 0..MAX_ATTEMPTS {
        match serving.head(&key).await {
            Ok(meta) => return check(&meta, size, crc64).map(|()| Stored::Present),
            Err(ObjectError::NotFound(_)) => {}
            Err(other) => return Err(other.into()),
        }
        match serving
            .put_whole(
                &key,
                body.clone(),
                &PutCondition::IfNoneMatchAny,
                &Metadata::new(),
                crc64,
            )
            .await
        {
            Ok(_) => return Ok(Stored::Uploaded),
            // Another writer published (or is publishing) the same
            // address: look again.
            Err(ObjectError::PreconditionFailed(_) | ObjectError::Conflict(_)) => {}
            Err(other) => return Err(other.into()),
        }
    }
    Err(ContentError::Conflict(format!(
        "{key}: concurrent writers kept the key busy through {MAX_ATTEMPTS} attempts"
    )))
}

/// Whether the object found at a content key has the bytes its address
/// promises (as far as size and CRC tell).
fn check(meta: &ObjectMeta, size: u64, crc64: u64) -> Result<(), ContentError> {
    let crc_differs = meta.crc64.is_some_and(|found| found != crc64);
    if meta.size != size || crc_differs {
        return Err(ContentError::Corrupt(format!(
            "the serving store holds {} with {} bytes and CRC {}, but its content address says \
             {size} bytes and CRC {crc64:016x}",
            meta.key,
            meta.size,
            meta.crc64
                .map_or_else(|| "unknown".to_owned(), |c| format!("{c:016x}")),
        )));
    }
    Ok(())
}
