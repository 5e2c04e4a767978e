//! `custodian invalidations`: the outbox of cache invalidations on a data
//! directory (or, with `--config` naming etcd, on the cluster every host
//! shares): list what is not yet delivered, acknowledge what a consumer
//! has handled. A server holding the directory's embedded KV keeps this
//! command out (exit 3); use its `/v1/invalidations` routes then.

use std::io::Read as _;
use std::sync::Arc;

use anyhow::{Context, anyhow};
use clap::{Args, Subcommand};
use custodian::clock::{Clock, SystemClock};
use custodian::invalidation::outbox::{self, MAX_PAGE, OutboxError, Row};
use custodian::node::Node;
use serde_json::{Value, json};

use super::options::{DataArgs, Global};
use super::{Failure, Outcome, config, io_runtime, node_failure};

#[derive(Debug, Subcommand)]
pub enum InvalidationsCommand {
    /// List the cache invalidations not yet delivered or acknowledged,
    /// in planning order.
    ///
    /// A takedown plans one invalidation per repository holding the
    /// content it took down; `custodian serve` POSTs each to the
    /// `[invalidation] webhook` and deletes it on a 2xx, or leaves it here
    /// for a pull consumer to acknowledge.
    ///
    /// Text: one line per entry,
    ///   ID  REPOSITORY  planned MS  attempts N[, next MS]  [last error: …]
    /// (ID is what `ack` takes). --json prints one object:
    ///   {"entries": [{"id", "idempotency_key", "request", "repository",
    ///     "objects", "requested_ms", "attempts", "next_attempt_ms",
    ///     "last_error"}], "next": CURSOR|null}
    /// A row that does not decode (written wrongly by a takedown plugin)
    /// is listed as {"id", "corrupt"}: it is never delivered; acknowledge
    /// it to drop it.
    ///
    /// Example:
    ///   custodian invalidations list --data DIR --json
    #[command(verbatim_doc_comment)]
    List {
        #[command(flatten)]
        out: Out,
        /// List at most N entries, then print the cursor to go on from
        /// (default: every entry).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        limit: Option<u32>,
        /// Start strictly after this cursor (the `next` of a listing cut
        /// short by --limit).
        #[arg(long, value_name = "CURSOR")]
        cursor: Option<String>,
    },
    /// Acknowledge invalidations a consumer has handled: delete them from
    /// the outbox (audited as `invalidation/ack` by operator:NAME).
    ///
    /// Ids that are not in the outbox (delivered or acknowledged already)
    /// are reported as unknown, not refused; an argument that is not an id
    /// is bad usage (exit 2) and nothing is deleted. `-` reads ids from
    /// stdin, whitespace-separated.
    ///
    /// Text: `acknowledged ID` or `unknown ID`, one a line. --json:
    ///   {"acknowledged": [ID…], "unknown": [ID…]}
    ///
    /// Example:
    ///   custodian invalidations list --data DIR --json \
    ///     | jq -r '.entries[].id' | custodian invalidations ack - --data DIR
    #[command(verbatim_doc_comment)]
    Ack {
        #[command(flatten)]
        out: Out,
        /// The ids (from `list`), or `-` for stdin.
        #[arg(required = true, value_name = "ID")]
        ids: Vec<String>,
        /// Who is acting, for the audit log.
        #[arg(long, env = "USER", default_value = "unknown", value_name = "NAME")]
        operator: String,
    },
}

