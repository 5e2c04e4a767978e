//! The purge runner: permanently deletes the exact versions of a
//! [`Plan`], asking the purge policy ([`PurgeJudge`]) and the retention
//! policy ([`RetentionOracle`]) about every version first, and verifies
//! that what it deleted is gone.
//!
//! **Archive prefixes first.** For each source prefix `P` of the plan,
//! before anything is deleted anywhere: the versions under `P/` are
//! listed, the registry `P/.custodian-archive.json` is checked against
//! the plan (published, `copied`, equal to its `prefixes` entry, and
//! exactly the version, etag and content of its coordination proof), and
//! a requested version that is present but not mapped by the registry
//! refuses the whole run. Every other coordination proof of the plan is
//! checked too. Then, for each requested present version: the purge
//! policy judges it (`Mapped(row)`), the retention policy assesses it,
//! the registry is re-checked, and the exact version is deleted. The
//! prefix is listed again: a deleted version still there is an error;
//! what remains (the registry object aside: it is never deleted, it is
//! the record of where the bytes went) and was not kept by a policy is
//! reported `retained_unmapped`; nothing remaining means the prefix is
//! `cleaned_prefixes`. Generic candidates under a retired prefix are left
//! to it.
//!
//! **Generic keys**, [`PURGE_WORKERS`] at a time; after the first error
//! no further key is started (keys in flight finish). The registry of the
//! nearest ancestor prefix governs the key. With one, every present
//! version it maps is judged `Mapped` and deleted (this needs a candidate
//! naming a mapped version and the source's coordination proof,
//! re-checked before each deletion); every version it does not map is
//! judged `Unmapped` and kept (`retained_unmapped`; a policy that would
//! delete one is refused). With none, every version of the key is judged
//! `Unarchived` and deleted, and the key is verified to have none left
//! but those a policy kept.
//!
//! **History.** A registry licenses deletions only once its history
//! holds: when it is first checked against its proof (before anything is
//! deleted), every row's destination copy is read by exact version (HEAD)
//! and must have the recorded size and etag (and CRC-64/NVME where
//! recorded); right before a mapped version is deleted its own row is
//! checked again. A failing row refuses the run, naming it
//! ([`PurgeError::History`]).
//!
//! Every deletion first asks retention with the version's write time as
//! `created_ms` (0 if unknown), the next newer version's write time as
//! `noncurrent_since_ms` (if this one is not current), no hold and stage
//! `Retaining`; only `may_delete == Allow` deletes. A version either
//! policy keeps is reported in `retained` with the reason, never deleted.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use futures::StreamExt;

use super::error::PurgeError;
use super::plan::{CandidateRef, Plan, is_registry_key, registry_key};
use super::published::{Coordination, Published};
use super::report::PurgeFailure;
use super::report::{Deleted, PurgeReport, Retained};
use crate::decisions::purge::{Candidate, Governance, PurgeJudge, Verdict};
use crate::decisions::retention::{Item, RetentionOracle, Stage, Verdict as RetentionVerdict};
use custodian_object::ObjectStoreExt;
use custodian_object::{ListedVersion, MAX_LIST_PAGE, ObjectStore};

/// Generic keys retired at once: enough to hide store latency, few
/// enough that a failure stops the run quickly.
pub const PURGE_WORKERS: usize = 4;

/// Most versions listed under one prefix or key: the listing is held in
/// memory; a bigger prefix would exhaust it (split the plan).
pub const MAX_LISTED_VERSIONS: usize = 1_000_000;

/// A listed version and when it stopped being current.
#[derive(Debug, Clone)]
pub(super) struct Found {
    pub(super) version: ListedVersion,
    pub(super) noncurrent_since_ms: Option<u64>,
}

impl Found {
    /// What retention is told of this version before it is deleted: its
    /// write time as `created_ms` (0 if unknown), when the next newer
    /// version was written as `noncurrent_since_ms`, no hold, stage
    /// `Retaining`.
    pub(super) fn retention_item(&self) -> Item {
        Item {
            created_ms: self.version.last_modified_ms.unwrap_or(0),
            noncurrent_since_ms: self.noncurrent_since_ms,
            hold: false,
            stage: Stage::Retaining,
        }
    }
}

