//! Pushing local files and directories into a repository ([`push()`]),
//! or one file's bytes already in memory ([`push_bytes`], for the HTTP
//! API): both cut files into blobs, chunks and manifests the same way.
//!
//! What a push makes of each path given:
//! - a file of at most 4 MiB becomes one blob; a larger one becomes 4 MiB
//!   chunks (blobs) and a manifest, read one chunk at a time (memory stays
//!   at a few chunks whatever the file's size);
//! - a directory becomes a pack of its entries in name order (files as
//!   their blob or manifest, subdirectories as their packs), sealed once
//!   every member is stored;
//! - every object gets its `o` row and a holder row for the repository;
//!   bytes the serving store already has are not uploaded again;
//! - entries: a top-level file is entered under its name, a top-level
//!   directory `d` as `d/` (its pack), and everything under it by its
//!   path: `d/x`, `d/sub/` (the subdirectory's pack), `d/sub/y`.
//!
//! Order of durability: bytes first, then the index rows naming them, in
//! bounded batches; a pack's seal after its members' rows; an entry after
//! its object's rows. A push adds or replaces entries; it never removes
//! an entry an earlier push made, nor a holder row.
//!
//! The whole tree is scanned and checked (names, bounds, file types)
//! before anything is stored, so bad input costs no upload. Symbolic links
//! are followed for the paths given, never inside a directory (a link
//! loop or a link out of the tree would push what was not asked for):
//! anything in a directory that is not a regular file or a directory is
//! refused.

use std::collections::HashSet;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use super::index::{self, Entry, ObjectRow, validate_path};
use super::index_writer::IndexWriter;
use super::manifest::{MAX_FILE_BYTES, Manifest};
use super::pack::{MAX_MEMBERS, Pack, PackMember};
use super::serving::{self, Stored};
use super::{CHUNK_BYTES, ContentError, ObjectId, ObjectKind, RepoName};
use custodian_base::checksum::{combine, crc64_nvme};
use custodian_kv::Kv;
use custodian_object::ObjectStore;

/// Deepest directory nesting under a path given. Each level is a pack
/// inside a pack, which a takedown expands one level at a time, and the
/// scan recurses once per level: a deeper tree would make both unbounded
/// in practice (the path bound alone allows ~380 levels).
pub const MAX_DEPTH: usize = 128;

/// Most entries (files and directories) in one push. The scanned tree and
/// the list of entries returned are held in memory (a few hundred bytes
/// per entry): this keeps one push to ~100 MiB of bookkeeping. Push a
/// larger tree in parts.
pub const MAX_PUSH_ENTRIES: usize = 250_000;

/// How far a push has got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PushProgress<'a> {
    /// File bytes read so far.
    pub bytes_done: u64,
    /// File bytes in the whole push (as scanned).
    pub bytes_total: u64,
    /// Objects uploaded so far.
    pub uploaded: u64,
    /// Objects found already stored (not uploaded again).
    pub present: u64,
    /// The entry path being pushed.
    pub path: &'a str,
}

