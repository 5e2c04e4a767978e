//! [`CallArena`]: a global allocator for plugins whose calls make many
//! small, short-lived allocations (parsing and writing rows, keys, host
//! call arguments and results) and keep nothing on the heap from one call
//! to the next.
//!
//! Opt in from a plugin crate with [`crate::use_call_arena`], which makes
//! it the global allocator of the wasm build only:
//!
//! ```ignore
//! custodian_sdk::use_call_arena!();
//! ```
//!
//! Every bundled plugin does, and so does every Rust project
//! `custodian plugin new` writes.
//!
//! # How it allocates
//!
//! Blocks of at most [`MAX_BLOCK`] bytes are cut one after another from
//! one region of [`REGION_BYTES`], taken from the standard allocator the
//! first time one is needed; everything else, and every block once the
//! region is full, comes from the standard allocator as before. Freeing
//! the block cut last, or shrinking or growing it, moves the cut back or
//! forth; freeing any other block only counts it. When no block of the
//! region is live any more, which is the case at the end of every call of
//! a plugin that keeps nothing on the heap, the next block is cut from
//! the region's start again. A call then pays a pointer bump per
//! allocation instead of the standard allocator's search and bookkeeping
//! (in the bundled takedown policy, allocation was 13 % of a step:
//! `takedown_step`, with `CUSTODIAN_PERF_MAP`).
//!
//! # Why it is safe whatever the plugin does
//!
//! The region restarts only when its live count is zero, so no block is
//! ever handed out twice while live. A plugin that does keep a block
//! across calls (a cache in a `static`) keeps the region from restarting:
//! it fills, and allocations fall through to the standard allocator, so
//! such a plugin is as fast as without the arena, never wrong. Memory is
//! bounded the same way: the region is one fixed reservation, and a warm
//! instance's memory persists across calls exactly as it does without it.
//!
//! It is single-threaded by construction: a `wasm32-wasip2` component has
//! one thread, so the allocator is `Sync` (usable as a `static`) only on
//! wasm32 without the atomics feature; on a threaded wasm target
//! `use_call_arena!` does not compile, rather than race. Natively it can
//! be made and driven directly, which is how its tests run.

// An allocator cannot be written without `unsafe`: `GlobalAlloc` is an
// unsafe trait handing out raw memory. Every block below says why it holds.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;

/// Largest block cut from the region. Larger ones (object bodies, piece
/// buffers) are few per call and would fill the region at once.
pub const MAX_BLOCK: usize = 64 * 1024;

/// Bytes reserved for the region, once per instance: a takedown step's
/// small allocations fit (with a quarter of this, `takedown_step` ran
/// 4 % slower: steps spilled over to the standard allocator). It counts
/// against the plugin's memory cap like any allocation; under a cap too
/// tight for it the reservation fails, the arena stays off and the
/// standard allocator serves everything.
pub const REGION_BYTES: usize = 1024 * 1024;

/// Alignment of the region itself; blocks align within it.
const REGION_ALIGN: usize = 16;

/// The region's bookkeeping: addresses, not pointers, so it can be
/// checked without the memory it describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Region {
    start: usize,
    end: usize,
    /// Where the next block is cut. Invariant: `start <= cut <= end`.
    cut: usize,
    /// Blocks of the region handed out and not freed. Invariant: zero
    /// whenever `cut == start` after a restart; a block is never cut
    /// below the end of a live one.
    live: usize,
}

impl Region {
    fn new(start: usize, len: usize) -> Self {
        Self {
            start,
            end: start + len,
            cut: start,
            live: 0,
        }
    }

    /// Whether `address` is inside the region (so its block is the
    /// region's, not the standard allocator's).
    fn owns(&self, address: usize) -> bool {
        (self.start..self.end).contains(&address)
    }

    /// Cuts a block, or `None` when it is too large or does not fit.
    fn cut(&mut self, layout: Layout) -> Option<usize> {
        if layout.size() > MAX_BLOCK {
            return None;
        }
        // `align` is a power of two (Layout's invariant), so this rounds
        // `cut` up to it; an alignment so large the sum overflows cannot
        // be met here at all.
        let at = self.cut.checked_add(layout.align() - 1)? & !(layout.align() - 1);
        let after = at.checked_add(layout.size())?;
        if after > self.end {
            return None;
        }
        self.cut = after;
        self.live += 1;
        Some(at)
    }

    /// Frees a block of the region.
    fn free(&mut self, at: usize, size: usize) {
        self.live -= 1;
        if self.live == 0 {
            self.cut = self.start;
        } else if at + size == self.cut {
            // The block cut last: the next one can take its place.
            self.cut = at;
        }
    }

