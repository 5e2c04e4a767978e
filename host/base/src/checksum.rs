//! CRC-64/NVME: the single content identity of Custodian objects.
//!
//! Polynomial `0xAD93D23594C935A9` (`0x9A6C9329AC4BC9B5` bit-reflected, the
//! form the arithmetic below uses), reflected input and output, init and
//! xorout all ones; catalog check value
//! `crc64_nvme(b"123456789") == 0xAE8B14860A799888`. Bytes are hashed with
//! `crc-fast` (SIMD carry-less multiply), not tables.
//!
//! Large inputs are split across threads and the parts folded with
//! [`combine`] ([`crc64_nvme_parallel`]); any [`Read`] is hashed in bounded
//! memory with reading and hashing overlapped ([`crc64_nvme_read`]).
//!
//! The wire form is S3's: base64 of the 8 big-endian bytes.

use std::io::{self, Read};
use std::num::NonZeroUsize;
use std::sync::{Arc, mpsc};
use std::thread;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use crc_fast::{CrcAlgorithm, Digest};

use crate::buffer;

/// The CRC-64/NVME of `data` in one pass.
pub fn crc64_nvme(data: &[u8]) -> u64 {
    crc_fast::checksum(CrcAlgorithm::Crc64Nvme, data)
}

/// The CRC of `a ++ b` from `crc(a)`, `crc(b)` and `b.len()`, reading no
/// bytes. This is what lets parts be checksummed independently (and
/// concurrently) and folded in order afterwards; folding out of order
/// gives the checksum of a different object.
///
/// Costs at most one 64-step multiplication per set bit of `len_b`
/// (~80 ns for part sizes met in practice, a few µs for `u64::MAX`).
/// `crc_fast::checksum_combine` gives the same answers but rebuilds a
/// 64×64 bit matrix by repeated squaring on every call, ~0.1–0.4 ms here,
/// which would cost more than hashing the parts it lets us split.
pub fn combine(crc_a: u64, crc_b: u64, len_b: u64) -> u64 {
    // With init == xorout, crc(a ++ b) = crc(a)·x^(8·len_b) ⊕ crc(b) mod P:
    // the init term that b's own CRC starts from cancels the one carried
    // over from a (see `combine_agrees_with_crc_fast_for_every_length_bit`).
    let mut shifted = crc_a;
    let mut bits = len_b;
    // x^(8·len_b) = Π over the set bits j of len_b of x^(2^(j+3)).
    let mut power = 3;
    while bits != 0 {
        if bits & 1 != 0 {
            shifted = mul_mod_p(X_POW_2_POW[power], shifted);
        }
        bits >>= 1;
        power += 1;
    }
    shifted ^ crc_b
}

/// The reflected polynomial: bit `63 - i` holds the coefficient of `x^i`,
/// and `x^64` is implicit.
const POLY_REFLECTED: u64 = 0x9A6C_9329_AC4B_C9B5;

/// `a·b mod P` in the reflected representation.
const fn mul_mod_p(mut a: u64, mut b: u64) -> u64 {
    let mut product = 0;
    // Walk a's terms from x^0 (bit 63) upwards while b is multiplied by x
    // once a step; at most 64 steps, fewer when a's high powers are zero.
    while a != 0 {
        if a & (1 << 63) != 0 {
            product ^= b;
        }
        a <<= 1;
        // b·x: the x^63 term (bit 0) becomes x^64 ≡ P - x^64.
        b = if b & 1 != 0 {
            (b >> 1) ^ POLY_REFLECTED
        } else {
            b >> 1
        };
    }
    product
}

/// `X_POW_2_POW[k] = x^(2^k) mod P`. 67 entries: a length in bytes is below
/// 2^64, so its shift in bits, 8·len, is below 2^67.
const X_POW_2_POW: [u64; 67] = {
    let mut table = [0; 67];
    table[0] = 1 << 62; // x^1
    let mut k = 1;
    while k < table.len() {
        table[k] = mul_mod_p(table[k - 1], table[k - 1]);
        k += 1;
    }
    table
};

