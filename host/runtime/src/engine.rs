//! The wasmtime engine: configuration and the epoch ticker.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::{Limits, RuntimeError};

/// One epoch tick. A call's CPU deadline is a number of ticks, so this is
/// the granularity of the time limit: 5 ms keeps it tight without the
/// ticker thread costing anything measurable.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(5);

/// Set (to anything) to have the runtime write a perf map of plugin code.
const PERF_MAP_VAR: &str = "CUSTODIAN_PERF_MAP";

/// Builds the engine every plugin of a [`super::Runtime`] runs on.
pub(crate) fn build(concurrent_calls: u32) -> Result<Engine, RuntimeError> {
    let mut config = Config::new();
    config.wasm_component_model(true);
    // Calls are synchronous; with concurrency support on, every component
    // call pays for task bookkeeping (measured ~4x on a trivial call).
    config.concurrency_support(false);
    config.epoch_interruption(true);
    config.memory_init_cow(true);
    config.cranelift_opt_level(wasmtime::OptLevel::Speed);
    // `perf` cannot name JIT code by itself: with this set, wasmtime writes
    // `/tmp/perf-<pid>.map` naming each compiled function, so a profile of
    // a plugin's calls reads `wasm[0]::function[N]` (or its name, if the
    // plugin keeps its name section) instead of bare addresses.
    if std::env::var_os(PERF_MAP_VAR).is_some() {
        config.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    let mut pool = PoolingAllocationConfig::new();
    // A Rust wasip2 component holds a handful of core instances (the
    // program, the WASI adapter, shims) and one or two memories; the totals
    // below size the pool for `concurrent_calls` live instances at once.
    pool.total_component_instances(concurrent_calls)
        .total_core_instances(concurrent_calls * 8)
        .total_memories(concurrent_calls * 2)
        .total_tables(concurrent_calls * 8)
        .max_core_instances_per_component(16)
        .max_memories_per_component(4)
        .max_tables_per_component(8)
        .max_memory_size(Limits::MAX_MEMORY_BYTES)
        // Fresh instances (every call of the rarely called worlds, and each
        // miss of a warm pool) make instantiation a hot path. Keeping
        // the low pages of a slot resident (reset with memset, not madvise)
        // saves the syscall on release and the page faults on reuse; a Rust
        // guest's stack, data and early heap fit in the first megabyte.
        .linear_memory_keep_resident(1 << 20)
        .table_keep_resident(64 << 10)
        .pagemap_scan(wasmtime::Enabled::Auto);
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    Engine::new(&config).map_err(|e| RuntimeError::Engine(format!("{e:#}")))
}

/// Advances the engine's epoch every [`EPOCH_TICK`] until dropped.
pub(crate) struct EpochTicker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl EpochTicker {
    pub(crate) fn start(engine: Engine) -> Result<Self, RuntimeError> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("custodian-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    engine.increment_epoch();
                }
            })
            .map_err(|e| RuntimeError::Engine(format!("cannot start the epoch ticker: {e}")))?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            // The ticker only sleeps and increments; joining waits one tick.
            let _ = thread.join();
        }
    }
}
