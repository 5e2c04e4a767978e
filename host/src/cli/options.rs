//! The options several commands share, as clap types: the global options,
//! and where the data directory, an object store and the retention policy
//! are.

use std::path::PathBuf;

use clap::Args;

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

/// Where the host keeps its durable state.
#[derive(Debug, Args)]
pub struct DataArgs {
    /// The data directory (created if missing): the durable KV with
    /// timers, policy state and the audit log.
    #[arg(long, env = "CUSTODIAN_DATA", value_name = "DIR")]
    pub data: PathBuf,
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

/// The retention policy a takedown asks, and the deployer's settings.
#[derive(Debug, Args)]
pub struct RetentionArgs {
    /// The retention plugin: a `.wasm` file or `builtin:retention`
    /// [default: builtin:retention; on a data directory, the plugin its
    /// shared plugin set names, else the configured one]. A command that
    /// changes a data directory refuses a plugin its set does not name.
    #[arg(long, value_name = "PATH")]
    pub retention_plugin: Option<String>,
    /// How long preserved content is kept after its request was filed.
    #[arg(long, default_value_t = 30 * 24 * 3_600_000, value_name = "MS")]
    pub retention_ms: u64,
    /// How long a version is kept after it stopped being current.
    #[arg(long, default_value_t = 0, value_name = "MS")]
    pub noncurrent_retention_ms: u64,
}