/// Inputs shorter than this are hashed on the calling thread by
/// [`crc64_nvme_parallel`]; from it on, every thread gets at least half of
/// it.
///
/// 8 MiB, measured here (`cargo bench -p custodian --bench crc64 -- split`,
/// 2 cores, AVX-512 VPCLMULQDQ, six runs on a quiet machine): one thread
/// hashes a buffer that is in the cache at 20–45 GB/s, so 4 MiB takes
/// 90–200 µs, while starting and joining a scoped thread costs 60–130 µs
/// on this VM. A 2-way split of a cached buffer therefore loses below
/// 6 MiB (0.55–0.75× at 4 MiB), breaks even at 6–10 MiB (0.9–1.1×) and
/// wins from 12 MiB on (1.4–1.9×), where one thread starts to be held to
/// memory bandwidth (5–8 GB/s). A buffer that comes cold from memory (a
/// body just received, not one hashed again and again) gains from a split
/// earlier, so the threshold sits at the low end of the break-even range.
/// When the other core is busy, a split loses up to ~10 MiB whatever the
/// threshold; that is the caller's to know (pass `threads = 1`).
pub const PARALLEL_THRESHOLD: usize = 8 << 20;

/// The most threads one call uses, whatever it asks for: more cannot
/// help once memory bandwidth is the limit, and a caller-supplied count
/// must not be able to start thousands of threads.
pub const MAX_THREADS: usize = 64;

/// `threads`, or the available parallelism for 0, within `1..=MAX_THREADS`.
fn thread_count(threads: usize) -> usize {
    let threads = if threads == 0 {
        thread::available_parallelism().map_or(1, NonZeroUsize::get)
    } else {
        threads
    };
    threads.clamp(1, MAX_THREADS)
}

/// How many contiguous parts [`crc64_nvme_parallel`] splits `len` bytes
/// into: 1 below [`PARALLEL_THRESHOLD`], else as many as there are threads
/// while each part keeps at least half the threshold (a thread that hashes
/// less costs more to start than it saves).
fn part_count(len: usize, threads: usize) -> usize {
    if len < PARALLEL_THRESHOLD {
        return 1;
    }
    thread_count(threads).min(len / (PARALLEL_THRESHOLD / 2))
}

/// The CRC-64/NVME of `data`, equal to [`crc64_nvme`]'s, using up to
/// `threads` threads (0: the available parallelism).
///
/// Inputs of [`PARALLEL_THRESHOLD`] bytes or more are cut into one
/// contiguous part per thread, hashed on scoped threads (the first on the
/// calling thread) and folded in order with [`combine`]. Smaller inputs,
/// and `threads == 1`, are hashed on the calling thread. If the system
/// refuses to start a thread, that part is hashed on the calling thread.
pub fn crc64_nvme_parallel(data: &[u8], threads: usize) -> u64 {
    crc64_nvme_in_parts(data, part_count(data.len(), threads))
}

