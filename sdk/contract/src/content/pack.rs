//! Packs: a directory as the inventory of its members.
//!
//! | bytes | what |
//! |---|---|
//! | 0..8 | [`MAGIC`], `CUSTPACK` |
//! | 8..10 | [`FORMAT`], 1 (u16 LE) |
//! | 10..14 | the member count (u32 LE) |
//! | 14.. | one [`MEMBER_BYTES`] entry per member: its id (32 bytes), its kind (1) |
//!
//! A pack holds no names: members are in the order of their names in the
//! directory (bytewise), so the same tree always makes the same pack. The
//! same id may appear more than once (two files with equal bytes).

use core::fmt;
use core::ops::Range;

use super::{ID_BYTES, Id, field};

/// The first 8 bytes of every pack.
pub const MAGIC: &[u8; 8] = b"CUSTPACK";
/// The only format written and read.
pub const FORMAT: u16 = 1;
/// Where the format sits.
pub const FORMAT_AT: Range<usize> = 8..10;
/// Where the member count sits.
pub const COUNT_AT: Range<usize> = 10..14;
/// Bytes before the first member.
pub const HEADER_BYTES: usize = 14;
/// Bytes of one member entry: its id, then its kind byte.
pub const MEMBER_BYTES: usize = ID_BYTES + 1;
/// Most members of one pack (a pack of at most ~2.1 MiB). A takedown
/// plugin reads a pack whole inside its memory limit and queues its whole
/// inventory, and a push holds a directory's listing in memory: an
/// unbounded directory would make both unbounded.
pub const MAX_MEMBERS: u32 = 65_536;

const _: () = assert!(FORMAT_AT.start == MAGIC.len() && FORMAT_AT.end == COUNT_AT.start);
const _: () = assert!(COUNT_AT.end == HEADER_BYTES && MEMBER_BYTES == 33);

/// Why bytes are not a pack. Displayed as the host words it; a plugin may
/// word it its own way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PackError {
    /// Fewer than [`HEADER_BYTES`].
    Short {
        /// The length given.
        len: usize,
    },
    /// The bytes do not start with [`MAGIC`].
    Magic,
    /// A format other than [`FORMAT`].
    Format(u16),
    /// A member count above [`MAX_MEMBERS`].
    TooMany {
        /// The declared count.
        count: u32,
    },
    /// A byte length other than the member count makes
    /// ([`size_for_count`]).
    Size {
        /// The declared count.
        count: u32,
        /// The length given.
        len: usize,
    },
}

impl fmt::Display for PackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Short { len } => write!(f, "{len} bytes is shorter than a header"),
            Self::Magic => f.write_str("does not start with CUSTPACK"),
            Self::Format(format) => write!(f, "format {format} (this host reads {FORMAT})"),
            Self::TooMany { count } => write!(f, "{count} members exceed {MAX_MEMBERS}"),
            Self::Size { count, len } => write!(
                f,
                "{len} bytes, but {count} members make {}",
                size_for_count(count)
            ),
        }
    }
}

/// The header of a pack of `count` members (format [`FORMAT`]).
pub fn encode_header(count: u32) -> [u8; HEADER_BYTES] {
    let mut out = [0; HEADER_BYTES];
    out[..FORMAT_AT.start].copy_from_slice(MAGIC);
    out[FORMAT_AT].copy_from_slice(&FORMAT.to_le_bytes());
    out[COUNT_AT].copy_from_slice(&count.to_le_bytes());
    out
}

/// The member count a header declares: the magic, then the format, are
/// checked (the count is not judged: [`check_count`] does).
///
/// # Errors
/// [`PackError::Magic`] or [`PackError::Format`].
pub fn decode_header(header: &[u8; HEADER_BYTES]) -> Result<u32, PackError> {
    if &header[..FORMAT_AT.start] != MAGIC {
        return Err(PackError::Magic);
    }
    let format = u16::from_le_bytes(field(header, FORMAT_AT.start));
    if format != FORMAT {
        return Err(PackError::Format(format));
    }
    Ok(u32::from_le_bytes(field(header, COUNT_AT.start)))
}

/// One member's entry: its id, then its kind byte.
pub fn encode_member(id: &Id, kind: u8) -> [u8; MEMBER_BYTES] {
    let mut out = [0; MEMBER_BYTES];
    out[..ID_BYTES].copy_from_slice(id);
    out[ID_BYTES] = kind;
    out
}

/// The size of a pack of `count` members.
pub fn size_for_count(count: u32) -> u64 {
    member_offset(count)
}

/// Offset of member `index`'s entry.
pub fn member_offset(index: u32) -> u64 {
    HEADER_BYTES as u64 + MEMBER_BYTES as u64 * u64::from(index)
}

