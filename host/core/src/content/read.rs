//! Reading a repository's file by its path: the entry the path names, and
//! the file's bytes from the `serving` store — a blob as itself, a
//! manifest's chunks in order — a bounded span at a time, so a reader of
//! any file holds at most [`READ_SPAN_BYTES`] of it.

use std::ops::Range;

use bytes::Bytes;
use custodian_kv::Kv;
use custodian_object::{GetOptions, ObjectKey, ObjectStore, ObjectStoreExt};

use super::index::entry_key;
use super::{
    CHUNK_BYTES, ContentError, Entry, Manifest, ObjectId, ObjectKind, RepoName, denial, object_key,
    object_row, partition,
};

/// Most bytes one read of a piece fetches: what a streaming reader holds
/// at once, whatever the file's size (a quarter of a chunk: small enough
/// for many concurrent readers, large enough that a store round trip per
/// span costs little).
pub const READ_SPAN_BYTES: u64 = 1 << 20;

/// A file found by its path, ready to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct File {
    /// The entry its path names (for a manifest, the size is the file's).
    pub entry: Entry,
    /// The whole file's CRC-64/NVME.
    pub crc64: u64,
    /// The objects holding its bytes, in order: the blob itself, or the
    /// manifest's chunks (each [`CHUNK_BYTES`] but the last).
    pieces: Vec<ObjectId>,
}

impl File {
    /// The file's length in bytes.
    pub fn len(&self) -> u64 {
        self.entry.size
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.entry.size == 0
    }

    /// The objects holding its bytes, in order.
    pub fn pieces(&self) -> &[ObjectId] {
        &self.pieces
    }

    /// The reads that return bytes `range` of the file (clamped to its
    /// length), in order: each a piece and a span of it of at most
    /// [`READ_SPAN_BYTES`].
    pub fn spans(&self, range: Range<u64>) -> Vec<(ObjectId, Range<u64>)> {
        let end = range.end.min(self.len());
        let mut spans = Vec::new();
        let mut at = range.start;
        while at < end {
            // Every piece but the last is exactly one chunk long, so the
            // piece holding byte `at` and the offset in it are arithmetic.
            let index = usize::try_from(at / CHUNK_BYTES).unwrap_or(usize::MAX);
            let Some(piece) = self.pieces.get(index) else {
                break;
            };
            let offset = at % CHUNK_BYTES;
            let piece_end = (CHUNK_BYTES - offset).min(end - at);
            let len = piece_end.min(READ_SPAN_BYTES);
            spans.push((*piece, offset..offset + len));
            at += len;
        }
        spans
    }
}

/// The entry at `path` in `repo`, if any.
///
/// # Errors
/// [`ContentError::Corrupt`] for an undecodable row;
/// [`ContentError::Index`] if the KV fails.
pub async fn entry(
    kv: &dyn Kv,
    repo: &RepoName,
    path: &str,
) -> Result<Option<Entry>, ContentError> {
    kv.get(&partition(), &entry_key(repo, path))
        .await?
        .map(|value| Entry::decode_value(path.to_owned(), &value))
        .transpose()
}

