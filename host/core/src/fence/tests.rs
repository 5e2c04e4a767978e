//! Behaviour of epoch fencing over the in-memory store and a pinned clock.

mod interleavings;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;

use super::codec::{self, EpochLease, EpochRow, LeasedShard, RevokeCheckpoint};
use super::*;
use custodian_base::clock::{Clock, FixedClock};
use custodian_kv::intercept::{Call, Hook, Intercepted};
use custodian_kv::memory::MemoryKv;
use custodian_kv::{Batch, Kv, KvError, Outcome, Partition, Write};

const T0: u64 = 100_000;
const TTL: u64 = 10_000;

type Injector = Box<dyn FnMut(&Batch) -> Option<Batch> + Send>;

/// What a [`Probe`] saw since it was last reset.
#[derive(Default)]
struct Seen {
    /// The cursor of every scan, in order.
    scan_cursors: Vec<Option<Vec<u8>>>,
    /// Committed batches that wrote an epoch lease and no coordinator row:
    /// revocation pushes (grants and releases write both partitions).
    pushes: usize,
}

/// What a store records of what fencing does to it, and how it
/// interferes.
struct Probe {
    clock: Arc<FixedClock>,
    seen: Mutex<Seen>,
    /// Runs before each `apply`; a batch it returns commits first, as a
    /// concurrent caller's would.
    injector: Mutex<Option<Injector>>,
    /// Moves the clock forward by this much on every call.
    tick_ms: AtomicU64,
}

impl Probe {
    fn seen(&self) -> MutexGuard<'_, Seen> {
        self.seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn take_seen(&self) -> Seen {
        std::mem::take(&mut *self.seen())
    }

    fn inject(&self, injector: Injector) {
        *self.injector.lock().unwrap() = Some(injector);
    }

    fn tick(&self) {
        let tick = self.tick_ms.load(Ordering::SeqCst);
        if tick > 0 {
            self.clock.set(self.clock.now_ms() + tick);
        }
    }
}

#[async_trait]
impl Hook for Probe {
    async fn before(&self, inner: &dyn Kv, call: Call<'_>) -> Result<(), KvError> {
        self.tick();
        match call {
            Call::Scan { cursor } => {
                self.seen().scan_cursors.push(cursor.map(<[u8]>::to_vec));
            }
            Call::Apply(batch) => {
                let first = self
                    .injector
                    .lock()
                    .unwrap()
                    .as_mut()
                    .and_then(|f| f(batch));
                if let Some(first) = first {
                    assert_eq!(inner.apply(&first).await, Ok(Outcome::Committed));
                }
            }
            Call::Get { .. } | Call::GetMany | Call::Read(_) => {}
        }
        Ok(())
    }

    fn applied(&self, batch: &Batch, outcome: &Outcome) {
        let writes_to = |name: &str| {
            batch.writes.iter().any(|w| match w {
                Write::Put { partition, .. } | Write::Delete { partition, .. } => {
                    partition.as_str() == name
                }
            })
        };
        if *outcome == Outcome::Committed
            && writes_to(SHARDS_PARTITION)
            && !writes_to(COORDINATOR_PARTITION)
        {
            self.seen().pushes += 1;
        }
    }
}

struct Harness {
    clock: Arc<FixedClock>,
    kv: Arc<Intercepted<Probe>>,
    fences: Coordinator,
    ns: Namespace,
}

fn harness() -> Harness {
    harness_with(FenceConfig::default())
}

fn harness_with(config: FenceConfig) -> Harness {
    let clock = Arc::new(FixedClock::new(T0));
    let kv = Arc::new(Intercepted {
        inner: Arc::new(MemoryKv::new(clock.clone())),
        hook: Probe {
            clock: clock.clone(),
            seen: Mutex::default(),
            injector: Mutex::new(None),
            tick_ms: AtomicU64::new(0),
        },
    });
    let fences = Coordinator::new(kv.clone(), clock.clone(), config).unwrap();
    Harness {
        clock,
        kv,
        fences,
        ns: Namespace::new("takedown").unwrap(),
    }
}

fn shard(i: usize) -> ShardId {
    ShardId::new(format!("s{i:03}")).unwrap()
}

fn coordinator() -> Partition {
    Partition::new(COORDINATOR_PARTITION).unwrap()
}

