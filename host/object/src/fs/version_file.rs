//! The version file: one file per version (or delete marker), so a
//! version is published by one rename.
//!
//! ```text
//! magic        8 bytes  "CUSTVER\n"
//! format       u32 LE   1
//! header_len   u32 LE   at most 64 KiB
//! header       JSON     key, etag, size, crc64, block_size,
//!                       last_modified_ms, delete_marker, metadata,
//!                       content_md5 (hex; absent unless the writer
//!                       supplied one, so older files read unchanged)
//! header_crc   u64 LE   CRC-64/NVME of everything above
//! body         `size` bytes
//! block CRCs   u64 LE each: the CRC-64/NVME of every `block_size`
//!              bytes of the body (the last block may be shorter)
//! ```
//!
//! Nothing read from a version file is served unchecked:
//! - the header is checked against its own CRC, its key against the key
//!   asked for, and the file's length against the header;
//! - a whole-body read is checked against the full-object CRC;
//! - a range read is checked block by block against the block CRCs it
//!   touches. Without them a range read would have to read the whole
//!   object to check anything, which makes a streamed read of a large
//!   object quadratic; with them it reads at most one block more at
//!   each end.
//!
//! Any mismatch is [`ObjectError::Corrupt`]: a torn or bit-rotted file is
//! never served as good. (Files are complete before they are published,
//! so only damage after the fact can trip these checks.)
//!
//! The block CRCs cost one `u64` per 64 KiB of body and no extra pass:
//! the full-object CRC a publish is checked against is folded from them
//! (see [`checksums`]).

use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::{Metadata, ObjectError};
use custodian_base::buffer;
use custodian_base::checksum::{Crc64Nvme, PARALLEL_THRESHOLD, combine, crc64_nvme};

use super::io_error;

/// Bytes covered by one block CRC.
pub(super) const BLOCK_SIZE: u64 = 64 * 1024;

const MAGIC: [u8; 8] = *b"CUSTVER\n";
const FORMAT: u32 = 1;
/// Magic, format and header length.
const PREFIX_LEN: usize = 16;
/// Bound on the header a reader will allocate for. Real headers are a
/// few KiB at most (a 1 KiB key and 2 KiB of metadata, JSON-escaped).
const MAX_HEADER_BYTES: u32 = 64 * 1024;
/// Block sizes a reader accepts: enough to keep the block count of any
/// file sane.
const BLOCK_SIZES: std::ops::RangeInclusive<u64> = 4096..=(64 << 20);
/// How much a streamed range read holds at once.
const STREAM_CHUNK: u64 = 16 * BLOCK_SIZE;

/// What a version file says about its version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Header {
    /// The key it belongs to.
    pub key: String,
    /// Its etag; empty for a delete marker.
    pub etag: String,
    /// Body length.
    pub size: u64,
    /// The body's CRC-64/NVME.
    pub crc64: u64,
    /// Bytes per block CRC.
    pub block_size: u64,
    /// When it was published, on the store's clock.
    pub last_modified_ms: u64,
    /// A delete marker has no body.
    pub delete_marker: bool,
    /// User metadata.
    pub metadata: Metadata,
    /// The body's MD5, as its writer supplied it.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "md5_hex")]
    pub content_md5: Option<[u8; 16]>,
}

/// An optional MD5 as 32 hex digits in the JSON header.
mod md5_hex {
    use serde::{Deserialize, Deserializer, Serializer, de::Error as _};

