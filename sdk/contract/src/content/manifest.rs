//! Manifests: a file larger than one chunk, as the ids of its chunks.
//!
//! | bytes | what |
//! |---|---|
//! | 0..8 | [`MAGIC`], `CUSTMNFT` |
//! | 8..16 | the file's length (u64 LE) |
//! | 16..18 | [`FORMAT`], 1 (u16 LE) |
//! | 18..22 | the chunk count (u32 LE) |
//! | 22.. | the chunk ids, 32 bytes each, in file order |
//! | last 8 | the CRC-64/NVME of the reassembled file (u64 LE) |
//!
//! Format 1 cuts files into [`CHUNK_BYTES`] chunks, the last one possibly
//! shorter, so the chunk count is always `ceil(length / 4 MiB)`
//! ([`check_chunks`]): a count that disagrees with the length cannot
//! describe the file.

use core::fmt;
use core::ops::Range;

use super::{CHUNK_BYTES, ID_BYTES, Id, field};

/// The first 8 bytes of every manifest.
pub const MAGIC: &[u8; 8] = b"CUSTMNFT";
/// The only format written and read.
pub const FORMAT: u16 = 1;
/// Where the file's length sits.
pub const FILE_LEN_AT: Range<usize> = 8..16;
/// Where the format sits.
pub const FORMAT_AT: Range<usize> = 16..18;
/// Where the chunk count sits.
pub const COUNT_AT: Range<usize> = 18..22;
/// Bytes before the first chunk id.
pub const HEADER_BYTES: usize = 22;
/// Bytes after the last chunk id (the file's CRC).
pub const TRAILER_BYTES: usize = 8;
/// The smallest manifest: a header and a trailer. Anything shorter is
/// refused before a field is read.
pub const MIN_BYTES: usize = HEADER_BYTES + TRAILER_BYTES;
/// Largest manifest, in bytes. A takedown plugin reads a manifest whole,
/// inside its memory limit (64 MiB by default), to queue the chunks: a
/// manifest of unbounded size could exhaust it, or make one step's work
/// unbounded.
pub const MAX_MANIFEST_BYTES: usize = 16 << 20;
/// Most chunks in one manifest: as many as fit [`MAX_MANIFEST_BYTES`]
/// (524,287, so a file of up to ~2 TiB).
pub const MAX_CHUNKS: u32 = ((MAX_MANIFEST_BYTES - MIN_BYTES) / ID_BYTES) as u32;
/// Largest file a manifest can describe.
pub const MAX_FILE_BYTES: u64 = MAX_CHUNKS as u64 * CHUNK_BYTES;

const _: () = assert!(HEADER_BYTES == COUNT_AT.end && FORMAT_AT.end == COUNT_AT.start);
const _: () = assert!(FILE_LEN_AT.start == MAGIC.len() && FILE_LEN_AT.end == FORMAT_AT.start);

/// Why bytes are not a manifest, or chunks cannot describe a file.
/// Displayed as the host words it; a plugin may word it its own way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ManifestError {
    /// Fewer than [`MIN_BYTES`].
    Short {
        /// The length given.
        len: usize,
    },
    /// More than [`MAX_MANIFEST_BYTES`].
    Oversized {
        /// The length given.
        len: usize,
    },
    /// The bytes do not start with [`MAGIC`].
    Magic,
    /// A format other than [`FORMAT`].
    Format(u16),
    /// A chunk count outside `1..=MAX_CHUNKS`.
    ChunkCount {
        /// The count.
        count: u64,
    },
    /// A chunk count other than `ceil(file_len / CHUNK_BYTES)`.
    ChunksForLength {
        /// The count.
        count: u64,
        /// The file's length.
        file_len: u64,
    },
    /// A byte length other than the chunk count makes ([`size_for_count`]).
    Size {
        /// The declared chunk count.
        count: u32,
        /// The length given.
        len: usize,
    },
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Short { len } => write!(f, "{len} bytes is shorter than a header"),
            Self::Oversized { len } => write!(f, "{len} bytes exceeds {MAX_MANIFEST_BYTES}"),
            Self::Magic => f.write_str("does not start with CUSTMNFT"),
            Self::Format(format) => write!(f, "format {format} (this host reads {FORMAT})"),
            Self::ChunkCount { count } => {
                write!(f, "{count} chunks is outside 1..={MAX_CHUNKS}")
            }
            Self::ChunksForLength { count, file_len } => write!(
                f,
                "{count} chunks cannot hold {file_len} bytes in 4 MiB chunks ({} would)",
                file_len.div_ceil(CHUNK_BYTES)
            ),
            Self::Size { count, len } => write!(
                f,
                "{len} bytes, but {count} chunks make {}",
                size_for_count(count)
            ),
        }
    }
}

