//! The etcd v3 backend: the store of a deployment whose hosts share
//! state, on an etcd cluster (3.4 or later). Every call is linearizable;
//! a batch is one etcd transaction.
//!
//! # Key layout
//!
//! All of a store's keys start with its prefix ([`EtcdConfig::prefix`]),
//! so several deployments, or tests, share one cluster. Nothing else is
//! stored.
//!
//! | etcd key or range                                        | what it is                               |
//! |----------------------------------------------------------|------------------------------------------|
//! | `<prefix><partition>\0<key>`                             | the row `key` of `partition`; the etcd value is the row's value, as is |
//! | `[<prefix><partition>\0, <prefix><partition>\x01)`       | every row of `partition`                 |
//! | `[<prefix><partition>\0<start>, <prefix><partition>\0<end>)` | a scan from `start` to `end`         |
//! | `<prefix><partition>\0<cursor>\0`                        | where a scan resumes: the least key after `cursor` |
//!
//! Partition names are `[a-z0-9._-]`, so the first `\0` after the prefix
//! ends the name, and the partition `a` (`a\0…`) never overlaps `a.b`
//! (`a.b\0…`). Row keys compare in etcd as the trait's keys compare, so
//! etcd's ranges are the trait's scans.
//!
//! A prefix is empty, or ends in `/` and contains no `\0`. Then no two
//! distinct prefixes reach the same etcd key: if `P` is a proper prefix
//! of `Q`, the part of `Q` after `P` ends in `/`, which `P`'s keys could
//! only produce inside a row key, after a `\0` that `Q` cannot contain.
//!
//! # A batch is one transaction
//!
//! [`Kv::apply`] checks the batch with [`validate_batch`] (the bounds
//! every backend enforces), then sends one `Txn`:
//!
//! - compares: `Absent(k)` is `create_revision(k) == 0`; `Equals(k, v)` is
//!   `value(k) == v`, which etcd evaluates as false when `k` is missing;
//! - success branch: the writes, one per key, the last write to a key
//!   winning (etcd refuses two writes to one key in one `Txn` with
//!   "duplicate key given in txn request"); for a batch without writes,
//!   one linearizable read of its first guarded key instead (see below);
//! - failure branch: empty.
//!
//! **A batch of guards alone.** etcd counts a `Txn` whose branches hold
//! no operation at all as serializable (`isTxnSerializable` is true of
//! empty branches), so it serves it from the answering member's own
//! state, without the read barrier a linearizable read waits on: on a
//! member behind the leader the compares would see stale values, and a
//! guard-only batch could answer `Committed` for a key another client's
//! acknowledged write had already changed (seen in the three-member
//! differential test). One linearizable read in the success branch makes
//! the `Txn` a linearizable read-only one; its answer is ignored.
//!
//! When the compares fail, the guarded keys are read at the revision the
//! `Txn` was evaluated at (its header revision; in transactions of at
//! most 128 reads, as `get_many` reads) and the preconditions evaluated in
//! order, so the outcome names the first failing one, as the model does.
//!
//! # Deadlines (`NotAfter`)
//!
//! etcd has no clock compare, so `NotAfter(t)` is evaluated against the
//! host's clock immediately before the `Txn` is sent. If a deadline has
//! passed, the keys guarded before it are read (one snapshot) to report an
//! earlier failing precondition first, as the model does; otherwise the
//! outcome is `DeadlinePassed`, and nothing is sent.
//!
//! The bound: a committed batch was proposed to raft within
//! [`EtcdConfig::request_timeout`] of its check, plus the time the
//! cancellation below takes to reach the member (loopback or LAN
//! latency). The client abandons the request at the end of that budget,
//! which resets its HTTP/2 stream and so cancels the request's context on
//! the member; etcd proposes a request only while its context is live (a
//! request waiting for a leader is dropped, not proposed later). The
//! client does not send gRPC's `grpc-timeout` header, so the member learns
//! of the deadline only through that cancellation; should it never arrive
//! (the host lost the network at that instant), etcd's own request
//! timeout (5 s plus two election timeouts, 7 s by default) still ends
//! the wait, counted from the request's arrival. A proposal that commits
//! is appended to the leader's log within the network delay from that
//! member.
//!
//! Fencing relies on `NotAfter` for expired leases, so on this backend
//! the fence's `lease_margin_ms` (in the core crate's `FenceConfig`)
//! must cover `request_timeout` plus the clock skew between hosts. The
//! default margin (5 s) equals the default `request_timeout` and leaves
//! nothing for skew: add the timeout to the margin (as `custodian serve`
//! does on etcd), or lower the timeout.
//!
//! # Reads
//!
//! - `get` is one range request.
//! - `get_many` reads up to 1000 keys in transactions of at most 128 range
//!   reads (etcd's default `--max-txn-ops`), each later transaction pinned
//!   to the first one's revision, so the answer is one snapshot.
//! - `scan` is one range request with a limit; etcd's `more` flag says
//!   whether the page's last key is a cursor.
//!
//! # Failures and timeouts
//!
//! Every call has a budget of [`EtcdConfig::request_timeout`], retries
//! included (a batch whose preconditions fail gets a second budget for
//! the read that names the failed one). When it runs out the call answers
//! [`KvError::Unavailable`]; a cluster that is down never makes a call
//! hang.
//!
//! | what happened | reads | a batch |
//! |---|---|---|
//! | no connection to a member could be opened | retried (another member) | retried: the request never left |
//! | etcd overloaded ("too many requests") or the auth token expired | retried | retried: etcd refused it before proposing |
//! | a timeout, a lost connection, a leader change | retried with backoff | `Unavailable`: the outcome is unknown, it may have committed; not retried |
//! | beyond etcd's limits ("too many operations", "request is too large") | `InvalidArgument` | `InvalidArgument`, nothing written |
//! | credentials or permission refused | `Unavailable` | `Unavailable`, nothing written |
//!
//! Requests are spread over all configured endpoints. One that lands on
//! a member that is down fails to connect, which proves it was never
//! sent, and is tried again (on any member); a member that comes back is
//! used again.
//!
//! # Limits
//!
//! etcd accepts by default at most 128 operations in each branch of a
//! transaction and 1.5 MiB per request. A valid batch has at most
//! [`MAX_COMMIT_OPS`](super::MAX_COMMIT_OPS) (128) operations and
//! [`MAX_COMMIT_BYTES`](super::MAX_COMMIT_BYTES) (1.25 MiB) of keys and
//! values; prefixes ([`MAX_PREFIX_BYTES`]) and partition names add at most
//! 128 × 321 bytes, so every valid batch fits one request. A cluster
//! configured below those defaults refuses some valid batches with
//! `InvalidArgument`; nothing of them is written.
//!
//! # The client
//!
//! The wire client is this crate's own (the private `rpc` module, in
//! `etcd/rpc.rs`): hand-written etcd v3 messages on tonic and prost, so
//! building needs no `protoc`. It sends only `KV.Range`, `KV.Txn` and
//! `Auth.Authenticate`.

