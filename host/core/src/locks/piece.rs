//! The lock an object key carries: its piece row, and the lock of the
//! request that row names.

use custodian_base::detail::Detail;
use custodian_contract::content::Id;
use custodian_contract::lock::{RequestLock, decode_piece, piece_key, request_key};
use custodian_kv::{Kv, MAX_KEY_BYTES, Partition};
use custodian_object::ObjectError;

/// A key's lock: which request keeps it, and that request's lock now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PieceLock {
    /// The takedown request whose lock keeps the key.
    pub request: Id,
    /// The request's lock as read.
    pub lock: RequestLock,
}

impl PieceLock {
    /// Why the lock keeps `key` of `store` at `now_ms`, if it does.
    pub fn keeps(&self, store: &str, key: &str, now_ms: u64) -> Option<String> {
        let lock = &self.lock;
        if lock.releases(now_ms) {
            return None;
        }
        let why = if lock.hold {
            "which is under a legal hold".to_owned()
        } else if lock.retain_until_ms > now_ms {
            format!("retained until {} ms since the epoch", lock.retain_until_ms)
        } else {
            "which has not begun purging".to_owned()
        };
        Some(format!(
            "{key:?} in store {store} is locked by takedown request {}, {why}",
            hex::encode(self.request)
        ))
    }
}

/// The lock `key` of `store` carries, `None` when it carries none.
///
/// # Errors
/// [`ObjectError::Unavailable`] when the KV cannot be read, and
/// [`ObjectError::Corrupt`] for rows that do not decode or a piece row
/// naming a request with no lock: either way the caller refuses.
pub(crate) async fn read(
    kv: &dyn Kv,
    partition: &Partition,
    store: &str,
    key: &str,
) -> Result<Option<PieceLock>, ObjectError> {
    let row = piece_key(store, key);
    // A row this long cannot have been written (the KV refuses the key),
    // so the key carries no lock.
    if row.len() > MAX_KEY_BYTES {
        return Ok(None);
    }
    let unreadable = |e| {
        ObjectError::Unavailable(Detail::caused_by(
            format!("cannot read the lock of {key:?} in store {store}; nothing was changed"),
            e,
        ))
    };
    let Some(value) = kv.get(partition, &row).await.map_err(unreadable)? else {
        return Ok(None);
    };
    let corrupt =
        |what: String| ObjectError::Corrupt(format!("{what}; nothing was changed").into());
    let request = decode_piece(&value)
        .map_err(|e| corrupt(format!("the lock of {key:?} in store {store}: {e}")))?;
    let named = request_key(&request);
    let Some(value) = kv.get(partition, &named).await.map_err(unreadable)? else {
        return Err(corrupt(format!(
            "{key:?} in store {store} is locked by takedown request {}, which has no lock row",
            hex::encode(request)
        )));
    };
    let lock = RequestLock::decode(&value).map_err(|e| {
        corrupt(format!(
            "the lock of takedown request {}: {e}",
            hex::encode(request)
        ))
    })?;
    Ok(Some(PieceLock { request, lock }))
}
