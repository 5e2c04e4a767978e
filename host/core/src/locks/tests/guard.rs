//! What the guard lets a batch do to the lock rows, on the memory and
//! redb KVs.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use custodian_base::clock::{Clock, FixedClock};
use custodian_contract::lock;
use custodian_kv::intercept::{Call, Hook, Intercepted};
use custodian_kv::memory::MemoryKv;
use custodian_kv::redb::RedbKv;
use custodian_kv::{Batch, Kv, KvError, MAX_BATCH_OPS, Outcome, Partition, Precondition, Write};

use super::{batch, commit, is_retained, lock_of, lock_rows, partition, put_piece, put_request};
use crate::locks::LockGuard;

const R: [u8; 32] = [1; 32];
const OTHER: [u8; 32] = [2; 32];

/// A guarded store on each backend, at `clock`, with what keeps it alive.
fn backends(clock: &Arc<FixedClock>) -> Vec<(&'static str, Arc<dyn Kv>, tempfile::TempDir)> {
    let clock: Arc<dyn Clock> = clock.clone();
    let dir = tempfile::tempdir().unwrap();
    let redb = RedbKv::open(&dir.path().join("kv.redb"), clock.clone()).unwrap();
    let memory: Arc<dyn Kv> = Arc::new(MemoryKv::new(clock.clone()));
    let redb: Arc<dyn Kv> = Arc::new(redb);
    vec![
        (
            "memory",
            Arc::new(LockGuard::new(memory, clock.clone())),
            tempfile::tempdir().unwrap(),
        ),
        ("redb", Arc::new(LockGuard::new(redb, clock)), dir),
    ]
}

fn other_partition() -> Partition {
    Partition::new("takedown").unwrap()
}

fn put_other(key: &[u8]) -> Write {
    Write::Put {
        partition: other_partition(),
        key: key.to_vec(),
        value: b"v".to_vec(),
    }
}

#[tokio::test]
async fn every_forbidden_lock_write_is_refused_as_retained_and_nothing_of_its_batch_is_written() {
    let clock = Arc::new(FixedClock::new(100));
    let held = lock_of(10, 50, true, false);
    let purging = lock_of(10, 50, false, true);
    let open = lock_of(10, 500, false, false);
    let h = [3u8; 32];
    let p = [4u8; 32];
    let o = [5u8; 32];
    let mut bad_flags = open.encode().to_vec();
    bad_flags[16] = 0x80;
    let forbidden: Vec<(&str, Vec<Write>)> = vec![
        (
            "shorten",
            vec![put_request(&o, &lock_of(10, 499, false, false))],
        ),
        (
            "move created",
            vec![put_request(&o, &lock_of(11, 500, false, false))],
        ),
        (
            "purge early",
            vec![put_request(&o, &lock_of(10, 500, false, true))],
        ),
        (
            "purge held",
            vec![put_request(&h, &lock_of(10, 50, true, true))],
        ),
        (
            "purge and hold",
            vec![put_request(&o, &lock_of(10, 500, true, true))],
        ),
        (
            "stop purging",
            vec![put_request(&p, &lock_of(10, 50, false, false))],
        ),
        (
            "hold once purging",
            vec![put_request(&p, &lock_of(10, 50, true, true))],
        ),
        (
            "new lock purging",
            vec![put_request(&R, &lock_of(1, 1, false, true))],
        ),
        ("piece changes hands", vec![put_piece("preserved", "a", &p)]),
        ("piece of no request", vec![put_piece("preserved", "b", &R)]),
        (
            "piece before its request",
            vec![put_piece("preserved", "b", &R), put_request(&R, &open)],
        ),
        (
            "delete a request lock",
            vec![Write::Delete {
                partition: partition(),
                key: lock::request_key(&o),
            }],
        ),
        (
            "delete a piece lock",
            vec![Write::Delete {
                partition: partition(),
                key: lock::piece_key("preserved", "a"),
            }],
        ),
        (
            "delete an absent row",
            vec![Write::Delete {
                partition: partition(),
                key: b"zzz".to_vec(),
            }],
        ),
        (
            "a key of no lock",
            vec![Write::Put {
                partition: partition(),
                key: b"x1".to_vec(),
                value: vec![],
            }],
        ),
        (
            "a short request lock",
            vec![Write::Put {
                partition: partition(),
                key: lock::request_key(&R),
                value: vec![0; 16],
            }],
        ),
        (
            "unknown flags",
            vec![Write::Put {
                partition: partition(),
                key: lock::request_key(&R),
                value: bad_flags.clone(),
            }],
        ),
        (
            "a piece naming half an id",
            vec![Write::Put {
                partition: partition(),
                key: lock::piece_key("preserved", "c"),
                value: vec![1; 16],
            }],
        ),
        (
            "legal then illegal in one batch",
            vec![
                put_request(&o, &lock_of(10, 600, false, false)),
                put_request(&o, &lock_of(10, 550, false, false)),
            ],
        ),
    ];
    for (backend, kv, _dir) in backends(&clock) {
        let not_yet_purging = lock_of(10, 50, false, false);
        commit(
            kv.as_ref(),
            vec![
                put_request(&h, &held),
                put_request(&p, &not_yet_purging),
                put_request(&p, &purging),
                put_request(&o, &open),
                put_piece("preserved", "a", &o),
            ],
        )
        .await;
        let before = lock_rows(kv.as_ref()).await;
        for (what, writes) in &forbidden {
            let mut writes = writes.clone();
            writes.insert(0, put_other(what.as_bytes()));
            let result = kv.apply(&batch(writes)).await;
            assert!(is_retained(&result), "{backend}: {what}: {result:?}");
            let kind = result.unwrap_err().kind();
            assert_eq!(kind, custodian_base::error::ErrorKind::Retained);
            assert_eq!(lock_rows(kv.as_ref()).await, before, "{backend}: {what}");
            let other = kv.get(&other_partition(), what.as_bytes()).await.unwrap();
            assert_eq!(other, None, "{backend}: {what} wrote its other rows");
        }
    }
}

