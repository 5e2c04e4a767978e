//! Verifying pins against a versioned store without reading any bytes.
//!
//! Each pin's version must exist (directly, through a pending alias, or
//! through archive hops), must not be a delete marker, and must have the
//! pinned size and etag; a `crc64nvme` pin must also match the CRC the
//! store recorded. MD5 digests need the bytes and are checked by
//! [`super::fetch`].
//!
//! Pins are grouped by parent prefix (`a/b/c` → `a/b/`). A group of at
//! least [`BATCH_FROM`] pins under a non-empty prefix is checked from
//! `list_versions` pages (at most [`MAX_LIST_PAGES`]) instead of one
//! `head_version` per pin; whatever the listing did not find, every
//! `crc64nvme` pin (listings carry no CRC) and every group whose listing
//! the store refuses (`Auth`, `Unsupported`) are checked with HEADs.
//! Stores calls run [`WORKERS`] at a time. Every problem is reported,
//! not just the first.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::StreamExt;
use serde_json::{Value, json};

use super::aliases::Aliases;
use super::digest::Digest;
use super::error::VersionsError;
use super::hops::HopPolicy;
use super::pins::Pin;
use super::registry::{Registries, resolve};
use super::target::Target;
use custodian_object::ObjectStoreExt;
use custodian_object::{MAX_LIST_PAGE, ObjectError, ObjectMeta, ObjectStore};

/// Store calls in flight at once: enough to hide latency, few enough not
/// to trip a server's rate limits or exhaust sockets.
pub const WORKERS: usize = 16;
/// Smallest group of pins under one prefix checked by listing.
pub const BATCH_FROM: usize = 8;
/// Most listing pages read per group: a prefix holding many more
/// versions than pins (a hostile or just busy prefix) would otherwise make
/// a listing cost far more than the HEADs it saves; what two pages do not
/// find is checked by HEAD.
pub const MAX_LIST_PAGES: usize = 2;

/// How a pin was checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Via {
    /// Found in a `list_versions` page.
    Listing,
    /// By `head_version` (after any archive hops).
    Head,
}

/// A pin that passed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Checked {
    /// The pin, `key@version`.
    pub pin: String,
    /// Its manifest.
    pub manifest: String,
    /// Where its version was found, `key@version` (differs from `pin`
    /// after a pending alias or archive hops).
    pub found: String,
    /// Archive hops followed.
    pub hops: usize,
    /// How it was checked.
    pub via: Via,
}

/// A pin that failed.
#[derive(Debug)]
pub struct Problem {
    /// The pin, `key@version`.
    pub pin: String,
    /// Its manifest.
    pub manifest: String,
    /// What is wrong.
    pub error: VersionsError,
}

impl Problem {
    pub(crate) fn new(pin: &Pin, error: VersionsError) -> Self {
        Self {
            pin: pin.name(),
            manifest: pin.manifest.clone(),
            error,
        }
    }

    /// The problem as JSON: `{"pin", "manifest", "kind", "error"}`.
    pub fn to_json(&self) -> Value {
        json!({
            "pin": self.pin,
            "manifest": self.manifest,
            "kind": self.error.kind(),
            "error": self.error.to_string(),
        })
    }
}

/// What [`verify`] found.
#[derive(Debug, Default)]
pub struct VerifyReport {
    /// The pins that passed, in manifest order.
    pub checked: Vec<Checked>,
    /// The pins that failed, in manifest order.
    pub problems: Vec<Problem>,
    /// `list_versions` calls made.
    pub list_calls: usize,
    /// `head_version` calls made.
    pub head_calls: usize,
}

impl VerifyReport {
    /// No pin failed.
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }

    /// The report as JSON.
    pub fn to_json(&self) -> Value {
        json!({
            "ok": self.ok(),
            "checked": self.checked,
            "problems": self.problems.iter().map(Problem::to_json).collect::<Vec<_>>(),
            "requests": {"list_versions": self.list_calls, "head_version": self.head_calls},
        })
    }
}

/// Refuses a store without versions.
///
/// # Errors
/// [`VersionsError::Unversioned`] naming the store as `name`.
pub fn require_versioned(store: &dyn ObjectStore, name: &str) -> Result<(), VersionsError> {
    if store.versioned() {
        Ok(())
    } else {
        Err(VersionsError::Unversioned(name.to_owned()))
    }
}

