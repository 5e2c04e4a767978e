//! Credential lookups kept for a short, fixed time (real time, not the
//! node's clock: the bound is how late a revocation made elsewhere is
//! seen). Only lookups of credentials that exist are kept, so a stranger
//! trying random ids cannot fill it; it holds at most [`MAX_ENTRIES`]
//! and starts over when full.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::credential::CredentialId;
use crate::decisions::access::Principal;

/// Most credentials remembered: bounds memory whatever the callers do.
pub(super) const MAX_ENTRIES: usize = 4096;

/// What a lookup found, `None` when there is no such live credential.
pub(super) type Entry = Option<Found>;

/// A live credential and its principal.
#[derive(Clone)]
pub(super) struct Found {
    /// The BLAKE3 hash of its secret.
    pub hash: [u8; 32],
    /// An S3 key's secret (an S3 key authenticates only by signature, a
    /// bearer token only by its hash).
    pub s3_secret: Option<std::sync::Arc<str>>,
    /// Whose it is.
    pub principal: Principal,
}

pub(super) struct Cache {
    ttl: Duration,
    entries: Mutex<HashMap<CredentialId, (Instant, Entry)>>,
}

impl Cache {
    pub(super) fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            entries: Mutex::new(HashMap::new()),
        }
    }

    pub(super) fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The lookup of `id` made less than the TTL ago.
    pub(super) fn get(&self, id: &CredentialId) -> Option<Entry> {
        let entries = self
            .entries
            .lock()
            .expect("the credential cache is never poisoned");
        let (at, entry) = entries.get(id)?;
        (at.elapsed() < self.ttl).then(|| entry.clone())
    }

    /// Remembers a lookup of `id`, unless it found nothing.
    pub(super) fn put(&self, id: CredentialId, entry: Entry) {
        if entry.is_none() || self.ttl.is_zero() {
            return;
        }
        let mut entries = self
            .entries
            .lock()
            .expect("the credential cache is never poisoned");
        if entries.len() >= MAX_ENTRIES {
            entries.clear();
        }
        entries.insert(id, (Instant::now(), entry));
    }

    /// Forgets everything: this process changed a principal.
    pub(super) fn clear(&self) {
        self.entries
            .lock()
            .expect("the credential cache is never poisoned")
            .clear();
    }
}