fn shards() -> Partition {
    Partition::new(SHARDS_PARTITION).unwrap()
}

impl Harness {
    async fn grant(&self, i: usize) -> Fence {
        self.fences
            .grant_lease(&self.ns, &shard(i), TTL)
            .await
            .unwrap()
    }

    async fn step(&self) -> RevokeProgress {
        self.fences
            .revoke_step(&self.ns, &RevokeBudget::default())
            .await
            .unwrap()
    }

    /// A writer's batch under `fence`: its guard plus one data row.
    async fn write(&self, fence: &Fence) -> Outcome {
        let batch = Batch {
            preconditions: fence.guard(),
            writes: vec![Write::Put {
                partition: Partition::new("data").unwrap(),
                key: fence.shard().as_str().as_bytes().to_vec(),
                value: b"x".to_vec(),
            }],
        };
        self.kv.apply(&batch).await.unwrap()
    }

    async fn leased_row(&self, i: usize) -> LeasedShard {
        let key = keys::leased_shard(&self.ns, &shard(i));
        let bytes = self
            .kv
            .inner
            .get(&coordinator(), &key)
            .await
            .unwrap()
            .unwrap();
        codec::decode_row("leased-shard row", &bytes).unwrap()
    }

    async fn epoch_lease(&self, i: usize) -> EpochLease {
        let key = keys::epoch_lease(&self.ns, &shard(i));
        let bytes = self.kv.inner.get(&shards(), &key).await.unwrap().unwrap();
        codec::decode_row("epoch lease", &bytes).unwrap()
    }

    async fn put_raw(&self, partition: Partition, key: Vec<u8>, value: Vec<u8>) {
        let batch = Batch {
            preconditions: vec![],
            writes: vec![Write::Put {
                partition,
                key,
                value,
            }],
        };
        assert_eq!(self.kv.inner.apply(&batch).await, Ok(Outcome::Committed));
    }

    async fn checkpoint(&self, kind: FenceKind) -> Option<RevokeCheckpoint> {
        let key = keys::checkpoint(&self.ns, kind);
        let bytes = self.kv.inner.get(&coordinator(), &key).await.unwrap()?;
        Some(codec::decode_checkpoint(&bytes).unwrap())
    }
}

fn pending(remaining: u64) -> RevokeProgress {
    RevokeProgress::Pending { remaining }
}

fn is_unavailable(error: &FenceError) -> bool {
    matches!(
        error,
        FenceError::Unavailable {
            retry_after_secs: 1,
            ..
        }
    )
}

// ---- the seed's scenario --------------------------------------------------

#[tokio::test]
async fn bump_and_revoke_terminates_with_a_frozen_clock_during_a_recovery_hold_off() {
    let h = harness();
    h.fences.mark_lease_table_recovered(&h.ns).await.unwrap();
    let error = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        h.fences.bump_and_revoke(&h.ns, 1),
    )
    .await
    .expect("the step cap terminates despite a frozen clock")
    .expect_err("a recovery hold-off cannot pass at frozen time");
    assert!(is_unavailable(&error), "{error:?}");
    assert_eq!(h.clock.now_ms(), T0);
    assert_eq!(h.step().await, pending(1));
}

// ---- epoch transitions ----------------------------------------------------

#[tokio::test]
async fn epoch_increments_outside_one_to_1024_are_refused() {
    let h = harness();
    let refused = |r: Result<(), FenceError>| matches!(r, Err(FenceError::InvalidArgument(_)));
    assert!(refused(h.fences.bump_epoch(&h.ns, 0).await), "increment 0");
    h.fences.bump_epoch(&h.ns, 1).await.unwrap();
    assert!(
        refused(h.fences.bump_epoch(&h.ns, 1).await),
        "same epoch again"
    );
    assert!(
        refused(h.fences.bump_epoch(&h.ns, 1026).await),
        "increment 1025"
    );
    h.fences.bump_epoch(&h.ns, 1025).await.unwrap();
    assert!(refused(h.fences.bump_epoch(&h.ns, 1024).await), "backwards");
    assert!(
        refused(h.fences.bump_epoch(&h.ns, u64::MAX).await),
        "far forward"
    );
    assert_eq!(
        h.fences.current_epoch(&h.ns, FenceKind::Grant).await,
        Ok(1025)
    );
}