mod config;
mod error;
mod keys;
mod rpc;

#[cfg(any(test, feature = "local-servers"))]
pub mod local_server;

#[cfg(test)]
mod fault_tests;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;
use tonic::Status;
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

use super::{
    Answer, Batch, Detail, Kv, KvError, MAX_KEY_BYTES, MAX_PAGE_ENTRIES, MAX_PARTITION_BYTES,
    MAX_READS, MAX_VALUE_BYTES, Outcome, Page, Partition, Precondition, Read, Write,
    validate_batch, validate_get_many, validate_key, validate_reads, validate_scan,
};
use custodian_base::clock::Clock;

use self::error::{Failure, classify};
use self::keys::Layout;
use self::rpc::{
    Client, Compare, ConnectOptions, RangeRequest, RequestOp, TxnRequest, TxnResponse, response_op,
};

pub use self::config::{
    DEFAULT_REQUEST_TIMEOUT, ENV_CA, ENV_CERT, ENV_KEY, ENV_PASSWORD, ENV_USER, EtcdClientCert,
    EtcdConfig, EtcdTls, MAX_PREFIX_BYTES, MAX_REQUEST_TIMEOUT, check_file_settings,
};

/// Most reads sent in one transaction: etcd's default `--max-txn-ops`.
const READS_PER_TXN: usize = 128;
/// Largest answer accepted: a page of [`MAX_PAGE_ENTRIES`] rows at every
/// bound, with room for etcd's per-row metadata. (tonic's default, 4 MiB,
/// is less than 16 rows of the largest value.)
const MAX_RESPONSE_BYTES: usize = MAX_PAGE_ENTRIES as usize
    * (MAX_PREFIX_BYTES + MAX_PARTITION_BYTES + 1 + MAX_KEY_BYTES + MAX_VALUE_BYTES + 64)
    + 64 * 1024;
