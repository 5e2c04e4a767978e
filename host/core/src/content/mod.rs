//! The host's content model: content-addressed objects in the `serving`
//! store, and the index (KV partition `content`) that says what they are
//! and which repositories hold them.
//!
//! A takedown policy plugin reads this layout (see `interface
//! takedown-steps` in `sdk/wit/takedown.wit`); it is a contract, so every byte
//! below is fixed, and written once: the constants, key builders and pure
//! codecs are [`custodian_contract::content`], which the plugin links too.
//! This module adds the host's types over them and the I/O.
//!
//! # Objects
//!
//! An object's id ([`ObjectId`]) is the BLAKE3 hash of its bytes (32
//! bytes); its bytes live in the object store named `serving` under
//! `content/` + the id in lowercase hex ([`object_key`]). Kinds
//! ([`ObjectKind`]):
//!
//! - **blob** (1): a file of at most [`CHUNK_BYTES`] (4 MiB), or one
//!   chunk of a larger file (4 MiB, the last one possibly shorter);
//! - **manifest** (2): a larger file, as its chunks' ids ([`manifest`]):
//!   `CUSTMNFT`, the file's length (u64 LE), format 1 (u16 LE), the chunk
//!   count (u32 LE, bytes 18..22), the chunk ids (32 bytes each, from
//!   byte 22), then the CRC-64/NVME of the reassembled file (u64 LE);
//! - **pack** (3): a directory, as the inventory of its entries ([`pack`]):
//!   `CUSTPACK`, format 1 (u16 LE), the member count (u32 LE), then one
//!   33-byte entry per member: id and kind. Members are in the order of
//!   their names (bytewise); a subdirectory is a member of kind pack.
//!
//! # The index (partition `content`)
//!
//! Keys are ordered bytewise; integers are big-endian ([`index`]):
//!
//! | key | value |
//! |---|---|
//! | `o` id | kind (1 byte), size (u64), CRC-64/NVME of the bytes (u64) |
//! | `h` id namespace `0x00` name | empty: the repository holds the object |
//! | `s` pack-id | sealed-at ms (u64): the pack is complete and immutable |
//! | `r` namespace `0x00` name `0x00` path | id, kind (1 byte), size (u64) |
//! | `c` chunk-id manifest-id | empty: the chunk is part of that manifest's file |
//!
//! An `r` entry's size is the object's byte size, except for a manifest,
//! whose entry size is the logical length of the file it describes.
//!
//! # Durability
//!
//! Bytes reach `serving` before any index row names them, and a pack is
//! sealed only once every member's bytes and rows are stored; so an index
//! row never points at missing bytes. A push interrupted midway leaves at
//! most bytes (and `o`/`h` rows of objects) that no entry names yet;
//! pushing again converges, uploading nothing twice ([`push()`]).

pub mod denial;
#[cfg(test)]
mod fuzz_tests;
pub mod index;
mod index_writer;
pub mod manifest;
pub mod pack;
pub mod push;
pub mod read;
mod serving;
#[cfg(test)]
mod tests;

use std::fmt;

use custodian_base::error::ErrorKind;
use custodian_contract::content as contract;
use custodian_kv::{KvError, Partition};
use custodian_object::ObjectError;

pub use denial::Withheld;
pub use index::{Entry, EntryPage, HolderPage, ObjectRow, entries, holders, object_row, sealed_at};
pub use manifest::Manifest;
pub use pack::{Pack, PackMember};
pub use push::{PushProgress, push};
pub use read::{File, open_file};

/// The KV partition holding the content index, the object store holding
/// content as users pushed it, the key prefix of content objects in it,
/// and the largest blob (larger files are cut into chunks of this size
/// and described by a manifest): facts of the contract a takedown plugin
/// reads, written once in [`custodian_contract::content`].
pub use custodian_contract::content::{CHUNK_BYTES, OBJECT_KEY_PREFIX, PARTITION, SERVING_STORE};

/// Longest namespace or repository name, in bytes (a contract fact the
/// takedown plugin shares). Bounds the holder and entry keys (with
/// [`index::MAX_PATH_BYTES`], every key stays within the KV's key bound).
pub use custodian_contract::name::MAX_REPOSITORY_PART_BYTES as MAX_REPO_PART_BYTES;

/// The content index partition.
pub fn partition() -> Partition {
    Partition::new(PARTITION).expect("`content` is a valid partition name")
}

/// Why a content operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ContentError {
    /// An argument (a repository name, a path, a file) is outside what the
    /// content model accepts; nothing about it was stored.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// No such entry (a path nothing was pushed to).
    #[error("not found: {0}")]
    NotFound(String),
    /// A takedown withholds the object: it is not served, nor stored
    /// again ([`denial`]).
    #[error("{0}")]
    TakenDown(Withheld),
    /// Stored bytes or index rows cannot be decoded, or disagree with
    /// their content address.
    #[error("corrupt content: {0}")]
    Corrupt(String),
    /// Concurrent writers kept changing the same index rows; nothing of
    /// the last attempt was written, and retrying later is safe.
    #[error("conflicting concurrent writes: {0}")]
    Conflict(String),
    /// A local file or directory cannot be read.
    #[error("cannot read {path}")]
    Read {
        /// The file or directory.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The content index failed.
    #[error("the content index failed")]
    Index(#[from] KvError),
    /// The serving store failed.
    #[error("the serving store failed")]
    Store(#[from] ObjectError),
}

impl ContentError {
    /// What kind of failure this is (see [`ErrorKind`]). The index's rows
    /// are the content model's own, so the KV refusing an argument is the
    /// host's fault; the store's kinds are its own. A local file that
    /// cannot be read is unavailable, as an I/O failure of a backend is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::InvalidArgument(_) => ErrorKind::InvalidArgument,
            Self::NotFound(_) => ErrorKind::NotFound,
            Self::TakenDown(_) => ErrorKind::TakenDown,
            Self::Corrupt(_) => ErrorKind::Corrupt,
            Self::Conflict(_) => ErrorKind::Conflict,
            Self::Read { .. } => ErrorKind::Unavailable,
            Self::Index(kv) => kv.kind().host_built(),
            Self::Store(store) => store.kind(),
        }
    }
}