#[tokio::test]
async fn a_concurrent_winner_installing_the_same_epoch_counts_as_success() {
    let h = harness();
    let epoch_key = keys::epoch(&h.ns, FenceKind::Grant);
    let mut fired = false;
    h.kv.inject(Box::new(move |_| {
        (!std::mem::replace(&mut fired, true)).then(|| Batch {
            preconditions: vec![],
            writes: vec![Write::Put {
                partition: coordinator(),
                key: epoch_key.clone(),
                value: codec::encode("epoch", &EpochRow { generation: 7 }).unwrap(),
            }],
        })
    }));
    assert_eq!(
        h.fences.transition_fence(&h.ns, 7, FenceKind::Grant).await,
        Ok(Transition::InstalledConcurrently)
    );
    assert_eq!(h.fences.current_epoch(&h.ns, FenceKind::Grant).await, Ok(7));
}

#[tokio::test]
async fn contention_beyond_the_attempt_bound_is_unavailable_with_a_retry_after() {
    let h = harness();
    let epoch_key = keys::epoch(&h.ns, FenceKind::Grant);
    let mut rival = 0;
    h.kv.inject(Box::new(move |_| {
        rival += 1;
        Some(Batch {
            preconditions: vec![],
            writes: vec![Write::Put {
                partition: coordinator(),
                key: epoch_key.clone(),
                value: codec::encode("epoch", &EpochRow { generation: rival }).unwrap(),
            }],
        })
    }));
    let error = h.fences.bump_epoch(&h.ns, 100).await.unwrap_err();
    assert!(is_unavailable(&error), "{error:?}");
}

// ---- the core property ----------------------------------------------------

#[tokio::test]
async fn a_writer_guard_from_an_older_epoch_fails_once_revocation_completes() {
    let h = harness();
    h.fences.bump_epoch(&h.ns, 1).await.unwrap();
    let fence = h.grant(0).await;
    assert_eq!(fence.epoch(), 1);
    assert_eq!(h.write(&fence).await, Outcome::Committed);
    h.fences.bump_and_revoke(&h.ns, 2).await.unwrap();
    assert_eq!(
        h.write(&fence).await,
        Outcome::PreconditionFailed { index: 0 }
    );
    assert_eq!(h.epoch_lease(0).await.epoch, 2);
    assert_eq!(h.leased_row(0).await.acked_epoch, 2);
    // A fresh grant at the new epoch writes again.
    let renewed = h.grant(0).await;
    assert_eq!(renewed.epoch(), 2);
    assert_eq!(h.write(&renewed).await, Outcome::Committed);
}

#[tokio::test]
async fn an_expired_lease_counts_as_done_without_a_push_once_its_margin_has_passed() {
    let h = harness();
    let fence = h.fences.grant_lease(&h.ns, &shard(0), 100).await.unwrap();
    let lease_before = h.epoch_lease(0).await;
    h.clock
        .set(T0 + 100 + FenceConfig::default().lease_margin_ms);
    h.kv.take_seen();
    h.fences.bump_epoch(&h.ns, 1).await.unwrap();
    assert_eq!(h.step().await, RevokeProgress::Complete);
    assert_eq!(h.kv.take_seen().pushes, 0);
    assert_eq!(h.epoch_lease(0).await, lease_before);
    assert_eq!(h.write(&fence).await, Outcome::DeadlinePassed);
}

#[tokio::test]
async fn a_lease_expired_less_than_its_margin_ago_is_still_pushed() {
    // Its writer may have checked its deadline on a clock running behind,
    // or just before its request travelled to a remote KV.
    let h = harness();
    let fence = h.fences.grant_lease(&h.ns, &shard(0), 100).await.unwrap();
    h.clock
        .set(T0 + 100 + FenceConfig::default().lease_margin_ms - 1);
    h.kv.take_seen();
    h.fences.bump_epoch(&h.ns, 1).await.unwrap();
    assert_eq!(h.step().await, RevokeProgress::Complete);
    assert_eq!(h.kv.take_seen().pushes, 1);
    assert_eq!(h.epoch_lease(0).await.epoch, 1);
    // Even a deadline checked on a slow clock cannot save the write now.
    h.clock.set(T0 + 50);
    assert_eq!(
        h.write(&fence).await,
        Outcome::PreconditionFailed { index: 0 }
    );
}

