//! The retention world's replay: each takedown request in retain,
//! assessed by both plugins as a filing assesses it (its creation, its
//! hold, stage `retaining`, the deployer's settings), compared on when it
//! may be purged; then, given a purge plan, each version a run of it
//! would ask retention about, compared on when it may be deleted.
//!
//! Eligibility is `now` when the verdict (`may-purge` for a request,
//! `may-delete` for a version) allows, and otherwise the `retain-until`
//! the plugin answered: two plugins that both let an item go now decide
//! alike whatever instants they name, and two that keep it differ when
//! they keep it to different instants.

use std::sync::Arc;

use super::{Compared, Replay, blocking};
use crate::plugin_set::{PluginSet, SwapError, World};
use crate::policy::retention::{Assessment, Item, RetentionPolicy, Settings, Stage, Verdict};
use crate::policy::{PolicyError, isolated_call};
use custodian_contract::lock::{REQUEST_TAG, RequestLock, RowKey, parse_key};
use custodian_kv::Kv;

/// Lock rows read per page while looking for requests in retain.
const PAGE: u32 = 1_000;

/// The settings, for a person.
pub(super) fn describe(settings: Settings) -> String {
    format!(
        "retention {} ms, noncurrent retention {} ms",
        settings.retention_ms, settings.noncurrent_retention_ms
    )
}

/// When a request may be purged, as one plugin decides it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Eligibility {
    /// Purging may begin now.
    Now,
    /// Not before this instant (and only then if no hold is set).
    Kept {
        /// The plugin's retain-until.
        until_ms: u64,
    },
    /// The plugin answered an error.
    Refused(String),
    /// No answer: a trap, a limit.
    Failed(String),
}

/// Which of an assessment's verdicts decides.
#[derive(Debug, Clone, Copy)]
enum Asked {
    /// `may-purge`, of a request.
    Purge,
    /// `may-delete`, of a version.
    Delete,
}

impl Eligibility {
    fn of(
        answer: Result<Result<Assessment, PolicyError>, crate::CallError>,
        asked: Asked,
    ) -> (Self, String) {
        match answer {
            Ok(Ok(assessment)) => match match asked {
                Asked::Purge => assessment.may_purge,
                Asked::Delete => assessment.may_delete,
            } {
                Verdict::Allow => (
                    Self::Now,
                    match asked {
                        Asked::Purge => "may be purged now",
                        Asked::Delete => "may be deleted now",
                    }
                    .to_owned(),
                ),
                Verdict::Deny(reason) => (
                    Self::Kept {
                        until_ms: assessment.retain_until_ms,
                    },
                    format!("kept until {}: {reason}", assessment.retain_until_ms),
                ),
            },
            Ok(Err(error)) => {
                let why = error.to_string();
                (
                    Self::Refused(why.clone()),
                    format!("answers an error: {why}"),
                )
            }
            Err(error) => {
                let why = error.to_string();
                (Self::Failed(why.clone()), format!("no answer: {why}"))
            }
        }
    }
}

/// Up to `limit` takedown requests whose lock is not yet purging, by id.
async fn requests_in_retain(
    kv: &dyn Kv,
    limit: u32,
) -> Result<Vec<([u8; 32], RequestLock)>, SwapError> {
    let partition = custodian_core::locks::partition();
    let unreadable = |e: String| SwapError::Refused(format!("cannot read the locks: {e}"));
    let (start, end) = ([REQUEST_TAG], [REQUEST_TAG + 1]);
    let mut found = Vec::new();
    let mut cursor: Option<Vec<u8>> = None;
    loop {
        let page = kv
            .scan(&partition, &start, Some(&end), cursor.as_deref(), PAGE)
            .await
            .map_err(|e| unreadable(e.to_string()))?;
        for (key, value) in &page.entries {
            let Some(RowKey::Request(id)) = parse_key(key) else {
                continue;
            };
            let lock = RequestLock::decode(value).map_err(|e| unreadable(e.to_string()))?;
            if !lock.purging {
                found.push((id, lock));
                if found.len() >= limit as usize {
                    return Ok(found);
                }
            }
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => return Ok(found),
        }
    }
}