/// How often an idle connection is pinged, so a member that vanished
/// without closing its connections is noticed.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// The first pause before a retry; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(10);
/// The longest pause between two retries.
const MAX_BACKOFF: Duration = Duration::from_millis(250);

/// A KV store in an etcd cluster. Cheap to share behind an `Arc`; every
/// call is independent. See the module documentation.
pub struct EtcdKv {
    /// Holds the auth token every request sends, and renews it.
    client: Client,
    layout: Layout,
    clock: Arc<dyn Clock>,
    request_timeout: Duration,
    endpoints: Vec<String>,
}

impl std::fmt::Debug for EtcdKv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdKv")
            .field("endpoints", &self.endpoints)
            .field("layout", &self.layout)
            .field("request_timeout", &self.request_timeout)
            .finish_non_exhaustive()
    }
}

/// Which failures a call may try again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Retry {
    /// Reads: anything but a refusal, while the budget lasts; reading
    /// twice is harmless.
    Idempotent,
    /// Writes: only failures that prove nothing happened.
    OnlyUnsent,
}

/// What one attempt at a batch did.
enum Sent {
    /// The deadline at this precondition index had passed at the check,
    /// so nothing was sent.
    Late(usize),
    /// etcd answered the transaction.
    Answered(TxnResponse),
}

