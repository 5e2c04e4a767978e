//! What a job request carries, checked before any job starts: verify
//! requests (pin manifests sent inline, receipts) and purge requests (a
//! plan).

use serde::Deserialize;
use serde_json::Value;

use super::JobError;
use custodian_core::purge::plan::Plan;
use custodian_core::versions::VersionsError;
use custodian_core::versions::aliases::Aliases;
use custodian_core::versions::dvc::parse_dvc;
use custodian_core::versions::pins::{Pin, parse_json};

/// One manifest of a verify request, sent inline.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestText {
    /// Its name: the `manifest` reports give its pins, and (without
    /// `format`) its format, as the CLI tells them by file name.
    pub name: String,
    /// Its contents.
    pub text: String,
    /// `json` or `dvc`; default: `dvc` for a name ending `.dvc`, `json`
    /// for `.json`, else `json` when the text starts with `{`.
    #[serde(default)]
    pub format: Option<ManifestFormat>,
    /// For DVC: the directory its outputs' keys are under (the `.dvc`
    /// file's directory relative to the DVC repository root, as the CLI's
    /// `--root` computes it); default: none, the key is the `path` alone.
    #[serde(default)]
    pub key_dir: Option<String>,
}

/// A pin manifest's format (see [`custodian_core::versions::pins`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ManifestFormat {
    /// Custodian's JSON pins.
    Json,
    /// A DVC pointer file.
    Dvc,
}

/// The body of `POST /v1/jobs/verify`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyRequest {
    /// The server's name of the store.
    pub store: String,
    /// The pin manifests (at least one).
    pub pins: Vec<ManifestText>,
    /// The DVC remote whose `cloud:` entry to use, as `--dvc-remote`.
    #[serde(default)]
    pub dvc_remote: Option<String>,
    /// Archive task receipts, as `--receipts` (a receipt's `store` is the
    /// server's name of the store).
    #[serde(default)]
    pub receipts: Option<Vec<Value>>,
}

/// A verification's inputs, checked.
#[derive(Debug, Clone)]
pub struct VerifyInputs {
    pub(super) store: String,
    pub(super) pins: Vec<Pin>,
    pub(super) aliases: Aliases,
}

impl VerifyInputs {
    /// Parses every manifest and receipt of `request`, as the CLI does.
    ///
    /// # Errors
    /// 400 `invalid_argument` naming the manifest, pin or receipt at fault.
    pub fn parse(request: VerifyRequest) -> Result<Self, JobError> {
        if request.pins.is_empty() {
            return Err(JobError::InvalidArgument(String::from(
                "pins: give at least one manifest ({\"name\", \"text\"})",
            )));
        }
        let mut pins = Vec::new();
        for manifest in &request.pins {
            if manifest.name.is_empty() {
                return Err(JobError::InvalidArgument(String::from(
                    "pins: a manifest has an empty name",
                )));
            }
            let format = manifest.format.unwrap_or_else(|| {
                if manifest.name.ends_with(".dvc") {
                    ManifestFormat::Dvc
                } else if manifest.name.ends_with(".json")
                    || manifest.text.trim_start().starts_with('{')
                {
                    ManifestFormat::Json
                } else {
                    ManifestFormat::Dvc
                }
            });
            let parsed = match format {
                ManifestFormat::Json => {
                    if manifest.key_dir.is_some() {
                        return Err(JobError::InvalidArgument(format!(
                            "pins: {}: key_dir is for DVC manifests",
                            manifest.name
                        )));
                    }
                    parse_json(&manifest.text, &manifest.name)
                }
                ManifestFormat::Dvc => {
                    let mut key_dir = manifest.key_dir.clone().unwrap_or_default();
                    if !key_dir.is_empty() && !key_dir.ends_with('/') {
                        key_dir.push('/');
                    }
                    parse_dvc(
                        &manifest.text,
                        &manifest.name,
                        &key_dir,
                        request.dvc_remote.as_deref(),
                    )
                    .and_then(|pointers| match pointers.addressed.first() {
                        // Resolving them reads the store before the job
                        // starts; the CLI does it.
                        Some(output) => Err(VersionsError::Manifest {
                            path: manifest.name.clone(),
                            reason: format!(
                                "out {:?} is on a content-addressed remote (no cloud entry): \
                                 verify it with `custodian versions verify`",
                                output.path
                            ),
                        }),
                        None => Ok(pointers.pins),
                    })
                }
            };
            pins.extend(parsed.map_err(|e| JobError::InvalidArgument(e.to_string()))?);
        }
        let aliases = match &request.receipts {
            Some(receipts) => {
                Aliases::from_receipts(receipts, &request.store, "the request's receipts")
                    .map_err(|e| JobError::InvalidArgument(e.to_string()))?
            }
            None => Aliases::none(),
        };
        Ok(Self {
            store: request.store,
            pins,
            aliases,
        })
    }

    /// The server's name of the store.
    pub fn store(&self) -> &str {
        &self.store
    }

    /// The pins, in manifest order.
    pub fn pins(&self) -> &[Pin] {
        &self.pins
    }
}

/// The body of `POST /v1/jobs/purge`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PurgeRequest {
    /// The server's name of the store.
    pub store: String,
    /// The plan, as `purge delete --plan` reads it: the JSON document
    /// itself, or its text as a string.
    pub plan: Value,
}

/// A purge's inputs, checked.
#[derive(Debug, Clone)]
pub struct PurgeInputs {
    pub(super) store: String,
    pub(super) plan: Plan,
}

impl PurgeInputs {
    /// Validates `request`'s plan, as the CLI does.
    ///
    /// # Errors
    /// 400 `invalid_argument` saying what is wrong with the plan.
    pub fn parse(request: PurgeRequest) -> Result<Self, JobError> {
        let parsed = match &request.plan {
            Value::String(text) => Plan::parse(text),
            document => Plan::parse(&document.to_string()),
        };
        let plan = parsed.map_err(|e| JobError::InvalidArgument(e.to_string()))?;
        Ok(Self {
            store: request.store,
            plan,
        })
    }

    /// The server's name of the store.
    pub fn store(&self) -> &str {
        &self.store
    }
}
