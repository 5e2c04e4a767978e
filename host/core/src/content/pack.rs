//! Packs: a directory as the inventory of its entries.
//!
//! Bytes (the contract a takedown plugin reads):
//!
//! | bytes | what |
//! |---|---|
//! | 0..8 | `CUSTPACK` |
//! | 8..10 | format, 1 (u16 LE) |
//! | 10..14 | the member count (u32 LE) |
//! | 14.. | one 33-byte entry per member: its id (32 bytes), its kind (1) |
//!
//! A pack holds no names: members are in the order of their names in the
//! directory (bytewise), so the same tree always makes the same pack. The
//! same id may appear more than once (two files with equal bytes).

use super::{ContentError, ObjectId, ObjectKind};

/// The first 8 bytes of every pack.
pub const MAGIC: &[u8; 8] = b"CUSTPACK";
/// The only format this host writes and reads.
pub const FORMAT: u16 = 1;
/// Bytes before the first member.
pub const HEADER_BYTES: usize = 14;
/// Bytes of one member entry.
pub const MEMBER_BYTES: usize = 33;
/// Most members of one pack (a pack of at most ~2.1 MiB). A takedown
/// plugin reads a pack whole inside its memory limit and queues its whole
/// inventory, and a push holds a directory's listing in memory: an
/// unbounded directory would make both unbounded.
pub const MAX_MEMBERS: u32 = 65_536;

/// One member of a pack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackMember {
    /// The member's id.
    pub id: ObjectId,
    /// What it is: a blob or manifest (a file), or a pack (a subdirectory).
    pub kind: ObjectKind,
}

/// A directory's inventory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pack {
    members: Vec<PackMember>,
}

impl Pack {
    /// A pack of `members`, in the order given.
    ///
    /// # Errors
    /// [`ContentError::InvalidArgument`] for more than [`MAX_MEMBERS`].
    pub fn new(members: Vec<PackMember>) -> Result<Self, ContentError> {
        if members.len() > MAX_MEMBERS as usize {
            return Err(ContentError::InvalidArgument(format!(
                "a pack of {} members exceeds {MAX_MEMBERS}",
                members.len()
            )));
        }
        Ok(Self { members })
    }

    /// The members, in name order.
    pub fn members(&self) -> &[PackMember] {
        &self.members
    }

    /// The pack's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let count = u32::try_from(self.members.len()).expect("bounded by MAX_MEMBERS");
        let mut out = Vec::with_capacity(HEADER_BYTES + MEMBER_BYTES * self.members.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&FORMAT.to_le_bytes());
        out.extend_from_slice(&count.to_le_bytes());
        for member in &self.members {
            out.extend_from_slice(member.id.as_bytes());
            out.push(member.kind.byte());
        }
        out
    }

    /// Parses a pack's bytes, strictly: the magic, the format, a member
    /// count within [`MAX_MEMBERS`], exactly as many bytes as the count
    /// says, and a valid kind for every member.
    ///
    /// # Errors
    /// [`ContentError::Corrupt`] saying what is wrong.
    pub fn parse(bytes: &[u8]) -> Result<Self, ContentError> {
        let corrupt = |why: String| ContentError::Corrupt(format!("pack: {why}"));
        if bytes.len() < HEADER_BYTES {
            return Err(corrupt(format!(
                "{} bytes is shorter than a header",
                bytes.len()
            )));
        }
        if &bytes[..8] != MAGIC {
            return Err(corrupt("does not start with CUSTPACK".into()));
        }
        let format = u16::from_le_bytes(bytes[8..10].try_into().expect("2 bytes"));
        if format != FORMAT {
            return Err(corrupt(format!(
                "format {format} (this host reads {FORMAT})"
            )));
        }
        let count = u32::from_le_bytes(bytes[10..14].try_into().expect("4 bytes"));
        if count > MAX_MEMBERS {
            return Err(corrupt(format!("{count} members exceed {MAX_MEMBERS}")));
        }
        let expected = HEADER_BYTES + MEMBER_BYTES * count as usize;
        if bytes.len() != expected {
            return Err(corrupt(format!(
                "{} bytes, but {count} members make {expected}",
                bytes.len()
            )));
        }
        let members = bytes[HEADER_BYTES..]
            .chunks_exact(MEMBER_BYTES)
            .map(|entry| {
                Ok(PackMember {
                    id: ObjectId(entry[..32].try_into().expect("32 bytes")),
                    kind: ObjectKind::from_byte(entry[32])?,
                })
            })
            .collect::<Result<_, ContentError>>()?;
        Ok(Self { members })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example() -> Pack {
        Pack::new(vec![
            PackMember {
                id: ObjectId([1; 32]),
                kind: ObjectKind::Blob,
            },
            PackMember {
                id: ObjectId([2; 32]),
                kind: ObjectKind::Manifest,
            },
            PackMember {
                id: ObjectId([3; 32]),
                kind: ObjectKind::Pack,
            },
        ])
        .unwrap()
    }

    #[test]
    fn a_pack_round_trips_through_its_bytes() {
        let pack = example();
        assert_eq!(Pack::parse(&pack.encode()).unwrap(), pack);
        let empty = Pack::default();
        assert_eq!(Pack::parse(&empty.encode()).unwrap(), empty);
    }

    #[test]
    fn a_pack_is_a_header_then_33_byte_entries_of_id_and_kind() {
        let bytes = example().encode();
        assert_eq!(&bytes[..8], b"CUSTPACK");
        assert_eq!(u16::from_le_bytes(bytes[8..10].try_into().unwrap()), 1);
        assert_eq!(u32::from_le_bytes(bytes[10..14].try_into().unwrap()), 3);
        assert_eq!(bytes.len(), 14 + 3 * 33);
        assert_eq!(&bytes[14..46], &[1u8; 32]);
        assert_eq!(bytes[46], 1);
        assert_eq!(bytes[47 + 32], 2);
        assert_eq!(bytes[14 + 2 * 33 + 32], 3);
    }

    #[test]
    fn malformed_packs_are_corrupt_not_a_panic() {
        let good = example().encode();
        let mut cases: Vec<(&str, Vec<u8>)> = vec![
            ("empty", Vec::new()),
            ("truncated header", good[..13].to_vec()),
            ("one byte short", good[..good.len() - 1].to_vec()),
            ("one byte long", [good.as_slice(), &[1]].concat()),
        ];
        let mut magic = good.clone();
        magic[7] = b'X';
        cases.push(("bad magic", magic));
        let mut format = good.clone();
        format[8] = 0;
        cases.push(("format 0", format));
        let mut kind = good.clone();
        kind[46] = 9;
        cases.push(("unknown kind", kind));
        let mut zero_kind = good.clone();
        zero_kind[46] = 0;
        cases.push(("kind 0", zero_kind));
        let mut huge = good.clone();
        huge[10..14].copy_from_slice(&u32::MAX.to_le_bytes());
        cases.push(("count above the bound", huge));
        for (what, bytes) in cases {
            assert!(
                matches!(Pack::parse(&bytes), Err(ContentError::Corrupt(_))),
                "{what}"
            );
        }
    }

    #[test]
    fn a_pack_above_the_member_bound_is_refused() {
        let member = PackMember {
            id: ObjectId([0; 32]),
            kind: ObjectKind::Blob,
        };
        assert!(matches!(
            Pack::new(vec![member; MAX_MEMBERS as usize + 1]),
            Err(ContentError::InvalidArgument(_))
        ));
    }
}