/// What a manifest's header declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The file's length.
    pub file_len: u64,
    /// The number of chunk ids that follow.
    pub count: u32,
}

impl Header {
    /// The header's bytes (format [`FORMAT`]).
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut out = [0; HEADER_BYTES];
        out[..FILE_LEN_AT.start].copy_from_slice(MAGIC);
        out[FILE_LEN_AT].copy_from_slice(&self.file_len.to_le_bytes());
        out[FORMAT_AT].copy_from_slice(&FORMAT.to_le_bytes());
        out[COUNT_AT].copy_from_slice(&self.count.to_le_bytes());
        out
    }

    /// Decodes a header: the magic, then the format.
    ///
    /// # Errors
    /// [`ManifestError::Magic`] or [`ManifestError::Format`].
    pub fn decode(header: &[u8; HEADER_BYTES]) -> Result<Self, ManifestError> {
        if &header[..FILE_LEN_AT.start] != MAGIC {
            return Err(ManifestError::Magic);
        }
        let format = u16::from_le_bytes(field(header, FORMAT_AT.start));
        if format != FORMAT {
            return Err(ManifestError::Format(format));
        }
        Ok(Self {
            file_len: file_length(&field(header, FILE_LEN_AT.start)),
            count: u32::from_le_bytes(field(header, COUNT_AT.start)),
        })
    }
}

/// The file length field (bytes 8..16) as the length it declares.
pub fn file_length(field: &[u8; 8]) -> u64 {
    u64::from_le_bytes(*field)
}

/// The trailer's bytes: the file's CRC-64/NVME.
pub fn encode_trailer(file_crc64: u64) -> [u8; TRAILER_BYTES] {
    file_crc64.to_le_bytes()
}

/// The file's CRC-64/NVME from the trailer's bytes.
pub fn decode_trailer(trailer: &[u8; TRAILER_BYTES]) -> u64 {
    u64::from_le_bytes(*trailer)
}

/// The size of a manifest of `count` chunks (never overflows: a `u32`
/// count of ids fits a `u64` many times over).
pub fn size_for_count(count: u32) -> u64 {
    chunk_offset(count) + TRAILER_BYTES as u64
}

/// The chunk count of a manifest of `size` bytes, if a manifest can have
/// that size. A plugin judges an object's size by this before reading it.
pub fn count_for_size(size: u64) -> Option<u32> {
    let ids = size.checked_sub(MIN_BYTES as u64)?;
    if !ids.is_multiple_of(ID_BYTES as u64) {
        return None;
    }
    u32::try_from(ids / ID_BYTES as u64).ok()
}

/// Offset of chunk `index`'s id.
pub fn chunk_offset(index: u32) -> u64 {
    HEADER_BYTES as u64 + u64::from(index) * ID_BYTES as u64
}

/// Checks a manifest's length against its bounds: at least a header and
/// a trailer, at most [`MAX_MANIFEST_BYTES`].
///
/// # Errors
/// [`ManifestError::Short`] or [`ManifestError::Oversized`].
pub fn check_len(len: usize) -> Result<(), ManifestError> {
    if len < MIN_BYTES {
        return Err(ManifestError::Short { len });
    }
    if len > MAX_MANIFEST_BYTES {
        return Err(ManifestError::Oversized { len });
    }
    Ok(())
}