impl EtcdKv {
    /// A store on the cluster `config` names, whose `NotAfter`
    /// preconditions read `clock`. Without credentials nothing is sent
    /// yet: a cluster that is down makes the calls fail, not `connect`.
    /// With credentials, `connect` authenticates (within the time budget).
    ///
    /// # Errors
    /// [`KvError::InvalidArgument`] when `config` fails
    /// [`EtcdConfig::validate`]; [`KvError::Unavailable`] when
    /// authenticating fails or times out.
    pub async fn connect(config: EtcdConfig, clock: Arc<dyn Clock>) -> Result<Self, KvError> {
        config.validate()?;
        let tls = config.tls.as_ref().map(|tls| {
            let tls_config =
                ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&tls.ca_pem));
            match &tls.client {
                Some(client) => {
                    tls_config.identity(Identity::from_pem(&client.cert_pem, &client.key_pem))
                }
                None => tls_config,
            }
        });
        let options = ConnectOptions {
            connect_timeout: Some(config.request_timeout),
            keep_alive: Some((KEEP_ALIVE_INTERVAL, config.request_timeout)),
            tls,
            max_decoding_message_size: Some(MAX_RESPONSE_BYTES),
            credentials: config.auth.clone(),
        };
        let client = attempt_until(
            "connecting to etcd",
            config.request_timeout,
            Retry::Idempotent,
            None,
            || Client::connect(&config.endpoints, &options),
        )
        .await?;
        Ok(Self {
            client,
            layout: Layout::new(config.prefix),
            clock,
            request_timeout: config.request_timeout,
            endpoints: config.endpoints,
        })
    }

    /// Runs `attempt` on a fresh handle of the client until it
    /// succeeds, fails for good, or the time budget runs out.
    async fn call<T, F, Fut>(&self, what: &str, retry: Retry, mut attempt: F) -> Result<T, KvError>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        let auth = self.client.has_credentials().then_some(&self.client);
        attempt_until(what, self.request_timeout, retry, auth, || {
            attempt(self.client.clone())
        })
        .await
    }

    /// The range request of a validated scan; `None` when the range holds
    /// no key.
    fn scan_request(
        &self,
        partition: &Partition,
        start: &[u8],
        end: Option<&[u8]>,
        cursor: Option<&[u8]>,
        limit: u32,
    ) -> Option<RangeRequest> {
        let range = self.layout.scan(partition, start, end, cursor)?;
        Some(RangeRequest {
            key: range.from,
            range_end: range.to,
            limit: i64::from(limit),
            ..RangeRequest::default()
        })
    }

    /// The page a scan's range response holds: its rows' keys within
    /// `partition`, and a cursor only when etcd has more.
    fn page(&self, partition: &Partition, found: rpc::RangeResponse) -> Result<Page, KvError> {
        let more = found.more;
        let entries = found
            .kvs
            .into_iter()
            .map(|row| Ok((self.layout.key_of(partition, &row.key)?.to_vec(), row.value)))
            .collect::<Result<Vec<_>, KvError>>()?;
        let next = if more {
            entries.last().map(|(key, _)| key.clone())
        } else {
            None
        };
        Ok(Page { entries, next })
    }

    /// The values of the etcd keys `rows`, read in one snapshot (at
    /// `revision`, or at the revision of the first transaction), in
    /// transactions of at most [`READS_PER_TXN`] reads.
    async fn read_rows(
        &self,
        what: &str,
        rows: &[Vec<u8>],
        revision: Option<i64>,
    ) -> Result<Vec<Option<Vec<u8>>>, KvError> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        // A whole snapshot is one attempt: after a failure midway the
        // retry starts over at a fresh revision (unless pinned).
        self.call(what, Retry::Idempotent, |kv| async move {
            let mut values = Vec::with_capacity(rows.len());
            let mut pinned = revision;
            for chunk in rows.chunks(READS_PER_TXN) {
                let reads: Vec<RequestOp> = chunk
                    .iter()
                    .map(|row| {
                        RequestOp::range(RangeRequest {
                            key: row.clone(),
                            // 0: the latest revision.
                            revision: pinned.unwrap_or(0),
                            ..RangeRequest::default()
                        })
                    })
                    .collect();
                let response = kv
                    .txn(TxnRequest {
                        success: reads,
                        ..TxnRequest::default()
                    })
                    .await?;
                if pinned.is_none() {
                    pinned = Some(header_revision(&response)?);
                }
                let answers = response.responses;
                if answers.len() != chunk.len() {
                    return Err(Status::internal(format!(
                        "etcd answered {} of {} reads",
                        answers.len(),
                        chunk.len()
                    )));
                }
                for answer in answers {
                    let Some(response_op::Response::Range(mut found)) = answer.response else {
                        return Err(Status::internal("etcd answered a read with something else"));
                    };
                    values.push(found.kvs.pop().map(|row| row.value));
                }
            }
            Ok(values)
        })
        .await
    }

    /// The index of the first of `preconditions` whose key does not
    /// hold what it requires, reading the keys at `revision` (or now);
    /// `None` when all hold. `NotAfter`s are skipped: the caller has
    /// checked them.
    async fn first_failing(
        &self,
        preconditions: &[Precondition],
        revision: Option<i64>,
    ) -> Result<Option<u32>, KvError> {
        /// A guarded key: which precondition, its etcd key, and the
        /// value it requires (`None`: absent).
        struct Guard<'a> {
            index: usize,
            row: Vec<u8>,
            wanted: Option<&'a [u8]>,
        }
        let guards: Vec<Guard<'_>> = preconditions
            .iter()
            .enumerate()
            .filter_map(|(index, precondition)| match precondition {
                Precondition::Absent { partition, key } => Some(Guard {
                    index,
                    row: self.layout.row(partition, key),
                    wanted: None,
                }),
                Precondition::Equals {
                    partition,
                    key,
                    value,
                } => Some(Guard {
                    index,
                    row: self.layout.row(partition, key),
                    wanted: Some(value),
                }),
                Precondition::NotAfter(_) => None,
            })
            .collect();
        let rows: Vec<Vec<u8>> = guards.iter().map(|guard| guard.row.clone()).collect();
        let values = self
            .read_rows("reading the batch's guarded keys", &rows, revision)
            .await?;
        for (guard, found) in guards.iter().zip(&values) {
            if found.as_deref() != guard.wanted {
                // Bounded by MAX_COMMIT_OPS, so it fits.
                return Ok(Some(u32::try_from(guard.index).unwrap_or(u32::MAX)));
            }
        }
        Ok(None)
    }
}

