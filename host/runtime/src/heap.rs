//! The host's terms with the allocator: a bounded number of arenas, and
//! free pages handed back to the system after a plugin swap.
//!
//! glibc gives each thread that meets a busy arena a new one, up to eight
//! per core, and an arena keeps the pages its frees leave scattered. A
//! swap compiles on the compiler's threads and the steps run on any of
//! the blocking threads, so over the first swaps more and more arenas each
//! kept a few megabytes (the `soak` benchmark: +1.5 MiB a swap for ~7
//! swaps, then a plateau 15 % above the end of warm-up). With one arena
//! per core (two there) the same run stayed flat from the first swap.
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

/// Bounds the allocator's arenas to one per core (glibc's own bound is
/// eight per core), unless `MALLOC_ARENA_MAX` is set: an operator's own
/// choice stands. The threads that allocate most, the compiler's and the
/// workers', are about as many as the cores, so more arenas mostly hold
/// more scattered free pages. Call it first thing in a long-running
/// process, before its threads start: it only bounds arenas made after.
pub fn bound_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // At least two, so a lone core's server still has the main arena
        // and one for its other threads; at most what fits the C int.
        let arenas = std::thread::available_parallelism()
            .map_or(2, usize::from)
            .clamp(2, 1024);
        // SAFETY: mallopt takes two integers and only changes glibc's
        // own tuning, under its own lock; M_ARENA_MAX is a setting every
        // glibc since 2.10 knows.
        #[allow(unsafe_code)]
        unsafe {
            libc::mallopt(
                libc::M_ARENA_MAX,
                i32::try_from(arenas).expect("clamped to 1024"),
            );
        }
    }
}
