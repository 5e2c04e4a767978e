//! The purge world's driver: asks a purge plugin whether one exact version
//! may be permanently deleted (see [`custodian_core::purge`], which establishes the
//! facts and performs the deletions).

use std::sync::Arc;

use async_trait::async_trait;

use super::PolicyError;
use crate::bindings::policy::purge::PurgePre;
use crate::bindings::policy::purge::exports::custodian::policy::purge_rules as wit;
use crate::bindings::v0_1::Convert;
use crate::bindings::v0_1::policy::purge::PurgePre as PurgePreV0_1;
use crate::host::CallState;
use crate::{CallContext, CallError, Limits, LoadError, Plugin, Services, World};
use custodian_core::decisions::purge::{Candidate, Governance, Mapping, PurgeJudge, Verdict};

/// A loaded purge plugin. It is granted nothing: the host hands it the
/// facts.
pub struct PurgePolicy {
    plugin: Arc<Plugin>,
    pre: super::Linked<PurgePre<CallState>, PurgePreV0_1<CallState>>,
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
        let pre = super::link_either(&plugin, World::Purge, PurgePre::new, PurgePreV0_1::new)?;
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
        let candidate = wit::Candidate::from(candidate);
        let governance = wit::Governance::from(governance);
        let (plugin, call) = (&self.plugin, self.call.clone());
        let answer: Result<wit::Verdict, _> = call_export!(
            &self.pre,
            plugin,
            call,
            |i, s| i
                .custodian_policy_purge_rules()
                .call_judge(s, &candidate, &governance, now_ms),
            v0_1: i.custodian_policy_purge_rules().call_judge(
                s,
                &candidate.convert(),
                &governance.convert(),
                now_ms,
            )
        );
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

    fn plugin_hash(&self) -> Option<String> {
        Some(self.plugin.info().hash.clone())
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
