//! Storage failures injected at every point of a run of commits: the
//! backend refuses every write, resize and fsync from the N-th on, for
//! each N in turn. After the failure the store is dropped and the file
//! reopened on a healthy backend, and what it holds must be the state
//! after some prefix of the batches: every batch acknowledged `Committed`
//! is there, the batch that failed is wholly there or wholly absent
//! (redb cannot always say which: a failed fsync may follow a complete
//! write), and nothing is there partially.

use std::sync::Arc;

use super::RedbKv;
use super::tests::{p, probed, put, scan_all};
use crate::conformance::{
    FAULT_PARTITIONS as PARTITIONS, Model, XorShift, model_apply, random_batch,
};
use crate::{Batch, Kv, KvError, Outcome, Precondition};
use custodian_base::clock::FixedClock;

/// Batches per run; more than any swept failure point needs.
const ROUNDS: u64 = 30;
/// The failure points swept: mutations after the store is open.
const FAIL_POINTS: std::ops::RangeInclusive<u64> = 0..=150;

fn clock() -> Arc<FixedClock> {
    Arc::new(FixedClock::new(1_000_000))
}

/// Everything the store holds, as a model.
async fn state(kv: &impl Kv) -> Model {
    let mut state = Model::new();
    for partition in PARTITIONS {
        for (key, value) in scan_all(kv, partition, b"", None).await {
            state.insert((partition.to_owned(), key), value);
        }
    }
    state
}

/// What became of one run's failing batch.
#[derive(Debug, Default)]
struct Seen {
    runs: usize,
    /// Runs whose budget outlasted every batch.
    never_failed: usize,
    failed_batch_absent: usize,
    failed_batch_present: usize,
}

#[tokio::test]
async fn a_storage_failure_at_any_point_leaves_every_batch_whole_after_reopen() {
    let mut rng = XorShift::from_time("fault injection");
    let mut seen = Seen::default();
    for fail_after in FAIL_POINTS {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kv.redb");
        let (kv, probe) = probed(&path, clock());
        probe.fail_after(fail_after);
        let mut model = Model::new();
        let mut failed = None;
        for round in 0..ROUNDS {
            let batch = random_batch(&mut rng, &model, round);
            let (expected, after) = model_apply(&model, &batch, 0);
            match kv.apply(&batch).await {
                Ok(outcome) => {
                    assert_eq!(outcome, expected, "fail after {fail_after}, round {round}");
                    model = after;
                }
                Err(KvError::Unavailable(message)) => {
                    assert!(
                        probe.tripped(),
                        "an error with no fault injected: {message}"
                    );
                    failed = Some(after);
                    break;
                }
                Err(e) => panic!("fail after {fail_after}, round {round}: {e:?}"),
            }
        }
        drop(kv);
        let kv = RedbKv::open(&path, clock()).expect("reopening after the failure");
        let found = state(&kv).await;
        seen.runs += 1;
        match failed {
            None => {
                seen.never_failed += 1;
                assert!(found == model, "fail after {fail_after}: state differs");
            }
            Some(_) if found == model => seen.failed_batch_absent += 1,
            Some(after) if found == after => seen.failed_batch_present += 1,
            Some(_) => panic!("fail after {fail_after}: a batch was lost or torn"),
        }
        // The repaired file takes new commits.
        let batch = Batch {
            preconditions: Vec::new(),
            writes: vec![put("p0", b"after", b"reopen")],
        };
        assert_eq!(kv.apply(&batch).await, Ok(Outcome::Committed));
    }
    eprintln!("{seen:?}");
    assert!(
        seen.failed_batch_absent + seen.failed_batch_present > seen.runs / 2,
        "most runs should meet their failure: {seen:?}"
    );
}

/// Concurrent writers, each moving its own counter and adding a row per
/// generation, so a failure lands inside group commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storage_failure_during_group_commits_leaves_every_batch_whole_after_reopen() {
    const WRITERS: u8 = 8;
    let mut rng = XorShift::from_time("group fault injection");
    for run in 0..40 {
        let fail_after = rng.below(200);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kv.redb");
        let (kv, probe) = probed(&path, clock());
        probe.fail_after(fail_after);
        let writers: Vec<_> = (0..WRITERS)
            .map(|who| {
                let kv = kv.clone();
                // Answers the last acknowledged generation, and whether
                // the next one failed (and so may or may not be there).
                tokio::spawn(async move {
                    for n in 1..=ROUNDS {
                        let guard = Precondition::Absent {
                            partition: p("p1"),
                            key: vec![who, n as u8],
                        };
                        let batch = Batch {
                            preconditions: vec![guard],
                            writes: vec![
                                put("p0", &[who], &n.to_be_bytes()),
                                put("p1", &[who, n as u8], &[who]),
                            ],
                        };
                        match kv.apply(&batch).await {
                            Ok(Outcome::Committed) => {}
                            Ok(other) => panic!("writer {who}, generation {n}: {other:?}"),
                            Err(KvError::Unavailable(_)) => return (n - 1, true),
                            Err(e) => panic!("writer {who}, generation {n}: {e:?}"),
                        }
                    }
                    (ROUNDS, false)
                })
            })
            .collect();
        let mut acked = Vec::new();
        for writer in writers {
            acked.push(writer.await.unwrap());
        }
        drop(kv);
        let kv = RedbKv::open(&path, clock()).expect("reopening after the failure");
        for (who, (last, failed)) in (0..WRITERS).zip(acked) {
            let counter = kv.get(&p("p0"), &[who]).await.unwrap();
            let now = counter.map_or(0, |c| u64::from_be_bytes(c.try_into().unwrap()));
            let most = if failed { last + 1 } else { last };
            assert!(
                (last..=most).contains(&now),
                "run {run} (fail after {fail_after}): writer {who} at {now}, acknowledged {last}"
            );
            let rows = scan_all(&kv, "p1", &[who], Some(&[who + 1])).await;
            let want: Vec<_> = (1..=now).map(|n| (vec![who, n as u8], vec![who])).collect();
            assert!(
                rows == want,
                "run {run}: writer {who}'s rows torn from its counter"
            );
        }
    }
}
