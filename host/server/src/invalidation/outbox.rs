//! The outbox as the host reads and changes it: pages of entries in
//! planning order with their delivery state (the feed), acknowledgements
//! that delete entries, and the guarded writes of a delivery — its claim,
//! its failure, and the delete that follows a 2xx.
//!
//! Every write that records or removes something about an entry is
//! guarded on the entry's row as read (`Equals`), so nothing is recorded
//! against, or deleted from, an entry that changed meanwhile; and the
//! delivery state's writes are guarded on the state row as read, so two
//! hosts recording at once cannot lose one another's attempt. Whatever
//! removes an entry — a delivery, an acknowledgement — is audited in the
//! batch that removes it (`invalidation/delivered`,
//! `invalidation/ack`), each entry named by its idempotency key.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Entry, PARTITION, STATE_PARTITION};
use custodian_base::error::ErrorKind;
use custodian_contract::invalidation::{ENTRY_TAG, HEAD_BYTES, idempotency_key, valid_repository};
use custodian_core::audit::{self, Record};
use custodian_kv::{
    Batch, Kv, KvError, MAX_KEY_BYTES, MAX_PAGE_ENTRIES, Outcome, Partition, Precondition, Write,
};

/// Most entries one page lists, or one acknowledgement names: a page is
/// one KV scan and one read of as many state rows, held in memory.
pub const MAX_PAGE: u32 = MAX_PAGE_ENTRIES;

/// Longest last error kept with an entry, in bytes: it is shown in every
/// page of the feed, so a receiver's long answer must not bloat it.
pub const MAX_ERROR_BYTES: usize = 512;

/// Entries deleted per batch of an acknowledgement: each is one guard
/// and two deletes (the entry and its state), 120 operations, plus the
/// audit record's guard and write: 122, inside the KV's 128 per batch
/// (etcd's limit); and 40 targets, inside an audit record's 64.
const ACK_CHUNK: usize = 40;

/// Times an acknowledgement re-reads a chunk whose entries changed under
/// it: an entry only ever disappears, so the second read settles it; the
/// rest is room for a churning outbox.
const ACK_ATTEMPTS: u32 = 4;

/// Format byte of a stored [`State`], so the encoding can change.
const STATE_FORMAT: u8 = 1;

/// Why an outbox call failed.
#[derive(Debug, thiserror::Error)]
pub enum OutboxError {
    /// The caller's input is not usable: an id or cursor that names no
    /// entry's key, or too many ids.
    #[error("{0}")]
    InvalidArgument(String),
    /// The KV failed.
    #[error(transparent)]
    Kv(#[from] KvError),
}

impl OutboxError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::InvalidArgument(_) => ErrorKind::InvalidArgument,
            Self::Kv(e) => e.kind(),
        }
    }
}

/// Where an entry's delivery stands.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct State {
    /// Failed deliveries so far.
    pub attempts: u32,
    /// Not to be attempted before this, ms since the epoch.
    pub next_attempt_ms: u64,
    /// Why the last delivery failed.
    pub last_error: Option<String>,
    /// A host delivering it right now.
    pub claim: Option<Claim>,
}

/// A host's claim on an entry while it delivers it, so hosts sharing a
/// KV rarely deliver one entry at the same time. Correctness does not
/// rest on it: an entry is deleted only after a 2xx, whoever posted it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claim {
    /// The delivering host's node name.
    pub holder: String,
    /// When the claim lapses, ms since the epoch.
    pub until_ms: u64,
}

impl State {
    fn encode(&self) -> Vec<u8> {
        let mut out = vec![STATE_FORMAT];
        out.extend(serde_json::to_vec(self).expect("delivery states serialize"));
        out
    }

