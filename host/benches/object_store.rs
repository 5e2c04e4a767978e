//! The filesystem store's publish cost against the plain file operations
//! it is built from, as figures and ratios measured in one run:
//!
//! ```text
//! cargo bench -p custodian --bench object_store [-- WORD]
//! ```
//!
//! Rows, per size (4 KiB, 1 MiB, 16 MiB), all in one directory of the
//! same filesystem, taking turns batch by batch so background noise hits
//! them alike:
//! - `write+fsync`: truncate one file, write the bytes, fsync it (the
//!   reference the target is stated against; not crash-safe: a crash
//!   midway leaves a torn file);
//! - `durable rename`: write + fdatasync a temporary file, rename it into
//!   place, fsync the directory — the cheapest crash-safe publish;
//! - `fs put_whole`: the store's publish (CRC check, condition under the
//!   cross-process lock, header and block checksums, and either the
//!   durable rename or, up to 16 KiB, a journal record and a rename);
//! - the same, each batch ended by a `syncfs` of the filesystem, so what
//!   a journaled publish leaves for the kernel to write back (its file and
//!   directory) is paid inside the row's time, as the store's settling
//!   would pay it;
//! - `fs put_whole` from a task on a multi-threaded runtime of two
//!   workers, as the server calls it (the rows above call from a
//!   current-thread runtime).
//!
//! Ratios are throughput relative to `write+fsync` (higher is better).
//!
//! Then concurrent publishes of 64 KiB (word `concurrent`), WRITERS
//! threads for a few seconds each, taking turns:
//! - `durable rename`: each writer publishes new files into one shared
//!   directory, the reference (what a store that keeps no per-key
//!   directories pays);
//! - `fs put, new keys`: `If-None-Match: *` to a fresh key each time (a
//!   key's first publish also creates its directories);
//! - `fs put, rewrites`: each writer rewrites its own few keys.
//!
//! Each concurrent row also prints its p99 and slowest publish.
//!
//! Then one writer publishing new keys of 4 KiB (word `first`): the
//! store's `If-None-Match: *` publish against making a directory and
//! doing the durable rename into it with each sync in turn (the file,
//! the new directory, its parent), median time per publish.
//!
//! Then concurrent deletes (word `deletes`): WRITERS threads delete
//! keys of 4 KiB, each a key of its own (each delete removes the file,
//! fsyncs its directory and prunes it), against the same number of plain
//! `unlink` + directory fsync of files in one directory each. Each row
//! prints deletes per second and its p99.

use std::hint::black_box;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use custodian::checksum::crc64_nvme;
use custodian::clock::SystemClock;
use custodian::object::fs::FsStore;
use custodian::object::{Metadata, ObjectStoreExt, PutCondition};

#[path = "support/disk.rs"]
mod disk;
use disk::syncfs;

// The server's allocator, with the settings `.cargo/config.toml` compiles
// in, so these figures are what the `custodian` binary's calls cost.
#[path = "../src/allocator.rs"]
mod allocator;

const BATCHES: usize = 7;

fn wanted(what: &str) -> bool {
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    filter.is_empty() || filter.iter().any(|f| what.contains(f.as_str()))
}

/// Seconds per call of `call(n)` over `calls` calls, `n` counting from 0.
fn per_call(calls: usize, mut call: impl FnMut(usize)) -> f64 {
    let started = Instant::now();
    for n in 0..calls {
        call(n);
    }
    started.elapsed().as_secs_f64() / calls as f64
}

