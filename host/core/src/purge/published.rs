//! Published registries as the purge needs them: the exact version and
//! etag of the registry object, its content, and its rows as
//! [`Mapping`]s; and the check that a registry is the one coordinated.
//!
//! The first check of a source reads the registry's current version once
//! and compares its version id, etag and content with the plan's proof
//! (and `prefixes` entry). Every later check, before each deletion, is a
//! HEAD comparing the current version id and etag: a version's bytes
//! never change, so the same version is the same content.
//!
//! The first check also verifies the registry's *history*: every row's
//! destination copy must exist as an exact version with the recorded size
//! and etag (and CRC-64/NVME, where recorded). A registry row pointing at
//! nothing would license deleting the only copy of a version, so a plan
//! relying on such a registry is refused before anything is deleted, and
//! each mapped version's row is checked again right before its deletion.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use serde_json::Value;

use super::error::PurgeError;
use super::plan::{Plan, registry_key};
use crate::decisions::purge::Mapping;
use crate::versions::VersionsError;
use crate::versions::registry::{MAX_REGISTRY_BYTES, destination_crc64, parse};
use crate::versions::target::{Target, names_version};
use crate::versions::verify::WORKERS;
use custodian_object::ObjectStoreExt;
use custodian_object::{ObjectError, ObjectStore};

/// A registry object as read.
#[derive(Debug, Clone)]
pub struct Published {
    /// The source prefix it governs.
    pub source: String,
    /// Its key, `source/.custodian-archive.json`.
    pub key: String,
    /// The version read.
    pub version_id: String,
    /// That version's etag.
    pub etag: String,
    /// The MD5 the store recorded for that version, if any.
    pub content_md5: Option<[u8; 16]>,
    /// Its content.
    pub document: Value,
    /// `copied` (a `planned` registry maps nothing).
    pub copied: bool,
    /// The copied rows, by source key and version.
    rows: HashMap<(String, String), Row>,
}

/// A copied row: its mapping, and its destination's CRC-64/NVME when the
/// registry records one.
#[derive(Debug, Clone)]
struct Row {
    mapping: Mapping,
    crc64: Option<u64>,
}

impl Published {
    /// The row mapping `key@version_id`, when the registry is copied and
    /// has one (delete markers included, with no destination version).
    pub fn mapping(&self, key: &str, version_id: &str) -> Option<&Mapping> {
        self.rows
            .get(&(key.to_owned(), version_id.to_owned()))
            .map(|row| &row.mapping)
    }

    /// Checks that `mapping`'s destination copy exists as this registry
    /// recorded it: a HEAD of the exact destination version, whose size
    /// and etag (and CRC-64/NVME, where the row records one) must match.
    /// Rows of delete markers move no bytes and pass.
    ///
    /// # Errors
    /// [`PurgeError::History`] naming the row; [`PurgeError::Store`] when
    /// the store cannot answer.
    pub async fn check_destination(
        &self,
        store: &dyn ObjectStore,
        mapping: &Mapping,
    ) -> Result<(), PurgeError> {
        let crc64 = self
            .rows
            .get(&(
                mapping.source_key.clone(),
                mapping.source_version_id.clone(),
            ))
            .and_then(|row| row.crc64);
        self.check_row(store, mapping, crc64).await
    }

    /// [`Self::check_destination`] of a row whose recorded CRC is known.
    async fn check_row(
        &self,
        store: &dyn ObjectStore,
        mapping: &Mapping,
        crc64: Option<u64>,
    ) -> Result<(), PurgeError> {
        if mapping.destination_version_id.is_empty() {
            return Ok(());
        }
        let destination = format!(
            "{}@{}",
            mapping.destination_key, mapping.destination_version_id
        );
        let refuse = |reason: String| PurgeError::History {
            registry: self.key.clone(),
            row: format!(
                "{}@{} -> {destination}",
                mapping.source_key, mapping.source_version_id
            ),
            reason,
        };
        let meta = match store
            .head_version(&mapping.destination_key, &mapping.destination_version_id)
            .await
        {
            Ok(meta) => meta,
            Err(ObjectError::NotFound(_)) => {
                return Err(refuse("the destination version does not exist".into()));
            }
            Err(ObjectError::PreconditionFailed(_)) => {
                return Err(refuse("the destination version is a delete marker".into()));
            }
            Err(e) => return Err(PurgeError::store(destination, e)),
        };
        let recorded = Target {
            key: mapping.destination_key.clone(),
            version_id: mapping.destination_version_id.clone(),
            etag: Some(mapping.destination_etag.clone()),
            size: Some(mapping.size),
        };
        let mut wrong: Vec<String> = recorded
            .mismatches(
                meta.version_id.as_deref(),
                meta.size,
                (&meta.etag, meta.content_md5),
            )
            .into_iter()
            .map(|field| match field {
                "size" => format!("size is {}, recorded {}", meta.size, mapping.size),
                "etag" => format!(
                    "etag is {}, recorded {}",
                    meta.etag, mapping.destination_etag
                ),
                other => format!("{other} differs"),
            })
            .collect();
        if let Some(want) = crc64 {
            match meta.crc64 {
                Some(crc) if crc == want => {}
                Some(crc) => wrong.push(format!("crc64nvme is {crc:016x}, recorded {want:016x}")),
                None => wrong.push(format!(
                    "the store recorded no crc64nvme, the registry {want:016x}"
                )),
            }
        }
        if wrong.is_empty() {
            Ok(())
        } else {
            Err(refuse(wrong.join("; ")))
        }
    }

