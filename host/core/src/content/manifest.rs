//! Manifests: a file larger than one chunk, as the ids of its chunks.
//!
//! The bytes (the contract a takedown plugin reads: `CUSTMNFT`, the
//! file's length, the format, the chunk count at bytes 18..22, the chunk
//! ids from byte 22, the file's CRC), their bounds and their checks are
//! [`custodian_contract::content::manifest`]; this module wraps them in
//! the host's type and errors. A parse refuses a chunk count other than
//! `ceil(length / 4 MiB)`, since it cannot describe the file.

use custodian_contract::content::manifest::{self as layout, Header, ManifestError};

use super::{ContentError, ObjectId};

pub use layout::{
    FORMAT, HEADER_BYTES, MAGIC, MAX_CHUNKS, MAX_FILE_BYTES, MAX_MANIFEST_BYTES, TRAILER_BYTES,
};

/// A large file as its chunks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    file_len: u64,
    chunks: Vec<ObjectId>,
    file_crc64: u64,
}

impl Manifest {
    /// A manifest of a file of `file_len` bytes whose CRC-64/NVME is
    /// `file_crc64`, cut into `chunks`.
    ///
    /// # Errors
    /// [`ContentError::InvalidArgument`] when the chunk count is not
    /// `ceil(file_len / 4 MiB)` or exceeds [`MAX_CHUNKS`].
    pub fn new(
        file_len: u64,
        chunks: Vec<ObjectId>,
        file_crc64: u64,
    ) -> Result<Self, ContentError> {
        layout::check_chunks(file_len, chunks.len() as u64)
            .map_err(|why| ContentError::InvalidArgument(why.to_string()))?;
        Ok(Self {
            file_len,
            chunks,
            file_crc64,
        })
    }

    /// The file's length.
    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    /// The chunks' ids, in file order.
    pub fn chunks(&self) -> &[ObjectId] {
        &self.chunks
    }

    /// The CRC-64/NVME of the whole file.
    pub fn file_crc64(&self) -> u64 {
        self.file_crc64
    }

    /// The manifest's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let header = Header {
            file_len: self.file_len,
            count: u32::try_from(self.chunks.len()).expect("bounded by MAX_CHUNKS"),
        };
        let mut out = Vec::with_capacity(HEADER_BYTES + 32 * self.chunks.len() + TRAILER_BYTES);
        out.extend_from_slice(&header.encode());
        for chunk in &self.chunks {
            out.extend_from_slice(chunk.as_bytes());
        }
        out.extend_from_slice(&layout::encode_trailer(self.file_crc64));
        out
    }

    /// Parses a manifest's bytes, strictly: the length's bounds, the
    /// magic, the format, a chunk count that fits the bounds and the
    /// length, and exactly as many bytes as the count says.
    ///
    /// # Errors
    /// [`ContentError::Corrupt`] saying what is wrong.
    pub fn parse(bytes: &[u8]) -> Result<Self, ContentError> {
        let corrupt = |why: ManifestError| ContentError::Corrupt(format!("manifest: {why}"));
        layout::check_len(bytes.len()).map_err(corrupt)?;
        let header = bytes.first_chunk().expect("check_len: at least a header");
        let Header { file_len, count } = Header::decode(header).map_err(corrupt)?;
        layout::check_chunks(file_len, u64::from(count)).map_err(corrupt)?;
        layout::check_size(count, bytes.len()).map_err(corrupt)?;
        Ok(Self {
            file_len,
            chunks: layout::chunk_ids(bytes).map(ObjectId).collect(),
            file_crc64: layout::file_crc64(bytes).expect("check_len: a trailer"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::content::CHUNK_BYTES;

    fn example() -> Manifest {
        let chunks = (0..3u8).map(|i| ObjectId([i; 32])).collect();
        Manifest::new(2 * CHUNK_BYTES + 5, chunks, 0x0123_4567_89ab_cdef).unwrap()
    }

    #[test]
    fn a_manifest_round_trips_through_its_bytes() {
        let manifest = example();
        assert_eq!(Manifest::parse(&manifest.encode()).unwrap(), manifest);
    }

    #[test]
    fn the_chunk_count_sits_at_bytes_18_to_22_and_ids_from_byte_22() {
        let bytes = example().encode();
        assert_eq!(&bytes[..8], b"CUSTMNFT");
        assert_eq!(
            u64::from_le_bytes(bytes[8..16].try_into().unwrap()),
            2 * CHUNK_BYTES + 5
        );
        assert_eq!(u16::from_le_bytes(bytes[16..18].try_into().unwrap()), 1);
        assert_eq!(u32::from_le_bytes(bytes[18..22].try_into().unwrap()), 3);
        assert_eq!(&bytes[22..54], &[0u8; 32]);
        assert_eq!(&bytes[54..86], &[1u8; 32]);
        assert_eq!(
            u64::from_le_bytes(bytes[bytes.len() - 8..].try_into().unwrap()),
            0x0123_4567_89ab_cdef
        );
        assert_eq!(bytes.len(), 22 + 3 * 32 + 8);
    }

    #[test]
    fn malformed_manifests_are_corrupt_not_a_panic() {
        let good = example().encode();
        let mut cases: Vec<(&str, Vec<u8>)> = vec![
            ("empty", Vec::new()),
            ("truncated header", good[..20].to_vec()),
            ("one byte short", good[..good.len() - 1].to_vec()),
            ("one byte long", [good.as_slice(), &[0]].concat()),
        ];
        let mut magic = good.clone();
        magic[0] = b'X';
        cases.push(("bad magic", magic));
        let mut format = good.clone();
        format[16] = 2;
        cases.push(("format 2", format));
        let mut count = good.clone();
        count[18..22].copy_from_slice(&2u32.to_le_bytes());
        cases.push(("count disagrees with the length", count));
        let mut huge = good.clone();
        huge[18..22].copy_from_slice(&u32::MAX.to_le_bytes());
        cases.push(("count above the bound", huge));
        let mut zero = good.clone();
        zero[8..16].copy_from_slice(&0u64.to_le_bytes());
        zero[18..22].copy_from_slice(&0u32.to_le_bytes());
        cases.push(("no chunks", zero));
        for (what, bytes) in cases {
            assert!(
                matches!(Manifest::parse(&bytes), Err(ContentError::Corrupt(_))),
                "{what}"
            );
        }
    }

    #[test]
    fn a_manifest_whose_chunks_cannot_hold_the_file_is_refused() {
        let chunks = vec![ObjectId([0; 32])];
        assert!(matches!(
            Manifest::new(CHUNK_BYTES + 1, chunks, 0),
            Err(ContentError::InvalidArgument(_))
        ));
    }

    #[test]
    fn the_largest_manifest_stays_within_16_mib() {
        let size = HEADER_BYTES + 32 * MAX_CHUNKS as usize + TRAILER_BYTES;
        assert!(size <= MAX_MANIFEST_BYTES);
        assert!(size + 32 > MAX_MANIFEST_BYTES);
    }
}