impl From<contract::UnknownKind> for ContentError {
    /// A stored kind byte that names no kind is corruption.
    fn from(unknown: contract::UnknownKind) -> Self {
        ContentError::Corrupt(unknown.to_string())
    }
}

/// A content address: the BLAKE3 hash of an object's bytes.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectId(pub [u8; 32]);

impl ObjectId {
    /// The id of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Self(*blake3::hash(bytes).as_bytes())
    }

    /// The id from its 32 bytes.
    ///
    /// # Errors
    /// [`ContentError::Corrupt`] for any other length (ids come from
    /// stored rows and objects).
    pub fn from_slice(bytes: &[u8]) -> Result<Self, ContentError> {
        <[u8; 32]>::try_from(bytes).map(Self).map_err(|_| {
            ContentError::Corrupt(format!("an object id of {} bytes, not 32", bytes.len()))
        })
    }

    /// The id from 64 hex digits (either case).
    ///
    /// # Errors
    /// [`ContentError::InvalidArgument`] for anything else.
    pub fn from_hex(hex: &str) -> Result<Self, ContentError> {
        let bad = || ContentError::InvalidArgument(format!("{hex:?} is not 64 hex digits"));
        if hex.len() != 64 {
            return Err(bad());
        }
        let mut id = [0u8; 32];
        hex::decode_to_slice(hex, &mut id).map_err(|_| bad())?;
        Ok(Self(id))
    }

    /// The id in lowercase hex.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Its bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ObjectId({})", self.to_hex())
    }
}

/// Where object `id` lives in the serving store: `content/` + hex.
pub fn object_key(id: &ObjectId) -> String {
    format!("{OBJECT_KEY_PREFIX}{}", id.to_hex())
}

/// The object a key of the serving store holds, when it is a content
/// key: [`OBJECT_KEY_PREFIX`] + 64 lowercase hex digits, exactly what
/// [`object_key`] makes (any other spelling is not a content object).
pub fn object_of_key(key: &str) -> Option<ObjectId> {
    let hex = key.strip_prefix(OBJECT_KEY_PREFIX)?;
    if hex.bytes().any(|b| b.is_ascii_uppercase()) {
        return None;
    }
    ObjectId::from_hex(hex).ok()
}

/// What an object's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ObjectKind {
    /// File bytes: a whole small file or one chunk of a large one.
    Blob,
    /// A large file's chunk list ([`Manifest`]).
    Manifest,
    /// A directory's inventory ([`Pack`]).
    Pack,
}

impl ObjectKind {
    /// The kind's byte in rows and packs.
    pub fn byte(self) -> u8 {
        match self {
            ObjectKind::Blob => contract::BLOB,
            ObjectKind::Manifest => contract::MANIFEST,
            ObjectKind::Pack => contract::PACK,
        }
    }

    /// The kind a stored byte names.
    ///
    /// # Errors
    /// [`ContentError::Corrupt`] for a byte that names no kind.
    pub fn from_byte(byte: u8) -> Result<Self, ContentError> {
        match byte {
            contract::BLOB => Ok(ObjectKind::Blob),
            contract::MANIFEST => Ok(ObjectKind::Manifest),
            contract::PACK => Ok(ObjectKind::Pack),
            other => Err(contract::UnknownKind(other).into()),
        }
    }

    /// The kind's name: `blob`, `manifest` or `pack`.
    pub fn name(self) -> &'static str {
        match self {
            ObjectKind::Blob => "blob",
            ObjectKind::Manifest => "manifest",
            ObjectKind::Pack => "pack",
        }
    }
}

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A validated repository name, `namespace/name`: each part 1..=64 bytes
/// of `[a-z0-9._-]`, not starting with `.` (no hidden or relative-looking
/// names, and never a NUL, which separates the parts in index keys).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RepoName {
    namespace: String,
    name: String,
}

impl RepoName {
    /// Validates `namespace` and `name`.
    ///
    /// # Errors
    /// [`ContentError::InvalidArgument`] naming the part that is wrong.
    pub fn new(namespace: &str, name: &str) -> Result<Self, ContentError> {
        for (what, part) in [("namespace", namespace), ("name", name)] {
            if !custodian_contract::name::is_repository_part(part) {
                return Err(ContentError::InvalidArgument(format!(
                    "repository {what} {part:?}: expected 1..={MAX_REPO_PART_BYTES} bytes of \
                     [a-z0-9._-], not starting with '.'"
                )));
            }
        }
        Ok(Self {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        })
    }

    /// Parses `namespace/name`.
    ///
    /// # Errors
    /// [`ContentError::InvalidArgument`] if there is not exactly one `/`
    /// or a part is invalid.
    pub fn parse(text: &str) -> Result<Self, ContentError> {
        match text.split_once('/') {
            Some((namespace, name)) if !name.contains('/') => Self::new(namespace, name),
            _ => Err(ContentError::InvalidArgument(format!(
                "repository {text:?}: expected NAMESPACE/NAME"
            ))),
        }
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The name within the namespace.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Display for RepoName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl std::str::FromStr for RepoName {
    type Err = ContentError;

    fn from_str(text: &str) -> Result<Self, ContentError> {
        Self::parse(text)
    }
}
