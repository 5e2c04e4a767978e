//! The lock partition's rules applied to one batch: which of its writes
//! touch lock rows, which rows checking them needs, and whether each write,
//! in order, is legal against the rows as read and the batch's own earlier
//! writes — and so which guards make that check hold at commit.

use std::collections::BTreeMap;

use custodian_contract::content::Id;
use custodian_contract::lock::{
    PARTITION, RequestLock, RowKey, check_piece_write, decode_piece, parse_key, request_key,
};
use custodian_kv::{Batch, KvError, Partition, Precondition, Write};

/// One write of a lock row, decoded.
#[derive(Debug, Clone, Copy)]
pub(crate) enum LockWrite<'a> {
    /// A request's lock becomes `next`.
    Request {
        /// The row's key.
        key: &'a [u8],
        /// Its new value, decoded.
        next: RequestLock,
    },
    /// A piece's row is set to name `request`.
    Piece {
        /// The row's key.
        key: &'a [u8],
        /// The request the row names.
        request: Id,
        /// The row's new value (the request's id).
        value: &'a [u8],
    },
}

impl LockWrite<'_> {
    fn key(&self) -> &[u8] {
        match self {
            Self::Request { key, .. } | Self::Piece { key, .. } => key,
        }
    }
}

/// What the rows the guard reads held, by key (`None`: absent).
pub(crate) type Rows = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// `key`, for a refusal: which request or piece it is the row of.
fn describe(key: &[u8]) -> String {
    match parse_key(key) {
        Some(RowKey::Request(id)) => format!("the lock of request {}", hex::encode(id)),
        Some(RowKey::Piece { store, key }) => format!(
            "the lock of {:?} in store {}",
            String::from_utf8_lossy(key),
            String::from_utf8_lossy(store)
        ),
        None => format!("lock row {:?}", String::from_utf8_lossy(key)),
    }
}

fn refused(key: &[u8], why: impl std::fmt::Display) -> KvError {
    KvError::Retained(format!("{}: {why}; nothing was written", describe(key)).into())
}

/// The writes of `batch` to the lock partition, decoded; `None` when it
/// writes none (the hot path: a comparison of names per write, nothing
/// read, nothing allocated).
///
/// # Errors
/// [`KvError::Retained`] for a delete of a lock row or a row that does not
/// decode: no write may remove or garble a lock.
pub(crate) fn lock_writes(batch: &Batch) -> Result<Option<Vec<LockWrite<'_>>>, KvError> {
    let in_partition = |partition: &Partition| partition.as_str() == PARTITION;
    if !batch.writes.iter().any(|write| match write {
        Write::Put { partition, .. } | Write::Delete { partition, .. } => in_partition(partition),
    }) {
        return Ok(None);
    }
    let mut writes = Vec::new();
    for write in &batch.writes {
        match write {
            Write::Put {
                partition,
                key,
                value,
            } if in_partition(partition) => writes.push(decode_write(key, value)?),
            Write::Delete { partition, key } if in_partition(partition) => {
                return Err(refused(key, "lock rows are never deleted"));
            }
            _ => {}
        }
    }
    Ok(Some(writes))
}

fn decode_write<'a>(key: &'a [u8], value: &'a [u8]) -> Result<LockWrite<'a>, KvError> {
    match parse_key(key) {
        Some(RowKey::Request(_)) => {
            let next = RequestLock::decode(value).map_err(|e| refused(key, e))?;
            Ok(LockWrite::Request { key, next })
        }
        Some(RowKey::Piece { .. }) => {
            let request = decode_piece(value).map_err(|e| refused(key, e))?;
            Ok(LockWrite::Piece {
                key,
                request,
                value,
            })
        }
        None => Err(refused(key, "not the key of a request's or a piece's lock")),
    }
}

/// Every row checking `writes` needs, once each, ascending: the rows
/// written, and the request row each piece row names.
pub(crate) fn rows_to_read(writes: &[LockWrite<'_>]) -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = writes
        .iter()
        .flat_map(|write| {
            let named = match write {
                LockWrite::Piece { request, .. } => Some(request_key(request)),
                LockWrite::Request { .. } => None,
            };
            std::iter::once(write.key().to_vec()).chain(named)
        })
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// The request lock a row read holds.
fn stored_lock(key: &[u8], value: &[u8]) -> Result<RequestLock, KvError> {
    RequestLock::decode(value)
        .map_err(|e| KvError::Corrupt(format!("{} as stored: {e}", describe(key)).into()))
}

/// Checks `writes` in order against `read` (every row of
/// [`rows_to_read`]) at `now_ms`, each against the rows as the batch's
/// earlier writes left them, and returns the guards that make the check
/// hold at commit: the value read of every request row written (which a
/// concurrent writer may move), and the absence of every piece row
/// written that was absent. A piece row present is already this one (a
/// piece never changes hands) and rows are never deleted, so neither it
/// nor a request row only read needs a guard.
///
/// # Errors
/// [`KvError::Retained`] naming the first write the rules refuse;
/// [`KvError::Corrupt`] for a stored row that does not decode.
pub(crate) fn check(
    writes: &[LockWrite<'_>],
    read: &Rows,
    now_ms: u64,
    partition: &Partition,
) -> Result<Vec<Precondition>, KvError> {
    let as_read = |key: &[u8]| read.get(key).cloned().flatten();
    // The rows as the writes checked so far leave them.
    let mut state: BTreeMap<&[u8], Option<Vec<u8>>> = BTreeMap::new();
    let mut guards = Vec::new();
    for write in writes {
        let key = write.key();
        let first = !state.contains_key(key);
        let current = match state.get(key) {
            Some(value) => value.clone(),
            None => as_read(key),
        };
        match write {
            LockWrite::Request { next, .. } => {
                let current = current
                    .as_deref()
                    .map(|value| stored_lock(key, value))
                    .transpose()?;
                RequestLock::check_transition(current.as_ref(), next, now_ms)
                    .map_err(|why| refused(key, why))?;
                if first {
                    guards.push(guard(partition, key, as_read(key)));
                }
                state.insert(key, Some(next.encode().to_vec()));
            }
            LockWrite::Piece { request, value, .. } => {
                check_piece_write(current.as_deref(), value).map_err(|why| refused(key, why))?;
                let named = request_key(request);
                let named_now = match state.get(named.as_slice()) {
                    Some(value) => value.clone(),
                    None => as_read(&named),
                };
                match named_now {
                    Some(stored) => {
                        stored_lock(&named, &stored)?;
                    }
                    None => {
                        return Err(refused(
                            key,
                            format_args!("request {} has no lock to keep it", hex::encode(request)),
                        ));
                    }
                }
                if first && current.is_none() {
                    guards.push(guard(partition, key, None));
                }
                state.insert(key, Some(value.to_vec()));
            }
        }
    }
    Ok(guards)
}

fn guard(partition: &Partition, key: &[u8], value: Option<Vec<u8>>) -> Precondition {
    match value {
        Some(value) => Precondition::Equals {
            partition: partition.clone(),
            key: key.to_vec(),
            value,
        },
        None => Precondition::Absent {
            partition: partition.clone(),
            key: key.to_vec(),
        },
    }
}

/// `batch` with `guards` after its own preconditions (so a failed guard's
/// index tells it from the caller's), those the caller already set left
/// out.
pub(crate) fn guarded(batch: &Batch, guards: Vec<Precondition>) -> Batch {
    let mut preconditions = batch.preconditions.clone();
    for guard in guards {
        if !batch.preconditions.contains(&guard) {
            preconditions.push(guard);
        }
    }
    Batch {
        preconditions,
        writes: batch.writes.clone(),
    }
}
