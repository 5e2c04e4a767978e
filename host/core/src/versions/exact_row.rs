//! The simplest hop policy: follow the one row whose source is exactly
//! the wanted version, if its size and source etag agree with the pin.
//! The archive plugin is the real policy; this one serves tests and
//! hosts without it.

use async_trait::async_trait;

use super::hops::{Hop, HopPolicy, RegistryRow, VersionRef};
use super::registry::row_name;
use super::target::unquote;
use crate::decisions::PolicyError;

/// Follows the row whose source is the wanted version.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExactRowPolicy;

#[async_trait]
impl HopPolicy for ExactRowPolicy {
    async fn next_hop(
        &self,
        wanted: &VersionRef,
        size: Option<u64>,
        etag: Option<&str>,
        rows: &[RegistryRow],
    ) -> Result<Hop, PolicyError> {
        let mut matching = rows.iter().filter(|row| &row.source == wanted);
        let Some(row) = matching.next() else {
            return Ok(Hop::Missing(format!(
                "the archive registry has no row for version {:?}",
                wanted.version_id
            )));
        };
        if matching.any(|other| other != row) {
            return Err(PolicyError::Corrupt(format!(
                "the archive registry has conflicting rows for {}",
                row_name(row)
            )));
        }
        if size.is_some_and(|size| size != row.size) {
            return Err(PolicyError::Corrupt(format!(
                "the archive row for {} says {} bytes, the pin {}",
                row_name(row),
                row.size,
                size.unwrap_or_default()
            )));
        }
        if let (Some(want), Some(recorded)) = (etag, row.source_etag.as_deref())
            && unquote(want) != unquote(recorded)
        {
            return Err(PolicyError::Corrupt(format!(
                "the archive row for {} has source etag {recorded}, the pin {want}",
                row_name(row)
            )));
        }
        Ok(Hop::Follow(row.clone()))
    }
}
