//! The purge world's driver: asks a purge plugin whether one exact version
//! may be permanently deleted (see [`custodian_core::purge`], which establishes the
//! facts and performs the deletions).

use std::sync::Arc;

use async_trait::async_trait;

use super::PolicyError;
use crate::bindings::policy::purge::exports::custodian::policy::purge_rules as wit;
use crate::bindings::policy::purge::{Purge, PurgePre};
use crate::host::CallState;
use crate::{CallContext, CallError, Limits, LoadError, Plugin, Services, World};
use custodian_core::decisions::purge::{Candidate, Governance, Mapping, PurgeJudge, Verdict};

/// A loaded purge plugin. It is granted nothing: the host hands it the
/// facts.
pub struct PurgePolicy {
    plugin: Arc<Plugin>,
    pre: PurgePre<CallState>,
    call: Arc<CallContext>,
}

impl PurgePolicy {
    /// Wraps `plugin`, which must implement the purge world; its calls
    /// run with `limits` (`services` supplies only the clock and I/O
    /// runtime: nothing is granted).
    ///
    /// # Errors
    /// [`LoadError::WrongWorld`], or [`LoadError::Link`] if its exports do
    /// not have the purge world's types.
    pub fn new(
        plugin: Arc<Plugin>,
        services: Arc<Services>,
        limits: Limits,
    ) -> Result<Self, LoadError> {
        let pre = super::link(&plugin, World::Purge, PurgePre::new)?;
        let call = super::isolated_call(&plugin, services, limits);
        Ok(Self { plugin, pre, call })
    }

    /// The plugin.
    pub fn plugin(&self) -> &Plugin {
        &self.plugin
    }

    /// The plugin's verdict on `candidate` under `governance`.
    ///
    /// # Errors
    /// The outer error is the call failing (a trap, a limit); the inner one
    /// is the policy's own answer.
    pub fn verdict(
        &self,
        candidate: &Candidate,
        governance: &Governance,
        now_ms: u64,
    ) -> Result<Result<Verdict, PolicyError>, CallError> {
        let (mut store, instance): (wasmtime::Store<CallState>, Purge) =
            super::instantiate(&self.plugin, self.call.clone(), |store| {
                self.pre.instantiate(store)
            })?;
        let answer = instance
            .custodian_policy_purge_rules()
            .call_judge(
                &mut store,
                &wit::Candidate::from(candidate),
                &wit::Governance::from(governance),
                now_ms,
            )
            .map_err(|e| crate::classify(e, store.data()))?;
        Ok(answer
            .map_err(PolicyError::from)
            .map(|verdict| match verdict {
                wit::Verdict::Delete => Verdict::Delete,
                wit::Verdict::Retain(reason) => Verdict::Retain(reason),
            }))
    }
}

#[async_trait]
impl PurgeJudge for PurgePolicy {
    async fn judge(
        &self,
        candidate: &Candidate,
        governance: &Governance,
        now_ms: u64,
    ) -> Result<Verdict, PolicyError> {
        let answer = super::blocking(|| self.verdict(candidate, governance, now_ms));
        answer.map_err(|e| PolicyError::Unavailable(format!("the purge plugin failed: {e}")))?
    }
}

impl From<&Candidate> for wit::Candidate {
    fn from(c: &Candidate) -> Self {
        Self {
            key: c.key.clone(),
            version_id: c.version_id.clone(),
            etag: c.etag.clone(),
            size: c.size,
            is_delete_marker: c.is_delete_marker,
            last_modified_ms: c.last_modified_ms,
        }
    }
}

impl From<&Mapping> for wit::Mapping {
    fn from(m: &Mapping) -> Self {
        Self {
            source_key: m.source_key.clone(),
            source_version_id: m.source_version_id.clone(),
            source_etag: m.source_etag.clone(),
            destination_key: m.destination_key.clone(),
            destination_version_id: m.destination_version_id.clone(),
            destination_etag: m.destination_etag.clone(),
            size: m.size,
        }
    }
}

impl From<&Governance> for wit::Governance {
    fn from(g: &Governance) -> Self {
        match g {
            Governance::Unarchived => Self::Unarchived,
            Governance::Mapped(m) => Self::Mapped(m.into()),
            Governance::Unmapped(registry) => Self::Unmapped(registry.clone()),
        }
    }
}