/// Hashes `data` as `parts` contiguous parts (the last may be shorter, and
/// there may be fewer when `data` is short) on scoped threads and folds
/// them in order.
fn crc64_nvme_in_parts(data: &[u8], parts: usize) -> u64 {
    if parts <= 1 || data.len() < 2 {
        return crc64_nvme(data);
    }
    let part_len = data.len().div_ceil(parts);
    thread::scope(|scope| {
        let mut pieces = data.chunks(part_len);
        let first = pieces.next().unwrap_or_default();
        let others: Vec<(usize, Option<thread::ScopedJoinHandle<'_, u64>>)> = pieces
            .map(|piece| {
                let started = thread::Builder::new()
                    .name("crc64".into())
                    .spawn_scoped(scope, move || crc64_nvme(piece));
                // No thread to be had: this part is hashed here, below.
                (piece.len(), started.ok())
            })
            .collect();
        let mut crc = crc64_nvme(first);
        let mut offset = first.len();
        for (len, started) in others {
            let part = match started {
                Some(handle) => handle
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                None => crc64_nvme(&data[offset..offset + len]),
            };
            crc = combine(crc, part, len as u64);
            offset += len;
        }
        crc
    })
}

/// A streaming CRC-64/NVME: any split of the input into `update` calls
/// gives the one-pass value.
#[derive(Clone)]
pub struct Crc64Nvme(Digest);

impl Default for Crc64Nvme {
    fn default() -> Self {
        Self(Digest::new(CrcAlgorithm::Crc64Nvme))
    }
}

impl Crc64Nvme {
    /// The CRC of the empty input so far.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds the next bytes.
    pub fn update(&mut self, data: &[u8]) {
        self.0.update(data);
    }

    /// The CRC of everything fed.
    pub fn finalize(&self) -> u64 {
        self.0.finalize()
    }
}

/// How many bytes [`crc64_nvme_read`] reads and hashes at a time. It holds
/// two blocks (one being read, one being hashed), so it uses 2 ×
/// `READ_BLOCK` of memory whatever the size of the input.
///
/// 2 MiB, measured here on a 256 MiB file read from the page cache (2
/// cores; medians of 9 interleaved runs): 2–4 MiB blocks hash at ~5 GB/s,
/// 70–80% of a plain `read` of the same file, while 8 MiB blocks fall to
/// ~4.3 GB/s: a block that was just read is hashed while it is still in
/// the cache only if both blocks fit there. Below 1 MiB the per-block
/// costs (a channel message to and from each worker, ~4 µs; a [`combine`]
/// per part, ~80 ns) start to show.
pub const READ_BLOCK: usize = 2 << 20;

/// What [`crc64_nvme_read`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadCrc {
    /// The CRC-64/NVME of every byte read.
    pub crc: u64,
    /// How many bytes were read.
    pub size: u64,
}

/// Reads `reader` to its end; returns the CRC-64/NVME and the count of its
/// bytes. Memory stays at two blocks of [`READ_BLOCK`] bytes for any size.
///
/// The calling thread reads the next block while `threads` worker threads
/// (0: the available parallelism) hash the previous one, each a contiguous
/// part of it; parts and blocks are folded in order with [`combine`]. An
/// input shorter than one block is hashed with [`crc64_nvme_parallel`]
/// instead, without starting a worker.
///
/// The overlap pays where hashing is about as slow as reading (`crc-fast`
/// without AVX-512 runs at ~6.6 GB/s, a core reads ~10 GiB/s from the page
/// cache). Where hashing is several times faster than reading (AVX-512
/// VPCLMULQDQ, 30–45 GB/s), both are held to memory bandwidth and the
/// pipeline runs within ~5% of reading and hashing each block in turn on
/// one thread (`cargo bench -p custodian --bench crc64 -- reader`).
///
/// `progress` is called on the calling thread with the number of bytes
/// hashed so far, after each block; the last call has the total.
///
/// # Errors
///
/// The first error `reader` returns, except [`io::ErrorKind::Interrupted`],
/// which is retried.
pub fn crc64_nvme_read<R: Read>(
    reader: R,
    threads: usize,
    progress: impl FnMut(u64),
) -> io::Result<ReadCrc> {
    read_in_blocks(reader, threads, READ_BLOCK, progress)
}