#[tokio::test]
async fn the_legal_steps_of_a_lock_commit() {
    let clock = Arc::new(FixedClock::new(100));
    for (backend, kv, _dir) in backends(&clock) {
        let kv = kv.as_ref();
        let steps: Vec<(&str, Vec<Write>)> = vec![
            (
                "file",
                vec![put_request(&R, &lock_of(10, 200, false, false))],
            ),
            (
                "lock pieces with the request and after it",
                vec![
                    put_other(b"intent"),
                    put_piece("preserved", "p/0", &R),
                    put_piece("preserved", "p/1", &R),
                ],
            ),
            (
                "file another with its piece",
                vec![
                    put_request(&OTHER, &lock_of(20, 30, false, false)),
                    put_piece("preserved", "q/0", &OTHER),
                ],
            ),
            ("rewrite a piece", vec![put_piece("preserved", "p/0", &R)]),
            (
                "extend",
                vec![put_request(&R, &lock_of(10, 300, false, false))],
            ),
            (
                "hold and extend in one batch",
                vec![
                    put_request(&R, &lock_of(10, 300, true, false)),
                    put_request(&R, &lock_of(10, 400, true, false)),
                ],
            ),
            (
                "lift the hold",
                vec![put_request(&R, &lock_of(10, 400, false, false))],
            ),
            (
                "purge once retention passed",
                vec![put_request(&OTHER, &lock_of(20, 30, false, true))],
            ),
            (
                "extend while purging",
                vec![put_request(&OTHER, &lock_of(20, 90, false, true))],
            ),
        ];
        for (what, writes) in steps {
            let result = kv.apply(&batch(writes)).await;
            assert_eq!(result, Ok(Outcome::Committed), "{backend}: {what}");
        }
        let lock = kv
            .get(&partition(), &lock::request_key(&R))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            lock::RequestLock::decode(&lock),
            Ok(lock_of(10, 400, false, false)),
            "{backend}"
        );
        let released = kv
            .get(&partition(), &lock::request_key(&OTHER))
            .await
            .unwrap()
            .unwrap();
        assert!(lock::RequestLock::decode(&released).unwrap().releases(100));
        assert_eq!(lock_rows(kv).await.len(), 5, "{backend}");
    }
}

/// Counts every call the inner store answers, by operation.
#[derive(Default)]
struct Counter {
    applies: AtomicUsize,
    reads: AtomicUsize,
    /// The preconditions of every batch applied.
    guards: std::sync::Mutex<Vec<Vec<Precondition>>>,
}

