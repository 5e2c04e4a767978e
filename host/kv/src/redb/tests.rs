//! The conformance suite on a temporary file, and what only a durable,
//! group-committing, file-locking backend has to show.

use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use ::redb::{Database, ReadableDatabase};

use super::RedbKv;
use super::test_backend::{Probe, ProbedBackend};
use crate::{Batch, Kv, KvError, MAX_VALUE_BYTES, Outcome, Partition, Precondition, Write};
use custodian_base::clock::FixedClock;

impl RedbKv {
    /// An empty store in a directory of its own, removed with the store.
    pub(super) fn temporary(clock: Arc<FixedClock>) -> Self {
        Self::temporary_with_cache(clock, super::DEFAULT_CACHE_BYTES)
    }

    /// As [`RedbKv::temporary`], caching at most `cache_bytes` of pages.
    fn temporary_with_cache(clock: Arc<FixedClock>, cache_bytes: usize) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut kv = Self::open_with_cache(&dir.path().join("kv.redb"), clock, cache_bytes)
            .expect("opening the store");
        Arc::get_mut(&mut kv.inner)
            .expect("a store just opened has one handle")
            .temp = Some(dir);
        kv
    }
}

crate::kv_conformance_tests!(|clock: Arc<FixedClock>| RedbKv::temporary(clock));

/// The whole suite again on a cache of 16 pages, far less than the suite's
/// largest values and batches: a bounded cache must change what stays in
/// memory, never what is read or committed.
mod tiny_cache {
    use std::sync::Arc;

    use super::RedbKv;
    use custodian_base::clock::FixedClock;

    crate::kv_conformance_tests!(|clock: Arc<FixedClock>| RedbKv::temporary_with_cache(
        clock,
        16 * 4096
    ));
}

/// A store on a probed backend, to count fsyncs or inject failures.
pub(super) fn probed(path: &Path, clock: Arc<FixedClock>) -> (RedbKv, Arc<Probe>) {
    let (backend, probe) = ProbedBackend::open(path);
    let db = Database::builder()
        .create_with_backend(backend)
        .expect("creating the database");
    let kv = RedbKv::from_database(db, path.to_owned(), clock).expect("starting the store");
    (kv, probe)
}

pub(super) fn p(name: &str) -> Partition {
    Partition::new(name).expect("test partition names are valid")
}

pub(super) fn put(partition: &str, key: &[u8], value: &[u8]) -> Write {
    Write::Put {
        partition: p(partition),
        key: key.to_vec(),
        value: value.to_vec(),
    }
}

fn guarded(precondition: Precondition, writes: Vec<Write>) -> Batch {
    Batch {
        preconditions: vec![precondition],
        writes,
    }
}

fn equals(key: &[u8], value: &[u8]) -> Precondition {
    Precondition::Equals {
        partition: p("a"),
        key: key.to_vec(),
        value: value.to_vec(),
    }
}

fn absent(partition: &str, key: &[u8]) -> Precondition {
    Precondition::Absent {
        partition: p(partition),
        key: key.to_vec(),
    }
}

fn clock() -> Arc<FixedClock> {
    Arc::new(FixedClock::new(1_000_000))
}

/// The names of the tables in the file.
fn tables(kv: &RedbKv) -> Vec<String> {
    let txn = kv.inner.db.begin_read().expect("a read transaction");
    txn.list_tables()
        .expect("listing tables")
        .map(|t| ::redb::TableHandle::name(&t).to_owned())
        .collect()
}

/// Polls `apply` once, which queues the batch (the leader lock is held),
/// and returns the rest of the call.
async fn send<'a>(
    kv: &'a RedbKv,
    batch: &'a Batch,
) -> Pin<Box<dyn Future<Output = Result<Outcome, KvError>> + Send + 'a>> {
    let mut call = kv.apply(batch);
    // A zero timeout still polls the call once before giving up on it.
    let polled = tokio::time::timeout(Duration::ZERO, call.as_mut()).await;
    assert!(polled.is_err(), "the batch was answered before it was sent");
    call
}

#[tokio::test]
async fn commits_survive_dropping_and_reopening_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.redb");
    let kv = RedbKv::open(&path, clock()).unwrap();
    let batch = Batch {
        preconditions: Vec::new(),
        writes: vec![put("a", b"k", b"v"), put("b", b"k2", b"v2")],
    };
    assert_eq!(kv.apply(&batch).await, Ok(Outcome::Committed));
    drop(kv);
    let kv = RedbKv::open(&path, clock()).expect("the dropped store released the file");
    assert_eq!(kv.get(&p("a"), b"k").await, Ok(Some(b"v".to_vec())));
    assert_eq!(kv.get(&p("b"), b"k2").await, Ok(Some(b"v2".to_vec())));
}

