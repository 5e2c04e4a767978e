//! What a purge did, as JSON and as text lines.

use serde_json::Value;

use super::error::PurgeError;
use super::plan::CandidateRef;

/// One key whose versions were permanently deleted.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Deleted {
    /// The first candidate of the key.
    #[serde(flatten)]
    pub candidate: CandidateRef,
    /// Every version of the key deleted, sorted.
    pub deleted_version_ids: Vec<String>,
}

/// A version the purge or retention policy kept.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Retained {
    /// The version (`pointer` is its candidate's).
    pub candidate: CandidateRef,
    /// The policy's reason.
    pub reason: String,
}

/// What a purge is, in its report: exact versions deleted for good (the
/// seed's mode name).
pub const MODE: &str = "permanent-version-deletion";

/// What [`super::run::purge`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct PurgeReport {
    /// The store purged, as its caller named it (a URL or a configured
    /// store's name); set by the caller, which alone knows the name.
    pub remote: String,
    /// Keys whose versions were deleted (and verified gone).
    pub deleted: Vec<Deleted>,
    /// Candidates whose version was not in the store.
    pub already_absent: Vec<CandidateRef>,
    /// Versions under a registry that does not map them: kept, since
    /// nothing proves their bytes live elsewhere (`pointer` is the
    /// registry's key). Sorted.
    pub retained_unmapped: Vec<CandidateRef>,
    /// Mapped versions (their bytes proven to live at the registry's
    /// destination) that the purge or retention policy kept; each is also
    /// in `retained`, with the reason (`pointer` is the registry's key).
    /// Sorted.
    pub retained_mapped: Vec<CandidateRef>,
    /// Versions the purge policy or the retention policy kept.
    pub retained: Vec<Retained>,
    /// Archive source prefixes left with no version but their registry.
    pub cleaned_prefixes: Vec<String>,
}

impl PurgeReport {
    /// The report as JSON: the fields above and `"mode":` [`MODE`].
    pub fn to_json(&self) -> Value {
        let mut document = serde_json::to_value(self).unwrap_or(Value::Null);
        if let Value::Object(fields) = &mut document {
            fields.insert("mode".into(), Value::from(MODE));
        }
        document
    }

    /// One line per item: `deleted`, `absent`, `unmapped`, `retained`,
    /// `cleaned`.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for d in &self.deleted {
            lines.push(format!(
                "deleted   {} versions {}",
                d.candidate.object,
                d.deleted_version_ids.join(", ")
            ));
        }
        for c in &self.already_absent {
            lines.push(format!("absent    {}", c.name()));
        }
        for c in &self.retained_unmapped {
            lines.push(format!(
                "unmapped  {} (kept: {} does not map it)",
                c.name(),
                c.pointer
            ));
        }
        for r in &self.retained {
            lines.push(format!("retained  {}: {}", r.candidate.name(), r.reason));
        }
        for p in &self.cleaned_prefixes {
            lines.push(format!("cleaned   {p}/"));
        }
        lines
    }

    /// Appends `other`'s items.
    pub(crate) fn extend(&mut self, other: PurgeReport) {
        self.deleted.extend(other.deleted);
        self.already_absent.extend(other.already_absent);
        self.retained_unmapped.extend(other.retained_unmapped);
        self.retained_mapped.extend(other.retained_mapped);
        self.retained.extend(other.retained);
        self.cleaned_prefixes.extend(other.cleaned_prefixes);
    }
}

/// A purge that stopped: why, and what it had deleted (and found) before.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct PurgeFailure {
    /// Why it stopped.
    #[source]
    pub error: PurgeError,
    /// What was done before it stopped.
    pub partial: PurgeReport,
}

impl From<PurgeError> for PurgeFailure {
    fn from(error: PurgeError) -> Self {
        Self {
            error,
            partial: PurgeReport::default(),
        }
    }
}
