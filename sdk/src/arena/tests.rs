use super::*;

fn layout(size: usize, align: usize) -> Layout {
    Layout::from_size_align(size, align).unwrap()
}

/// Allocates through `arena` as a global allocator would be called.
fn alloc(arena: &CallArena, size: usize, align: usize) -> *mut u8 {
    // SAFETY: one thread, non-zero sizes.
    let ptr = unsafe { arena.alloc(layout(size, align)) };
    assert!(!ptr.is_null());
    assert_eq!(ptr as usize % align, 0, "aligned");
    ptr
}

fn free(arena: &CallArena, ptr: *mut u8, size: usize, align: usize) {
    // SAFETY: `ptr` came from `arena` with this layout.
    unsafe { arena.dealloc(ptr, layout(size, align)) }
}

fn region(arena: &CallArena) -> Region {
    // SAFETY: one thread.
    match unsafe { *arena.state.get() } {
        State::On(region) => region,
        other => panic!("the region is not reserved: {other:?}"),
    }
}

#[test]
fn blocks_are_cut_one_after_another_and_the_region_restarts_once_none_is_live() {
    let arena = CallArena::new();
    let a = alloc(&arena, 24, 8);
    let b = alloc(&arena, 100, 4);
    let c = alloc(&arena, 8, 64);
    let start = region(&arena).start;
    assert_eq!(a as usize, start);
    assert_eq!(b as usize, start + 24);
    assert_eq!(c as usize, (start + 124).next_multiple_of(64));
    free(&arena, a, 24, 8);
    free(&arena, c, 8, 64);
    assert_eq!(region(&arena).live, 1);
    free(&arena, b, 100, 4);
    assert_eq!(region(&arena).live, 0);
    assert_eq!(region(&arena).cut, start, "nothing live: restarted");
    assert_eq!(alloc(&arena, 16, 8), a, "the next call starts over");
}

#[test]
fn the_block_cut_last_grows_and_shrinks_in_place_and_its_space_is_taken_again_when_freed() {
    let arena = CallArena::new();
    let keep = alloc(&arena, 32, 8);
    let last = alloc(&arena, 16, 8);
    // SAFETY: `last` is live with size 16.
    unsafe {
        std::ptr::write_bytes(last, 7, 16);
        assert_eq!(
            arena.realloc(last, layout(16, 8), 4000),
            last,
            "grown in place"
        );
        assert_eq!(*last.add(15), 7, "its bytes kept");
        assert_eq!(
            arena.realloc(last, layout(4000, 8), 40),
            last,
            "shrunk in place"
        );
    }
    assert_eq!(region(&arena).cut, last as usize + 40);
    free(&arena, last, 40, 8);
    assert_eq!(
        region(&arena).cut,
        last as usize,
        "the last block's space is free"
    );
    assert_eq!(alloc(&arena, 8, 8), last);
    free(&arena, keep, 32, 8);
}

#[test]
fn a_block_not_cut_last_moves_when_it_grows_and_keeps_its_bytes() {
    let arena = CallArena::new();
    let first = alloc(&arena, 16, 8);
    let second = alloc(&arena, 16, 8);
    // SAFETY: `first` is live with size 16; the moved block with 64.
    unsafe {
        std::ptr::copy_nonoverlapping(b"0123456789abcdef".as_ptr(), first, 16);
        let moved = arena.realloc(first, layout(16, 8), 64);
        assert_ne!(moved, first);
        assert_eq!(std::slice::from_raw_parts(moved, 16), b"0123456789abcdef");
        assert_eq!(region(&arena).live, 2, "the old block was freed");
        free(&arena, moved, 64, 8);
    }
    free(&arena, second, 16, 8);
    assert_eq!(region(&arena).live, 0);
}

#[test]
fn large_blocks_and_blocks_past_a_full_region_come_from_the_standard_allocator() {
    let arena = CallArena::new();
    let small = alloc(&arena, 8, 8);
    let r = region(&arena);
    let large = alloc(&arena, MAX_BLOCK + 1, 8);
    assert!(!r.owns(large as usize), "too large for the region");
    let mut blocks = Vec::new();
    loop {
        let block = alloc(&arena, MAX_BLOCK, 8);
        blocks.push(block);
        if !r.owns(block as usize) {
            break;
        }
    }
    assert!(
        blocks.len() >= REGION_BYTES / MAX_BLOCK - 1,
        "the region filled"
    );
    for block in blocks {
        free(&arena, block, MAX_BLOCK, 8);
    }
    free(&arena, large, MAX_BLOCK + 1, 8);
    free(&arena, small, 8, 8);
    assert_eq!(region(&arena).live, 0);
    assert_eq!(region(&arena).cut, r.start);
}