    /// The state `bytes` hold. A row that does not decode (the host's own
    /// rows, so a bug or damage) reads as a first attempt that failed for
    /// that reason: the entry stays deliverable, the problem is visible in
    /// the feed, and the next write replaces the row.
    fn decode(bytes: &[u8]) -> Self {
        let decoded = match bytes.split_first() {
            Some((&STATE_FORMAT, json)) => serde_json::from_slice(json).map_err(|e| e.to_string()),
            _ => Err("an unknown format".to_owned()),
        };
        decoded.unwrap_or_else(|reason| Self {
            last_error: Some(format!("the delivery state row does not decode: {reason}")),
            ..Self::default()
        })
    }
}

/// One outbox row as read, with its delivery state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The entry's key: its id, in hex, on the feed.
    pub key: Vec<u8>,
    /// The entry's value as read, which guards every write about it.
    pub value: Vec<u8>,
    /// The entry, or why the row does not decode (a row the takedown
    /// plugin wrote wrongly: never delivered, listed so it can be
    /// acknowledged away).
    pub entry: Result<Entry, String>,
    /// Its delivery state; the default before its first attempt.
    pub state: State,
    /// The state row as read (`None`: absent), which guards its rewrite.
    state_bytes: Option<Vec<u8>>,
}

impl Row {
    fn new(key: Vec<u8>, value: Vec<u8>, state_bytes: Option<Vec<u8>>) -> Self {
        let entry = Entry::decode(&key, &value).map_err(|e| e.to_string());
        let state = state_bytes
            .as_deref()
            .map(State::decode)
            .unwrap_or_default();
        Self {
            key,
            value,
            entry,
            state,
            state_bytes,
        }
    }

    /// The entry's id: its key in hex.
    pub fn id(&self) -> String {
        hex::encode(&self.key)
    }

    /// When `holder` may next attempt the entry: after its back-off, and
    /// after a live claim of another host's.
    pub fn due_ms(&self, holder: &str) -> u64 {
        let claimed = self
            .state
            .claim
            .as_ref()
            .filter(|claim| claim.holder != holder)
            .map_or(0, |claim| claim.until_ms);
        self.state.next_attempt_ms.max(claimed)
    }

    /// The feed's view of the row: `{"id", "idempotency_key", "request",
    /// "repository", "objects", "requested_ms", "attempts",
    /// "next_attempt_ms", "last_error"}`, or `{"id", "corrupt"}` for a row
    /// that does not decode.
    pub fn to_json(&self) -> Value {
        let entry = match &self.entry {
            Ok(entry) => entry,
            Err(reason) => return json!({"id": self.id(), "corrupt": reason}),
        };
        json!({
            "id": self.id(),
            "idempotency_key": entry.idempotency_key(),
            "request": hex::encode(entry.request),
            "repository": entry.repository,
            "objects": entry.objects.iter().map(hex::encode).collect::<Vec<_>>(),
            "requested_ms": entry.requested_ms,
            "attempts": self.state.attempts,
            "next_attempt_ms": (self.state.attempts > 0).then_some(self.state.next_attempt_ms),
            "last_error": self.state.last_error,
        })
    }

    fn entry_guard(&self) -> Precondition {
        Precondition::Equals {
            partition: outbox_partition(),
            key: self.key.clone(),
            value: self.value.clone(),
        }
    }

    fn state_guard(&self) -> Precondition {
        let (partition, key) = (state_partition(), self.key.clone());
        match &self.state_bytes {
            Some(value) => Precondition::Equals {
                partition,
                key,
                value: value.clone(),
            },
            None => Precondition::Absent { partition, key },
        }
    }

    /// The two deletes that remove the entry and its delivery state.
    fn deletes(key: &[u8]) -> [Write; 2] {
        [
            Write::Delete {
                partition: outbox_partition(),
                key: key.to_vec(),
            },
            Write::Delete {
                partition: state_partition(),
                key: key.to_vec(),
            },
        ]
    }
}

fn outbox_partition() -> Partition {
    Partition::new(PARTITION).expect("the outbox partition has a valid name")
}

fn state_partition() -> Partition {
    Partition::new(STATE_PARTITION).expect("the delivery state partition has a valid name")
}

