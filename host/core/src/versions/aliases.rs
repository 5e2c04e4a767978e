//! Pending aliases: versions a planned (not yet copied) archive task will
//! move, pinned already at their destination.
//!
//! `--receipts FILE` is a JSON array of the archive tasks' receipts, each
//! shaped like a registry (see [`super::registry`]) plus a `"store"`
//! field: the store URL the task ran against, exactly as the user passes
//! it with `--store`. `copied` receipts are skipped (the registry covers
//! them). A `planned` receipt must have `schema_version` 1, the same
//! store, valid, different, disjoint task prefixes with the same leaf
//! name, and rows whose destination is the destination prefix plus the
//! source's suffix; rows of delete markers are skipped, every other row
//! needs its size and source etag. Two receipts aliasing one destination
//! version differently are refused.
//!
//! A pin on `(destination object, source version id)` is then checked at
//! the source object with the receipt's size and etag: the copy has not
//! happened, so the bytes are still at the source.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use serde_json::Value;

use super::error::VersionsError;
use super::pins::Pin;
use super::prefixes;
use super::target::{Target, unquote};

/// Largest receipts file read (it is a local file, but an unbounded read
/// would let a wrong path exhaust memory).
pub const MAX_RECEIPTS_BYTES: u64 = 64 << 20;

/// Where a pending alias's bytes still are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alias {
    /// The source object.
    pub source_key: String,
    /// The version's size.
    pub size: u64,
    /// The version's etag, unquoted.
    pub etag: String,
}

/// The pending aliases of a set of receipts, by `(destination object,
/// version id)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Aliases {
    by_target: BTreeMap<(String, String), Alias>,
}

fn text<'a>(value: &'a Value, field: &str) -> Result<&'a str, String> {
    value[field]
        .as_str()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| format!("missing or invalid {field}"))
}

impl Aliases {
    /// No aliases.
    pub fn none() -> Self {
        Self::default()
    }

    /// The number of aliases.
    pub fn len(&self) -> usize {
        self.by_target.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_target.is_empty()
    }

    /// Reads a receipts file for the store named `store`.
    ///
    /// # Errors
    /// [`VersionsError::Io`], or [`VersionsError::Receipt`] as
    /// [`Aliases::from_receipts`].
    pub fn read(path: &Path, store: &str) -> Result<Self, VersionsError> {
        let file = std::fs::File::open(path).map_err(|e| VersionsError::io(path, e))?;
        let mut bytes = Vec::new();
        file.take(MAX_RECEIPTS_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| VersionsError::io(path, e))?;
        let name = path.display().to_string();
        if bytes.len() as u64 > MAX_RECEIPTS_BYTES {
            return Err(VersionsError::Receipt {
                receipt: name,
                reason: format!("larger than {MAX_RECEIPTS_BYTES} bytes"),
            });
        }
        let value: Value = serde_json::from_slice(&bytes).map_err(|e| VersionsError::Receipt {
            receipt: name.clone(),
            reason: format!("not JSON: {e}"),
        })?;
        let receipts = value.as_array().ok_or_else(|| VersionsError::Receipt {
            receipt: name.clone(),
            reason: "not a JSON array of receipts".into(),
        })?;
        Self::from_receipts(receipts, store, &name)
    }

