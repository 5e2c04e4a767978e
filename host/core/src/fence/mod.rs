//! Epoch fencing: a namespace's coordinator epoch, the shard leases that
//! workers hold under it, and the revocation that makes every write guarded
//! by an older epoch's lease impossible to commit.
//!
//! # Protocol
//!
//! A namespace has one coordinator epoch per [`FenceKind`]. A worker that
//! wants to write a shard asks for a lease ([`Coordinator::grant_lease`]);
//! the grant records the lease in the namespace's lease table and writes the
//! shard's *epoch lease* (`el`) row, and hands back a [`Fence`] whose
//! [`Fence::guard`] the worker adds to every batch it commits. The guard
//! holds only while the `el` row is byte-for-byte what the grant wrote and
//! the lease has not expired.
//!
//! Raising an epoch ([`Coordinator::bump_epoch`],
//! [`Coordinator::transition_fence`]) is a compare-and-set on the epoch row,
//! serialized with grants because every grant is guarded on both epoch rows.
//! Revocation ([`Coordinator::revoke_step`]) then walks the lease table in
//! bounded slices: for each live lease not yet acknowledged at the new
//! epoch it *pushes* the shard's `el` row to the new epoch (which breaks
//! every older guard on that shard) and only then *acknowledges* the lease
//! row, as two separate guarded transactions. Once every lease is
//! acknowledged or expired, the slice reports [`RevokeProgress::Complete`]:
//! from then on no writer guard obtained at an older epoch can commit.
//!
//! # Key layout
//!
//! Namespace and shard names are `[a-z0-9._-]` ([`Namespace`], [`ShardId`]),
//! so `/` never occurs inside a name and separates key segments without
//! ambiguity: `lease/a/` is never a prefix of `lease/a.b/…`. Every value is
//! one format byte (`1`) followed by JSON that rejects unknown fields, and is
//! size-checked before it is parsed.
//!
//! Partition `custodian.fence` (the coordinator; all namespaces):
//!
//! | key                            | value                                   |
//! |--------------------------------|-----------------------------------------|
//! | `epoch/<ns>/grant`             | grant epoch (absent = 0)                |
//! | `epoch/<ns>/authority`         | authority generation (absent = 0)       |
//! | `config/<ns>`                  | namespace record: `config_version` (absent = 1) |
//! | `recovery/<ns>`                | lease-table recovery marker             |
//! | `checkpoint/<ns>/grant`        | grant revocation checkpoint             |
//! | `checkpoint/<ns>/authority`    | authority revocation checkpoint         |
//! | `lease/<ns>/<shard>`           | leased-shard row (one scan class per namespace) |
//!
//! Partition `custodian.fence.shards` (what writers guard on):
//!
//! | key                 | value                                              |
//! |---------------------|----------------------------------------------------|
//! | `el/<ns>/<shard>`   | epoch lease: the epoch and authority generation a shard's writes are fenced at |
//!
//! The leased-shard rows of one namespace are exactly the keys in
//! `[lease/<ns>/, lease/<ns>0)` (`0` is the byte after `/`), which is the
//! range revocation scans.

mod batch;
mod codec;
mod epoch;
mod keys;
mod lease;
mod revoke;

#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use custodian_base::clock::Clock;
use custodian_base::error::ErrorKind;
use custodian_kv::{Kv, KvError, Partition};

pub use epoch::{MAX_EPOCH_STEP, Transition};
pub use lease::Fence;
pub use revoke::{RevokeBudget, RevokeProgress};

/// The coordinator partition: epochs, recovery markers, checkpoints and
/// the lease table of every namespace.
pub const COORDINATOR_PARTITION: &str = "custodian.fence";
/// The partition of shard epoch leases, the rows writers guard on.
pub const SHARDS_PARTITION: &str = "custodian.fence.shards";

/// Longest namespace or shard name. Two names and a few separator bytes
/// must fit a key with ample room under [`custodian_kv::MAX_KEY_BYTES`].
pub const MAX_NAME_BYTES: usize = 64;

/// Longest lease a grant may ask for, in milliseconds (one day). The
/// configured [`FenceConfig::epoch_lease_ms`] may not exceed it, so a
/// lease's expiry never overflows and a recovery hold-off stays bounded.
pub const MAX_EPOCH_LEASE_MS: u64 = 24 * 60 * 60 * 1000;

/// Largest clock-skew margin, in milliseconds (one hour); a larger one
/// would make recovery hold-offs an outage rather than a safety margin.
pub const MAX_LEASE_MARGIN_MS: u64 = 60 * 60 * 1000;

/// Which coordinator epoch a fence follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FenceKind {
    /// The grant epoch: raised when the namespace's writers must change
    /// hands (a lease table rebuild, a coordinator handover).
    Grant,
    /// The authority generation: raised when the policy that authorizes
    /// writes changes (a plugin swap). Leased rows track it as
    /// `authority_generation` / `acked_authority_generation`.
    Authority,
}

impl FenceKind {
    /// The key segment naming this kind.
    const fn segment(self) -> &'static str {
        match self {
            Self::Grant => "grant",
            Self::Authority => "authority",
        }
    }
}

/// Timing assumptions of the lease protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FenceConfig {
    /// The longest lease a grant may hand out, in ms. After a lease-table
    /// recovery, revocation cannot complete until this long has passed,
    /// because a lease lost with the old table may still be live for that
    /// long. Default 30 s: short enough that a recovery holds revocation
    /// off briefly, long enough that healthy workers renew rarely.
    pub epoch_lease_ms: u64,
    /// Extra hold-off after a recovery, in ms, covering clock skew between
    /// the hosts that granted leases and the one revoking. Default 5 s.
    pub lease_margin_ms: u64,
}