/// The key range of entries: every key that starts with the entry tag.
const ENTRIES: (&[u8], &[u8]) = (&[ENTRY_TAG], &[ENTRY_TAG + 1]);

/// Parses an entry's id (its key in hex, either case).
///
/// # Errors
/// [`OutboxError::InvalidArgument`] for text that is not hex or not the
/// shape of an entry's key (the tag, the planning time, the request and a
/// repository).
pub fn parse_id(text: &str) -> Result<Vec<u8>, OutboxError> {
    let invalid = || {
        OutboxError::InvalidArgument(format!(
            "{:?} is not an invalidation id (the hex of an outbox entry's key)",
            text.get(..80).unwrap_or(text)
        ))
    };
    // Bounded before decoding: a key is at most MAX_KEY_BYTES.
    if text.len() > 2 * MAX_KEY_BYTES {
        return Err(invalid());
    }
    let key = hex::decode(text).map_err(|_| invalid())?;
    if !is_entry_key(&key) {
        return Err(invalid());
    }
    Ok(key)
}

/// Whether `key` has the shape of an entry's key: the tag, the fixed
/// head, a repository, within the KV's key bound.
fn is_entry_key(key: &[u8]) -> bool {
    key.len() > HEAD_BYTES && key.len() <= MAX_KEY_BYTES && key[0] == ENTRY_TAG
}

/// How the audit log names the entry at `key`: `invalidation:` and its
/// idempotency key (the request and the repository, both in the key), or
/// `invalidation-id:` and the start of its id for a key that names no
/// repository.
pub fn audit_target(key: &[u8]) -> String {
    let repository = key
        .get(HEAD_BYTES..)
        .and_then(|bytes| std::str::from_utf8(bytes).ok())
        .filter(|repository| valid_repository(repository));
    match (key.get(1 + 8..HEAD_BYTES), repository) {
        (Some(request), Some(repository)) => {
            let mut id = [0u8; 32];
            id.copy_from_slice(request);
            format!("invalidation:{}", idempotency_key(&id, repository))
        }
        _ => {
            let id = hex::encode(key);
            // Within an audit target's bound whatever the key.
            let cut = id.len().min(audit::MAX_TARGET_BYTES - 16);
            format!("invalidation-id:{}", &id[..cut])
        }
    }
}

/// A page of the feed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Page {
    /// Rows in key (planning) order.
    pub rows: Vec<Row>,
    /// Where the next page starts (strictly after it); `None` at the end.
    pub next: Option<Vec<u8>>,
}

/// Up to `limit` (1..=[`MAX_PAGE`]) entries in planning order, strictly
/// after the entry key `after` if given, each with its delivery state.
///
/// # Errors
/// [`OutboxError::InvalidArgument`] for a limit out of range or a cursor
/// that is not an entry's key; [`OutboxError::Kv`].
pub async fn page(kv: &dyn Kv, after: Option<&[u8]>, limit: u32) -> Result<Page, OutboxError> {
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(OutboxError::InvalidArgument(format!(
            "limit must be between 1 and {MAX_PAGE}"
        )));
    }
    if after.is_some_and(|key| key.first() != Some(&ENTRY_TAG) || key.len() > MAX_KEY_BYTES) {
        return Err(OutboxError::InvalidArgument(
            "the cursor is not a cursor of the invalidation feed".into(),
        ));
    }
    let scanned = kv
        .scan(
            &outbox_partition(),
            ENTRIES.0,
            Some(ENTRIES.1),
            after,
            limit,
        )
        .await?;
    let keys: Vec<Vec<u8>> = scanned.entries.iter().map(|(k, _)| k.clone()).collect();
    let states = if keys.is_empty() {
        Vec::new()
    } else {
        kv.get_many(&state_partition(), &keys).await?
    };
    let rows = scanned
        .entries
        .into_iter()
        .zip(states)
        .map(|((key, value), state)| Row::new(key, value, state))
        .collect();
    Ok(Page {
        rows,
        next: scanned.next,
    })
}