/// Every version under `prefix` (with `exact`, only of the key `prefix`).
pub(super) async fn list(
    store: &dyn ObjectStore,
    prefix: &str,
    exact: bool,
) -> Result<Vec<Found>, PurgeError> {
    let mut found: Vec<Found> = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = store
            .list_versions(prefix, cursor.as_deref(), MAX_LIST_PAGE)
            .await
            .map_err(|e| PurgeError::store(format!("listing {prefix:?}"), e))?;
        for version in page.items {
            if exact && version.key != prefix {
                continue;
            }
            // Newest first within a key: the previous item of the same key
            // is the next newer version.
            let noncurrent_since_ms = match found.last() {
                Some(newer) if newer.version.key == version.key && !version.is_current => {
                    Some(newer.version.last_modified_ms.unwrap_or(0))
                }
                _ => None,
            };
            found.push(Found {
                version,
                noncurrent_since_ms,
            });
            if found.len() > MAX_LISTED_VERSIONS {
                return Err(PurgeError::TooManyVersions {
                    prefix: prefix.to_owned(),
                    limit: MAX_LISTED_VERSIONS,
                });
            }
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => return Ok(found),
        }
    }
}

fn name(key: &str, version_id: &str) -> String {
    format!("{key}@{version_id}")
}

/// The run's collaborators.
struct Runner<'a> {
    store: &'a dyn ObjectStore,
    judge: &'a dyn PurgeJudge,
    retention: &'a dyn RetentionOracle,
    now_ms: u64,
    coordination: Coordination<'a>,
}