#[tokio::test]
async fn a_writer_cannot_commit_at_the_instant_its_lease_expires() {
    let h = harness();
    let fence = h.fences.grant_lease(&h.ns, &shard(0), 100).await.unwrap();
    h.clock.set(T0 + 99);
    assert_eq!(h.write(&fence).await, Outcome::Committed);
    // The writer's deadline has passed at this instant (revocation waits
    // out the lease margin on top of it).
    h.clock.set(T0 + 100);
    assert_eq!(h.write(&fence).await, Outcome::DeadlinePassed);
}

#[tokio::test]
async fn a_released_lease_fences_its_writer_and_leaves_nothing_to_revoke() {
    let h = harness();
    let fence = h.grant(0).await;
    h.fences.release_lease(&h.ns, &shard(0)).await.unwrap();
    h.fences.release_lease(&h.ns, &shard(0)).await.unwrap();
    assert_eq!(
        h.write(&fence).await,
        Outcome::PreconditionFailed { index: 0 }
    );
    h.kv.take_seen();
    h.fences.bump_epoch(&h.ns, 1).await.unwrap();
    assert_eq!(h.step().await, RevokeProgress::Complete);
    assert_eq!(h.kv.take_seen().pushes, 0);
}

// ---- slicing and checkpoints ----------------------------------------------

#[tokio::test]
async fn revoking_more_than_four_live_shards_takes_several_slices_of_at_most_four_pushes() {
    let h = harness();
    for i in 0..10 {
        h.grant(i).await;
    }
    h.fences.bump_epoch(&h.ns, 1).await.unwrap();
    h.kv.take_seen();
    assert_eq!(h.step().await, pending(6));
    assert_eq!(h.kv.take_seen().pushes, 4);
    assert_eq!(h.step().await, pending(2));
    assert_eq!(h.kv.take_seen().pushes, 4);
    assert_eq!(h.step().await, RevokeProgress::Complete);
    assert_eq!(h.kv.take_seen().pushes, 2);
    for i in 0..10 {
        assert_eq!(h.epoch_lease(i).await.epoch, 1);
    }
    assert_eq!(h.checkpoint(FenceKind::Grant).await, None);
}

#[tokio::test]
async fn a_slice_stops_after_eight_pages_and_the_next_resumes_from_the_checkpoint() {
    let h = harness();
    // 32 leases that will be over, then 4 live ones at the end.
    for i in 0..32 {
        h.fences.grant_lease(&h.ns, &shard(i), 10).await.unwrap();
    }
    h.clock
        .set(T0 + 10 + FenceConfig::default().lease_margin_ms);
    for i in 32..36 {
        h.grant(i).await;
    }
    h.fences.bump_epoch(&h.ns, 1).await.unwrap();
    h.kv.take_seen();

    // Eight pages of expired rows: a complete prefix, but no completion.
    assert_eq!(h.step().await, pending(1));
    let seen = h.kv.take_seen();
    assert_eq!(seen.scan_cursors.len(), 8);
    assert_eq!(seen.pushes, 0);
    let after_32 = keys::leased_shard(&h.ns, &shard(31));
    let checkpoint = h.checkpoint(FenceKind::Grant).await.unwrap();
    assert_eq!((checkpoint.generation, &checkpoint.cursor), (1, &after_32));

    // The next slice starts there: one page of four live shards.
    assert_eq!(h.step().await, RevokeProgress::Complete);
    let seen = h.kv.take_seen();
    assert_eq!(seen.scan_cursors, vec![Some(after_32)]);
    assert_eq!(seen.pushes, 4);
}

/// Leaves a checkpoint at epoch 1 after the first page of eight shards.
async fn checkpoint_after_one_page(h: &Harness) -> Vec<u8> {
    for i in 0..8 {
        h.grant(i).await;
    }
    h.fences.bump_epoch(&h.ns, 1).await.unwrap();
    assert_eq!(h.step().await, pending(4));
    let cursor = keys::leased_shard(&h.ns, &shard(3));
    assert_eq!(h.checkpoint(FenceKind::Grant).await.unwrap().cursor, cursor);
    h.kv.take_seen();
    cursor
}

