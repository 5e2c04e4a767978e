//! The host's content model as bytes: what a takedown plugin reads and the
//! host writes, so both decode exactly the same layouts.
//!
//! An object's id is the BLAKE3 hash of its bytes ([`ID_BYTES`]); its
//! bytes live in the object store [`SERVING_STORE`] under
//! [`OBJECT_KEY_PREFIX`] + the id in lowercase hex; its kind is one byte
//! ([`BLOB`], [`MANIFEST`], [`PACK`]). The index of objects, holders,
//! seals and entries is KV partition [`PARTITION`].
//!
//! - [`manifest`]: a large file as its chunks' ids;
//! - [`pack`]: a directory as the inventory of its members;
//! - [`index`]: the content index's keys and row values.
//!
//! Only the facts and pure codecs live here; reading the KV or the
//! object store is each side's. Every decoder refuses with an error value
//! rather than panicking (the bytes come from storage a plugin does not
//! trust), and each side words those errors its own way.

pub mod index;
pub mod manifest;
pub mod pack;

use core::fmt;

/// The KV partition holding the content index (read only to a plugin).
pub const PARTITION: &str = "content";
/// The object store holding content as users pushed it.
pub const SERVING_STORE: &str = "serving";
/// The key prefix of content objects in [`SERVING_STORE`]; the id in
/// lowercase hex follows.
pub const OBJECT_KEY_PREFIX: &str = "content/";

/// Bytes of an object id (a BLAKE3 hash).
pub const ID_BYTES: usize = 32;
/// An object id.
pub type Id = [u8; ID_BYTES];

/// The largest blob: files up to this size are one blob, larger ones are
/// cut into chunks of this size (the last one possibly shorter) and
/// described by a manifest.
pub const CHUNK_BYTES: u64 = 4 << 20;

/// Kind byte of a blob: a whole small file or one chunk of a large one.
pub const BLOB: u8 = 1;
/// Kind byte of a manifest ([`manifest`]).
pub const MANIFEST: u8 = 2;
/// Kind byte of a pack ([`pack`]).
pub const PACK: u8 = 3;

/// Whether `kind` names a kind of object. Every other byte (0 included)
/// in a row or a pack entry is corruption.
pub fn is_kind(kind: u8) -> bool {
    matches!(kind, BLOB | MANIFEST | PACK)
}

/// A stored kind byte that names no kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnknownKind(pub u8);

impl fmt::Display for UnknownKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "object kind {} (expected {BLOB} blob, {MANIFEST} manifest or {PACK} pack)",
            self.0
        )
    }
}

/// `kind` if it names a kind of object.
///
/// # Errors
/// [`UnknownKind`] for any other byte.
pub fn kind(kind: u8) -> Result<u8, UnknownKind> {
    if is_kind(kind) {
        Ok(kind)
    } else {
        Err(UnknownKind(kind))
    }
}

/// The `N` bytes at `at` of `bytes`, which the caller has checked are
/// long enough.
fn field<const N: usize>(bytes: &[u8], at: usize) -> [u8; N] {
    let mut out = [0; N];
    out.copy_from_slice(&bytes[at..at + N]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bytes_one_to_three_name_a_kind() {
        assert_eq!((BLOB, MANIFEST, PACK), (1, 2, 3));
        for byte in 0..=u8::MAX {
            assert_eq!(is_kind(byte), (1..=3).contains(&byte), "{byte}");
            assert_eq!(kind(byte).is_ok(), is_kind(byte));
        }
        assert_eq!(kind(0), Err(UnknownKind(0)));
    }
}