#[tokio::test]
async fn a_store_far_larger_than_its_cache_reads_back_every_row_after_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.redb");
    let cache = 16 * 4096;
    let kv = RedbKv::open_with_cache(&path, clock(), cache).unwrap();
    // 64 batches of 32 rows of 1 KiB: 2 MiB, 32 times the cache.
    let value = |i: u32| vec![(i % 251) as u8; 1024];
    for batch in 0..64u32 {
        let writes = (0..32)
            .map(|row| {
                let i = batch * 32 + row;
                put("big", format!("k{i:05}").as_bytes(), &value(i))
            })
            .collect();
        let batch = Batch {
            preconditions: Vec::new(),
            writes,
        };
        assert_eq!(kv.apply(&batch).await, Ok(Outcome::Committed));
    }
    drop(kv);
    let kv = RedbKv::open_with_cache(&path, clock(), cache).unwrap();
    for i in (0..64 * 32).step_by(7) {
        let key = format!("k{i:05}");
        assert_eq!(
            kv.get(&p("big"), key.as_bytes()).await,
            Ok(Some(value(i))),
            "{key}"
        );
    }
}

#[tokio::test]
async fn the_file_stays_locked_until_the_last_clone_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.redb");
    let kv = RedbKv::open(&path, clock()).unwrap();
    let clone = kv.clone();
    drop(kv);
    assert!(matches!(
        RedbKv::open(&path, clock()),
        Err(KvError::InUse(_))
    ));
    let batch = Batch {
        preconditions: Vec::new(),
        writes: vec![put("a", b"k", b"v")],
    };
    assert_eq!(clone.apply(&batch).await, Ok(Outcome::Committed));
    drop(clone);
    RedbKv::open(&path, clock()).expect("the last clone released the file");
}

#[tokio::test]
async fn a_second_open_of_the_same_file_in_this_process_is_refused_as_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.redb");
    let _kv = RedbKv::open(&path, clock()).unwrap();
    match RedbKv::open(&path, clock()) {
        Err(KvError::InUse(message)) => {
            let expected = format!(
                "the data directory's KV file {} is already in use by another custodian process",
                path.display()
            );
            assert_eq!(message, expected);
        }
        other => panic!("a second open should be refused, got {other:?}"),
    }
}

#[tokio::test]
async fn a_refused_open_keeps_redbs_refusal_as_its_source_and_does_not_repeat_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.redb");
    let _kv = RedbKv::open(&path, clock()).unwrap();
    let error = RedbKv::open(&path, clock()).expect_err("the file is held");
    let source = std::error::Error::source(&error).expect("redb's error is the source");
    assert!(
        matches!(
            source.downcast_ref::<::redb::DatabaseError>(),
            Some(::redb::DatabaseError::DatabaseAlreadyOpen)
        ),
        "{source:?}"
    );
    assert!(!error.to_string().contains(&source.to_string()), "{error}");
    assert_eq!(error.to_line(), format!("{error}: {source}"));
}

#[tokio::test]
async fn a_corrupt_file_keeps_redbs_error_as_the_source_of_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.redb");
    std::fs::write(&path, vec![0x5a; 64 * 1024]).unwrap();
    let error = RedbKv::open(&path, clock()).expect_err("not a database");
    assert!(matches!(error, KvError::Corrupt(_)), "{error:?}");
    let source = std::error::Error::source(&error).expect("redb's error is the source");
    assert!(
        source.downcast_ref::<::redb::Error>().is_some(),
        "{source:?}"
    );
    assert_eq!(
        error.to_string(),
        format!("kv data corrupt: opening {}", path.display())
    );
}

#[tokio::test]
async fn opening_creates_the_missing_directory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data").join("deeper").join("kv.redb");
    let kv = RedbKv::open(&path, clock()).unwrap();
    assert_eq!(kv.get(&p("a"), b"k").await, Ok(None));
    assert!(path.is_file());
}

#[tokio::test]
async fn a_file_that_is_not_a_database_is_reported_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.redb");
    std::fs::write(&path, vec![0x5a; 64 * 1024]).unwrap();
    let got = RedbKv::open(&path, clock());
    assert!(matches!(got, Err(KvError::Corrupt(_))), "{got:?}");
}

