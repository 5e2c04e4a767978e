//! `custodian audit`: print the audit log.

use std::sync::Arc;

use anyhow::anyhow;
use clap::Args;
use custodian::audit;
use custodian::clock::SystemClock;

use super::options::DataArgs;
use super::{Failure, Outcome, io_runtime, open_data};

#[derive(Debug, Args)]
pub struct AuditArgs {
    #[command(flatten)]
    pub data: DataArgs,
    /// Only records at or after this time, ms since the epoch.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pub since: u64,
    /// Print at most this many records (of those the filters pass).
    #[arg(long, value_name = "N")]
    pub limit: Option<u64>,
    /// Only records whose event starts with this: `decision/` is the
    /// decision log (`decision/retention/assess`, `decision/access/decide`).
    #[arg(long, value_name = "PREFIX")]
    pub event: Option<String>,
    /// Only records by this actor (`principal:alice`, `plugin:retention@HASH12`).
    #[arg(long, value_name = "ACTOR")]
    pub actor: Option<String>,
    /// Only records with this target (`plugin:HASH`, `key:a.txt`,
    /// `outcome:deny`, `input:blake3:DIGEST`).
    #[arg(long, value_name = "TARGET")]
    pub target: Option<String>,
    /// Print one JSON object a line.
    #[arg(long)]
    pub json: bool,
}

/// Records read per page.
const PAGE: u32 = 500;

pub(super) fn run(args: &AuditArgs) -> Outcome {
    let io = io_runtime()?;
    let kv = open_data(&args.data, Arc::new(SystemClock))?;
    let mut left = args.limit.unwrap_or(u64::MAX);
    let filter = audit::Filter {
        event_prefix: args.event.clone(),
        actor: args.actor.clone(),
        target: args.target.clone(),
    };
    io.block_on(async {
        let mut cursor: Option<Vec<u8>> = None;
        while left > 0 {
            let (records, next) = audit::read(kv.as_ref(), args.since, cursor.as_deref(), PAGE)
                .await
                .map_err(|e| Failure::Failed(anyhow!(e).context("cannot read the audit log")))?;
            for record in records
                .into_iter()
                .filter(|r| filter.matches(r))
                .take(usize::try_from(left).unwrap_or(usize::MAX))
            {
                left -= 1;
                if args.json {
                    println!(
                        "{}",
                        serde_json::to_string(&record).expect("audit records serialize")
                    );
                } else {
                    println!(
                        "{}  {}  {}  [{}]  {}",
                        record.at_ms,
                        record.actor,
                        record.event,
                        record.targets.join(", "),
                        record.detail.unwrap_or_default()
                    );
                }
            }
            match next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        Ok(())
    })
}