    pub fn serialize<S: Serializer>(md5: &Option<[u8; 16]>, out: S) -> Result<S::Ok, S::Error> {
        match md5 {
            Some(bytes) => out.serialize_str(&hex::encode(bytes)),
            None => out.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(input: D) -> Result<Option<[u8; 16]>, D::Error> {
        let Some(text) = Option::<String>::deserialize(input)? else {
            return Ok(None);
        };
        let mut bytes = [0; 16];
        hex::decode_to_slice(&text, &mut bytes).map_err(D::Error::custom)?;
        Ok(Some(bytes))
    }
}

impl Header {
    /// Everything in the file before the body.
    pub fn encode(&self) -> Vec<u8> {
        encode_json(&serde_json::to_vec(self).expect("a header serializes"))
    }

    /// The longest [`Header::encode`] this header can have once its size,
    /// CRC, MD5 and time are known: what a writer reserves before a body
    /// whose length it does not know yet.
    pub fn encoded_len_at_most(&self) -> usize {
        let widest = Header {
            size: u64::MAX,
            crc64: u64::MAX,
            last_modified_ms: u64::MAX,
            content_md5: Some([u8::MAX; 16]),
            ..self.clone()
        };
        widest.encode().len()
    }

    /// [`Header::encode`], exactly `len` bytes long (at least its own
    /// length): the JSON is followed by spaces, which JSON allows and
    /// the recorded header length covers, so readers need no change.
    pub fn encode_padded(&self, len: usize) -> Vec<u8> {
        let mut json = serde_json::to_vec(self).expect("a header serializes");
        let framing = PREFIX_LEN + 8;
        json.resize(len.saturating_sub(framing).max(json.len()), b' ');
        encode_json(&json)
    }

    fn blocks(&self) -> u64 {
        self.size.div_ceil(self.block_size)
    }
}

/// Frames a header's JSON: magic, format, length, the JSON, its CRC.
fn encode_json(json: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(PREFIX_LEN + json.len() + 8);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT.to_le_bytes());
    // Bounded by the validated key and metadata, far below u32::MAX.
    out.extend_from_slice(&u32::try_from(json.len()).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(json);
    let crc = crc64_nvme(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The checksums of a body: its full-object CRC and its block CRCs, as
/// they are stored.
#[derive(Debug, Clone)]
pub(super) struct Checksums {
    /// CRC-64/NVME of the whole body.
    pub whole: u64,
    /// Body length.
    pub len: u64,
    /// The block CRCs, encoded.
    pub trailer: Vec<u8>,
}

/// Accumulates [`Checksums`] over a body fed in pieces of any size.
#[derive(Clone, Default)]
pub(super) struct BlockCrcs {
    /// The CRC of the whole blocks so far, folded with [`combine`].
    whole: u64,
    block: Crc64Nvme,
    filled: u64,
    len: u64,
    trailer: Vec<u8>,
}

impl BlockCrcs {
    /// Feeds the next bytes.
    pub fn update(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let room = BLOCK_SIZE - self.filled;
            let take = usize::try_from(room).map_or(data.len(), |room| room.min(data.len()));
            let (head, rest) = data.split_at(take);
            if self.filled == 0 && take as u64 == BLOCK_SIZE {
                self.push(crc64_nvme(head), BLOCK_SIZE);
            } else {
                self.block.update(head);
                self.filled += take as u64;
                if self.filled == BLOCK_SIZE {
                    self.push(self.block.finalize(), BLOCK_SIZE);
                    self.block = Crc64Nvme::new();
                    self.filled = 0;
                }
            }
            data = rest;
        }
    }

    fn push(&mut self, crc: u64, len: u64) {
        self.trailer.extend_from_slice(&crc.to_le_bytes());
        self.whole = combine(self.whole, crc, len);
        self.len += len;
    }

    /// The checksums of everything fed.
    pub fn finish(mut self) -> Checksums {
        if self.filled > 0 {
            self.push(self.block.finalize(), self.filled);
        }
        Checksums {
            whole: self.whole,
            len: self.len,
            trailer: self.trailer,
        }
    }
}

/// The checksums of a body held in memory: one pass, the block CRCs
/// folded into the full-object CRC with [`combine`] (tens of ns per
/// block). Bodies of [`PARALLEL_THRESHOLD`] bytes or more are hashed on
/// up to two threads (the machines this runs on have two cores; a thread
/// costs tens of µs to start, repaid only by megabytes of hashing).
pub(super) fn checksums(body: &[u8]) -> Checksums {
    let block = usize::try_from(BLOCK_SIZE).expect("a block fits in memory");
    let blocks = body.len().div_ceil(block);
    let crcs: Vec<u64> = if body.len() >= PARALLEL_THRESHOLD && blocks >= 2 {
        let (first, second) = body.split_at(blocks / 2 * block);
        let hash = |part: &[u8]| part.chunks(block).map(crc64_nvme).collect::<Vec<u64>>();
        std::thread::scope(|scope| {
            let other = std::thread::Builder::new()
                .name("crc64-blocks".into())
                .spawn_scoped(scope, || hash(second));
            let mut crcs = hash(first);
            match other {
                Ok(handle) => crcs.extend(
                    handle
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                ),
                // No thread to be had: hash it here.
                Err(_) => crcs.extend(hash(second)),
            }
            crcs
        })
    } else {
        body.chunks(block).map(crc64_nvme).collect()
    };
    let mut whole = crc64_nvme(b"");
    let mut trailer = Vec::with_capacity(crcs.len() * 8);
    for (chunk, crc) in body.chunks(block).zip(&crcs) {
        whole = combine(whole, *crc, chunk.len() as u64);
        trailer.extend_from_slice(&crc.to_le_bytes());
    }
    Checksums {
        whole,
        len: body.len() as u64,
        trailer,
    }
}

/// An open, header-checked version file.
#[derive(Debug)]
pub(super) struct VersionFile {
    file: File,
    path: PathBuf,
    header: Header,
    body_offset: u64,
}

/// Header bytes read with the prefix, on the guess that the header is no
/// longer: a header is its key, etag, checksums and user metadata as JSON,
/// a few hundred bytes unless the metadata is large.
const HEADER_GUESS: usize = 1024;

/// One read from the start of `file` into `buffer`: the bytes read, which
/// may be fewer than asked (the file is shorter, or the read was cut
/// short). The caller reads exactly whatever more it needs.
fn read_start(file: &File, buffer: &mut [u8]) -> std::io::Result<usize> {
    loop {
        match file.read_at(buffer, 0) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            other => return other,
        }
    }
}

fn corrupt(path: &Path, what: impl std::fmt::Display) -> ObjectError {
    ObjectError::Corrupt(format!("version file {}: {what}", path.display()).into())
}

impl VersionFile {
    /// Opens and checks the version file at `path`, which must belong to
    /// `key`; `None` if there is no such file (it was deleted or replaced
    /// since its directory was read).
    pub fn open(path: &Path, key: &str) -> Result<Option<Self>, ObjectError> {
        let file = match File::open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error("opening", path, e)),
        };
        let short = |e: std::io::Error| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => corrupt(path, "truncated header"),
            _ => io_error("reading", path, e),
        };
        // One read for the prefix and, nearly always, the header and its
        // CRC after it (a second read only for a header past the guess):
        // every read of an object opens its file.
        let mut head = vec![0u8; PREFIX_LEN + HEADER_GUESS + 8];
        let mut got = read_start(&file, &mut head).map_err(short)?;
        if got < PREFIX_LEN {
            file.read_exact_at(&mut head[got..PREFIX_LEN], got as u64)
                .map_err(short)?;
            got = PREFIX_LEN;
        }
        let prefix: [u8; PREFIX_LEN] = head[..PREFIX_LEN].try_into().expect("the prefix's bytes");
        if prefix[..8] != MAGIC {
            return Err(corrupt(path, "not a version file (bad magic)"));
        }
        let format = u32::from_le_bytes(prefix[8..12].try_into().expect("4 bytes"));
        if format != FORMAT {
            return Err(corrupt(path, format!("unknown format {format}")));
        }
        let header_len = u32::from_le_bytes(prefix[12..16].try_into().expect("4 bytes"));
        if header_len > MAX_HEADER_BYTES {
            return Err(corrupt(path, format!("a header of {header_len} bytes")));
        }
        let header_len = header_len as usize;
        let framed = PREFIX_LEN + header_len + 8;
        if got < framed {
            head.resize(framed, 0);
            file.read_exact_at(&mut head[got..], got as u64)
                .map_err(short)?;
        }
        let (json, stored) = head[PREFIX_LEN..framed].split_at(header_len);
        let mut crc = Crc64Nvme::new();
        crc.update(&prefix);
        crc.update(json);
        if crc.finalize().to_le_bytes() != stored {
            return Err(corrupt(path, "the header does not match its CRC"));
        }
        let header: Header = serde_json::from_slice(json).map_err(|e| corrupt(path, e))?;
        if header.key != key {
            return Err(corrupt(path, format!("it belongs to key {:?}", header.key)));
        }
        if !BLOCK_SIZES.contains(&header.block_size) {
            return Err(corrupt(path, format!("block size {}", header.block_size)));
        }
        if header.delete_marker && header.size != 0 {
            return Err(corrupt(path, "a delete marker with a body"));
        }
        let body_offset = (PREFIX_LEN + header_len + 8) as u64;
        let expected = header
            .blocks()
            .checked_mul(8)
            .and_then(|t| t.checked_add(header.size))
            .and_then(|t| t.checked_add(body_offset))
            .ok_or_else(|| corrupt(path, "impossible size"))?;
        let actual = file
            .metadata()
            .map_err(|e| io_error("inspecting", path, e))?
            .len();
        if actual != expected {
            return Err(corrupt(
                path,
                format!("{actual} bytes long, its header says {expected}"),
            ));
        }
        Ok(Some(Self {
            file,
            path: path.to_owned(),
            header,
            body_offset,
        }))
    }

    /// The checked header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    fn read_at(&self, buffer: &mut [u8], offset: u64) -> Result<(), ObjectError> {
        self.file
            .read_exact_at(buffer, offset)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::UnexpectedEof => corrupt(&self.path, "truncated"),
                _ => io_error("reading", &self.path, e),
            })
    }

    fn buffer(&self, len: u64) -> Result<Vec<u8>, ObjectError> {
        let len = usize::try_from(len).map_err(|_| {
            ObjectError::InvalidArgument(format!("{len} bytes do not fit in memory").into())
        })?;
        Ok(buffer::zeroed(len))
    }

    /// The whole body, checked against the full-object CRC.
    pub fn read_all(&self) -> Result<Bytes, ObjectError> {
        let mut body = self.buffer(self.header.size)?;
        self.read_at(&mut body, self.body_offset)?;
        let actual = crc64_nvme(&body);
        if actual != self.header.crc64 {
            return Err(corrupt(
                &self.path,
                format!(
                    "the body's CRC-64/NVME is {actual:016x}, it was published as {:016x}",
                    self.header.crc64
                ),
            ));
        }
        Ok(Bytes::from(body))
    }

    /// Reads blocks `first..first + count` whole and checks each.
    fn read_blocks(&self, first: u64, count: u64) -> Result<Vec<u8>, ObjectError> {
        let block = self.header.block_size;
        let start = first * block;
        let end = ((first + count) * block).min(self.header.size);
        let mut data = self.buffer(end - start)?;
        self.read_at(&mut data, self.body_offset + start)?;
        let mut stored = self.buffer(count * 8)?;
        self.read_at(&mut stored, self.body_offset + self.header.size + first * 8)?;
        let block_len = usize::try_from(block).expect("a block fits in memory");
        for (index, (chunk, stored)) in data
            .chunks(block_len)
            .zip(stored.chunks_exact(8))
            .enumerate()
        {
            let actual = crc64_nvme(chunk);
            if actual.to_le_bytes() != stored {
                return Err(corrupt(
                    &self.path,
                    format!("block {} does not match its CRC", first + index as u64),
                ));
            }
        }
        Ok(data)
    }

    /// `range` clamped to the body.
    fn clamp(&self, range: &Range<u64>) -> Range<u64> {
        let start = range.start.min(self.header.size);
        start..range.end.clamp(start, self.header.size)
    }

    /// Bytes `range` of the body, truncated at its end, each block read
    /// checked against its CRC.
    pub fn read_range(&self, range: Range<u64>) -> Result<Bytes, ObjectError> {
        let range = self.clamp(&range);
        if range.is_empty() {
            return Ok(Bytes::new());
        }
        let block = self.header.block_size;
        let first = range.start / block;
        let last = (range.end - 1) / block;
        let data = self.read_blocks(first, last - first + 1)?;
        let offset = first * block;
        // Both within `data`, whose length came from a usize.
        let (start, end) = (
            (range.start - offset) as usize,
            (range.end - offset) as usize,
        );
        Ok(Bytes::from(data).slice(start..end))
    }

    /// Feeds bytes `range` of the body (truncated at its end) to `sink`
    /// in checked pieces of at most about a MiB, never holding more.
    pub fn stream_range(
        &self,
        range: Range<u64>,
        mut sink: impl FnMut(&[u8]) -> Result<(), ObjectError>,
    ) -> Result<(), ObjectError> {
        let range = self.clamp(&range);
        let block = self.header.block_size;
        let chunk_blocks = (STREAM_CHUNK / block).max(1);
        let mut position = range.start;
        while position < range.end {
            let first = position / block;
            let last = (range.end - 1) / block;
            let count = (last - first + 1).min(chunk_blocks);
            let data = self.read_blocks(first, count)?;
            let offset = first * block;
            let end = range.end.min(offset + data.len() as u64);
            sink(&data[(position - offset) as usize..(end - offset) as usize])?;
            position = end;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(len: usize) -> Vec<u8> {
        (0..len as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect()
    }

    #[test]
    fn block_checksums_do_not_depend_on_how_the_body_is_fed() {
        let body = sample(3 * BLOCK_SIZE as usize + 1234);
        let whole = checksums(&body);
        assert_eq!(whole.whole, crc64_nvme(&body));
        assert_eq!(whole.len, body.len() as u64);
        assert_eq!(whole.trailer.len(), 4 * 8);
        for piece in [1, 7, 4096, BLOCK_SIZE as usize - 1, BLOCK_SIZE as usize + 3] {
            let mut crcs = BlockCrcs::default();
            body.chunks(piece).for_each(|c| crcs.update(c));
            let fed = crcs.finish();
            assert_eq!((fed.whole, fed.len), (whole.whole, whole.len), "{piece}");
            assert_eq!(fed.trailer, whole.trailer, "{piece}");
        }
        let empty = checksums(b"");
        assert_eq!((empty.whole, empty.len, empty.trailer.len()), (0, 0, 0));
    }

    #[test]
    fn a_large_body_hashed_on_two_threads_gets_the_same_checksums() {
        let body = sample(PARALLEL_THRESHOLD + 3 * BLOCK_SIZE as usize + 5);
        let split = checksums(&body);
        assert_eq!(split.whole, crc64_nvme(&body));
        let mut crcs = BlockCrcs::default();
        crcs.update(&body);
        let streamed = crcs.finish();
        assert_eq!((split.whole, split.len), (streamed.whole, streamed.len));
        assert_eq!(split.trailer, streamed.trailer);
    }

    fn write(dir: &Path, body: &[u8]) -> PathBuf {
        write_with(dir, body, Metadata::new())
    }

    fn write_with(dir: &Path, body: &[u8], metadata: Metadata) -> PathBuf {
        let sums = checksums(body);
        let header = Header {
            key: "k".into(),
            etag: "\"e\"".into(),
            size: body.len() as u64,
            crc64: sums.whole,
            block_size: BLOCK_SIZE,
            last_modified_ms: 1,
            delete_marker: false,
            metadata,
            content_md5: None,
        };
        let path = dir.join("v");
        let mut bytes = header.encode();
        bytes.extend_from_slice(body);
        bytes.extend_from_slice(&sums.trailer);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    #[test]
    fn ranges_and_streams_return_exactly_the_bytes_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        let body = sample(5 * BLOCK_SIZE as usize + 77);
        let path = write(dir.path(), &body);
        let file = VersionFile::open(&path, "k").unwrap().unwrap();
        assert_eq!(file.read_all().unwrap(), body);
        let len = body.len() as u64;
        let b = BLOCK_SIZE;
        for range in [
            0..1,
            0..len,
            b - 1..b + 1,
            b..2 * b,
            3..len - 3,
            len - 1..len + 9,
            len..len + 1,
        ] {
            let want = &body[range.start.min(len) as usize..range.end.min(len) as usize];
            assert_eq!(file.read_range(range.clone()).unwrap(), want, "{range:?}");
            let mut streamed = Vec::new();
            file.stream_range(range.clone(), |piece| {
                streamed.extend_from_slice(piece);
                Ok(())
            })
            .unwrap();
            assert_eq!(streamed, want, "{range:?}");
        }
        assert!(matches!(
            VersionFile::open(&path, "other"),
            Err(ObjectError::Corrupt(_))
        ));
        assert!(
            VersionFile::open(&dir.path().join("none"), "k")
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn headers_longer_than_the_first_read_and_files_shorter_than_it_open_alike() {
        let dir = tempfile::tempdir().unwrap();
        let long: Metadata = [("note".to_owned(), "x".repeat(3 * HEADER_GUESS))]
            .into_iter()
            .collect();
        for (body, metadata) in [
            (sample(0), Metadata::new()),
            (sample(10), Metadata::new()),
            (sample(10), long.clone()),
            (sample(2 * BLOCK_SIZE as usize), long),
        ] {
            let path = write_with(dir.path(), &body, metadata.clone());
            let file = VersionFile::open(&path, "k").unwrap().unwrap();
            assert_eq!(file.header().metadata, metadata);
            assert_eq!(file.read_all().unwrap(), body);
            // Cut anywhere, the file is refused as corrupt, never misread.
            let whole = std::fs::read(&path).unwrap();
            for cut in [
                0,
                1,
                PREFIX_LEN - 1,
                PREFIX_LEN,
                PREFIX_LEN + 5,
                whole.len() - 1,
            ] {
                std::fs::write(&path, &whole[..cut]).unwrap();
                assert!(
                    matches!(VersionFile::open(&path, "k"), Err(ObjectError::Corrupt(_))),
                    "cut at {cut} of {}",
                    whole.len()
                );
            }
        }
    }
}
