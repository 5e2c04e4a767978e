//! The process's allocator: jemalloc, with few arenas and free pages
//! handed back within a second by its background thread.
//!
//! glibc's malloc was the server's until its allocation traffic was
//! measured under load: a takedown step allocates and frees on the
//! blocking threads, the timer workers and the KV's group commit at once,
//! and glibc serialises threads that share an arena (a `free` of a block
//! another arena handed out takes that arena's lock). With one arena per
//! core, the bound that kept glibc's memory flat across plugin swaps,
//! `malloc` and `free` were 17–21 % of the server's CPU samples during ten
//! concurrent takedowns, with threads asleep on futexes inside them.
//! jemalloc gives each thread its own cache of small blocks, so most
//! calls take no lock at all: the ten ran 17–38 % faster on tmpfs and
//! 25–27 % on disk, on 14–36 % less CPU (alternated with glibc).
//!
//! Its settings, in `.cargo/config.toml` (`JEMALLOC_SYS_WITH_MALLOC_CONF`,
//! compiled into the allocator, so no environment is needed at run time):
//! - `narenas:2`: two arenas, as glibc had; the thread caches take the
//!   contention that more arenas would, without each keeping its own
//!   scattered free pages.
//! - `dirty_decay_ms:1000`, `muzzy_decay_ms:0`: pages freed are handed
//!   back to the system about a second later, by the background thread
//!   the `background_threads` feature starts. What a plugin swap's
//!   compile and replay allocate and free goes back after the swap
//!   without a call asking for it (glibc needed `malloc_trim`).
//!
//! `MALLOC_CONF` (jemalloc's, prefixed `_RJEM_MALLOC_CONF` in this
//! build) still overrides them for an operator who needs otherwise.
//!
//! Code must not ask it for large zeroed buffers to read into:
//! `custodian_base::buffer` says why and is where they come from.
//!
//! Figures, method and the memory soak: README, "The allocator".

/// The global allocator of the `custodian` binary, and of the benchmarks
/// that measure in process what it runs (each includes this module); the
/// libraries leave the choice to whoever links them.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