/// Finds the file at `path` in `repo`: its entry, its CRC-64/NVME and the
/// objects holding its bytes (a manifest is read from `serving`).
///
/// # Errors
/// [`ContentError::NotFound`] when no file is there;
/// [`ContentError::TakenDown`] when a takedown withholds it;
/// [`ContentError::InvalidArgument`] when the path names a directory;
/// [`ContentError::Corrupt`] when the index or a manifest disagrees with
/// itself; the index's and the store's errors.
pub async fn open_file(
    kv: &dyn Kv,
    serving: &dyn ObjectStore,
    repo: &RepoName,
    path: &str,
) -> Result<File, ContentError> {
    let entry = entry(kv, repo, path)
        .await?
        .ok_or_else(|| ContentError::NotFound(format!("{repo} has no file at {path:?}")))?;
    // The denial check runs beside the file's first read, so it adds no
    // round trip; its answer comes first either way (a withheld file's
    // serving copy may be gone already, and its withholding is the
    // answer).
    let withheld = denial::refuse_withheld(kv, &entry.id);
    match entry.kind {
        ObjectKind::Pack => Err(ContentError::InvalidArgument(format!(
            "{path:?} in {repo} is a directory; list the repository to see its entries"
        ))),
        ObjectKind::Blob => {
            let (withheld, row) = futures::join!(withheld, object_row(kv, &entry.id));
            withheld?;
            let row = row?.ok_or_else(|| {
                ContentError::Corrupt(format!(
                    "the entry {path:?} of {repo} names {} which the index does not know",
                    entry.id
                ))
            })?;
            if row.size != entry.size {
                return Err(ContentError::Corrupt(format!(
                    "the entry {path:?} of {repo} says {} bytes, its blob has {}",
                    entry.size, row.size
                )));
            }
            Ok(File {
                crc64: row.crc64,
                pieces: vec![entry.id],
                entry,
            })
        }
        ObjectKind::Manifest => {
            let key = object_key(&entry.id);
            let (withheld, manifest) = futures::join!(withheld, serving.get_whole(&key, None));
            withheld?;
            let (_, bytes) = manifest?;
            if ObjectId::of(&bytes) != entry.id {
                return Err(ContentError::Corrupt(format!(
                    "the manifest {} does not hash to its id",
                    entry.id
                )));
            }
            let manifest = Manifest::parse(&bytes)?;
            if manifest.file_len() != entry.size {
                return Err(ContentError::Corrupt(format!(
                    "the entry {path:?} of {repo} says {} bytes, its manifest {}",
                    entry.size,
                    manifest.file_len()
                )));
            }
            Ok(File {
                crc64: manifest.file_crc64(),
                pieces: manifest.chunks().to_vec(),
                entry,
            })
        }
    }
}

/// Reads one span of one piece (see [`File::spans`]), as the store's
/// segments.
///
/// # Errors
/// The store's errors; [`ContentError::Corrupt`] when the piece is shorter
/// than the file says.
pub async fn read_span(
    serving: &dyn ObjectStore,
    piece: &ObjectId,
    span: Range<u64>,
) -> Result<Vec<Bytes>, ContentError> {
    let key = ObjectKey::new(object_key(piece))?;
    let want = span.end - span.start;
    let options = GetOptions {
        range: Some(span),
        ..GetOptions::default()
    };
    let got = serving.get_opts(&key, options).await?;
    if got.len() != want {
        return Err(ContentError::Corrupt(format!(
            "the piece {piece} holds {} bytes, shorter than its file says",
            got.meta.size
        )));
    }
    Ok(got.body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(len: u64, pieces: usize) -> File {
        File {
            entry: Entry {
                path: "f".into(),
                id: ObjectId([0; 32]),
                kind: ObjectKind::Manifest,
                size: len,
            },
            crc64: 0,
            pieces: (0..pieces).map(|i| ObjectId([i as u8; 32])).collect(),
        }
    }

    #[test]
    fn spans_cover_a_range_in_order_never_crossing_a_piece_or_the_span_bound() {
        let f = file(2 * CHUNK_BYTES + 10, 3);
        let spans = f.spans(CHUNK_BYTES - 5..2 * CHUNK_BYTES + 3);
        let total: u64 = spans.iter().map(|(_, s)| s.end - s.start).sum();
        assert_eq!(total, CHUNK_BYTES + 8);
        assert_eq!(spans[0], (ObjectId([0; 32]), CHUNK_BYTES - 5..CHUNK_BYTES));
        assert_eq!(spans.last().unwrap(), &(ObjectId([2; 32]), 0..3));
        assert!(
            spans
                .iter()
                .all(|(_, s)| s.end - s.start <= READ_SPAN_BYTES && s.end <= CHUNK_BYTES)
        );
    }

    #[test]
    fn a_range_past_the_end_is_clamped_and_an_empty_file_has_no_spans() {
        let f = file(10, 1);
        assert_eq!(f.spans(5..100), vec![(ObjectId([0; 32]), 5..10)]);
        assert!(f.spans(10..20).is_empty());
        assert!(file(0, 0).spans(0..10).is_empty());
    }
}
