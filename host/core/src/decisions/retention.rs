//! The retention vocabulary: what the host tells a retention policy about
//! an item, and what the policy answers. Other policies (the takedown's
//! `retention-oracle`) and the host's destructive paths ask through
//! [`RetentionOracle`]; the runtime routes it to a loaded plugin.

use super::PolicyError;

/// The deployer's configured retention for a class of items.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Kept this long after creation; must be positive.
    pub retention_ms: u64,
    /// Kept this long after a version stops being current.
    pub noncurrent_retention_ms: u64,
}

/// Where an item stands in its lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stage {
    /// Being worked on.
    Active,
    /// Kept until retention ends.
    Retaining,
    /// Being destroyed; no hold can be placed.
    Purging,
    /// Destroyed; re-swept for late writes.
    Purged,
}

/// What the host knows about one item (serialized as the WIT record is
/// written in JSON: `created-ms`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Item {
    /// Creation time, ms since the epoch.
    pub created_ms: u64,
    /// When it stopped being the current version, if it has.
    pub noncurrent_since_ms: Option<u64>,
    /// A legal hold is set.
    pub hold: bool,
    /// Lifecycle stage.
    pub stage: Stage,
}

/// An answer to "may I?".
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Yes.
    Allow,
    /// No, for this reason.
    Deny(String),
}

/// The policy's assessment of one item now.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Assessment {
    /// First instant retention no longer protects the item.
    pub retain_until_ms: u64,
    /// May it be deleted now?
    pub may_delete: Verdict,
    /// Should purging begin (or re-sweep) now?
    pub may_purge: Verdict,
    /// When to ask again.
    pub next_check_ms: u64,
}

/// Answers the retention questions other policies ask (the WIT
/// `retention-oracle`), with the deployer's settings filled in.
pub trait RetentionOracle: Send + Sync {
    /// The retention policy's assessment of `item` at `now_ms`.
    ///
    /// # Errors
    /// The policy's answer; a retention plugin that failed to answer (a
    /// trap, a limit) is [`PolicyError::Unavailable`].
    fn assess(&self, item: Item, now_ms: u64) -> Result<Assessment, PolicyError>;

    /// The retention policy's `set-hold`.
    ///
    /// # Errors
    /// As for [`RetentionOracle::assess`].
    fn set_hold(&self, item: Item, enabled: bool) -> Result<Item, PolicyError>;

    /// [`RetentionOracle::assess`], with the content hash of the plugin
    /// that answered (for the decision log), when the oracle knows it. An
    /// oracle that wraps another forwards this too, or the log loses the
    /// hash.
    fn assess_by(
        &self,
        item: Item,
        now_ms: u64,
    ) -> (Result<Assessment, PolicyError>, Option<String>) {
        (self.assess(item, now_ms), None)
    }
}
