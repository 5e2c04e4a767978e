//! The `custodian` command line: the commands in [`args`], one module per
//! command group (with its own arguments), the options several share in
//! [`options`], errors printed as `error:` with their causes.

mod args;
mod assembly;
mod audit;
mod crc64;
mod invalidations;
mod manifests;
mod object;
mod options;
mod plugin;
mod plugin_spec;
mod principal;
mod purge;
mod repo;
mod run;
mod serve;
mod sink;
mod stores;
mod takedown;
mod tick;
mod timer;
mod versions;

use std::process::ExitCode;

use clap::Parser;
use custodian::runtime::{Runtime, RuntimeConfig};

use args::{Cli, Command};
use options::Global;

/// How a command failed, which decides the exit code.
#[derive(Debug)]
pub enum Failure {
    /// The operation ran and failed (exit 1).
    Failed(anyhow::Error),
    /// Bad usage, or a plugin that cannot be loaded (exit 2).
    Usage(anyhow::Error),
    /// The data directory is held by another process (exit 3): nothing
    /// was done; retry later.
    Busy(anyhow::Error),
    /// A takedown withholds the content read or pushed (exit 4, the
    /// server's 451): not a failure a retry fixes.
    TakenDown(anyhow::Error),
    /// A lock, a legal hold or the retention policy protects what the
    /// command would destroy (exit 5, the server's 403 `retained`):
    /// nothing was changed, and retrying cannot help until it expires.
    Retained(anyhow::Error),
}

impl Failure {
    /// The one table from a failure's kind to how the command fails: busy
    /// (exit 3: nothing was done; retry later) when something is held
    /// elsewhere, taken down (exit 4) when a takedown withholds the
    /// content, bad usage (exit 2) for an argument or setting that cannot
    /// work, else failed (exit 1).
    fn of_kind(kind: custodian::error::ErrorKind, error: anyhow::Error) -> Self {
        use custodian::error::ErrorKind;
        match kind {
            ErrorKind::Busy => Failure::Busy(error),
            ErrorKind::TakenDown => Failure::TakenDown(error),
            ErrorKind::Retained => Failure::Retained(error),
            ErrorKind::InvalidArgument => Failure::Usage(error),
            _ => Failure::Failed(error),
        }
    }

    fn code(&self) -> u8 {
        match self {
            Failure::Failed(_) => 1,
            Failure::Usage(_) => 2,
            Failure::Busy(_) => 3,
            Failure::TakenDown(_) => 4,
            Failure::Retained(_) => 5,
        }
    }

    fn error(&self) -> &anyhow::Error {
        match self {
            Failure::Failed(e)
            | Failure::Usage(e)
            | Failure::Busy(e)
            | Failure::TakenDown(e)
            | Failure::Retained(e) => e,
        }
    }
}

/// What a command returns.
pub type Outcome = Result<(), Failure>;

/// Runs the command line.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    // A server's log is its record of operation; a command's stderr is
    // for its errors.
    let server = matches!(cli.command, Command::Serve(_));
    init_logging(cli.global.verbose, cli.global.log_format, server);
    let result = match cli.command {
        Command::Plugin(command) => plugin::run(&cli.global, command),
        Command::Run(args) => run::run(&cli.global, &args),
        Command::Crc64(args) => crc64::run(&args),
        Command::Object(command) => object::run(&cli.global, command),
        Command::Repo(command) => repo::run(&cli.global, command),
        Command::Tick(args) => tick::run(&cli.global, &args),
        Command::Takedown(command) => takedown::run(&cli.global, command),
        Command::Timer(command) => timer::run(command),
        Command::Audit(args) => audit::run(&args),
        Command::Versions(command) => versions::run(&cli.global, command),
        Command::Purge(command) => purge::run(&cli.global, command),
        Command::Serve(args) => serve::run(&cli.global, &args),
        Command::Config(command) => serve::config_command(command),
        Command::Principal(command) => principal::run(&cli.global, command),
        Command::Invalidations(command) => invalidations::run(&cli.global, command),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            report(failure.error());
            ExitCode::from(failure.code())
        }
    }
}

/// Prints `error` on stderr as `error: …` with its causes, one a line: how
/// every command reports a failure, including one it carries on after.
fn report(error: &anyhow::Error) {
    eprintln!("error: {error}");
    for cause in error.chain().skip(1) {
        eprintln!("  caused by: {cause}");
    }
}

fn init_logging(verbose: u8, format: options::LogFormat, server: bool) {
    // `tick` prints every failed step itself; the worker's own warning
    // about it (meant for a server's log) would repeat it at this level.
    let default = match (verbose, server) {
        (0, false) => format!("warn,{}=error", custodian::timers::WORKER_LOG_TARGET),
        (0, true) | (1, _) => "info".to_owned(),
        _ => "debug".to_owned(),
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal, never in files.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(true);
    match format {
        options::LogFormat::Text => builder.init(),
        options::LogFormat::Json => builder.json().init(),
    }
}

/// The runtime the global options describe.
fn runtime(global: &Global) -> Result<Runtime, Failure> {
    Runtime::new(&runtime_config(global)).map_err(|e| Failure::Failed(e.into()))
}

/// The runtime settings the global options describe, for a command.
fn runtime_config(global: &Global) -> RuntimeConfig {
    // One command makes one call at a time (two, when a step asks the
    // retention plugin), but keeps an idle warm instance of each plugin it
    // asked (a dry run asks two takedown and two retention plugins); a
    // small pool reserves less address space.
    let mut config = RuntimeConfig {
        concurrent_calls: 8,
        ..RuntimeConfig::default()
    };
    if global.no_cache {
        config.cache_dir = None;
    } else if let Some(dir) = &global.cache_dir {
        config.cache_dir = Some(dir.clone());
    }
    config
}

/// The data directory and its KV (the embedded default's), read with
/// `clock`.
fn open_data(
    data: &options::DataArgs,
    clock: std::sync::Arc<dyn custodian::clock::Clock>,
) -> Result<std::sync::Arc<dyn custodian::kv::Kv>, Failure> {
    let node = custodian::node::Node::open_local(&data.data, clock).map_err(node_failure)?;
    Ok(node.kv().clone())
}

/// Services for a command's plugins granted nothing, on the system clock
/// and `io`.
fn isolated_services(io: &tokio::runtime::Runtime) -> std::sync::Arc<custodian::runtime::Services> {
    custodian::runtime::Services::isolated(
        std::sync::Arc::new(custodian::clock::SystemClock),
        io.handle().clone(),
    )
}

/// How a node that cannot be opened fails the command.
fn node_failure(error: custodian::node::NodeError) -> Failure {
    Failure::of_kind(error.kind(), error.into())
}

/// The configuration file the global options name, if any.
fn config(global: &Global) -> Result<Option<custodian::config::Config>, Failure> {
    global
        .config
        .as_deref()
        .map(custodian::config::Config::load)
        .transpose()
        .map_err(|e| Failure::Usage(e.into()))
}

/// A runtime for the async mechanisms a command drives.
/// A progress bar on stderr drawn with `template` (indicatif's), or
/// `None` when stderr is not a terminal: a script reading the output gets
/// no control characters.
fn progress_bar(template: &str) -> Option<indicatif::ProgressBar> {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(0);
        if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar
    })
}

fn io_runtime() -> Result<tokio::runtime::Runtime, Failure> {
    use anyhow::Context;
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the I/O runtime")
        .map_err(Failure::Failed)
}
