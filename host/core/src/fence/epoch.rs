//! Coordinator epochs and the lease-table recovery marker.

use super::batch::{observed, put};
use super::codec::{self, EpochRow, LeaseRecovery, NamespaceRecord};
use super::{Coordinator, FenceError, FenceKind, Namespace, keys};
use custodian_kv::{Batch, Precondition};

/// Largest allowed epoch increment. Bounds how far one call can move an
/// epoch, so a typo or a replayed request cannot exhaust the epoch space
/// or skip past epochs other components still expect to see.
pub const MAX_EPOCH_STEP: u64 = 1024;

/// Compare-and-set attempts before an epoch or recovery write gives up.
/// Every lost attempt means another caller committed, so the system made
/// progress; a bound keeps one call from starving indefinitely.
const CAS_ATTEMPTS: u32 = 4;

/// How an epoch transition took effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// This call installed the new epoch.
    Installed,
    /// This call lost its compare-and-set to a concurrent caller that
    /// installed the same epoch: an idempotent retry, equally done.
    InstalledConcurrently,
}

/// What one observation of the current epoch allows.
enum Classified {
    /// The increment is in `1..=MAX_EPOCH_STEP`.
    Advance,
    /// The epoch is already the requested one.
    Same,
    /// Backwards, or too far forward.
    Reject,
}

fn classify(current: u64, new_epoch: u64) -> Classified {
    match new_epoch.checked_sub(current) {
        Some(0) => Classified::Same,
        Some(step) if step <= MAX_EPOCH_STEP => Classified::Advance,
        _ => Classified::Reject,
    }
}

/// The coordinator rows one revocation slice or grant works from, with the
/// exact bytes read so that writes can be guarded on them.
#[derive(Debug, Clone)]
pub(super) struct CoordinatorState {
    pub kind: FenceKind,
    pub epoch_value: Option<Vec<u8>>,
    pub epoch: u64,
    pub config_version: u64,
    pub recovery_value: Option<Vec<u8>>,
    pub recovery: Option<LeaseRecovery>,
}

impl Coordinator {
    /// Advances the grant epoch of `ns` to `new_epoch`, serialized with
    /// every lease grant. Revocation is separate: see
    /// [`Coordinator::revoke_step`] and [`Coordinator::bump_and_revoke`].
    ///
    /// # Errors
    /// [`FenceError::InvalidArgument`] unless the increment is in
    /// `1..=`[`MAX_EPOCH_STEP`]; [`FenceError::Unavailable`] (retry after
    /// 1 s) on repeated contention; a storage or codec failure.
    pub async fn bump_epoch(&self, ns: &Namespace, new_epoch: u64) -> Result<(), FenceError> {
        self.transition_fence(ns, new_epoch, FenceKind::Grant)
            .await
            .map(|_| ())
    }

    /// Advances the `kind` epoch of `ns` to `new_epoch` by compare-and-set
    /// on the epoch row. A lost compare-and-set re-reads and re-classifies:
    /// a concurrent winner that installed exactly `new_epoch` makes this
    /// call a valid retry ([`Transition::InstalledConcurrently`]); any
    /// other epoch is judged afresh.
    ///
    /// # Errors
    /// As [`Coordinator::bump_epoch`]. An increment of 0 on the first read
    /// is refused: only a lost race makes "already there" a success.
    pub async fn transition_fence(
        &self,
        ns: &Namespace,
        new_epoch: u64,
        kind: FenceKind,
    ) -> Result<Transition, FenceError> {
        let key = keys::epoch(ns, kind);
        let mut lost_race = false;
        for _ in 0..CAS_ATTEMPTS {
            let current_value = self.kv.get(&self.coordinator, &key).await?;
            let current = codec::epoch_of(current_value.as_ref())?;
            match classify(current, new_epoch) {
                Classified::Advance => {}
                Classified::Same if lost_race => return Ok(Transition::InstalledConcurrently),
                Classified::Same | Classified::Reject => {
                    return Err(FenceError::InvalidArgument(format!(
                        "the {} epoch of {ns} is {current}; an increment to {new_epoch} \
                         must be between 1 and {MAX_EPOCH_STEP}",
                        kind.segment()
                    )));
                }
            }
            let row = codec::encode(
                "coordinator epoch",
                &EpochRow {
                    generation: new_epoch,
                },
            )?;
            let batch = Batch {
                preconditions: vec![observed(&self.coordinator, &key, current_value.as_ref())],
                writes: vec![put(&self.coordinator, &key, row)],
            };
            if self.commit("epoch transition", &batch).await? {
                return Ok(Transition::Installed);
            }
            lost_race = true;
        }
        Err(FenceError::retry_later("epoch contention"))
    }

