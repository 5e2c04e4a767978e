//! The redb KV backend's commit rate against plain redb transactions
//! doing the same reads and write, as figures and ratios measured in one
//! run:
//!
//! ```text
//! cargo bench -p custodian --bench kv_commit [-- WORD]
//! ```
//!
//! Rows, each on its own file in one directory of the same filesystem,
//! taking turns batch by batch so background noise hits them alike:
//! - `raw redb`: one write transaction that reads 2 keys, writes 1 and
//!   commits with `Durability::Immediate` (one fsync) — the reference;
//! - `RedbKv sequential`: `apply` of a batch guarded by `Equals` on 2
//!   existing keys that puts 1 key, one batch at a time;
//! - `RedbKv 64 tasks`: the same batches from 64 concurrent tasks, each on
//!   its own keys, so the writer commits them in groups sharing fsyncs;
//! - `raw redb, no fsync`: the raw transaction with `Durability::None`,
//!   the ceiling when the disk costs nothing.
//!
//! Ratios are throughput relative to `raw redb` (higher is better).

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use custodian::clock::SystemClock;
use custodian::kv::redb::RedbKv;
use custodian::kv::{Batch, Kv, Outcome, Partition, Precondition, Write};
use redb::{Database, Durability, ReadableTable, TableDefinition};

// The server's allocator, with the settings `.cargo/config.toml` compiles
// in, so these figures are what the `custodian` binary's calls cost.
#[path = "../src/allocator.rs"]
mod allocator;

const BATCHES: usize = 7;
/// Commits per batch of the rows that wait for an fsync each.
const PER_BATCH: usize = 100;
/// Commits per batch without fsync: they are ~100 times cheaper.
const PER_BATCH_NO_FSYNC: usize = 5000;
const TASKS: usize = 64;
/// Commits per task per batch of the concurrent row.
const PER_TASK: usize = 10;
const VALUE: &[u8] = &[0x5a; 100];

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("p/bench");

fn wanted(what: &str) -> bool {
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    filter.is_empty() || filter.iter().any(|f| what.contains(f.as_str()))
}

/// The 2 guard keys and the written key of iteration `i` of task `task`.
fn keys(task: usize, i: usize) -> [Vec<u8>; 3] {
    [
        format!("guard-{task}-a").into_bytes(),
        format!("guard-{task}-b").into_bytes(),
        format!("row-{task}-{:04}", i % 1000).into_bytes(),
    ]
}

fn open_raw(path: &Path) -> Database {
    let db = Database::create(path).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut table = txn.open_table(TABLE).unwrap();
        let [a, b, _] = keys(0, 0);
        table.insert(a.as_slice(), VALUE).unwrap();
        table.insert(b.as_slice(), VALUE).unwrap();
    }
    txn.commit().unwrap();
    db
}

/// What `RedbKv` does for one batch, by hand: read the 2 guards, write
/// the row, commit.
fn raw_commit(db: &Database, durability: Durability, i: usize) {
    let [a, b, row] = keys(0, i);
    let mut txn = db.begin_write().unwrap();
    txn.set_durability(durability).unwrap();
    {
        let mut table = txn.open_table(TABLE).unwrap();
        let holds = |key: &[u8]| table.get(key).unwrap().is_some_and(|v| v.value() == VALUE);
        assert!(holds(&a) && holds(&b));
        table.insert(row.as_slice(), VALUE).unwrap();
    }
    txn.commit().unwrap();
}

fn partition() -> Partition {
    Partition::new("bench").unwrap()
}

/// The guarded batch of iteration `i` of task `task`.
fn batch(task: usize, i: usize) -> Batch {
    let [a, b, row] = keys(task, i);
    let equals = |key: Vec<u8>| Precondition::Equals {
        partition: partition(),
        key,
        value: VALUE.to_vec(),
    };
    Batch {
        preconditions: vec![equals(a), equals(b)],
        writes: vec![Write::Put {
            partition: partition(),
            key: row,
            value: VALUE.to_vec(),
        }],
    }
}

