//! Takedown denial as bytes: which objects a takedown withholds, in KV
//! partition [`PARTITION`]. The *decision* is the takedown plugin's (it
//! is granted this partition and writes every row, in its commits); the
//! *check* is the host's, on every read and push of content: one point
//! read of [`key`] per object.
//!
//! | key | value |
//! |---|---|
//! | `o` id | one or more denials, 40 bytes each: the request id (32 bytes), then when it took effect (ms since the epoch, u64 BE) |
//!
//! A row exists while at least one request denies the object; the first
//! denial is the one a read is refused with. Several requests may name
//! the same object (each adds itself, and a withdrawal removes only its
//! own denial), at most [`MAX_DENIALS`] at once.

use alloc::vec::Vec;
use core::fmt;

use crate::content::{ID_BYTES, Id};

/// The KV partition of denial rows.
pub const PARTITION: &str = "denial";
/// Tag of an object's denial row: `o` id.
pub const OBJECT_TAG: u8 = b'o';
/// Bytes of one denial in a row: a request id and a time.
pub const DENIAL_BYTES: usize = ID_BYTES + 8;
/// Most requests denying one object at once: keeps a row (2.5 KiB) far
/// inside the KV's value bound and a read of it cheap; a request that
/// would be one more is refused until another is withdrawn.
pub const MAX_DENIALS: usize = 64;

/// One request's denial of an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Denial {
    /// The request that denies it.
    pub request: Id,
    /// When the denial took effect, ms since the epoch.
    pub since_ms: u64,
}

/// Why a denial row's value does not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowError {
    /// The value's length.
    pub len: usize,
}

impl fmt::Display for RowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a denial row of {} bytes (expected 1..={MAX_DENIALS} denials of {DENIAL_BYTES} bytes)",
            self.len
        )
    }
}

/// The key of `id`'s denial row.
pub fn key(id: &Id) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + ID_BYTES);
    key.push(OBJECT_TAG);
    key.extend_from_slice(id);
    key
}

/// A row's value: the denials in order, the first first.
pub fn encode(denials: &[Denial]) -> Vec<u8> {
    let mut value = Vec::with_capacity(denials.len() * DENIAL_BYTES);
    for denial in denials {
        value.extend_from_slice(&denial.request);
        value.extend_from_slice(&denial.since_ms.to_be_bytes());
    }
    value
}

/// The denials a row holds, in order.
///
/// # Errors
/// [`RowError`] unless the value is 1..=[`MAX_DENIALS`] whole denials.
pub fn decode(value: &[u8]) -> Result<Vec<Denial>, RowError> {
    check(value)?;
    Ok(value.chunks_exact(DENIAL_BYTES).map(denial).collect())
}

/// The first denial of a row: the one a read is refused with. Reads only
/// the first 40 bytes after checking the length.
///
/// # Errors
/// As for [`decode`].
pub fn first(value: &[u8]) -> Result<Denial, RowError> {
    check(value)?;
    Ok(denial(&value[..DENIAL_BYTES]))
}

/// Whether `value` is 1..=[`MAX_DENIALS`] whole denials.
fn check(value: &[u8]) -> Result<(), RowError> {
    let count = value.len() / DENIAL_BYTES;
    if value.len().is_multiple_of(DENIAL_BYTES) && (1..=MAX_DENIALS).contains(&count) {
        Ok(())
    } else {
        Err(RowError { len: value.len() })
    }
}

fn denial(bytes: &[u8]) -> Denial {
    let mut request = [0; ID_BYTES];
    request.copy_from_slice(&bytes[..ID_BYTES]);
    let mut since = [0; 8];
    since.copy_from_slice(&bytes[ID_BYTES..DENIAL_BYTES]);
    Denial {
        request,
        since_ms: u64::from_be_bytes(since),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn denial(n: u8) -> Denial {
        Denial {
            request: [n; 32],
            since_ms: u64::from(n) * 1000,
        }
    }

    #[test]
    fn a_row_round_trips_and_its_first_denial_is_the_earliest_added() {
        let denials = vec![denial(3), denial(1), denial(2)];
        let value = encode(&denials);
        assert_eq!(value.len(), 3 * DENIAL_BYTES);
        assert_eq!(decode(&value), Ok(denials));
        assert_eq!(first(&value), Ok(denial(3)));
    }

    #[test]
    fn an_empty_partial_or_overfull_row_is_refused() {
        let full = encode(&vec![denial(1); MAX_DENIALS]);
        assert!(decode(&full).is_ok());
        let over = encode(&vec![denial(1); MAX_DENIALS + 1]);
        for bad in [
            &[][..],
            &full[..DENIAL_BYTES - 1],
            &full[..DENIAL_BYTES + 1],
            &over,
        ] {
            assert_eq!(decode(bad), Err(RowError { len: bad.len() }));
            assert_eq!(first(bad), Err(RowError { len: bad.len() }));
        }
    }

    #[test]
    fn keys_are_the_tag_then_the_object_id() {
        let key = key(&[7; 32]);
        assert_eq!(key[0], b'o');
        assert_eq!(&key[1..], &[7; 32]);
    }
}
