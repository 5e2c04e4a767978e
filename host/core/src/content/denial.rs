//! Takedown denial, checked: whether a takedown withholds an object.
//!
//! The rows are the contract's ([`custodian_contract::denial`]): the
//! takedown plugin writes them in its commits (the decision, and when to
//! lift it, are policy); the host only reads them (a mechanism), at one KV
//! point read per object, wherever content is served or accepted:
//! reading a file by path ([`super::open_file`]), reading an object of
//! the `serving` store by id, and every object a push would store
//! ([`super::push()`]). Listings mark withheld entries instead
//! ([`check_many`]).
//!
//! A file is checked against its own object only (its blob or its
//! manifest), never its chunks one by one: a takedown of a large file
//! denies its manifest and each chunk by id, and another file sharing a
//! chunk with it keeps being served by its path. A push is checked
//! against every object it stores, chunks included, so the taken-down
//! bytes cannot come back as part of another file.

use std::fmt;

use custodian_contract::denial as contract;
use custodian_kv::{Kv, Partition};

use super::{ContentError, ObjectId};

/// The KV partition of denial rows.
pub use custodian_contract::denial::PARTITION;

/// The denial partition.
pub fn partition() -> Partition {
    Partition::new(PARTITION).expect("`denial` is a valid partition name")
}

/// An object a takedown withholds, and the request (the first of those
/// denying it) a refusal names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Withheld {
    /// The object.
    pub object: ObjectId,
    /// The takedown request denying it.
    pub request: ObjectId,
    /// When that denial took effect, ms since the epoch.
    pub since_ms: u64,
}

impl fmt::Display for Withheld {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "object {} is taken down by takedown request {}",
            self.object, self.request
        )
    }
}

fn decode(object: ObjectId, value: &[u8]) -> Result<Withheld, ContentError> {
    let first = contract::first(value)
        .map_err(|e| ContentError::Corrupt(format!("the denial row of {object}: {e}")))?;
    Ok(Withheld {
        object,
        request: ObjectId(first.request),
        since_ms: first.since_ms,
    })
}

/// Whether a takedown withholds `object`: one point read.
///
/// # Errors
/// [`ContentError::Corrupt`] for a row that does not decode;
/// [`ContentError::Index`] if the KV fails.
pub async fn check(kv: &dyn Kv, object: &ObjectId) -> Result<Option<Withheld>, ContentError> {
    kv.get(&partition(), &contract::key(&object.0))
        .await?
        .map(|value| decode(*object, &value))
        .transpose()
}

/// [`check`] of each of `objects` (at most the KV's `get_many` bound), in
/// one read.
///
/// # Errors
/// As for [`check`].
pub async fn check_many(
    kv: &dyn Kv,
    objects: &[ObjectId],
) -> Result<Vec<Option<Withheld>>, ContentError> {
    if objects.is_empty() {
        return Ok(Vec::new());
    }
    let keys: Vec<Vec<u8>> = objects.iter().map(|o| contract::key(&o.0)).collect();
    let rows = kv.get_many(&partition(), &keys).await?;
    objects
        .iter()
        .zip(rows)
        .map(|(object, row)| row.map(|value| decode(*object, &value)).transpose())
        .collect()
}

/// `Ok` unless a takedown withholds `object`.
///
/// # Errors
/// [`ContentError::TakenDown`] when one does; as for [`check`].
pub async fn refuse_withheld(kv: &dyn Kv, object: &ObjectId) -> Result<(), ContentError> {
    match check(kv, object).await? {
        Some(withheld) => Err(ContentError::TakenDown(withheld)),
        None => Ok(()),
    }
}
