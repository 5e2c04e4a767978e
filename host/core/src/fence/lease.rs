//! Shard leases: granting, renewing and releasing them, and the [`Fence`]
//! a lease holder's writes carry.

use super::batch::{delete, observed, put};
use super::codec::{self, EpochLease, LeasedShard};
use super::epoch::config_version_of;
use super::{Coordinator, FenceError, FenceKind, Namespace, ShardId, keys};
use custodian_kv::{Batch, Partition, Precondition};

/// Attempts before a grant or release gives up under contention. Each lost
/// attempt means an epoch transition, a revocation push or another grant
/// committed on this shard, so the system made progress.
const LEASE_ATTEMPTS: u32 = 4;

/// What a lease holder needs to write under its lease: the guard that
/// stops its writes once the shard is fenced at a newer epoch or the lease
/// has expired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    namespace: Namespace,
    shard: ShardId,
    epoch: u64,
    authority_generation: u64,
    expires_at_ms: u64,
    el_partition: Partition,
    el_key: Vec<u8>,
    el_value: Vec<u8>,
}

impl Fence {
    /// The preconditions every batch written under this lease must carry:
    /// the shard's epoch lease still holds exactly what this grant wrote
    /// (any revocation push, renewal or release changes it), and the lease
    /// has not expired.
    ///
    /// The deadline is `expires_at_ms - 1`: a write must not commit at
    /// `now == expires_at_ms` either. Revocation skips a lease only once
    /// `expires_at_ms + lease_margin_ms <= now` on its own clock, which
    /// leaves the margin for clock skew between hosts and for a write
    /// whose deadline was checked before it travelled to a remote KV.
    pub fn guard(&self) -> Vec<Precondition> {
        vec![
            Precondition::Equals {
                partition: self.el_partition.clone(),
                key: self.el_key.clone(),
                value: self.el_value.clone(),
            },
            Precondition::NotAfter(self.expires_at_ms.saturating_sub(1)),
        ]
    }

    /// The namespace the lease is in.
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    /// The leased shard.
    pub fn shard(&self) -> &ShardId {
        &self.shard
    }

    /// The grant epoch the lease was granted at.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The authority generation the lease was granted at.
    pub fn authority_generation(&self) -> u64 {
        self.authority_generation
    }

    /// The epoch of `kind` the lease was granted at.
    pub fn generation(&self, kind: FenceKind) -> u64 {
        match kind {
            FenceKind::Grant => self.epoch,
            FenceKind::Authority => self.authority_generation,
        }
    }

    /// When the lease ends, ms since the epoch; writes stop committing
    /// from this instant on.
    pub fn expires_at_ms(&self) -> u64 {
        self.expires_at_ms
    }
}