/// What an acknowledgement did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Acked {
    /// Entries this call deleted, by key, ascending.
    pub acknowledged: Vec<Vec<u8>>,
    /// Keys not in the outbox (never there, or delivered or acknowledged
    /// already), ascending.
    pub unknown: Vec<Vec<u8>>,
}

/// Deletes the entries `keys` name (at most [`MAX_PAGE`]; duplicates count
/// once) with their delivery state, audited as `actor`'s
/// `invalidation/ack` at `now_ms`; keys not in the outbox are reported,
/// not refused.
///
/// # Errors
/// [`OutboxError::InvalidArgument`] for too many keys or one that is not
/// an entry's key (nothing is deleted then); [`OutboxError::Kv`], when
/// some chunks may have been deleted already (acknowledging again is
/// safe).
pub async fn ack(
    kv: &dyn Kv,
    keys: &[Vec<u8>],
    actor: &str,
    now_ms: u64,
) -> Result<Acked, OutboxError> {
    if keys.len() > MAX_PAGE as usize {
        return Err(OutboxError::InvalidArgument(format!(
            "{} ids is more than the {MAX_PAGE} one acknowledgement may name",
            keys.len()
        )));
    }
    if let Some(key) = keys.iter().find(|key| !is_entry_key(key)) {
        return Err(OutboxError::InvalidArgument(format!(
            "{} is not an invalidation id (the hex of an outbox entry's key)",
            hex::encode(&key[..key.len().min(40)])
        )));
    }
    let keys: Vec<Vec<u8>> = keys
        .iter()
        .cloned()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut acked = Acked::default();
    for chunk in keys.chunks(ACK_CHUNK) {
        ack_chunk(kv, chunk.to_vec(), actor, now_ms, &mut acked).await?;
    }
    acked.acknowledged.sort();
    acked.unknown.sort();
    Ok(acked)
}

/// Deletes the entries of `keys` that exist, with the audit record
/// naming them, in one batch guarded on each as read; re-reads when one
/// changed meanwhile.
async fn ack_chunk(
    kv: &dyn Kv,
    mut keys: Vec<Vec<u8>>,
    actor: &str,
    now_ms: u64,
    acked: &mut Acked,
) -> Result<(), OutboxError> {
    let partition = outbox_partition();
    for _ in 0..ACK_ATTEMPTS {
        let values = kv.get_many(&partition, &keys).await?;
        let mut batch = Batch::default();
        let mut present = Vec::new();
        for (key, value) in keys.into_iter().zip(values) {
            let Some(value) = value else {
                acked.unknown.push(key);
                continue;
            };
            batch.preconditions.push(Precondition::Equals {
                partition: partition.clone(),
                key: key.clone(),
                value,
            });
            batch.writes.extend(Row::deletes(&key));
            present.push(key);
        }
        if present.is_empty() {
            return Ok(());
        }
        let record = Record {
            at_ms: now_ms,
            actor: actor.to_owned(),
            event: "invalidation/ack".into(),
            targets: present.iter().map(|key| audit_target(key)).collect(),
            detail: Some(format!(
                "{} invalidations acknowledged by a pull consumer",
                present.len()
            )),
        };
        let (guard, write) = audit::plan(&record, &present.concat(), 0)?;
        batch.preconditions.push(guard);
        batch.writes.push(write);
        match kv.apply(&batch).await? {
            Outcome::Committed => {
                acked.acknowledged.extend(present);
                return Ok(());
            }
            // An entry went (delivered, or acknowledged by another
            // consumer) between the read and the commit: read again.
            Outcome::PreconditionFailed { .. } | Outcome::DeadlinePassed => keys = present,
        }
    }
    Err(KvError::Unavailable(
        "the outbox kept changing under an acknowledgement; acknowledge again".into(),
    )
    .into())
}

