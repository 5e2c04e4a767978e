//! Object locks as bytes: which object keys a takedown request keeps, and
//! until when, in KV partition [`PARTITION`]. As with S3 Object Lock in
//! compliance mode, a lock only ever gets stronger until it is released.
//!
//! The takedown plugin is granted this partition and writes every row in
//! its commits (a request's lock when it is filed, a piece's lock with the
//! piece's durable intent, before the piece is written). The host checks
//! *every* write to the partition, whoever makes it, against
//! [`RequestLock::check_transition`] and [`check_piece_write`], and checks
//! every delete or overwrite of an object, whoever asks, against the lock
//! its key carries: a locked object goes only once its request's lock
//! [`RequestLock::releases`] and the retention plugin, asked by the host,
//! says it may.
//!
//! | key | value |
//! |---|---|
//! | `r` request id | the request's lock: created-ms (u64 BE), retain-until-ms (u64 BE), flags (u8: bit 0 hold, bit 1 purging); [`REQUEST_LOCK_BYTES`] bytes |
//! | `k` store `0x00` object key | the id of the request whose lock keeps it (32 bytes) |
//!
//! Rows are never deleted: a released piece's row outlives its object (a
//! few dozen bytes), so no write can ever make a locked key unlocked.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use crate::content::{ID_BYTES, Id};

/// The KV partition of lock rows.
pub const PARTITION: &str = "lock";
/// Tag of a request's lock row: `r` request-id.
pub const REQUEST_TAG: u8 = b'r';
/// Tag of a piece's lock row: `k` store 0x00 key.
pub const PIECE_TAG: u8 = b'k';
/// Bytes of a request's lock row value.
pub const REQUEST_LOCK_BYTES: usize = 17;

const HOLD: u8 = 1;
const PURGING: u8 = 2;

/// A takedown request's lock over the pieces it preserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestLock {
    /// When the request was filed, ms since the epoch: what retention
    /// counts from. Never changes.
    pub created_ms: u64,
    /// The first instant retention no longer protects the pieces, as the
    /// retention plugin answered when the request was filed. May grow,
    /// never shrink.
    pub retain_until_ms: u64,
    /// A legal hold is set: nothing goes, whatever the time.
    pub hold: bool,
    /// The request has begun purging; never unset. Set only once
    /// retention has passed and no hold is set.
    pub purging: bool,
}

/// Why a write to the lock partition is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal(pub String);

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a lock row's key or value does not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowError {
    /// The value's length.
    pub len: usize,
}

impl fmt::Display for RowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a lock row of {} bytes (a request's lock is {REQUEST_LOCK_BYTES}, a piece's {ID_BYTES})",
            self.len
        )
    }
}

/// The key of request `id`'s lock row.
pub fn request_key(id: &Id) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + ID_BYTES);
    key.push(REQUEST_TAG);
    key.extend_from_slice(id);
    key
}

/// The key of the lock row of object `key` in store `store`. Store names
/// never hold `0x00` (they are [`crate::name`]s), so the split is unique.
pub fn piece_key(store: &str, key: &str) -> Vec<u8> {
    let mut row = Vec::with_capacity(2 + store.len() + key.len());
    row.push(PIECE_TAG);
    row.extend_from_slice(store.as_bytes());
    row.push(0);
    row.extend_from_slice(key.as_bytes());
    row
}

/// What a lock row's key names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowKey<'a> {
    /// A request's lock.
    Request(Id),
    /// A piece's lock: the store's name and the object key, as bytes.
    Piece {
        /// The store.
        store: &'a [u8],
        /// The object key.
        key: &'a [u8],
    },
}

/// What `key` names, `None` for a key no lock row has.
pub fn parse_key(key: &[u8]) -> Option<RowKey<'_>> {
    match key.split_first()? {
        (&REQUEST_TAG, id) => Some(RowKey::Request(id.try_into().ok()?)),
        (&PIECE_TAG, rest) => {
            let split = rest.iter().position(|&b| b == 0)?;
            let (store, key) = (&rest[..split], &rest[split + 1..]);
            (!store.is_empty() && !key.is_empty()).then_some(RowKey::Piece { store, key })
        }
        _ => None,
    }
}

impl RequestLock {
    /// The row's value.
    pub fn encode(&self) -> [u8; REQUEST_LOCK_BYTES] {
        let mut value = [0u8; REQUEST_LOCK_BYTES];
        value[..8].copy_from_slice(&self.created_ms.to_be_bytes());
        value[8..16].copy_from_slice(&self.retain_until_ms.to_be_bytes());
        value[16] = (u8::from(self.hold) * HOLD) | (u8::from(self.purging) * PURGING);
        value
    }

    /// The lock a row holds.
    ///
    /// # Errors
    /// [`RowError`] unless the value is [`REQUEST_LOCK_BYTES`] bytes with
    /// only known flags set.
    pub fn decode(value: &[u8]) -> Result<Self, RowError> {
        let error = RowError { len: value.len() };
        let value: &[u8; REQUEST_LOCK_BYTES] = value.try_into().map_err(|_| error)?;
        let flags = value[16];
        if flags & !(HOLD | PURGING) != 0 {
            return Err(error);
        }
        let u64_at = |at: usize| {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(&value[at..at + 8]);
            u64::from_be_bytes(bytes)
        };
        Ok(Self {
            created_ms: u64_at(0),
            retain_until_ms: u64_at(8),
            hold: flags & HOLD != 0,
            purging: flags & PURGING != 0,
        })
    }

