//! CRC-64/NVME throughput, as figures and ratios measured in one run:
//!
//! ```text
//! cargo bench -p custodian --bench crc64 [-- WORD]
//! ```
//!
//! The reference is a slice-by-8 table implementation written here (the
//! classic software CRC, the seed's algorithm); it is checked against
//! `crc-fast` before anything is timed. Rows: `hash` (4 KiB, 1 MiB and
//! 256 MiB through slice-by-8, `crc-fast` on one thread and
//! `crc64_nvme_parallel` on 2 threads), `combine` (ours against
//! `crc-fast`'s), `split` (where a 2-way split starts paying off: the
//! measurement behind `PARALLEL_THRESHOLD`) and `reader` (`crc64_nvme_read`
//! over an in-memory reader). `WORD` keeps only the rows whose name
//! contains it.
//!
//! Each figure is the median of several batches, so one noisy batch does
//! not move it, and rows that are compared with each other take turns
//! batch by batch. GB/s are 10^9 bytes a second. 4 KiB and 1 MiB inputs
//! are hashed again and again from the cache; 256 MiB comes from memory.

use std::hint::black_box;
use std::thread;
use std::time::Instant;

use crc_fast::CrcAlgorithm;
use custodian::checksum::{
    Crc64Nvme, PARALLEL_THRESHOLD, READ_BLOCK, combine, crc64_nvme, crc64_nvme_parallel,
    crc64_nvme_read,
};

// The server's allocator, with the settings `.cargo/config.toml` compiles
// in, so these figures are what the `custodian` binary's calls cost.
#[path = "../src/allocator.rs"]
mod allocator;

const BATCHES: usize = 9;

/// The reflected CRC-64/NVME polynomial: bit `63 - i` is the coefficient
/// of `x^i`.
const POLY: u64 = 0x9A6C_9329_AC4B_C9B5;

/// `TABLES[0][b]` is the register after shifting byte `b` through eight
/// zero bits; `TABLES[k][b]` is that shifted through `k` more zero bytes,
/// so eight lookups advance the register by a whole u64 word.
const TABLES: [[u64; 256]; 8] = {
    let mut tables = [[0u64; 256]; 8];
    let mut byte = 0;
    while byte < 256 {
        let mut register = byte as u64;
        let mut bit = 0;
        while bit < 8 {
            register = if register & 1 != 0 {
                (register >> 1) ^ POLY
            } else {
                register >> 1
            };
            bit += 1;
        }
        tables[0][byte] = register;
        byte += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut byte = 0;
        while byte < 256 {
            let previous = tables[k - 1][byte];
            tables[k][byte] = (previous >> 8) ^ tables[0][(previous & 0xff) as usize];
            byte += 1;
        }
        k += 1;
    }
    tables
};

/// CRC-64/NVME by slice-by-8: init and xorout all ones, reflected.
fn slice_by_8(data: &[u8]) -> u64 {
    let mut register = !0u64;
    let mut words = data.chunks_exact(8);
    for word in &mut words {
        let x = register ^ u64::from_le_bytes(word.try_into().expect("8 bytes"));
        let byte = |i: u32| ((x >> (8 * i)) & 0xff) as usize;
        register = TABLES[7][byte(0)]
            ^ TABLES[6][byte(1)]
            ^ TABLES[5][byte(2)]
            ^ TABLES[4][byte(3)]
            ^ TABLES[3][byte(4)]
            ^ TABLES[2][byte(5)]
            ^ TABLES[1][byte(6)]
            ^ TABLES[0][byte(7)];
    }
    for &b in words.remainder() {
        register = TABLES[0][((register ^ u64::from(b)) & 0xff) as usize] ^ (register >> 8);
    }
    !register
}

/// Deterministic bytes with no structure a CRC could take a shortcut on
/// (splitmix64).
fn bytes(len: usize) -> Vec<u8> {
    let mut state = 0x5EED_u64;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// A row to time: calls per batch, and the call.
type Timed<'a> = (usize, &'a mut dyn FnMut());

