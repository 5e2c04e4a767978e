//! Buffers that reads fill: the one way this workspace allocates them.

/// `len` zero bytes for a read to fill.
///
/// Not `vec![0; len]`: that asks the allocator for zeroed memory, and
/// jemalloc (the `custodian` binary's allocator) zeroes a recycled extent
/// of this size (16 KiB and up) with `madvise(MADV_DONTNEED)`. That
/// interrupts every core to flush its TLB, and the read then faults each
/// page back in: 64 KiB GETs ran at 0.55–0.65× their rate under glibc,
/// with 17 page faults a request. Writing zeros into memory the
/// allocator already holds costs a few microseconds per 64 KiB.
#[expect(
    clippy::slow_vector_initialization,
    reason = "the lint's `vec![0; len]` is the zeroed allocation this avoids"
)]
pub fn zeroed(len: usize) -> Vec<u8> {
    let mut buffer = Vec::with_capacity(len);
    buffer.resize(len, 0);
    buffer
}

#[cfg(test)]
mod tests {
    use super::zeroed;

    #[test]
    fn a_buffer_holds_exactly_the_zeros_asked_for() {
        for len in [0, 1, 4096, 65_536, (1 << 20) + 3] {
            let buffer = zeroed(len);
            assert_eq!(buffer.len(), len);
            assert!(buffer.iter().all(|&b| b == 0));
        }
    }
}