impl Default for FenceConfig {
    fn default() -> Self {
        Self {
            epoch_lease_ms: 30_000,
            lease_margin_ms: 5_000,
        }
    }
}

/// Why a fencing operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FenceError {
    /// An argument is outside its documented bounds (a bad name, an epoch
    /// increment outside `1..=1024`, a lease length out of range).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Other callers kept changing the rows this call guards on, or
    /// revocation is still pending; retrying later may succeed.
    #[error("unavailable: {reason}; retry after {retry_after_secs} s")]
    Unavailable {
        /// What could not be done.
        reason: String,
        /// Seconds a caller should wait before retrying.
        retry_after_secs: u64,
    },
    /// A stored fencing row cannot be decoded or breaks its bounds.
    #[error("fence data corrupt: {0}")]
    Corrupt(String),
    /// The backend broke its contract (for example it reported a passed
    /// deadline for a batch that had none).
    #[error("kv contract violated: {0}")]
    Internal(String),
    /// The backend failed.
    #[error(transparent)]
    Kv(#[from] KvError),
}

impl FenceError {
    /// What kind of failure this is (see [`ErrorKind`]). The backend's
    /// refusal of an argument is the fence's fault, not its caller's:
    /// the fence builds every batch it sends.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::InvalidArgument(_) => ErrorKind::InvalidArgument,
            Self::Unavailable { .. } => ErrorKind::Unavailable,
            Self::Corrupt(_) => ErrorKind::Corrupt,
            Self::Internal(_) => ErrorKind::Internal,
            Self::Kv(kv) => kv.kind().host_built(),
        }
    }

    /// Contention or pending work, retryable after one second: one second
    /// is long against a store round trip and short against a caller's
    /// patience.
    fn retry_later(reason: &str) -> Self {
        Self::Unavailable {
            reason: reason.to_owned(),
            retry_after_secs: 1,
        }
    }
}

/// A validated namespace name: 1..=[`MAX_NAME_BYTES`] bytes of `[a-z0-9._-]`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Namespace(String);

impl Namespace {
    /// Validates `name`.
    ///
    /// # Errors
    /// [`FenceError::InvalidArgument`] for an empty, too long or
    /// otherwise malformed name.
    pub fn new(name: impl Into<String>) -> Result<Self, FenceError> {
        validate_name("namespace", name.into()).map(Self)
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A validated shard name within a namespace: 1..=[`MAX_NAME_BYTES`] bytes
/// of `[a-z0-9._-]`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ShardId(String);

impl ShardId {
    /// Validates `name`.
    ///
    /// # Errors
    /// [`FenceError::InvalidArgument`] for an empty, too long or
    /// otherwise malformed name.
    pub fn new(name: impl Into<String>) -> Result<Self, FenceError> {
        validate_name("shard", name.into()).map(Self)
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for ShardId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whether `name` may be a key segment: the alphabet excludes `/`, which
/// is what keeps the key layout unambiguous.
pub fn is_name(name: &str) -> bool {
    custodian_contract::name::is_name(name, MAX_NAME_BYTES)
}

fn validate_name(what: &str, name: String) -> Result<String, FenceError> {
    if is_name(&name) {
        Ok(name)
    } else {
        Err(FenceError::InvalidArgument(format!(
            "{name:?} is not a {what} name (1..={MAX_NAME_BYTES} bytes of [a-z0-9._-])"
        )))
    }
}

/// The host's epoch fencing over one KV store and one clock.
///
/// Cheap to clone; every method is safe to call concurrently from many
/// hosts, because every write is a guarded batch.
#[derive(Clone)]
pub struct Coordinator {
    kv: Arc<dyn Kv>,
    clock: Arc<dyn Clock>,
    config: FenceConfig,
    /// [`COORDINATOR_PARTITION`], validated once.
    coordinator: Partition,
    /// [`SHARDS_PARTITION`], validated once.
    shards: Partition,
}

impl std::fmt::Debug for Coordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coordinator")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Coordinator {
    /// Fencing over `kv`, reading time from `clock`. The clock should be
    /// the one `kv` evaluates `NotAfter` against (or within
    /// [`FenceConfig::lease_margin_ms`] of it).
    ///
    /// # Errors
    /// [`FenceError::InvalidArgument`] if `config.epoch_lease_ms` is outside
    /// `1..=`[`MAX_EPOCH_LEASE_MS`] or `config.lease_margin_ms` exceeds
    /// [`MAX_LEASE_MARGIN_MS`].
    pub fn new(
        kv: Arc<dyn Kv>,
        clock: Arc<dyn Clock>,
        config: FenceConfig,
    ) -> Result<Self, FenceError> {
        if !(1..=MAX_EPOCH_LEASE_MS).contains(&config.epoch_lease_ms) {
            return Err(FenceError::InvalidArgument(format!(
                "epoch_lease_ms {} is outside 1..={MAX_EPOCH_LEASE_MS}",
                config.epoch_lease_ms
            )));
        }
        if config.lease_margin_ms > MAX_LEASE_MARGIN_MS {
            return Err(FenceError::InvalidArgument(format!(
                "lease_margin_ms {} exceeds {MAX_LEASE_MARGIN_MS}",
                config.lease_margin_ms
            )));
        }
        Ok(Self {
            kv,
            clock,
            config,
            coordinator: Partition::new(COORDINATOR_PARTITION)?,
            shards: Partition::new(SHARDS_PARTITION)?,
        })
    }

    /// The timing configuration.
    pub fn config(&self) -> FenceConfig {
        self.config
    }

    fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }
}
