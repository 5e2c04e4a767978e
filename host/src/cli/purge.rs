//! `custodian purge …`: list the history candidates of pin manifests, and
//! permanently delete exact versions on a versioned store as a plan says,
//! asking the purge and retention plugins about every version.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::anyhow;
use clap::Subcommand;
use custodian::clock::{Clock, SystemClock};
use custodian::policy::purge::PurgePolicy;
use custodian::policy::retention::{RetentionPolicy, RetentionRoute, Settings};
use custodian::purge::plan::{self, Plan};
use custodian::purge::run::purge;
use custodian::purge::{PurgeError, PurgeFailure};
use custodian::runtime::Limits;
use custodian::versions::history::short;
use serde_json::{Value, json};

use super::manifests::{ManifestArgs, Read};
use super::options::{Global, RetentionArgs, StoreArgs};
use super::{Failure, Outcome, io_runtime};

/// `custodian purge` subcommands.
#[derive(Debug, Subcommand)]
pub enum PurgeCommand {
    /// Print the history candidates of pin manifests: every pinned exact
    /// version, with the manifest that pinned it.
    ///
    /// With --revision, --revisions or --all-revisions the pointer files
    /// are read from git history (every `*.dvc` and `dvc.lock` file of each commit unless
    /// --pins names some), and each candidate names the newest commit
    /// read that pinned it; a version pinned by many commits is listed
    /// once. Outputs on content-addressed remotes (no `cloud:` entry) are
    /// shared hash objects, never candidates: a notice on stderr names
    /// each.
    ///
    /// Output: one line per pin, `MANIFEST KEY@VERSION` (`COMMIT:MANIFEST
    /// KEY@VERSION` from history); --json prints
    ///   [{"pointer": "<manifest>", "object": "<key>", "version_id": "…",
    ///     "revision": "<commit>"}]
    /// which `purge delete --plan` accepts as a plan of generic candidates.
    ///
    /// Exit 0; 2 for an unreadable or invalid manifest or a bad revision.
    #[command(verbatim_doc_comment)]
    List {
        #[command(flatten)]
        manifests: ManifestArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Permanently delete the exact versions a plan names.
    ///
    /// The plan (JSON):
    ///   {"candidates": [{"pointer", "object", "version_id"}],
    ///    "prefixes": [<registry of an archive prefix being retired,
    ///                  status "copied">],
    ///    "coordination": [{"receipt": <the registry JSON>,
    ///      "coordination": {"registry_version_id": "…",
    ///                       "registry_etag": "…"}}]}
    /// or a bare array of candidates (`purge list --json`). A candidate
    /// whose pointer is `P/.custodian-archive.json` is an archive
    /// candidate of the source prefix P (its object must be under P/);
    /// any other is a generic candidate (a managed key). Prefixes and keys
    /// must be clean relative paths (no leading `/`, no empty, `.` or `..`
    /// segments). A coordination proof is the exact version id and etag of
    /// the registry object that was published: the purge proceeds only
    /// while the registry's current version and etag are those and its
    /// content equals the receipt (and the `prefixes` entry), else it is
    /// refused ("the registry differs from the coordinated receipt").
    ///
    /// Archive prefixes go first, and every one is checked before
    /// anything is deleted: a present candidate its registry does not map
    /// refuses the run. Each requested version is judged by the purge
    /// plugin, assessed by the retention plugin, the registry re-checked,
    /// and the exact version deleted; afterwards the prefix is listed
    /// again. A prefix with nothing left but its registry (which is never
    /// deleted: it records where the bytes went) is cleaned. Then generic
    /// keys, 4 at a time (no new key after the first error): under the
    /// nearest ancestor registry, mapped versions are deleted (with that
    /// source's coordination proof) and unmapped ones kept; a key no
    /// registry covers loses every version, verified afterwards.
    ///
    /// Every deletion first asks --retention-plugin (with --retention-ms
    /// and --noncurrent-retention-ms): a version it retains is reported,
    /// never deleted.
    ///
    /// History: before a registry licenses any deletion, every row's
    /// destination copy is read by exact version (HEAD) and must have the
    /// recorded size and etag (and `destination_crc64nvme`, where the row
    /// records one); each mapped version's row is checked again right
    /// before its deletion. A registry row pointing at nothing refuses the
    /// plan ("the history of … does not hold"), naming the row.
    ///
    /// Output: one line per item (deleted, absent, unmapped, retained,
    /// cleaned); --json prints
    ///   {"ok": bool, "mode": "permanent-version-deletion", "remote":
    ///    "<the --store value>", "deleted": [{"pointer", "object",
    ///    "version_id", "deleted_version_ids"}], "already_absent": [...],
    ///    "retained_unmapped": [...], "retained_mapped": [<mapped
    ///    versions a policy kept; also in "retained">], "retained":
    ///    [{"candidate", "reason"}], "cleaned_prefixes": [...],
    ///    "error": "…", "kind": "…"}
    /// After a failure, what was deleted before it is still printed.
    ///
    /// Exit 0 when the plan was carried out; 1 when it was refused or
    /// failed (nothing is deleted after a refusal is detected); 2 for bad
    /// usage, an invalid plan, or a plugin that cannot be loaded.
    #[command(verbatim_doc_comment)]
    Delete {
        #[command(flatten)]
        store: StoreArgs,
        /// The plan file (see above).
        #[arg(long, value_name = "FILE")]
        plan: PathBuf,
        /// The purge plugin: a `.wasm` file or `builtin:purge`.
        #[arg(long, default_value = "builtin:purge", value_name = "PATH")]
        purge_plugin: String,
        #[command(flatten)]
        retention: RetentionArgs,
        /// The time policies are asked at, ms since the epoch [default:
        /// now].
        #[arg(long, value_name = "MS")]
        now: Option<u64>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

pub(super) fn run(global: &Global, command: PurgeCommand) -> Outcome {
    match command {
        PurgeCommand::List { manifests, json } => {
            let (candidates, skipped) = match manifests.read()? {
                Read::WorkingTree(files) => plan::list(
                    files
                        .into_iter()
                        .map(|(path, pointers)| (path.display().to_string(), pointers))
                        .collect(),
                ),
                Read::History(read) => plan::list_history(read),
            };
            for output in &skipped {
                eprintln!(
                    "notice: {output} is on a content-addressed remote (no cloud entry): \
                     its bytes are shared hash objects, never history candidates"
                );
            }
            if json {
                println!("{}", json!(candidates));
            } else {
                for candidate in &candidates {
                    match &candidate.revision {
                        Some(revision) => println!(
                            "{}:{} {}",
                            short(revision),
                            candidate.pointer,
                            candidate.name()
                        ),
                        None => println!("{} {}", candidate.pointer, candidate.name()),
                    }
                }
            }
            Ok(())
        }
        PurgeCommand::Delete {
            store,
            plan,
            purge_plugin,
            retention,
            now,
            json,
        } => {
            let config = super::config(global)?;
            let plan = Plan::read(&plan).map_err(|e| Failure::Usage(e.into()))?;
            let io = io_runtime()?;
            let policies = Policies::load(global, &purge_plugin, &retention, &io)?;
            let now_ms = now.unwrap_or_else(|| SystemClock.now_ms());
            io.block_on(async {
                let opened = super::object::open(config.as_ref(), &store).await?;
                let mut outcome = purge(
                    opened.as_ref(),
                    &plan,
                    &policies.judge,
                    &policies.retention,
                    now_ms,
                )
                .await;
                match &mut outcome {
                    Ok(report) => report.remote.clone_from(&store.url),
                    Err(failure) => failure.partial.remote.clone_from(&store.url),
                }
                print(&outcome, json);
                match outcome {
                    Ok(_) => Ok(()),
                    Err(PurgeFailure { error, partial }) => {
                        let deleted: usize = partial
                            .deleted
                            .iter()
                            .map(|d| d.deleted_version_ids.len())
                            .sum();
                        let error = if deleted > 0 {
                            anyhow!(error).context(format!(
                                "the purge stopped after deleting {deleted} versions (listed above)"
                            ))
                        } else {
                            anyhow!(error).context("the purge deleted nothing")
                        };
                        Err(Failure::Failed(error))
                    }
                }
            })
        }
    }
}

fn print(outcome: &Result<custodian::purge::report::PurgeReport, PurgeFailure>, json: bool) {
    let (report, error): (_, Option<&PurgeError>) = match outcome {
        Ok(report) => (report, None),
        Err(failure) => (&failure.partial, Some(&failure.error)),
    };
    if json {
        let mut document = report.to_json();
        if let Value::Object(fields) = &mut document {
            fields.insert("ok".into(), json!(error.is_none()));
            if let Some(error) = error {
                fields.insert("error".into(), json!(error.to_string()));
                fields.insert("kind".into(), json!(error.kind()));
            }
        }
        println!("{document}");
    } else {
        for line in report.lines() {
            println!("{line}");
        }
    }
}

/// The purge and retention plugins.
struct Policies {
    judge: PurgePolicy,
    retention: RetentionRoute,
}

impl Policies {
    fn load(
        global: &Global,
        purge_spec: &str,
        retention: &RetentionArgs,
        io: &tokio::runtime::Runtime,
    ) -> Result<Self, Failure> {
        let runtime = super::runtime(global)?;
        let services = super::isolated_services(io);
        let plugin = Arc::new(super::plugin_spec::load(&runtime, purge_spec)?);
        let judge = PurgePolicy::new(plugin, services.clone(), Limits::default()).map_err(|e| {
            Failure::Usage(
                anyhow!(e).context(format!("cannot use {purge_spec} as the purge plugin")),
            )
        })?;
        let spec = retention
            .retention_plugin
            .as_deref()
            .unwrap_or("builtin:retention");
        let policy = RetentionPolicy::new(Arc::new(super::plugin_spec::load(&runtime, spec)?))
            .map_err(|e| {
                Failure::Usage(
                    anyhow!(e).context(format!("cannot use {spec} as the retention plugin")),
                )
            })?;
        // A zero retention is the retention plugin's to refuse, at the
        // first question: its error is the run's.
        let settings = Settings {
            retention_ms: retention.retention_ms,
            noncurrent_retention_ms: retention.noncurrent_retention_ms,
        };
        let retention =
            RetentionRoute::new(Arc::new(policy), settings, services, Limits::default());
        Ok(Self { judge, retention })
    }
}