    /// A precondition that holds while the `kind` epoch of `ns` is what it
    /// is now, for writers that hold no lease: a batch carrying it cannot
    /// commit once a transition of that epoch has been installed. (A
    /// leased writer's [`super::Fence::guard`] lasts until revocation
    /// reaches its shard; this one breaks at the transition itself.)
    ///
    /// # Errors
    /// A storage failure.
    pub async fn epoch_guard(
        &self,
        ns: &Namespace,
        kind: FenceKind,
    ) -> Result<Precondition, FenceError> {
        let key = keys::epoch(ns, kind);
        let value = self.kv.get(&self.coordinator, &key).await?;
        Ok(observed(&self.coordinator, &key, value.as_ref()))
    }

    /// The current `kind` epoch of `ns` (0 before the first transition).
    ///
    /// # Errors
    /// A storage or codec failure.
    pub async fn current_epoch(&self, ns: &Namespace, kind: FenceKind) -> Result<u64, FenceError> {
        let value = self
            .kv
            .get(&self.coordinator, &keys::epoch(ns, kind))
            .await?;
        codec::epoch_of(value.as_ref())
    }

    /// Declares that the lease table of `ns` was restored or rebuilt, at
    /// the clock's now. Any procedure that restores or rebuilds the
    /// coordinator partition must call this before serving writes for
    /// `ns`: a lease lost with the old table may still be live, so
    /// revocation withholds completion for `epoch_lease_ms +
    /// lease_margin_ms` after the marker, and checkpoints saved before it
    /// are ignored.
    ///
    /// # Errors
    /// [`FenceError::Unavailable`] on repeated contention; a storage or
    /// codec failure.
    pub async fn mark_lease_table_recovered(&self, ns: &Namespace) -> Result<(), FenceError> {
        let key = keys::recovery(ns);
        for _ in 0..CAS_ATTEMPTS {
            let prior_value = self.kv.get(&self.coordinator, &key).await?;
            let prior = prior_value
                .as_deref()
                .map(|bytes| codec::decode_row::<LeaseRecovery>("recovery marker", bytes))
                .transpose()?;
            let marker = LeaseRecovery {
                // Never move the hold-off earlier than one already declared
                // (another host's clock may run ahead of ours).
                recovered_at_ms: prior.map_or(0, |p| p.recovered_at_ms).max(self.now_ms()),
                declarations: prior.map_or(0, |p| p.declarations).saturating_add(1),
            };
            let batch = Batch {
                preconditions: vec![observed(&self.coordinator, &key, prior_value.as_ref())],
                writes: vec![put(
                    &self.coordinator,
                    &key,
                    codec::encode("recovery marker", &marker)?,
                )],
            };
            if self.commit("recovery marker", &batch).await? {
                return Ok(());
            }
        }
        Err(FenceError::retry_later("recovery marker contention"))
    }

    /// Whether a declared lease-table recovery of `ns` still holds
    /// revocation completion off: `now < recovered_at + epoch_lease_ms +
    /// lease_margin_ms`.
    ///
    /// # Errors
    /// A storage or codec failure.
    pub async fn recovery_pending(&self, ns: &Namespace) -> Result<bool, FenceError> {
        let value = self.kv.get(&self.coordinator, &keys::recovery(ns)).await?;
        let recovery = value
            .as_deref()
            .map(|bytes| codec::decode_row::<LeaseRecovery>("recovery marker", bytes))
            .transpose()?;
        Ok(self.hold_off_pending(recovery))
    }

    pub(super) fn hold_off_pending(&self, recovery: Option<LeaseRecovery>) -> bool {
        recovery.is_some_and(|marker| {
            self.now_ms()
                < marker
                    .recovered_at_ms
                    .saturating_add(self.config.epoch_lease_ms)
                    .saturating_add(self.config.lease_margin_ms)
        })
    }

    /// Reads the `kind` epoch, the namespace record and the recovery
    /// marker of `ns` in one call, so they are one consistent observation.
    pub(super) async fn coordinator_state(
        &self,
        ns: &Namespace,
        kind: FenceKind,
    ) -> Result<CoordinatorState, FenceError> {
        let rows = self
            .kv
            .get_many(
                &self.coordinator,
                &[keys::epoch(ns, kind), keys::config(ns), keys::recovery(ns)],
            )
            .await?;
        let [epoch_value, config, recovery_value] = <[_; 3]>::try_from(rows).map_err(|rows| {
            FenceError::Internal(format!("get_many of 3 keys returned {} rows", rows.len()))
        })?;
        Ok(CoordinatorState {
            kind,
            epoch: codec::epoch_of(epoch_value.as_ref())?,
            epoch_value,
            config_version: config_version_of(config.as_ref())?,
            recovery: recovery_value
                .as_deref()
                .map(|bytes| codec::decode_row::<LeaseRecovery>("recovery marker", bytes))
                .transpose()?,
            recovery_value,
        })
    }
}

/// A namespace without a record is at configuration version 1.
pub(super) fn config_version_of(value: Option<&Vec<u8>>) -> Result<u64, FenceError> {
    value.map_or(Ok(1), |bytes| {
        codec::decode_row::<NamespaceRecord>("namespace record", bytes).map(|r| r.config_version)
    })
}