impl Runner<'_> {
    /// `None` to delete, or the reason a policy keeps the version.
    async fn decide(
        &self,
        found: &Found,
        governance: &Governance,
    ) -> Result<Option<String>, PurgeError> {
        let v = &found.version;
        let object = name(&v.key, &v.version_id);
        let candidate = Candidate {
            key: v.key.clone(),
            version_id: v.version_id.clone(),
            etag: v.etag.clone(),
            size: v.size,
            is_delete_marker: v.is_delete_marker,
            last_modified_ms: v.last_modified_ms,
        };
        let verdict = self
            .judge
            .judge(&candidate, governance, self.now_ms)
            .await
            .map_err(|error| PurgeError::Judge {
                object: object.clone(),
                error,
            })?;
        if let Verdict::Retain(reason) = verdict {
            return Ok(Some(format!("purge policy: {reason}")));
        }
        let assessment = self
            .retention
            .assess(found.retention_item(), self.now_ms)
            .map_err(|error| PurgeError::Retention { object, error })?;
        Ok(match assessment.may_delete {
            RetentionVerdict::Allow => None,
            RetentionVerdict::Deny(reason) => Some(format!("retention: {reason}")),
        })
    }

    async fn delete(&self, key: &str, version_id: &str) -> Result<(), PurgeError> {
        self.store
            .delete_version(key, version_id)
            .await
            .map_err(|e| PurgeError::store(name(key, version_id), e))
    }

    /// Lists and checks every archive prefix; refuses before anything is
    /// deleted.
    async fn prepare(&self, plan: &Plan) -> Result<Vec<Prepared>, PurgeError> {
        let mut prepared = Vec::new();
        for (source, objects) in &plan.archives {
            let listed = list(self.store, &format!("{source}/"), false).await?;
            let published = self.coordination.verified(source).await?;
            let present: HashMap<(String, String), Found> = listed
                .into_iter()
                .map(|f| ((f.version.key.clone(), f.version.version_id.clone()), f))
                .collect();
            for candidate in objects.values().flatten() {
                let id = (candidate.object.clone(), candidate.version_id.clone());
                if present.contains_key(&id)
                    && published
                        .mapping(&candidate.object, &candidate.version_id)
                        .is_none()
                {
                    return Err(PurgeError::Refused(format!(
                        "archive candidate {} is not mapped by the published registry of {source:?}",
                        candidate.name()
                    )));
                }
            }
            prepared.push(Prepared {
                source: source.clone(),
                published,
                present,
            });
        }
        for source in plan.coordination.keys() {
            self.coordination.verified(source).await?;
        }
        // A generic key whose candidates its registry maps needs that
        // registry's proof: find a missing one now, not when a worker
        // reaches the key after other deletions.
        for (object, candidates) in generic_keys(plan) {
            if let Some(published) = self.coordination.nearest(object).await?
                && candidates
                    .iter()
                    .any(|c| published.mapping(object, &c.version_id).is_some())
            {
                self.coordination.verified(&published.source).await?;
            }
        }
        Ok(prepared)
    }

    async fn retire_prefix(
        &self,
        plan: &Plan,
        prepared: &Prepared,
        report: &mut PurgeReport,
    ) -> Result<(), PurgeError> {
        let source = &prepared.source;
        let governed = &plan.archives[source];
        let mut wanted = BTreeSet::new();
        let mut kept = BTreeSet::new();
        for (object, candidates) in governed {
            let mut deleted = Vec::new();
            let mut seen = BTreeSet::new();
            for candidate in candidates {
                if !seen.insert(candidate.version_id.clone()) {
                    continue;
                }
                let id = (object.clone(), candidate.version_id.clone());
                let Some(found) = prepared.present.get(&id) else {
                    report.already_absent.push(candidate.clone());
                    continue;
                };
                let mapping = prepared
                    .published
                    .mapping(object, &candidate.version_id)
                    .cloned()
                    .ok_or_else(|| {
                        PurgeError::Refused(format!(
                            "archive candidate {} is not mapped by the published registry of {source:?}",
                            candidate.name()
                        ))
                    })?;
                if let Some(reason) = self
                    .decide(found, &Governance::Mapped(mapping.clone()))
                    .await?
                {
                    kept.insert(id);
                    report.retained_mapped.push(candidate.clone());
                    report.retained.push(Retained {
                        candidate: candidate.clone(),
                        reason,
                    });
                    continue;
                }
                self.coordination.recheck(&prepared.published).await?;
                prepared
                    .published
                    .check_destination(self.store, &mapping)
                    .await?;
                self.delete(object, &candidate.version_id).await?;
                wanted.insert(id);
                deleted.push(candidate.version_id.clone());
            }
            if !deleted.is_empty() {
                deleted.sort();
                report.deleted.push(Deleted {
                    candidate: candidates[0].clone(),
                    deleted_version_ids: deleted,
                });
            }
        }
        let after = list(self.store, &format!("{source}/"), false).await?;
        let still: Vec<String> = after
            .iter()
            .filter(|f| wanted.contains(&(f.version.key.clone(), f.version.version_id.clone())))
            .map(|f| name(&f.version.key, &f.version.version_id))
            .collect();
        if !still.is_empty() {
            return Err(PurgeError::StillPresent {
                object: format!("{source}/"),
                versions: still,
            });
        }
        let remaining: Vec<&Found> = after
            .iter()
            .filter(|f| !is_registry_key(&f.version.key))
            .collect();
        if remaining.is_empty() {
            report.cleaned_prefixes.push(source.clone());
        }
        for f in remaining {
            if !kept.contains(&(f.version.key.clone(), f.version.version_id.clone())) {
                report.retained_unmapped.push(CandidateRef {
                    pointer: registry_key(source),
                    object: f.version.key.clone(),
                    version_id: f.version.version_id.clone(),
                    revision: None,
                });
            }
        }
        Ok(())
    }

    /// Retires one generic key (see the module doc).
    async fn retire_key(
        &self,
        object: &str,
        candidates: &[CandidateRef],
        report: &mut PurgeReport,
    ) -> Result<(), PurgeError> {
        let registry = self.coordination.nearest(object).await?;
        let versions = list(self.store, object, true).await?;
        let present: BTreeSet<&str> = versions
            .iter()
            .map(|f| f.version.version_id.as_str())
            .collect();
        for candidate in candidates {
            if !present.contains(candidate.version_id.as_str()) {
                report.already_absent.push(candidate.clone());
            }
        }
        let reference = |version_id: &str| CandidateRef {
            pointer: candidates[0].pointer.clone(),
            object: object.to_owned(),
            version_id: version_id.to_owned(),
            revision: None,
        };
        let mut deleted = Vec::new();
        let mut kept = BTreeSet::new();
        match &registry {
            Some(published) => {
                let mapped = |f: &Found| published.mapping(object, &f.version.version_id).cloned();
                let verified: Option<std::sync::Arc<Published>> =
                    if versions.iter().any(|f| mapped(f).is_some()) {
                        if !candidates
                            .iter()
                            .any(|c| published.mapping(object, &c.version_id).is_some())
                        {
                            return Err(PurgeError::Refused(format!(
                                "{object}: no candidate names a version the registry of {:?} maps: \
                                 the retirement has no coordinated exact mapping",
                                published.source
                            )));
                        }
                        Some(self.coordination.verified(&published.source).await?)
                    } else {
                        None
                    };
                for found in &versions {
                    let version_id = &found.version.version_id;
                    match (mapped(found), &verified) {
                        (Some(mapping), Some(verified)) => {
                            if let Some(reason) = self
                                .decide(found, &Governance::Mapped(mapping.clone()))
                                .await?
                            {
                                kept.insert(version_id.clone());
                                report.retained_mapped.push(CandidateRef {
                                    pointer: published.key.clone(),
                                    object: object.to_owned(),
                                    version_id: version_id.clone(),
                                    revision: None,
                                });
                                report.retained.push(Retained {
                                    candidate: reference(version_id),
                                    reason,
                                });
                                continue;
                            }
                            self.coordination.recheck(verified).await?;
                            verified.check_destination(self.store, &mapping).await?;
                            self.delete(object, version_id).await?;
                            deleted.push(version_id.clone());
                        }
                        _ => {
                            let governance = Governance::Unmapped(published.source.clone());
                            if self.decide_unmapped(found, &governance).await? {
                                return Err(PurgeError::Refused(format!(
                                    "the purge policy would delete {}, which the registry of {:?} does not map",
                                    name(object, version_id),
                                    published.source
                                )));
                            }
                            kept.insert(version_id.clone());
                            report.retained_unmapped.push(CandidateRef {
                                pointer: published.key.clone(),
                                object: object.to_owned(),
                                version_id: version_id.clone(),
                                revision: None,
                            });
                        }
                    }
                }
            }
            None => {
                for found in &versions {
                    let version_id = &found.version.version_id;
                    if let Some(reason) = self.decide(found, &Governance::Unarchived).await? {
                        kept.insert(version_id.clone());
                        report.retained.push(Retained {
                            candidate: reference(version_id),
                            reason,
                        });
                        continue;
                    }
                    self.delete(object, version_id).await?;
                    deleted.push(version_id.clone());
                }
            }
        }
        let still: Vec<String> = list(self.store, object, true)
            .await?
            .into_iter()
            .map(|f| f.version.version_id)
            .filter(|v| !kept.contains(v))
            .collect();
        if !still.is_empty() {
            return Err(PurgeError::StillPresent {
                object: object.to_owned(),
                versions: still,
            });
        }
        if !deleted.is_empty() {
            deleted.sort();
            report.deleted.push(Deleted {
                candidate: candidates[0].clone(),
                deleted_version_ids: deleted,
            });
        }
        Ok(())
    }

    /// Whether the purge policy would delete an unmapped version (only
    /// the judge is asked: it is never deleted).
    async fn decide_unmapped(
        &self,
        found: &Found,
        governance: &Governance,
    ) -> Result<bool, PurgeError> {
        let v = &found.version;
        let candidate = Candidate {
            key: v.key.clone(),
            version_id: v.version_id.clone(),
            etag: v.etag.clone(),
            size: v.size,
            is_delete_marker: v.is_delete_marker,
            last_modified_ms: v.last_modified_ms,
        };
        let verdict = self
            .judge
            .judge(&candidate, governance, self.now_ms)
            .await
            .map_err(|error| PurgeError::Judge {
                object: name(&v.key, &v.version_id),
                error,
            })?;
        Ok(verdict == Verdict::Delete)
    }
}