    /// The aliases of `receipts` (from the file `file`) for the store
    /// named `store` (see the module doc).
    ///
    /// # Errors
    /// [`VersionsError::Receipt`] naming the receipt and the rule broken.
    pub fn from_receipts(
        receipts: &[Value],
        store: &str,
        file: &str,
    ) -> Result<Self, VersionsError> {
        let mut by_target = BTreeMap::new();
        for (index, receipt) in receipts.iter().enumerate() {
            let name = match (receipt["source"].as_str(), receipt["destination"].as_str()) {
                (Some(s), Some(d)) => format!("#{index} ({s} -> {d}) in {file}"),
                _ => format!("#{index} in {file}"),
            };
            let bad = |reason: String| VersionsError::Receipt {
                receipt: name.clone(),
                reason,
            };
            match receipt["status"].as_str() {
                Some("copied") => continue,
                Some("planned") => {}
                _ => return Err(bad("status is neither \"copied\" nor \"planned\"".into())),
            }
            if receipt["schema_version"] != 1 {
                return Err(bad("schema_version is not 1".into()));
            }
            if receipt["store"].as_str() != Some(store) {
                return Err(bad(format!(
                    "it is for the store {}, not {store:?}",
                    receipt["store"]
                )));
            }
            let source = text(receipt, "source").map_err(bad)?;
            let destination = text(receipt, "destination").map_err(bad)?;
            prefixes::validate_pair(source, destination).map_err(bad)?;
            let rows = receipt["versions"]
                .as_array()
                .ok_or_else(|| bad("has no versions array".into()))?;
            for (row_index, row) in rows.iter().enumerate() {
                let bad = |reason: String| bad(format!("version row {row_index}: {reason}"));
                let old = text(row, "source_object").map_err(bad)?;
                let new = text(row, "destination_object").map_err(bad)?;
                prefixes::check_moved(source, destination, old, new).map_err(bad)?;
                let version = text(row, "source_version_id").map_err(bad)?;
                match row["delete_marker"] {
                    Value::Bool(true) => continue,
                    Value::Bool(false) => {}
                    _ => return Err(bad("delete_marker is not a boolean".into())),
                }
                let alias = Alias {
                    source_key: old.to_owned(),
                    size: row["size"]
                        .as_u64()
                        .ok_or_else(|| bad("missing or invalid size".into()))?,
                    etag: unquote(text(row, "source_etag").map_err(bad)?).to_owned(),
                };
                let target = (new.to_owned(), version.to_owned());
                if let Some(previous) = by_target.insert(target, alias.clone())
                    && previous != alias
                {
                    return Err(bad(format!(
                        "conflicts with another receipt's alias of {new}@{version}"
                    )));
                }
            }
        }
        Ok(Self { by_target })
    }

