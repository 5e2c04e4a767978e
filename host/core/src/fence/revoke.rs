//! Revocation: pushing every live lease's epoch lease to the coordinator
//! epoch, then acknowledging it, in bounded and resumable slices.
//!
//! Pushes and acknowledgements are separate guarded transactions, always
//! in that order: a row is acknowledged at epoch `n` only once its shard's
//! epoch lease durably holds `n` (which breaks every older writer's guard)
//! or its lease has expired (which breaks every older writer's deadline).

use super::batch::{observed, put};
use super::codec::{self, EpochLease, LeasedShard, RevokeCheckpoint};
use super::epoch::CoordinatorState;
use super::{Coordinator, FenceError, FenceKind, Namespace, keys};
use custodian_kv::{Batch, Precondition, Write};

/// Rows per scan page.
const PAGE_SIZE: u32 = 4;
/// A frozen clock and acknowledged or expired rows must not permit an
/// unbounded walk: a slice reads at most 32 rows in eight pages.
const MAX_SCAN_PAGES: u32 = 8;
/// Shards one slice pushes and acknowledges; besides the scan, a slice
/// costs at most four bounded push sequences (five store calls each).
const MAX_VISITS: u32 = 4;
/// Bounds contention on one shard even with a frozen injected clock; a
/// lost race leaves the shard for the next slice.
const MAX_PUSH_ATTEMPTS: u32 = 1;
/// Slices [`Coordinator::bump_and_revoke`] runs before giving up. With a
/// frozen clock the elapsed-time cap never fires; this still terminates.
const MAX_DRIVER_STEPS: u32 = 10_000;
/// Elapsed time, on the injected clock, after which
/// [`Coordinator::bump_and_revoke`] gives up and asks for a retry.
const MAX_DRIVER_ELAPSED_MS: u64 = 10_000;

/// The time budget of one revocation slice. Each slice also visits at most
/// four shards and reads at most eight pages, whatever the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RevokeBudget {
    /// Milliseconds of elapsed clock time allowed; checked between store
    /// calls, so one call may overrun it.
    pub max_elapsed_ms: u64,
}

impl RevokeBudget {
    /// A budget of `max_elapsed_ms`; 0 means 1 ms, since a zero budget
    /// could never make progress.
    #[must_use]
    pub const fn new(max_elapsed_ms: u64) -> Self {
        Self {
            max_elapsed_ms: if max_elapsed_ms == 0 {
                1
            } else {
                max_elapsed_ms
            },
        }
    }
}

impl Default for RevokeBudget {
    /// One second.
    fn default() -> Self {
        Self::new(1000)
    }
}

/// What one revocation slice achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RevokeProgress {
    /// Every lease is acknowledged at the epoch or expired, and no
    /// recovery hold-off is pending: no write guarded by an older epoch's
    /// fence can commit any more.
    Complete,
    /// More slices are needed.
    Pending {
        /// Outstanding shards counted so far: at least one, and only a
        /// lower bound when the slice stopped early; a recovery hold-off
        /// alone reports one.
        remaining: u64,
    },
}

impl RevokeProgress {
    fn pending(remaining: u64) -> Self {
        Self::Pending {
            remaining: remaining.max(1),
        }
    }
}

fn row_generation(row: &LeasedShard, kind: FenceKind) -> u64 {
    match kind {
        FenceKind::Grant => row.epoch,
        FenceKind::Authority => row.authority_generation,
    }
}

fn row_acked(row: &LeasedShard, kind: FenceKind) -> u64 {
    match kind {
        FenceKind::Grant => row.acked_epoch,
        FenceKind::Authority => row.acked_authority_generation,
    }
}

fn lease_generation(lease: &EpochLease, kind: FenceKind) -> u64 {
    match kind {
        FenceKind::Grant => lease.epoch,
        FenceKind::Authority => lease.authority_generation,
    }
}

fn decode_leased_shard(bytes: &[u8]) -> Result<LeasedShard, FenceError> {
    codec::decode_row("leased-shard row", bytes)
}

impl Coordinator {
    /// Runs one bounded slice of grant-epoch revocation for `ns`.
    ///
    /// Outside a recovery hold-off, a row is acknowledged at epoch `n` only
    /// if its shard's epoch lease durably holds `n`, or its lease expired
    /// (every older write is past its deadline). Renewal alone never raises
    /// a live row's acknowledgement.
    ///
    /// # Errors
    /// A storage or codec failure. Contention leaves progress pending.
    pub async fn revoke_step(
        &self,
        ns: &Namespace,
        budget: &RevokeBudget,
    ) -> Result<RevokeProgress, FenceError> {
        self.revoke_fence_step(ns, budget, FenceKind::Grant).await
    }

