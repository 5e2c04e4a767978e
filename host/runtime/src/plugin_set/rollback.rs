//! Rolling a swap back: each swap made on this host keeps the replaced
//! plugin's bytes (read from the shared set before the publish that may
//! collect them), so a host that finds the new plugin failing can restore
//! the old one through the same fenced swap path, audited as
//! `plugin/rollback` with the reason.
//!
//! Only the last swap of each world is kept (one component per world, a
//! few hundred KiB), and only on the host that made it: that host watches
//! the new plugin's probation. A rollback forgets the swap it undid, so
//! the restored plugin is never rolled back in turn.

use super::{Loaded, PluginSet, SwapError, SwapReport, World, member_of, shared};
use crate::signature::Signature;
use custodian_core::audit::{self, Record};

/// What a swap replaced, kept for its rollback.
#[derive(Clone)]
pub(super) struct Kept {
    from_hash: String,
    from_source: String,
    /// Its signature, which a restore presents again: under trusted keys
    /// an unsigned restore would be refused.
    from_signature: Option<Signature>,
    /// `None` when the bytes could not be read at the swap (logged): the
    /// swap stands, but cannot be rolled back automatically.
    bytes: Option<Vec<u8>>,
}

/// The last swap of a world made on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastSwap {
    /// The replaced plugin's hash.
    pub from: String,
    /// The plugin swapped in.
    pub to: String,
    /// When, ms since the epoch.
    pub at_ms: u64,
    /// Whether the replaced plugin's bytes are kept to restore it.
    pub can_roll_back: bool,
}

pub(super) struct Remembered {
    kept: Kept,
    to: String,
    at_ms: u64,
}

impl PluginSet {
    /// What `world`'s swap away from `previous` must keep to roll back.
    pub(super) async fn keep(&self, world: World, previous: &Loaded) -> Kept {
        let member = member_of(previous);
        let bytes = match shared::plugin_bytes(self.kv.as_ref(), world, &member).await {
            Ok(bytes) => Some(bytes),
            Err(error) => {
                tracing::warn!(
                    %world,
                    plugin = %member.hash,
                    "cannot keep the replaced plugin for a rollback: {error}"
                );
                None
            }
        };
        Kept {
            from_hash: member.hash,
            from_source: member.source,
            from_signature: member.signature,
            bytes,
        }
    }

    pub(super) fn remember_swap(&self, world: World, kept: Kept, to: &str) {
        let remembered = Remembered {
            kept,
            to: to.to_owned(),
            at_ms: self.clock.now_ms(),
        };
        self.last_swaps
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(world, remembered);
    }

    /// The last swap of `world` made on this host, if it is not rolled
    /// back.
    pub fn last_swap(&self, world: World) -> Option<LastSwap> {
        self.last_swaps
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&world)
            .map(|r| LastSwap {
                from: r.kept.from_hash.clone(),
                to: r.to.clone(),
                at_ms: r.at_ms,
                can_roll_back: r.kept.bytes.is_some(),
            })
    }

    /// Restores the plugin `world`'s last swap replaced, if `world` still
    /// runs `failing` (the plugin that swap put in), by `actor`, for
    /// `reason`: a swap through the fenced path, then a `plugin/rollback`
    /// record. `None` when there is nothing to roll back (no swap, or
    /// `world` runs another plugin since).
    ///
    /// # Errors
    /// As [`PluginSet::swap`]; [`SwapError::Refused`] when the replaced
    /// plugin's bytes were not kept.
    pub async fn roll_back(
        &self,
        world: World,
        failing: &str,
        reason: &str,
        actor: &str,
    ) -> Result<Option<SwapReport>, SwapError> {
        let kept = {
            let swaps = self
                .last_swaps
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match swaps.get(&world) {
                Some(r) if r.to == failing => r.kept.clone(),
                _ => return Ok(None),
            }
        };
        if self.current(world).plugin.info().hash != failing {
            return Ok(None);
        }
        let Some(bytes) = kept.bytes else {
            return Err(SwapError::Refused(format!(
                "the plugin {} replaced was not kept, so it cannot be restored",
                kept.from_hash
            )));
        };
        let report = self
            .swap(
                world,
                bytes,
                format!("rollback to {}", kept.from_source),
                kept.from_signature,
                actor,
            )
            .await?;
        // The restored plugin is not on probation.
        self.last_swaps
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&world);
        let record = Record {
            at_ms: self.clock.now_ms(),
            actor: actor.to_owned(),
            event: "plugin/rollback".into(),
            targets: vec![
                format!("world:{world}"),
                format!("from:{failing}"),
                format!("to:{}", kept.from_hash),
            ],
            detail: Some(reason.to_owned()),
        };
        audit::append(self.kv.as_ref(), &record).await?;
        tracing::warn!(%world, from = %failing, to = %kept.from_hash, "plugin rolled back: {reason}");
        Ok(Some(report))
    }
}