#[async_trait]
impl Hook for Counter {
    async fn before(&self, _: &dyn Kv, call: Call<'_>) -> Result<(), KvError> {
        match call {
            Call::Apply(batch) => {
                self.applies.fetch_add(1, Ordering::SeqCst);
                self.guards
                    .lock()
                    .unwrap()
                    .push(batch.preconditions.clone());
            }
            _ => {
                self.reads.fetch_add(1, Ordering::SeqCst);
            }
        }
        Ok(())
    }
}

fn counted() -> (Arc<Intercepted<Counter>>, LockGuard) {
    let clock: Arc<dyn Clock> = Arc::new(FixedClock::new(100));
    let counted = Arc::new(Intercepted {
        inner: Arc::new(MemoryKv::new(clock.clone())),
        hook: Counter::default(),
    });
    let guard = LockGuard::new(counted.clone(), clock);
    (counted, guard)
}

#[tokio::test]
async fn a_batch_that_writes_no_lock_row_passes_straight_through_with_no_read() {
    let (counted, guard) = counted();
    let mut plain = batch(vec![put_other(b"a")]);
    plain.preconditions.push(Precondition::Absent {
        partition: partition(),
        key: lock::request_key(&R),
    });
    assert_eq!(guard.apply(&plain).await, Ok(Outcome::Committed));
    assert_eq!(counted.applies.load(Ordering::SeqCst), 1);
    assert_eq!(counted.reads.load(Ordering::SeqCst), 0);
    assert_eq!(counted.guards.lock().unwrap()[0], plain.preconditions);
}

#[tokio::test]
async fn a_lock_batch_is_read_once_and_committed_guarded_on_what_it_read() {
    let (counted, guard) = counted();
    let open = lock_of(10, 200, false, false);
    commit(&guard, vec![put_request(&R, &open)]).await;
    counted.guards.lock().unwrap().clear();
    let reads = counted.reads.load(Ordering::SeqCst);
    // The caller already guards the piece row's absence: not repeated.
    let mut step = batch(vec![
        put_request(&R, &lock_of(10, 250, false, false)),
        put_piece("preserved", "p/0", &R),
    ]);
    let absent = Precondition::Absent {
        partition: partition(),
        key: lock::piece_key("preserved", "p/0"),
    };
    step.preconditions.push(absent.clone());
    assert_eq!(guard.apply(&step).await, Ok(Outcome::Committed));
    assert_eq!(counted.reads.load(Ordering::SeqCst), reads + 1);
    let equals = Precondition::Equals {
        partition: partition(),
        key: lock::request_key(&R),
        value: open.encode().to_vec(),
    };
    assert_eq!(*counted.guards.lock().unwrap(), vec![vec![absent, equals]]);
}

#[tokio::test]
async fn a_callers_failed_precondition_is_its_own_answer_and_not_retried() {
    let (counted, guard) = counted();
    let mut step = batch(vec![put_request(&R, &lock_of(10, 200, false, false))]);
    step.preconditions.push(Precondition::Equals {
        partition: other_partition(),
        key: b"state".to_vec(),
        value: b"v".to_vec(),
    });
    assert_eq!(
        guard.apply(&step).await,
        Ok(Outcome::PreconditionFailed { index: 0 })
    );
    assert_eq!(counted.applies.load(Ordering::SeqCst), 1);
    assert!(lock_rows(&guard).await.is_empty());
}

#[tokio::test]
async fn a_batch_whose_guards_would_not_fit_one_commit_is_refused_whole() {
    let (_, guard) = counted();
    commit(
        &guard,
        vec![put_request(&R, &lock_of(10, 200, false, false))],
    )
    .await;
    // A caller's batch at its bound, all new piece rows: one guard each
    // would take the commit past its bound.
    let writes = (0..MAX_BATCH_OPS)
        .map(|i| put_piece("preserved", &format!("p/{i}"), &R))
        .collect();
    let result = guard.apply(&batch(writes)).await;
    assert!(
        matches!(&result, Err(KvError::InvalidArgument(d)) if d.message().contains("guard")),
        "{result:?}"
    );
    assert_eq!(lock_rows(&guard).await.len(), 1);
    // A plugin's batch of the reserved 32 lock rows fits.
    let writes = (0..custodian_kv::HOST_RESERVED_OPS)
        .map(|i| put_piece("preserved", &format!("p/{i}"), &R))
        .collect();
    assert_eq!(guard.apply(&batch(writes)).await, Ok(Outcome::Committed));
}

