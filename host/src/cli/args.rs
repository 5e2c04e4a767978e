//! The command line, as clap types.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use custodian::runtime::World;

use super::purge::PurgeCommand;
use super::repo::RepoCommand;
use super::versions::VersionsCommand;

/// Custodian: a storage host whose policies are WebAssembly components.
///
/// The host owns the mechanisms (content checksums, conditional publish,
/// guarded key-value batches, audit); a policy plugin, loaded from a
/// `.wasm` path, makes every decision. Bundled plugins are used when no
/// path is given.
///
/// Exit codes: 0 success; 1 the operation failed (a policy refused or
/// errored, a plugin trapped or hit a limit); 2 bad usage or a plugin that
/// cannot be loaded; 3 the data directory is in use by another process
/// (retry later).
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
    /// The configuration file (TOML): named object stores, so `--store
    /// NAME` can stand for a URL with its endpoint and region. See
    /// README.md for the format.
    #[arg(long, global = true, env = "CUSTODIAN_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Log more (-v: plugin logs and info; -vv: debug). RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// How log lines look on stderr: `text` for people, `json` (one
    /// object a line) for log collectors.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// The log line formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object a line.
    Json,
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
    /// --grant-store says otherwise. Partitions are in memory and start
    /// empty on every run, unless --data DIR names a data directory: then
    /// they are its durable KV (partitions named `custodian.*` belong to
    /// the host and cannot be granted). Stores are in memory.
    #[command(verbatim_doc_comment)]
    Run(RunArgs),
    /// Print the CRC-64/NVME of files, in hex and in S3's wire form.
    ///
    /// CRC-64/NVME is Custodian's content identity, and S3's
    /// `x-amz-checksum-crc64nvme`. For each FILE, one line:
    ///
    ///   ae8b14860a799888  rosUhgp5mIg=  FILE
    ///
    /// the CRC as 16 hex digits, then the wire form (base64 of its 8
    /// big-endian bytes, what S3 sends and expects), then the name. `-`
    /// reads stdin.
    ///
    /// --json prints one JSON array instead, an object per file:
    ///   [{"path": "FILE", "size": 9, "crc64": "ae8b14860a799888",
    ///     "wire": "rosUhgp5mIg="}]
    ///
    /// Files are read in blocks: memory stays constant (a few MiB) for any
    /// size, reading overlaps hashing, and each block is hashed on
    /// --threads threads. A progress bar shows on stderr for large files
    /// when stderr is a terminal.
    ///
    /// A file that is missing or cannot be read gets an `error:` line on
    /// stderr naming it; the other files are still checksummed and printed
    /// (and left out of the JSON), and the exit code is 1. Exit code 0
    /// means every file was read to its end; 2 is bad usage.
    #[command(verbatim_doc_comment)]
    Crc64(Crc64Args),
    /// Read and write objects in a store: put, get, head, ls, versions, rm.
    ///
    /// A store is named by a URL: file:///absolute/path (the filesystem
    /// store, created on first use, versioned unless ?versioned=false),
    /// mem:// (empty, in memory; for trying things out). --store may
    /// also come from $CUSTODIAN_STORE.
    ///
    /// Every publish is checked against its CRC-64/NVME, and names its
    /// condition: --if-none-match (create), --if-match ETAG (replace that
    /// generation) or --unconditional (only for content-addressed keys).
    /// A failed condition exits 1 saying which condition failed.
    #[command(subcommand, verbatim_doc_comment)]
    Object(ObjectCommand),
    /// Push files and directories into a repository's content, and list
    /// its entries.
    #[command(subcommand)]
    Repo(RepoCommand),
    /// Fire the timers that are due, running each step through its policy
    /// plugin; print what fired.
    ///
    /// Cron-style operation: each run fires what is due and exits. A step
    /// commits its writes, its audit records and its timer's reschedule
    /// (or deletion) in one durable transaction guarded on the timer row,
    /// so a step takes effect at most once even if runs overlap or are
    /// killed. A step that fails (trap, time or memory limit, spent
    /// budget, the policy's own error) commits nothing and is retried
    /// with exponential back-off (1 s doubling to 1 h); its error stays on
    /// the timer (`custodian timer list`).
    ///
    /// Each --plugin handles the timers of its world's kind (a
    /// takedown-world component handles `takedown` timers; without
    /// --plugin the bundled takedown policy does). A takedown plugin is
    /// granted the KV partition `takedown`, reading of the content index
    /// (partition `content`) and of the `serving` store, and writing of
    /// the `preserved` store; its retention questions go to
    /// --retention-plugin with --retention-ms. Due timers of kinds no
    /// plugin handles are counted and left alone.
    ///
    /// --now pins the clock; --fast-forward-to MS then runs the schedule
    /// as if time passed: whenever nothing is due, the clock jumps to the
    /// next due timer, until MS. Steps, deadlines and back-off all see the
    /// jumped clock, so hours of a request's life run in seconds.
    ///
    /// Output: one line per fired timer (outcome, kind, reference, step,
    /// next due or error); with --json one JSON object:
    ///   {"ticks": N, "fired": [{"kind", "reference", "due_ms", "step",
    ///    "outcome", "next_due_ms", "error"}], "more_due": false,
    ///    "unhandled": 0, "fenced": false}
    /// Outcomes: rescheduled, done, failed, lost (another worker fired it
    /// first), fenced (this worker's lease was revoked: nothing committed,
    /// the run stops), deferred (the run's budget ran out first).
    ///
    /// Exit 0 when every fired step committed, 1 when a step failed (it
    /// is retried later), 3 when another process holds the data
    /// directory: only one process at a time holds it, so a second
    /// `custodian tick` exits at once, touching nothing.
    #[command(verbatim_doc_comment)]
    Tick(TickArgs),
    /// List, schedule and cancel durable timers.
    #[command(subcommand)]
    Timer(TimerCommand),
    /// File takedown requests, follow them, and set their legal hold.
    ///
    /// A request takes objects (or a pack's whole inventory) of a
    /// repository down: the takedown policy preserves every byte to the
    /// `preserved` store (verified by CRC-64/NVME against the serving
    /// copy), discovers the other repositories holding the same content,
    /// keeps the preserved copy until retention ends (never while a legal
    /// hold is set), then purges it, and re-sweeps hourly for late
    /// writes. `custodian tick` runs the steps.
    #[command(subcommand, verbatim_doc_comment)]
    Takedown(TakedownCommand),
    /// Print the audit log: who did what to which targets, when.
    ///
    /// Every committed step writes its records in the same transaction as
    /// its effects, so the log holds exactly the steps that took effect.
    /// Text output is one record a line: time (ms), actor, event,
    /// targets, detail. --json prints one JSON object a line.
    #[command(verbatim_doc_comment)]
    Audit(AuditArgs),
    /// Verify and fetch pinned object versions (DVC `.dvc` files or
    /// Custodian's JSON pins) on a versioned store, following archived
    /// versions through archive registries.
    #[command(subcommand)]
    Versions(VersionsCommand),
    /// Permanently retire exact object versions on a versioned store:
    /// list the history candidates of pin manifests, and delete what a
    /// plan names once the archive registry, the purge plugin and the
    /// retention plugin allow it.
    #[command(subcommand)]
    Purge(PurgeCommand),
    /// Run the long-running host: the HTTP API, the timer workers, and
    /// hot swap of policy plugins.
    ///
    /// With no configuration file it runs on the embedded default: one
    /// data directory (the durable KV, the `serving` and `preserved`
    /// filesystem stores) and the bundled plugins. `custodian config
    /// example` prints a commented configuration with every setting.
    ///
    /// The API needs a bearer token on every mutating and admin route:
    /// $CUSTODIAN_TOKEN, else the file `[server] token_file` names, else
    /// DATA/token (written with a fresh random token on first start, owner
    /// read-only). The token is never logged.
    ///
    /// Once listening it prints one line on stdout:
    ///   listening on http://127.0.0.1:7420
    ///
    /// Signals: SIGTERM or SIGINT shut down gracefully (stop accepting,
    /// finish requests and steps in flight within the drain period, exit
    /// 0); SIGHUP re-reads the configuration and hot-swaps every plugin
    /// whose file changed.
    ///
    /// Exit codes: 0 after a graceful shutdown; 2 bad configuration or a
    /// plugin that cannot serve; 3 the data directory is held by another
    /// process; 1 anything else.
    #[command(verbatim_doc_comment)]
    Serve(ServeArgs),
    /// Print an example configuration file, or check one.
    #[command(subcommand)]
    Config(ConfigCommand),
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The data directory [default: `[server] data`, else
    /// $XDG_DATA_HOME/custodian, else ~/.local/share/custodian].
    #[arg(long, env = "CUSTODIAN_DATA", value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// The address to listen on [default: `[server] listen`, else
    /// 127.0.0.1:7420]. Port 0 picks a free port (printed on stdout).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<std::net::SocketAddr>,
    /// Timer worker loops [default: `[server] workers`, else 2].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub workers: Option<u32>,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print a commented configuration file with every setting.
    Example,
    /// Check a configuration file: exit 0 if `custodian serve` would
    /// accept it, 2 with the reason if not.
    Check {
        /// The file.
        file: PathBuf,
    },
}