async fn open_kv(path: &Path) -> RedbKv {
    let kv = RedbKv::open(path, Arc::new(SystemClock)).unwrap();
    for task in 0..TASKS {
        let [a, b, _] = keys(task, 0);
        let put = |key: Vec<u8>| Write::Put {
            partition: partition(),
            key,
            value: VALUE.to_vec(),
        };
        let seed = Batch {
            preconditions: Vec::new(),
            writes: vec![put(a), put(b)],
        };
        assert_eq!(kv.apply(&seed).await, Ok(Outcome::Committed));
    }
    kv
}

fn main() {
    let io = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let scratch =
        tempfile::tempdir_in(std::env::var_os("CUSTODIAN_BENCH_DIR").unwrap_or_else(|| ".".into()))
            .unwrap();
    println!(
        "environment: RUST_BACKTRACE={}, directory {} (set CUSTODIAN_BENCH_DIR to measure another disk)",
        std::env::var("RUST_BACKTRACE").unwrap_or_else(|_| "unset".into()),
        scratch.path().display()
    );
    let raw = open_raw(&scratch.path().join("raw.redb"));
    let raw_none = open_raw(&scratch.path().join("raw-none.redb"));
    let sequential = io.block_on(open_kv(&scratch.path().join("kv.redb")));
    let grouped = io.block_on(open_kv(&scratch.path().join("kv-grouped.redb")));
    let names = [
        "raw redb (2 reads, 1 write, fsync)",
        "RedbKv sequential",
        "RedbKv 64 tasks (group commit)",
        "raw redb, no fsync (ceiling)",
    ];
    let mut times: [Vec<f64>; 4] = Default::default();
    for round in 0..BATCHES {
        let base = round * PER_BATCH_NO_FSYNC;
        if wanted(names[0]) {
            let started = Instant::now();
            for i in 0..PER_BATCH {
                raw_commit(&raw, Durability::Immediate, base + i);
            }
            times[0].push(started.elapsed().as_secs_f64() / PER_BATCH as f64);
        }
        if wanted(names[1]) {
            let started = Instant::now();
            io.block_on(async {
                for i in 0..PER_BATCH {
                    let outcome = sequential.apply(&batch(0, base + i)).await;
                    black_box(outcome.unwrap());
                }
            });
            times[1].push(started.elapsed().as_secs_f64() / PER_BATCH as f64);
        }
        if wanted(names[2]) {
            let started = Instant::now();
            io.block_on(async {
                let tasks: Vec<_> = (0..TASKS)
                    .map(|task| {
                        let kv = grouped.clone();
                        tokio::spawn(async move {
                            for i in 0..PER_TASK {
                                let outcome = kv.apply(&batch(task, base + i)).await;
                                assert_eq!(outcome, Ok(Outcome::Committed));
                            }
                        })
                    })
                    .collect();
                for task in tasks {
                    task.await.unwrap();
                }
            });
            times[2].push(started.elapsed().as_secs_f64() / (TASKS * PER_TASK) as f64);
        }
        if wanted(names[3]) {
            let started = Instant::now();
            for i in 0..PER_BATCH_NO_FSYNC {
                raw_commit(&raw_none, Durability::None, base + i);
            }
            times[3].push(started.elapsed().as_secs_f64() / PER_BATCH_NO_FSYNC as f64);
            // Untimed: a durable commit lets redb free what the
            // non-durable ones kept, so the file does not grow batch
            // after batch.
            raw_commit(&raw_none, Durability::Immediate, base);
        }
    }
    let median = |t: &mut Vec<f64>| {
        t.sort_by(f64::total_cmp);
        t.get(t.len() / 2).copied()
    };
    let medians: Vec<Option<f64>> = times.iter_mut().map(median).collect();
    println!(
        "{:<40} {:>12} {:>12}   vs raw redb",
        "what", "per commit", "commits/s"
    );
    for (name, seconds) in names.iter().zip(&medians) {
        let Some(seconds) = seconds else { continue };
        let ratio = medians[0].map_or(String::from("-"), |raw| format!("{:.2}x", raw / seconds));
        println!(
            "{name:<40} {:>9.3} ms {:>12.0}   {ratio}",
            seconds * 1e3,
            1.0 / seconds
        );
    }
    if let [Some(a), Some(b), Some(c), _] = medians[..] {
        println!(
            "b/a (RedbKv sequential / raw redb) = {:.2}; c/a (RedbKv 64 tasks / raw redb) = {:.2}",
            a / b,
            a / c
        );
    }
}