/// Pushes `paths` into `repo`: stores their objects in `serving`, indexes
/// them in `kv` (sealing packs at `now_ms`), and enters them in the
/// repository. `progress` is called once the tree is scanned, after
/// every chunk of a large file and after every entry. Returns the
/// entries made, ascending by path.
///
/// Pushing again converges: nothing is uploaded twice, rows that exist
/// are kept (a pack keeps its first seal time), entries are rewritten.
///
/// # Errors
/// [`ContentError::InvalidArgument`] for input the content model refuses
/// (no paths, two paths with the same name, a name that is not UTF-8 or
/// has control characters, a path, depth, file, directory or tree above
/// its bound, a link or special file inside a directory), before anything
/// is stored; [`ContentError::Read`] for a file that cannot be read;
/// [`ContentError::Corrupt`] when the store or index holds something else
/// under a content address; [`ContentError::TakenDown`] when a takedown
/// withholds one of the objects (the file, a chunk of it, a directory's
/// pack), before that object is stored; [`ContentError::Conflict`],
/// [`ContentError::Index`] or [`ContentError::Store`] when a mechanism
/// fails. Whatever was stored before a failure is complete and named by
/// no dangling row; pushing again finishes the job.
pub async fn push(
    kv: &dyn Kv,
    serving: &dyn ObjectStore,
    repo: &RepoName,
    paths: &[PathBuf],
    now_ms: u64,
    mut progress: impl FnMut(&PushProgress<'_>) + Send,
) -> Result<Vec<Entry>, ContentError> {
    let owned = paths.to_vec();
    let tree = match tokio::task::spawn_blocking(move || Tree::scan(&owned)).await {
        Ok(tree) => tree?,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => {
            return Err(ContentError::Read {
                path: paths.first().cloned().unwrap_or_default(),
                source: std::io::Error::other(e),
            });
        }
    };
    let mut pusher = Pusher {
        kv,
        serving,
        repo,
        writer: IndexWriter::new(kv),
        seen: HashSet::new(),
        progress: &mut progress,
        bytes_done: 0,
        bytes_total: tree.bytes,
        uploaded: 0,
        present: 0,
    };
    pusher.report("");
    let mut made: Vec<(ObjectId, ObjectKind)> = Vec::with_capacity(tree.nodes.len());
    let mut entries = Vec::with_capacity(tree.nodes.len());
    for node in &tree.nodes {
        let (id, kind, size) = match &node.shape {
            Shape::File => {
                let file = File::open(&node.source).map_err(|e| ContentError::Read {
                    path: node.source.clone(),
                    source: e,
                })?;
                let source = Source::File {
                    file: Some(file),
                    path: &node.source,
                };
                pusher.file(&node.path, source).await?
            }
            Shape::Dir(children) => {
                let members = children
                    .iter()
                    .map(|&child| PackMember {
                        id: made[child].0,
                        kind: made[child].1,
                    })
                    .collect();
                pusher.pack(members, now_ms).await?
            }
        };
        made.push((id, kind));
        pusher.report(&node.path);
        let entry = Entry {
            path: node.path.clone(),
            id,
            kind,
            size,
        };
        pusher
            .writer
            .replace_unless_withheld(
                index::entry_key(repo, &entry.path),
                entry.encode_value(),
                Some(entry.id),
            )
            .await?;
        entries.push(entry);
    }
    pusher.writer.flush().await?;
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(entries)
}

/// Pushes one file, given as its `bytes`, into `repo` at the entry `path`
/// (which may contain `/`, but names a file: it cannot end with one). The
/// file is cut exactly as [`push()`] cuts a file on disk: a blob up to
/// [`CHUNK_BYTES`], else chunks and a manifest; so the same bytes get the
/// same id whichever way they arrive. Returns the entry made (a
/// manifest's size is the file's length).
///
/// Only the entry at `path` is written: no pack is made for the
/// directories its segments name.
///
/// # Errors
/// [`ContentError::InvalidArgument`] for a path that is not a file's or a
/// file larger than a manifest describes, before anything is stored;
/// otherwise as for [`push()`]. A failed push leaves no row naming
/// missing bytes, and pushing again converges.
pub async fn push_bytes(
    kv: &dyn Kv,
    serving: &dyn ObjectStore,
    repo: &RepoName,
    path: &str,
    bytes: Bytes,
) -> Result<Entry, ContentError> {
    if path.ends_with('/') {
        return Err(ContentError::InvalidArgument(format!(
            "path {path:?}: a file's path cannot end with '/' (that names a directory)"
        )));
    }
    validate_path(path)?;
    let len = bytes.len() as u64;
    if len > MAX_FILE_BYTES {
        return Err(ContentError::InvalidArgument(format!(
            "{path}: {len} bytes exceeds the largest file a manifest describes \
             ({MAX_FILE_BYTES})"
        )));
    }
    let mut quiet = |_: &PushProgress<'_>| {};
    let mut pusher = Pusher {
        kv,
        serving,
        repo,
        writer: IndexWriter::new(kv),
        seen: HashSet::new(),
        progress: &mut quiet,
        bytes_done: 0,
        bytes_total: len,
        uploaded: 0,
        present: 0,
    };
    let (id, kind, size) = pusher.file(path, Source::Memory(bytes)).await?;
    let entry = Entry {
        path: path.to_owned(),
        id,
        kind,
        size,
    };
    pusher
        .writer
        .replace_unless_withheld(
            index::entry_key(repo, path),
            entry.encode_value(),
            Some(entry.id),
        )
        .await?;
    pusher.writer.flush().await?;
    Ok(entry)
}

/// One file or directory to push.
struct Node {
    /// Where it is on disk.
    source: PathBuf,
    /// Its entry path (a directory's ends with `/`).
    path: String,
    shape: Shape,
}

enum Shape {
    File,
    /// The indices of the entries, in name order.
    Dir(Vec<usize>),
}

/// The scanned tree: every node after its children (so a pack's members
/// are stored before it).
struct Tree {
    nodes: Vec<Node>,
    bytes: u64,
}

impl Tree {
    fn scan(paths: &[PathBuf]) -> Result<Self, ContentError> {
        if paths.is_empty() {
            return Err(ContentError::InvalidArgument("no paths to push".into()));
        }
        let mut tree = Tree {
            nodes: Vec::new(),
            bytes: 0,
        };
        let mut names = HashSet::new();
        for path in paths {
            let read = |source| ContentError::Read {
                path: path.clone(),
                source,
            };
            let source = std::fs::canonicalize(path).map_err(read)?;
            // The name as given (a link keeps its own name); resolved only
            // when there is none, so `.` or `dir/..` can be pushed too.
            let name = path
                .file_name()
                .or_else(|| source.file_name())
                .ok_or_else(|| {
                    ContentError::InvalidArgument(format!(
                        "{} has no name to enter it under",
                        path.display()
                    ))
                })?
                .to_str()
                .ok_or_else(|| {
                    ContentError::InvalidArgument(format!(
                        "the name of {} is not UTF-8",
                        path.display()
                    ))
                })?
                .to_owned();
            if !names.insert(name.clone()) {
                return Err(ContentError::InvalidArgument(format!(
                    "two paths would both be entered as {name:?}"
                )));
            }
            let meta = std::fs::metadata(&source).map_err(read)?;
            tree.add(source, name, &meta, 0)?;
        }
        Ok(tree)
    }

    /// Adds the file or directory at `source` (and everything under it),
    /// entered at `path`; returns its index.
    fn add(
        &mut self,
        source: PathBuf,
        path: String,
        meta: &std::fs::Metadata,
        depth: usize,
    ) -> Result<usize, ContentError> {
        if self.nodes.len() >= MAX_PUSH_ENTRIES {
            return Err(ContentError::InvalidArgument(format!(
                "more than {MAX_PUSH_ENTRIES} entries in one push; push the tree in parts"
            )));
        }
        let shape = if meta.is_file() {
            validate_path(&path)?;
            if meta.len() > MAX_FILE_BYTES {
                return Err(ContentError::InvalidArgument(format!(
                    "{}: {} bytes exceeds the largest file a manifest describes \
                     ({MAX_FILE_BYTES})",
                    source.display(),
                    meta.len()
                )));
            }
            self.bytes += meta.len();
            Shape::File
        } else if meta.is_dir() {
            if depth > MAX_DEPTH {
                return Err(ContentError::InvalidArgument(format!(
                    "{}: directories nest deeper than {MAX_DEPTH}",
                    source.display()
                )));
            }
            let dir_path = format!("{path}/");
            validate_path(&dir_path)?;
            let children = self.add_children(&source, &path, depth)?;
            return Ok(self.push(source, dir_path, Shape::Dir(children)));
        } else {
            return Err(ContentError::InvalidArgument(format!(
                "{} is neither a regular file nor a directory (links inside a directory are \
                 not followed)",
                source.display()
            )));
        };
        Ok(self.push(source, path, shape))
    }

    fn add_children(
        &mut self,
        dir: &Path,
        path: &str,
        depth: usize,
    ) -> Result<Vec<usize>, ContentError> {
        let read = |source| ContentError::Read {
            path: dir.to_owned(),
            source,
        };
        let mut listed = Vec::new();
        for item in std::fs::read_dir(dir).map_err(read)? {
            let item = item.map_err(read)?;
            if listed.len() >= MAX_MEMBERS as usize {
                return Err(ContentError::InvalidArgument(format!(
                    "{} has more than {MAX_MEMBERS} entries",
                    dir.display()
                )));
            }
            let source = item.path();
            let name = item.file_name().into_string().map_err(|name| {
                ContentError::InvalidArgument(format!(
                    "{}: the name {name:?} is not UTF-8",
                    dir.display()
                ))
            })?;
            // Not followed: a link is refused by `add`.
            let meta = item.metadata().map_err(|source_error| ContentError::Read {
                path: source.clone(),
                source: source_error,
            })?;
            listed.push((name, source, meta));
        }
        listed.sort_by(|a, b| a.0.cmp(&b.0));
        listed
            .into_iter()
            .map(|(name, source, meta)| {
                self.add(source, format!("{path}/{name}"), &meta, depth + 1)
            })
            .collect()
    }

    fn push(&mut self, source: PathBuf, path: String, shape: Shape) -> usize {
        self.nodes.push(Node {
            source,
            path,
            shape,
        });
        self.nodes.len() - 1
    }
}

/// Bytes read from a file, with their id and CRC.
struct Chunk {
    bytes: Bytes,
    id: ObjectId,
    crc64: u64,
}

impl Chunk {
    fn of(bytes: impl Into<Bytes>) -> Self {
        let bytes = bytes.into();
        Self {
            id: ObjectId::of(&bytes),
            crc64: crc64_nvme(&bytes),
            bytes,
        }
    }

    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }

    fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// Reads (and hashes) up to one chunk of `file` off the async threads.
async fn read_chunk(file: File, path: &Path) -> Result<(File, Chunk), ContentError> {
    let read = tokio::task::spawn_blocking(move || {
        let mut file = file;
        let mut buf = Vec::with_capacity(CHUNK_BYTES as usize);
        (&mut file)
            .take(CHUNK_BYTES)
            .read_to_end(&mut buf)
            .map(|_| (file, Chunk::of(buf)))
    })
    .await;
    let error = match read {
        Ok(Ok(done)) => return Ok(done),
        Ok(Err(error)) => error,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => std::io::Error::other(e),
    };
    Err(ContentError::Read {
        path: path.to_owned(),
        source: error,
    })
}

/// Where a file's bytes come from, one chunk at a time.
enum Source<'s> {
    /// A local file, read as it is pushed (`None` only while a read is in
    /// flight).
    File { file: Option<File>, path: &'s Path },
    /// Bytes already in memory; what is left of them.
    Memory(Bytes),
}

impl Source<'_> {
    /// The next chunk (at most [`CHUNK_BYTES`]), hashed off the async
    /// threads; empty at the end.
    async fn next(&mut self) -> Result<Chunk, ContentError> {
        match self {
            Source::File { file, path } => {
                let open = file
                    .take()
                    .expect("a file source keeps its file between reads");
                let (open, chunk) = read_chunk(open, path).await?;
                *file = Some(open);
                Ok(chunk)
            }
            Source::Memory(rest) => {
                let take = rest.len().min(CHUNK_BYTES as usize);
                let bytes = rest.split_to(take);
                match tokio::task::spawn_blocking(move || Chunk::of(bytes)).await {
                    Ok(chunk) => Ok(chunk),
                    Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                    // Cancelled: only when the runtime is shutting down.
                    Err(e) => Err(ContentError::Conflict(format!(
                        "hashing was cancelled: {e}"
                    ))),
                }
            }
        }
    }

    /// What the source is called in messages.
    fn describe(&self, entry_path: &str) -> String {
        match self {
            Source::File { path, .. } => path.display().to_string(),
            Source::Memory(_) => entry_path.to_owned(),
        }
    }
}