    /// Checks every row's destination ([`Self::check_destination`]),
    /// [`WORKERS`] at a time, as the seed's `verify_history` does before
    /// a registry may license any deletion.
    ///
    /// # Errors
    /// The first failing row in registry order (with how many others
    /// failed); [`PurgeError::Store`].
    pub async fn check_history(&self, store: &dyn ObjectStore) -> Result<(), PurgeError> {
        let mut rows: Vec<&Row> = self.rows.values().collect();
        rows.sort_by(|a, b| {
            let (a, b) = (&a.mapping, &b.mapping);
            (&a.source_key, &a.source_version_id).cmp(&(&b.source_key, &b.source_version_id))
        });
        let rows = &rows;
        let mut failures: Vec<(usize, PurgeError)> = futures::stream::iter(0..rows.len())
            // Indices, not borrowed rows: a closure taking references
            // is generic over their lifetimes, and rustc then cannot
            // prove the purge's future `Send` for a caller that
            // spawns it.
            .map(|index| async move {
                (
                    index,
                    self.check_row(store, &rows[index].mapping, rows[index].crc64)
                        .await,
                )
            })
            .buffer_unordered(WORKERS)
            .filter_map(|(index, outcome)| async move { outcome.err().map(|e| (index, e)) })
            .collect()
            .await;
        failures.sort_by_key(|(index, _)| *index);
        let others = failures.len().saturating_sub(1);
        match failures.into_iter().next() {
            None => Ok(()),
            Some((
                _,
                PurgeError::History {
                    registry,
                    row,
                    reason,
                },
            )) if others > 0 => Err(PurgeError::History {
                registry,
                row,
                reason: format!("{reason} (and {others} more rows fail)"),
            }),
            Some((_, error)) => Err(error),
        }
    }
}

fn text(row: &Value, field: &str) -> String {
    row[field].as_str().unwrap_or_default().to_owned()
}

/// Reads the registry of `prefix`, if one is published.
///
/// # Errors
/// [`PurgeError::Registry`] when it is malformed or too large,
/// [`PurgeError::Store`] when it cannot be read.
pub async fn read(store: &dyn ObjectStore, prefix: &str) -> Result<Option<Published>, PurgeError> {
    let key = registry_key(prefix);
    let corrupt = |reason: String| {
        PurgeError::Registry(VersionsError::CorruptRegistry {
            key: key.clone(),
            reason,
        })
    };
    let meta = match store.head(&key).await {
        Ok(meta) => meta,
        Err(ObjectError::NotFound(_) | ObjectError::InvalidArgument(_)) => return Ok(None),
        Err(e) => return Err(PurgeError::store(&key, e)),
    };
    // A registry larger than this would exhaust the purger's memory.
    if meta.size > MAX_REGISTRY_BYTES {
        return Err(corrupt(format!(
            "{} bytes, more than the {MAX_REGISTRY_BYTES} read",
            meta.size
        )));
    }
    let version_id = meta
        .version_id
        .clone()
        .ok_or_else(|| corrupt("the store gave its current object no version id".into()))?;
    let (meta, bytes) = match store.get_version(&key, &version_id).await {
        Ok(found) => found,
        Err(ObjectError::NotFound(_)) => return Ok(None),
        Err(e) => return Err(PurgeError::store(format!("{key}@{version_id}"), e)),
    };
    let registry = parse(&key, prefix, &bytes).map_err(PurgeError::Registry)?;
    let document: Value =
        serde_json::from_slice(&bytes).map_err(|e| corrupt(format!("not JSON: {e}")))?;
    let mut rows = HashMap::new();
    if registry.copied {
        // `parse` checked every row's fields; markers keep no destination.
        for row in document["versions"].as_array().into_iter().flatten() {
            let mapping = Mapping {
                source_key: text(row, "source_object"),
                source_version_id: text(row, "source_version_id"),
                source_etag: row["source_etag"].as_str().map(str::to_owned),
                destination_key: text(row, "destination_object"),
                destination_version_id: text(row, "destination_version_id"),
                destination_etag: text(row, "destination_etag"),
                size: row["size"].as_u64().unwrap_or(0),
            };
            let id = (
                mapping.source_key.clone(),
                mapping.source_version_id.clone(),
            );
            // `parse` refused a malformed CRC.
            let crc64 = destination_crc64(row).ok().flatten();
            rows.insert(id, Row { mapping, crc64 });
        }
    }
    Ok(Some(Published {
        source: prefix.to_owned(),
        key,
        version_id,
        etag: meta.etag,
        content_md5: meta.content_md5,
        document,
        copied: registry.copied,
        rows,
    }))
}