/// Commits `writes` on the inner store just before the guard's first
/// commit reaches it, as another host would between the guard's read and
/// its commit.
struct Interloper {
    writes: std::sync::Mutex<Option<Vec<Write>>>,
    applies: AtomicUsize,
}

#[async_trait]
impl Hook for Interloper {
    async fn before(&self, inner: &dyn Kv, call: Call<'_>) -> Result<(), KvError> {
        if let Call::Apply(_) = call {
            self.applies.fetch_add(1, Ordering::SeqCst);
            let writes = self.writes.lock().unwrap().take();
            if let Some(writes) = writes {
                assert_eq!(
                    inner
                        .apply(&Batch {
                            preconditions: vec![],
                            writes
                        })
                        .await,
                    Ok(Outcome::Committed)
                );
            }
        }
        Ok(())
    }
}

async fn interloped(
    setup: Vec<Write>,
    between: Vec<Write>,
) -> (Arc<Intercepted<Interloper>>, LockGuard) {
    let clock: Arc<dyn Clock> = Arc::new(FixedClock::new(100));
    let inner = Arc::new(MemoryKv::new(clock.clone()));
    commit(inner.as_ref(), setup).await;
    let hooked = Arc::new(Intercepted {
        inner,
        hook: Interloper {
            writes: std::sync::Mutex::new(Some(between)),
            applies: AtomicUsize::new(0),
        },
    });
    let guard = LockGuard::new(hooked.clone(), clock);
    (hooked, guard)
}

#[tokio::test]
async fn a_hold_placed_between_the_read_and_the_commit_stops_a_purge_from_slipping_past() {
    let open = lock_of(10, 50, false, false);
    let (hooked, guard) = interloped(
        vec![put_request(&R, &open)],
        vec![put_request(&R, &lock_of(10, 50, true, false))],
    )
    .await;
    let purge = batch(vec![put_request(&R, &lock_of(10, 50, false, true))]);
    let result = guard.apply(&purge).await;
    assert!(is_retained(&result), "{result:?}");
    assert_eq!(hooked.applies.load(Ordering::SeqCst), 1);
    let row = guard
        .get(&partition(), &lock::request_key(&R))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        lock::RequestLock::decode(&row),
        Ok(lock_of(10, 50, true, false))
    );
}

#[tokio::test]
async fn a_piece_taken_between_the_read_and_the_commit_is_never_handed_over() {
    let (hooked, guard) = interloped(
        vec![
            put_request(&R, &lock_of(10, 50, false, false)),
            put_request(&OTHER, &lock_of(10, 50, false, false)),
        ],
        vec![put_piece("preserved", "p/0", &OTHER)],
    )
    .await;
    let result = guard
        .apply(&batch(vec![put_piece("preserved", "p/0", &R)]))
        .await;
    assert!(is_retained(&result), "{result:?}");
    let row = guard
        .get(&partition(), &lock::piece_key("preserved", "p/0"))
        .await
        .unwrap();
    assert_eq!(row, Some(OTHER.to_vec()));
    assert_eq!(hooked.applies.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_concurrent_change_that_keeps_the_batch_legal_is_checked_again_and_committed() {
    let (hooked, guard) = interloped(
        vec![put_request(&R, &lock_of(10, 50, false, false))],
        vec![put_request(&R, &lock_of(10, 60, false, false))],
    )
    .await;
    let extend = batch(vec![put_request(&R, &lock_of(10, 70, false, false))]);
    assert_eq!(guard.apply(&extend).await, Ok(Outcome::Committed));
    // The first commit failed its guard; the second was checked afresh.
    assert_eq!(hooked.applies.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_concurrent_extension_makes_a_stale_shortening_fail_not_commit() {
    // Read at 50, the batch extends to 55; meanwhile another writer extended
    // to 80: committing 55 now would shorten the lock.
    let (_, guard) = interloped(
        vec![put_request(&R, &lock_of(10, 50, false, false))],
        vec![put_request(&R, &lock_of(10, 80, false, false))],
    )
    .await;
    let result = guard
        .apply(&batch(vec![put_request(
            &R,
            &lock_of(10, 55, false, false),
        )]))
        .await;
    assert!(is_retained(&result), "{result:?}");
}