    /// Whether the lock lets its pieces go at `now_ms` (the retention
    /// plugin is still asked): purging has begun, retention has passed and
    /// no hold is set.
    pub fn releases(&self, now_ms: u64) -> bool {
        self.purging && !self.hold && self.retain_until_ms <= now_ms
    }

    /// Whether the lock may become `next` at `now_ms` (`self` is the row
    /// now, `None` when there is none): a new lock may be anything that
    /// has not begun purging; after that, retain-until never shrinks, the
    /// creation time never changes, purging is never unset and is set only
    /// once retention has passed with no hold, and a hold cannot be placed
    /// once purging has begun (clearing one is always allowed).
    ///
    /// # Errors
    /// [`Refusal`] naming the rule `next` breaks.
    pub fn check_transition(
        current: Option<&Self>,
        next: &Self,
        now_ms: u64,
    ) -> Result<(), Refusal> {
        let refuse = |why: &str| Err(Refusal(why.into()));
        let Some(current) = current else {
            if next.purging {
                return refuse("a new lock cannot begin purging");
            }
            return Ok(());
        };
        if next.created_ms != current.created_ms {
            return refuse("a lock's creation time never changes");
        }
        if next.retain_until_ms < current.retain_until_ms {
            return refuse("a lock's retain-until can be extended, never shortened");
        }
        if current.purging && !next.purging {
            return refuse("a lock that has begun purging cannot stop");
        }
        if next.purging && !current.purging {
            if current.hold || next.hold {
                return refuse("a held lock cannot begin purging");
            }
            if current.retain_until_ms > now_ms {
                return refuse("a lock cannot begin purging before its retain-until");
            }
        }
        if next.hold && !current.hold && current.purging {
            return refuse("a hold cannot be placed once purging has begun");
        }
        Ok(())
    }
}

/// The request a piece's lock row names.
///
/// # Errors
/// [`RowError`] unless the value is one request id.
pub fn decode_piece(value: &[u8]) -> Result<Id, RowError> {
    value.try_into().map_err(|_| RowError { len: value.len() })
}

/// Whether a piece's lock row may be written with `next` when it holds
/// `current`: once written it is never changed (rewriting the same
/// request is fine).
///
/// # Errors
/// [`Refusal`] when it would change hands.
pub fn check_piece_write(current: Option<&[u8]>, next: &[u8]) -> Result<(), Refusal> {
    match current {
        Some(current) if current != next => Err(Refusal(
            "a piece's lock never passes to another request".into(),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock(retain: u64, hold: bool, purging: bool) -> RequestLock {
        RequestLock {
            created_ms: 10,
            retain_until_ms: retain,
            hold,
            purging,
        }
    }

    #[test]
    fn request_locks_round_trip_and_unknown_flags_are_corrupt() {
        for (hold, purging) in [(false, false), (true, false), (false, true)] {
            let l = lock(99, hold, purging);
            assert_eq!(RequestLock::decode(&l.encode()), Ok(l));
        }
        let mut bad = lock(1, false, false).encode();
        bad[16] = 4;
        assert!(RequestLock::decode(&bad).is_err());
        assert!(RequestLock::decode(&[0; 16]).is_err());
    }

    #[test]
    fn keys_parse_back_to_what_they_name() {
        let id = [7u8; 32];
        assert_eq!(parse_key(&request_key(&id)), Some(RowKey::Request(id)));
        assert_eq!(
            parse_key(&piece_key("preserved", "a/b")),
            Some(RowKey::Piece {
                store: b"preserved",
                key: b"a/b"
            })
        );
        assert_eq!(parse_key(b"r123"), None);
        assert_eq!(parse_key(b"kpreserved"), None);
        assert_eq!(parse_key(b"x"), None);
        assert_eq!(parse_key(b""), None);
    }

    #[test]
    fn a_lock_only_gets_stronger_until_it_is_released() {
        let ok = |c: RequestLock, n: RequestLock, now| {
            RequestLock::check_transition(Some(&c), &n, now).is_ok()
        };
        assert!(ok(lock(50, false, false), lock(60, false, false), 0));
        assert!(!ok(lock(50, false, false), lock(40, false, false), 0));
        assert!(ok(lock(50, false, false), lock(50, true, false), 0));
        assert!(ok(lock(50, true, false), lock(50, false, false), 0));
        assert!(!ok(lock(50, false, false), lock(50, false, true), 49));
        assert!(ok(lock(50, false, false), lock(50, false, true), 50));
        assert!(!ok(lock(50, true, false), lock(50, true, true), 50));
        assert!(!ok(lock(50, false, true), lock(50, false, false), 99));
        assert!(!ok(lock(50, false, true), lock(50, true, true), 99));
        let mut moved = lock(50, false, false);
        moved.created_ms = 11;
        assert!(!ok(lock(50, false, false), moved, 0));
        assert!(RequestLock::check_transition(None, &lock(1, true, false), 0).is_ok());
        assert!(RequestLock::check_transition(None, &lock(1, false, true), 9).is_err());
    }

    #[test]
    fn a_lock_releases_only_when_purging_past_retention_without_hold() {
        assert!(lock(50, false, true).releases(50));
        assert!(!lock(50, false, true).releases(49));
        assert!(!lock(50, false, false).releases(99));
    }

    #[test]
    fn a_piece_lock_never_changes_hands() {
        assert!(check_piece_write(None, &[1; 32]).is_ok());
        assert!(check_piece_write(Some(&[1; 32]), &[1; 32]).is_ok());
        assert!(check_piece_write(Some(&[1; 32]), &[2; 32]).is_err());
        assert_eq!(decode_piece(&[3; 32]), Ok([3; 32]));
        assert!(decode_piece(&[3; 31]).is_err());
    }
}