/// One pin to check, where to look for it.
#[derive(Debug, Clone)]
struct Job {
    index: usize,
    target: Target,
}

type Outcome = (usize, Result<Checked, VersionsError>);

/// How [`verify_with`] checks pins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerifyOptions {
    /// Check groups of pins from version listings (the default); `false`
    /// sends one HEAD per pin (for comparison, or for stores whose
    /// listings are slow).
    pub listing: bool,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        Self { listing: true }
    }
}

/// Checks every pin against `store` (see the module doc).
///
/// # Errors
/// Only [`VersionsError::Unversioned`]: every pin's own failure is a
/// [`Problem`] in the report.
pub async fn verify(
    store: &dyn ObjectStore,
    pins: &[Pin],
    aliases: &Aliases,
    hops: &dyn HopPolicy,
) -> Result<VerifyReport, VersionsError> {
    verify_with(store, pins, aliases, hops, VerifyOptions::default()).await
}

/// [`verify`] with `options`.
///
/// # Errors
/// As [`verify`].
pub async fn verify_with(
    store: &dyn ObjectStore,
    pins: &[Pin],
    aliases: &Aliases,
    hops: &dyn HopPolicy,
    options: VerifyOptions,
) -> Result<VerifyReport, VersionsError> {
    verify_observed(store, pins, aliases, hops, options, &|_, _| {}).await
}

/// [`verify_with`], calling `progress(done, total)` as pins are decided
/// (`total` is the number of pins; the last call has `done == total`), so
/// a long run can be watched from elsewhere.
///
/// # Errors
/// As [`verify`].
pub async fn verify_observed(
    store: &dyn ObjectStore,
    pins: &[Pin],
    aliases: &Aliases,
    hops: &dyn HopPolicy,
    options: VerifyOptions,
    progress: &(dyn Fn(usize, usize) + Send + Sync),
) -> Result<VerifyReport, VersionsError> {
    require_versioned(store, "being read")?;
    let registries = Registries::new(store);
    let counters = Counters::default();
    let mut outcomes: Vec<Outcome> = Vec::new();
    let mut groups: BTreeMap<String, Vec<Job>> = BTreeMap::new();
    let mut heads = Vec::new();
    for (index, pin) in pins.iter().enumerate() {
        match aliases.target(pin) {
            Ok(target) if matches!(pin.digest, Digest::Crc64Nvme(_)) => {
                heads.push(Job { index, target });
            }
            Ok(target) => {
                let prefix = target
                    .key
                    .rsplit_once('/')
                    .map(|(parent, _)| format!("{parent}/"))
                    .unwrap_or_default();
                groups
                    .entry(prefix)
                    .or_default()
                    .push(Job { index, target });
            }
            Err(error) => outcomes.push((index, Err(error))),
        }
    }
    progress(outcomes.len(), pins.len());
    let mut listed = Vec::new();
    for (prefix, jobs) in groups {
        if !options.listing || prefix.is_empty() || jobs.len() < BATCH_FROM {
            heads.extend(jobs);
        } else {
            listed.push((prefix, jobs));
        }
    }
    let mut listings = futures::stream::iter(listed)
        .map(|(prefix, jobs)| check_listed(store, pins, prefix, jobs, &counters))
        .buffer_unordered(WORKERS);
    while let Some((done, leftover)) = listings.next().await {
        outcomes.extend(done);
        heads.extend(leftover);
        progress(outcomes.len(), pins.len());
    }
    drop(listings);
    let mut checks = futures::stream::iter(heads)
        .map(|job| check_head(store, &registries, hops, &pins[job.index], job, &counters))
        .buffer_unordered(WORKERS);
    while let Some(outcome) = checks.next().await {
        outcomes.push(outcome);
        progress(outcomes.len(), pins.len());
    }
    drop(checks);
    outcomes.sort_by_key(|(index, _)| *index);
    let mut report = VerifyReport {
        list_calls: counters.lists.load(Ordering::Relaxed),
        head_calls: counters.heads.load(Ordering::Relaxed),
        ..VerifyReport::default()
    };
    for (index, outcome) in outcomes {
        match outcome {
            Ok(checked) => report.checked.push(checked),
            Err(error) => report.problems.push(Problem::new(&pins[index], error)),
        }
    }
    Ok(report)
}