#[tokio::test]
async fn a_checkpoint_from_an_older_epoch_is_ignored() {
    let h = harness();
    checkpoint_after_one_page(&h).await;
    h.fences.bump_epoch(&h.ns, 2).await.unwrap();
    assert_eq!(h.step().await, pending(4));
    let seen = h.kv.take_seen();
    assert_eq!(seen.scan_cursors.first(), Some(&None));
    assert_eq!(seen.pushes, 4);
    assert_eq!(h.checkpoint(FenceKind::Grant).await.unwrap().generation, 2);
}

#[tokio::test]
async fn a_checkpoint_from_before_a_recovery_declaration_is_ignored() {
    let h = harness();
    checkpoint_after_one_page(&h).await;
    h.fences.mark_lease_table_recovered(&h.ns).await.unwrap();
    // Restarted from the first row: the first page is already done, the
    // second is pushed, and the hold-off alone keeps it pending.
    assert_eq!(h.step().await, pending(1));
    let seen = h.kv.take_seen();
    assert_eq!(seen.scan_cursors.first(), Some(&None));
    assert_eq!(seen.pushes, 4);
}

#[tokio::test]
async fn a_valid_checkpoint_is_resumed_from() {
    let h = harness();
    let cursor = checkpoint_after_one_page(&h).await;
    assert_eq!(h.step().await, RevokeProgress::Complete);
    assert_eq!(h.kv.take_seen().scan_cursors, vec![Some(cursor)]);
}

#[tokio::test]
async fn a_slice_stops_once_its_time_budget_has_elapsed() {
    let h = harness();
    for i in 0..4 {
        h.grant(i).await;
    }
    h.fences.bump_epoch(&h.ns, 1).await.unwrap();
    h.kv.tick_ms.store(1, Ordering::SeqCst);
    h.kv.take_seen();
    // Each store call takes 1 ms, and RevokeBudget::new(0) is 1 ms.
    assert_eq!(
        h.fences
            .revoke_step(&h.ns, &RevokeBudget::new(0))
            .await
            .unwrap(),
        pending(1)
    );
    assert_eq!(h.kv.take_seen().pushes, 0);
    h.kv.tick_ms.store(0, Ordering::SeqCst);
    assert_eq!(h.step().await, RevokeProgress::Complete);
}

// ---- recovery hold-off ----------------------------------------------------

#[tokio::test]
async fn completion_is_withheld_until_the_recovery_hold_off_passes() {
    let config = FenceConfig {
        epoch_lease_ms: 1_000,
        lease_margin_ms: 200,
    };
    let h = harness_with(config);
    h.fences.mark_lease_table_recovered(&h.ns).await.unwrap();
    h.fences.bump_epoch(&h.ns, 1).await.unwrap();
    assert!(h.fences.recovery_pending(&h.ns).await.unwrap());
    assert_eq!(h.step().await, pending(1));
    h.clock.set(T0 + 1_199);
    assert_eq!(h.step().await, pending(1));
    h.clock.set(T0 + 1_200);
    assert!(!h.fences.recovery_pending(&h.ns).await.unwrap());
    assert_eq!(h.step().await, RevokeProgress::Complete);
}

// ---- renewal and stale slices ---------------------------------------------

#[tokio::test]
async fn renewing_a_live_lease_never_raises_its_acknowledgement() {
    let h = harness();
    h.fences.bump_epoch(&h.ns, 1).await.unwrap();
    h.grant(0).await;
    h.fences.bump_epoch(&h.ns, 2).await.unwrap();
    h.clock.set(T0 + 1_000);
    let renewed = h.grant(0).await;
    let row = h.leased_row(0).await;
    assert_eq!((row.epoch, row.acked_epoch), (2, 1));
    assert_eq!(renewed.epoch(), 2);
    // Still outstanding, so revocation visits it; the renewed fence
    // survives the push because its epoch lease is already at epoch 2.
    h.kv.take_seen();
    assert_eq!(h.step().await, RevokeProgress::Complete);
    assert_eq!(h.kv.take_seen().pushes, 1);
    assert_eq!(h.leased_row(0).await.acked_epoch, 2);
    assert_eq!(h.write(&renewed).await, Outcome::Committed);
}

#[tokio::test]
async fn renewing_an_expired_lease_acknowledges_the_current_epoch_at_once() {
    let h = harness();
    h.fences.bump_epoch(&h.ns, 1).await.unwrap();
    h.grant(0).await;
    h.fences.bump_epoch(&h.ns, 2).await.unwrap();
    h.clock.set(T0 + TTL);
    h.grant(0).await;
    let row = h.leased_row(0).await;
    assert_eq!((row.epoch, row.acked_epoch), (2, 2));
}

