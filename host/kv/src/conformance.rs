//! The behaviour every [`Kv`] backend must show. Each backend's tests
//! instantiate the whole suite with [`kv_conformance_tests!`], handing it a
//! factory that builds an empty store reading the given clock.

use super::{
    Answer, Batch, Kv, KvError, MAX_COMMIT_OPS, MAX_KEY_BYTES, MAX_PAGE_ENTRIES, MAX_READS,
    MAX_VALUE_BYTES, Outcome, Page, Partition, Precondition, Read, Write,
};
use custodian_base::clock::Clock;
/// The clock every check reads (re-exported for the macro's expansion in
/// other crates).
pub use custodian_base::clock::FixedClock;
use std::collections::BTreeMap;

/// Generates one `#[tokio::test]` per conformance check for the backend
/// built by `$factory: Fn(Arc<FixedClock>) -> impl Kv`, or, written
/// `async |clock| ...`, by an async factory answering `Option<impl Kv>`:
/// a backend that needs a server connects asynchronously, and `None`
/// (after saying why) skips the test when the server cannot run.
#[macro_export]
#[doc(hidden)]
macro_rules! kv_conformance_tests {
    (async $($factory:tt)+) => {
        $crate::kv_conformance_tests!(@list [async] (async $($factory)+));
    };
    (@list [$($mode:tt)*] $factory:tt) => {
        $crate::kv_conformance_tests!(@each [$($mode)*] $factory;
            a_missing_key_reads_as_none,
            a_committed_put_is_read_back,
            get_many_answers_in_the_order_asked_with_none_for_absent_keys,
            a_scan_returns_the_range_in_bytewise_order,
            scan_pages_resume_after_the_cursor_and_the_last_page_has_no_cursor,
            a_scan_whose_end_is_not_after_its_start_is_empty,
            a_cursor_outside_the_range_is_invalid,
            a_zero_or_oversized_scan_limit_is_invalid,
            partitions_do_not_see_each_others_keys,
            an_absent_guard_on_an_existing_key_fails_and_writes_nothing,
            an_equals_guard_commits_only_on_the_exact_value,
            the_first_failing_precondition_is_the_one_reported,
            a_passed_deadline_commits_nothing,
            a_deadline_equal_to_now_still_commits,
            a_batch_spanning_partitions_is_all_or_nothing,
            a_later_write_to_the_same_key_wins,
            deleting_an_absent_key_is_not_an_error,
            out_of_bounds_batches_are_refused_before_anything_is_written,
            only_one_of_two_writers_guarded_on_the_same_row_commits,
            random_batches_agree_with_a_btreemap_model,
            a_read_answers_gets_and_scans_over_partitions_in_the_order_asked,
            a_read_sees_each_concurrent_batch_whole_or_not_at_all,
            a_read_beyond_its_bounds_is_refused_whole,
        );
    };
    (@each [] $factory:tt; $($name:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $name() {
                let clock = std::sync::Arc::new($crate::conformance::FixedClock::new(1_000_000));
                let kv = ($factory)(clock.clone());
                $crate::conformance::$name(&kv, &clock).await;
            }
        )+
    };
    (@each [async] $factory:tt; $($name:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $name() {
                let clock = std::sync::Arc::new($crate::conformance::FixedClock::new(1_000_000));
                let Some(kv) = ($factory)(clock.clone()).await else {
                    return;
                };
                $crate::conformance::$name(&kv, &clock).await;
            }
        )+
    };
    ($factory:expr) => {
        $crate::kv_conformance_tests!(@list [] ($factory));
    };
}

fn p(name: &str) -> Partition {
    Partition::new(name).expect("test partition names are valid")
}