/// The state of one push.
struct Pusher<'a, P> {
    kv: &'a dyn Kv,
    serving: &'a dyn ObjectStore,
    repo: &'a RepoName,
    writer: IndexWriter<'a>,
    /// Objects stored and indexed by this push already.
    seen: HashSet<ObjectId>,
    progress: &'a mut P,
    bytes_done: u64,
    bytes_total: u64,
    uploaded: u64,
    present: u64,
}

impl<P: FnMut(&PushProgress<'_>) + Send> Pusher<'_, P> {
    fn report(&mut self, path: &str) {
        (self.progress)(&PushProgress {
            bytes_done: self.bytes_done,
            bytes_total: self.bytes_total,
            uploaded: self.uploaded,
            present: self.present,
            path,
        });
    }

    /// Stores one object's bytes, then buffers its object and holder rows.
    async fn object(&mut self, chunk: Chunk, kind: ObjectKind) -> Result<(), ContentError> {
        self.object_listing(chunk, kind, &[]).await
    }

    /// [`Pusher::object`] for a manifest listing `chunks`: their `c` rows
    /// go after its bytes (no row names missing bytes) and before its own
    /// rows (a takedown reading a chunk's `c` rows never misses a
    /// manifest the index knows).
    async fn object_listing(
        &mut self,
        chunk: Chunk,
        kind: ObjectKind,
        chunks: &[ObjectId],
    ) -> Result<(), ContentError> {
        if !self.seen.insert(chunk.id) {
            self.present += 1;
            return Ok(());
        }
        // No re-upload of what a takedown withholds, whole or as a piece
        // of another file: checked before its bytes are stored, and again
        // by the commit of its row (a takedown filed in between).
        super::denial::refuse_withheld(self.kv, &chunk.id).await?;
        let row = ObjectRow {
            kind,
            size: chunk.len(),
            crc64: chunk.crc64,
        };
        match serving::store(self.serving, &chunk.id, chunk.bytes, chunk.crc64).await? {
            Stored::Uploaded => self.uploaded += 1,
            Stored::Present => self.present += 1,
        }
        for listed in chunks {
            self.writer
                .create(index::chunk_of_key(listed, &chunk.id), Vec::new())
                .await?;
        }
        let (key, value) = (index::object_row_key(&chunk.id), row.encode());
        self.writer
            .create_unless_withheld(key, value, Some(chunk.id))
            .await?;
        // The holder row too is guarded on the object not being taken
        // down, in whichever batch it lands: once a takedown's denial has
        // committed, no repository can become a holder of what it denies,
        // so its discovery, run after its denial settles, finds every
        // holder there will ever be.
        self.writer
            .create_unless_withheld(
                index::holder_key(&chunk.id, self.repo),
                Vec::new(),
                Some(chunk.id),
            )
            .await
    }

    /// Pushes one file (entered at `path`) from `source`: a blob, or
    /// chunks and a manifest. Returns its id, kind and length.
    async fn file(
        &mut self,
        path: &str,
        mut source: Source<'_>,
    ) -> Result<(ObjectId, ObjectKind, u64), ContentError> {
        let first = source.next().await?;
        self.bytes_done += first.len();
        let mut next = if first.len() < CHUNK_BYTES {
            None
        } else {
            Some(source.next().await?).filter(|next| !next.is_empty())
        };
        let Some(mut chunk) = next.take() else {
            // One chunk at most: the file is a blob.
            let (id, len) = (first.id, first.len());
            self.object(first, ObjectKind::Blob).await?;
            return Ok((id, ObjectKind::Blob, len));
        };
        let mut chunks = vec![first.id];
        let (mut len, mut crc) = (first.len(), first.crc64);
        self.object(first, ObjectKind::Blob).await?;
        self.report(path);
        loop {
            if chunks.len() >= super::manifest::MAX_CHUNKS as usize {
                return Err(ContentError::InvalidArgument(format!(
                    "{} grew beyond the largest file a manifest describes ({MAX_FILE_BYTES})",
                    source.describe(path)
                )));
            }
            chunks.push(chunk.id);
            crc = combine(crc, chunk.crc64, chunk.len());
            len += chunk.len();
            self.bytes_done += chunk.len();
            let last = chunk.len() < CHUNK_BYTES;
            self.object(chunk, ObjectKind::Blob).await?;
            self.report(path);
            if last {
                break;
            }
            let read = source.next().await?;
            if read.is_empty() {
                break;
            }
            chunk = read;
        }
        let manifest = Chunk::of(Manifest::new(len, chunks.clone(), crc)?.encode());
        let id = manifest.id;
        self.object_listing(manifest, ObjectKind::Manifest, &chunks)
            .await?;
        Ok((id, ObjectKind::Manifest, len))
    }

    /// Stores a directory's pack, then seals it (its members are stored
    /// and their rows buffered ahead of it). Returns its id, kind and
    /// size.
    async fn pack(
        &mut self,
        members: Vec<PackMember>,
        now_ms: u64,
    ) -> Result<(ObjectId, ObjectKind, u64), ContentError> {
        let pack = Chunk::of(Pack::new(members)?.encode());
        let (id, size) = (pack.id, pack.len());
        self.object(pack, ObjectKind::Pack).await?;
        self.writer
            .create(
                index::seal_key(&id),
                custodian_contract::content::index::encode_seal(now_ms).to_vec(),
            )
            .await?;
        Ok((id, ObjectKind::Pack, size))
    }
}
