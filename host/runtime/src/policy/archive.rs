//! The archive world's driver: asks an archive plugin which registry row
//! moves a version that is missing from its key (see
//! [`custodian_core::versions::hops`], which bounds the walk).

use std::sync::Arc;

use async_trait::async_trait;

use super::PolicyError;
use crate::bindings::policy::archive::ArchivePre;
use crate::bindings::policy::archive::exports::custodian::policy::archive_map as wit;
use crate::bindings::v0_1::Convert;
use crate::bindings::v0_1::policy::archive::ArchivePre as ArchivePreV0_1;
use crate::host::CallState;
use crate::{CallContext, CallError, Limits, LoadError, Plugin, Services, World};
use custodian_core::versions::hops::{Hop, HopPolicy, RegistryRow, VersionRef};

/// A loaded archive plugin. It is granted nothing: the host reads the
/// registry and hands it the rows.
pub struct ArchivePolicy {
    plugin: Arc<Plugin>,
    pre: super::Linked<ArchivePre<CallState>, ArchivePreV0_1<CallState>>,
    call: Arc<CallContext>,
}

impl ArchivePolicy {
    /// Wraps `plugin`, which must implement the archive world; its calls
    /// run with `limits` (`services` supplies only the clock and I/O
    /// runtime: nothing is granted).
    ///
    /// # Errors
    /// [`LoadError::WrongWorld`], or [`LoadError::Link`] if its exports do
    /// not have the archive world's types.
    pub fn new(
        plugin: Arc<Plugin>,
        services: Arc<Services>,
        limits: Limits,
    ) -> Result<Self, LoadError> {
        let pre = super::link_either(
            &plugin,
            World::Archive,
            ArchivePre::new,
            ArchivePreV0_1::new,
        )?;
        let call = super::isolated_call(&plugin, services, limits);
        Ok(Self { plugin, pre, call })
    }

    /// The plugin.
    pub fn plugin(&self) -> &Plugin {
        &self.plugin
    }

    /// The plugin's choice among `rows` for `wanted`.
    ///
    /// # Errors
    /// The outer error is the call failing (a trap, a limit); the inner one
    /// is the policy's own answer.
    pub fn choose(
        &self,
        wanted: &VersionRef,
        size: Option<u64>,
        etag: Option<&str>,
        rows: &[RegistryRow],
    ) -> Result<Result<Hop, PolicyError>, CallError> {
        let wanted = wit::VersionRef::from(wanted);
        let rows: Vec<wit::RegistryRow> = rows.iter().map(wit::RegistryRow::from).collect();
        let (plugin, call) = (&self.plugin, self.call.clone());
        let answer: Result<wit::Hop, _> = call_export!(
            &self.pre,
            plugin,
            call,
            |i, s| i
                .custodian_policy_archive_map()
                .call_next_hop(s, &wanted, size, etag, &rows),
            v0_1: i.custodian_policy_archive_map().call_next_hop(
                s,
                &wanted.convert(),
                size,
                etag,
                &rows.convert(),
            )
        );
        Ok(answer.map_err(PolicyError::from).map(|hop| match hop {
            wit::Hop::Follow(row) => Hop::Follow(row.into()),
            wit::Hop::Missing(reason) => Hop::Missing(reason),
        }))
    }
}

#[async_trait]
impl HopPolicy for ArchivePolicy {
    async fn next_hop(
        &self,
        wanted: &VersionRef,
        size: Option<u64>,
        etag: Option<&str>,
        rows: &[RegistryRow],
    ) -> Result<Hop, PolicyError> {
        let answer = super::blocking(|| self.choose(wanted, size, etag, rows));
        answer.map_err(|e| PolicyError::Unavailable(format!("the archive plugin failed: {e}")))?
    }
}

impl From<&VersionRef> for wit::VersionRef {
    fn from(v: &VersionRef) -> Self {
        Self {
            key: v.key.clone(),
            version_id: v.version_id.clone(),
        }
    }
}

impl From<wit::VersionRef> for VersionRef {
    fn from(v: wit::VersionRef) -> Self {
        Self {
            key: v.key,
            version_id: v.version_id,
        }
    }
}

impl From<&RegistryRow> for wit::RegistryRow {
    fn from(r: &RegistryRow) -> Self {
        Self {
            source: (&r.source).into(),
            source_etag: r.source_etag.clone(),
            destination: (&r.destination).into(),
            destination_etag: r.destination_etag.clone(),
            size: r.size,
        }
    }
}

impl From<wit::RegistryRow> for RegistryRow {
    fn from(r: wit::RegistryRow) -> Self {
        Self {
            source: r.source.into(),
            source_etag: r.source_etag,
            destination: r.destination.into(),
            destination_etag: r.destination_etag,
            size: r.size,
        }
    }
}