#[async_trait]
impl Kv for EtcdKv {
    async fn get(&self, partition: &Partition, key: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        validate_key(key)?;
        let row = self.layout.row(partition, key);
        let mut found = self
            .call("reading a key", Retry::Idempotent, |kv| {
                let request = RangeRequest {
                    key: row.clone(),
                    ..RangeRequest::default()
                };
                async move { kv.range(request).await }
            })
            .await?;
        Ok(found.kvs.pop().map(|row| row.value))
    }

    async fn get_many(
        &self,
        partition: &Partition,
        keys: &[Vec<u8>],
    ) -> Result<Vec<Option<Vec<u8>>>, KvError> {
        validate_get_many(keys)?;
        let rows: Vec<Vec<u8>> = keys
            .iter()
            .map(|key| self.layout.row(partition, key))
            .collect();
        self.read_rows("reading keys", &rows, None).await
    }

    async fn scan(
        &self,
        partition: &Partition,
        start: &[u8],
        end: Option<&[u8]>,
        cursor: Option<&[u8]>,
        limit: u32,
    ) -> Result<Page, KvError> {
        validate_scan(start, end, cursor, limit)?;
        let Some(request) = self.scan_request(partition, start, end, cursor, limit) else {
            return Ok(Page::default());
        };
        let found = self
            .call("scanning", Retry::Idempotent, |kv| {
                let request = request.clone();
                async move { kv.range(request).await }
            })
            .await?;
        self.page(partition, found)
    }

    async fn read(&self, reads: &[Read]) -> Result<Vec<Answer>, KvError> {
        validate_reads(reads)?;
        // Every read is a range of one transaction, so all answer at one
        // revision in one round trip; an empty scan range asks nothing.
        const _: () = assert!(MAX_READS <= READS_PER_TXN);
        let requests: Vec<Option<RangeRequest>> = reads
            .iter()
            .map(|read| match read {
                Read::Get { partition, key } => Some(RangeRequest {
                    key: self.layout.row(partition, key),
                    ..RangeRequest::default()
                }),
                Read::Scan {
                    partition,
                    start,
                    end,
                    cursor,
                    limit,
                } => self.scan_request(partition, start, end.as_deref(), cursor.as_deref(), *limit),
            })
            .collect();
        let ops: Vec<RequestOp> = requests
            .iter()
            .flatten()
            .cloned()
            .map(RequestOp::range)
            .collect();
        let asked = ops.len();
        let found = if ops.is_empty() {
            Vec::new()
        } else {
            self.call("reading a snapshot", Retry::Idempotent, |kv| {
                let ops = ops.clone();
                async move {
                    let response = kv
                        .txn(TxnRequest {
                            success: ops,
                            ..TxnRequest::default()
                        })
                        .await?;
                    response
                        .responses
                        .into_iter()
                        .map(|answer| match answer.response {
                            Some(response_op::Response::Range(found)) => Ok(found),
                            _ => Err(Status::internal("etcd answered a read with something else")),
                        })
                        .collect::<Result<Vec<_>, Status>>()
                }
            })
            .await?
        };
        if found.len() != asked {
            return Err(KvError::Unavailable(
                format!("etcd answered {} of {asked} reads", found.len()).into(),
            ));
        }
        // One range answered for each read that asked one, in order.
        let mut found = found.into_iter();
        reads
            .iter()
            .zip(&requests)
            .map(|(read, request)| match (read, request) {
                (Read::Scan { .. }, None) => Ok(Answer::Page(Page::default())),
                (Read::Get { .. }, _) => Ok(Answer::Value(
                    found
                        .next()
                        .and_then(|mut range| range.kvs.pop())
                        .map(|row| row.value),
                )),
                (Read::Scan { partition, .. }, Some(_)) => {
                    let range = found.next().unwrap_or_default();
                    self.page(partition, range).map(Answer::Page)
                }
            })
            .collect()
    }

