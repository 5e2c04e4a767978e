//! The WebAssembly runtime: one engine, plugins loaded from paths, a fresh
//! store per call (except the access world's warm instances, asked on
//! every API request: see [`policy::access`]); the host-side drivers of each policy world
//! ([`policy`]), the plugins bundled as defaults ([`bundled`]), and the
//! plugin set every host sharing a KV runs, with its hot swap
//! ([`plugin_set`]). This is the only crate that links wasmtime.
//!
//! Rules it keeps (README, "The runtime's rules"):
//! - calls are synchronous (`concurrency_support(false)`); a call blocks
//!   its thread, so async callers run it on a blocking thread;
//! - the pooling allocator with copy-on-write memory images, and one
//!   `InstancePre` per plugin, so a call only instantiates;
//! - every call is bounded by a wall-clock deadline (epoch interruption in
//!   guest code, a timeout around every host call), a memory cap and a
//!   budget of host calls, and exceeding one is a typed [`LimitExceeded`];
//! - a plugin reaches only the partitions and stores in its [`Grants`];
//! - compiled components are cached on disk, keyed by content hash and
//!   engine compatibility, so a restart does not recompile.

mod bindings;
mod blame;
pub mod bundled;
mod cache;
mod call;
pub mod cases;
mod context;
mod engine;
pub(crate) mod host;
mod json;
mod limits;
mod load;
pub mod plugin_set;
pub mod policy;
pub mod signature;
#[cfg(test)]
mod test_guests;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use wasmtime::Engine;
use wasmtime::component::Linker;

pub use call::{CallError, Function, Session, TypedFunction};
pub use context::{CallContext, Grants, Services};
pub use limits::{LimitExceeded, Limits};
pub use load::{CONTRACT_VERSION, ExportInfo, LoadError, Plugin, PluginInfo, World, content_hash};

pub(crate) use call::{classify, classify_instantiate};
use host::CallState;

/// The WIT `error` type, for the policy drivers' conversions.
pub(crate) mod bindings_error {
    pub(crate) use super::bindings::host::custodian::host::types::Error as WitError;
}

/// How to build a [`Runtime`].
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Where compiled components are cached; `None` compiles every load.
    pub cache_dir: Option<PathBuf>,
    /// Plugin calls that may be in flight at once. Sizes the instance pool;
    /// a call beyond it fails with [`CallError::Busy`] instead of
    /// allocating without bound.
    pub concurrent_calls: u32,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            cache_dir: default_cache_dir(),
            concurrent_calls: 64,
        }
    }
}

/// `$CUSTODIAN_CACHE_DIR`, else `$XDG_CACHE_HOME/custodian/components`,
/// else `~/.cache/custodian/components`.
pub fn default_cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("CUSTODIAN_CACHE_DIR") {
        return Some(PathBuf::from(dir));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cache")))?;
    Some(base.join("custodian").join("components"))
}

/// Why the runtime could not start.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The engine or its ticker could not be created.
    #[error("cannot start the WebAssembly engine: {0}")]
    Engine(String),
    /// The compiled-component cache could not be opened.
    #[error("cannot open the plugin cache at {path}")]
    Cache {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The engine, the linker with every host interface, and the disk cache.
pub struct Runtime {
    engine: Engine,
    linker: Linker<CallState>,
    cache: Option<cache::DiskCache>,
    /// Shared with every plugin loaded here: a plugin's calls are stopped
    /// at their deadline by this ticker, so it lives as long as any of them.
    ticker: Arc<engine::EpochTicker>,
}

impl Runtime {
    /// Starts a runtime.
    ///
    /// # Errors
    /// [`RuntimeError`] if the engine cannot be built or the cache directory
    /// cannot be created.
    pub fn new(config: &RuntimeConfig) -> Result<Self, RuntimeError> {
        let engine = engine::build(config.concurrent_calls.max(1))?;
        let mut linker = Linker::new(&engine);
        host::add_to_linker(&mut linker).map_err(|e| RuntimeError::Engine(format!("{e:#}")))?;
        let cache = config
            .cache_dir
            .as_deref()
            .map(|dir| {
                cache::DiskCache::open(dir, &engine).map_err(|source| RuntimeError::Cache {
                    path: dir.to_owned(),
                    source,
                })
            })
            .transpose()?;
        let ticker = engine::EpochTicker::start(engine.clone())?;
        Ok(Self {
            engine,
            linker,
            cache,
            ticker: Arc::new(ticker),
        })
    }
}