/// The median of `times` (reordered).
fn median(times: &mut [f64]) -> f64 {
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// Rewrites one file in place, as an unversioned store rewrites one key.
fn write_fsync(dir: &Path, data: &[u8]) {
    let path = dir.join("plain");
    let mut file = std::fs::File::create(&path).unwrap();
    file.write_all(data).unwrap();
    file.sync_all().unwrap();
}

fn durable_rename(dir: &Path, data: &[u8]) {
    let temp = dir.join(".stage");
    let mut file = std::fs::File::create(&temp).unwrap();
    file.write_all(data).unwrap();
    file.sync_data().unwrap();
    std::fs::rename(&temp, dir.join("renamed")).unwrap();
    std::fs::File::open(dir).unwrap().sync_all().unwrap();
}

/// Concurrent writers in the `concurrent` rows.
const WRITERS: usize = 16;
/// How long each concurrent row runs.
const CONCURRENT_SECONDS: f64 = 3.0;

/// What one concurrent row measured.
struct Rate {
    per_second: f64,
    /// 99th percentile of one publish, in ms.
    p99_ms: f64,
    /// The slowest publish, in ms.
    max_ms: f64,
}

/// Runs `publish(writer, n)` on WRITERS threads for CONCURRENT_SECONDS
/// and returns publishes per second and the tail of their latency.
fn concurrently(publish: impl Fn(usize, u64) + Sync) -> Rate {
    let stop = Instant::now() + std::time::Duration::from_secs_f64(CONCURRENT_SECONDS);
    let started = Instant::now();
    let mut took = on_writers(|writer| {
        let mut took = Vec::new();
        let mut n = 0;
        while Instant::now() < stop {
            let one = Instant::now();
            publish(writer, n);
            took.push(one.elapsed().as_secs_f64() * 1e3);
            n += 1;
        }
        took
    });
    took.sort_by(f64::total_cmp);
    Rate {
        per_second: took.len() as f64 / started.elapsed().as_secs_f64(),
        p99_ms: took[took.len() * 99 / 100],
        max_ms: took[took.len() - 1],
    }
}

/// Runs `work(writer)` on WRITERS threads at once and gathers what each
/// returns (the milliseconds its calls took).
fn on_writers(work: impl Fn(usize) -> Vec<f64> + Sync) -> Vec<f64> {
    std::thread::scope(|scope| {
        let work = &work;
        let threads: Vec<_> = (0..WRITERS)
            .map(|writer| scope.spawn(move || work(writer)))
            .collect();
        threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect()
    })
}

/// `len` bytes of a simple pattern (byte `i` is `i * step`), as a vector
/// for the plain rows, as the store's body, and their CRC-64/NVME.
fn payload(len: usize, step: usize) -> (Vec<u8>, Bytes, u64) {
    let data: Vec<u8> = (0..len).map(|i| (i * step) as u8).collect();
    let crc = crc64_nvme(&data);
    (data.clone(), Bytes::from(data), crc)
}

/// The runtime the concurrent rows' store calls run on.
fn two_workers() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap()
}

/// The concurrent rows (see the module documentation).
fn concurrent(scratch: &Path) {
    let (data, body, crc) = payload(64 << 10, 7);
    let io = two_workers();
    println!("\n{WRITERS} concurrent writers, 64 KiB, {CONCURRENT_SECONDS} s a row, rows in turn");
    let mut rates = [Vec::new(), Vec::new(), Vec::new()];
    for round in 0..2 {
        let shared = tempfile::tempdir_in(scratch).unwrap();
        rates[0].push(concurrently(|writer, n| {
            let temp = shared.path().join(format!(".stage-{writer}"));
            let mut file = std::fs::File::create(&temp).unwrap();
            file.write_all(&data).unwrap();
            file.sync_data().unwrap();
            std::fs::rename(&temp, shared.path().join(format!("{writer}-{n}"))).unwrap();
            std::fs::File::open(shared.path())
                .unwrap()
                .sync_all()
                .unwrap();
        }));
        let store = FsStore::open(
            &scratch.join(format!("concurrent-{round}")),
            Arc::new(SystemClock),
            true,
        )
        .unwrap();
        let publish = |key: String, condition: &PutCondition| {
            let meta =
                io.block_on(store.put_whole(&key, body.clone(), condition, &Metadata::new(), crc));
            black_box(meta.unwrap());
        };
        rates[1].push(concurrently(|writer, n| {
            publish(
                format!("bench/new-{writer}-{n}"),
                &PutCondition::IfNoneMatchAny,
            );
        }));
        rates[2].push(concurrently(|writer, n| {
            publish(
                format!("bench/rewrite-{writer}-{}", n % 4),
                &PutCondition::Unconditional,
            );
        }));
    }
    let reference = rates[0].iter().map(|r| r.per_second).sum::<f64>() / 2.0;
    for (name, rate) in [
        "durable rename into one directory",
        "fs put, new keys (If-None-Match: *)",
        "fs put, rewrites",
    ]
    .iter()
    .zip(&rates)
    {
        let mean = rate.iter().map(|r| r.per_second).sum::<f64>() / 2.0;
        println!(
            "{name:<44} {mean:>9.0} /s   {:.2}x   (rounds: {:.0}, {:.0}; p99 {:.1}, {:.1} ms; max {:.1}, {:.1} ms)",
            mean / reference,
            rate[0].per_second,
            rate[1].per_second,
            rate[0].p99_ms,
            rate[1].p99_ms,
            rate[0].max_ms,
            rate[1].max_ms
        );
    }
}