    /// Runs one bounded slice of `kind` revocation for `ns`: visits at most
    /// four outstanding shards, reads at most eight pages of four rows,
    /// and stops early once `budget` has elapsed.
    ///
    /// Reports [`RevokeProgress::Complete`] only if no row is outstanding,
    /// the epoch did not change during the slice, no recovery hold-off is
    /// pending, and clearing the checkpoint committed.
    ///
    /// # Errors
    /// As [`Coordinator::revoke_step`].
    pub async fn revoke_fence_step(
        &self,
        ns: &Namespace,
        budget: &RevokeBudget,
        kind: FenceKind,
    ) -> Result<RevokeProgress, FenceError> {
        let start = self.now_ms();
        let state = self.coordinator_state(ns, kind).await?;
        let (first, end) = keys::leased_shard_range(ns);
        let (checkpoint_value, mut cursor) = self.read_checkpoint(ns, &state).await?;
        // The cursor after the longest prefix known to be complete: the
        // only position a saved checkpoint may name.
        let mut checkpoint = cursor.clone();
        let (mut visited, mut remaining, mut prefix_complete) = (0, 0_u64, true);
        let mut pages = 0;
        loop {
            if pages == MAX_SCAN_PAGES || self.budget_passed(start, budget) {
                self.save_checkpoint(ns, &state, checkpoint_value.as_ref(), checkpoint)
                    .await?;
                return Ok(RevokeProgress::pending(remaining));
            }
            let page = self
                .kv
                .scan(
                    &self.coordinator,
                    &first,
                    Some(&end),
                    cursor.as_deref(),
                    PAGE_SIZE,
                )
                .await?;
            pages += 1;
            // A backend that ignores the limit would let one slice read
            // without bound.
            if page.entries.len() > PAGE_SIZE as usize {
                return Err(FenceError::Internal(format!(
                    "a scan limited to {PAGE_SIZE} rows returned {}",
                    page.entries.len()
                )));
            }
            for (key, value) in page.entries {
                if self.budget_passed(start, budget) {
                    self.save_checkpoint(ns, &state, checkpoint_value.as_ref(), checkpoint)
                        .await?;
                    return Ok(RevokeProgress::pending(remaining));
                }
                let row = decode_leased_shard(&value)?;
                // Done: an expired lease's writers are all past their
                // deadline, and an acknowledged one's epoch lease is pushed.
                if self.lease_is_over(&row) || row_acked(&row, kind) == state.epoch {
                    continue;
                }
                // An acknowledgement beyond our epoch means a newer
                // transition is in flight: outstanding for this slice.
                if row_acked(&row, kind) > state.epoch || visited == MAX_VISITS {
                    remaining += 1;
                    prefix_complete = false;
                    continue;
                }
                visited += 1;
                if !self
                    .push_and_ack(ns, &key, value, &state, start, budget)
                    .await?
                {
                    remaining += 1;
                    prefix_complete = false;
                }
            }
            if prefix_complete {
                checkpoint.clone_from(&page.next);
            }
            cursor = page.next;
            if cursor.is_none() {
                break;
            }
        }
        // Detect a newer epoch or a recovery declared during the slice.
        let latest = self.coordinator_state(ns, kind).await?;
        if remaining == 0 && latest.epoch == state.epoch && !self.hold_off_pending(latest.recovery)
        {
            // Clearing is guarded on the epoch and recovery rows as read at
            // the start, so completion cannot straddle a transition.
            return Ok(
                if self
                    .save_checkpoint(ns, &state, checkpoint_value.as_ref(), None)
                    .await?
                {
                    RevokeProgress::Complete
                } else {
                    RevokeProgress::pending(1)
                },
            );
        }
        let still_valid = latest.epoch == state.epoch && latest.recovery == state.recovery;
        self.save_checkpoint(
            ns,
            &state,
            checkpoint_value.as_ref(),
            if still_valid { checkpoint } else { None },
        )
        .await?;
        Ok(RevokeProgress::pending(remaining))
    }

