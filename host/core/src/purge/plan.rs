//! Purge plans: which exact versions to retire, the archive prefixes being
//! retired, and the proofs that their registries were coordinated.
//!
//! ```json
//! {"candidates": [{"pointer": "data/a.dvc", "object": "data/a.csv", "version_id": "v1"},
//!                 {"pointer": "old/task/.custodian-archive.json",
//!                  "object": "old/task/x", "version_id": "v2"}],
//!  "prefixes": [<the registry of an archive prefix being retired, status "copied">],
//!  "coordination": [{"receipt": <the registry JSON>,
//!                    "coordination": {"registry_version_id": "…", "registry_etag": "…"}}]}
//! ```
//!
//! A bare array of candidates (what `custodian purge list` prints) is a
//! plan with no prefixes and no proofs. A candidate may carry `revision`,
//! the commit whose pointer file pinned it (`purge list` from git
//! history); it only names where the candidate came from. A candidate whose `pointer` is
//! `P/.custodian-archive.json` is an *archive candidate* of the source
//! prefix `P`: its object must be under `P/`. Any other candidate is
//! *generic*: its object is a managed key. Prefixes and objects must be
//! clean relative paths (no leading `/`, no empty, `.` or `..` segments).
//! A version id must be exact (not empty, not `"null"`). Registry objects
//! themselves are never candidates.
//!
//! A *coordination proof* names the exact version id and etag of the
//! registry object that was published, with the registry's content: the
//! purge proceeds only while the registry's current version and etag are
//! those and its content equals the receipt (and the `prefixes` entry of
//! the same source, if any).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::Path;

use serde_json::Value;

use super::error::PurgeError;
use crate::versions::dvc::Pointers;
use crate::versions::history::AtRevision;
use crate::versions::prefixes;
use crate::versions::registry::REGISTRY_NAME;

/// Largest plan file read: a candidate is ~150 bytes, so this is hundreds
/// of thousands of them; a bigger file is a mistake or an attempt to
/// exhaust memory.
pub const MAX_PLAN_BYTES: u64 = 64 << 20;

/// One exact version to retire, and the pointer (manifest or registry)
/// that named it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CandidateRef {
    /// The manifest that pinned it, or `P/.custodian-archive.json`.
    pub pointer: String,
    /// The key.
    pub object: String,
    /// The exact version.
    pub version_id: String,
    /// The commit whose pointer file pinned it, when read from git
    /// history (the newest such commit read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
}

impl CandidateRef {
    /// `key@version`, how reports name it.
    pub fn name(&self) -> String {
        format!("{}@{}", self.object, self.version_id)
    }
}

/// A registry as published: the exact version and etag of its object,
/// and the content it had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proof {
    /// The registry JSON.
    pub receipt: Value,
    /// The version id of the registry object that was published.
    pub registry_version_id: String,
    /// Its etag.
    pub registry_etag: String,
}

/// A validated plan.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// Archive candidates by source prefix, then object (every prefix of
    /// `prefixes` has an entry, possibly empty).
    pub archives: BTreeMap<String, BTreeMap<String, Vec<CandidateRef>>>,
    /// Generic candidates by object.
    pub generic: BTreeMap<String, Vec<CandidateRef>>,
    /// The registries of the archive prefixes being retired, by source.
    pub prefixes: BTreeMap<String, Value>,
    /// Coordination proofs, by source.
    pub coordination: BTreeMap<String, Proof>,
}

fn bad(reason: impl Into<String>) -> PurgeError {
    PurgeError::Plan(reason.into())
}

/// `P/.custodian-archive.json`.
pub fn registry_key(prefix: &str) -> String {
    format!("{prefix}/{REGISTRY_NAME}")
}

/// Whether `key` is a registry object.
pub fn is_registry_key(key: &str) -> bool {
    key == REGISTRY_NAME || key.ends_with(&format!("/{REGISTRY_NAME}"))
}

fn source_of(receipt: &Value, what: &str) -> Result<String, PurgeError> {
    let source = receipt["source"]
        .as_str()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| bad(format!("{what} has no source")))?;
    prefixes::validate(source).map_err(|e| bad(format!("{what}: {e}")))?;
    Ok(source.to_owned())
}

impl Plan {
    /// Validates and classifies a plan's parts (see the module doc).
    ///
    /// # Errors
    /// [`PurgeError::Plan`] naming what is wrong.
    pub fn new(
        candidates: Vec<CandidateRef>,
        prefix_receipts: Vec<Value>,
        proofs: Vec<Value>,
    ) -> Result<Self, PurgeError> {
        let mut plan = Plan::default();
        for proof in proofs {
            let source = source_of(&proof["receipt"], "a coordination receipt")?;
            let field = |name: &str| {
                proof["coordination"][name]
                    .as_str()
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .ok_or_else(|| bad(format!("the coordination of {source:?} has no {name}")))
            };
            let parsed = Proof {
                registry_version_id: field("registry_version_id")?,
                registry_etag: field("registry_etag")?,
                receipt: proof["receipt"].clone(),
            };
            if plan.coordination.insert(source.clone(), parsed).is_some() {
                return Err(bad(format!("duplicate coordination for {source:?}")));
            }
        }
        for receipt in prefix_receipts {
            let source = source_of(&receipt, "a retirement prefix")?;
            if receipt["status"] != "copied" || !receipt["versions"].is_array() {
                return Err(bad(format!(
                    "the retirement prefix {source:?} is not a copied registry with versions"
                )));
            }
            if plan.prefixes.insert(source.clone(), receipt).is_some() {
                return Err(bad(format!("duplicate retirement prefix {source:?}")));
            }
            plan.archives.insert(source, BTreeMap::new());
        }
        let suffix = format!("/{REGISTRY_NAME}");
        for candidate in candidates {
            let name = candidate.name();
            if candidate.version_id.is_empty() || candidate.version_id == "null" {
                return Err(bad(format!("{name}: no exact version id")));
            }
            if is_registry_key(&candidate.object) {
                return Err(bad(format!("{name}: registry objects are never purged")));
            }
            if let Some(source) = candidate.pointer.strip_suffix(&suffix) {
                prefixes::validate(source).map_err(|e| bad(format!("{name}: {e}")))?;
                if !candidate.object.starts_with(&format!("{source}/")) {
                    return Err(bad(format!(
                        "{name}: the archive candidate escapes its task prefix {source:?}"
                    )));
                }
                prefixes::validate(&candidate.object).map_err(|e| bad(format!("{name}: {e}")))?;
                plan.archives
                    .entry(source.to_owned())
                    .or_default()
                    .entry(candidate.object.clone())
                    .or_default()
                    .push(candidate);
            } else {
                prefixes::validate(&candidate.object).map_err(|e| bad(format!("{name}: {e}")))?;
                plan.generic
                    .entry(candidate.object.clone())
                    .or_default()
                    .push(candidate);
            }
        }
        Ok(plan)
    }