/// Fills `buf` from `reader` until it is full or the input ends; returns
/// how many bytes it holds, fewer than `buf.len()` only at the end.
fn fill(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// A contiguous part of a block, for a worker to hash.
struct Part {
    block: Arc<Vec<u8>>,
    start: usize,
    end: usize,
    index: usize,
}

/// [`crc64_nvme_read`] with blocks of `block_len` bytes (tests use small
/// ones to cross many block boundaries cheaply).
fn read_in_blocks<R: Read>(
    mut reader: R,
    threads: usize,
    block_len: usize,
    mut progress: impl FnMut(u64),
) -> io::Result<ReadCrc> {
    let mut first = buffer::zeroed(block_len);
    let len = fill(&mut reader, &mut first)?;
    if len < block_len {
        // All of it fits in one block: no pipeline is worth starting.
        let crc = crc64_nvme_parallel(&first[..len], threads);
        progress(len as u64);
        return Ok(ReadCrc {
            crc,
            size: len as u64,
        });
    }
    thread::scope(|scope| {
        // Each part's CRC, or the panic that hashing it raised: a worker
        // that died silently would leave the reader waiting for ever.
        let (done_tx, done_rx) = mpsc::channel::<(usize, thread::Result<u64>)>();
        let workers: Vec<mpsc::Sender<Part>> = (0..thread_count(threads))
            .map_while(|_| {
                let (tx, rx) = mpsc::channel::<Part>();
                let done = done_tx.clone();
                let work = move || {
                    for part in rx {
                        let crc = std::panic::catch_unwind(|| {
                            crc64_nvme(&part.block[part.start..part.end])
                        });
                        let index = part.index;
                        // Let go of the block before saying its part is
                        // hashed: the reader refills it once every part
                        // is in, and needs to be its only holder then.
                        drop(part);
                        if done.send((index, crc)).is_err() {
                            break;
                        }
                    }
                };
                let started = thread::Builder::new()
                    .name("crc64-read".into())
                    .spawn_scoped(scope, work);
                started.ok().map(|_| tx)
            })
            .collect();
        drop(done_tx);
        if workers.is_empty() {
            // No thread could be started: hash as we read, one block.
            return read_on_this_thread(reader, first, len, progress);
        }

        // Two blocks, and never more: `current` is hashed by the workers
        // while the other is filled; then they swap.
        let mut blocks = [Arc::new(first), Arc::new(buffer::zeroed(block_len))];
        let mut current = 0;
        let mut len = len;
        let mut part_crcs = vec![0; workers.len()];
        let mut crc = crc64_nvme(b"");
        let mut size = 0u64;
        loop {
            // `len` ≥ 1 here, so every part is non-empty.
            let parts = workers.len().min(len);
            let bound = |index: usize| index * len / parts;
            for (index, worker) in workers.iter().take(parts).enumerate() {
                let part = Part {
                    block: blocks[current].clone(),
                    start: bound(index),
                    end: bound(index + 1),
                    index,
                };
                // A worker leaves its loop only when this channel closes,
                // or when its answer cannot be delivered because the reader
                // has returned: it is alive for every send.
                worker
                    .send(part)
                    .expect("a worker lives as long as its channel");
            }
            let next_len = if len == block_len {
                let other = Arc::get_mut(&mut blocks[1 - current])
                    .expect("every part of the other block was handed back");
                fill(&mut reader, other)?
            } else {
                0
            };
            for _ in 0..parts {
                let (index, part_crc) = done_rx
                    .recv()
                    .expect("a worker answers every part it is sent");
                part_crcs[index] =
                    part_crc.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            }
            for (index, part_crc) in part_crcs.iter().take(parts).enumerate() {
                crc = combine(crc, *part_crc, (bound(index + 1) - bound(index)) as u64);
            }
            size += len as u64;
            progress(size);
            if next_len == 0 {
                return Ok(ReadCrc { crc, size });
            }
            len = next_len;
            current = 1 - current;
        }
    })
}

/// The rest of [`read_in_blocks`] without workers: `block` holds the first
/// `len` bytes, read already.
fn read_on_this_thread<R: Read>(
    mut reader: R,
    mut block: Vec<u8>,
    mut len: usize,
    mut progress: impl FnMut(u64),
) -> io::Result<ReadCrc> {
    let mut crc = Crc64Nvme::new();
    let mut size = 0u64;
    while len > 0 {
        crc.update(&block[..len]);
        size += len as u64;
        progress(size);
        len = if len == block.len() {
            fill(&mut reader, &mut block)?
        } else {
            0
        };
    }
    Ok(ReadCrc {
        crc: crc.finalize(),
        size,
    })
}

/// S3's wire form of a CRC-64: base64 of its 8 big-endian bytes, 12
/// characters.
pub fn to_wire(crc: u64) -> String {
    STANDARD.encode(crc.to_be_bytes())
}

/// A string that is not the wire form of a CRC-64.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a CRC-64 wire form (12 characters of base64 encoding 8 bytes)")]
pub struct WireFormError(pub String);

/// The inverse of [`to_wire`], strict: anything but a 12-character
/// canonical base64 encoding of exactly 8 bytes is refused. A caller handed
/// something else must not validate a publish against a number nobody
/// computed.
pub fn from_wire(wire: &str) -> Result<u64, WireFormError> {
    let refuse = || WireFormError(wire.to_owned());
    if wire.len() != 12 {
        return Err(refuse());
    }
    let bytes: [u8; 8] = STANDARD
        .decode(wire)
        .map_err(|_| refuse())?
        .try_into()
        .map_err(|_| refuse())?;
    Ok(u64::from_be_bytes(bytes))
}

/// Fuzz targets of the wire form's parser (see the README's "Fuzzing").
#[cfg(test)]
mod fuzz {
    use super::*;

    /// Checks what [`from_wire`] made of `text`: a CRC whose wire form is
    /// exactly `text` (the parser is strict, so only canonical forms pass),
    /// or an error echoing `text`.
    fn check(text: &str) {
        match from_wire(text) {
            Ok(crc) => assert_eq!(to_wire(crc), text),
            Err(WireFormError(echo)) => assert_eq!(echo, text),
        }
    }

    #[test]
    fn every_crc_round_trips_through_its_wire_form() {
        bolero::check!()
            .with_type::<u64>()
            .cloned()
            .for_each(|crc| {
                let wire = to_wire(crc);
                assert_eq!(wire.len(), 12);
                assert_eq!(from_wire(&wire), Ok(crc));
            });
    }

    #[test]
    fn arbitrary_text_never_panics_the_wire_parser_and_only_canonical_forms_parse() {
        bolero::check!()
            .with_type::<(bool, Vec<u8>)>()
            .for_each(|(shaped, bytes)| {
                // Shaped: 12 characters of base64 and its near misses, so
                // candidates with non-zero trailing bits or misplaced
                // padding come often.
                const BASE64ISH: &[u8] = b"AQgw/+=Z9a-_ ";
                let text = if *shaped {
                    bytes
                        .iter()
                        .chain(std::iter::repeat(&b'='))
                        .take(12)
                        .map(|&b| char::from(BASE64ISH[usize::from(b) % BASE64ISH.len()]))
                        .collect()
                } else {
                    String::from_utf8_lossy(bytes).into_owned()
                };
                check(&text);
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Non-uniform bytes: a run of one value would hide an operator that
    /// shifted by the wrong number of positions.
    fn sample(len: usize) -> Vec<u8> {
        (0..len as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect()
    }

    #[test]
    fn the_catalog_check_value_is_reproduced() {
        assert_eq!(crc64_nvme(b"123456789"), 0xAE8B_1486_0A79_9888);
        assert_eq!(crc64_nvme(b""), 0);
    }

    #[test]
    fn every_split_point_of_a_streaming_update_equals_one_pass() {
        let data = sample(1000);
        let whole = crc64_nvme(&data);
        for cut in 0..=data.len() {
            let mut crc = Crc64Nvme::new();
            crc.update(&data[..cut]);
            crc.update(&data[cut..]);
            assert_eq!(crc.finalize(), whole, "split at {cut}");
        }
    }

    #[test]
    fn combining_parts_in_order_equals_hashing_the_whole() {
        let data = sample(10_000);
        for sizes in [
            &[1usize, 999, 4096, 1, 4903][..],
            &[0, 10_000],
            &[10_000, 0],
        ] {
            let mut offset = 0;
            let mut acc = crc64_nvme(b"");
            for &size in sizes {
                let part = &data[offset..offset + size];
                acc = combine(acc, crc64_nvme(part), size as u64);
                offset += size;
            }
            assert_eq!(acc, crc64_nvme(&data), "parts {sizes:?}");
        }
    }

    #[test]
    fn folding_parts_out_of_order_gives_a_different_checksum() {
        let (a, b, c) = (
            &b"first-part-bytes"[..],
            &b"second"[..],
            &b"third-part!"[..],
        );
        let fold = |parts: &[&[u8]]| {
            parts
                .iter()
                .fold(0, |acc, p| combine(acc, crc64_nvme(p), p.len() as u64))
        };
        let whole = crc64_nvme(&[a, b, c].concat());
        assert_eq!(fold(&[a, b, c]), whole);
        assert_ne!(fold(&[b, a, c]), whole);
    }

    #[test]
    fn combine_agrees_with_crc_fast_for_every_length_bit() {
        let crcs = [0, u64::MAX, 0xAE8B_1486_0A79_9888];
        let mut lens = vec![
            0,
            1,
            2,
            3,
            7,
            9,
            4095,
            (1 << 20) + 7,
            u64::MAX - 1,
            u64::MAX,
        ];
        lens.extend((0..64).map(|bit| 1u64 << bit));
        for a in crcs {
            for b in crcs {
                for &len in &lens {
                    assert_eq!(
                        combine(a, b, len),
                        crc_fast::checksum_combine(CrcAlgorithm::Crc64Nvme, a, b, len),
                        "combine({a:#x}, {b:#x}, {len})"
                    );
                }
            }
        }
    }

    #[test]
    fn splitting_into_any_number_of_parts_equals_one_pass() {
        let data = sample(200);
        for len in (0..=40).chain([63, 64, 65, 199, 200]) {
            let whole = crc64_nvme(&data[..len]);
            for parts in 0..=9 {
                assert_eq!(
                    crc64_nvme_in_parts(&data[..len], parts),
                    whole,
                    "{len} bytes in {parts} parts"
                );
            }
        }
    }

    #[test]
    fn the_parallel_one_shot_equals_one_pass_for_every_size_and_thread_count() {
        let t = PARALLEL_THRESHOLD;
        let data = sample(3 * t + 5);
        for len in [
            0,
            1,
            2,
            4095,
            t - 1,
            t,
            t + 1,
            2 * t - 1,
            2 * t + 1,
            3 * t + 5,
        ] {
            let whole = crc64_nvme(&data[..len]);
            for threads in [0, 1, 2, 3, 4, 7, 1000] {
                assert_eq!(
                    crc64_nvme_parallel(&data[..len], threads),
                    whole,
                    "{len} bytes on {threads} threads"
                );
            }
        }
    }

    #[test]
    fn inputs_below_the_threshold_stay_on_one_thread_and_every_part_keeps_half_of_it() {
        let t = PARALLEL_THRESHOLD;
        assert_eq!(part_count(0, 8), 1);
        assert_eq!(part_count(t - 1, 8), 1);
        assert_eq!(part_count(t, 8), 2);
        assert_eq!(part_count(t, 1), 1);
        assert_eq!(part_count(10 * t, 3), 3);
        assert_eq!(part_count(usize::MAX / 2, 100_000), MAX_THREADS);
        for len in [t, t + 1, 3 * t / 2 - 1, 3 * t / 2, 5 * t + 3] {
            for threads in [2, 3, 8, 64] {
                let parts = part_count(len, threads);
                assert!(parts >= 2 && parts <= threads, "{len} on {threads}");
                assert!(len / parts >= t / 2, "{len} bytes in {parts} parts");
            }
        }
    }

    /// A reader that hands out at most `step` bytes a call and is
    /// interrupted before every other call.
    struct Trickle<'a> {
        data: &'a [u8],
        step: usize,
        interrupt: bool,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.interrupt = !self.interrupt;
            if self.interrupt {
                return Err(io::ErrorKind::Interrupted.into());
            }
            let n = self.step.min(buf.len()).min(self.data.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    /// A reader that gives `left` bytes of zeros, then fails.
    struct Failing {
        left: usize,
    }

    impl Read for Failing {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.left == 0 {
                return Err(io::Error::other("the disk is on fire"));
            }
            let n = self.left.min(buf.len());
            buf[..n].fill(0);
            self.left -= n;
            Ok(n)
        }
    }

    const SMALL_BLOCK: usize = 4096;

    #[test]
    fn the_reader_equals_one_pass_for_sizes_around_the_block_boundaries() {
        let b = SMALL_BLOCK;
        let data = sample(3 * b + 5);
        for len in [
            0,
            1,
            b - 1,
            b,
            b + 1,
            2 * b - 1,
            2 * b,
            2 * b + 1,
            3 * b + 5,
        ] {
            let expected = ReadCrc {
                crc: crc64_nvme(&data[..len]),
                size: len as u64,
            };
            for threads in [0, 1, 2, 3, 5] {
                let got = read_in_blocks(&data[..len], threads, b, |_| {}).unwrap();
                assert_eq!(got, expected, "{len} bytes on {threads} threads");
            }
        }
    }

    #[test]
    fn the_reader_equals_one_pass_around_its_real_block_size() {
        let b = READ_BLOCK;
        let data = sample(2 * b + 7);
        for len in [b - 1, b, b + 1, 2 * b + 7] {
            for threads in [0, 1, 2] {
                let got = crc64_nvme_read(&data[..len], threads, |_| {}).unwrap();
                assert_eq!(got.crc, crc64_nvme(&data[..len]), "{len} on {threads}");
                assert_eq!(got.size, len as u64);
            }
        }
    }

    #[test]
    fn the_reader_copes_with_short_and_interrupted_reads() {
        let data = sample(5 * SMALL_BLOCK + 3);
        for step in [1, 1000, SMALL_BLOCK + 1] {
            let reader = Trickle {
                data: &data,
                step,
                interrupt: false,
            };
            let got = read_in_blocks(reader, 2, SMALL_BLOCK, |_| {}).unwrap();
            assert_eq!(got.crc, crc64_nvme(&data), "{step} bytes a read");
            assert_eq!(got.size, data.len() as u64);
        }
    }

    #[test]
    fn the_reader_reports_growing_progress_ending_at_the_size() {
        for len in [0, 10, 5 * SMALL_BLOCK, 5 * SMALL_BLOCK + 3] {
            let data = sample(len);
            let mut seen = Vec::new();
            read_in_blocks(&data[..], 2, SMALL_BLOCK, |done| seen.push(done)).unwrap();
            assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
            assert_eq!(seen.last(), Some(&(len as u64)), "{seen:?}");
            assert_eq!(seen.len(), len.div_ceil(SMALL_BLOCK).max(1), "{seen:?}");
        }
    }

    #[test]
    fn a_read_error_is_returned_not_swallowed() {
        for left in [0, 100, SMALL_BLOCK, 3 * SMALL_BLOCK + 1] {
            for threads in [1, 2] {
                let error = read_in_blocks(Failing { left }, threads, SMALL_BLOCK, |_| {})
                    .expect_err("the reader failed");
                assert_eq!(error.to_string(), "the disk is on fire", "after {left}");
            }
        }
    }

    #[test]
    fn the_wire_form_is_base64_of_the_big_endian_bytes() {
        assert_eq!(to_wire(0xAE8B_1486_0A79_9888), "rosUhgp5mIg=");
        assert_eq!(to_wire(0), "AAAAAAAAAAA=");
        assert_eq!(from_wire("rosUhgp5mIg="), Ok(0xAE8B_1486_0A79_9888));
    }

    #[test]
    fn anything_but_a_canonical_eight_byte_encoding_is_refused() {
        for bad in [
            "",
            "rosUhgp5mIg",
            "rosUhgp5mIg==",
            " rosUhgp5mIg=",
            "rosUhgp5mI!=",
            // Nine bytes fit twelve characters without padding; seven
            // bytes pad to twelve too. Neither is a CRC-64.
            "AAAAAAAAAAAA",
            "AAAAAAAAAA==",
            "AAAAAAAAAAB=",
        ] {
            assert!(from_wire(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
