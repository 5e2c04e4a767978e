//! Archive registries, and following a missing version through them.
//!
//! When an archive task moves everything under the prefix `P` to `Q`, it
//! publishes the registry object `P/.custodian-archive.json` in the same
//! store:
//!
//! ```json
//! {"schema_version": 1, "status": "copied", "source": "P", "destination": "Q",
//!  "versions": [{"source_object": "P/x", "source_version_id": "v1",
//!                "source_etag": "\"e1\"", "destination_object": "Q/x",
//!                "destination_version_id": "w1", "destination_etag": "\"f1\"",
//!                "size": 3, "delete_marker": false}]}
//! ```
//!
//! A row may also record `"destination_crc64nvme": "<16 hex>"`, the
//! destination copy's CRC-64/NVME, checked before its source is purged.
//! Objects are full keys of the store. `status` is `planned` (the copy
//! has not happened: its rows move nothing yet) or `copied`. Rows of
//! delete markers need no destination version, etag or size and are never
//! followed. The task's prefixes follow [`super::prefixes`], and every
//! row's destination must be where the task moves its source.
//!
//! A pinned version the store says does not exist is looked up in the
//! registry of the nearest ancestor prefix of its key that has one
//! (longest first; reads are cached per run); the [`HopPolicy`] chooses
//! among the key's rows, and the walk continues at the row's destination
//! with its destination etag, at most [`MAX_ARCHIVE_HOPS`] hops and never
//! back to a version already visited.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::error::{VersionsError, object_name};
use super::hops::{Hop, HopPolicy, MAX_ARCHIVE_HOPS, RegistryRow, VersionRef};
use super::prefixes;
use super::target::Target;
use custodian_object::ObjectStoreExt;
use custodian_object::{ObjectError, ObjectStore};

/// The registry's name under its task's source prefix.
pub const REGISTRY_NAME: &str = ".custodian-archive.json";

/// Largest registry object read: tens of bytes per row makes this
/// hundreds of thousands of rows; a larger object in the store would
/// exhaust the reader's memory.
pub const MAX_REGISTRY_BYTES: u64 = 64 << 20;

/// A parsed registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registry {
    /// `true` once the copy happened (`copied`); `planned` otherwise.
    pub copied: bool,
    /// The task's source prefix (where the registry lives).
    pub source: String,
    /// The task's destination prefix.
    pub destination: String,
    /// The rows that move versions with bytes.
    pub rows: Vec<RegistryRow>,
}

fn text<'a>(row: &'a Value, field: &str) -> Result<&'a str, String> {
    row[field]
        .as_str()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| format!("missing or invalid {field}"))
}

/// Parses the registry found at `key` for the prefix `prefix`.
///
/// # Errors
/// [`VersionsError::CorruptRegistry`] naming the key and the bad row.
pub fn parse(key: &str, prefix: &str, bytes: &[u8]) -> Result<Registry, VersionsError> {
    let corrupt = |reason: String| VersionsError::CorruptRegistry {
        key: key.to_owned(),
        reason,
    };
    let document: Value =
        serde_json::from_slice(bytes).map_err(|e| corrupt(format!("not JSON: {e}")))?;
    if document["schema_version"] != 1 {
        return Err(corrupt("schema_version is not 1".into()));
    }
    let copied = match document["status"].as_str() {
        Some("copied") => true,
        Some("planned") => false,
        _ => {
            return Err(corrupt(
                "status is neither \"copied\" nor \"planned\"".into(),
            ));
        }
    };
    let source = text(&document, "source").map_err(corrupt)?;
    let destination = text(&document, "destination").map_err(corrupt)?;
    if source != prefix {
        return Err(corrupt(format!(
            "its source is {source:?}, not the prefix {prefix:?} it is published under"
        )));
    }
    prefixes::validate_pair(source, destination).map_err(corrupt)?;
    let versions = document["versions"]
        .as_array()
        .ok_or_else(|| corrupt("has no versions array".into()))?;
    let mut rows = Vec::new();
    for (index, row) in versions.iter().enumerate() {
        let bad = |reason: String| corrupt(format!("version row {index}: {reason}"));
        let source_object = text(row, "source_object").map_err(bad)?;
        let destination_object = text(row, "destination_object").map_err(bad)?;
        prefixes::check_moved(source, destination, source_object, destination_object)
            .map_err(bad)?;
        let source_version = text(row, "source_version_id").map_err(bad)?;
        if !row["destination_crc64nvme"].is_null() {
            destination_crc64(row).map_err(bad)?;
        }
        match row["delete_marker"] {
            Value::Bool(true) => continue,
            Value::Bool(false) => {}
            _ => return Err(bad("delete_marker is not a boolean".into())),
        }
        rows.push(RegistryRow {
            source: VersionRef {
                key: source_object.to_owned(),
                version_id: source_version.to_owned(),
            },
            source_etag: row["source_etag"].as_str().map(str::to_owned),
            destination: VersionRef {
                key: destination_object.to_owned(),
                version_id: text(row, "destination_version_id").map_err(bad)?.to_owned(),
            },
            destination_etag: text(row, "destination_etag").map_err(bad)?.to_owned(),
            size: row["size"]
                .as_u64()
                .ok_or_else(|| bad("missing or invalid size".into()))?,
        });
    }
    Ok(Registry {
        copied,
        source: source.to_owned(),
        destination: destination.to_owned(),
        rows,
    })
}