#[tokio::test]
async fn renewal_extends_but_never_shortens_a_live_lease() {
    let h = harness();
    let first = h.grant(0).await;
    h.clock.set(T0 + 1_000);
    let shorter = h.fences.grant_lease(&h.ns, &shard(0), 10).await.unwrap();
    assert_eq!(shorter.expires_at_ms(), first.expires_at_ms());
    let longer = h.grant(0).await;
    assert_eq!(longer.expires_at_ms(), T0 + 1_000 + TTL);
    assert_eq!(h.leased_row(0).await.expires_at_ms, T0 + 1_000 + TTL);
    assert_eq!(h.epoch_lease(0).await.expires_at_ms, T0 + 1_000 + TTL);
    // Each grant rewrote the epoch lease, so the first fence is dead.
    assert_eq!(
        h.write(&first).await,
        Outcome::PreconditionFailed { index: 0 }
    );
}

#[tokio::test]
async fn a_stale_slice_never_undoes_a_newer_push() {
    let h = harness();
    h.fences.bump_epoch(&h.ns, 1).await.unwrap();
    h.grant(0).await;
    h.fences.bump_epoch(&h.ns, 2).await.unwrap();
    // Another host's slice already pushed the epoch lease to epoch 3.
    let mut newer = h.epoch_lease(0).await;
    newer.epoch = 3;
    let el_key = keys::epoch_lease(&h.ns, &shard(0));
    h.put_raw(shards(), el_key, codec::encode("el", &newer).unwrap())
        .await;
    h.kv.take_seen();
    assert_eq!(h.step().await, pending(1));
    assert_eq!(h.kv.take_seen().pushes, 0);
    assert_eq!(h.epoch_lease(0).await, newer);
    assert_eq!(h.leased_row(0).await.acked_epoch, 1);
}

#[tokio::test]
async fn an_acknowledgement_does_not_commit_across_an_epoch_transition() {
    let h = harness();
    h.fences.bump_epoch(&h.ns, 1).await.unwrap();
    h.grant(0).await;
    h.fences.bump_epoch(&h.ns, 2).await.unwrap();
    // Epoch 3 commits between the slice's push and its acknowledgement.
    let epoch_key = keys::epoch(&h.ns, FenceKind::Grant);
    let mut fired = false;
    h.kv.inject(Box::new(move |batch| {
        let is_push = batch.writes.iter().all(
            |w| matches!(w, Write::Put { partition, .. } if partition.as_str() == SHARDS_PARTITION),
        );
        (is_push && !std::mem::replace(&mut fired, true)).then(|| Batch {
            preconditions: vec![],
            writes: vec![Write::Put {
                partition: coordinator(),
                key: epoch_key.clone(),
                value: codec::encode("epoch", &EpochRow { generation: 3 }).unwrap(),
            }],
        })
    }));
    assert_eq!(h.step().await, pending(1));
    assert_eq!(h.epoch_lease(0).await.epoch, 2);
    assert_eq!(h.leased_row(0).await.acked_epoch, 1);
    assert_eq!(h.step().await, RevokeProgress::Complete);
    assert_eq!(h.leased_row(0).await.acked_epoch, 3);
}

#[tokio::test]
async fn a_row_acknowledged_beyond_the_epoch_counts_as_remaining() {
    let h = harness();
    h.fences.bump_epoch(&h.ns, 1).await.unwrap();
    h.grant(0).await;
    let mut row = h.leased_row(0).await;
    row.acked_epoch = 2;
    let key = keys::leased_shard(&h.ns, &shard(0));
    h.put_raw(coordinator(), key, codec::encode("row", &row).unwrap())
        .await;
    assert_eq!(h.step().await, pending(1));
}

#[tokio::test]
async fn a_push_does_not_shorten_a_concurrent_renewal() {
    let h = harness();
    h.grant(0).await;
    h.fences.bump_epoch(&h.ns, 1).await.unwrap();
    // The epoch lease outlives the leased-shard row the slice reads, as
    // when a renewal commits between the slice's scan and its push.
    let mut longer = h.epoch_lease(0).await;
    longer.expires_at_ms += 5_000;
    let el_key = keys::epoch_lease(&h.ns, &shard(0));
    h.put_raw(shards(), el_key, codec::encode("el", &longer).unwrap())
        .await;
    h.kv.take_seen();
    assert_eq!(h.step().await, pending(1));
    assert_eq!(h.kv.take_seen().pushes, 0);
    assert_eq!(h.epoch_lease(0).await, longer);
}