fn put(partition: &str, key: &[u8], value: &[u8]) -> Write {
    Write::Put {
        partition: p(partition),
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

fn equals(partition: &str, key: &[u8], value: &[u8]) -> Precondition {
    Precondition::Equals {
        partition: p(partition),
        key: key.to_vec(),
        value: value.to_vec(),
    }
}

fn writes(writes: Vec<Write>) -> Batch {
    Batch {
        preconditions: Vec::new(),
        writes,
    }
}

async fn commit(kv: &impl Kv, batch: Batch) {
    assert_eq!(kv.apply(&batch).await, Ok(Outcome::Committed));
}

async fn fill(kv: &impl Kv, partition: &str, keys: &[&[u8]]) {
    commit(
        kv,
        writes(keys.iter().map(|k| put(partition, k, k)).collect()),
    )
    .await;
}

/// Conformance check: a missing key reads as none.
pub async fn a_missing_key_reads_as_none(kv: &impl Kv, _: &FixedClock) {
    assert_eq!(kv.get(&p("a"), b"nothing").await, Ok(None));
}

/// Conformance check: a committed put is read back.
pub async fn a_committed_put_is_read_back(kv: &impl Kv, _: &FixedClock) {
    commit(kv, writes(vec![put("a", b"k", b"v")])).await;
    assert_eq!(kv.get(&p("a"), b"k").await, Ok(Some(b"v".to_vec())));
}

/// Conformance check: get many answers in the order asked with none for absent keys.
pub async fn get_many_answers_in_the_order_asked_with_none_for_absent_keys(
    kv: &impl Kv,
    _: &FixedClock,
) {
    fill(kv, "a", &[b"x", b"z"]).await;
    let got = kv
        .get_many(&p("a"), &[b"z".to_vec(), b"y".to_vec(), b"x".to_vec()])
        .await;
    assert_eq!(
        got,
        Ok(vec![Some(b"z".to_vec()), None, Some(b"x".to_vec())])
    );
}

/// Conformance check: a scan returns the range in bytewise order.
pub async fn a_scan_returns_the_range_in_bytewise_order(kv: &impl Kv, _: &FixedClock) {
    fill(kv, "a", &[b"b", b"a\xff", b"a", b"c", b"\x00", b"ab"]).await;
    let page = kv.scan(&p("a"), b"a", Some(b"c"), None, 10).await.unwrap();
    let keys: Vec<_> = page.entries.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(
        keys,
        vec![
            b"a".to_vec(),
            b"ab".to_vec(),
            b"a\xff".to_vec(),
            b"b".to_vec()
        ]
    );
    assert_eq!(page.next, None);
}

/// Conformance check: scan pages resume after the cursor and the last page has no cursor.
pub async fn scan_pages_resume_after_the_cursor_and_the_last_page_has_no_cursor(
    kv: &impl Kv,
    _: &FixedClock,
) {
    let keys: Vec<Vec<u8>> = (0u8..7).map(|i| vec![b'k', i]).collect();
    commit(kv, writes(keys.iter().map(|k| put("a", k, b"v")).collect())).await;
    let mut seen = Vec::new();
    let mut cursor: Option<Vec<u8>> = None;
    let mut pages = 0;
    loop {
        let page = kv
            .scan(&p("a"), b"k", None, cursor.as_deref(), 3)
            .await
            .unwrap();
        pages += 1;
        assert!(page.entries.len() <= 3);
        seen.extend(page.entries.into_iter().map(|(k, _)| k));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(seen, keys);
    assert_eq!(pages, 3);
}

/// Conformance check: a scan whose end is not after its start is empty.
pub async fn a_scan_whose_end_is_not_after_its_start_is_empty(kv: &impl Kv, _: &FixedClock) {
    fill(kv, "a", &[b"m"]).await;
    let page = kv.scan(&p("a"), b"m", Some(b"m"), None, 5).await.unwrap();
    assert!(page.entries.is_empty() && page.next.is_none());
    let page = kv.scan(&p("a"), b"n", Some(b"a"), None, 5).await.unwrap();
    assert!(page.entries.is_empty() && page.next.is_none());
}

/// Conformance check: a cursor outside the range is invalid.
pub async fn a_cursor_outside_the_range_is_invalid(kv: &impl Kv, _: &FixedClock) {
    for cursor in [&b"a"[..], b"z"] {
        let got = kv.scan(&p("a"), b"b", Some(b"y"), Some(cursor), 5).await;
        assert!(matches!(got, Err(KvError::InvalidArgument(_))), "{got:?}");
    }
}

/// Conformance check: a zero or oversized scan limit is invalid.
pub async fn a_zero_or_oversized_scan_limit_is_invalid(kv: &impl Kv, _: &FixedClock) {
    for limit in [0, super::MAX_PAGE_ENTRIES + 1] {
        let got = kv.scan(&p("a"), b"", None, None, limit).await;
        assert!(matches!(got, Err(KvError::InvalidArgument(_))), "{got:?}");
    }
}

/// Conformance check: partitions do not see each others keys.
pub async fn partitions_do_not_see_each_others_keys(kv: &impl Kv, _: &FixedClock) {
    commit(
        kv,
        writes(vec![put("one", b"k", b"1"), put("two", b"k", b"2")]),
    )
    .await;
    assert_eq!(kv.get(&p("one"), b"k").await, Ok(Some(b"1".to_vec())));
    assert_eq!(kv.get(&p("two"), b"k").await, Ok(Some(b"2".to_vec())));
    let page = kv.scan(&p("one"), b"", None, None, 10).await.unwrap();
    assert_eq!(page.entries, vec![(b"k".to_vec(), b"1".to_vec())]);
    assert_eq!(kv.get(&p("three"), b"k").await, Ok(None));
}

/// Conformance check: an absent guard on an existing key fails and writes nothing.
pub async fn an_absent_guard_on_an_existing_key_fails_and_writes_nothing(
    kv: &impl Kv,
    _: &FixedClock,
) {
    commit(kv, writes(vec![put("a", b"k", b"old")])).await;
    let batch = Batch {
        preconditions: vec![absent("a", b"k")],
        writes: vec![put("a", b"k", b"new"), put("a", b"other", b"x")],
    };
    assert_eq!(
        kv.apply(&batch).await,
        Ok(Outcome::PreconditionFailed { index: 0 })
    );
    assert_eq!(kv.get(&p("a"), b"k").await, Ok(Some(b"old".to_vec())));
    assert_eq!(kv.get(&p("a"), b"other").await, Ok(None));
}

/// Conformance check: an equals guard commits only on the exact value.
pub async fn an_equals_guard_commits_only_on_the_exact_value(kv: &impl Kv, _: &FixedClock) {
    commit(kv, writes(vec![put("a", b"k", b"v1")])).await;
    for stale in [&b"v"[..], b"v1\0", b"V1"] {
        let batch = Batch {
            preconditions: vec![equals("a", b"k", stale)],
            writes: vec![put("a", b"k", b"v2")],
        };
        assert_eq!(
            kv.apply(&batch).await,
            Ok(Outcome::PreconditionFailed { index: 0 })
        );
    }
    let batch = Batch {
        preconditions: vec![equals("a", b"k", b"v1")],
        writes: vec![put("a", b"k", b"v2")],
    };
    commit(kv, batch).await;
    assert_eq!(kv.get(&p("a"), b"k").await, Ok(Some(b"v2".to_vec())));
}

/// Conformance check: the first failing precondition is the one reported.
pub async fn the_first_failing_precondition_is_the_one_reported(kv: &impl Kv, _: &FixedClock) {
    commit(kv, writes(vec![put("a", b"x", b"1")])).await;
    let batch = Batch {
        preconditions: vec![
            absent("a", b"y"),
            equals("a", b"x", b"1"),
            absent("a", b"x"),
            equals("a", b"x", b"2"),
        ],
        writes: vec![put("a", b"y", b"never")],
    };
    assert_eq!(
        kv.apply(&batch).await,
        Ok(Outcome::PreconditionFailed { index: 2 })
    );
    assert_eq!(kv.get(&p("a"), b"y").await, Ok(None));
}

/// Conformance check: a passed deadline commits nothing.
pub async fn a_passed_deadline_commits_nothing(kv: &impl Kv, clock: &FixedClock) {
    let batch = Batch {
        preconditions: vec![Precondition::NotAfter(clock.now_ms() - 1)],
        writes: vec![put("a", b"k", b"late")],
    };
    assert_eq!(kv.apply(&batch).await, Ok(Outcome::DeadlinePassed));
    assert_eq!(kv.get(&p("a"), b"k").await, Ok(None));
}

/// Conformance check: a deadline equal to now still commits.
pub async fn a_deadline_equal_to_now_still_commits(kv: &impl Kv, clock: &FixedClock) {
    let batch = Batch {
        preconditions: vec![Precondition::NotAfter(clock.now_ms())],
        writes: vec![put("a", b"k", b"on time")],
    };
    commit(kv, batch).await;
    assert_eq!(kv.get(&p("a"), b"k").await, Ok(Some(b"on time".to_vec())));
}

/// Conformance check: a batch spanning partitions is all or nothing.
pub async fn a_batch_spanning_partitions_is_all_or_nothing(kv: &impl Kv, _: &FixedClock) {
    commit(kv, writes(vec![put("two", b"guard", b"taken")])).await;
    let failing = Batch {
        preconditions: vec![absent("two", b"guard")],
        writes: vec![put("one", b"k", b"1"), put("two", b"k", b"2")],
    };
    assert_eq!(
        kv.apply(&failing).await,
        Ok(Outcome::PreconditionFailed { index: 0 })
    );
    assert_eq!(kv.get(&p("one"), b"k").await, Ok(None));
    let passing = Batch {
        preconditions: vec![equals("two", b"guard", b"taken")],
        writes: vec![
            put("one", b"k", b"1"),
            put("two", b"k", b"2"),
            Write::Delete {
                partition: p("two"),
                key: b"guard".to_vec(),
            },
        ],
    };
    commit(kv, passing).await;
    assert_eq!(kv.get(&p("one"), b"k").await, Ok(Some(b"1".to_vec())));
    assert_eq!(kv.get(&p("two"), b"k").await, Ok(Some(b"2".to_vec())));
    assert_eq!(kv.get(&p("two"), b"guard").await, Ok(None));
}

/// Conformance check: a later write to the same key wins.
pub async fn a_later_write_to_the_same_key_wins(kv: &impl Kv, _: &FixedClock) {
    commit(
        kv,
        writes(vec![
            put("a", b"k", b"first"),
            Write::Delete {
                partition: p("a"),
                key: b"k".to_vec(),
            },
            put("a", b"k", b"last"),
        ]),
    )
    .await;
    assert_eq!(kv.get(&p("a"), b"k").await, Ok(Some(b"last".to_vec())));
}

/// Conformance check: deleting an absent key is not an error.
pub async fn deleting_an_absent_key_is_not_an_error(kv: &impl Kv, _: &FixedClock) {
    let batch = writes(vec![Write::Delete {
        partition: p("a"),
        key: b"ghost".to_vec(),
    }]);
    commit(kv, batch).await;
}

/// Conformance check: out of bounds batches are refused before anything is written.
pub async fn out_of_bounds_batches_are_refused_before_anything_is_written(
    kv: &impl Kv,
    _: &FixedClock,
) {
    let too_many = writes(
        (0..=MAX_COMMIT_OPS)
            .map(|i| put("a", format!("k{i}").as_bytes(), b"v"))
            .collect(),
    );
    let long_key = writes(vec![
        put("a", b"ok", b"v"),
        put("a", &vec![b'k'; MAX_KEY_BYTES + 1], b"v"),
    ]);
    let empty_key = writes(vec![put("a", b"ok", b"v"), put("a", b"", b"v")]);
    let big_value = writes(vec![
        put("a", b"ok", b"v"),
        put("a", b"k", &vec![0; MAX_VALUE_BYTES + 1]),
    ]);
    let big_batch = writes(
        (0..6)
            .map(|i| put("a", format!("k{i}").as_bytes(), &vec![0; MAX_VALUE_BYTES]))
            .collect(),
    );
    for batch in [too_many, long_key, empty_key, big_value, big_batch] {
        let got = kv.apply(&batch).await;
        assert!(matches!(got, Err(KvError::InvalidArgument(_))), "{got:?}");
    }
    assert_eq!(kv.get(&p("a"), b"ok").await, Ok(None));
    assert_eq!(kv.get(&p("a"), b"k0").await, Ok(None));
}

/// Conformance check: only one of two writers guarded on the same row commits.
pub async fn only_one_of_two_writers_guarded_on_the_same_row_commits(kv: &impl Kv, _: &FixedClock) {
    commit(kv, writes(vec![put("a", b"row", b"0")])).await;
    let observed = kv.get(&p("a"), b"row").await.unwrap().unwrap();
    let attempt = |value: &'static [u8]| Batch {
        preconditions: vec![equals("a", b"row", &observed)],
        writes: vec![put("a", b"row", value)],
    };
    let (first, second) = (attempt(b"1"), attempt(b"2"));
    let (one, two) = tokio::join!(kv.apply(&first), kv.apply(&second));
    let outcomes = [one.unwrap(), two.unwrap()];
    let committed = outcomes
        .iter()
        .filter(|o| **o == Outcome::Committed)
        .count();
    assert_eq!(committed, 1, "{outcomes:?}");
}

/// A small deterministic generator, so a failure replays from its seed;
/// shared by every backend's randomized and fault tests.
pub struct XorShift(pub u64);

impl XorShift {
    /// Seeded from the time, printed so a failure can be replayed.
    pub fn from_time(what: &str) -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            | 1;
        eprintln!("{what} seed: {seed}");
        Self(seed)
    }

    /// The next number of the sequence.
    // An endless generator, not an iterator: `Option` would only add
    // unwraps to every test that draws from it.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The reference model of a store: every row by partition name and key.
pub type Model = BTreeMap<(String, Vec<u8>), Vec<u8>>;

/// What the model says `batch` does at `now_ms`: its outcome (the first
/// failing precondition decides) and the state after.
pub fn model_apply(model: &Model, batch: &Batch, now_ms: u64) -> (Outcome, Model) {
    for (index, precondition) in batch.preconditions.iter().enumerate() {
        let holds = match precondition {
            Precondition::Absent { partition, key } => {
                !model.contains_key(&(partition.as_str().to_owned(), key.clone()))
            }
            Precondition::Equals {
                partition,
                key,
                value,
            } => model.get(&(partition.as_str().to_owned(), key.clone())) == Some(value),
            Precondition::NotAfter(deadline) => {
                if now_ms > *deadline {
                    return (Outcome::DeadlinePassed, model.clone());
                }
                true
            }
        };
        if !holds {
            let index = u32::try_from(index).expect("batches are bounded far below u32");
            return (Outcome::PreconditionFailed { index }, model.clone());
        }
    }
    let mut after = model.clone();
    for write in &batch.writes {
        match write {
            Write::Put {
                partition,
                key,
                value,
            } => {
                after.insert((partition.as_str().to_owned(), key.clone()), value.clone());
            }
            Write::Delete { partition, key } => {
                after.remove(&(partition.as_str().to_owned(), key.clone()));
            }
        }
    }
    (Outcome::Committed, after)
}

/// The partitions the fault tests' batches write.
pub const FAULT_PARTITIONS: [&str; 2] = ["p0", "p1"];

/// A batch for the fault tests: guards that mostly hold (some stale),
/// writes across [`FAULT_PARTITIONS`], values that carry the round (some
/// spanning several pages), so a committed batch is visible in the state.
pub fn random_batch(rng: &mut XorShift, model: &Model, round: u64) -> Batch {
    let key = |rng: &mut XorShift| vec![b'k', rng.below(16) as u8];
    let mut batch = Batch::default();
    for _ in 0..rng.below(3) {
        let partition = FAULT_PARTITIONS[rng.below(2) as usize];
        let k = key(rng);
        let current = model.get(&(partition.to_owned(), k.clone()));
        batch.preconditions.push(match (current, rng.below(5)) {
            (Some(value), 0..=3) => Precondition::Equals {
                partition: p(partition),
                key: k,
                value: value.clone(),
            },
            (Some(_), _) => Precondition::Equals {
                partition: p(partition),
                key: k,
                value: b"stale".to_vec(),
            },
            (None, _) => Precondition::Absent {
                partition: p(partition),
                key: k,
            },
        });
    }
    for _ in 0..1 + rng.below(6) {
        let partition = FAULT_PARTITIONS[rng.below(2) as usize];
        let k = key(rng);
        batch.writes.push(if rng.below(5) == 0 {
            Write::Delete {
                partition: p(partition),
                key: k,
            }
        } else {
            let len = [1, 100, 6000][rng.below(3) as usize];
            let mut value = round.to_be_bytes().to_vec();
            value.resize(len.max(8), rng.below(256) as u8);
            put(partition, &k, &value)
        });
    }
    batch
}

fn get_of(partition: &str, key: &[u8]) -> Read {
    Read::Get {
        partition: p(partition),
        key: key.to_vec(),
    }
}

fn scan_of(partition: &str, start: &[u8], end: Option<&[u8]>, limit: u32) -> Read {
    Read::Scan {
        partition: p(partition),
        start: start.to_vec(),
        end: end.map(<[u8]>::to_vec),
        cursor: None,
        limit,
    }
}

fn page(keys: &[&[u8]], next: Option<&[u8]>) -> Answer {
    Answer::Page(Page {
        entries: keys.iter().map(|k| (k.to_vec(), k.to_vec())).collect(),
        next: next.map(<[u8]>::to_vec),
    })
}

/// Conformance check: a read answers gets and scans, over several
/// partitions, each as its own call would, in the order asked.
pub async fn a_read_answers_gets_and_scans_over_partitions_in_the_order_asked(
    kv: &impl Kv,
    _: &FixedClock,
) {
    fill(kv, "a", &[b"a1", b"a2", b"a3"]).await;
    fill(kv, "b", &[b"b1", b"b2"]).await;
    let mut cursor_scan = scan_of("a", b"a", None, 1);
    if let Read::Scan { cursor, .. } = &mut cursor_scan {
        *cursor = Some(b"a1".to_vec());
    }
    let reads = [
        get_of("b", b"b2"),
        scan_of("a", b"a", None, 2),
        get_of("a", b"missing"),
        scan_of("b", b"b", Some(b"c"), 10),
        cursor_scan,
        scan_of("a", b"z", Some(b"a"), 5),
        get_of("nothing-here", b"k"),
        scan_of("nothing-here", b"", None, 5),
        get_of("a", b"a1"),
    ];
    assert_eq!(
        kv.read(&reads).await,
        Ok(vec![
            Answer::Value(Some(b"b2".to_vec())),
            page(&[b"a1", b"a2"], Some(b"a2")),
            Answer::Value(None),
            page(&[b"b1", b"b2"], None),
            page(&[b"a2"], Some(b"a2")),
            page(&[], None),
            Answer::Value(None),
            page(&[], None),
            Answer::Value(Some(b"a1".to_vec())),
        ])
    );
    assert_eq!(kv.read(&[]).await, Ok(Vec::new()));
}

/// Conformance check: a read is one snapshot. A writer moves a token
/// between two rows of two partitions, one batch at a time, while reads
/// of both rows (and a scan of each partition) run between its batches:
/// every read finds the token in exactly one place.
pub async fn a_read_sees_each_concurrent_batch_whole_or_not_at_all(kv: &impl Kv, _: &FixedClock) {
    commit(
        kv,
        writes(vec![put("left", b"t", b"1"), put("right", b"t", b"0")]),
    )
    .await;
    let moves = async {
        for round in 0..60u32 {
            let (from, to) = if round % 2 == 0 {
                ("left", "right")
            } else {
                ("right", "left")
            };
            commit(kv, writes(vec![put(from, b"t", b"0"), put(to, b"t", b"1")])).await;
            tokio::task::yield_now().await;
        }
    };
    let reads = async {
        for _ in 0..60 {
            let answers = kv
                .read(&[
                    get_of("left", b"t"),
                    scan_of("left", b"", None, 10),
                    get_of("right", b"t"),
                    scan_of("right", b"", None, 10),
                ])
                .await
                .unwrap();
            let ones = answers
                .iter()
                .filter(|a| match a {
                    Answer::Value(v) => v.as_deref() == Some(b"1"),
                    Answer::Page(p) => p.entries.iter().any(|(_, v)| v == b"1"),
                })
                .count();
            assert_eq!(ones, 2, "a read saw half a batch: {answers:?}");
            tokio::task::yield_now().await;
        }
    };
    tokio::join!(moves, reads);
}

/// Conformance check: a read with too many reads, too many possible
/// entries, or one read its own call would refuse is refused whole.
pub async fn a_read_beyond_its_bounds_is_refused_whole(kv: &impl Kv, _: &FixedClock) {
    let invalid =
        |result: Result<Vec<Answer>, KvError>| matches!(result, Err(KvError::InvalidArgument(_)));
    let many: Vec<Read> = (0..=MAX_READS).map(|_| get_of("a", b"k")).collect();
    assert!(invalid(kv.read(&many).await), "more than MAX_READS reads");
    let wide = [scan_of("a", b"", None, MAX_PAGE_ENTRIES), get_of("a", b"k")];
    assert!(invalid(kv.read(&wide).await), "more than a page of entries");
    let bad = [get_of("a", b"k"), get_of("a", b"")];
    assert!(invalid(kv.read(&bad).await), "an empty key");
    let long = [get_of("a", &vec![b'k'; MAX_KEY_BYTES + 1])];
    assert!(invalid(kv.read(&long).await), "an oversized key");
    let zero = [scan_of("a", b"", None, 0)];
    assert!(invalid(kv.read(&zero).await), "a zero limit");
    let mut outside = scan_of("a", b"m", None, 5);
    if let Read::Scan { cursor, .. } = &mut outside {
        *cursor = Some(b"a".to_vec());
    }
    assert!(
        invalid(kv.read(&[outside]).await),
        "a cursor outside the range"
    );
    // At the bounds exactly, a read is answered.
    let full: Vec<Read> = (0..MAX_READS).map(|_| get_of("a", b"k")).collect();
    assert_eq!(kv.read(&full).await.map(|a| a.len()), Ok(MAX_READS));
}

/// Conformance check: random batches agree with a btreemap model.
pub async fn random_batches_agree_with_a_btreemap_model(kv: &impl Kv, clock: &FixedClock) {
    let mut model = Model::new();
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let partitions = ["p0", "p1"];
    let key = |rng: &mut XorShift| vec![b'k', rng.below(12) as u8];
    let value = |rng: &mut XorShift| vec![rng.below(3) as u8];
    for round in 0..400 {
        let mut batch = Batch::default();
        for _ in 0..rng.below(3) {
            let partition = partitions[rng.below(2) as usize];
            let k = key(&mut rng);
            batch.preconditions.push(match rng.below(5) {
                0 => Precondition::NotAfter(clock.now_ms() + rng.below(3) - 1),
                1 | 2 => absent(partition, &k),
                _ => {
                    let current = model.get(&(partition.to_owned(), k.clone())).cloned();
                    equals(partition, &k, &current.unwrap_or_else(|| value(&mut rng)))
                }
            });
        }
        for _ in 0..rng.below(4) {
            let partition = partitions[rng.below(2) as usize];
            let k = key(&mut rng);
            batch.writes.push(if rng.below(4) == 0 {
                Write::Delete {
                    partition: p(partition),
                    key: k,
                }
            } else {
                put(partition, &k, &value(&mut rng))
            });
        }
        let (expected, after) = model_apply(&model, &batch, clock.now_ms());
        model = after;
        assert_eq!(
            kv.apply(&batch).await,
            Ok(expected),
            "round {round}: {batch:?}"
        );
        for partition in partitions {
            let page = kv.scan(&p(partition), b"", None, None, 100).await.unwrap();
            let want: Vec<_> = model
                .iter()
                .filter(|((part, _), _)| part == partition)
                .map(|((_, k), v)| (k.clone(), v.clone()))
                .collect();
            assert_eq!(page.entries, want, "round {round}, partition {partition}");
        }
        // A snapshot read of a random row and range of each partition.
        let mut reads = Vec::new();
        for partition in partitions {
            reads.push(get_of(partition, &key(&mut rng)));
            let (from, to) = (key(&mut rng), key(&mut rng));
            reads.push(scan_of(
                partition,
                &from,
                Some(&to),
                1 + rng.below(4) as u32,
            ));
        }
        let answers = kv.read(&reads).await.unwrap();
        for (read, answer) in reads.iter().zip(&answers) {
            let want = match read {
                Read::Get { partition, key } => Answer::Value(
                    model
                        .get(&(partition.as_str().to_owned(), key.clone()))
                        .cloned(),
                ),
                Read::Scan {
                    partition,
                    start,
                    end,
                    limit,
                    ..
                } => {
                    let end = end.as_ref().expect("the model's scans are bounded");
                    let rows: Vec<(Vec<u8>, Vec<u8>)> = model
                        .iter()
                        .filter(|((part, k), _)| {
                            part == partition.as_str() && k >= start && k < end
                        })
                        .map(|((_, k), v)| (k.clone(), v.clone()))
                        .collect();
                    let taken: Vec<_> = rows.iter().take(*limit as usize).cloned().collect();
                    let next = (rows.len() > taken.len())
                        .then(|| taken.last().map(|(k, _)| k.clone()))
                        .flatten();
                    Answer::Page(Page {
                        entries: taken,
                        next,
                    })
                }
            };
            assert_eq!(answer, &want, "round {round}: {read:?}");
        }
    }
}
