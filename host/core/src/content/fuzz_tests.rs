//! Fuzz targets of the content decoders: manifests and packs (read back
//! from any store a takedown preserves from, so untrusted), and the
//! index's object and entry rows. Each is a `#[test]` that bolero runs for
//! a bounded time (see the README's "Fuzzing").

use super::index::{Entry, ObjectRow};
use super::manifest::{HEADER_BYTES, MAX_CHUNKS, MAX_FILE_BYTES, Manifest};
use super::pack::{MAX_MEMBERS, Pack, PackMember};
use super::{CHUNK_BYTES, ContentError, ObjectId, ObjectKind};
use custodian_base::fuzz_input::mutate;
use custodian_contract::content::manifest::Header;

/// The most chunks a generated manifest has: enough to cross every
/// boundary of the format, few enough to run thousands per second.
const GENERATED_CHUNKS: u64 = 64;

/// Parses `bytes` as a manifest and a pack, checking what is accepted:
/// the parsers are strict, so anything they accept re-encodes to the same
/// bytes, and anything they refuse is `Corrupt`.
fn decode_content(bytes: &[u8]) {
    match Manifest::parse(bytes) {
        Ok(manifest) => {
            assert_eq!(manifest.encode(), bytes);
            let count = manifest.chunks().len() as u64;
            assert!((1..=u64::from(MAX_CHUNKS)).contains(&count));
            assert_eq!(count, manifest.file_len().div_ceil(CHUNK_BYTES));
            assert!(manifest.file_len() <= MAX_FILE_BYTES);
        }
        Err(error) => assert!(matches!(error, ContentError::Corrupt(_)), "{error:?}"),
    }
    match Pack::parse(bytes) {
        Ok(pack) => {
            assert_eq!(pack.encode(), bytes);
            assert!(pack.members().len() <= MAX_MEMBERS as usize);
        }
        Err(error) => assert!(matches!(error, ContentError::Corrupt(_)), "{error:?}"),
    }
}

#[test]
fn arbitrary_bytes_never_panic_the_manifest_and_pack_decoders() {
    bolero::check!().for_each(decode_content);
}

/// A kind from a byte.
fn kind(byte: u8) -> ObjectKind {
    [ObjectKind::Blob, ObjectKind::Manifest, ObjectKind::Pack][usize::from(byte % 3)]
}

/// A manifest of `file_len` (bounded to [`GENERATED_CHUNKS`] chunks) whose
/// chunk ids are `seed` counted up.
fn manifest_of(file_len: u64, seed: u8, crc: u64) -> Manifest {
    let file_len = file_len % (GENERATED_CHUNKS * CHUNK_BYTES + 1);
    let chunks = (0..file_len.div_ceil(CHUNK_BYTES))
        .map(|i| ObjectId([seed.wrapping_add(i as u8); 32]))
        .collect();
    Manifest::new(file_len, chunks, crc).expect("ceil(len / 4 MiB) chunks")
}

#[test]
fn generated_manifests_round_trip_and_any_other_chunk_count_is_refused() {
    bolero::check!()
        .with_type::<(u64, u8, u64, u32)>()
        .cloned()
        .for_each(|(file_len, seed, crc, count)| {
            let manifest = manifest_of(file_len, seed, crc);
            if manifest.file_len() > 0 {
                assert_eq!(
                    Manifest::parse(&manifest.encode()).ok(),
                    Some(manifest.clone())
                );
            }
            // The same bytes declaring another count: refused before the
            // ids are read, whatever the count.
            let mut bytes = manifest.encode();
            let header = Header {
                file_len: manifest.file_len(),
                count,
            };
            bytes[..HEADER_BYTES].copy_from_slice(&header.encode());
            if u64::from(count) != manifest.file_len().div_ceil(CHUNK_BYTES) {
                assert!(matches!(
                    Manifest::parse(&bytes),
                    Err(ContentError::Corrupt(_))
                ));
            }
        });
}

#[test]
fn generated_packs_round_trip_through_their_bytes() {
    bolero::check!()
        .with_type::<Vec<([u8; 32], u8)>>()
        .for_each(|members: &Vec<([u8; 32], u8)>| {
            let members = members
                .iter()
                .map(|&(id, byte)| PackMember {
                    id: ObjectId(id),
                    kind: kind(byte),
                })
                .collect();
            let pack = Pack::new(members).expect("fewer than MAX_MEMBERS");
            assert_eq!(Pack::parse(&pack.encode()).ok(), Some(pack));
        });
}

#[test]
fn near_misses_of_a_valid_manifest_or_pack_never_panic_their_decoders() {
    let manifest = manifest_of(2 * CHUNK_BYTES + 5, 1, 7).encode();
    let pack = Pack::new(vec![
        PackMember {
            id: ObjectId([1; 32]),
            kind: ObjectKind::Manifest,
        };
        2
    ])
    .expect("two members")
    .encode();
    bolero::check!()
        .with_type::<(bool, Vec<(u16, u8, u8)>)>()
        .for_each(|(is_pack, edits)| {
            decode_content(&mutate(if *is_pack { &pack } else { &manifest }, edits));
        });
}

#[test]
fn index_rows_round_trip_and_arbitrary_values_are_corrupt_not_a_panic() {
    bolero::check!()
        .with_type::<(u8, u64, u64, [u8; 32], Vec<u8>)>()
        .for_each(|(byte, size, crc, id, junk)| {
            let row = ObjectRow {
                kind: kind(*byte),
                size: *size,
                crc64: *crc,
            };
            assert_eq!(ObjectRow::decode(&row.encode()).ok(), Some(row));
            let entry = Entry {
                path: "a/b".into(),
                id: ObjectId(*id),
                kind: kind(*byte),
                size: *size,
            };
            let decoded = Entry::decode_value(entry.path.clone(), &entry.encode_value());
            assert_eq!(decoded.ok(), Some(entry));
            for result in [
                ObjectRow::decode(junk).map(|_| ()),
                Entry::decode_value(String::new(), junk).map(|_| ()),
            ] {
                if let Err(error) = result {
                    assert!(matches!(error, ContentError::Corrupt(_)), "{error:?}");
                }
            }
        });
}
