//! The command line, as clap types: the commands; each command's own
//! arguments are in its module, and the options several share in
//! [`options`](super::options).

use clap::{Parser, Subcommand};

use super::audit::AuditArgs;
use super::crc64::Crc64Args;
use super::invalidations::InvalidationsCommand;
use super::object::ObjectCommand;
use super::options::Global;
use super::plugin::PluginCommand;
use super::principal::PrincipalCommand;
use super::purge::PurgeCommand;
use super::repo::RepoCommand;
use super::run::RunArgs;
use super::serve::{ConfigCommand, ServeArgs};
use super::takedown::TakedownCommand;
use super::tick::TickArgs;
use super::timer::TimerCommand;
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
/// (retry later); 4 a takedown withholds the content; 5 a lock, legal
/// hold or the retention policy protects what would be destroyed.
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
    /// Manage who may call the API: principals, their roles and their
    /// tokens.
    ///
    /// Every API request names a principal by a bearer token, and the
    /// access plugin decides what it may do from the principal's roles.
    /// The server's bootstrap token (DATA/token) belongs to principal
    /// `admin`. Tokens are stored hashed; a new one is printed once.
    #[command(subcommand, verbatim_doc_comment)]
    Principal(PrincipalCommand),
    /// List and acknowledge the cache invalidations takedowns plan.
    ///
    /// A takedown plans one invalidation per repository holding the content
    /// it took down, in an outbox in the KV. `custodian serve` delivers
    /// each to the `[invalidation] webhook` (a JSON POST with an
    /// Idempotency-Key header, at least once, retried with back-off until
    /// a 2xx) and deletes it then; without a webhook, entries stay until a
    /// consumer acknowledges them (here, or `POST /v1/invalidations/ack`).
    ///
    /// While a server holds a data directory's embedded KV these commands
    /// exit 3: use its /v1/invalidations routes. On etcd, --config lets
    /// them run beside the servers.
    #[command(subcommand, verbatim_doc_comment)]
    Invalidations(InvalidationsCommand),
    /// Print an example configuration file, or check one.
    #[command(subcommand)]
    Config(ConfigCommand),
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_command_line_definition_is_consistent() {
        super::Cli::command().debug_assert();
    }
}
