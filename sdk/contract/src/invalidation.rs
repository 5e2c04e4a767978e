//! Cache invalidations as bytes: the outbox through which a takedown asks
//! whoever caches a repository's content to drop it, in KV partition
//! [`PARTITION`]. The *decision* is the takedown plugin's: it is granted
//! this partition and writes one entry per holder repository it
//! discovers, in the same commit as the discovery cursor, so a
//! responsibility is never lost nor planned twice. The *delivery* is the
//! host's: it reads the entries and hands each to the configured sinks
//! (a webhook, or consumers of the pull feed), at least once, and deletes
//! an entry only once it is delivered or acknowledged.
//!
//! | key | value |
//! |---|---|
//! | `e` requested-ms (u64 BE) request id (32 bytes) repository (`namespace/name`, UTF-8) | object count (u16 BE), then that many object ids (32 bytes each) |
//!
//! Keys sort by when the entry was planned, so the feed is in planning
//! order. The repository is a `namespace/name` of [`crate::name`]s, so
//! its bytes follow the fixed-length head unambiguously. The objects are
//! those whose holders revealed the repository (informational: the
//! invalidation is of the repository's caches), at most
//! [`MAX_OBJECTS`].
//!
//! Every delivery of one entry carries the same [`idempotency_key`]:
//! the request and the repository, which a request plans at most once.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use crate::content::{ID_BYTES, Id};

/// The KV partition of outbox entries.
pub const PARTITION: &str = "invalidation";
/// Tag of an outbox entry: `e` requested-ms request-id repository.
pub const ENTRY_TAG: u8 = b'e';
/// Bytes of a key before the repository.
pub const HEAD_BYTES: usize = 1 + 8 + ID_BYTES;
/// Most object ids one entry names: keeps an entry (2 KiB) far inside
/// the KV's value bound and a webhook body small.
pub const MAX_OBJECTS: usize = 64;

/// One invalidation: a repository whose caches must drop what a request
/// took down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// When the takedown planned it, ms since the epoch.
    pub requested_ms: u64,
    /// The takedown request.
    pub request: Id,
    /// The holder repository, `namespace/name`.
    pub repository: String,
    /// Objects whose holders listed the repository.
    pub objects: Vec<Id>,
}

/// Why an outbox row does not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowError(pub &'static str);

impl fmt::Display for RowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "an invalidation outbox row: {}", self.0)
    }
}

impl Entry {
    /// The entry's key.
    pub fn key(&self) -> Vec<u8> {
        let mut key = Vec::with_capacity(HEAD_BYTES + self.repository.len());
        key.push(ENTRY_TAG);
        key.extend_from_slice(&self.requested_ms.to_be_bytes());
        key.extend_from_slice(&self.request);
        key.extend_from_slice(self.repository.as_bytes());
        key
    }

    /// The entry's value.
    pub fn value(&self) -> Vec<u8> {
        let count = self.objects.len().min(MAX_OBJECTS);
        let mut value = Vec::with_capacity(2 + count * ID_BYTES);
        // `count` <= MAX_OBJECTS, far inside u16.
        value.extend_from_slice(&(count as u16).to_be_bytes());
        for object in &self.objects[..count] {
            value.extend_from_slice(object);
        }
        value
    }

    /// The entry a row holds.
    ///
    /// # Errors
    /// [`RowError`] for a key that is not an entry's (wrong tag, short,
    /// a repository that is not `namespace/name` of names) or a value
    /// that is not a count and that many ids.
    pub fn decode(key: &[u8], value: &[u8]) -> Result<Self, RowError> {
        if key.len() <= HEAD_BYTES || key[0] != ENTRY_TAG {
            return Err(RowError("not an entry's key"));
        }
        let mut ms = [0u8; 8];
        ms.copy_from_slice(&key[1..9]);
        let mut request = [0u8; ID_BYTES];
        request.copy_from_slice(&key[9..HEAD_BYTES]);
        let repository = core::str::from_utf8(&key[HEAD_BYTES..])
            .map_err(|_| RowError("a repository that is not UTF-8"))?;
        if !valid_repository(repository) {
            return Err(RowError("a repository that is not namespace/name"));
        }
        let (count, ids) = value
            .split_first_chunk::<2>()
            .ok_or(RowError("a value without its object count"))?;
        let count = usize::from(u16::from_be_bytes(*count));
        if count > MAX_OBJECTS || ids.len() != count * ID_BYTES {
            return Err(RowError("an object count that does not match its ids"));
        }
        let objects = ids
            .chunks_exact(ID_BYTES)
            .map(|id| {
                let mut out = [0u8; ID_BYTES];
                out.copy_from_slice(id);
                out
            })
            .collect();
        Ok(Self {
            requested_ms: u64::from_be_bytes(ms),
            request,
            repository: repository.into(),
            objects,
        })
    }