#[test]
fn a_block_of_any_alignment_is_aligned_wherever_it_comes_from() {
    let arena = CallArena::new();
    // `alloc` checks the alignment; one past the region's size may or may
    // not find a boundary inside it.
    let blocks: Vec<_> = [8, 4096, 1 << 21, 16]
        .into_iter()
        .map(|align| (alloc(&arena, 8, align), align))
        .collect();
    for (block, align) in blocks.into_iter().rev() {
        free(&arena, block, 8, align);
    }
    assert_eq!(region(&arena).live, 0);
}

#[test]
fn a_block_kept_across_calls_stops_the_restarts_and_the_region_then_fills_and_falls_through() {
    let arena = CallArena::new();
    let kept = alloc(&arena, 64, 8);
    let r = region(&arena);
    let mut fell_through = false;
    // Calls that each allocate and free everything but `kept`; the block
    // freed last of each is not the one cut last, so the cut only grows.
    for _ in 0..(REGION_BYTES / 1024) * 2 {
        let a = alloc(&arena, 512, 8);
        let b = alloc(&arena, 512, 8);
        fell_through |= !r.owns(a as usize) || !r.owns(b as usize);
        free(&arena, a, 512, 8);
        free(&arena, b, 512, 8);
    }
    assert!(fell_through, "the region filled instead of restarting");
    // SAFETY: `kept` is live: nothing overwrote it by restarting.
    assert_eq!(region(&arena).live, 1);
    free(&arena, kept, 64, 8);
    assert_eq!(region(&arena).cut, r.start);
}

/// A deterministic generator for the differential test.
struct Draws(u64);

impl Draws {
    fn next(&mut self, below: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % below as u64) as usize
    }
}

#[test]
fn random_allocations_never_overlap_a_live_block_and_keep_their_bytes_like_the_standard_allocator()
{
    let arena = CallArena::new();
    let mut draws = Draws(0x9e37_79b9_7f4a_7c15);
    // (pointer, size, align, fill byte): the model of what is live.
    let mut live: Vec<(*mut u8, usize, usize, u8)> = Vec::new();
    let mut cut_from_region = 0;
    for step in 0..40_000usize {
        let fill = (step % 251) as u8;
        match draws.next(10) {
            0..=3 => {
                let size = match draws.next(20) {
                    0 => MAX_BLOCK + 1 + draws.next(4096),
                    1..=3 => 1 + draws.next(MAX_BLOCK),
                    _ => 1 + draws.next(256),
                };
                let align = 1 << draws.next(7);
                let ptr = alloc(&arena, size, align);
                if region(&arena).owns(ptr as usize) {
                    cut_from_region += 1;
                }
                // SAFETY: a fresh block of `size` bytes.
                unsafe { std::ptr::write_bytes(ptr, fill, size) };
                live.push((ptr, size, align, fill));
            }
            4..=7 if !live.is_empty() => {
                // Free one, the last cut more often, as scopes end.
                let at = if draws.next(2) == 0 {
                    live.len() - 1
                } else {
                    draws.next(live.len())
                };
                let (ptr, size, align, _) = live.swap_remove(at);
                free(&arena, ptr, size, align);
            }
            8..=9 if !live.is_empty() => {
                let at = draws.next(live.len());
                let (ptr, size, align, old_fill) = live[at];
                let new_size = 1 + draws.next(2 * MAX_BLOCK);
                // SAFETY: `ptr` is live with this layout.
                let moved = unsafe { arena.realloc(ptr, layout(size, align), new_size) };
                assert!(!moved.is_null());
                // SAFETY: the kept prefix is readable; the rest is ours.
                unsafe {
                    let kept = std::slice::from_raw_parts(moved, size.min(new_size));
                    assert!(
                        kept.iter().all(|&b| b == old_fill),
                        "realloc kept the bytes"
                    );
                    std::ptr::write_bytes(moved, fill, new_size);
                }
                live[at] = (moved, new_size, align, fill);
            }
            _ => {}
        }
        if step % 100 == 0 {
            let mut spans: Vec<(usize, usize)> = live
                .iter()
                .map(|&(p, s, _, _)| (p as usize, p as usize + s))
                .collect();
            spans.sort_unstable();
            for pair in spans.windows(2) {
                assert!(pair[0].1 <= pair[1].0, "two live blocks overlap");
            }
            for &(ptr, size, _, fill) in &live {
                // SAFETY: live blocks are readable.
                let bytes = unsafe { std::slice::from_raw_parts(ptr, size) };
                assert!(
                    bytes.iter().all(|&b| b == fill),
                    "a live block was overwritten"
                );
            }
        }
    }
    assert!(
        cut_from_region > 1_000,
        "the region served its share: {cut_from_region}"
    );
    for (ptr, size, align, _) in live {
        free(&arena, ptr, size, align);
    }
    assert_eq!(region(&arena).live, 0);
}