/// Claims `row` for `holder` until `until_ms`, guarded on the entry and
/// its state as read; the row as claimed, or `None` when either changed
/// meanwhile (another host got there first, or the entry is gone).
///
/// # Errors
/// The KV's.
pub async fn claim(
    kv: &dyn Kv,
    row: &Row,
    holder: &str,
    until_ms: u64,
) -> Result<Option<Row>, KvError> {
    let state = State {
        claim: Some(Claim {
            holder: holder.to_owned(),
            until_ms,
        }),
        ..row.state.clone()
    };
    let bytes = state.encode();
    let batch = Batch {
        preconditions: vec![row.entry_guard(), row.state_guard()],
        writes: vec![Write::Put {
            partition: state_partition(),
            key: row.key.clone(),
            value: bytes.clone(),
        }],
    };
    Ok(match kv.apply(&batch).await? {
        Outcome::Committed => Some(Row {
            state,
            state_bytes: Some(bytes),
            ..row.clone()
        }),
        Outcome::PreconditionFailed { .. } | Outcome::DeadlinePassed => None,
    })
}

/// After a 2xx: deletes the entry and its state, guarded on the entry as
/// read, so only the entry that was delivered goes, audited as `actor`'s
/// `invalidation/delivered` at `now_ms` with `detail`. `false` when it
/// had already gone (acknowledged, or delivered by another host) or
/// changed: nothing is deleted then.
///
/// # Errors
/// The KV's; the entry then stays, and is delivered again.
pub async fn delivered(
    kv: &dyn Kv,
    row: &Row,
    actor: &str,
    now_ms: u64,
    detail: String,
) -> Result<bool, KvError> {
    let record = Record {
        at_ms: now_ms,
        actor: actor.to_owned(),
        event: "invalidation/delivered".into(),
        targets: vec![audit_target(&row.key)],
        detail: Some(truncated(&detail, audit::MAX_DETAIL_BYTES)),
    };
    let (guard, write) = audit::plan(&record, &row.key, 0)?;
    let mut writes: Vec<Write> = Row::deletes(&row.key).into();
    writes.push(write);
    let batch = Batch {
        preconditions: vec![row.entry_guard(), guard],
        writes,
    };
    Ok(matches!(kv.apply(&batch).await?, Outcome::Committed))
}

/// After a failed delivery: records one more attempt, its error (cut to
/// [`MAX_ERROR_BYTES`]) and the next attempt's time, releasing any claim;
/// guarded on the entry and its state as read. `false` when either
/// changed meanwhile (nothing recorded).
///
/// # Errors
/// The KV's.
pub async fn failed(
    kv: &dyn Kv,
    row: &Row,
    error: &str,
    next_attempt_ms: u64,
) -> Result<bool, KvError> {
    let state = State {
        attempts: row.state.attempts.saturating_add(1),
        next_attempt_ms,
        last_error: Some(truncated(error, MAX_ERROR_BYTES)),
        claim: None,
    };
    let batch = Batch {
        preconditions: vec![row.entry_guard(), row.state_guard()],
        writes: vec![Write::Put {
            partition: state_partition(),
            key: row.key.clone(),
            value: state.encode(),
        }],
    };
    Ok(matches!(kv.apply(&batch).await?, Outcome::Committed))
}