    /// Pushes one leased shard's epoch lease to the slice's epoch, then
    /// acknowledges the row. `true` if the row is done (acknowledged,
    /// expired or gone), `false` if it is left for a later slice.
    async fn push_and_ack(
        &self,
        ns: &Namespace,
        key: &[u8],
        mut value: Vec<u8>,
        state: &CoordinatorState,
        start: u64,
        budget: &RevokeBudget,
    ) -> Result<bool, FenceError> {
        let kind = state.kind;
        let shard = keys::parse_leased_shard(ns, key)?;
        let el_key = keys::epoch_lease(ns, &shard);
        for _ in 0..MAX_PUSH_ATTEMPTS {
            if self.budget_passed(start, budget) {
                return Ok(false);
            }
            let mut row = decode_leased_shard(&value)?;
            if self.lease_is_over(&row) || row_acked(&row, kind) == state.epoch {
                return Ok(true);
            }
            // Granted or acknowledged at a newer epoch: this slice is stale.
            if row_generation(&row, kind) > state.epoch || row_acked(&row, kind) > state.epoch {
                return Ok(false);
            }
            let old_value = self.kv.get(&self.shards, &el_key).await?;
            let prior = old_value
                .as_deref()
                .map(|bytes| codec::decode_row::<EpochLease>("epoch lease", bytes))
                .transpose()?;
            if let Some(prior) = prior {
                // A stale slice must never undo a newer push.
                if lease_generation(&prior, kind) > state.epoch {
                    return Ok(false);
                }
                // Nor shorten a concurrent renewal: the row we hold is older
                // than the epoch lease. Re-read it and retry.
                if prior.expires_at_ms > row.expires_at_ms {
                    let Some(latest) = self.kv.get(&self.coordinator, key).await? else {
                        return Ok(true);
                    };
                    value = latest;
                    continue;
                }
            }
            if self.budget_passed(start, budget) {
                return Ok(false);
            }
            // Push only this kind's generation; the other one keeps what the
            // epoch lease (or, lacking one, the row) holds.
            let lease = EpochLease {
                epoch: match kind {
                    FenceKind::Grant => state.epoch,
                    FenceKind::Authority => prior.map_or(row.epoch, |el| el.epoch),
                },
                authority_generation: match kind {
                    FenceKind::Authority => state.epoch,
                    FenceKind::Grant => {
                        prior.map_or(row.authority_generation, |el| el.authority_generation)
                    }
                },
                authority_ready: prior.and_then(|el| el.authority_ready),
                expires_at_ms: row.expires_at_ms,
                config_version: state.config_version,
            };
            let push = Batch {
                preconditions: vec![observed(&self.shards, &el_key, old_value.as_ref())],
                writes: vec![put(
                    &self.shards,
                    &el_key,
                    codec::encode("epoch lease", &lease)?,
                )],
            };
            if !self.commit("epoch push", &push).await? {
                continue;
            }
            if self.budget_passed(start, budget) {
                return Ok(false);
            }
            match kind {
                FenceKind::Grant => row.acked_epoch = state.epoch,
                FenceKind::Authority => row.acked_authority_generation = state.epoch,
            }
            let epoch_key = keys::epoch(ns, kind);
            let ack = Batch {
                preconditions: vec![
                    Precondition::Equals {
                        partition: self.coordinator.clone(),
                        key: key.to_vec(),
                        value: value.clone(),
                    },
                    observed(&self.coordinator, &epoch_key, state.epoch_value.as_ref()),
                ],
                writes: vec![put(
                    &self.coordinator,
                    key,
                    codec::encode("leased-shard row", &row)?,
                )],
            };
            if self.commit("epoch acknowledgement", &ack).await? {
                return Ok(true);
            }
            let Some(latest) = self.kv.get(&self.coordinator, key).await? else {
                return Ok(true);
            };
            value = latest;
        }
        Ok(false)
    }

    /// Whether no write under this lease can still commit, so revocation
    /// may skip it: its expiry has passed by the lease margin too. A
    /// writer checks its deadline on its own clock, which may run behind
    /// this one, and on a remote KV (etcd) the check happens before the
    /// request travels, so a write checked just before expiry can land a
    /// little after it; the margin covers both.
    fn lease_is_over(&self, row: &LeasedShard) -> bool {
        row.expires_at_ms
            .saturating_add(self.config.lease_margin_ms)
            <= self.now_ms()
    }

