//! Handing the allocator's free pages back to the system after a plugin
//! swap.
//!
//! A swap compiles or deserializes a component, links it and replays due
//! timers through it: a burst of allocations, most freed within the
//! second. glibc keeps what a burst freed inside its arenas, so without
//! this each swap left the host a few megabytes larger, for good (the
//! `soak` benchmark: flat between swaps, 0.6 to 9 MiB more at each; one
//! `malloc_trim(0)` took its server from 81.7 to 65.4 MiB).

/// Returns free memory held by the allocator to the system when dropped,
/// so a swap trims on every way out of it, its errors included.
pub(crate) struct TrimOnDrop;

impl Drop for TrimOnDrop {
    fn drop(&mut self) {
        release_free_pages();
    }
}

/// Asks the allocator to give its free pages back: glibc's `malloc_trim`,
/// which walks every arena under its own lock (a few milliseconds; swaps
/// are rare). Other allocators return free memory themselves.
fn release_free_pages() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointer and only reorganises glibc's
    // own free lists, under the locks every malloc and free take.
    #[allow(unsafe_code)]
    unsafe {
        libc::malloc_trim(0);
    }
}
