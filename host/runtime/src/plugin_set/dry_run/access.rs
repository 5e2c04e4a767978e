//! The access world's replay: the most recent distinct access requests
//! the decision log kept (`decision/access/decide` records whose detail
//! has the input: every denial, and the sampled allows), decided again by
//! both plugins.
//!
//! The log is read backwards a window at a time, each window twice as
//! long as the last, from the last hour to [`LOOK_BACK_MS`] ago; at most
//! [`MAX_RECORDS_READ`] records are read in all, so a busy log costs a
//! bounded read however little of it is access decisions.

use std::collections::HashSet;
use std::sync::Arc;

use super::{Compared, Replay, blocking};
use crate::plugin_set::{PluginSet, SwapError};
use crate::policy::access::AccessPolicy;
use custodian_core::audit;
use custodian_core::decisions::access::{AccessJudge, AccessRequest, Decision, Unanswered};
use custodian_core::decisions::log;

/// The event of an access decision record.
const EVENT: &str = "decision/access/decide";

/// The first window read back: the last hour.
const FIRST_WINDOW_MS: u64 = 3_600_000;

/// How far back a replay looks: 30 days. Older requests say little about
/// what a swap changes now.
const LOOK_BACK_MS: u64 = 30 * 24 * 3_600_000;

/// Most audit records read for one replay, whatever they are.
const MAX_RECORDS_READ: u32 = 200_000;

/// Audit records read per page.
const PAGE: u32 = 1_000;

/// Up to `limit` distinct access requests from the decision log, newest
/// first.
async fn recent_requests(
    kv: &dyn custodian_kv::Kv,
    now: u64,
    limit: u32,
) -> Result<Vec<AccessRequest>, SwapError> {
    let unreadable =
        |e: custodian_kv::KvError| SwapError::Refused(format!("cannot read the decision log: {e}"));
    let oldest = now.saturating_sub(LOOK_BACK_MS);
    let mut found = Vec::new();
    let mut seen = HashSet::new();
    let mut read = 0u32;
    let (mut until, mut window) = (now.saturating_add(1), FIRST_WINDOW_MS);
    while until > oldest && read < MAX_RECORDS_READ && found.len() < limit as usize {
        let since = until.saturating_sub(window).max(oldest);
        let mut in_window = Vec::new();
        let mut cursor: Option<Vec<u8>> = None;
        loop {
            let page = PAGE.min(MAX_RECORDS_READ - read);
            let (records, next) =
                audit::read_between(kv, since, Some(until), cursor.as_deref(), page)
                    .await
                    .map_err(unreadable)?;
            read += u32::try_from(records.len()).unwrap_or(u32::MAX);
            in_window.extend(records.into_iter().filter(|r| r.event == EVENT));
            match next {
                Some(next) if read < MAX_RECORDS_READ => cursor = Some(next),
                _ => break,
            }
        }
        // A window is read oldest first; the replay wants the newest. Equal
        // inputs have equal digests (a target of every decision record), so
        // a repeated request is skipped before its input is parsed.
        for record in in_window.iter().rev() {
            let Some(digest) = record.targets.iter().find(|t| t.starts_with("input:")) else {
                continue;
            };
            if seen.contains(digest) {
                continue;
            }
            let Some(request) = log::kept_input(record)
                .and_then(|input| serde_json::from_value::<AccessRequest>(input).ok())
            else {
                continue;
            };
            seen.insert(digest.clone());
            found.push(request);
            if found.len() >= limit as usize {
                break;
            }
        }
        until = since;
        window = window.saturating_mul(2);
    }
    Ok(found)
}

/// A decision in a few words.
fn brief(answer: &Result<Decision, Unanswered>) -> String {
    match answer {
        Ok(Decision::Allow) => "allow".to_owned(),
        Ok(Decision::Deny(reason)) => format!("deny: {reason}"),
        Err(Unanswered(why)) => format!("no answer: {why}"),
    }
}

/// The request, for a person: who, what, on which target.
fn describe(request: &AccessRequest) -> String {
    let mut words = vec![
        "access".to_owned(),
        request.principal.name.clone(),
        request.action.to_string(),
    ];
    words.extend(request.target.labels());
    words.join(" ")
}

impl PluginSet {
    /// Decides up to `replay.limit` recent access requests with both
    /// plugins.
    pub(super) async fn replay_access(
        &self,
        before: Arc<AccessPolicy>,
        after: Arc<AccessPolicy>,
        replay: &Replay,
    ) -> Result<Vec<Compared>, SwapError> {
        let requests =
            recent_requests(self.kv.as_ref(), self.clock.now_ms(), replay.limit()).await?;
        let replay = replay.clone();
        blocking(move || {
            let mut compared = Vec::with_capacity(requests.len());
            for (done, request) in requests.iter().enumerate() {
                let was = AccessJudge::decide(before.as_ref(), request);
                let will = AccessJudge::decide(after.as_ref(), request);
                compared.push(Compared {
                    item: describe(request),
                    before: brief(&was),
                    after: brief(&will),
                    differences: if was == will {
                        Vec::new()
                    } else {
                        vec![format!("{} → {}", brief(&was), brief(&will))]
                    },
                });
                replay.tell(done + 1, requests.len());
            }
            compared
        })
        .await
    }
}