/// Where and how an invalidations command runs.
#[derive(Debug, Args)]
pub struct Out {
    #[command(flatten)]
    data: DataArgs,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

fn failed(error: OutboxError) -> Failure {
    Failure::of_kind(error.kind(), anyhow!(error))
}

pub(super) fn run(global: &Global, command: InvalidationsCommand) -> Outcome {
    let out = match &command {
        InvalidationsCommand::List { out, .. } | InvalidationsCommand::Ack { out, .. } => out,
    };
    let io = io_runtime()?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let configured = config(global)?;
    io.block_on(async {
        let node = match configured {
            Some(config) => Node::open(&out.data.data, config, clock.clone()).await,
            None => Node::open_local(&out.data.data, clock.clone()),
        }
        .map_err(node_failure)?;
        let kv = node.kv().as_ref();
        match &command {
            InvalidationsCommand::List { limit, cursor, .. } => {
                let cursor = cursor
                    .as_deref()
                    .map(|c| {
                        hex::decode(c).map_err(|_| {
                            Failure::Usage(anyhow!("--cursor {c:?} is not a cursor (hex)"))
                        })
                    })
                    .transpose()?;
                list(kv, cursor, *limit, out.json).await
            }
            InvalidationsCommand::Ack { ids, operator, .. } => {
                let keys = ids_of(ids)?;
                let actor = format!("operator:{operator}");
                let mut acknowledged = Vec::new();
                let mut unknown = Vec::new();
                for chunk in keys.chunks(MAX_PAGE as usize) {
                    let acked = outbox::ack(kv, chunk, &actor, clock.now_ms())
                        .await
                        .map_err(failed)?;
                    acknowledged.extend(acked.acknowledged.iter().map(hex::encode));
                    unknown.extend(acked.unknown.iter().map(hex::encode));
                }
                if out.json {
                    println!(
                        "{}",
                        json!({"acknowledged": acknowledged, "unknown": unknown})
                    );
                } else {
                    acknowledged
                        .iter()
                        .for_each(|id| println!("acknowledged {id}"));
                    unknown.iter().for_each(|id| println!("unknown {id}"));
                }
                Ok(())
            }
        }
    })
}

/// The keys `ids` name (`-` reading more from stdin).
fn ids_of(ids: &[String]) -> Result<Vec<Vec<u8>>, Failure> {
    let mut texts = Vec::new();
    for id in ids {
        if id == "-" {
            let mut input = String::new();
            std::io::stdin()
                .read_to_string(&mut input)
                .context("cannot read ids from stdin")
                .map_err(Failure::Usage)?;
            texts.extend(input.split_whitespace().map(str::to_owned));
        } else {
            texts.push(id.clone());
        }
    }
    texts
        .iter()
        .map(|text| outbox::parse_id(text).map_err(|e| Failure::Usage(anyhow!(e))))
        .collect()
}

/// Prints the entries after `cursor`, at most `limit` (else all).
async fn list(
    kv: &dyn custodian::kv::Kv,
    mut cursor: Option<Vec<u8>>,
    limit: Option<u32>,
    json: bool,
) -> Outcome {
    let mut left = limit;
    let mut entries: Vec<Value> = Vec::new();
    let next = loop {
        let want = left.map_or(MAX_PAGE, |n| n.min(MAX_PAGE));
        let page = outbox::page(kv, cursor.as_deref(), want)
            .await
            .map_err(failed)?;
        for row in &page.rows {
            if json {
                entries.push(row.to_json());
            } else {
                println!("{}", line(row));
            }
        }
        left = left.map(|n| n.saturating_sub(page.rows.len() as u32));
        match page.next {
            Some(next) if left != Some(0) => cursor = Some(next),
            next => break next,
        }
    };
    let next = next.as_deref().map(hex::encode);
    if json {
        println!("{}", json!({"entries": entries, "next": next}));
    } else if let Some(next) = next {
        eprintln!("more: --cursor {next}");
    }
    Ok(())
}

/// One entry as a line of text.
fn line(row: &Row) -> String {
    let entry = match &row.entry {
        Ok(entry) => entry,
        Err(reason) => return format!("{}  corrupt: {reason}", row.id()),
    };
    let mut text = format!(
        "{}  {}  planned {}  attempts {}",
        row.id(),
        entry.repository,
        entry.requested_ms,
        row.state.attempts
    );
    if row.state.attempts > 0 {
        text.push_str(&format!(", next {}", row.state.next_attempt_ms));
    }
    if let Some(error) = &row.state.last_error {
        text.push_str(&format!("  last error: {error}"));
    }
    text
}
