//! The command line, as clap types.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use custodian::runtime::World;

/// Custodian: a storage host whose policies are WebAssembly components.
///
/// The host owns the mechanisms (content checksums, conditional publish,
/// guarded key-value batches, audit); a policy plugin, loaded from a
/// `.wasm` path, makes every decision. Bundled plugins are used when no
/// path is given.
///
/// Exit codes: 0 success; 1 the operation failed (a policy refused or
/// errored, a plugin trapped or hit a limit); 2 bad usage or a plugin that
/// cannot be loaded.
#[derive(Debug, Parser)]
#[command(
    name = "custodian",
    version,
    propagate_version = true,
    max_term_width = 100
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    #[command(flatten)]
    pub global: Global,
}

/// Options every command takes.
#[derive(Debug, Args)]
pub struct Global {
    /// Where compiled plugins are cached [default: $CUSTODIAN_CACHE_DIR,
    /// else $XDG_CACHE_HOME/custodian/components, else
    /// ~/.cache/custodian/components].
    #[arg(long, global = true, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Compile plugins on every load instead of using the cache.
    #[arg(long, global = true)]
    pub no_cache: bool,
    /// Log more (-v: plugin logs and info; -vv: debug). RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Inspect, check and list policy plugins.
    #[command(subcommand)]
    Plugin(PluginCommand),
    /// Call one function of a policy plugin with JSON input; print the
    /// result as JSON.
    ///
    /// The input is an object keyed by the function's parameter names as
    /// the WIT spells them. Records are objects, enums are strings,
    /// variants are "case" or {"case": payload}, options are null or a
    /// value, results are {"ok": ..} or {"err": ..}, list<u8> is an array
    /// of numbers (or a string, taken as UTF-8).
    ///
    /// Example:
    ///   custodian run retention assess --input '{"settings": {"retention-ms":
    ///   86400000, "noncurrent-retention-ms": 0}, "item": {"created-ms":
    ///   1700000000000, "hold": false, "stage": "retaining"}, "now-ms":
    ///   1700090000000}'
    ///
    /// The plugin runs with nothing granted unless --grant-partition or
    /// --grant-store says otherwise; partitions and stores are in memory
    /// and start empty on every run.
    #[command(verbatim_doc_comment)]
    Run(RunArgs),
}

#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Show a plugin's world, contract version, imports, exports, size,
    /// content hash and load time.
    Inspect {
        /// A `.wasm` file, or `builtin:WORLD` for a bundled plugin.
        plugin: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Check that a plugin loads (and, with --world, implements that world);
    /// exit 0 if so, 2 with the reason if not.
    Check {
        /// A `.wasm` file, or `builtin:WORLD` for a bundled plugin.
        plugin: String,
        /// The world it must implement.
        #[arg(long)]
        world: Option<World>,
    },
    /// List the bundled plugins.
    List {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Write a bundled plugin's `.wasm` to a file (a starting point, or to
    /// inspect it with other tools).
    Export {
        /// The world whose bundled plugin to write.
        world: World,
        /// Where to write it.
        #[arg(long, short)]
        output: PathBuf,
    },
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The plugin's world (takedown, retention, purge, archive), or a full
    /// exported interface name such as `ns:pkg/iface@1.0.0`.
    pub world: String,
    /// The function to call, as the WIT spells it (e.g. `assess`).
    pub function: String,
    /// The plugin: a `.wasm` file or `builtin:WORLD` [default: the bundled
    /// plugin of WORLD].
    #[arg(long, value_name = "PATH")]
    pub plugin: Option<String>,
    /// The input: JSON text, `@FILE` to read a file, or `-` for stdin.
    #[arg(long, default_value = "{}", value_name = "JSON")]
    pub input: String,
    /// Grant the plugin this KV partition (repeatable).
    #[arg(long = "grant-partition", value_name = "NAME")]
    pub partitions: Vec<String>,
    /// Grant the plugin an object store of this name (repeatable).
    #[arg(long = "grant-store", value_name = "NAME")]
    pub stores: Vec<String>,
    /// Wall-clock limit of the call.
    #[arg(long, default_value_t = 2000, value_name = "MS")]
    pub timeout_ms: u64,
    /// Memory limit of the call.
    #[arg(long, default_value_t = 64, value_name = "MIB")]
    pub memory_mib: usize,
    /// Budget of host calls (kv, objects, audit) for the call.
    #[arg(long, default_value_t = 1000, value_name = "N")]
    pub host_calls: u32,
    /// Pin the clock the plugin sees, in ms since the epoch.
    #[arg(long, value_name = "MS")]
    pub now: Option<u64>,
    /// Print the JSON on one line instead of indented.
    #[arg(long)]
    pub compact: bool,
}