fn differs(source: &str, why: &str) -> PurgeError {
    PurgeError::Refused(format!(
        "the registry of {source:?} differs from the coordinated receipt: {why}"
    ))
}

/// The registries of one run, each read at most once, and which of them
/// were checked against the plan's proofs.
pub struct Coordination<'a> {
    store: &'a dyn ObjectStore,
    plan: &'a Plan,
    read: Mutex<HashMap<String, Option<Arc<Published>>>>,
    verified: Mutex<BTreeSet<String>>,
}

impl<'a> Coordination<'a> {
    /// Nothing read yet.
    pub fn new(store: &'a dyn ObjectStore, plan: &'a Plan) -> Self {
        Self {
            store,
            plan,
            read: Mutex::new(HashMap::new()),
            verified: Mutex::new(BTreeSet::new()),
        }
    }

    /// The registry published for `prefix`, if any (cached).
    ///
    /// # Errors
    /// As [`read`].
    pub async fn at(&self, prefix: &str) -> Result<Option<Arc<Published>>, PurgeError> {
        if let Some(found) = self.read.lock().expect("registry cache").get(prefix) {
            return Ok(found.clone());
        }
        let found = read(self.store, prefix).await?.map(Arc::new);
        self.read
            .lock()
            .expect("registry cache")
            .insert(prefix.to_owned(), found.clone());
        Ok(found)
    }

    /// The registry of the nearest ancestor prefix of `key` that has one.
    ///
    /// # Errors
    /// As [`read`].
    pub async fn nearest(&self, key: &str) -> Result<Option<Arc<Published>>, PurgeError> {
        for (at, _) in key.rmatch_indices('/') {
            if let Some(found) = self.at(&key[..at]).await? {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// The registry of `source`, checked against the plan: published,
    /// copied, equal to the `prefixes` entry (if any), and exactly the
    /// version, etag and content of the coordination proof.
    ///
    /// # Errors
    /// [`PurgeError::Refused`] saying which check failed; as [`read`].
    pub async fn verified(&self, source: &str) -> Result<Arc<Published>, PurgeError> {
        let published = self.at(source).await?.ok_or_else(|| {
            PurgeError::Refused(format!(
                "archive cleanup of {source:?} requires a published registry at {}",
                registry_key(source)
            ))
        })?;
        if self.verified.lock().expect("verified").contains(source) {
            return Ok(published);
        }
        if !published.copied {
            return Err(PurgeError::Refused(format!(
                "the registry of {source:?} is only planned: nothing was moved"
            )));
        }
        if self
            .plan
            .prefixes
            .get(source)
            .is_some_and(|expected| *expected != published.document)
        {
            return Err(PurgeError::Refused(format!(
                "the retirement prefix {source:?} differs from its published registry"
            )));
        }
        let proof = self.plan.coordination.get(source).ok_or_else(|| {
            PurgeError::Refused(format!(
                "archive cleanup of {source:?} requires a coordination proof of its registry"
            ))
        })?;
        if proof.registry_version_id != published.version_id {
            return Err(differs(
                source,
                &format!(
                    "its current version is {}, the proof's {}",
                    published.version_id, proof.registry_version_id
                ),
            ));
        }
        // The proof records the etag its publisher was given: S3's own
        // (which the S3 backend reports suffixed with the version), or an
        // MD5 the embedded store recorded for this version.
        if !names_version(
            &proof.registry_etag,
            (&published.etag, published.content_md5),
            &published.version_id,
        ) {
            return Err(differs(
                source,
                &format!(
                    "its etag is {}, the proof's {}",
                    published.etag, proof.registry_etag
                ),
            ));
        }
        if proof.receipt != published.document {
            return Err(differs(source, "its content is not the receipt"));
        }
        published.check_history(self.store).await?;
        self.verified
            .lock()
            .expect("verified")
            .insert(source.to_owned());
        Ok(published)
    }

    /// Re-checks, right before a deletion, that the registry of
    /// `published` (already [`Self::verified`]) is still the current one.
    ///
    /// # Errors
    /// [`PurgeError::Refused`] when it was re-published or deleted.
    pub async fn recheck(&self, published: &Published) -> Result<(), PurgeError> {
        let source = &published.source;
        match self.store.head(&published.key).await {
            Ok(meta)
                if meta.version_id.as_deref() == Some(published.version_id.as_str())
                    && meta.etag == published.etag =>
            {
                Ok(())
            }
            Ok(meta) => Err(differs(
                source,
                &format!(
                    "it was re-published (now {} with etag {})",
                    meta.version_id.unwrap_or_default(),
                    meta.etag
                ),
            )),
            Err(ObjectError::NotFound(_)) => Err(differs(source, "it was deleted")),
            Err(e) => Err(PurgeError::store(&published.key, e)),
        }
    }
}