// ---- fence kinds ------------------------------------------------------------

#[tokio::test]
async fn an_authority_transition_pushes_the_authority_generation_without_touching_the_grant_epoch()
{
    let h = harness();
    h.fences.bump_epoch(&h.ns, 3).await.unwrap();
    let fence = h.grant(0).await;
    assert_eq!((fence.epoch(), fence.authority_generation()), (3, 0));
    h.fences
        .transition_and_revoke(&h.ns, 1, FenceKind::Authority)
        .await
        .unwrap();
    let lease = h.epoch_lease(0).await;
    assert_eq!((lease.epoch, lease.authority_generation), (3, 1));
    // The holder's loaded policy is now known to be stale.
    assert_eq!(lease.authority_ready, Some(0));
    assert_eq!(lease.config_version, 1);
    let row = h.leased_row(0).await;
    assert_eq!((row.acked_epoch, row.acked_authority_generation), (3, 1));
    assert_eq!(h.fences.current_epoch(&h.ns, FenceKind::Grant).await, Ok(3));
    assert_eq!(
        h.write(&fence).await,
        Outcome::PreconditionFailed { index: 0 }
    );
    // Grant revocation has nothing to do, and each kind keeps its own
    // checkpoint.
    assert_eq!(h.step().await, RevokeProgress::Complete);
    let renewed = h.grant(0).await;
    assert_eq!(renewed.generation(FenceKind::Authority), 1);
    assert_eq!(h.epoch_lease(0).await.authority_ready, Some(1));
}

#[tokio::test]
async fn a_grant_epoch_push_keeps_the_authority_generation() {
    let h = harness();
    h.fences
        .transition_fence(&h.ns, 5, FenceKind::Authority)
        .await
        .unwrap();
    h.grant(0).await;
    h.fences.bump_and_revoke(&h.ns, 1).await.unwrap();
    let lease = h.epoch_lease(0).await;
    assert_eq!((lease.epoch, lease.authority_generation), (1, 5));
}

// ---- corrupt data and bad arguments -----------------------------------------

#[tokio::test]
async fn a_corrupt_leased_shard_row_is_reported_corrupt() {
    let h = harness();
    h.grant(0).await;
    let key = keys::leased_shard(&h.ns, &shard(0));
    h.put_raw(coordinator(), key.clone(), b"\x01{not json".to_vec())
        .await;
    h.fences.bump_epoch(&h.ns, 1).await.unwrap();
    let corrupt = |r: &Result<_, FenceError>| matches!(r, Err(FenceError::Corrupt(_)));
    assert!(corrupt(
        &h.fences.revoke_step(&h.ns, &RevokeBudget::default()).await
    ));
    assert!(matches!(
        h.fences.grant_lease(&h.ns, &shard(0), TTL).await,
        Err(FenceError::Corrupt(_))
    ));
    for bad in [
        vec![],
        vec![2],
        vec![1; codec::MAX_ROW_BYTES + 1],
        br#"{"epoch":0}"#.to_vec(),
    ] {
        h.put_raw(coordinator(), key.clone(), bad).await;
        assert!(corrupt(
            &h.fences.revoke_step(&h.ns, &RevokeBudget::default()).await
        ));
    }
}

#[tokio::test]
async fn a_row_with_unknown_fields_is_reported_corrupt() {
    let h = harness();
    let key = keys::epoch(&h.ns, FenceKind::Grant);
    h.put_raw(
        coordinator(),
        key,
        b"\x01{\"generation\":1,\"extra\":2}".to_vec(),
    )
    .await;
    assert!(matches!(
        h.fences.bump_epoch(&h.ns, 2).await,
        Err(FenceError::Corrupt(_))
    ));
}