fn main() {
    let io = tokio::runtime::Builder::new_current_thread()
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
    println!(
        "{:<44} {:>8} {:>12} {:>12}   vs write+fsync",
        "what", "size", "per op", "MB/s"
    );
    for (label, size, per_batch) in [
        ("4 KiB", 4usize << 10, 200usize),
        ("1 MiB", 1 << 20, 40),
        ("16 MiB", 16 << 20, 6),
    ] {
        if !wanted(label) {
            continue;
        }
        let data: Vec<u8> = (0..size)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let body = Bytes::from(data.clone());
        let crc = crc64_nvme(&data);
        let plain = tempfile::tempdir_in(scratch.path()).unwrap();
        let renamed = tempfile::tempdir_in(scratch.path()).unwrap();
        let store = FsStore::open(
            &scratch.path().join(format!("store-{size}")),
            Arc::new(SystemClock),
            false,
        )
        .unwrap();
        let mut times = [Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new()];
        let workers = two_workers();
        let put = |_| {
            let meta = io
                .block_on(store.put_whole(
                    "bench/object",
                    body.clone(),
                    &PutCondition::Unconditional,
                    &Metadata::new(),
                    crc,
                ))
                .unwrap();
            black_box(meta);
        };
        for _ in 0..BATCHES {
            times[0].push(per_call(per_batch, |_| write_fsync(plain.path(), &data)));
            times[1].push(per_call(per_batch, |_| {
                durable_rename(renamed.path(), &data)
            }));
            times[2].push(per_call(per_batch, put));
            // The same, and then whatever the batch left for the kernel
            // to write back (a journaled publish syncs only its record),
            // written and flushed before the clock stops.
            let started = Instant::now();
            for n in 0..per_batch {
                put(n);
            }
            syncfs(scratch.path());
            times[3].push(started.elapsed().as_secs_f64() / per_batch as f64);
            // As the server publishes: from a task on a multi-threaded
            // runtime's worker (the rows above call from a current-thread
            // runtime, whose publishes go through the blocking pool).
            let (served, body) = (store.clone(), body.clone());
            let started = Instant::now();
            workers
                .block_on(workers.spawn(async move {
                    for _ in 0..per_batch {
                        let meta = served
                            .put_whole(
                                "bench/object",
                                body.clone(),
                                &PutCondition::Unconditional,
                                &Metadata::new(),
                                crc,
                            )
                            .await
                            .unwrap();
                        black_box(meta);
                    }
                }))
                .unwrap();
            times[4].push(started.elapsed().as_secs_f64() / per_batch as f64);
        }
        let medians: Vec<f64> = times.iter_mut().map(|t| median(t)).collect();
        for (name, seconds) in [
            "write+fsync",
            "durable rename (tmp, fdatasync, dir fsync)",
            "fs put_whole",
            "fs put_whole, then syncfs once per batch",
            "fs put_whole, in a task on 2 workers",
        ]
        .iter()
        .zip(&medians)
        {
            println!(
                "{name:<44} {label:>8} {:>9.2} ms {:>12.1}   {:.2}x",
                seconds * 1e3,
                size as f64 / seconds / 1e6,
                medians[0] / seconds
            );
        }
    }
    if wanted("concurrent") {
        concurrent(scratch.path());
    }
    if wanted("deletes") {
        deletes(scratch.path());
    }
    if wanted("first") {
        first_publishes(scratch.path());
    }
}

/// Publishes of new keys per batch in the `first` rows.
const FIRSTS_PER_BATCH: usize = 50;

/// The crash-safe publish of a file into a directory that does not exist
/// yet, one step after another: make the directory, stage and fdatasync
/// the file, rename it in, fsync the new directory, then its parent.
fn into_new_dir(parent: &Path, name: &str, data: &[u8]) {
    let dir = parent.join(name);
    std::fs::create_dir(&dir).unwrap();
    let temp = parent.join(".stage");
    let mut file = std::fs::File::create(&temp).unwrap();
    file.write_all(data).unwrap();
    file.sync_data().unwrap();
    std::fs::rename(&temp, dir.join("v")).unwrap();
    std::fs::File::open(&dir).unwrap().sync_all().unwrap();
    std::fs::File::open(parent).unwrap().sync_all().unwrap();
}