#[tokio::test]
async fn a_damaged_file_is_reported_corrupt_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.redb");
    let kv = RedbKv::open(&path, clock()).unwrap();
    let batch = Batch {
        preconditions: Vec::new(),
        writes: (0..40u8).map(|i| put("a", &[i], &[i; 3000])).collect(),
    };
    assert_eq!(kv.apply(&batch).await, Ok(Outcome::Committed));
    drop(kv);
    // The page after the header holds the allocator's and the trees'
    // first pages: garbled, redb panics while opening the file.
    let mut bytes = std::fs::read(&path).unwrap();
    for byte in &mut bytes[4096..8192] {
        *byte ^= 0xa5;
    }
    std::fs::write(&path, &bytes).unwrap();
    let got = RedbKv::open(&path, clock());
    assert!(matches!(got, Err(KvError::Corrupt(_))), "{got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_thirty_two_tasks_guarded_on_the_same_absent_row_exactly_one_commits() {
    let kv = RedbKv::temporary(clock());
    for round in 0..5u8 {
        let key = [b'k', round];
        let tasks: Vec<_> = (0..32u8)
            .map(|who| {
                let kv = kv.clone();
                tokio::spawn(async move {
                    let batch = guarded(absent("a", &key), vec![put("a", &key, &[who])]);
                    (who, kv.apply(&batch).await)
                })
            })
            .collect();
        let mut winners = Vec::new();
        for task in tasks {
            let (who, outcome) = task.await.unwrap();
            match outcome.unwrap() {
                Outcome::Committed => winners.push(who),
                Outcome::PreconditionFailed { index: 0 } => {}
                other => panic!("unexpected outcome {other:?}"),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
        assert_eq!(kv.get(&p("a"), &key).await, Ok(Some(vec![winners[0]])));
    }
}

#[tokio::test]
async fn batches_in_one_group_see_the_writes_of_the_batches_before_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.redb");
    let (kv, probe) = probed(&path, clock());
    let seed = guarded(absent("a", b"x"), vec![put("a", b"x", b"0")]);
    assert_eq!(kv.apply(&seed).await, Ok(Outcome::Committed));
    // Hold the leader lock, so everything sent meanwhile queues and the
    // first caller to lead after it is released commits it as one group.
    let plug = kv.inner.writer.hold().await;
    let plug_batch = guarded(absent("a", b"plug"), vec![put("a", b"plug", b"")]);
    let chain = [
        guarded(equals(b"x", b"0"), vec![put("a", b"x", b"1")]),
        guarded(equals(b"x", b"1"), vec![put("a", b"x", b"2")]),
        guarded(equals(b"x", b"1"), vec![put("a", b"x", b"lost")]),
        guarded(equals(b"x", b"2"), vec![put("b", b"y", b"seen 2")]),
    ];
    let plugged = send(&kv, &plug_batch).await;
    let mut calls = Vec::new();
    for batch in &chain {
        calls.push(send(&kv, batch).await);
    }
    let syncs_before = probe.syncs.load(Ordering::SeqCst);
    drop(plug);
    assert_eq!(plugged.await, Ok(Outcome::Committed));
    let mut outcomes = Vec::new();
    for call in calls {
        outcomes.push(call.await.unwrap());
    }
    assert_eq!(
        outcomes,
        [
            Outcome::Committed,
            Outcome::Committed,
            Outcome::PreconditionFailed { index: 0 },
            Outcome::Committed,
        ]
    );
    // One commit each would take at least 4 fsyncs (the plug's and three
    // of the chain's); one group takes one, plus one when the commit grows
    // the file.
    let syncs = probe.syncs.load(Ordering::SeqCst) - syncs_before;
    assert!(syncs < 4, "{syncs} fsyncs: the chain was not one group");
    assert_eq!(kv.get(&p("a"), b"x").await, Ok(Some(b"2".to_vec())));
    assert_eq!(kv.get(&p("b"), b"y").await, Ok(Some(b"seen 2".to_vec())));
}

#[tokio::test]
async fn batches_too_large_for_one_group_are_carried_to_the_next() {
    let kv = RedbKv::temporary(clock());
    // Hold the leader lock so all the batches queue and must be split.
    let plug = kv.inner.writer.hold().await;
    let big = |i: u8| Batch {
        preconditions: Vec::new(),
        writes: (0..3u8)
            .map(|j| put("a", &[i, j], &vec![i; MAX_VALUE_BYTES]))
            .collect(),
    };
    let batches: Vec<Batch> = (0..12).map(big).collect();
    let mut calls = Vec::new();
    for batch in &batches {
        calls.push(send(&kv, batch).await);
    }
    drop(plug);
    for call in calls {
        assert_eq!(call.await, Ok(Outcome::Committed));
    }
    for i in 0..12u8 {
        for j in 0..3u8 {
            let value = kv.get(&p("a"), &[i, j]).await.unwrap();
            assert!(value == Some(vec![i; MAX_VALUE_BYTES]), "row {i}/{j}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_batches_share_fsyncs() {
    let dir = tempfile::tempdir().unwrap();
    let (kv, probe) = probed(&dir.path().join("kv.redb"), clock());
    let before = probe.syncs.load(Ordering::SeqCst);
    let tasks: Vec<_> = (0..64u8)
        .map(|who| {
            let kv = kv.clone();
            tokio::spawn(async move {
                let batch = guarded(absent("a", &[who]), vec![put("a", &[who], b"v")]);
                kv.apply(&batch).await
            })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap(), Ok(Outcome::Committed));
    }
    let syncs = probe.syncs.load(Ordering::SeqCst) - before;
    assert!(syncs < 64, "64 concurrent commits took {syncs} fsyncs");
    let page = kv.scan(&p("a"), b"\0", None, None, 100).await.unwrap();
    assert_eq!(page.entries.len(), 64);
}

#[tokio::test]
async fn a_batch_whose_guard_fails_costs_no_fsync() {
    let dir = tempfile::tempdir().unwrap();
    let (kv, probe) = probed(&dir.path().join("kv.redb"), clock());
    let batch = guarded(absent("a", b"k"), vec![put("a", b"k", b"v")]);
    assert_eq!(kv.apply(&batch).await, Ok(Outcome::Committed));
    let before = probe.syncs.load(Ordering::SeqCst);
    assert_eq!(
        kv.apply(&batch).await,
        Ok(Outcome::PreconditionFailed { index: 0 })
    );
    assert_eq!(probe.syncs.load(Ordering::SeqCst), before);
}

#[tokio::test]
async fn a_partition_has_a_table_exactly_while_it_holds_a_row() {
    let kv = RedbKv::temporary(clock());
    let commit = |batch: Batch| {
        let kv = kv.clone();
        async move { assert_eq!(kv.apply(&batch).await, Ok(Outcome::Committed)) }
    };
    commit(Batch {
        preconditions: vec![absent("guarded", b"k")],
        writes: vec![put("written", b"k", b"v")],
    })
    .await;
    assert_eq!(tables(&kv), ["p/written"]);
    commit(Batch {
        preconditions: Vec::new(),
        writes: vec![Write::Delete {
            partition: p("written"),
            key: b"k".to_vec(),
        }],
    })
    .await;
    assert!(tables(&kv).is_empty(), "{:?}", tables(&kv));
    assert_eq!(kv.get(&p("written"), b"k").await, Ok(None));
}

#[tokio::test]
async fn a_store_whose_storage_failed_answers_unavailable_until_reopened() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.redb");
    let (kv, probe) = probed(&path, clock());
    probe.fail_after(0);
    let batch = Batch {
        preconditions: Vec::new(),
        writes: vec![put("a", b"k", b"v")],
    };
    for _ in 0..2 {
        let got = kv.apply(&batch).await;
        assert!(matches!(got, Err(KvError::Unavailable(_))), "{got:?}");
    }
    drop(kv);
    let kv = RedbKv::open(&path, clock()).unwrap();
    assert_eq!(kv.apply(&batch).await, Ok(Outcome::Committed));
}

/// Every row of `partition` in `[start, end)`, page after page.
pub(super) async fn scan_all(
    kv: &impl Kv,
    partition: &str,
    start: &[u8],
    end: Option<&[u8]>,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut rows = Vec::new();
    let mut cursor: Option<Vec<u8>> = None;
    loop {
        let page = kv
            .scan(&p(partition), start, end, cursor.as_deref(), 1000)
            .await
            .expect("scanning");
        rows.extend(page.entries);
        match page.next {
            Some(next) => cursor = Some(next),
            None => return rows,
        }
    }
}

#[tokio::test]
async fn an_apply_dropped_before_its_batch_was_taken_never_commits() {
    let kv = RedbKv::temporary(clock());
    let plug = kv.inner.writer.hold().await;
    let dropped = guarded(absent("a", b"dropped"), vec![put("a", b"dropped", b"x")]);
    drop(send(&kv, &dropped).await);
    drop(plug);
    let later = guarded(absent("a", b"later"), vec![put("a", b"later", b"y")]);
    assert_eq!(kv.apply(&later).await, Ok(Outcome::Committed));
    assert_eq!(kv.get(&p("a"), b"dropped").await, Ok(None));
    assert_eq!(kv.get(&p("a"), b"later").await, Ok(Some(b"y".to_vec())));
}

#[tokio::test]
async fn a_group_that_writes_is_counted_as_a_commit_of_the_process() {
    let kv = RedbKv::temporary(clock());
    let before = super::commits();
    let batch = Batch {
        preconditions: Vec::new(),
        writes: vec![put("a", b"counted", b"v")],
    };
    assert_eq!(kv.apply(&batch).await, Ok(Outcome::Committed));
    // Other tests commit in this process too: at least this one counted.
    assert!(super::commits() > before, "the commit was counted");
}