impl Coordinator {
    /// Grants or renews the lease on `shard` of `ns` for `ttl_ms`, at the
    /// current grant epoch and authority generation, and returns the fence
    /// its writes must carry.
    ///
    /// The leased-shard row and the shard's epoch lease are written in one
    /// batch guarded on both epoch rows (so grants serialize with epoch
    /// transitions), the namespace record, and both rows as read.
    ///
    /// Renewing a live lease extends it (never shortens it) but keeps its
    /// acknowledgements: renewal alone never raises a live row's
    /// acknowledgement, so a revocation in progress still visits it. A new
    /// lease, or renewal of an expired one, acknowledges the current epochs
    /// at once: the epoch lease written with it is already at them, and
    /// every older writer's deadline has passed.
    ///
    /// # Errors
    /// [`FenceError::InvalidArgument`] unless `ttl_ms` is in
    /// `1..=epoch_lease_ms` (the recovery hold-off assumes no lease is
    /// longer); [`FenceError::Unavailable`] on repeated contention;
    /// [`FenceError::Corrupt`] for an undecodable coordinator row; a
    /// storage failure.
    pub async fn grant_lease(
        &self,
        ns: &Namespace,
        shard: &ShardId,
        ttl_ms: u64,
    ) -> Result<Fence, FenceError> {
        if !(1..=self.config.epoch_lease_ms).contains(&ttl_ms) {
            return Err(FenceError::InvalidArgument(format!(
                "a lease of {ttl_ms} ms is outside 1..={} ms",
                self.config.epoch_lease_ms
            )));
        }
        let grant_key = keys::epoch(ns, FenceKind::Grant);
        let authority_key = keys::epoch(ns, FenceKind::Authority);
        let config_key = keys::config(ns);
        let row_key = keys::leased_shard(ns, shard);
        let el_key = keys::epoch_lease(ns, shard);
        for _ in 0..LEASE_ATTEMPTS {
            let rows = self
                .kv
                .get_many(
                    &self.coordinator,
                    &[
                        grant_key.clone(),
                        authority_key.clone(),
                        config_key.clone(),
                        row_key.clone(),
                    ],
                )
                .await?;
            let [grant_value, authority_value, config_value, row_value] = <[_; 4]>::try_from(rows)
                .map_err(|rows| {
                    FenceError::Internal(format!("get_many of 4 keys returned {} rows", rows.len()))
                })?;
            let el_value = self.kv.get(&self.shards, &el_key).await?;
            let epoch = codec::epoch_of(grant_value.as_ref())?;
            let authority = codec::epoch_of(authority_value.as_ref())?;
            let config_version = config_version_of(config_value.as_ref())?;
            let old = row_value
                .as_deref()
                .map(|bytes| codec::decode_row::<LeasedShard>("leased-shard row", bytes))
                .transpose()?;

            let now = self.now_ms();
            // ttl_ms <= epoch_lease_ms <= one day, so this cannot saturate
            // for any real clock; saturating keeps a broken one harmless.
            let requested = now.saturating_add(ttl_ms);
            let row = match old {
                Some(live) if live.expires_at_ms > now => LeasedShard {
                    epoch,
                    acked_epoch: live.acked_epoch,
                    authority_generation: authority,
                    acked_authority_generation: live.acked_authority_generation,
                    expires_at_ms: requested.max(live.expires_at_ms),
                },
                _ => LeasedShard {
                    epoch,
                    acked_epoch: epoch,
                    authority_generation: authority,
                    acked_authority_generation: authority,
                    expires_at_ms: requested,
                },
            };
            let lease = EpochLease {
                epoch,
                authority_generation: authority,
                authority_ready: Some(authority),
                expires_at_ms: row.expires_at_ms,
                config_version,
            };
            let lease_value = codec::encode("epoch lease", &lease)?;
            let batch = Batch {
                preconditions: vec![
                    observed(&self.coordinator, &grant_key, grant_value.as_ref()),
                    observed(&self.coordinator, &authority_key, authority_value.as_ref()),
                    observed(&self.coordinator, &config_key, config_value.as_ref()),
                    observed(&self.coordinator, &row_key, row_value.as_ref()),
                    observed(&self.shards, &el_key, el_value.as_ref()),
                ],
                writes: vec![
                    put(
                        &self.coordinator,
                        &row_key,
                        codec::encode("leased-shard row", &row)?,
                    ),
                    put(&self.shards, &el_key, lease_value.clone()),
                ],
            };
            if self.commit("lease grant", &batch).await? {
                return Ok(Fence {
                    namespace: ns.clone(),
                    shard: shard.clone(),
                    epoch,
                    authority_generation: authority,
                    expires_at_ms: row.expires_at_ms,
                    el_partition: self.shards.clone(),
                    el_key,
                    el_value: lease_value,
                });
            }
        }
        Err(FenceError::retry_later("lease contention"))
    }

    /// Ends the lease on `shard` of `ns`: deletes the leased-shard row and
    /// the shard's epoch lease together, so no fence obtained for it can
    /// commit again and revocation has nothing left to visit. Releasing a
    /// shard without a lease does nothing.
    ///
    /// # Errors
    /// [`FenceError::Unavailable`] on repeated contention; a storage failure.
    pub async fn release_lease(&self, ns: &Namespace, shard: &ShardId) -> Result<(), FenceError> {
        let row_key = keys::leased_shard(ns, shard);
        let el_key = keys::epoch_lease(ns, shard);
        for _ in 0..LEASE_ATTEMPTS {
            let row_value = self.kv.get(&self.coordinator, &row_key).await?;
            let el_value = self.kv.get(&self.shards, &el_key).await?;
            if row_value.is_none() && el_value.is_none() {
                return Ok(());
            }
            let batch = Batch {
                preconditions: vec![
                    observed(&self.coordinator, &row_key, row_value.as_ref()),
                    observed(&self.shards, &el_key, el_value.as_ref()),
                ],
                writes: vec![
                    delete(&self.coordinator, &row_key),
                    delete(&self.shards, &el_key),
                ],
            };
            if self.commit("lease release", &batch).await? {
                return Ok(());
            }
        }
        Err(FenceError::retry_later("lease contention"))
    }
}