    async fn apply(&self, batch: &Batch) -> Result<Outcome, KvError> {
        validate_batch(batch)?;
        let txn = transaction(&self.layout, batch);
        let sent = self
            .call("the batch", Retry::OnlyUnsent, |kv| {
                let txn = txn.clone();
                async move {
                    // As late as possible: the request leaves right after.
                    let now = self.clock.now_ms();
                    let late = batch.preconditions.iter().position(
                        |precondition| matches!(precondition, Precondition::NotAfter(t) if now > *t),
                    );
                    match late {
                        Some(index) => Ok(Sent::Late(index)),
                        None => kv.txn(txn).await.map(Sent::Answered),
                    }
                }
            })
            .await?;
        match sent {
            Sent::Late(index) => {
                let earlier = &batch.preconditions[..index];
                Ok(match self.first_failing(earlier, None).await? {
                    Some(index) => Outcome::PreconditionFailed { index },
                    None => Outcome::DeadlinePassed,
                })
            }
            Sent::Answered(response) if response.succeeded => Ok(Outcome::Committed),
            Sent::Answered(response) => {
                let revision = header_revision(&response).map_err(|e| {
                    KvError::Unavailable(
                        format!(
                            "the batch was not committed (a precondition failed), but {}",
                            e.message()
                        )
                        .into(),
                    )
                })?;
                match self
                    .first_failing(&batch.preconditions, Some(revision))
                    .await
                {
                    Ok(Some(index)) => Ok(Outcome::PreconditionFailed { index }),
                    Ok(None) => Err(KvError::Unavailable(
                        format!(
                            "etcd did not commit the batch, yet every precondition holds at \
                         revision {revision}; nothing was written"
                        )
                        .into(),
                    )),
                    Err(e) => Err(KvError::Unavailable(Detail::caused_by(
                        "the batch was not committed (a precondition failed), but which one \
                         could not be read",
                        e,
                    ))),
                }
            }
        }
    }
}

/// The transaction of `batch` for a store laid out as `layout` (see the
/// module documentation).
fn transaction(layout: &Layout, batch: &Batch) -> TxnRequest {
    let compare: Vec<Compare> = batch
        .preconditions
        .iter()
        .filter_map(|precondition| match precondition {
            Precondition::Absent { partition, key } => {
                Some(Compare::absent(layout.row(partition, key)))
            }
            Precondition::Equals {
                partition,
                key,
                value,
            } => Some(Compare::value_equals(
                layout.row(partition, key),
                value.clone(),
            )),
            Precondition::NotAfter(_) => None,
        })
        .collect();
    // etcd refuses two writes to one key in a transaction, and within
    // one transaction their order would not matter anyway: keep each
    // key's last write, which is the one the model leaves in place.
    let mut last: BTreeMap<Vec<u8>, Option<&[u8]>> = BTreeMap::new();
    for write in &batch.writes {
        match write {
            Write::Put {
                partition,
                key,
                value,
            } => last.insert(layout.row(partition, key), Some(value)),
            Write::Delete { partition, key } => last.insert(layout.row(partition, key), None),
        };
    }
    let mut success: Vec<RequestOp> = last
        .into_iter()
        .map(|(row, value)| match value {
            Some(value) => RequestOp::put(row, value.to_vec()),
            None => RequestOp::delete(row),
        })
        .collect();
    // Guards alone: read one guarded key, linearizably, so etcd does
    // not answer from a lagging member's state (module docs).
    if success.is_empty()
        && let Some(first) = compare.first()
    {
        success.push(RequestOp::range(RangeRequest {
            key: first.key.clone(),
            limit: 1,
            ..RangeRequest::default()
        }));
    }
    TxnRequest {
        compare,
        success,
        failure: Vec::new(),
    }
}

/// The revision a response was served at.
fn header_revision(response: &TxnResponse) -> Result<i64, Status> {
    response
        .header
        .as_ref()
        .map(|header| header.revision)
        .ok_or_else(|| Status::internal("etcd answered without a header"))
}

