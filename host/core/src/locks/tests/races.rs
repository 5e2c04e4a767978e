//! Two batches racing through the guard, interleaved at every KV call by
//! a seeded number of yields, on the memory and redb KVs: whatever the
//! order, the rows end as one legal sequence of the two would leave them.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use custodian_base::clock::{Clock, FixedClock};
use custodian_contract::lock::{self, RequestLock};
use custodian_kv::intercept::{Call, Hook, Intercepted};
use custodian_kv::memory::MemoryKv;
use custodian_kv::redb::RedbKv;
use custodian_kv::{Kv, KvError, Outcome, Write};

use super::{batch, commit, lock_of, partition, put_piece, put_request};
use crate::locks::LockGuard;

const SEEDS: u64 = 32;
const R1: [u8; 32] = [1; 32];
const R2: [u8; 32] = [2; 32];

/// Lets the other batch run before each call, a seeded number of times.
struct Interleaver(Mutex<u64>);

#[async_trait]
impl Hook for Interleaver {
    async fn before(&self, _: &dyn Kv, _: Call<'_>) -> Result<(), KvError> {
        let yields = {
            let mut state = self.0.lock().unwrap();
            *state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            (*state >> 33) % 4
        };
        for _ in 0..yields {
            tokio::task::yield_now().await;
        }
        Ok(())
    }
}

/// A guarded, interleaved store per backend for `seed`, holding `setup`,
/// and the directory the redb file lives in.
async fn stores(seed: u64, setup: &[Write]) -> (Vec<Arc<dyn Kv>>, tempfile::TempDir) {
    let clock: Arc<dyn Clock> = Arc::new(FixedClock::new(100));
    let dir = tempfile::tempdir().unwrap();
    let backends: Vec<Arc<dyn Kv>> = vec![
        Arc::new(MemoryKv::new(clock.clone())),
        Arc::new(RedbKv::open(&dir.path().join("kv.redb"), clock.clone()).unwrap()),
    ];
    let mut guarded = Vec::new();
    for inner in backends {
        commit(inner.as_ref(), setup.to_vec()).await;
        let interleaved = Arc::new(Intercepted {
            inner,
            hook: Interleaver(Mutex::new(seed)),
        });
        let guard: Arc<dyn Kv> = Arc::new(LockGuard::new(interleaved, clock.clone()));
        guarded.push(guard);
    }
    (guarded, dir)
}

async fn request_lock(kv: &dyn Kv, id: &[u8; 32]) -> RequestLock {
    let row = kv
        .get(&partition(), &lock::request_key(id))
        .await
        .unwrap()
        .unwrap();
    RequestLock::decode(&row).unwrap()
}

#[tokio::test]
async fn two_requests_racing_for_one_piece_never_both_hold_it() {
    let setup = [
        put_request(&R1, &lock_of(10, 50, false, false)),
        put_request(&R2, &lock_of(10, 50, false, false)),
    ];
    for seed in 0..SEEDS {
        let (all, _dir) = stores(seed, &setup).await;
        for kv in all {
            let one = batch(vec![put_piece("preserved", "p", &R1)]);
            let two = batch(vec![put_piece("preserved", "p", &R2)]);
            let (a, b) = tokio::join!(kv.apply(&one), kv.apply(&two));
            let won = [&a, &b]
                .iter()
                .filter(|r| **r == &Ok(Outcome::Committed))
                .count();
            assert_eq!(won, 1, "seed {seed}: {a:?} {b:?}");
            let holder = if a.is_ok() { R1 } else { R2 };
            let row = kv
                .get(&partition(), &lock::piece_key("preserved", "p"))
                .await
                .unwrap();
            assert_eq!(row, Some(holder.to_vec()), "seed {seed}");
        }
    }
}

#[tokio::test]
async fn a_hold_racing_a_purge_leaves_one_of_them_never_both() {
    let setup = [put_request(&R1, &lock_of(10, 50, false, false))];
    for seed in 0..SEEDS {
        let (all, _dir) = stores(seed, &setup).await;
        for kv in all {
            let hold = batch(vec![put_request(&R1, &lock_of(10, 50, true, false))]);
            let purge = batch(vec![put_request(&R1, &lock_of(10, 50, false, true))]);
            let (a, b) = tokio::join!(kv.apply(&hold), kv.apply(&purge));
            let end = request_lock(kv.as_ref(), &R1).await;
            assert!(!(end.hold && end.purging), "seed {seed}: {end:?}");
            assert!(end.hold || end.purging, "seed {seed}: {end:?}");
            // Exactly the one that ended in the row committed.
            assert_eq!(a == Ok(Outcome::Committed), end.hold, "seed {seed}: {a:?}");
            assert_eq!(
                b == Ok(Outcome::Committed),
                end.purging,
                "seed {seed}: {b:?}"
            );
        }
    }
}

#[tokio::test]
async fn two_racing_extensions_never_leave_the_shorter() {
    let setup = [put_request(&R1, &lock_of(10, 50, false, false))];
    for seed in 0..SEEDS {
        let (all, _dir) = stores(seed, &setup).await;
        for kv in all {
            let shorter = batch(vec![put_request(&R1, &lock_of(10, 60, false, false))]);
            let longer = batch(vec![put_request(&R1, &lock_of(10, 70, false, false))]);
            let (a, b) = tokio::join!(kv.apply(&shorter), kv.apply(&longer));
            assert_eq!(b, Ok(Outcome::Committed), "seed {seed}");
            assert!(
                a == Ok(Outcome::Committed) || matches!(a, Err(KvError::Retained(_))),
                "seed {seed}: {a:?}"
            );
            let end = request_lock(kv.as_ref(), &R1).await;
            assert_eq!(end.retain_until_ms, 70, "seed {seed}: {a:?}");
        }
    }
}