impl PluginSet {
    /// Assesses up to `replay.limit` requests in retain, then versions of
    /// the plan, with both plugins.
    pub(super) async fn replay_retention(
        &self,
        before: Arc<RetentionPolicy>,
        after: Arc<RetentionPolicy>,
        replay: &Replay,
    ) -> Result<Vec<Compared>, SwapError> {
        let limit = replay.limit();
        let mut items: Vec<(String, Item, Asked)> =
            requests_in_retain(self.services.kv.as_ref(), limit)
                .await?
                .into_iter()
                .map(|(id, lock)| {
                    let item = Item {
                        created_ms: lock.created_ms,
                        noncurrent_since_ms: None,
                        hold: lock.hold,
                        stage: Stage::Retaining,
                    };
                    let name = format!(
                        "request {} (filed at {}, retained until {} as filed{})",
                        hex::encode(id),
                        lock.created_ms,
                        lock.retain_until_ms,
                        if lock.hold { ", held" } else { "" }
                    );
                    (name, item, Asked::Purge)
                })
                .collect();
        if let Some(planned) = &replay.plan {
            let store = self.services.stores.get(&planned.store).ok_or_else(|| {
                SwapError::Refused(format!(
                    "no store named {:?} to replay the purge plan on",
                    planned.store
                ))
            })?;
            let room = (limit as usize).saturating_sub(items.len());
            let touched =
                custodian_core::purge::touched::touched(store.as_ref(), &planned.plan, room)
                    .await
                    .map_err(|e| {
                        SwapError::Refused(format!("cannot list the plan's versions: {e}"))
                    })?;
            items.extend(touched.into_iter().map(|t| {
                (
                    format!("version {}/{}@{}", planned.store, t.key, t.version_id),
                    t.item,
                    Asked::Delete,
                )
            }));
        }
        let settings = self.retention.settings;
        let limits = self.settings(World::Retention).limits;
        let now = self.clock.now_ms();
        // As the host asks retention: granted nothing.
        let call = |policy: &RetentionPolicy| {
            isolated_call(policy.plugin(), self.isolated.clone(), limits.clone())
        };
        let (before_call, after_call) = (call(&before), call(&after));
        let replay = replay.clone();
        blocking(move || {
            let mut compared = Vec::with_capacity(items.len());
            for (done, (name, item, asked)) in items.iter().enumerate() {
                let (was, before_text) = Eligibility::of(
                    before.assess(before_call.clone(), settings, *item, now),
                    *asked,
                );
                let (will, after_text) = Eligibility::of(
                    after.assess(after_call.clone(), settings, *item, now),
                    *asked,
                );
                compared.push(Compared {
                    item: name.clone(),
                    differences: differences(&was, &will, *asked),
                    before: before_text,
                    after: after_text,
                });
                replay.tell(done + 1, items.len());
            }
            compared
        })
        .await
    }
}

/// Where two eligibilities differ; none when they are alike.
fn differences(was: &Eligibility, will: &Eligibility, asked: Asked) -> Vec<String> {
    if was == will {
        return Vec::new();
    }
    let now = match asked {
        Asked::Purge => "purgeable now",
        Asked::Delete => "deletable now",
    };
    vec![match (was, will) {
        (Eligibility::Now, Eligibility::Kept { until_ms }) => {
            format!("{now} → kept until {until_ms}")
        }
        (Eligibility::Kept { until_ms }, Eligibility::Now) => {
            format!("kept until {until_ms} → {now}")
        }
        (Eligibility::Kept { until_ms: a }, Eligibility::Kept { until_ms: b }) => {
            format!("kept until {a} → {b}")
        }
        _ => "the outcome".to_owned(),
    }]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_plugins_that_both_let_a_request_go_now_decide_alike_whatever_instants_they_name() {
        let now = Eligibility::Now;
        assert!(differences(&now, &Eligibility::Now, Asked::Purge).is_empty());
        assert_eq!(
            differences(&now, &Eligibility::Kept { until_ms: 9 }, Asked::Purge),
            ["purgeable now → kept until 9"]
        );
        assert_eq!(
            differences(&Eligibility::Kept { until_ms: 9 }, &now, Asked::Delete),
            ["kept until 9 → deletable now"]
        );
        assert_eq!(
            differences(
                &Eligibility::Kept { until_ms: 5 },
                &Eligibility::Kept { until_ms: 9 },
                Asked::Purge
            ),
            ["kept until 5 → 9"]
        );
        assert_eq!(
            differences(&now, &Eligibility::Failed("trap".into()), Asked::Delete),
            ["the outcome"]
        );
    }
}