    /// What every delivery of this entry carries, so a receiver can drop
    /// duplicates: see [`idempotency_key`].
    pub fn idempotency_key(&self) -> String {
        idempotency_key(&self.request, &self.repository)
    }
}

/// `takedown:` the request id in lowercase hex `:` the repository. A
/// request plans a repository at most once, so the key names one entry
/// however often it is delivered.
pub fn idempotency_key(request: &Id, repository: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut key = String::with_capacity(10 + 2 * ID_BYTES + repository.len());
    key.push_str("takedown:");
    for byte in request {
        key.push(char::from(HEX[usize::from(byte >> 4)]));
        key.push(char::from(HEX[usize::from(byte & 15)]));
    }
    key.push(':');
    key.push_str(repository);
    key
}

/// Whether `repository` is `namespace/name`, both repository parts
/// ([`crate::name::is_repository_part`]).
pub fn valid_repository(repository: &str) -> bool {
    repository.split_once('/').is_some_and(|(ns, name)| {
        crate::name::is_repository_part(ns) && crate::name::is_repository_part(name)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn entry() -> Entry {
        Entry {
            requested_ms: 1_700_000_000_123,
            request: [7; ID_BYTES],
            repository: "acme/site".into(),
            objects: vec![[1; ID_BYTES], [2; ID_BYTES]],
        }
    }

    #[test]
    fn an_entry_round_trips_through_its_key_and_value() {
        let entry = entry();
        assert_eq!(Entry::decode(&entry.key(), &entry.value()), Ok(entry));
    }

    #[test]
    fn keys_sort_by_when_the_entry_was_planned() {
        let early = entry();
        let mut late = entry();
        late.requested_ms += 1;
        late.request = [0; ID_BYTES];
        late.repository = "a/a".into();
        assert!(early.key() < late.key());
    }

    #[test]
    fn the_idempotency_key_names_the_request_and_the_repository() {
        let key = entry().idempotency_key();
        assert_eq!(
            key,
            alloc::format!("takedown:{}:acme/site", "07".repeat(32))
        );
    }

    #[test]
    fn malformed_rows_are_refused() {
        let entry = entry();
        let mut value = entry.value();
        value.pop();
        assert!(Entry::decode(&entry.key(), &value).is_err());
        assert!(Entry::decode(&entry.key()[..HEAD_BYTES], &entry.value()).is_err());
        let mut key = entry.key();
        key[0] = b'x';
        assert!(Entry::decode(&key, &entry.value()).is_err());
        let mut key = entry.key();
        key.truncate(HEAD_BYTES);
        key.extend_from_slice(b"no-slash");
        assert!(Entry::decode(&key, &entry.value()).is_err());
        let mut many = entry.clone();
        many.objects = vec![[3; ID_BYTES]; MAX_OBJECTS + 1];
        // Encoding keeps the first MAX_OBJECTS; a forged longer count is refused.
        assert_eq!(
            Entry::decode(&many.key(), &many.value()).map(|e| e.objects.len()),
            Ok(MAX_OBJECTS)
        );
        let mut forged = ((MAX_OBJECTS + 1) as u16).to_be_bytes().to_vec();
        forged.extend(core::iter::repeat_n(3u8, (MAX_OBJECTS + 1) * ID_BYTES));
        assert!(Entry::decode(&many.key(), &forged).is_err());
    }
}
