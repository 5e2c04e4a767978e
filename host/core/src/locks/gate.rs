//! What the locks let one request destroy: the piece lock its key carries
//! (which alone decides for a piece) and, on a store configured `locked`,
//! the retention plugin's verdict on the version it would destroy.
//!
//! A check reads before the request runs, so it is only as good as the
//! request is to what was read. Writes are made exact: where the caller's
//! guard was `Unconditional`, the write goes with `IfNoneMatchAny` when
//! nothing was there and `IfMatch` of the version checked when something
//! was, so a version that appears or changes in between fails the write
//! (and the store checks again) instead of being overwritten unchecked.
//! Deletes have no guard in the store contract; their residual races are
//! in the [`store`](super::store) module's documentation.

use std::sync::Arc;

use custodian_base::clock::Clock;
use custodian_kv::{Kv, Partition};
use custodian_object::{
    HeadOptions, MAX_LIST_PAGE, ObjectError, ObjectKey, ObjectStore, PutCondition,
};

use super::ask::{self, Unanswered};
use super::piece::{self, PieceLock};
use crate::audit;
use crate::decisions::log;
use crate::decisions::retention::{Item, RetentionOracle, Stage, Verdict};

/// Most pages of versions read to find the one an exact delete names on a
/// locked store: the number of versions under a key is the writers' to
/// grow, and each page is a backend call. A version older than the newest
/// `MAX_VERSION_PAGES × MAX_LIST_PAGE` of its key is refused (the host
/// cannot show it may go).
pub const MAX_VERSION_PAGES: u32 = 10;

/// The version a request would destroy, as retention is told of it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Destroyed {
    /// Which version (`None`: the current object of an unversioned store).
    version_id: Option<String>,
    /// When it was written, if the backend says.
    created_ms: Option<u64>,
    /// When it stopped being current, if it has.
    noncurrent_since_ms: Option<u64>,
}

/// The checks of one store.
pub(crate) struct Gate {
    /// The store's name, as piece rows name it.
    pub store: String,
    /// Where the lock rows are read.
    pub kv: Arc<dyn Kv>,
    /// What "now" is.
    pub clock: Arc<dyn Clock>,
    /// The retention plugin, asked by the host.
    pub retention: Arc<dyn RetentionOracle>,
    /// Whether every version of the store is under retention.
    pub locked: bool,
    /// The lock partition.
    pub partition: Partition,
}

impl Gate {
    /// Checks a write of `key` guarded by `condition` (`None`: not known
    /// yet, for an upload's early steps) against what it would replace;
    /// returns the guard to write with instead of an `Unconditional` one.
    ///
    /// # Errors
    /// [`ObjectError::Retained`] when a lock or retention keeps the current
    /// object; [`ObjectError::Unavailable`] when retention cannot answer;
    /// the store's or KV's error when what is there cannot be read.
    pub async fn write(
        &self,
        store: &dyn ObjectStore,
        key: &ObjectKey,
        condition: Option<&PutCondition>,
    ) -> Result<Option<PutCondition>, ObjectError> {
        if matches!(condition, Some(PutCondition::IfNoneMatchAny)) {
            return Ok(None);
        }
        let piece = piece::read(self.kv.as_ref(), &self.partition, &self.store, key).await?;
        if piece.is_none() && !self.locked {
            return Ok(None);
        }
        let unconditional = matches!(condition, Some(PutCondition::Unconditional));
        let current = match store.head_opts(key, HeadOptions::default()).await {
            Ok(meta) => meta,
            // A first write replaces nothing; made exact, it stays so.
            Err(ObjectError::NotFound(_)) => {
                return Ok(unconditional.then_some(PutCondition::IfNoneMatchAny));
            }
            Err(other) => return Err(other),
        };
        let now = self.clock.now_ms();
        if let Some(piece) = &piece {
            self.piece_may_go(piece, key, now)?;
        }
        if self.locked {
            let destroyed = Destroyed {
                version_id: current.version_id,
                created_ms: current.last_modified_ms,
                noncurrent_since_ms: None,
            };
            self.version_may_go(key, &destroyed, now).await?;
        }
        Ok(unconditional.then_some(PutCondition::IfMatch(current.etag)))
    }

    /// Checks a delete of `key` (of `version_id`, if given).
    ///
    /// # Errors
    /// As for [`Gate::write`].
    pub async fn delete(
        &self,
        store: &dyn ObjectStore,
        key: &ObjectKey,
        version_id: Option<&str>,
    ) -> Result<(), ObjectError> {
        let piece = piece::read(self.kv.as_ref(), &self.partition, &self.store, key).await?;
        if piece.is_none() && !self.locked {
            return Ok(());
        }
        let now = self.clock.now_ms();
        // A locked key's every version, and its current object, stay until
        // the lock releases, whether or not anything is there to delete.
        if let Some(piece) = &piece {
            self.piece_may_go(piece, key, now)?;
        }
        if !self.locked {
            return Ok(());
        }
        let destroyed = match version_id {
            None => match store.head_opts(key, HeadOptions::default()).await {
                Ok(meta) => Some(Destroyed {
                    version_id: meta.version_id,
                    created_ms: meta.last_modified_ms,
                    noncurrent_since_ms: None,
                }),
                Err(ObjectError::NotFound(_)) => None,
                Err(other) => return Err(other),
            },
            Some(version_id) => self.find_version(store, key, version_id, now).await?,
        };
        match destroyed {
            Some(destroyed) => self.version_may_go(key, &destroyed, now).await,
            None => Ok(()),
        }
    }

