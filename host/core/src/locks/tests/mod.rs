//! The locks on the memory and redb KVs and the memory and filesystem
//! stores: what the guard lets a batch do to the lock rows, what the store
//! lets a request destroy, and what retention is asked.

mod guard;
mod locked_store;
mod model;
mod races;
mod store;

use std::sync::{Arc, Mutex};

use custodian_contract::content::Id;
use custodian_contract::lock::{self, RequestLock};
use custodian_kv::{Batch, Kv, KvError, Outcome, Partition, Write};

use crate::decisions::PolicyError;
use crate::decisions::retention::{Assessment, Item, RetentionOracle, Verdict};

/// The lock partition.
fn partition() -> Partition {
    super::partition()
}

/// A request's lock.
fn lock_of(created_ms: u64, retain_until_ms: u64, hold: bool, purging: bool) -> RequestLock {
    RequestLock {
        created_ms,
        retain_until_ms,
        hold,
        purging,
    }
}

/// The write of request `id`'s lock row.
fn put_request(id: &Id, lock: &RequestLock) -> Write {
    Write::Put {
        partition: partition(),
        key: lock::request_key(id),
        value: lock.encode().to_vec(),
    }
}

/// The write of the piece row of `key` in `store`, naming request `id`.
fn put_piece(store: &str, key: &str, id: &Id) -> Write {
    Write::Put {
        partition: partition(),
        key: lock::piece_key(store, key),
        value: id.to_vec(),
    }
}

/// A batch of `writes` with no preconditions.
fn batch(writes: Vec<Write>) -> Batch {
    Batch {
        preconditions: Vec::new(),
        writes,
    }
}

/// Applies `writes` and expects them committed.
async fn commit(kv: &dyn Kv, writes: Vec<Write>) {
    assert_eq!(kv.apply(&batch(writes)).await, Ok(Outcome::Committed));
}

/// Every lock row, in key order.
async fn lock_rows(kv: &dyn Kv) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut rows = Vec::new();
    let mut cursor: Option<Vec<u8>> = None;
    loop {
        let page = kv
            .scan(&partition(), b"", None, cursor.as_deref(), 1000)
            .await
            .unwrap();
        rows.extend(page.entries);
        match page.next {
            Some(next) => cursor = Some(next),
            None => return rows,
        }
    }
}

/// Whether `result` is a refusal of kind retained.
fn is_retained(result: &Result<Outcome, KvError>) -> bool {
    matches!(result, Err(KvError::Retained(_)))
}

/// How the test oracle answers.
#[derive(Debug, Clone)]
enum Answer {
    /// Every version may go.
    Allow,
    /// No version may go, for this reason.
    Deny(&'static str),
    /// The plugin fails to answer.
    Fail,
}

/// A retention oracle that answers as told and records every item it is
/// asked about.
struct Recording {
    answer: Mutex<Answer>,
    asked: Mutex<Vec<Item>>,
}

impl Recording {
    fn new(answer: Answer) -> Arc<Self> {
        Arc::new(Self {
            answer: Mutex::new(answer),
            asked: Mutex::new(Vec::new()),
        })
    }

    fn answer(&self, answer: Answer) {
        *self.answer.lock().unwrap() = answer;
    }

    /// The items asked about since the last call, in order.
    fn take(&self) -> Vec<Item> {
        std::mem::take(&mut *self.asked.lock().unwrap())
    }
}

impl RetentionOracle for Recording {
    fn assess(&self, item: Item, now_ms: u64) -> Result<Assessment, PolicyError> {
        self.asked.lock().unwrap().push(item);
        let may_delete = match &*self.answer.lock().unwrap() {
            Answer::Allow => Verdict::Allow,
            Answer::Deny(reason) => Verdict::Deny((*reason).into()),
            Answer::Fail => return Err(PolicyError::Unavailable("the plugin trapped".into())),
        };
        Ok(Assessment {
            retain_until_ms: now_ms,
            may_delete,
            may_purge: Verdict::Allow,
            next_check_ms: now_ms,
        })
    }

    fn set_hold(&self, item: Item, enabled: bool) -> Result<Item, PolicyError> {
        Ok(Item {
            hold: enabled,
            ..item
        })
    }
}