#[tokio::test]
async fn an_oversized_or_misplaced_checkpoint_is_reported_corrupt() {
    let h = harness();
    h.fences.bump_epoch(&h.ns, 1).await.unwrap();
    let key = keys::checkpoint(&h.ns, FenceKind::Grant);
    let encode = |cursor: Vec<u8>| {
        codec::encode(
            "checkpoint",
            &RevokeCheckpoint {
                generation: 1,
                recovery: None,
                cursor,
            },
        )
        .unwrap()
    };
    let mut oversized = vec![1];
    oversized.resize(codec::MAX_CHECKPOINT_BYTES + 1, b' ');
    let (first, _) = keys::leased_shard_range(&h.ns);
    let mut long_cursor = first.clone();
    long_cursor.resize(custodian_kv::MAX_KEY_BYTES + 1, b'a');
    for bad in [
        oversized,
        encode(long_cursor),
        encode(b"epoch/takedown/grant".to_vec()),
        encode(b"lease/takedown0".to_vec()),
    ] {
        h.put_raw(coordinator(), key.clone(), bad).await;
        let result = h.fences.revoke_step(&h.ns, &RevokeBudget::default()).await;
        assert!(matches!(result, Err(FenceError::Corrupt(_))), "{result:?}");
    }
}

#[tokio::test]
async fn invalid_names_lease_lengths_and_configurations_are_refused() {
    let long = "x".repeat(MAX_NAME_BYTES + 1);
    for name in ["", "Upper", "a/b", "sp ace", long.as_str()] {
        assert!(Namespace::new(name).is_err(), "{name:?}");
        assert!(ShardId::new(name).is_err(), "{name:?}");
    }
    assert!(Namespace::new("a.b-c_9").is_ok());
    let h = harness();
    let config = h.fences.config();
    for ttl in [0, config.epoch_lease_ms + 1] {
        assert!(matches!(
            h.fences.grant_lease(&h.ns, &shard(0), ttl).await,
            Err(FenceError::InvalidArgument(_))
        ));
    }
    let clock: Arc<dyn Clock> = Arc::new(FixedClock::new(0));
    let kv: Arc<dyn Kv> = Arc::new(MemoryKv::new(clock.clone()));
    for bad in [
        FenceConfig {
            epoch_lease_ms: 0,
            ..FenceConfig::default()
        },
        FenceConfig {
            epoch_lease_ms: MAX_EPOCH_LEASE_MS + 1,
            ..FenceConfig::default()
        },
        FenceConfig {
            lease_margin_ms: MAX_LEASE_MARGIN_MS + 1,
            ..FenceConfig::default()
        },
    ] {
        assert!(Coordinator::new(kv.clone(), clock.clone(), bad).is_err());
    }
}

#[test]
fn lease_keys_of_one_namespace_never_fall_in_anothers_scan_range() {
    let a = Namespace::new("a").unwrap();
    let ab = Namespace::new("a.b").unwrap();
    let (start, end) = keys::leased_shard_range(&a);
    for key in [
        keys::leased_shard(&ab, &shard(0)),
        keys::epoch(&a, FenceKind::Grant),
        keys::checkpoint(&a, FenceKind::Grant),
    ] {
        assert!(
            key < start || key >= end,
            "{}",
            String::from_utf8_lossy(&key)
        );
    }
    let own = keys::leased_shard(&a, &shard(0));
    assert!(own >= start && own < end);
    assert_eq!(keys::parse_leased_shard(&a, &own), Ok(shard(0)));
    assert!(keys::parse_leased_shard(&a, b"lease/a/UPPER").is_err());
}

#[test]
fn each_fence_error_says_its_kind_and_a_kv_refusal_of_the_fences_own_batch_is_internal() {
    let cases = [
        (
            FenceError::InvalidArgument("x".into()),
            ErrorKind::InvalidArgument,
        ),
        (FenceError::retry_later("x"), ErrorKind::Unavailable),
        (FenceError::Corrupt("x".into()), ErrorKind::Corrupt),
        (FenceError::Internal("x".into()), ErrorKind::Internal),
        (
            FenceError::Kv(KvError::Unavailable("x".into())),
            ErrorKind::Unavailable,
        ),
        (
            FenceError::Kv(KvError::InvalidArgument("x".into())),
            ErrorKind::Internal,
        ),
        (FenceError::Kv(KvError::InUse("x".into())), ErrorKind::Busy),
    ];
    for (error, kind) in cases {
        assert_eq!(error.kind(), kind, "{error:?}");
    }
}