/// What etcd (or tonic, when no answer came) said, as a [`KvError`]'s
/// source: its message with the causes tonic found, and the gRPC status
/// itself for a caller that wants its code.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{why}")]
pub struct EtcdStatus {
    why: String,
    status: Status,
}

impl EtcdStatus {
    /// The gRPC status the call failed with.
    pub fn status(&self) -> &Status {
        &self.status
    }
}

/// The text a failed status is reported with, whatever it means.
fn classify_message(status: &Status) -> String {
    match classify(status) {
        Failure::NotSent(why)
        | Failure::Busy(why)
        | Failure::TokenExpired(why)
        | Failure::AccessDenied(why)
        | Failure::Refused(why)
        | Failure::Unknown(why) => why,
    }
}

/// Runs `attempt` until it succeeds, fails in a way `retry` does not
/// retry, or `budget` (from now) runs out; a retry waits a backoff first.
/// With `auth`, an expired token is renewed once and the attempt made
/// again.
async fn attempt_until<T, F, Fut>(
    what: &str,
    budget: Duration,
    retry: Retry,
    auth: Option<&Client>,
    mut attempt: F,
) -> Result<T, KvError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Status>>,
{
    let deadline = Instant::now() + budget;
    let mut backoff = FIRST_BACKOFF;
    let mut renewed = false;
    let unknown_outcome = "the outcome is unknown, it may or may not have committed \
                           (read before trying again)";
    loop {
        let result = tokio::time::timeout_at(deadline, attempt()).await;
        let (failure, status) = match result {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(status)) => (classify(&status), status),
            Err(_) if retry == Retry::OnlyUnsent => {
                return Err(KvError::Unavailable(
                    format!("{what}: {unknown_outcome}: no answer within {budget:?}").into(),
                ));
            }
            Err(_) => {
                return Err(KvError::Unavailable(
                    format!("{what}: no answer from etcd within {budget:?}").into(),
                ));
            }
        };
        // etcd's answer is the error's source; the message says what it
        // meant for this call.
        let caused = |message: String, why: String| {
            Detail::caused_by(
                message,
                EtcdStatus {
                    why,
                    status: status.clone(),
                },
            )
        };
        let why = match failure {
            Failure::Refused(why) => {
                return Err(KvError::InvalidArgument(caused(
                    format!("etcd refused {what}"),
                    why,
                )));
            }
            Failure::AccessDenied(why) => {
                return Err(KvError::Unavailable(caused(
                    format!("etcd denied {what} (check {ENV_USER} and {ENV_PASSWORD})"),
                    why,
                )));
            }
            Failure::TokenExpired(why) => match auth {
                Some(client) if !renewed => {
                    renewed = true;
                    // Renewing is a call too: it has the same budget.
                    match tokio::time::timeout_at(deadline, client.refresh_token()).await {
                        Ok(Ok(())) => continue,
                        Ok(Err(error)) => {
                            let why = classify_message(&error);
                            return Err(KvError::Unavailable(Detail::caused_by(
                                format!("{what}: renewing the etcd auth token"),
                                EtcdStatus { why, status: error },
                            )));
                        }
                        Err(_) => {
                            return Err(KvError::Unavailable(
                                format!(
                                    "{what}: renewing the etcd auth token took over {budget:?}"
                                )
                                .into(),
                            ));
                        }
                    }
                }
                _ => {
                    return Err(KvError::Unavailable(caused(
                        format!("etcd refused {what}"),
                        why,
                    )));
                }
            },
            Failure::NotSent(why) | Failure::Busy(why) => why,
            Failure::Unknown(why) if retry == Retry::Idempotent => why,
            Failure::Unknown(why) => {
                return Err(KvError::Unavailable(caused(
                    format!("{what}: {unknown_outcome}"),
                    why,
                )));
            }
        };
        if Instant::now() + backoff >= deadline {
            return Err(KvError::Unavailable(caused(
                format!("{what}: etcd did not answer within {budget:?}; the last answer"),
                why,
            )));
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}