/// Whether a pack may declare `count` members ([`MAX_MEMBERS`]).
///
/// # Errors
/// [`PackError::TooMany`] otherwise.
pub fn check_count(count: u32) -> Result<(), PackError> {
    if count > MAX_MEMBERS {
        return Err(PackError::TooMany { count });
    }
    Ok(())
}

/// Whether `len` bytes are exactly what `count` members make.
///
/// # Errors
/// [`PackError::Size`] otherwise.
pub fn check_size(count: u32, len: usize) -> Result<(), PackError> {
    if len as u64 == size_for_count(count) {
        Ok(())
    } else {
        Err(PackError::Size { count, len })
    }
}

/// The header of a whole pack's bytes.
///
/// # Errors
/// [`PackError::Short`] for fewer than [`HEADER_BYTES`].
pub fn header(bytes: &[u8]) -> Result<&[u8; HEADER_BYTES], PackError> {
    bytes
        .first_chunk()
        .ok_or(PackError::Short { len: bytes.len() })
}

/// Checks the structure of a whole pack: a header, the magic, the format,
/// and exactly as many bytes as the count says. (It does not judge the
/// count against [`MAX_MEMBERS`], nor the members' kinds.)
///
/// # Errors
/// [`PackError::Short`], [`PackError::Magic`], [`PackError::Format`] or
/// [`PackError::Size`].
pub fn check(bytes: &[u8]) -> Result<u32, PackError> {
    let count = decode_header(header(bytes)?)?;
    check_size(count, bytes.len())?;
    Ok(count)
}

/// The members (id, kind byte) of a pack whose size [`check_size`]
/// accepted, in order; the kinds are as stored, not yet judged.
pub fn members(bytes: &[u8]) -> impl Iterator<Item = (Id, u8)> + '_ {
    bytes
        .get(HEADER_BYTES..)
        .unwrap_or(&[])
        .chunks_exact(MEMBER_BYTES)
        .map(|entry| (field(entry, 0), entry[ID_BYTES]))
}

#[cfg(test)]
mod tests {
    use alloc::vec::Vec;

    use super::*;
    use crate::content::{BLOB, MANIFEST, PACK};

    fn example() -> Vec<u8> {
        let mut bytes = encode_header(3).to_vec();
        bytes.extend_from_slice(&encode_member(&[1; 32], BLOB));
        bytes.extend_from_slice(&encode_member(&[2; 32], MANIFEST));
        bytes.extend_from_slice(&encode_member(&[3; 32], PACK));
        bytes
    }

    #[test]
    fn a_pack_round_trips_through_its_header_and_members() {
        let bytes = example();
        assert_eq!(check(&bytes), Ok(3));
        let listed: Vec<_> = members(&bytes).collect();
        assert_eq!(
            listed,
            [([1; 32], BLOB), ([2; 32], MANIFEST), ([3; 32], PACK)]
        );
        let empty = encode_header(0);
        assert_eq!(check(&empty), Ok(0));
        assert_eq!(members(&empty).count(), 0);
    }

    #[test]
    fn a_pack_is_a_header_then_33_byte_entries_of_id_and_kind() {
        let bytes = example();
        assert_eq!(&bytes[..8], b"CUSTPACK");
        assert_eq!(&bytes[8..10], &1u16.to_le_bytes());
        assert_eq!(&bytes[10..14], &3u32.to_le_bytes());
        assert_eq!(bytes.len(), 14 + 3 * 33);
        assert_eq!(bytes[46], BLOB);
        assert_eq!(member_offset(2), 14 + 2 * 33);
        assert_eq!(size_for_count(3), bytes.len() as u64);
    }

    #[test]
    fn a_truncated_oversized_or_bad_magic_pack_is_refused() {
        let good = example();
        assert_eq!(check(&good[..13]), Err(PackError::Short { len: 13 }));
        assert_eq!(
            check(&good[..good.len() - 1]),
            Err(PackError::Size {
                count: 3,
                len: good.len() - 1
            })
        );
        let long = [good.as_slice(), &[1]].concat();
        assert_eq!(
            check(&long),
            Err(PackError::Size {
                count: 3,
                len: long.len()
            })
        );
        let mut magic = good.clone();
        magic[7] = b'X';
        assert_eq!(check(&magic), Err(PackError::Magic));
        let mut format = good.clone();
        format[8] = 0;
        assert_eq!(check(&format), Err(PackError::Format(0)));
        check_count(MAX_MEMBERS).unwrap();
        assert_eq!(
            check_count(MAX_MEMBERS + 1),
            Err(PackError::TooMany {
                count: MAX_MEMBERS + 1
            })
        );
        let mut huge = good.clone();
        huge[10..14].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            check(&huge),
            Err(PackError::Size {
                count: u32::MAX,
                len: good.len()
            })
        );
    }
}
