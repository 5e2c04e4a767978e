//! The locks the host enforces over what a request preserves (partition
//! `lock`, the contract's layout, [`rows`]): the request's lock (`r` id),
//! a projection of its state, and each piece's lock (`k preserved 0x00
//! key` → the request id).
//!
//! The host checks every write to the partition (a lock only gets
//! stronger until it is released: retain-until never shrinks, purging is
//! never unset and set only once retain-until has passed with no hold)
//! and refuses every delete or overwrite of a locked piece unless its
//! request's lock releases it. So this policy writes each lock only
//! forward, from state it has guarded (an operator may also extend a
//! lock's retain-until through the host, which is why the lock's, when
//! later, is the one in force):
//!
//! - the request's lock with the filing ([`crate::create`]): created-ms
//!   the request's, retain-until the state's, no hold, not purging;
//! - its hold with the legal hold's commit ([`crate::hold`]);
//! - purging with the step that begins the first purge pass, which a step
//!   begins only once retain-until (the lock's, which may be later than
//!   the state's) has passed with no hold ([`crate::purge::start`]);
//! - a piece's lock with the piece's intent, before its bytes are written
//!   ([`crate::copy`]).
//!
//! A request filed before locks existed has no lock row: its next step
//! writes one and does nothing else ([`crate::step`]), so its later pieces
//! are locked to a lock that is there, and a purge begins only from a
//! lock the host can judge. One that had begun purging already gets none
//! (the host refuses a new lock that is purging), and needs none: its
//! pieces predate locks, and no piece is written once purging begins.

use custodian_sdk::contract::lock as rows;
use custodian_sdk::{Batch, Error, kv};

use crate::codec::{Id, corrupt, hex};
use crate::keys::PRESERVED;
use crate::request::Request;
use crate::state::State;

pub use rows::RequestLock;

/// The partition of lock rows.
pub const PARTITION: &str = rows::PARTITION;

/// A request's lock row as read: the raw value (for a guard) and the
/// lock (`None`: no row).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Loaded {
    /// The row's value.
    pub raw: Option<Vec<u8>>,
    /// The lock it holds.
    pub lock: Option<RequestLock>,
}

/// The key of request `id`'s lock row (in [`PARTITION`]).
pub fn key(id: &Id) -> Vec<u8> {
    rows::request_key(id)
}

/// The value of request `id`'s lock row, as stored.
pub fn row(id: &Id) -> Result<Option<Vec<u8>>, Error> {
    kv::get(PARTITION, &key(id))
}

/// The lock row of `request` (id `id`), read.
pub fn load(id: &Id, request: &Request) -> Result<Loaded, Error> {
    loaded(id, request, row(id)?)
}

/// Request `id`'s lock row `raw` as read. A row that does not decode, or
/// whose creation time is not the request's, is corrupt: no write of this
/// policy could make it, and the host would refuse every write over it.
pub fn loaded(id: &Id, request: &Request, raw: Option<Vec<u8>>) -> Result<Loaded, Error> {
    let lock = raw
        .as_deref()
        .map(|raw| {
            RequestLock::decode(raw)
                .ok()
                .filter(|lock| lock.created_ms == request.created_ms)
                .ok_or_else(|| {
                    corrupt(format!(
                        "the lock of takedown request {} is not the request's",
                        hex(id)
                    ))
                })
        })
        .transpose()?;
    Ok(Loaded { raw, lock })
}

impl Loaded {
    /// Whether the request has no lock row.
    pub fn missing(&self) -> bool {
        self.lock.is_none()
    }

    /// Whether the lock holds a legal hold (one an older policy may have
    /// left set while the state has none: it is cleared first).
    pub fn hold(&self) -> bool {
        self.lock.is_some_and(|lock| lock.hold)
    }

    /// Whether the lock has begun purging.
    pub fn purging(&self) -> bool {
        self.lock.is_some_and(|lock| lock.purging)
    }

    /// The retain-until in force: the lock's, or the state's if that is
    /// later (or there is no lock). A purge begins only once it has passed.
    pub fn retain_until(&self, state: &State) -> u64 {
        self.lock.map_or(state.retain_until, |lock| {
            lock.retain_until_ms.max(state.retain_until)
        })
    }

    /// The lock `state` calls for: created-ms the request's, retain-until
    /// [`Self::retain_until`], the state's hold, and purging once the state
    /// has begun purging (or the lock has: it never stops).
    pub fn next(&self, request: &Request, state: &State) -> RequestLock {
        RequestLock {
            created_ms: request.created_ms,
            retain_until_ms: self.retain_until(state),
            hold: state.hold,
            purging: state.purge_begun() || self.purging(),
        }
    }

    /// Adds to `batch` the write making request `id`'s lock `next`,
    /// guarded on the row as read; nothing when it holds `next` already,
    /// or when there is no row and `next` is purging (a request that began
    /// purging before locks existed; see the module doc).
    pub fn write(&self, batch: Batch, id: &Id, next: &RequestLock) -> Batch {
        if self.lock.as_ref() == Some(next) || (self.lock.is_none() && next.purging) {
            return batch;
        }
        let key = rows::request_key(id);
        batch
            .require_observed(PARTITION, key.clone(), self.raw.as_deref())
            .put(PARTITION, key, next.encode().to_vec())
    }
}

/// The lock of the piece at `key` in the preserved store, as its row's
/// key and value: request `id` keeps it. Written with the piece's intent,
/// before the piece; rewriting it for the same request is allowed, so a
/// replayed intent needs no guard.
pub fn piece_row(id: &Id, key: &str) -> (Vec<u8>, Vec<u8>) {
    (rows::piece_key(PRESERVED, key), id.to_vec())
}
