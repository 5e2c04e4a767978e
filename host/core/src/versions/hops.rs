//! Following an archived version to where it lives now: the registry's
//! rows are read by the host, the choice of the next hop is a policy's
//! (the archive plugin, through [`HopPolicy`]), and the host bounds the
//! walk.

use async_trait::async_trait;

use crate::decisions::PolicyError;

/// Most hops followed from a pinned version to where its bytes are now:
/// archives of archives are legitimate, an unbounded chain is a cycle or
/// an attack on the reader (the seed's limit).
pub const MAX_ARCHIVE_HOPS: usize = 32;

/// One exact version of one key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct VersionRef {
    /// The key.
    pub key: String,
    /// The version id.
    pub version_id: String,
}

/// A published registry row: `source` was moved to `destination`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RegistryRow {
    /// The version that was moved.
    pub source: VersionRef,
    /// Its etag, when the registry recorded it.
    pub source_etag: Option<String>,
    /// Where it was moved to.
    pub destination: VersionRef,
    /// The destination version's etag.
    pub destination_etag: String,
    /// Its size in bytes.
    pub size: u64,
}

/// The next hop a policy chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hop {
    /// Follow this row to its destination.
    Follow(RegistryRow),
    /// Nothing moves the wanted version: it is missing, for this reason.
    Missing(String),
}

/// Decides the next hop of a version missing from its key.
#[async_trait]
pub trait HopPolicy: Send + Sync {
    /// Chooses among `rows` (the registry rows recorded for `wanted`'s
    /// key) the one that moves `wanted`, expected to be `size` bytes and,
    /// if known, to carry `etag`.
    ///
    /// # Errors
    /// The policy's answer: rows that contradict each other or the pin
    /// (size, source etag) are [`PolicyError::Corrupt`]; a policy that
    /// could not be asked is [`PolicyError::Unavailable`].
    async fn next_hop(
        &self,
        wanted: &VersionRef,
        size: Option<u64>,
        etag: Option<&str>,
        rows: &[RegistryRow],
    ) -> Result<Hop, PolicyError>;
}