/// The `first` rows: one writer publishing 4 KiB to new keys (see the
/// module documentation).
fn first_publishes(scratch: &Path) {
    let (data, body, crc) = payload(4 << 10, 13);
    let io = two_workers();
    let store = FsStore::open(&scratch.join("first"), Arc::new(SystemClock), true).unwrap();
    let plain = tempfile::tempdir_in(scratch).unwrap();
    println!(
        "
one writer, new keys of 4 KiB, {BATCHES} batches of {FIRSTS_PER_BATCH} per row, rows in turn"
    );
    let mut times: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for batch in 0..BATCHES {
        times[0].push(per_call(FIRSTS_PER_BATCH, |n| {
            into_new_dir(plain.path(), &format!("{batch}-{n}"), &data);
        }));
        times[1].push(per_call(FIRSTS_PER_BATCH, |n| {
            io.block_on(store.put_whole(
                &format!("first/{batch}-{n}"),
                body.clone(),
                &PutCondition::IfNoneMatchAny,
                &Metadata::new(),
                crc,
            ))
            .unwrap();
        }));
    }
    let medians = times.map(|mut t| median(&mut t));
    for (name, seconds) in [
        "new directory + durable rename, in turn",
        "fs put, a new key",
    ]
    .iter()
    .zip(medians)
    {
        println!(
            "{name:<44} {:>9.3} ms   {:.2}x",
            seconds * 1e3,
            medians[0] / seconds
        );
    }
}

/// Keys each writer deletes in the `deletes` rows.
const DELETES_PER_WRITER: usize = 200;

/// Deletes `DELETES_PER_WRITER` things on each of WRITERS threads with
/// `delete(writer, n)`; deletes per second and the p99 of one, in ms.
fn delete_all(delete: impl Fn(usize, usize) + Sync) -> (f64, f64) {
    let started = Instant::now();
    let mut took = on_writers(|writer| {
        (0..DELETES_PER_WRITER)
            .map(|n| {
                let one = Instant::now();
                delete(writer, n);
                one.elapsed().as_secs_f64() * 1e3
            })
            .collect()
    });
    let rate = took.len() as f64 / started.elapsed().as_secs_f64();
    took.sort_by(f64::total_cmp);
    (rate, took[took.len() * 99 / 100])
}

/// The delete rows (see the module documentation).
fn deletes(scratch: &Path) {
    let (data, body, crc) = payload(4 << 10, 11);
    let io = two_workers();
    println!("\n{WRITERS} concurrent deleters, {DELETES_PER_WRITER} each, 4 KiB, rows in turn");
    let mut rows = [Vec::new(), Vec::new()];
    for round in 0..2 {
        let plain = tempfile::tempdir_in(scratch).unwrap();
        for writer in 0..WRITERS {
            let dir = plain.path().join(writer.to_string());
            std::fs::create_dir(&dir).unwrap();
            for n in 0..DELETES_PER_WRITER {
                std::fs::write(dir.join(n.to_string()), &data).unwrap();
            }
        }
        rows[0].push(delete_all(|writer, n| {
            let dir = plain.path().join(writer.to_string());
            std::fs::remove_file(dir.join(n.to_string())).unwrap();
            std::fs::File::open(&dir).unwrap().sync_all().unwrap();
        }));
        let store = FsStore::open(
            &scratch.join(format!("deletes-{round}")),
            Arc::new(SystemClock),
            false,
        )
        .unwrap();
        for writer in 0..WRITERS {
            for n in 0..DELETES_PER_WRITER {
                io.block_on(store.put_whole(
                    &format!("bench/{writer}-{n}"),
                    body.clone(),
                    &PutCondition::Unconditional,
                    &Metadata::new(),
                    crc,
                ))
                .unwrap();
            }
        }
        rows[1].push(delete_all(|writer, n| {
            io.block_on(store.delete(&format!("bench/{writer}-{n}")))
                .unwrap();
        }));
    }
    let reference = (rows[0][0].0 + rows[0][1].0) / 2.0;
    for (name, row) in ["unlink + directory fsync", "fs delete"].iter().zip(&rows) {
        let mean = (row[0].0 + row[1].0) / 2.0;
        println!(
            "{name:<44} {mean:>9.0} /s   {:.2}x   (rounds: {:.0}, {:.0}; p99 {:.1}, {:.1} ms)",
            mean / reference,
            row[0].0,
            row[1].0,
            row[0].1,
            row[1].1
        );
    }
}