/// Whether `count` chunks can describe a file of `file_len` bytes: within
/// `1..=MAX_CHUNKS` (so a manifest stays within its size bound) and
/// exactly `ceil(file_len / CHUNK_BYTES)`.
///
/// # Errors
/// [`ManifestError::ChunkCount`] or [`ManifestError::ChunksForLength`].
pub fn check_chunks(file_len: u64, count: u64) -> Result<(), ManifestError> {
    if count == 0 || count > u64::from(MAX_CHUNKS) {
        return Err(ManifestError::ChunkCount { count });
    }
    if count != file_len.div_ceil(CHUNK_BYTES) {
        return Err(ManifestError::ChunksForLength { count, file_len });
    }
    Ok(())
}

/// Whether `len` bytes are exactly what `count` chunks make.
///
/// # Errors
/// [`ManifestError::Size`] otherwise.
pub fn check_size(count: u32, len: usize) -> Result<(), ManifestError> {
    if count_for_size(len as u64) == Some(count) {
        Ok(())
    } else {
        Err(ManifestError::Size { count, len })
    }
}

/// Checks the structure of a whole manifest: at least [`MIN_BYTES`], the
/// magic, the format, and exactly as many bytes as the count says. (It
/// does not judge the count against the bounds or the file's length:
/// [`check_len`] and [`check_chunks`] do.)
///
/// # Errors
/// [`ManifestError::Short`], [`ManifestError::Magic`],
/// [`ManifestError::Format`] or [`ManifestError::Size`].
pub fn check(bytes: &[u8]) -> Result<Header, ManifestError> {
    if bytes.len() < MIN_BYTES {
        return Err(ManifestError::Short { len: bytes.len() });
    }
    let header = Header::decode(&field(bytes, 0))?;
    check_size(header.count, bytes.len())?;
    Ok(header)
}

/// The chunk ids of a manifest whose size [`check_size`] accepted, in
/// file order; none if `bytes` is shorter than a header and a trailer.
pub fn chunk_ids(bytes: &[u8]) -> impl Iterator<Item = Id> + '_ {
    let ids = bytes
        .get(HEADER_BYTES..bytes.len().saturating_sub(TRAILER_BYTES))
        .unwrap_or(&[]);
    ids.chunks_exact(ID_BYTES).map(|id| field(id, 0))
}

/// The file's CRC-64/NVME from a whole manifest's last 8 bytes; `None` if
/// it is shorter than a header and a trailer.
pub fn file_crc64(bytes: &[u8]) -> Option<u64> {
    if bytes.len() < MIN_BYTES {
        return None;
    }
    Some(decode_trailer(&field(bytes, bytes.len() - TRAILER_BYTES)))
}

#[cfg(test)]
mod tests {
    use alloc::string::ToString;
    use alloc::vec::Vec;

    use super::*;

    fn example() -> Vec<u8> {
        let header = Header {
            file_len: 2 * CHUNK_BYTES + 5,
            count: 3,
        };
        let mut bytes = header.encode().to_vec();
        for i in 0..3u8 {
            bytes.extend_from_slice(&[i; 32]);
        }
        bytes.extend_from_slice(&encode_trailer(0x0123_4567_89ab_cdef));
        bytes
    }

    #[test]
    fn a_manifest_round_trips_through_header_ids_and_trailer() {
        let bytes = example();
        let header = check(&bytes).unwrap();
        assert_eq!(
            header,
            Header {
                file_len: 2 * CHUNK_BYTES + 5,
                count: 3
            }
        );
        check_chunks(header.file_len, u64::from(header.count)).unwrap();
        let ids: Vec<Id> = chunk_ids(&bytes).collect();
        assert_eq!(ids, [[0; 32], [1; 32], [2; 32]]);
        assert_eq!(file_crc64(&bytes), Some(0x0123_4567_89ab_cdef));
    }