/// Median seconds per call of each of `rows`, over `BATCHES` batches after
/// a warm-up one. The rows' batches take turns, so a neighbour that starts
/// working halfway through slows every row alike instead of skewing the
/// ratios between them.
fn per_call(rows: &mut [Timed<'_>]) -> Vec<f64> {
    let mut times = vec![Vec::with_capacity(BATCHES); rows.len()];
    for batch in 0..=BATCHES {
        for ((n, f), times) in rows.iter_mut().zip(&mut times) {
            let started = Instant::now();
            for _ in 0..*n {
                f();
            }
            if batch > 0 {
                times.push(started.elapsed().as_secs_f64() / *n as f64);
            }
        }
    }
    times
        .into_iter()
        .map(|mut times| {
            times.sort_by(f64::total_cmp);
            times[BATCHES / 2]
        })
        .collect()
}

/// Calls per batch so a batch hashes about `budget` bytes.
fn calls(len: usize, budget: usize) -> usize {
    (budget / len.max(1)).max(1)
}

/// Whether the row named `what` was asked for: `cargo bench ... -- WORD`
/// runs only the rows whose name contains WORD.
fn wanted(what: &str) -> bool {
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    filter.is_empty() || filter.iter().any(|f| what.contains(f.as_str()))
}

fn size(len: usize) -> String {
    if len >= 1 << 20 {
        format!("{} MiB", len >> 20)
    } else {
        format!("{} KiB", len >> 10)
    }
}

fn row(what: &str, len: usize, seconds: f64, note: &str) {
    let gbps = len as f64 / seconds / 1e9;
    println!("{what:<40} {:>8} {gbps:>9.2} GB/s   {note}", size(len));
}

/// What `crc64_nvme_parallel` does above its threshold, forced at any
/// size: `parts` contiguous parts on scoped threads, folded in order.
fn forced_split(data: &[u8], parts: usize) -> u64 {
    let part_len = data.len().div_ceil(parts);
    thread::scope(|scope| {
        let mut pieces = data.chunks(part_len);
        let first = pieces.next().unwrap_or_default();
        let others: Vec<_> = pieces
            .map(|p| (p.len(), scope.spawn(move || crc64_nvme(p))))
            .collect();
        let mut crc = crc64_nvme(first);
        for (len, handle) in others {
            crc = combine(crc, handle.join().expect("a part hashes"), len as u64);
        }
        crc
    })
}

fn main() {
    let data = bytes(256 << 20);

    // The reference must agree with crc-fast before any figure means
    // anything.
    assert_eq!(slice_by_8(b"123456789"), 0xAE8B_1486_0A79_9888);
    for len in (0..=300).chain([4095, 4096, 65_537, 1 << 20]) {
        assert_eq!(slice_by_8(&data[..len]), crc64_nvme(&data[..len]), "{len}");
    }
    let big = &data[..64 << 20];
    assert_eq!(slice_by_8(big), crc64_nvme(big));
    assert_eq!(crc64_nvme_parallel(big, 2), crc64_nvme(big));

    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    println!(
        "environment: RUST_BACKTRACE={}, {} threads available, {cpu}, crc-fast {}",
        std::env::var("RUST_BACKTRACE").unwrap_or_else(|_| "unset".into()),
        thread::available_parallelism().map_or(1, |n| n.get()),
        crc_fast::get_calculator_target(CrcAlgorithm::Crc64Nvme),
    );
    println!("slice-by-8 agrees with crc-fast (check value, 0..300 bytes, 64 MiB)");
    println!("{:<40} {:>8} {:>14}   note", "what", "size", "throughput");

    if wanted("hash") {
        for len in [4 << 10, 1 << 20, 256 << 20] {
            let d = &data[..len];
            let times = per_call(&mut [
                (calls(len, 16 << 20), &mut || {
                    black_box(slice_by_8(black_box(d)));
                }),
                (calls(len, 256 << 20), &mut || {
                    black_box(crc64_nvme(black_box(d)));
                }),
                (calls(len, 256 << 20), &mut || {
                    black_box(crc64_nvme_parallel(black_box(d), 2));
                }),
            ]);
            let (reference, one, two) = (times[0], times[1], times[2]);
            row("hash: slice-by-8 (reference)", len, reference, "1.00x");
            row(
                "hash: crc-fast, 1 thread",
                len,
                one,
                &format!("{:.1}x slice-by-8", reference / one),
            );
            let below = if len < PARALLEL_THRESHOLD {
                " (below the threshold: 1 thread)"
            } else {
                ""
            };
            row(
                "hash: crc64_nvme_parallel, 2 threads",
                len,
                two,
                &format!(
                    "{:.1}x slice-by-8, {:.2}x 1 thread{below}",
                    reference / two,
                    one / two
                ),
            );
        }
    }

    if wanted("combine") {
        let len = 1u64 << 20;
        let times = per_call(&mut [
            (100_000, &mut || {
                black_box(combine(
                    black_box(0x1234),
                    black_box(0x5678),
                    black_box(len),
                ));
            }),
            (100, &mut || {
                black_box(crc_fast::checksum_combine(
                    CrcAlgorithm::Crc64Nvme,
                    black_box(0x1234),
                    black_box(0x5678),
                    black_box(len),
                ));
            }),
        ]);
        let (ours, theirs) = (times[0], times[1]);
        println!(
            "{:<40} {:>8} {:>11.0} ns   crc_fast::checksum_combine {:.0} ns ({:.0}x slower)",
            "combine (ours), part of",
            size(len as usize),
            ours * 1e9,
            theirs * 1e9,
            theirs / ours
        );
    }

    if wanted("split") {
        let spawn = per_call(&mut [(1000, &mut || {
            thread::scope(|s| {
                s.spawn(|| black_box(1));
            });
        })])[0];
        println!(
            "{:<40} {:>8} {:>11.1} µs",
            "split: start + join a scoped thread",
            "",
            spawn * 1e6
        );
        for len in [
            1 << 20,
            2 << 20,
            4 << 20,
            6 << 20,
            8 << 20,
            10 << 20,
            12 << 20,
            16 << 20,
            32 << 20,
        ] {
            let d = &data[..len];
            let times = per_call(&mut [
                (calls(len, 128 << 20), &mut || {
                    black_box(crc64_nvme(black_box(d)));
                }),
                (calls(len, 128 << 20), &mut || {
                    black_box(forced_split(black_box(d), 2));
                }),
            ]);
            let (one, two) = (times[0], times[1]);
            row(
                "split: 2 parts, forced",
                len,
                two,
                &format!(
                    "{:.2}x 1 thread ({:.2} GB/s)",
                    one / two,
                    len as f64 / one / 1e9
                ),
            );
        }
        println!(
            "{:<40} {:>8}",
            "split: PARALLEL_THRESHOLD",
            size(PARALLEL_THRESHOLD)
        );
    }

    if wanted("reader") {
        let len = 256 << 20;
        let d = &data[..len];
        let mut one_shot = || {
            black_box(crc64_nvme(black_box(d)));
        };
        let mut copy = || {
            // What a reader costs on its own: a copy into one block at a
            // time, as `read` from the page cache does.
            let mut block = vec![0u8; READ_BLOCK];
            for chunk in d.chunks(READ_BLOCK) {
                block[..chunk.len()].copy_from_slice(chunk);
                black_box(&block);
            }
        };
        let mut sequential = || {
            // The same copies with each block hashed right after it is
            // read, on the same thread: no overlap, no hand-over.
            let mut block = vec![0u8; READ_BLOCK];
            let mut crc = Crc64Nvme::new();
            for chunk in d.chunks(READ_BLOCK) {
                block[..chunk.len()].copy_from_slice(chunk);
                crc.update(&block[..chunk.len()]);
            }
            black_box(crc.finalize());
        };
        let reader = |threads: usize| {
            move || {
                let got = crc64_nvme_read(black_box(d), threads, |_| {}).expect("memory reads");
                black_box(got);
            }
        };
        let (mut one_thread, mut two_threads) = (reader(1), reader(2));
        let times = per_call(&mut [
            (2, &mut one_shot),
            (2, &mut copy),
            (2, &mut sequential),
            (2, &mut one_thread),
            (2, &mut two_threads),
        ]);
        row(
            "reader: copy in blocks, no hashing",
            len,
            times[1],
            "what reading from the page cache costs at best",
        );
        row(
            "reader: read then hash, no overlap",
            len,
            times[2],
            &format!(
                "{:.2}x one-shot crc-fast on 1 thread, {:.2}x the copy alone",
                times[0] / times[2],
                times[1] / times[2]
            ),
        );
        for (threads, read) in [(1, times[3]), (2, times[4])] {
            row(
                &format!("reader: crc64_nvme_read, {threads} thread(s)"),
                len,
                read,
                &format!(
                    "{:.2}x one-shot crc-fast on 1 thread, {:.2}x the copy alone",
                    times[0] / read,
                    times[1] / read
                ),
            );
        }
    }
}