    /// Parses a plan: an object `{"candidates", "prefixes",
    /// "coordination"}` or a bare array of candidates.
    ///
    /// # Errors
    /// [`PurgeError::Plan`].
    pub fn parse(text: &str) -> Result<Self, PurgeError> {
        let document: Value =
            serde_json::from_str(text).map_err(|e| bad(format!("not JSON: {e}")))?;
        let (candidates, prefixes, coordination) = match document {
            Value::Array(_) => (document, Value::Null, Value::Null),
            Value::Object(mut fields) => {
                if let Some(unknown) = fields
                    .keys()
                    .find(|k| !matches!(k.as_str(), "candidates" | "prefixes" | "coordination"))
                {
                    return Err(bad(format!("unknown field {unknown:?}")));
                }
                (
                    fields.remove("candidates").unwrap_or(Value::Array(vec![])),
                    fields.remove("prefixes").unwrap_or(Value::Null),
                    fields.remove("coordination").unwrap_or(Value::Null),
                )
            }
            _ => return Err(bad("neither an object nor an array of candidates")),
        };
        let candidates: Vec<CandidateRef> =
            serde_json::from_value(candidates).map_err(|e| bad(format!("candidates: {e}")))?;
        let list = |value: Value, what: &str| match value {
            Value::Null => Ok(Vec::new()),
            Value::Array(items) => Ok(items),
            _ => Err(bad(format!("{what} is not an array"))),
        };
        Plan::new(
            candidates,
            list(prefixes, "prefixes")?,
            list(coordination, "coordination")?,
        )
    }

    /// Reads and parses the plan file `path`.
    ///
    /// # Errors
    /// [`PurgeError::Plan`] when it cannot be read or is invalid.
    pub fn read(path: &Path) -> Result<Self, PurgeError> {
        let file =
            std::fs::File::open(path).map_err(|e| bad(format!("{}: {e}", path.display())))?;
        let mut text = String::new();
        file.take(MAX_PLAN_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(|e| bad(format!("{}: {e}", path.display())))?;
        if text.len() as u64 > MAX_PLAN_BYTES {
            return Err(bad(format!(
                "{}: larger than {MAX_PLAN_BYTES} bytes",
                path.display()
            )));
        }
        Self::parse(&text).map_err(|e| match e {
            PurgeError::Plan(reason) => bad(format!("{}: {reason}", path.display())),
            other => other,
        })
    }
}

/// The history candidates of pin manifests (each read, with its path):
/// one per exact pin, its manifest as the pointer (pins always carry an
/// exact version). Content-addressed DVC outputs name shared hash objects,
/// not versions of managed keys, so they are never candidates (as in the
/// seed); `MANIFEST: PATH` of each is returned so callers can say so.
pub fn list(read: Vec<(String, Pointers)>) -> (Vec<CandidateRef>, Vec<String>) {
    let mut candidates = Vec::new();
    let mut skipped = Vec::new();
    for (pointer, pointers) in read {
        collect(&pointer, None, pointers, &mut candidates, &mut skipped);
    }
    (candidates, skipped)
}

/// The history candidates of pointer files read from git history: one
/// per distinct `(pointer, object, version)`, naming the first commit of
/// `read` (newest first, as git lists them) that pinned it.
pub fn list_history(read: Vec<AtRevision>) -> (Vec<CandidateRef>, Vec<String>) {
    let mut candidates = Vec::new();
    let mut skipped = Vec::new();
    for at in read {
        collect(
            &at.path,
            Some(&at.commit),
            at.pointers,
            &mut candidates,
            &mut skipped,
        );
    }
    let mut seen = BTreeSet::new();
    candidates.retain(|c: &CandidateRef| {
        seen.insert((c.pointer.clone(), c.object.clone(), c.version_id.clone()))
    });
    skipped.sort();
    skipped.dedup();
    (candidates, skipped)
}

fn collect(
    pointer: &str,
    revision: Option<&str>,
    pointers: Pointers,
    candidates: &mut Vec<CandidateRef>,
    skipped: &mut Vec<String>,
) {
    for pin in pointers.pins {
        candidates.push(CandidateRef {
            pointer: pointer.to_owned(),
            object: pin.key,
            version_id: pin.version_id,
            revision: revision.map(str::to_owned),
        });
    }
    for output in pointers.addressed {
        skipped.push(format!("{}: {}", output.manifest, output.path));
    }
}