    fn budget_passed(&self, start: u64, budget: &RevokeBudget) -> bool {
        self.now_ms().saturating_sub(start) >= budget.max_elapsed_ms.max(1)
    }

    /// The stored checkpoint's exact bytes (for guarding its replacement)
    /// and its cursor, if it is valid for this epoch and recovery marker.
    async fn read_checkpoint(
        &self,
        ns: &Namespace,
        state: &CoordinatorState,
    ) -> Result<(Option<Vec<u8>>, Option<Vec<u8>>), FenceError> {
        let raw = self
            .kv
            .get(&self.coordinator, &keys::checkpoint(ns, state.kind))
            .await?;
        let Some(bytes) = raw.as_deref() else {
            return Ok((None, None));
        };
        let checkpoint = codec::decode_checkpoint(bytes)?;
        // A cursor outside the namespace's lease rows was not written by a
        // scan of them; handing it to the store would fail the scan anyway.
        let (first, end) = keys::leased_shard_range(ns);
        if checkpoint.cursor < first || checkpoint.cursor >= end {
            return Err(FenceError::Corrupt(format!(
                "the {} revocation checkpoint of {ns} points outside its lease rows",
                state.kind.segment()
            )));
        }
        let valid = checkpoint.generation == state.epoch && checkpoint.recovery == state.recovery;
        Ok((raw, valid.then_some(checkpoint.cursor)))
    }

    /// Replaces the checkpoint (`None` clears it), guarded on its previous
    /// bytes, the epoch row and the recovery row as the slice read them.
    /// `true` if it committed.
    async fn save_checkpoint(
        &self,
        ns: &Namespace,
        state: &CoordinatorState,
        prior: Option<&Vec<u8>>,
        cursor: Option<Vec<u8>>,
    ) -> Result<bool, FenceError> {
        let key = keys::checkpoint(ns, state.kind);
        let write = match cursor {
            Some(cursor) => put(
                &self.coordinator,
                &key,
                codec::encode(
                    "revocation checkpoint",
                    &RevokeCheckpoint {
                        generation: state.epoch,
                        recovery: state.recovery,
                        cursor,
                    },
                )?,
            ),
            None => Write::Delete {
                partition: self.coordinator.clone(),
                key: key.clone(),
            },
        };
        let batch = Batch {
            preconditions: vec![
                observed(&self.coordinator, &key, prior),
                observed(
                    &self.coordinator,
                    &keys::epoch(ns, state.kind),
                    state.epoch_value.as_ref(),
                ),
                observed(
                    &self.coordinator,
                    &keys::recovery(ns),
                    state.recovery_value.as_ref(),
                ),
            ],
            writes: vec![write],
        };
        self.commit("revocation checkpoint", &batch).await
    }

    /// Advances the grant epoch of `ns` to `new_epoch` and drives
    /// revocation to completion: the host's "swap and wait" entry point.
    ///
    /// # Errors
    /// The transition's or a slice's error; [`FenceError::Unavailable`]
    /// (retry after 1 s) if revocation is still pending after 10 s on the
    /// injected clock or after 10,000 slices (the step cap terminates even
    /// when the clock is frozen). The new epoch stays installed then, and
    /// [`Coordinator::revoke_step`] finishes the work.
    pub async fn bump_and_revoke(&self, ns: &Namespace, new_epoch: u64) -> Result<(), FenceError> {
        self.transition_and_revoke(ns, new_epoch, FenceKind::Grant)
            .await
    }

    /// [`Coordinator::bump_and_revoke`] for either fence kind.
    ///
    /// # Errors
    /// As [`Coordinator::bump_and_revoke`].
    pub async fn transition_and_revoke(
        &self,
        ns: &Namespace,
        new_epoch: u64,
        kind: FenceKind,
    ) -> Result<(), FenceError> {
        self.transition_fence(ns, new_epoch, kind).await?;
        let start = self.now_ms();
        for _ in 0..MAX_DRIVER_STEPS {
            if self
                .revoke_fence_step(ns, &RevokeBudget::default(), kind)
                .await?
                == RevokeProgress::Complete
            {
                return Ok(());
            }
            if self.now_ms().saturating_sub(start) >= MAX_DRIVER_ELAPSED_MS {
                break;
            }
            // Yield even when the store completes synchronously, so the
            // driver never monopolizes its executor thread.
            tokio::task::yield_now().await;
        }
        Err(FenceError::retry_later("epoch revocation pending"))
    }
}
