//! Tests that need more than one process: a second process opening the
//! file, and a writer killed (SIGKILL) at random moments.
//!
//! Each test re-executes its own test binary as the child process:
//! `current_exe() --exact <this test>` with a variable set to what the
//! child should do. The test function sees the variable and plays the
//! child instead of the parent.

use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::RedbKv;
use super::tests::{p, put, scan_all};
use crate::conformance::XorShift;
use crate::{Batch, Kv, KvError, Outcome, Precondition};
use custodian_base::child_process::{ChildTests, stderr_of, wait_for};
use custodian_base::clock::SystemClock;

/// This module's child processes, told their role in this variable.
const CHILDREN: ChildTests = ChildTests::new(module_path!(), "CUSTODIAN_REDB_TEST_CHILD");

fn block_on<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(future)
}

fn open(path: &Path) -> RedbKv {
    RedbKv::open(path, Arc::new(SystemClock)).expect("opening the store")
}

/// Runs a child to completion; panics with its stderr if it failed.
fn run_child(name: &str, role: &str) {
    let mut child = CHILDREN.spawn(name, role);
    let status = child.wait().expect("waiting for the child");
    assert!(
        status.success(),
        "the child failed: {}",
        stderr_of(&mut child)
    );
}

// ── a second process ─────────────────────────────────────────────────

#[test]
fn another_process_opening_the_same_file_is_told_it_is_in_use() {
    const NAME: &str = "another_process_opening_the_same_file_is_told_it_is_in_use";
    if let Some(role) = CHILDREN.role() {
        let [expect, path] = role.split('\t').collect::<Vec<_>>()[..] else {
            panic!("bad role {role:?}")
        };
        let path = Path::new(path);
        match (expect, RedbKv::open(path, Arc::new(SystemClock))) {
            ("busy", Err(KvError::InUse(message))) => assert_eq!(
                message,
                format!(
                    "the data directory's KV file {} is already in use by another custodian \
                     process",
                    path.display()
                )
            ),
            ("free", Ok(kv)) => {
                assert_eq!(block_on(kv.get(&p("a"), b"k")), Ok(Some(b"v".to_vec())));
            }
            (expect, got) => panic!("expected the file {expect}, got {got:?}"),
        }
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.redb");
    let kv = open(&path);
    let batch = Batch {
        preconditions: Vec::new(),
        writes: vec![put("a", b"k", b"v")],
    };
    assert_eq!(block_on(kv.apply(&batch)), Ok(Outcome::Committed));
    run_child(NAME, &format!("busy\t{}", path.display()));
    drop(kv);
    run_child(NAME, &format!("free\t{}", path.display()));
}

// ── a writer killed at random moments ────────────────────────────────

/// Concurrent writers in the child, so kills land inside group commits.
const WRITERS: u8 = 4;
const KILLS: usize = 16;

/// The counter row of writer `who`.
fn counter_key(who: u8) -> Vec<u8> {
    vec![b'c', who]
}

/// The row writer `who` adds with generation `n`.
fn row_key(who: u8, n: u64) -> Vec<u8> {
    let mut key = vec![b'r', who];
    key.extend_from_slice(&n.to_be_bytes());
    key
}

/// The generation `n` batch of writer `who`: moves its counter from
/// `n - 1` to `n` and adds its row `n`, in two partitions, so a torn
/// batch shows as a counter without its row or a row without its
/// counter.
fn generation(who: u8, n: u64) -> Batch {
    let counter = counter_key(who);
    let guard = if n == 1 {
        Precondition::Absent {
            partition: p("counters"),
            key: counter.clone(),
        }
    } else {
        Precondition::Equals {
            partition: p("counters"),
            key: counter.clone(),
            value: (n - 1).to_be_bytes().to_vec(),
        }
    };
    Batch {
        preconditions: vec![guard],
        writes: vec![
            put("counters", &counter, &n.to_be_bytes()),
            put("rows", &row_key(who, n), &[who]),
        ],
    }
}

/// Writer `who`'s current generation.
async fn current(kv: &RedbKv, who: u8) -> u64 {
    match kv.get(&p("counters"), &counter_key(who)).await.unwrap() {
        Some(bytes) => u64::from_be_bytes(bytes.try_into().expect("an 8-byte counter")),
        None => 0,
    }
}

/// The child: each writer commits generation after generation until
/// killed, appending each acknowledged one to its file (no fsync: the
/// kill is of the process, not the machine, so the page cache survives).
fn killed_child(role: &str) {
    let [path, ready, acked] = role.split('\t').collect::<Vec<_>>()[..] else {
        panic!("bad role {role:?}")
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    runtime.block_on(async {
        let kv = open(Path::new(path));
        let mut writers = tokio::task::JoinSet::new();
        for who in 0..WRITERS {
            let kv = kv.clone();
            let acked = format!("{acked}-{who}");
            writers.spawn(async move {
                let mut acked = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(acked)
                    .unwrap();
                // A generation committed but not acknowledged before the
                // last kill is read back now: acknowledge it, or the
                // parent would find the next one two ahead of the log.
                let mut n = current(&kv, who).await;
                acked.write_all(format!("{n}\n").as_bytes()).unwrap();
                loop {
                    n += 1;
                    match kv.apply(&generation(who, n)).await {
                        // One write per line: a kill between a number and
                        // its newline would glue it to the next child's
                        // first line.
                        Ok(Outcome::Committed) => {
                            acked.write_all(format!("{n}\n").as_bytes()).unwrap();
                        }
                        other => return format!("writer {who}, generation {n}: {other:?}"),
                    }
                }
            });
        }
        std::fs::write(ready, b"").unwrap();
        // Writers run until killed: one that returns has failed.
        let stopped = writers.join_next().await;
        panic!("{stopped:?}");
    });
}

fn last_acked(acked: &str, who: u8) -> u64 {
    std::fs::read_to_string(format!("{acked}-{who}"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.parse().ok())
        .max()
        .unwrap_or(0)
}

#[test]
fn a_writer_killed_at_random_moments_loses_no_acknowledged_batch() {
    const NAME: &str = "a_writer_killed_at_random_moments_loses_no_acknowledged_batch";
    if let Some(role) = CHILDREN.role() {
        killed_child(&role);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.redb");
    let acked = dir.path().join("acked").display().to_string();
    let mut rng = XorShift::from_time("kill schedule");
    let mut unacknowledged = 0;
    for kill in 0..KILLS {
        let ready = dir.path().join(format!("ready-{kill}"));
        let role = format!("{}\t{}\t{acked}", path.display(), ready.display());
        let mut child = CHILDREN.spawn(NAME, &role);
        wait_for(&ready, &mut child);
        std::thread::sleep(Duration::from_micros(rng.below(100_000)));
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the writer stopped ({status}): {}", stderr_of(&mut child));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let kv = open(&path);
        block_on(async {
            for who in 0..WRITERS {
                let acked = last_acked(&acked, who);
                let now = current(&kv, who).await;
                assert!(
                    (acked..=acked + 1).contains(&now),
                    "writer {who}: generation {now}, last acknowledged {acked}"
                );
                unacknowledged += usize::from(now > acked);
                let rows = scan_all(&kv, "rows", &[b'r', who], Some(&[b'r', who + 1])).await;
                let want: Vec<_> = (1..=now).map(|n| (row_key(who, n), vec![who])).collect();
                assert!(rows == want, "writer {who}: rows torn from counter {now}");
            }
        });
    }
    eprintln!("{KILLS} kills, {unacknowledged} committed-but-unacknowledged generations seen");
}