/// One archive prefix, checked and listed.
struct Prepared {
    source: String,
    published: std::sync::Arc<Published>,
    present: HashMap<(String, String), Found>,
}

/// The plan's generic keys that are not under an archive prefix it
/// retires (those are the prefix's, as in the seed).
fn generic_keys(plan: &Plan) -> impl Iterator<Item = (&String, &Vec<CandidateRef>)> {
    plan.generic.iter().filter(|(object, _)| {
        !plan
            .archives
            .keys()
            .any(|source| object.starts_with(&format!("{source}/")))
    })
}

/// Permanently deletes the versions `plan` names on `store` (see the
/// module doc), at `now_ms`.
///
/// # Errors
/// [`PurgeFailure`]: the error, and what had been deleted or found
/// before it. A refusal detected before the first deletion leaves the
/// store untouched.
pub async fn purge(
    store: &dyn ObjectStore,
    plan: &Plan,
    judge: &dyn PurgeJudge,
    retention: &dyn RetentionOracle,
    now_ms: u64,
) -> Result<PurgeReport, PurgeFailure> {
    purge_observed(store, plan, judge, retention, now_ms, &|_, _| {}).await
}

/// [`purge`], calling `progress(done, total)` as the plan's archive
/// prefixes and generic keys are retired (`total` counts both; a run that
/// carries the plan out ends with `done == total`), so a long run can be
/// watched from elsewhere.
///
/// # Errors
/// As [`purge`].
pub async fn purge_observed(
    store: &dyn ObjectStore,
    plan: &Plan,
    judge: &dyn PurgeJudge,
    retention: &dyn RetentionOracle,
    now_ms: u64,
    progress: &(dyn Fn(usize, usize) + Send + Sync),
) -> Result<PurgeReport, PurgeFailure> {
    if !store.versioned() {
        return Err(PurgeError::Unversioned("being purged".into()).into());
    }
    let runner = Runner {
        store,
        judge,
        retention,
        now_ms,
        coordination: Coordination::new(store, plan),
    };
    let mut report = PurgeReport::default();
    let total = plan.archives.len() + generic_keys(plan).count();
    let done = AtomicUsize::new(0);
    progress(0, total);
    let prepared = runner.prepare(plan).await?;
    for prefix in &prepared {
        if let Err(error) = runner.retire_prefix(plan, prefix, &mut report).await {
            return Err(PurgeFailure {
                error,
                partial: report,
            });
        }
        progress(done.fetch_add(1, Ordering::SeqCst) + 1, total);
    }
    let generic: Vec<(&String, &Vec<CandidateRef>)> = generic_keys(plan).collect();
    let stop = AtomicBool::new(false);
    let runner = &runner;
    let stop = &stop;
    let done = &done;
    let generic = &generic;
    let mut outcomes: Vec<(usize, PurgeReport, Result<(), PurgeError>)> =
        futures::stream::iter(0..generic.len())
            // Indices, not the borrowed keys: a closure taking references
            // is generic over their lifetimes, and rustc then cannot prove
            // the purge's future `Send` for a caller that spawns it.
            .map(|index| async move {
                let (object, candidates) = generic[index];
                let mut item = PurgeReport::default();
                if stop.load(Ordering::SeqCst) {
                    return (index, item, Ok(()));
                }
                let outcome = runner.retire_key(object, candidates, &mut item).await;
                if outcome.is_err() {
                    stop.store(true, Ordering::SeqCst);
                } else {
                    progress(done.fetch_add(1, Ordering::SeqCst) + 1, total);
                }
                (index, item, outcome)
            })
            .buffer_unordered(PURGE_WORKERS)
            .collect()
            .await;
    let first_error = outcomes.iter().position(|(_, _, outcome)| outcome.is_err());
    let error =
        first_error.map(|at| std::mem::replace(&mut outcomes[at].2, Ok(())).expect_err("an error"));
    outcomes.sort_by_key(|(index, _, _)| *index);
    for (_, item, _) in outcomes {
        report.extend(item);
    }
    report.retained_unmapped.sort();
    report.retained_mapped.sort();
    match error {
        Some(error) => Err(PurgeFailure {
            error,
            partial: report,
        }),
        None => Ok(report),
    }
}
