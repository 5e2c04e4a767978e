//! `custodian audit`: print the audit log.

use std::sync::Arc;

use anyhow::anyhow;
use custodian::audit;
use custodian::clock::SystemClock;

use super::args::AuditArgs;
use super::{Failure, Outcome, io_runtime, open_data};

/// Records read per page.
const PAGE: u32 = 500;

pub(super) fn run(args: &AuditArgs) -> Outcome {
    let io = io_runtime()?;
    let kv = open_data(&args.data, Arc::new(SystemClock))?;
    let mut left = args.limit.unwrap_or(u64::MAX);
    io.block_on(async {
        let mut cursor: Option<Vec<u8>> = None;
        while left > 0 {
            let (records, next) = audit::read(kv.as_ref(), args.since, cursor.as_deref(), PAGE)
                .await
                .map_err(|e| Failure::Failed(anyhow!(e).context("cannot read the audit log")))?;
            for record in records
                .into_iter()
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