#[derive(Default)]
struct Counters {
    lists: AtomicUsize,
    heads: AtomicUsize,
}

/// Checks a group from listing pages; returns the outcomes and the jobs
/// left for HEADs.
async fn check_listed(
    store: &dyn ObjectStore,
    pins: &[Pin],
    prefix: String,
    jobs: Vec<Job>,
    counters: &Counters,
) -> (Vec<Outcome>, Vec<Job>) {
    let mut wanted: HashMap<(String, String), Vec<Job>> = HashMap::new();
    for job in jobs {
        wanted
            .entry((job.target.key.clone(), job.target.version_id.clone()))
            .or_default()
            .push(job);
    }
    let mut outcomes = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_LIST_PAGES {
        counters.lists.fetch_add(1, Ordering::Relaxed);
        let page = match store
            .list_versions(&prefix, cursor.as_deref(), MAX_LIST_PAGE)
            .await
        {
            Ok(page) => page,
            // Refused: the HEADs may still be allowed.
            Err(ObjectError::Auth(_) | ObjectError::Unsupported(_)) => break,
            Err(source) => {
                for job in wanted.into_values().flatten() {
                    let error = VersionsError::Store {
                        object: format!("listing {prefix:?} for {}", job.target.name()),
                        source: source.clone(),
                    };
                    outcomes.push((job.index, Err(error)));
                }
                return (outcomes, Vec::new());
            }
        };
        for item in page.items {
            let Some(found) = wanted.remove(&(item.key, item.version_id)) else {
                continue;
            };
            for job in found {
                let outcome = if item.is_delete_marker {
                    Err(VersionsError::DeleteMarker {
                        object: job.target.name(),
                    })
                } else {
                    let fields = job.target.mismatches(
                        Some(job.target.version_id.as_str()),
                        item.size,
                        (&item.etag, item.content_md5),
                    );
                    checked_or_mismatch(&pins[job.index], &job.target, 0, Via::Listing, fields)
                };
                outcomes.push((job.index, outcome));
            }
        }
        match page.next {
            Some(next) if !wanted.is_empty() => cursor = Some(next),
            _ => break,
        }
    }
    (outcomes, wanted.into_values().flatten().collect())
}

fn checked_or_mismatch(
    pin: &Pin,
    found: &Target,
    hops: usize,
    via: Via,
    fields: Vec<&'static str>,
) -> Result<Checked, VersionsError> {
    if !fields.is_empty() {
        let object = if found.key == pin.key && found.version_id == pin.version_id {
            pin.name()
        } else {
            format!("{} (found as {})", pin.name(), found.name())
        };
        return Err(VersionsError::Mismatch { object, fields });
    }
    Ok(Checked {
        pin: pin.name(),
        manifest: pin.manifest.clone(),
        found: found.name(),
        hops,
        via,
    })
}

/// The fields of `meta` that differ from `target` and `pin`'s digest.
pub(crate) fn meta_mismatches(pin: &Pin, target: &Target, meta: &ObjectMeta) -> Vec<&'static str> {
    let mut fields = target.mismatches(
        meta.version_id.as_deref(),
        meta.size,
        (&meta.etag, meta.content_md5),
    );
    if let Digest::Crc64Nvme(want) = &pin.digest
        && meta.crc64.map(|crc| format!("{crc:016x}")).as_deref() != Some(want.as_str())
    {
        fields.push(if meta.crc64.is_some() {
            "crc64nvme"
        } else {
            "crc64nvme (the store recorded none)"
        });
    }
    fields
}

async fn check_head(
    store: &dyn ObjectStore,
    registries: &Registries<'_>,
    hops: &dyn HopPolicy,
    pin: &Pin,
    job: Job,
    counters: &Counters,
) -> Outcome {
    let probe = |target: Target| async move {
        counters.heads.fetch_add(1, Ordering::Relaxed);
        store.head_version(&target.key, &target.version_id).await
    };
    let outcome = match resolve(job.target, registries, hops, probe).await {
        Ok(resolved) => {
            let fields = meta_mismatches(pin, &resolved.at, &resolved.found);
            checked_or_mismatch(pin, &resolved.at, resolved.hops, Via::Head, fields)
        }
        Err(error) => Err(error),
    };
    (job.index, outcome)
}