/// A row's optional `destination_crc64nvme`: the destination copy's
/// CRC-64/NVME as 16 lowercase hex digits, which the purge's history check
/// compares with what the store recorded.
///
/// # Errors
/// A reason when the field is present but malformed.
pub fn destination_crc64(row: &Value) -> Result<Option<u64>, String> {
    match &row["destination_crc64nvme"] {
        Value::Null => Ok(None),
        Value::String(hex)
            if hex.len() == 16 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) =>
        {
            Ok(u64::from_str_radix(hex, 16).ok())
        }
        _ => Err("destination_crc64nvme is not 16 lowercase hex digits".into()),
    }
}

/// The ancestor prefixes of `key`, longest first (`a/b/c` → `a/b`, `a`).
fn ancestors(key: &str) -> impl Iterator<Item = &str> {
    key.rmatch_indices('/').map(|(at, _)| &key[..at])
}

/// The registries of one store, read at most once per prefix.
pub struct Registries<'a> {
    store: &'a dyn ObjectStore,
    cache: Mutex<HashMap<String, Option<Arc<Registry>>>>,
}

impl<'a> Registries<'a> {
    /// Registries of `store`, nothing read yet.
    pub fn new(store: &'a dyn ObjectStore) -> Self {
        Self {
            store,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The registry published for `prefix`, if any.
    ///
    /// # Errors
    /// [`VersionsError::CorruptRegistry`] when it is malformed, too large,
    /// or cannot be read.
    pub async fn at(&self, prefix: &str) -> Result<Option<Arc<Registry>>, VersionsError> {
        if let Some(found) = self.cache.lock().expect("registry cache").get(prefix) {
            return Ok(found.clone());
        }
        let key = format!("{prefix}/{REGISTRY_NAME}");
        let corrupt = |reason: String| VersionsError::CorruptRegistry {
            key: key.clone(),
            reason,
        };
        let found = match self.store.head(&key).await {
            Ok(meta) if meta.size > MAX_REGISTRY_BYTES => {
                return Err(corrupt(format!(
                    "{} bytes, more than the {MAX_REGISTRY_BYTES} read",
                    meta.size
                )));
            }
            Ok(meta) => match self.store.get_whole(&key, Some(&meta.etag)).await {
                Ok((_, bytes)) => Some(Arc::new(parse(&key, prefix, &bytes)?)),
                Err(ObjectError::NotFound(_)) => None,
                Err(e) => return Err(corrupt(format!("cannot be read: {e}"))),
            },
            Err(ObjectError::NotFound(_) | ObjectError::InvalidArgument(_)) => None,
            Err(e) => return Err(corrupt(format!("cannot be read: {e}"))),
        };
        self.cache
            .lock()
            .expect("registry cache")
            .insert(prefix.to_owned(), found.clone());
        Ok(found)
    }

    /// The nearest registry above `key` and its rows for `key`, or `None`
    /// when no ancestor prefix has one.
    ///
    /// # Errors
    /// As [`Registries::at`].
    pub async fn rows_for(
        &self,
        key: &str,
    ) -> Result<Option<(Arc<Registry>, Vec<RegistryRow>)>, VersionsError> {
        for prefix in ancestors(key) {
            if let Some(registry) = self.at(prefix).await? {
                let rows = if registry.copied {
                    registry
                        .rows
                        .iter()
                        .filter(|row| row.source.key == key)
                        .cloned()
                        .collect()
                } else {
                    Vec::new()
                };
                return Ok(Some((registry, rows)));
            }
        }
        Ok(None)
    }
}

/// Where a pin was found, and how many hops it took.
#[derive(Debug, Clone)]
pub struct Resolved<T> {
    /// What the probe returned for the version found.
    pub found: T,
    /// The version found.
    pub at: Target,
    /// Archive hops followed to get there.
    pub hops: usize,
}

/// Probes `start` with `probe`; while the store says the version does
/// not exist, follows the archive registries (see the module doc).
///
/// `probe` answers `NotFound` for a missing version and
/// `PreconditionFailed` for a delete marker, as `head_version` and
/// `get_version` do.
///
/// # Errors
/// [`VersionsError::MissingVersion`], [`VersionsError::DeleteMarker`],
/// [`VersionsError::HopLimit`], [`VersionsError::HopCycle`],
/// [`VersionsError::Policy`], a registry's error, or the store's.
pub async fn resolve<T, F, Fut>(
    start: Target,
    registries: &Registries<'_>,
    policy: &dyn HopPolicy,
    mut probe: F,
) -> Result<Resolved<T>, VersionsError>
where
    F: FnMut(Target) -> Fut,
    Fut: Future<Output = Result<T, ObjectError>>,
{
    let pinned = start.name();
    let mut seen = BTreeSet::new();
    let mut current = start;
    loop {
        match probe(current.clone()).await {
            Ok(found) => {
                return Ok(Resolved {
                    found,
                    at: current,
                    hops: seen.len(),
                });
            }
            Err(ObjectError::NotFound(_)) => {}
            Err(ObjectError::PreconditionFailed(_)) => {
                return Err(VersionsError::DeleteMarker {
                    object: current.name(),
                });
            }
            Err(source) => {
                return Err(VersionsError::Store {
                    object: current.name(),
                    source,
                });
            }
        }
        let wanted = VersionRef {
            key: current.key.clone(),
            version_id: current.version_id.clone(),
        };
        if !seen.insert(wanted.clone()) {
            return Err(VersionsError::HopCycle {
                object: pinned,
                revisited: current.name(),
            });
        }
        // The walk stops after MAX_ARCHIVE_HOPS hops: an unbounded chain
        // is a cycle through fresh versions or an attack on the reader.
        if seen.len() > MAX_ARCHIVE_HOPS {
            return Err(VersionsError::HopLimit {
                object: pinned,
                limit: MAX_ARCHIVE_HOPS,
            });
        }
        let missing = |reason: String| VersionsError::MissingVersion {
            object: if seen.len() == 1 {
                pinned.clone()
            } else {
                format!("{pinned} (moved to {})", current.name())
            },
            reason,
        };
        let Some((registry, rows)) = registries.rows_for(&current.key).await? else {
            return Err(missing(
                "the store has no such version and no archive registry above it".into(),
            ));
        };
        if !registry.copied {
            return Err(missing(format!(
                "the archive of {:?} is only planned: nothing was moved yet",
                registry.source
            )));
        }
        let hop = policy
            .next_hop(&wanted, current.size, current.etag.as_deref(), &rows)
            .await
            .map_err(|source| VersionsError::Policy {
                object: current.name(),
                source,
            })?;
        match hop {
            Hop::Follow(row) => {
                current = Target {
                    key: row.destination.key,
                    version_id: row.destination.version_id,
                    etag: Some(row.destination_etag),
                    size: current.size.or(Some(row.size)),
                };
            }
            Hop::Missing(reason) => return Err(missing(reason)),
        }
    }
}

/// `key@version` of a registry row's source, for messages.
pub fn row_name(row: &RegistryRow) -> String {
    object_name(&row.source.key, &row.source.version_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry(source: &str, destination: &str, rows: &str) -> String {
        format!(
            r#"{{"schema_version": 1, "status": "copied", "source": "{source}", "destination": "{destination}", "versions": [{rows}]}}"#
        )
    }

    const ROW: &str = r#"{"source_object": "a/d/x", "source_version_id": "v1", "source_etag": "e1",
        "destination_object": "b/d/x", "destination_version_id": "w1", "destination_etag": "f1",
        "size": 3, "delete_marker": false}"#;

    #[test]
    fn a_registry_parses_its_rows_and_skips_delete_markers() {
        let marker = r#"{"source_object": "a/d/y", "source_version_id": "m", "destination_object": "b/d/y", "delete_marker": true}"#;
        let text = registry("a/d", "b/d", &format!("{ROW}, {marker}"));
        let parsed = parse("a/d/.custodian-archive.json", "a/d", text.as_bytes()).unwrap();
        assert!(parsed.copied);
        assert_eq!(parsed.rows.len(), 1);
        assert_eq!(parsed.rows[0].destination.version_id, "w1");
        assert_eq!(parsed.rows[0].size, 3);
    }

    #[test]
    fn a_registry_that_breaks_the_task_rules_is_corrupt_naming_its_key() {
        let cases = [
            registry("a/d", "b/e", ROW),
            registry("a/d", "b/d", &ROW.replace("b/d/x", "b/d/z")),
            registry("a/d", "b/d", &ROW.replace(r#""size": 3"#, r#""size": -1"#)),
            registry("x/d", "b/d", ROW),
            "[1, 2]".to_owned(),
        ];
        for text in cases {
            let error = parse("a/d/.custodian-archive.json", "a/d", text.as_bytes()).unwrap_err();
            assert!(
                matches!(&error, VersionsError::CorruptRegistry { key, .. } if key == "a/d/.custodian-archive.json"),
                "{error}"
            );
        }
    }

    #[test]
    fn ancestors_are_walked_longest_first() {
        assert_eq!(ancestors("a/b/c").collect::<Vec<_>>(), vec!["a/b", "a"]);
        assert_eq!(ancestors("a").count(), 0);
    }
}