    /// Resizes a block of the region where it stands, if it is the one cut
    /// last (or shrinks): true when done.
    fn resize(&mut self, at: usize, old: usize, new: usize) -> bool {
        if at + old == self.cut {
            if new <= MAX_BLOCK && at + new <= self.end {
                self.cut = at + new;
                return true;
            }
            return false;
        }
        new <= old
    }
}

/// The allocator: see the module documentation.
#[derive(Debug)]
pub struct CallArena {
    state: UnsafeCell<State>,
}

#[derive(Debug, Clone, Copy)]
enum State {
    /// No block cut yet: the region is reserved on the first.
    Unreserved,
    /// The standard allocator refused the reservation: everything goes
    /// there.
    Off,
    On(Region),
}

// SAFETY: a wasm32 module without the atomics feature cannot start a
// thread, so no two calls into the allocator ever overlap.
#[cfg(all(target_arch = "wasm32", not(target_feature = "atomics")))]
unsafe impl Sync for CallArena {}

impl Default for CallArena {
    fn default() -> Self {
        Self::new()
    }
}

impl CallArena {
    /// An allocator whose region is reserved on first use.
    pub const fn new() -> Self {
        Self {
            state: UnsafeCell::new(State::Unreserved),
        }
    }

    /// Runs `f` on the allocator's state. `f` must not allocate through
    /// this allocator (none of the callers below does: they do
    /// arithmetic, or call the standard allocator).
    fn with_state<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        // SAFETY: calls into the allocator never overlap (one thread: see
        // the `Sync` impl; natively the type is not `Sync`), and `f` does
        // not re-enter it, so this is the only reference to the state
        // while it lives.
        f(unsafe { &mut *self.state.get() })
    }
}

impl State {
    /// Cuts a block from the region, reserving it first if it never was;
    /// `None` when the block is not the region's to give.
    fn cut(&mut self, layout: Layout) -> Option<usize> {
        if let Self::Unreserved = self {
            let region = Layout::from_size_align(REGION_BYTES, REGION_ALIGN)
                .expect("a constant, valid layout");
            // SAFETY: the layout's size is not zero.
            let start = unsafe { System.alloc(region) };
            *self = if start.is_null() {
                Self::Off
            } else {
                Self::On(Region::new(start as usize, REGION_BYTES))
            };
        }
        match self {
            Self::On(region) => region.cut(layout),
            _ => None,
        }
    }

    /// The region if it holds the block at `address`.
    fn owner(&mut self, address: usize) -> Option<&mut Region> {
        match self {
            Self::On(region) if region.owns(address) => Some(region),
            _ => None,
        }
    }
}

// SAFETY: every block handed out is either the standard allocator's (and
// given back to it) or a range of the region that no live block overlaps
// (`Region`'s invariants); calls never overlap (see `with_state`).
unsafe impl GlobalAlloc for CallArena {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match self.with_state(|state| state.cut(layout)) {
            Some(at) => at as *mut u8,
            // SAFETY: the caller's layout, passed on.
            None => unsafe { System.alloc(layout) },
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match self.with_state(|state| state.cut(layout)) {
            Some(at) => {
                // SAFETY: the block is `layout.size()` bytes of the
                // region, and a reused block holds what an earlier one
                // left.
                unsafe { std::ptr::write_bytes(at as *mut u8, 0, layout.size()) };
                at as *mut u8
            }
            // SAFETY: the caller's layout, passed on; fresh pages come
            // zeroed without a pass over them.
            None => unsafe { System.alloc_zeroed(layout) },
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let freed = self.with_state(|state| match state.owner(ptr as usize) {
            Some(region) => {
                region.free(ptr as usize, layout.size());
                true
            }
            None => false,
        });
        if !freed {
            // SAFETY: not the region's, so the standard allocator's.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let in_region = self.with_state(|state| {
            state
                .owner(ptr as usize)
                .map(|region| region.resize(ptr as usize, layout.size(), new_size))
        });
        match in_region {
            Some(true) => ptr,
            Some(false) => {
                // SAFETY: `new_size` with the block's alignment is a valid
                // layout (the caller's promise for `realloc`).
                let new_layout =
                    unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
                // SAFETY: as `alloc`; the copy is of the smaller size, both
                // blocks live and distinct (the new one was cut after the
                // old, or came from the standard allocator).
                unsafe {
                    let new = self.alloc(new_layout);
                    if !new.is_null() {
                        std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                        self.dealloc(ptr, layout);
                    }
                    new
                }
            }
            // SAFETY: not the region's, so the standard allocator's; a
            // block that outgrows it stays there.
            None => unsafe { System.realloc(ptr, layout, new_size) },
        }
    }
}

#[cfg(test)]
mod tests;
