//! A request's denial as stored (partition `takedown`, see the crate
//! doc): the `denial` row ([`DenialState`]), how far the request's denial
//! got and what its withdrawal did, with how it is loaded; the
//! `deny-todo` row ([`Cursor`]) of a pack or manifest still being walked;
//! and the bound on a commit carrying denial work ([`COMMIT_OPS`]).
//!
//! The work itself, denying what a request names and lifting it again, is
//! [`crate::denial_work`]'s. Steps, removals and restorations read the row
//! to know whether the request is settled or withdrawn, and count in it
//! the serving copies they removed and restored.

use custodian_sdk::takedown::Denial as WitDenial;
use custodian_sdk::{Error, kv};
use serde::{Deserialize, Serialize};

use crate::codec::{Id, corrupt, decode};
use crate::keys::{self, PARTITION};
use crate::request::Request;

/// The only denial state version this policy reads and writes.
pub const VERSION: u32 = 1;

/// Operations left free in every commit that carries denial work, for the
/// rows the host adds to it (the timer's update, audit entries).
pub const HOST_HEADROOM: usize = 24;
/// Most operations (preconditions and writes) a commit carrying denial
/// work has in all, the caller's own included: the host's bound
/// ([`kv::MAX_BATCH_OPS`], 96) less [`HOST_HEADROOM`], so 72.
///
/// Denying a new object costs at most 4 of them (the guard on its denial
/// row, the row, the `denied` row, and a `deny-todo` row when it is a
/// pack or manifest to walk); lifting one costs 3 (guard, row, `denied`);
/// a walk's cursor costs 1 more when it is written. A `plan-denial` or
/// step chunk spends 3 on the `denial` row (guard, not-after, write), so
/// it denies up to 23 blobs or lifts up to 23 objects; `plan-create`
/// spends 6 on its own rows and denies what fits in the rest.
pub const COMMIT_OPS: usize = kv::MAX_BATCH_OPS - HOST_HEADROOM;

/// The `denial` row: how far the request's denial got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DenialState {
    /// [`VERSION`].
    pub version: u32,
    /// When the denial took effect: the filing. Every denial row entry
    /// of this request carries it.
    pub since_ms: u64,
    /// How many of the objects the request names (its actions, or its
    /// pack) have been denied.
    pub next_action: u32,
    /// Activation (or, once withdrawn, lifting) is complete.
    pub settled: bool,
    /// Objects this request denies now (its `denied` rows).
    pub denied: u64,
    /// When the request was withdrawn.
    pub withdrawn_ms: Option<u64>,
    /// Bumped by every commit that writes the row, so each such commit
    /// changes what the next one is guarded on, even one that only
    /// advanced a walk.
    pub revision: u64,
    /// Serving copies this request removed ([`crate::remove`]).
    #[serde(default)]
    pub removed: u64,
    /// Serving copies this request restored on its withdrawal
    /// ([`crate::restore`]).
    #[serde(default)]
    pub restored: u64,
    /// The withdrawal's restore pass is complete: lifting may begin.
    #[serde(default)]
    pub restore_done: bool,
    /// The restore pass's cursor: the last `denied` row it visited (hex
    /// of the key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_after: Option<String>,
    /// The last problem of the withdrawal (a denial lifted without a
    /// serving copy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

impl DenialState {
    /// The state a request is filed with at `now`.
    pub fn initial(now: u64) -> Self {
        Self {
            version: VERSION,
            since_ms: now,
            next_action: 0,
            settled: false,
            denied: 0,
            withdrawn_ms: None,
            revision: 0,
            removed: 0,
            restored: 0,
            restore_done: false,
            restore_after: None,
            last_error: None,
        }
    }

    /// The state of a request filed by a version of this policy that did
    /// not deny: settled, denying nothing.
    fn legacy(request: &Request) -> Self {
        Self {
            version: VERSION,
            since_ms: request.created_ms,
            next_action: request.named_count(),
            settled: true,
            ..Self::initial(request.created_ms)
        }
    }

    /// Checks combinations no sequence of commits can produce.
    pub fn check(&self, request: &Request) -> Result<(), Error> {
        let problem = if self.version != VERSION {
            Some(format!("unknown version {}", self.version))
        } else if self.next_action > request.named_count() {
            Some(format!(
                "{} named objects denied of {}",
                self.next_action,
                request.named_count()
            ))
        } else if self.settled
            && self.withdrawn_ms.is_none()
            && self.next_action < request.named_count()
        {
            Some("settled before every named object was denied".into())
        } else if self.settled && self.withdrawn_ms.is_some() && self.denied > 0 {
            Some("lifted while still denying objects".into())
        } else if self.withdrawn_ms.is_none() && (self.restore_done || self.restore_after.is_some())
        {
            Some("a restore pass without a withdrawal".into())
        } else if self.restore_done && self.restore_after.is_some() {
            Some("a restore cursor after the pass".into())
        } else if self.last_error.as_ref().is_some_and(|e| e.len() > 4096) {
            Some("an oversized last error".into())
        } else {
            None
        };
        match problem {
            Some(problem) => Err(corrupt(format!("takedown denial state: {problem}"))),
            None => Ok(()),
        }
    }

    /// The WIT record `status` reports.
    pub fn to_wit(&self) -> WitDenial {
        WitDenial {
            since_ms: self.since_ms,
            settled: self.settled,
            denied: self.denied,
            removed: self.removed,
            restored: self.restored,
            withdrawn_ms: self.withdrawn_ms,
        }
    }
}

/// A `deny-todo` row: how far the walk of a pack's inventory or a
/// manifest's chunk list has got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cursor {
    /// [`crate::content::PACK`] or [`crate::content::MANIFEST`].
    pub kind: u8,
    /// The next entry (member or chunk) to deny.
    pub next: u32,
    /// The entry count, once the header was read and checked.
    pub count: Option<u32>,
}

/// A denial state as read, with the raw row for the guards (`None`: no
/// row, a request filed before denial existed).
#[derive(Debug)]
pub struct Loaded {
    /// The state.
    pub state: DenialState,
    /// The stored row.
    pub raw: Option<Vec<u8>>,
}

/// The `denial` row's key of request `id`.
pub fn state_key(id: &Id) -> Vec<u8> {
    keys::key(keys::DENIAL, id, &[])
}

/// The denial state of request `id`; a request without one (filed by an
/// older version of this policy) is settled, denying nothing.
pub fn load(id: &Id, request: &Request) -> Result<Loaded, Error> {
    loaded(kv::get(PARTITION, &state_key(id))?, request)
}

/// The denial state in `raw`, request `id`'s `denial` row as read (see
/// [`load`]).
pub fn loaded(raw: Option<Vec<u8>>, request: &Request) -> Result<Loaded, Error> {
    let state = match &raw {
        Some(raw) => decode(raw, "the denial state")?,
        None => DenialState::legacy(request),
    };
    state.check(request)?;
    Ok(Loaded { state, raw })
}
