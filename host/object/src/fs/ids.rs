//! Identifiers: version ids, etags, upload ids and staging names.
//!
//! - A **version id** is `<seq>-<rand>`: a 20-digit zero-padded per-key
//!   sequence number (one more than the key's highest, chosen under the
//!   arbiter, so ids sort by creation within a key) and 16 hex digits of
//!   randomness (so an id is never reused, not even after the key's newest
//!   version was deleted and its number handed out again, and ids of
//!   different keys differ). It is also the version file's name.
//! - An **etag** is a quoted 32-hex-digit random string, unique per
//!   publish and deliberately not a content hash: content identity is the
//!   CRC-64/NVME.
//! - An **upload id** is 32 hex digits; a **staging name** is 32 hex
//!   digits and `.stage`; a journal **segment name** 32 hex digits and
//!   `.log`.
//!
//! Randomness comes from std's `RandomState` (SipHash keyed from the OS
//! generator once per thread) over a counter, the process id, the thread
//! and the time: not cryptographic, which nothing here needs; unique with
//! overwhelming probability across threads and processes, which is what
//! ids need. A guessable id grants nothing: every path is checked.

use std::hash::{BuildHasher, RandomState};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Digits of a version id's sequence number.
const SEQ_DIGITS: usize = 20;
/// Hex digits of a version id's random suffix.
const SUFFIX_DIGITS: usize = 16;
/// Length of every version id.
pub(super) const VERSION_ID_LEN: usize = SEQ_DIGITS + 1 + SUFFIX_DIGITS;
/// Hex digits of an upload id.
const UPLOAD_ID_DIGITS: usize = 32;

/// Where random identifiers come from.
#[derive(Debug, Default)]
pub(super) struct Ids {
    counter: AtomicU64,
}

impl Ids {
    /// 64 fresh random bits.
    fn random(&self) -> u64 {
        let count = self.counter.fetch_add(1, Ordering::Relaxed);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        RandomState::new().hash_one((count, process_id(), std::thread::current().id(), nanos))
    }

    /// The version id for sequence number `seq`.
    pub fn version_id(&self, seq: u64) -> String {
        format!("{seq:0SEQ_DIGITS$}-{:0SUFFIX_DIGITS$x}", self.random())
    }

    /// A fresh etag.
    pub fn etag(&self) -> String {
        format!("\"{:016x}{:016x}\"", self.random(), self.random())
    }

    /// A fresh upload id.
    pub fn upload_id(&self) -> String {
        format!("{:016x}{:016x}", self.random(), self.random())
    }

    /// A fresh staging file name.
    pub fn staging_name(&self) -> String {
        format!("{:016x}{:016x}.stage", self.random(), self.random())
    }

    /// A fresh journal segment name.
    pub fn segment_name(&self) -> String {
        format!("{:016x}{:016x}.log", self.random(), self.random())
    }
}

/// This process's id, asked once: `std::process::id` is a `getpid`
/// system call every time, and a publish makes five ids.
fn process_id() -> u32 {
    static ID: OnceLock<u32> = OnceLock::new();
    *ID.get_or_init(std::process::id)
}

/// The sequence number of a well-formed version id; `None` for anything
/// this store cannot have issued (which therefore names no file).
pub(super) fn version_seq(id: &str) -> Option<u64> {
    if id.len() != VERSION_ID_LEN {
        return None;
    }
    let (seq, rest) = id.split_at(SEQ_DIGITS);
    let suffix = rest.strip_prefix('-')?;
    let hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
    if !seq.bytes().all(|b| b.is_ascii_digit()) || !suffix.bytes().all(hex) {
        return None;
    }
    seq.parse().ok()
}

/// Whether `id` is an upload id this store can have issued.
pub(super) fn is_upload_id(id: &str) -> bool {
    id.len() == UPLOAD_ID_DIGITS
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_ids_sort_by_sequence_and_parse_back() {
        let ids = Ids::default();
        let (a, b) = (ids.version_id(9), ids.version_id(10));
        assert!(a < b, "{a} {b}");
        assert_eq!((version_seq(&a), version_seq(&b)), (Some(9), Some(10)));
        assert_eq!(ids.version_id(u64::MAX).len(), VERSION_ID_LEN);
        for bad in [
            "",
            "1",
            "../x",
            &a[1..],
            &format!("{a}0"),
            &a.replace('-', "_"),
            &a.to_uppercase(),
        ] {
            if bad != a {
                assert_eq!(version_seq(bad), None, "{bad:?}");
            }
        }
    }

    #[test]
    fn random_identifiers_do_not_repeat() {
        let ids = Ids::default();
        let etags: std::collections::BTreeSet<_> = (0..10_000).map(|_| ids.etag()).collect();
        assert_eq!(etags.len(), 10_000);
        let upload = ids.upload_id();
        assert!(is_upload_id(&upload));
        assert!(!is_upload_id("../../etc"));
    }
}
