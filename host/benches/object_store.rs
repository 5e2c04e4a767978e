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
//!   cross-process lock, the durable rename, header and block checksums).
//!
//! Ratios are throughput relative to `write+fsync` (higher is better).

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

const BATCHES: usize = 7;

fn wanted(what: &str) -> bool {
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    filter.is_empty() || filter.iter().any(|f| what.contains(f.as_str()))
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
        ("4 KiB", 4usize << 10, 200),
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
        let mut times = [Vec::new(), Vec::new(), Vec::new()];
        for _ in 0..BATCHES {
            let started = Instant::now();
            for _ in 0..per_batch {
                write_fsync(plain.path(), &data);
            }
            times[0].push(started.elapsed().as_secs_f64() / f64::from(per_batch));
            let started = Instant::now();
            for _ in 0..per_batch {
                durable_rename(renamed.path(), &data);
            }
            times[1].push(started.elapsed().as_secs_f64() / f64::from(per_batch));
            let started = Instant::now();
            for _ in 0..per_batch {
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
            }
            times[2].push(started.elapsed().as_secs_f64() / f64::from(per_batch));
        }
        let median = |t: &mut Vec<f64>| {
            t.sort_by(f64::total_cmp);
            t[t.len() / 2]
        };
        let medians: Vec<f64> = times.iter_mut().map(median).collect();
        for (name, seconds) in [
            "write+fsync",
            "durable rename (tmp, fdatasync, dir fsync)",
            "fs put_whole",
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
}