/// Where the host keeps its durable state.
#[derive(Debug, Args)]
pub struct DataArgs {
    /// The data directory (created if missing): the durable KV with
    /// timers, policy state and the audit log.
    #[arg(long, env = "CUSTODIAN_DATA", value_name = "DIR")]
    pub data: PathBuf,
}

#[derive(Debug, Args)]
pub struct TickArgs {
    #[command(flatten)]
    pub data: DataArgs,
    /// A policy plugin that handles timers: a `.wasm` file or
    /// `builtin:WORLD` (repeatable) [default: the takedown plugin the data
    /// directory's shared plugin set names, else builtin:takedown]. A
    /// takedown plugin the set does not name is refused.
    #[arg(long = "plugin", value_name = "PATH")]
    pub plugins: Vec<String>,
    /// Keep ticking until nothing is due (at most --max-ticks ticks).
    #[arg(long)]
    pub until_idle: bool,
    /// Most ticks with --until-idle.
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    pub max_ticks: u32,
    /// Pretend it is this time (ms since the epoch) for due times, steps
    /// and deadlines: for tests, demos and replaying a schedule.
    #[arg(long, value_name = "MS")]
    pub now: Option<u64>,
    /// Store calls one step may make before it is stopped with
    /// budget-exhausted (and commits nothing).
    #[arg(long, default_value_t = 256, value_name = "N")]
    pub step_calls: u32,
    /// Wall-clock limit of one step.
    #[arg(long, default_value_t = 2000, value_name = "MS")]
    pub timeout_ms: u64,
    /// Memory limit of one step.
    #[arg(long, default_value_t = 64, value_name = "MIB")]
    pub memory_mib: usize,
    /// Jump the --now clock to each next due timer until MS (see above).
    #[arg(long, value_name = "MS", requires = "now")]
    pub fast_forward_to: Option<u64>,
    #[command(flatten)]
    pub retention: RetentionArgs,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// The retention policy a takedown asks, and the deployer's settings.
#[derive(Debug, Args)]
pub struct RetentionArgs {
    /// The retention plugin: a `.wasm` file or `builtin:retention`.
    #[arg(long, default_value = "builtin:retention", value_name = "PATH")]
    pub retention_plugin: String,
    /// How long preserved content is kept after its request was filed.
    #[arg(long, default_value_t = 30 * 24 * 3_600_000, value_name = "MS")]
    pub retention_ms: u64,
    /// How long a version is kept after it stopped being current.
    #[arg(long, default_value_t = 0, value_name = "MS")]
    pub noncurrent_retention_ms: u64,
}

/// The takedown policy and the data directory a takedown command uses.
#[derive(Debug, Args)]
pub struct TakedownPolicyArgs {
    #[command(flatten)]
    pub data: DataArgs,
    /// The takedown plugin: a `.wasm` file or `builtin:takedown`
    /// [default: the plugin the data directory's shared plugin set names
    /// (what a server on it last ran), else builtin:takedown]. A command
    /// that changes state refuses a plugin the set does not name.
    #[arg(long, value_name = "PATH")]
    pub plugin: Option<String>,
    /// Who is acting, for the audit log.
    #[arg(long, env = "USER", default_value = "unknown", value_name = "NAME")]
    pub operator: String,
    #[command(flatten)]
    pub retention: RetentionArgs,
}

#[derive(Debug, Subcommand)]
pub enum TakedownCommand {
    /// File a request against objects of NS/NAME (or a pack's inventory);
    /// print its id.
    ///
    /// The repository must hold every object (see `custodian repo ls`).
    /// The request is recorded with its timer due now, so the next
    /// `custodian tick` starts it. --json prints {"id": ..}.
    #[command(verbatim_doc_comment)]
    Create {
        #[command(flatten)]
        policy: TakedownPolicyArgs,
        /// The repository, `namespace/name`.
        repository: String,
        /// An object id (64 hex digits) to take down (repeatable, at most
        /// 1024).
        #[arg(
            long = "object",
            value_name = "ID",
            required_unless_present = "pack",
            conflicts_with = "pack"
        )]
        objects: Vec<String>,
        /// A pack id: take down everything in its inventory, nested sealed
        /// packs included.
        #[arg(long, value_name = "ID")]
        pack: Option<String>,
        /// Filing time, ms since the epoch [default: now].
        #[arg(long, value_name = "MS")]
        now: Option<u64>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show a request: phase, verification, counts, retain-until, hold,
    /// the next purge pass and the last error.
    ///
    /// Phases in order: seed, acquire, closure, discover, retain,
    /// purging, purged. The last error is the policy's (e.g. a corrupt
    /// source) or the one its last failed step left on the timer.
    /// --json prints one object with the same fields.
    #[command(verbatim_doc_comment)]
    Status {
        #[command(flatten)]
        policy: TakedownPolicyArgs,
        /// The request id.
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Set (`on`) or clear (`off`) a request's legal hold.
    ///
    /// A held request is never purged; a hold cannot be placed once
    /// purging has begun (exit 1, saying so). The request's timer moves
    /// to now so the change takes effect at the next tick.
    #[command(verbatim_doc_comment)]
    Hold {
        #[command(flatten)]
        policy: TakedownPolicyArgs,
        /// The request id.
        id: String,
        /// `on` or `off`.
        #[arg(value_parser = ["on", "off"])]
        state: String,
        /// When, ms since the epoch [default: now].
        #[arg(long, value_name = "MS")]
        now: Option<u64>,
    },
}

#[derive(Debug, Subcommand)]
pub enum TimerCommand {
    /// List timers in due order, with their step count and last error.
    List {
        #[command(flatten)]
        data: DataArgs,
        /// Print JSON (one object a line).
        #[arg(long)]
        json: bool,
    },
    /// Schedule (or move) the timer KIND/REFERENCE.
    Schedule {
        #[command(flatten)]
        data: DataArgs,
        /// The timer's kind: the world whose plugin runs it (e.g.
        /// `takedown`).
        kind: String,
        /// What it is about: text, or `0x` and hex for bytes (so text that
        /// itself starts with `0x` must be given in hex).
        reference: String,
        /// When it is due, ms since the epoch [default: now].
        #[arg(long, value_name = "MS")]
        due: Option<u64>,
    },
    /// Cancel the timer KIND/REFERENCE; exit 1 if there is none.
    Cancel {
        #[command(flatten)]
        data: DataArgs,
        /// The timer's kind.
        kind: String,
        /// Its reference: text, or `0x` and hex.
        reference: String,
    },
}

#[derive(Debug, Args)]
pub struct AuditArgs {
    #[command(flatten)]
    pub data: DataArgs,
    /// Only records at or after this time, ms since the epoch.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pub since: u64,
    /// Print at most this many records.
    #[arg(long, value_name = "N")]
    pub limit: Option<u64>,
    /// Print one JSON object a line.
    #[arg(long)]
    pub json: bool,
}

/// Which object store a command works on.
#[derive(Debug, Args)]
pub struct StoreArgs {
    /// The store: a URL (file:///absolute/path, mem://, s3://bucket/prefix)
    /// or the name of a store in the --config file.
    #[arg(long = "store", env = "CUSTODIAN_STORE", value_name = "URL|NAME")]
    pub url: String,
    /// For s3:// stores: the endpoint of an S3-compatible server (e.g.
    /// http://127.0.0.1:9000), addressed path-style [default: AWS].
    #[arg(long, env = "CUSTODIAN_S3_ENDPOINT", value_name = "URL")]
    pub endpoint: Option<String>,
    /// For s3:// stores: the region [default: from the AWS configuration:
    /// $AWS_REGION, the profile, or the instance metadata]. Credentials
    /// come only from the standard chain (environment, profile, instance
    /// role), never from flags.
    #[arg(long, value_name = "REGION")]
    pub region: Option<String>,
}

/// The condition a publish must meet; exactly one is required.
#[derive(Debug, Args)]
pub struct PutGuard {
    /// Replace the object only while its etag is ETAG.
    #[arg(long, value_name = "ETAG")]
    pub if_match: Option<String>,
    /// Create the object only if the key has none.
    #[arg(long)]
    pub if_none_match: bool,
    /// No guard: only for content-addressed keys, where every writer writes
    /// the same bytes.
    #[arg(long)]
    pub unconditional: bool,
}

#[derive(Debug, Subcommand)]
pub enum ObjectCommand {
    /// Publish a file (or stdin) at KEY; print the new etag, version id and
    /// CRC. Files over 64 MiB are composed in parts.
    Put {
        #[command(flatten)]
        store: StoreArgs,
        /// The object key: `/`-separated, no empty, `.` or `..` segments.
        key: String,
        /// The file to publish; `-` reads stdin.
        #[arg(default_value = "-")]
        file: String,
        #[command(flatten)]
        guard: PutGuard,
        /// User metadata to set, KEY=VALUE (repeatable; keys of lowercase
        /// [a-z0-9_-], printable ASCII values, 2 KiB in all).
        #[arg(long = "meta", value_name = "KEY=VALUE")]
        meta: Vec<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Write an object (or one version, or a range of it) to a file or
    /// stdout. Long reads are pinned to one generation: if the object is
    /// replaced midway, nothing is written and the command exits 1.
    #[command(disable_version_flag = true)]
    Get {
        #[command(flatten)]
        store: StoreArgs,
        /// The object key.
        key: String,
        /// Where to write; `-` is stdout. A file is written whole or not at
        /// all.
        #[arg(default_value = "-")]
        file: String,
        /// Read this exact version.
        #[arg(long, value_name = "ID")]
        version: Option<String>,
        /// Only bytes A through B (inclusive, as in HTTP), or from A to the
        /// end with `A-`.
        #[arg(long, value_name = "A-B")]
        range: Option<String>,
        /// Fail unless the current object has this etag.
        #[arg(long, value_name = "ETAG")]
        if_match: Option<String>,
    },
    /// Show an object's (or a version's) etag, version, size, CRC and
    /// metadata.
    #[command(disable_version_flag = true)]
    Head {
        #[command(flatten)]
        store: StoreArgs,
        /// The object key.
        key: String,
        /// This exact version.
        #[arg(long, value_name = "ID")]
        version: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// List current objects under a prefix.
    Ls {
        #[command(flatten)]
        store: StoreArgs,
        /// Only keys starting with this.
        #[arg(default_value = "")]
        prefix: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// List every version and delete marker under a prefix, newest first
    /// within a key (`*` marks the current one).
    Versions {
        #[command(flatten)]
        store: StoreArgs,
        /// Only keys starting with this.
        #[arg(default_value = "")]
        prefix: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Check (and where needed set up) a store: whether it keeps versions,
    /// whether abandoned uploads are cleaned up, whether the server
    /// validates checksums (an S3-compatible server that does not is
    /// probed and then verified by reading back every publish). Prints
    /// notes, warnings and errors; exits 1 if the store is not usable.
    Bootstrap {
        #[command(flatten)]
        store: StoreArgs,
        /// The key prefix the host will use.
        #[arg(default_value = "")]
        prefix: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove an object (a delete marker on a versioned store), or one
    /// exact version permanently with --version.
    #[command(disable_version_flag = true)]
    Rm {
        #[command(flatten)]
        store: StoreArgs,
        /// The object key.
        key: String,
        /// Remove this exact version permanently.
        #[arg(long, value_name = "ID")]
        version: Option<String>,
    },
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
    /// Replace a running server's plugin of a world, without a restart.
    ///
    /// The server checks the plugin (a component of that world, built
    /// against a compatible contract, answering a smoke call), then swaps
    /// it: calls already running finish on the old plugin, and once the
    /// command reports success no step of the old plugin can commit. A
    /// refused plugin leaves the old one serving; the reason is printed
    /// and the exit code is 1.
    ///
    /// The token comes from $CUSTODIAN_TOKEN or --token-file.
    #[command(verbatim_doc_comment)]
    Swap {
        /// The world to swap.
        #[arg(long)]
        world: World,
        /// The new `.wasm` file.
        plugin: PathBuf,
        /// The server's base URL.
        #[arg(
            long,
            env = "CUSTODIAN_SERVER",
            default_value = "http://127.0.0.1:7420"
        )]
        server: String,
        /// A file holding the API token (when $CUSTODIAN_TOKEN is unset).
        #[arg(long, value_name = "FILE")]
        token_file: Option<PathBuf>,
        /// Who is swapping, for the audit log.
        #[arg(long, env = "USER", default_value = "unknown", value_name = "NAME")]
        operator: String,
        /// Print the server's JSON report.
        #[arg(long)]
        json: bool,
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
    /// Serve the plugin's KV partitions from this data directory's
    /// durable KV instead of memory.
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// Print the JSON on one line instead of indented.
    #[arg(long)]
    pub compact: bool,
}

#[derive(Debug, Args)]
pub struct Crc64Args {
    /// The files to checksum, in order; `-` reads stdin.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Print one JSON array of {path, size, crc64, wire} instead of text.
    #[arg(long)]
    pub json: bool,
    /// Threads hashing each block, at most 64; 0 uses every available
    /// core.
    // Bounded so a typo cannot ask for thousands of threads; the checksum
    // module caps the count at the same number.
    #[arg(
        long,
        default_value_t = 0,
        value_name = "N",
        value_parser = clap::value_parser!(u16).range(0..=custodian::checksum::MAX_THREADS as i64)
    )]
    pub threads: u16,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_command_line_definition_is_consistent() {
        super::Cli::command().debug_assert();
    }
}