/// `text` cut to at most `max` bytes, on a character boundary.
fn truncated(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use custodian_base::clock::FixedClock;
    use custodian_kv::memory::MemoryKv;

    fn kv() -> MemoryKv {
        MemoryKv::new(Arc::new(FixedClock::new(1_000)))
    }

    fn entry(ms: u64, repository: &str) -> Entry {
        Entry {
            requested_ms: ms,
            request: [7; 32],
            repository: repository.into(),
            objects: vec![[1; 32]],
        }
    }

    async fn plan(kv: &dyn Kv, entry: &Entry) {
        put(kv, PARTITION, entry.key(), entry.value()).await;
    }

    async fn put(kv: &dyn Kv, partition: &str, key: Vec<u8>, value: Vec<u8>) {
        let batch = Batch {
            preconditions: vec![],
            writes: vec![Write::Put {
                partition: Partition::new(partition).unwrap(),
                key,
                value,
            }],
        };
        assert_eq!(kv.apply(&batch).await.unwrap(), Outcome::Committed);
    }

    async fn state_row(kv: &dyn Kv, key: &[u8]) -> Option<Vec<u8>> {
        kv.get(&state_partition(), key).await.unwrap()
    }

    #[tokio::test]
    async fn the_feed_pages_in_planning_order_with_a_cursor() {
        let kv = kv();
        for (ms, repo) in [(30, "c/c"), (10, "z/z"), (20, "a/a")] {
            plan(&kv, &entry(ms, repo)).await;
        }
        let first = page(&kv, None, 2).await.unwrap();
        let repos: Vec<String> = first
            .rows
            .iter()
            .map(|r| r.entry.as_ref().unwrap().repository.clone())
            .collect();
        assert_eq!(repos, ["z/z", "a/a"]);
        let second = page(&kv, first.next.as_deref(), 2).await.unwrap();
        assert_eq!(second.rows.len(), 1);
        assert_eq!(second.rows[0].entry.as_ref().unwrap().repository, "c/c");
        assert_eq!(second.next, None);
        let json = first.rows[0].to_json();
        assert_eq!(
            json["idempotency_key"],
            format!("takedown:{}:z/z", "07".repeat(32))
        );
        assert_eq!(json["requested_ms"], 10);
        assert_eq!(json["attempts"], 0);
        assert_eq!(json["last_error"], Value::Null);
        assert_eq!(json["objects"][0], "01".repeat(32));
    }

    #[tokio::test]
    async fn a_limit_out_of_range_or_a_foreign_cursor_is_refused() {
        let kv = kv();
        for limit in [0, MAX_PAGE + 1] {
            assert!(matches!(
                page(&kv, None, limit).await,
                Err(OutboxError::InvalidArgument(_))
            ));
        }
        assert!(matches!(
            page(&kv, Some(b"x"), 10).await,
            Err(OutboxError::InvalidArgument(_))
        ));
    }

    #[tokio::test]
    async fn a_row_that_does_not_decode_is_listed_as_corrupt_and_can_be_acknowledged() {
        let kv = kv();
        let good = entry(10, "a/a");
        plan(&kv, &good).await;
        let mut bad_key = entry(20, "b/b").key();
        bad_key.truncate(HEAD_BYTES);
        bad_key.extend_from_slice(b"no-slash");
        put(&kv, PARTITION, bad_key.clone(), vec![0, 0]).await;
        let listed = page(&kv, None, 10).await.unwrap();
        assert!(listed.rows[0].entry.is_ok());
        let corrupt = listed.rows[1].to_json();
        assert!(
            corrupt["corrupt"]
                .as_str()
                .unwrap()
                .contains("namespace/name")
        );
        assert_eq!(corrupt["id"], hex::encode(&bad_key));
        let acked = ack(&kv, &[bad_key.clone()], "principal:test", 1_000)
            .await
            .unwrap();
        assert_eq!(acked.acknowledged, [bad_key]);
        assert_eq!(page(&kv, None, 10).await.unwrap().rows.len(), 1);
    }

    #[tokio::test]
    async fn an_acknowledgement_deletes_known_entries_with_their_state_and_reports_unknown_ones() {
        let kv = kv();
        let (a, b) = (entry(10, "a/a"), entry(20, "b/b"));
        plan(&kv, &a).await;
        plan(&kv, &b).await;
        let row = page(&kv, None, 1).await.unwrap().rows.remove(0);
        assert!(failed(&kv, &row, "HTTP 503", 5_000).await.unwrap());
        let ghost = entry(30, "g/g").key();
        let acked = ack(
            &kv,
            &[a.key(), ghost.clone(), a.key()],
            "principal:test",
            1_000,
        )
        .await
        .unwrap();
        assert_eq!(acked.acknowledged, [a.key()]);
        assert_eq!(acked.unknown, [ghost]);
        assert_eq!(state_row(&kv, &a.key()).await, None);
        let (records, _) = audit::read(&kv, 0, None, 10).await.unwrap();
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].event, "invalidation/ack");
        assert_eq!(records[0].actor, "principal:test");
        assert_eq!(
            records[0].targets,
            [format!("invalidation:{}", a.idempotency_key())]
        );
        let left = page(&kv, None, 10).await.unwrap();
        assert_eq!(left.rows.len(), 1);
        assert_eq!(left.rows[0].key, b.key());
    }

    #[tokio::test]
    async fn malformed_or_too_many_ids_are_refused_before_anything_is_deleted() {
        let kv = kv();
        let a = entry(10, "a/a");
        plan(&kv, &a).await;
        for text in ["zz", "", "65", &"0".repeat(3000)] {
            assert!(parse_id(text).is_err(), "{text}");
        }
        assert_eq!(parse_id(&hex::encode(a.key())).unwrap(), a.key());
        assert_eq!(
            parse_id(&hex::encode(a.key()).to_uppercase()).unwrap(),
            a.key()
        );
        let refused = ack(&kv, &[a.key(), b"e".to_vec()], "principal:test", 1_000).await;
        assert!(matches!(refused, Err(OutboxError::InvalidArgument(_))));
        let too_many = vec![a.key(); MAX_PAGE as usize + 1];
        assert!(matches!(
            ack(&kv, &too_many, "principal:test", 1_000).await,
            Err(OutboxError::InvalidArgument(_))
        ));
        assert_eq!(page(&kv, None, 10).await.unwrap().rows.len(), 1);
    }

    #[tokio::test]
    async fn an_acknowledgement_of_more_entries_than_one_batch_holds_deletes_them_all() {
        let kv = kv();
        let entries: Vec<Entry> = (0..(ACK_CHUNK as u64 * 2 + 5))
            .map(|i| entry(i, &format!("ns/r{i}")))
            .collect();
        for e in &entries {
            plan(&kv, e).await;
        }
        let keys: Vec<Vec<u8>> = entries.iter().map(Entry::key).collect();
        let acked = ack(&kv, &keys, "principal:test", 1_000).await.unwrap();
        assert_eq!(acked.acknowledged.len(), entries.len());
        assert!(page(&kv, None, 10).await.unwrap().rows.is_empty());
    }

    #[tokio::test]
    async fn failures_are_counted_guarded_on_the_state_as_read_and_errors_are_cut() {
        let kv = kv();
        let a = entry(10, "a/a");
        plan(&kv, &a).await;
        let row = page(&kv, None, 1).await.unwrap().rows.remove(0);
        let long = "é".repeat(MAX_ERROR_BYTES);
        assert!(failed(&kv, &row, &long, 2_000).await.unwrap());
        // The same row as read before: its state changed since, so a second
        // record from it (another host's, say) is refused.
        assert!(!failed(&kv, &row, "late", 3_000).await.unwrap());
        let row = page(&kv, None, 1).await.unwrap().rows.remove(0);
        assert_eq!(row.state.attempts, 1);
        assert_eq!(row.state.next_attempt_ms, 2_000);
        let error = row.state.last_error.clone().unwrap();
        assert!(error.len() <= MAX_ERROR_BYTES && error.starts_with('é'));
        assert_eq!(row.to_json()["next_attempt_ms"], 2_000);
    }

    #[tokio::test]
    async fn the_delete_after_a_delivery_takes_only_the_entry_as_it_was_read() {
        let kv = kv();
        let a = entry(10, "a/a");
        plan(&kv, &a).await;
        let row = page(&kv, None, 1).await.unwrap().rows.remove(0);
        // Rewritten meanwhile (objects differ): not the entry delivered.
        let mut changed = a.clone();
        changed.objects = vec![[2; 32]];
        plan(&kv, &changed).await;
        assert!(
            !delivered(&kv, &row, "host:test", 1_000, "HTTP 200".into())
                .await
                .unwrap()
        );
        assert_eq!(page(&kv, None, 1).await.unwrap().rows.len(), 1);
        let row = page(&kv, None, 1).await.unwrap().rows.remove(0);
        assert!(failed(&kv, &row, "HTTP 500", 2_000).await.unwrap());
        let row = page(&kv, None, 1).await.unwrap().rows.remove(0);
        assert!(
            delivered(&kv, &row, "host:test", 1_000, "HTTP 200".into())
                .await
                .unwrap()
        );
        assert!(page(&kv, None, 1).await.unwrap().rows.is_empty());
        let (records, _) = audit::read(&kv, 0, None, 10).await.unwrap();
        assert_eq!(records.len(), 1, "one delivery, one record");
        assert_eq!(records[0].event, "invalidation/delivered");
        assert_eq!(records[0].detail.as_deref(), Some("HTTP 200"));
        assert_eq!(state_row(&kv, &a.key()).await, None);
        // Gone already: nothing to delete, no error.
        assert!(
            !delivered(&kv, &row, "host:test", 1_000, "HTTP 200".into())
                .await
                .unwrap()
        );
    }

    #[tokio::test]
    async fn a_claim_keeps_other_holders_away_until_it_lapses_and_one_claim_wins() {
        let kv = kv();
        let a = entry(10, "a/a");
        plan(&kv, &a).await;
        let row = page(&kv, None, 1).await.unwrap().rows.remove(0);
        let claimed = claim(&kv, &row, "host-1", 9_000).await.unwrap().unwrap();
        assert!(claim(&kv, &row, "host-2", 9_000).await.unwrap().is_none());
        assert_eq!(claimed.due_ms("host-1"), 0);
        let seen = page(&kv, None, 1).await.unwrap().rows.remove(0);
        assert_eq!(seen.due_ms("host-2"), 9_000);
        assert_eq!(seen.due_ms("host-1"), 0);
        // The failure releases the claim.
        assert!(failed(&kv, &claimed, "timed out", 1_500).await.unwrap());
        let seen = page(&kv, None, 1).await.unwrap().rows.remove(0);
        assert_eq!(seen.state.claim, None);
        assert_eq!(seen.due_ms("host-2"), 1_500);
    }

    #[test]
    fn the_audit_names_an_entry_by_its_idempotency_key_or_else_by_its_id() {
        let a = entry(10, "a/a");
        assert_eq!(
            audit_target(&a.key()),
            format!("invalidation:{}", a.idempotency_key())
        );
        let mut odd = a.key();
        odd.truncate(HEAD_BYTES);
        odd.extend(std::iter::repeat_n(b'x', 600));
        let target = audit_target(&odd);
        assert!(target.starts_with("invalidation-id:65"), "{target}");
        assert!(target.len() <= audit::MAX_TARGET_BYTES);
    }

    #[tokio::test]
    async fn a_state_row_that_does_not_decode_reads_as_a_failure_saying_so_and_is_replaced() {
        let kv = kv();
        let a = entry(10, "a/a");
        plan(&kv, &a).await;
        put(&kv, STATE_PARTITION, a.key(), b"garbage".to_vec()).await;
        let row = page(&kv, None, 1).await.unwrap().rows.remove(0);
        assert_eq!(row.state.attempts, 0);
        assert!(
            row.state
                .last_error
                .as_deref()
                .unwrap()
                .contains("does not decode")
        );
        assert!(failed(&kv, &row, "HTTP 502", 2_000).await.unwrap());
        let row = page(&kv, None, 1).await.unwrap().rows.remove(0);
        assert_eq!(row.state.last_error.as_deref(), Some("HTTP 502"));
    }
}
