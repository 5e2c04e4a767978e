//! Manifests: a file larger than one chunk, as the ids of its chunks.
//!
//! Bytes (the contract a takedown plugin reads):
//!
//! | bytes | what |
//! |---|---|
//! | 0..8 | `CUSTMNFT` |
//! | 8..16 | the file's length (u64 LE) |
//! | 16..18 | format, 1 (u16 LE) |
//! | 18..22 | the chunk count (u32 LE) |
//! | 22.. | the chunk ids, 32 bytes each, in file order |
//! | last 8 | the CRC-64/NVME of the reassembled file (u64 LE) |
//!
//! Format 1 cuts files into [`CHUNK_BYTES`] chunks, the last one possibly
//! shorter, so the chunk count is always `ceil(length / 4 MiB)`; a parse
//! refuses anything else, since a count that disagrees with the length
//! cannot describe the file.

use super::{CHUNK_BYTES, ContentError, ObjectId};

/// The first 8 bytes of every manifest.
pub const MAGIC: &[u8; 8] = b"CUSTMNFT";
/// The only format this host writes and reads.
pub const FORMAT: u16 = 1;
/// Bytes before the first chunk id.
pub const HEADER_BYTES: usize = 22;
/// Bytes after the last chunk id (the file's CRC).
pub const TRAILER_BYTES: usize = 8;
/// Largest manifest, in bytes. A takedown plugin reads a manifest whole,
/// inside its memory limit (64 MiB by default), to queue the chunks: a
/// manifest of unbounded size could exhaust it, or make one step's work
/// unbounded.
pub const MAX_MANIFEST_BYTES: usize = 16 << 20;
/// Most chunks in one manifest: as many as fit [`MAX_MANIFEST_BYTES`]
/// (524,287, so a file of up to ~2 TiB).
pub const MAX_CHUNKS: u32 = ((MAX_MANIFEST_BYTES - HEADER_BYTES - TRAILER_BYTES) / 32) as u32;
/// Largest file a manifest can describe.
pub const MAX_FILE_BYTES: u64 = MAX_CHUNKS as u64 * CHUNK_BYTES;

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
        check(file_len, chunks.len() as u64).map_err(ContentError::InvalidArgument)?;
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
        let count = u32::try_from(self.chunks.len()).expect("bounded by MAX_CHUNKS");
        let mut out = Vec::with_capacity(HEADER_BYTES + 32 * self.chunks.len() + TRAILER_BYTES);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.file_len.to_le_bytes());
        out.extend_from_slice(&FORMAT.to_le_bytes());
        out.extend_from_slice(&count.to_le_bytes());
        for chunk in &self.chunks {
            out.extend_from_slice(chunk.as_bytes());
        }
        out.extend_from_slice(&self.file_crc64.to_le_bytes());
        out
    }

    /// Parses a manifest's bytes, strictly: the magic, the format, a
    /// chunk count that fits the bounds and the length, and exactly as
    /// many bytes as the count says.
    ///
    /// # Errors
    /// [`ContentError::Corrupt`] saying what is wrong.
    pub fn parse(bytes: &[u8]) -> Result<Self, ContentError> {
        let corrupt = |why: String| ContentError::Corrupt(format!("manifest: {why}"));
        if bytes.len() < HEADER_BYTES + TRAILER_BYTES {
            return Err(corrupt(format!(
                "{} bytes is shorter than a header",
                bytes.len()
            )));
        }
        if bytes.len() > MAX_MANIFEST_BYTES {
            return Err(corrupt(format!(
                "{} bytes exceeds {MAX_MANIFEST_BYTES}",
                bytes.len()
            )));
        }
        if &bytes[..8] != MAGIC {
            return Err(corrupt("does not start with CUSTMNFT".into()));
        }
        let file_len = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
        let format = u16::from_le_bytes(bytes[16..18].try_into().expect("2 bytes"));
        if format != FORMAT {
            return Err(corrupt(format!(
                "format {format} (this host reads {FORMAT})"
            )));
        }
        let count = u32::from_le_bytes(bytes[18..22].try_into().expect("4 bytes"));
        check(file_len, u64::from(count)).map_err(corrupt)?;
        let expected = HEADER_BYTES + 32 * count as usize + TRAILER_BYTES;
        if bytes.len() != expected {
            return Err(corrupt(format!(
                "{} bytes, but {count} chunks make {expected}",
                bytes.len()
            )));
        }
        let ids = &bytes[HEADER_BYTES..bytes.len() - TRAILER_BYTES];
        let chunks = ids
            .chunks_exact(32)
            .map(|id| ObjectId(id.try_into().expect("32 bytes")))
            .collect();
        let crc = &bytes[bytes.len() - TRAILER_BYTES..];
        Ok(Self {
            file_len,
            chunks,
            file_crc64: u64::from_le_bytes(crc.try_into().expect("8 bytes")),
        })
    }
}

/// Whether `count` chunks can describe a file of `file_len` bytes.
fn check(file_len: u64, count: u64) -> Result<(), String> {
    if count == 0 || count > u64::from(MAX_CHUNKS) {
        return Err(format!("{count} chunks is outside 1..={MAX_CHUNKS}"));
    }
    let expected = file_len.div_ceil(CHUNK_BYTES);
    if count != expected {
        return Err(format!(
            "{count} chunks cannot hold {file_len} bytes in 4 MiB chunks ({expected} would)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