    /// Where `pin` is to be looked for: at its own key, or at an alias's
    /// source with the alias's size and etag.
    ///
    /// # Errors
    /// [`VersionsError::Mismatch`] when the pin's size or etag contradicts
    /// its alias.
    pub fn target(&self, pin: &Pin) -> Result<Target, VersionsError> {
        let own = Target {
            key: pin.key.clone(),
            version_id: pin.version_id.clone(),
            etag: pin.etag.clone(),
            size: pin.size,
        };
        let Some(alias) = self
            .by_target
            .get(&(pin.key.clone(), pin.version_id.clone()))
        else {
            return Ok(own);
        };
        let mut fields = Vec::new();
        if pin.size.is_some_and(|size| size != alias.size) {
            fields.push("size (against its pending alias)");
        }
        if pin
            .etag
            .as_deref()
            .is_some_and(|etag| unquote(etag) != alias.etag)
        {
            fields.push("etag (against its pending alias)");
        }
        if !fields.is_empty() {
            return Err(VersionsError::Mismatch {
                object: pin.name(),
                fields,
            });
        }
        Ok(Target {
            key: alias.source_key.clone(),
            version_id: pin.version_id.clone(),
            etag: Some(alias.etag.clone()),
            size: Some(alias.size),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::versions::digest::Digest;
    use serde_json::json;

    const STORE: &str = "s3://bucket/prefix";

    fn receipt() -> Value {
        json!({
            "schema_version": 1, "status": "planned", "store": STORE,
            "source": "live/data", "destination": "archive/data",
            "versions": [
                {"source_object": "live/data/x", "source_version_id": "v1", "source_etag": "\"e1\"",
                 "destination_object": "archive/data/x", "size": 3, "delete_marker": false},
                {"source_object": "live/data/y", "source_version_id": "m1",
                 "destination_object": "archive/data/y", "delete_marker": true}
            ]
        })
    }

    fn pin(key: &str, version: &str, size: Option<u64>, etag: Option<&str>) -> Pin {
        Pin {
            key: key.into(),
            version_id: version.into(),
            etag: etag.map(str::to_owned),
            size,
            digest: Digest::Md5("900150983cd24fb0d6963f7d28e17f72".into()),
            manifest: "m.json".into(),
        }
    }

    #[test]
    fn a_pin_on_a_pending_destination_is_checked_at_its_source() {
        let aliases = Aliases::from_receipts(&[receipt()], STORE, "r.json").unwrap();
        assert_eq!(aliases.len(), 1);
        let target = aliases
            .target(&pin("archive/data/x", "v1", Some(3), Some("e1")))
            .unwrap();
        assert_eq!(target.key, "live/data/x");
        assert_eq!(target.version_id, "v1");
        assert_eq!(target.etag.as_deref(), Some("e1"));
        let own = aliases
            .target(&pin("archive/data/x", "v2", None, None))
            .unwrap();
        assert_eq!(own.key, "archive/data/x");
    }

    #[test]
    fn a_pin_contradicting_its_alias_is_a_mismatch() {
        let aliases = Aliases::from_receipts(&[receipt()], STORE, "r.json").unwrap();
        let error = aliases
            .target(&pin("archive/data/x", "v1", Some(4), Some("e2")))
            .unwrap_err();
        assert!(error.to_string().contains("size"), "{error}");
        assert!(error.to_string().contains("etag"), "{error}");
    }

    #[test]
    fn copied_receipts_are_skipped() {
        let mut copied = receipt();
        copied["status"] = json!("copied");
        copied["store"] = json!("elsewhere");
        assert!(
            Aliases::from_receipts(&[copied], STORE, "r.json")
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn an_invalid_receipt_is_refused_naming_it() {
        type Edit = Box<dyn Fn(&mut Value)>;
        let edits: Vec<(&str, Edit)> = vec![
            ("status", Box::new(|r| r["status"] = json!("running"))),
            (
                "schema_version",
                Box::new(|r| r["schema_version"] = json!(2)),
            ),
            ("store", Box::new(|r| r["store"] = json!("s3://other"))),
            (
                "task prefix",
                Box::new(|r| r["source"] = json!("live/../data")),
            ),
            ("both", Box::new(|r| r["destination"] = json!("live/data"))),
            (
                "overlap",
                Box::new(|r| r["destination"] = json!("live/data/data")),
            ),
            (
                "leaf",
                Box::new(|r| r["destination"] = json!("archive/other")),
            ),
            (
                "would move",
                Box::new(|r| r["versions"][0]["destination_object"] = json!("archive/data/z")),
            ),
            ("size", Box::new(|r| r["versions"][0]["size"] = Value::Null)),
            (
                "source_etag",
                Box::new(|r| r["versions"][0]["source_etag"] = Value::Null),
            ),
            (
                "delete_marker",
                Box::new(|r| r["versions"][0]["delete_marker"] = json!("no")),
            ),
        ];
        for (want, edit) in edits {
            let mut bad = receipt();
            edit(&mut bad);
            let error = Aliases::from_receipts(&[bad], STORE, "r.json").unwrap_err();
            let message = error.to_string();
            assert!(message.contains(want), "{want}: {message}");
            assert!(message.contains("#0"), "{message}");
        }
    }

    #[test]
    fn two_receipts_aliasing_one_version_differently_are_refused() {
        let mut other = receipt();
        other["source"] = json!("old/data");
        other["versions"][0]["source_object"] = json!("old/data/x");
        let error = Aliases::from_receipts(&[receipt(), other], STORE, "r.json").unwrap_err();
        assert!(error.to_string().contains("conflicts"), "{error}");
        assert!(Aliases::from_receipts(&[receipt(), receipt()], STORE, "r.json").is_ok());
    }
}