    /// The version `version_id` of `key` as retention is told of it;
    /// `None` when there is no such version or it is a delete marker (a
    /// marker holds no bytes, and removing one destroys nothing, as in S3
    /// Object Lock).
    async fn find_version(
        &self,
        store: &dyn ObjectStore,
        key: &ObjectKey,
        version_id: &str,
        now: u64,
    ) -> Result<Option<Destroyed>, ObjectError> {
        let mut cursor: Option<String> = None;
        // The newer neighbour's write time: when the next version (or
        // marker) made this one noncurrent. Versions list newest first.
        let mut newer: Option<Option<u64>> = None;
        for _ in 0..MAX_VERSION_PAGES {
            let page = store
                .list_key_versions(key, cursor.as_deref(), MAX_LIST_PAGE)
                .await?;
            for item in page.items {
                if item.version_id == version_id {
                    if item.is_delete_marker {
                        return Ok(None);
                    }
                    // A noncurrent version whose newer neighbour is unknown
                    // is told it became noncurrent now: retention then
                    // keeps it longest.
                    let noncurrent_since_ms =
                        (!item.is_current).then(|| newer.flatten().unwrap_or(now));
                    return Ok(Some(Destroyed {
                        version_id: Some(item.version_id),
                        created_ms: item.last_modified_ms,
                        noncurrent_since_ms,
                    }));
                }
                newer = Some(item.last_modified_ms);
            }
            match page.next {
                Some(next) => cursor = Some(next),
                None => return Ok(None),
            }
        }
        Err(ObjectError::Retained(
            format!(
                "version {version_id} of {key:?} in locked store {} is not among the newest {} \
                 versions the host reads to ask retention about it; nothing was changed",
                self.store,
                u64::from(MAX_VERSION_PAGES) * u64::from(MAX_LIST_PAGE)
            )
            .into(),
        ))
    }

    /// Whether a version of `key` under `piece`'s lock may go at `now`:
    /// the lock releases it. The lock alone decides: its retain-until *is*
    /// the retention plugin's answer, recorded when the request was filed
    /// (and grown only by an operator's explicit extension), so a later
    /// change of the retention settings or plugin governs new requests,
    /// never the evidence an earlier one already keeps.
    fn piece_may_go(
        &self,
        piece: &PieceLock,
        key: &ObjectKey,
        now: u64,
    ) -> Result<(), ObjectError> {
        match piece.keeps(&self.store, key, now) {
            Some(why) => Err(ObjectError::Retained(
                format!("{why}; nothing was changed").into(),
            )),
            None => Ok(()),
        }
    }

    /// Whether `destroyed` of `key` on this locked store may go at `now`.
    async fn version_may_go(
        &self,
        key: &ObjectKey,
        destroyed: &Destroyed,
        now: u64,
    ) -> Result<(), ObjectError> {
        // A backend that does not say when a version was written has it
        // treated as written now: retention then keeps it longest.
        let item = Item {
            created_ms: destroyed.created_ms.unwrap_or(now),
            noncurrent_since_ms: destroyed.noncurrent_since_ms,
            hold: false,
            stage: Stage::Retaining,
        };
        let what = || match &destroyed.version_id {
            Some(version) => format!(
                "version {version} of {key:?} in locked store {}",
                self.store
            ),
            None => format!("{key:?} in locked store {}", self.store),
        };
        let mut about = vec![format!("store:{}", self.store), format!("key:{key}")];
        if let Some(version) = &destroyed.version_id {
            about.push(format!("version:{version}"));
        }
        self.retention_allows(item, now, what, about).await
    }

    /// Logs a retention answer before a destructive operation: always,
    /// allow or deny, since it decides whether something is destroyed
    /// (see [`crate::decisions::log`]).
    async fn log_decision(
        &self,
        item: Item,
        now: u64,
        verdict: &Result<Verdict, Unanswered>,
        by: Option<&str>,
        about: Vec<String>,
    ) {
        let (outcome, output) = match verdict {
            Ok(Verdict::Allow) => ("allow", serde_json::json!({"may-delete": "allow"})),
            Ok(Verdict::Deny(reason)) => {
                ("deny", serde_json::json!({"may-delete": {"deny": reason}}))
            }
            Err(Unanswered(why)) => ("unanswered", serde_json::json!({"error": why})),
        };
        let decision = log::Decision {
            world: "retention",
            function: "assess",
            plugin: by,
            input: serde_json::json!({"item": item, "now-ms": now}),
            outcome,
            output,
            about,
        };
        if let Err(error) = audit::append(self.kv.as_ref(), &decision.record(now)).await {
            tracing::warn!(%error, store = %self.store, "cannot log a retention decision");
        }
    }

    async fn retention_allows(
        &self,
        item: Item,
        now: u64,
        what: impl Fn() -> String,
        about: Vec<String>,
    ) -> Result<(), ObjectError> {
        let (verdict, by) = ask::may_delete(&self.retention, item, now).await;
        self.log_decision(item, now, &verdict, by.as_deref(), about)
            .await;
        match verdict {
            Ok(Verdict::Allow) => Ok(()),
            Ok(Verdict::Deny(reason)) => Err(ObjectError::Retained(
                format!(
                    "{} is kept: the retention plugin says: {reason}; nothing was changed",
                    what()
                )
                .into(),
            )),
            Err(Unanswered(why)) => Err(ObjectError::Unavailable(
                format!(
                    "cannot ask the retention plugin whether {} may go ({why}); nothing was \
                     changed",
                    what()
                )
                .into(),
            )),
        }
    }
}
