//! Packs: a directory as the inventory of its entries.
//!
//! The bytes (the contract a takedown plugin reads: `CUSTPACK`, the
//! format, the member count, then one 33-byte entry of id and kind per
//! member), their bound and their checks are
//! [`custodian_contract::content::pack`]; this module wraps them in the
//! host's types and errors. Members are in the order of their names in the
//! directory (bytewise), so the same tree always makes the same pack.

use custodian_contract::content::pack::{self as layout, PackError};

use super::{ContentError, ObjectId, ObjectKind};

pub use layout::{FORMAT, HEADER_BYTES, MAGIC, MAX_MEMBERS, MEMBER_BYTES};

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
        out.extend_from_slice(&layout::encode_header(count));
        for member in &self.members {
            out.extend_from_slice(&layout::encode_member(
                member.id.as_bytes(),
                member.kind.byte(),
            ));
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
        let corrupt = |why: PackError| ContentError::Corrupt(format!("pack: {why}"));
        let count =
            layout::decode_header(layout::header(bytes).map_err(corrupt)?).map_err(corrupt)?;
        layout::check_count(count).map_err(corrupt)?;
        layout::check_size(count, bytes.len()).map_err(corrupt)?;
        let members = layout::members(bytes)
            .map(|(id, kind)| {
                Ok(PackMember {
                    id: ObjectId(id),
                    kind: ObjectKind::from_byte(kind)?,
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