    #[test]
    fn the_chunk_count_sits_at_bytes_18_to_22_and_ids_from_byte_22() {
        let bytes = example();
        assert_eq!(&bytes[..8], b"CUSTMNFT");
        assert_eq!(u16::from_le_bytes([bytes[16], bytes[17]]), 1);
        assert_eq!(&bytes[18..22], &3u32.to_le_bytes());
        assert_eq!(&bytes[22..54], &[0u8; 32]);
        assert_eq!(chunk_offset(1), 54);
        assert_eq!(bytes.len() as u64, size_for_count(3));
        assert_eq!(bytes.len(), 22 + 3 * 32 + 8);
    }

    #[test]
    fn manifest_sizes_follow_the_chunk_count() {
        assert_eq!(count_for_size(30), Some(0));
        assert_eq!(count_for_size(62), Some(1));
        assert_eq!(count_for_size(63), None);
        assert_eq!(count_for_size(29), None);
        assert_eq!(count_for_size(size_for_count(u32::MAX)), Some(u32::MAX));
        assert_eq!(count_for_size(size_for_count(u32::MAX) + 32), None);
    }

    #[test]
    fn a_truncated_oversized_or_bad_magic_manifest_is_refused() {
        let good = example();
        assert_eq!(check(&good[..29]), Err(ManifestError::Short { len: 29 }));
        assert_eq!(check(&[]), Err(ManifestError::Short { len: 0 }));
        assert_eq!(
            check(&good[..good.len() - 1]),
            Err(ManifestError::Size {
                count: 3,
                len: good.len() - 1
            })
        );
        assert_eq!(check_len(29), Err(ManifestError::Short { len: 29 }));
        assert_eq!(
            check_len(MAX_MANIFEST_BYTES + 1),
            Err(ManifestError::Oversized {
                len: MAX_MANIFEST_BYTES + 1
            })
        );
        check_len(MAX_MANIFEST_BYTES).unwrap();
        let mut magic = good.clone();
        magic[0] = b'X';
        assert_eq!(check(&magic), Err(ManifestError::Magic));
        let mut format = good.clone();
        format[16] = 2;
        assert_eq!(check(&format), Err(ManifestError::Format(2)));
        assert_eq!(chunk_ids(&good[..10]).count(), 0);
        assert_eq!(file_crc64(&good[..29]), None);
    }

    #[test]
    fn a_chunk_count_must_fit_the_bound_and_the_file_length() {
        check_chunks(CHUNK_BYTES, 1).unwrap();
        check_chunks(CHUNK_BYTES + 1, 2).unwrap();
        assert_eq!(
            check_chunks(CHUNK_BYTES + 1, 1),
            Err(ManifestError::ChunksForLength {
                count: 1,
                file_len: CHUNK_BYTES + 1
            })
        );
        assert_eq!(
            check_chunks(0, 0),
            Err(ManifestError::ChunkCount { count: 0 })
        );
        let over = u64::from(MAX_CHUNKS) + 1;
        assert_eq!(
            check_chunks(over * CHUNK_BYTES, over),
            Err(ManifestError::ChunkCount { count: over })
        );
        assert_eq!(
            ManifestError::ChunksForLength {
                count: 1,
                file_len: CHUNK_BYTES + 1
            }
            .to_string(),
            "1 chunks cannot hold 4194305 bytes in 4 MiB chunks (2 would)"
        );
    }

    #[test]
    fn the_largest_manifest_stays_within_16_mib() {
        let size = size_for_count(MAX_CHUNKS);
        assert!(size <= MAX_MANIFEST_BYTES as u64);
        assert!(size + 32 > MAX_MANIFEST_BYTES as u64);
        assert_eq!(MAX_CHUNKS, 524_287);
    }
}
