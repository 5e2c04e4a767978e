//! `custodian versions …`: verify pinned object versions against a
//! versioned store, and fetch their bytes into a content-addressed cache.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::anyhow;
use clap::{Args, Subcommand};
use custodian::config::Config;
use custodian::object::ObjectStore;
use custodian::policy::archive::ArchivePolicy;
use custodian::runtime::Limits;
use custodian::versions::addressed;
use custodian::versions::aliases::Aliases;
use custodian::versions::dvc::Pointers;
use custodian::versions::hops::HopPolicy;
use custodian::versions::verify::{Problem, require_versioned};
use custodian::versions::{VersionsError, fetch, verify};

use super::manifests::ManifestArgs;
use super::options::{Global, StoreArgs};
use super::{Failure, Outcome, io_runtime};

/// `custodian versions` subcommands.
#[derive(Debug, Subcommand)]
pub enum VersionsCommand {
    /// Check that every pinned version exists in the store as pinned.
    ///
    /// Each pin names an exact version of a key (see --pins for the
    /// manifest formats). A pin passes when that version exists, is not a
    /// delete marker, and has the pinned size and etag (etags compare
    /// without quotes; a plain S3 etag, as DVC records, matches the S3
    /// backend's "<s3-etag>:<version>" of that same version, and an MD5
    /// matches a version the embedded store recorded it for, as the S3
    /// endpoint's ETags are); a
    /// crc64nvme pin must also match the CRC the store recorded. No bytes
    /// are read: MD5 digests are checked by `fetch`.
    ///
    /// A version the store does not have is looked up in the archive
    /// registry (`PREFIX/.custodian-archive.json`) of the nearest
    /// ancestor prefix of its key, and followed where the archive plugin
    /// says it moved: at most 32 hops, never in a cycle. With --receipts,
    /// a pin on the destination of a planned (not yet copied) archive task
    /// is checked at its source.
    ///
    /// Pins under one prefix (8 or more) are checked from version
    /// listings (two pages at most) rather than one HEAD each; a store
    /// that refuses listing is asked by HEAD.
    ///
    /// Output: one line per pin, `ok KEY@VERSION` (with where it was
    /// found, if elsewhere) or `FAIL KEY@VERSION: why`; every failing pin
    /// is reported. --json prints one object instead:
    ///   {"ok": bool, "checked": [{"pin", "manifest", "found", "hops",
    ///    "via"}], "problems": [{"pin", "manifest", "kind", "error"}],
    ///    "requests": {"list_versions": N, "head_version": N}}
    ///
    /// Exit 0 when every pin passed; 1 when a pin failed, the store does
    /// not have versioning enabled, or cannot be reached; 2 for bad usage,
    /// an unreadable or invalid manifest or receipt, or an archive plugin
    /// that cannot be loaded.
    #[command(verbatim_doc_comment)]
    Verify {
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        pins: PinArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Download pinned versions into a content-addressed cache, all or
    /// nothing.
    ///
    /// The cache is laid out as DVC's: the bytes with digest D live at
    /// CACHE/D[0..2]/D[2..], a directory's listing at
    /// CACHE/D[0..2]/D[2..].dir (point --cache at a project's
    /// .dvc/cache/files/md5 and `dvc checkout` uses what was fetched). A
    /// pin already there (size and digest match) downloads nothing, but is
    /// still verified against the store as `verify` does. Every other pin
    /// is read by exact version (following pending aliases and archive
    /// hops as `verify` does; 16 at a time; retried twice when the store
    /// is unavailable) and checked (version, size, etag and content
    /// digest: a mismatch fails naming the object).
    ///
    /// All or nothing: downloads go to a scratch directory inside CACHE
    /// (.custodian-fetch-*), fsynced; only when every pin passed is each
    /// file renamed into place (its directory fsynced). Any failing pin
    /// installs nothing. A fetch killed before installing leaves only its
    /// scratch directory, which the next fetch removes.
    ///
    /// Output: a summary, `downloaded N (B bytes), cached M (B bytes), L
    /// directory listings` (or `installed nothing`), and a `FAIL
    /// KEY@VERSION: why` line per failing pin; --json prints
    ///   {"ok": bool, "installed": bool, "downloaded": N,
    ///    "downloaded_bytes": B, "cached": M, "cached_bytes": B,
    ///    "listings": L, "fetched": [...], "problems": [...]}
    /// A progress bar shows on stderr when it is a terminal.
    ///
    /// Exit codes as for `verify`.
    #[command(verbatim_doc_comment)]
    Fetch {
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        pins: PinArgs,
        /// The cache directory (created if missing).
        #[arg(long, value_name = "DIR")]
        cache: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Where the pins come from, and how missing versions are followed.
#[derive(Debug, Args)]
pub struct PinArgs {
    #[command(flatten)]
    pub manifests: ManifestArgs,
    /// Receipts of archive tasks (a JSON array): pins on the destination
    /// of a `planned` task are checked at its source. Each receipt has
    /// {"schema_version": 1, "status": "planned"|"copied", "store":
    /// "<the --store value>", "source": "P", "destination": "Q",
    /// "versions": [{"source_object", "source_version_id", "source_etag",
    /// "destination_object", "size", "delete_marker"}]}.
    #[arg(long, value_name = "FILE")]
    pub receipts: Option<PathBuf>,
    /// The archive plugin that chooses where a missing version moved: a
    /// `.wasm` file or `builtin:archive`.
    #[arg(long, default_value = "builtin:archive", value_name = "PATH")]
    pub archive_plugin: String,
}

pub(super) fn run(global: &Global, command: VersionsCommand) -> Outcome {
    let config = super::config(global)?;
    let io = io_runtime()?;
    match command {
        VersionsCommand::Verify { store, pins, json } => {
            let (pointers, aliases) = inputs(&pins, &store)?;
            let policy = archive_policy(global, &pins.archive_plugin, &io)?;
            io.block_on(async {
                let opened = open(config.as_ref(), &store).await?;
                let resolved = addressed::resolve(opened.as_ref(), pointers).await;
                let total = resolved.pins.len() + resolved.problems.len();
                let mut report =
                    verify::verify(opened.as_ref(), &resolved.pins, &aliases, policy.as_ref())
                        .await
                        .map_err(|e| Failure::Failed(e.into()))?;
                report.problems.extend(resolved.problems);
                if json {
                    println!("{}", report.to_json());
                } else {
                    for checked in &report.checked {
                        if checked.found == checked.pin {
                            println!("ok    {}", checked.pin);
                        } else {
                            println!(
                                "ok    {} (found as {}, {} hops)",
                                checked.pin, checked.found, checked.hops
                            );
                        }
                    }
                    print_problems(&report.problems);
                }
                conclude(report.problems.len(), total)
            })
        }
        VersionsCommand::Fetch {
            store,
            pins,
            cache,
            json,
        } => {
            let (pointers, aliases) = inputs(&pins, &store)?;
            let policy = archive_policy(global, &pins.archive_plugin, &io)?;
            io.block_on(async {
                let opened = open(config.as_ref(), &store).await?;
                let resolved = addressed::resolve(opened.as_ref(), pointers).await;
                let total = resolved.pins.len() + resolved.problems.len();
                let bar = super::progress_bar(
                    "{spinner} fetching [{bar:40}] {pos}/{len} objects {elapsed}",
                );
                let mut report = if resolved.problems.is_empty() {
                    fetch::fetch(
                        opened.as_ref(),
                        &resolved.pins,
                        &resolved.listings,
                        &aliases,
                        policy.as_ref(),
                        &cache,
                        bar.as_ref(),
                    )
                    .await
                    .map_err(|e| Failure::Failed(e.into()))?
                } else {
                    // An output that cannot be resolved fails the whole
                    // fetch before anything is downloaded.
                    fetch::FetchReport::default()
                };
                report.problems.extend(resolved.problems);
                if let Some(bar) = bar {
                    bar.finish_and_clear();
                }
                if json {
                    println!("{}", report.to_json());
                } else {
                    if report.installed {
                        println!(
                            "downloaded {} ({} bytes), cached {} ({} bytes), {} directory listings",
                            report.downloaded.len(),
                            report.downloaded_bytes,
                            report.cached.len(),
                            report.cached_bytes,
                            report.listings
                        );
                    } else {
                        println!("installed nothing: every pin must pass first");
                    }
                    print_problems(&report.problems);
                }
                conclude(report.problems.len(), total)
            })
        }
    }
}

fn print_problems(problems: &[Problem]) {
    for problem in problems {
        println!("FAIL  {}: {}", problem.pin, problem.error);
    }
}

fn conclude(failed: usize, total: usize) -> Outcome {
    if failed == 0 {
        Ok(())
    } else {
        Err(Failure::Failed(anyhow!("{failed} of {total} pins failed")))
    }
}

/// What every manifest names and the aliases of the receipts; bad input
/// is a usage error (exit 2).
fn inputs(args: &PinArgs, store: &StoreArgs) -> Result<(Pointers, Aliases), Failure> {
    let pointers = args.manifests.read()?.pointers();
    let aliases = match &args.receipts {
        Some(path) => Aliases::read(path, &store.url).map_err(|e| Failure::Usage(e.into()))?,
        None => Aliases::none(),
    };
    Ok((pointers, aliases))
}

/// The hop policy: the archive plugin `spec` (a `.wasm` path or
/// `builtin:archive`), granted nothing.
fn archive_policy(
    global: &Global,
    spec: &str,
    io: &tokio::runtime::Runtime,
) -> Result<Arc<dyn HopPolicy>, Failure> {
    let runtime = super::runtime(global)?;
    let plugin = Arc::new(super::plugin_spec::load(&runtime, spec)?);
    let policy = ArchivePolicy::new(plugin, super::isolated_services(io), Limits::default())
        .map_err(|e| {
            Failure::Usage(anyhow!(e).context(format!("cannot use {spec} as the archive plugin")))
        })?;
    Ok(Arc::new(policy))
}

/// The store `args` names (a URL, or a store of the configuration file),
/// which must keep versions.
async fn open(config: Option<&Config>, args: &StoreArgs) -> Result<Arc<dyn ObjectStore>, Failure> {
    let store = super::object::open(config, args).await?;
    require_versioned(store.as_ref(), &args.url)
        .map_err(|e: VersionsError| Failure::Failed(e.into()))?;
    Ok(store)
}
