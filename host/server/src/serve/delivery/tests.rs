//! The delivery worker against a real HTTP receiver on loopback, over
//! the in-memory KV and a fixed clock, pass by pass.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use futures::future::BoxFuture;
use serde_json::Value;
use tokio::sync::watch;

use super::{Deliverer, DeliveryParts, Pass};
use crate::invalidation::backoff::Backoff;
use crate::invalidation::outbox::{self, Row};
use crate::invalidation::{DeliverySettings, Entry, PARTITION, STATE_PARTITION};
use crate::serve::metrics::Metrics;
use custodian_base::clock::{Clock, FixedClock};
use custodian_core::audit;
use custodian_kv::memory::MemoryKv;
use custodian_kv::{Batch, Kv, Outcome, Partition, Write};

const T0: u64 = 1_700_000_000_000;

/// What a receiver does with one delivery.
enum Reply {
    /// Answers with this status.
    Status(StatusCode),
    /// Never answers.
    Stall,
    /// Runs this first, then answers with the status.
    After(BoxFuture<'static, ()>, StatusCode),
}

/// One delivery as a receiver saw it.
#[derive(Debug, Clone)]
struct Seen {
    idempotency_key: String,
    content_type: String,
    body: Value,
}

type Answer = Arc<dyn Fn(&Value) -> Reply + Send + Sync>;

#[derive(Clone)]
struct Receiving {
    seen: Arc<Mutex<Vec<Seen>>>,
    answer: Arc<Mutex<Answer>>,
}

/// A webhook receiver on 127.0.0.1.
struct Receiver {
    addr: SocketAddr,
    receiving: Receiving,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    /// Listens on a free port and answers with `answer`.
    async fn start(answer: impl Fn(&Value) -> Reply + Send + Sync + 'static) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::serve(listener, Arc::new(answer))
    }

    /// Listens on `addr` (a port it held before) and answers with
    /// `answer`.
    async fn start_at(
        addr: SocketAddr,
        answer: impl Fn(&Value) -> Reply + Send + Sync + 'static,
    ) -> Self {
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        Self::serve(listener, Arc::new(answer))
    }

    fn serve(listener: tokio::net::TcpListener, answer: Answer) -> Self {
        let addr = listener.local_addr().unwrap();
        let receiving = Receiving {
            seen: Arc::default(),
            answer: Arc::new(Mutex::new(answer)),
        };
        let app = Router::new()
            .route("/hook", post(receive))
            .with_state(receiving.clone());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            addr,
            receiving,
            task,
        }
    }

    fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    fn seen(&self) -> Vec<Seen> {
        self.receiving.seen.lock().unwrap().clone()
    }

    fn answer_with(&self, answer: impl Fn(&Value) -> Reply + Send + Sync + 'static) {
        *self.receiving.answer.lock().unwrap() = Arc::new(answer);
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn receive(
    State(receiving): State<Receiving>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    receiving.seen.lock().unwrap().push(Seen {
        idempotency_key: header("idempotency-key"),
        content_type: header("content-type"),
        body: body.clone(),
    });
    let answer = receiving.answer.lock().unwrap().clone();
    match answer(&body) {
        Reply::Status(status) => status,
        Reply::Stall => std::future::pending().await,
        Reply::After(first, status) => {
            first.await;
            status
        }
    }
}

/// A free loopback port nobody listens on.
async fn closed_port() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap()
}

fn entry(ms: u64, repository: &str) -> Entry {
    Entry {
        requested_ms: ms,
        request: [9; 32],
        repository: repository.into(),
        objects: vec![[4; 32], [5; 32]],
    }
}

/// A worker over an in-memory KV holding `entries`, posting to `url`.
struct Fixture {
    kv: Arc<dyn Kv>,
    clock: Arc<FixedClock>,
    metrics: Arc<Metrics>,
    deliverer: Deliverer,
    stopping: watch::Receiver<bool>,
    _stop: watch::Sender<bool>,
}

impl Fixture {
    async fn new(url: &str, entries: &[Entry]) -> Self {
        Self::with(url, entries, Duration::from_secs(5), false).await
    }

    async fn with(url: &str, entries: &[Entry], timeout: Duration, shares_kv: bool) -> Self {
        let clock = Arc::new(FixedClock::new(T0));
        let kv: Arc<dyn Kv> = Arc::new(MemoryKv::new(clock.clone()));
        for entry in entries {
            plan(kv.as_ref(), entry).await;
        }
        let metrics = Arc::new(Metrics::new());
        let settings = DeliverySettings {
            webhook: Some(url.parse().unwrap()),
            timeout,
            backoff: Backoff::new(Duration::from_millis(100), Duration::from_millis(400)),
        };
        let deliverer = Deliverer::new(
            DeliveryParts {
                kv: kv.clone(),
                clock: clock.clone(),
                metrics: metrics.clone(),
                node: "host-a".into(),
                shares_kv,
            },
            settings,
        );
        let (stop, stopping) = watch::channel(false);
        Self {
            kv,
            clock,
            metrics,
            deliverer,
            stopping,
            _stop: stop,
        }
    }

    async fn pass(&mut self) -> Pass {
        self.deliverer.pass(&self.stopping).await.unwrap()
    }

    async fn rows(&self) -> Vec<Row> {
        outbox::page(self.kv.as_ref(), None, 100)
            .await
            .unwrap()
            .rows
    }

    fn advance(&self, ms: u64) {
        self.clock.set(self.clock.now_ms() + ms);
    }

    fn metric(&self, series: &str) -> String {
        let text = self.metrics.render();
        text.lines()
            .find_map(|line| line.strip_prefix(series))
            .unwrap_or_else(|| panic!("no {series} in {text}"))
            .trim()
            .to_owned()
    }
}

async fn plan(kv: &dyn Kv, entry: &Entry) {
    let batch = Batch {
        preconditions: vec![],
        writes: vec![Write::Put {
            partition: Partition::new(PARTITION).unwrap(),
            key: entry.key(),
            value: entry.value(),
        }],
    };
    assert_eq!(kv.apply(&batch).await.unwrap(), Outcome::Committed);
}

fn ok(_: &Value) -> Reply {
    Reply::Status(StatusCode::OK)
}

fn keys(seen: &[Seen]) -> Vec<String> {
    seen.iter().map(|s| s.idempotency_key.clone()).collect()
}

#[tokio::test]
async fn an_entry_is_posted_as_json_with_its_idempotency_key_and_deleted_after_a_2xx() {
    let receiver = Receiver::start(|_: &Value| Reply::Status(StatusCode::ACCEPTED)).await;
    let planned = entry(T0 - 5, "acme/site");
    let mut fixture = Fixture::new(&receiver.url(), std::slice::from_ref(&planned)).await;
    let pass = fixture.pass().await;
    assert_eq!((pass.entries, pass.delivered, pass.failed), (1, 1, false));
    let seen = receiver.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].idempotency_key, planned.idempotency_key());
    assert_eq!(seen[0].content_type, "application/json");
    assert_eq!(seen[0].body["idempotency_key"], planned.idempotency_key());
    assert_eq!(seen[0].body["request"], "09".repeat(32));
    assert_eq!(seen[0].body["repository"], "acme/site");
    assert_eq!(seen[0].body["objects"][1], "05".repeat(32));
    assert_eq!(seen[0].body["requested_ms"], T0 - 5);
    assert!(fixture.rows().await.is_empty());
    let state = Partition::new(STATE_PARTITION).unwrap();
    assert_eq!(fixture.kv.get(&state, &planned.key()).await.unwrap(), None);
    assert_eq!(
        fixture.metric("custodian_invalidation_deliveries_total{outcome=\"delivered\"}"),
        "1"
    );
    let (records, _) = audit::read(fixture.kv.as_ref(), 0, None, 10).await.unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].event, "invalidation/delivered");
    assert_eq!(records[0].actor, "host:host-a");
    assert_eq!(
        records[0].targets,
        [format!("invalidation:{}", planned.idempotency_key())]
    );
    assert_eq!(
        records[0].detail.as_deref(),
        Some(format!("delivered to {} (HTTP 202)", receiver.url()).as_str())
    );
    // Nothing left: the next pass posts nothing and waits the idle poll.
    let idle = fixture.pass().await;
    assert_eq!(idle, Pass::default());
    assert_eq!(fixture.deliverer.wait_after(&idle, T0), super::IDLE_POLL);
    assert_eq!(receiver.seen().len(), 1);
}

#[tokio::test]
async fn a_failed_delivery_is_recorded_and_retried_with_doubling_backoff_up_to_the_cap() {
    let receiver =
        Receiver::start(|_: &Value| Reply::Status(StatusCode::SERVICE_UNAVAILABLE)).await;
    let mut fixture = Fixture::new(&receiver.url(), &[entry(T0, "acme/site")]).await;
    let mut waits = Vec::new();
    let mut nexts = Vec::new();
    for attempt in 1..=5u32 {
        let pass = fixture.pass().await;
        assert!(pass.failed, "attempt {attempt}");
        let row = fixture.rows().await.remove(0);
        assert_eq!(row.state.attempts, attempt);
        assert_eq!(row.state.last_error.as_deref(), Some("HTTP 503"));
        nexts.push(row.state.next_attempt_ms - fixture.clock.now_ms());
        let wait = fixture.deliverer.wait_after(&pass, fixture.clock.now_ms());
        waits.push(wait.as_millis());
        // Not due yet: a pass just before the wait is over posts nothing.
        fixture.advance(nexts[nexts.len() - 1] - 1);
        let early = fixture.pass().await;
        assert!(!early.failed && early.delivered == 0, "{early:?}");
        assert_eq!(early.next_due_ms, Some(row.state.next_attempt_ms));
        assert_eq!(receiver.seen().len(), attempt as usize);
        fixture.advance(1);
    }
    assert_eq!(nexts, [100, 200, 400, 400, 400]);
    assert_eq!(waits, [100, 200, 400, 400, 400]);
    assert_eq!(
        fixture.metric("custodian_invalidation_deliveries_total{outcome=\"failed\"}"),
        "5"
    );
    receiver.answer_with(ok);
    let pass = fixture.pass().await;
    assert_eq!(pass.delivered, 1);
    assert!(fixture.rows().await.is_empty());
    let keys = keys(&receiver.seen());
    assert_eq!(keys.len(), 6);
    assert!(keys.iter().all(|k| *k == keys[0]), "one key throughout");
}

#[tokio::test]
async fn a_receiver_that_is_down_gets_every_entry_once_it_is_back() {
    let addr = closed_port().await;
    let url = format!("http://{addr}/hook");
    let planned: Vec<Entry> = (0..3).map(|i| entry(T0 + i, &format!("ns/r{i}"))).collect();
    let mut fixture = Fixture::new(&url, &planned).await;
    // Down: one attempt per pass, each at the next entry, the worker's
    // wait growing with its failures in a row.
    let mut waits = Vec::new();
    for _ in 0..4 {
        let pass = fixture.pass().await;
        assert!(pass.failed);
        assert_eq!(pass.entries, 3);
        let wait = fixture.deliverer.wait_after(&pass, fixture.clock.now_ms());
        waits.push(wait.as_millis());
        fixture.advance(u64::try_from(wait.as_millis()).unwrap());
    }
    assert_eq!(waits, [100, 200, 400, 400]);
    let rows = fixture.rows().await;
    let attempts: Vec<u32> = rows.iter().map(|r| r.state.attempts).collect();
    assert_eq!(attempts, [2, 1, 1], "the attempts went round the entries");
    assert!(
        rows[0]
            .state
            .last_error
            .as_deref()
            .unwrap()
            .contains("cannot connect"),
        "{:?}",
        rows[0].state
    );
    let receiver = Receiver::start_at(addr, ok).await;
    fixture.advance(400);
    let pass = fixture.pass().await;
    assert_eq!((pass.delivered, pass.failed), (3, false));
    let mut got = keys(&receiver.seen());
    got.sort();
    let mut want: Vec<String> = planned.iter().map(Entry::idempotency_key).collect();
    want.sort();
    assert_eq!(got, want, "each exactly once");
    assert!(fixture.rows().await.is_empty());
}

#[tokio::test]
async fn an_entry_the_receiver_keeps_refusing_does_not_hold_up_the_ones_behind_it() {
    let receiver = Receiver::start(|body: &Value| {
        if body["repository"] == "bad/one" {
            Reply::Status(StatusCode::BAD_REQUEST)
        } else {
            Reply::Status(StatusCode::OK)
        }
    })
    .await;
    let planned = [
        entry(T0, "bad/one"),
        entry(T0 + 1, "good/two"),
        entry(T0 + 2, "good/three"),
    ];
    let mut fixture = Fixture::new(&receiver.url(), &planned).await;
    let first = fixture.pass().await;
    assert!(first.failed);
    assert_eq!(first.delivered, 0);
    fixture.advance(100);
    let second = fixture.pass().await;
    assert_eq!(second.delivered, 2, "{second:?}");
    let rows = fixture.rows().await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].entry.as_ref().unwrap().repository, "bad/one");
    assert_eq!(rows[0].state.attempts, 2);
}

#[tokio::test]
async fn a_receiver_that_never_answers_is_given_up_on_at_the_timeout() {
    let receiver = Receiver::start(|_: &Value| Reply::Stall).await;
    let mut fixture = Fixture::with(
        &receiver.url(),
        &[entry(T0, "acme/site")],
        Duration::from_millis(200),
        false,
    )
    .await;
    let pass = fixture.pass().await;
    assert!(pass.failed);
    let row = fixture.rows().await.remove(0);
    assert_eq!(
        row.state.last_error.as_deref(),
        Some("no answer within 200 ms")
    );
}

#[tokio::test]
async fn a_delivery_cut_off_before_its_delete_is_made_again_with_the_same_key() {
    let receiver = Receiver::start(|_: &Value| Reply::Stall).await;
    let planned = entry(T0, "acme/site");
    let mut fixture = Fixture::new(&receiver.url(), std::slice::from_ref(&planned)).await;
    // The host dies mid-POST: the pass is dropped, nothing is recorded.
    let cut = tokio::time::timeout(Duration::from_millis(300), fixture.pass()).await;
    assert!(cut.is_err());
    assert_eq!(receiver.seen().len(), 1);
    let row = fixture.rows().await.remove(0);
    assert_eq!(row.state, outbox::State::default());
    receiver.answer_with(ok);
    assert_eq!(fixture.pass().await.delivered, 1);
    assert_eq!(
        keys(&receiver.seen()),
        [planned.idempotency_key(), planned.idempotency_key()]
    );
    assert!(fixture.rows().await.is_empty());
}

#[tokio::test]
async fn an_entry_acknowledged_while_its_post_is_in_flight_is_delivered_once_and_gone() {
    let receiver = Receiver::start(ok).await;
    let planned = entry(T0, "acme/site");
    let mut fixture = Fixture::new(&receiver.url(), std::slice::from_ref(&planned)).await;
    let (kv, key) = (fixture.kv.clone(), planned.key());
    receiver.answer_with(move |_: &Value| {
        let (kv, key) = (kv.clone(), key.clone());
        Reply::After(
            Box::pin(async move {
                let acked = outbox::ack(kv.as_ref(), &[key], "principal:op", T0)
                    .await
                    .unwrap();
                assert_eq!(acked.acknowledged.len(), 1);
            }),
            StatusCode::OK,
        )
    });
    let pass = fixture.pass().await;
    assert_eq!(pass.delivered, 1);
    assert!(fixture.rows().await.is_empty());
    assert_eq!(receiver.seen().len(), 1);
}

#[tokio::test]
async fn an_entry_rewritten_while_its_post_is_in_flight_is_not_deleted() {
    let receiver = Receiver::start(ok).await;
    let planned = entry(T0, "acme/site");
    let mut fixture = Fixture::new(&receiver.url(), std::slice::from_ref(&planned)).await;
    let mut rewritten = planned.clone();
    rewritten.objects = vec![[6; 32]];
    let kv = fixture.kv.clone();
    let replanned = rewritten.clone();
    receiver.answer_with(move |_: &Value| {
        let (kv, replanned) = (kv.clone(), replanned.clone());
        Reply::After(
            Box::pin(async move { plan(kv.as_ref(), &replanned).await }),
            StatusCode::OK,
        )
    });
    assert_eq!(fixture.pass().await.delivered, 1);
    let rows = fixture.rows().await;
    assert_eq!(rows.len(), 1, "the guarded delete left the rewritten entry");
    assert_eq!(rows[0].entry.as_ref().unwrap(), &rewritten);
}

#[tokio::test]
async fn on_a_shared_kv_an_entry_another_host_claimed_waits_until_the_claim_lapses() {
    let receiver = Receiver::start(ok).await;
    let planned = entry(T0, "acme/site");
    let mut fixture = Fixture::with(
        &receiver.url(),
        std::slice::from_ref(&planned),
        Duration::from_secs(5),
        true,
    )
    .await;
    let row = fixture.rows().await.remove(0);
    outbox::claim(fixture.kv.as_ref(), &row, "host-b", T0 + 15_000)
        .await
        .unwrap()
        .unwrap();
    let pass = fixture.pass().await;
    assert_eq!(pass.delivered, 0);
    assert_eq!(pass.next_due_ms, Some(T0 + 15_000));
    assert!(receiver.seen().is_empty());
    fixture.advance(15_000);
    assert_eq!(fixture.pass().await.delivered, 1);
    assert!(fixture.rows().await.is_empty());
}

#[tokio::test]
async fn on_a_shared_kv_a_delivery_is_claimed_for_the_timeout_plus_the_margin() {
    let receiver = Receiver::start(|_: &Value| Reply::Status(StatusCode::BAD_GATEWAY)).await;
    let mut fixture = Fixture::with(
        &receiver.url(),
        &[entry(T0, "acme/site")],
        Duration::from_secs(5),
        true,
    )
    .await;
    let during: Arc<Mutex<Option<outbox::State>>> = Arc::default();
    let (kv, seen) = (fixture.kv.clone(), during.clone());
    receiver.answer_with(move |_: &Value| {
        let (kv, seen) = (kv.clone(), seen.clone());
        Reply::After(
            Box::pin(async move {
                let rows = outbox::page(kv.as_ref(), None, 1).await.unwrap().rows;
                *seen.lock().unwrap() = Some(rows[0].state.clone());
            }),
            StatusCode::BAD_GATEWAY,
        )
    });
    assert!(fixture.pass().await.failed);
    let claim = during.lock().unwrap().clone().unwrap().claim.unwrap();
    assert_eq!(claim.holder, "host-a");
    assert_eq!(claim.until_ms, T0 + 15_000);
    assert_eq!(
        fixture.rows().await[0].state.claim,
        None,
        "the failure released it"
    );
}

#[tokio::test]
async fn without_a_webhook_a_pass_only_counts_the_outbox() {
    let mut fixture = Fixture::new(
        "http://127.0.0.1:9/hook",
        &[entry(T0, "a/a"), entry(T0, "b/b")],
    )
    .await;
    fixture.deliverer.settings.webhook = None;
    let pass = fixture.pass().await;
    assert_eq!((pass.entries, pass.delivered, pass.failed), (2, 0, false));
    assert_eq!(fixture.rows().await[0].state, outbox::State::default());
    assert_eq!(fixture.deliverer.wait_after(&pass, T0), super::CENSUS_POLL);
}

#[tokio::test]
async fn two_hosts_sharing_the_kv_post_each_entry_once_between_them() {
    let receiver = Receiver::start(|_: &Value| {
        Reply::After(
            Box::pin(tokio::time::sleep(Duration::from_millis(50))),
            StatusCode::OK,
        )
    })
    .await;
    let planned: Vec<Entry> = (0..6).map(|i| entry(T0 + i, &format!("ns/r{i}"))).collect();
    let mut fixture = Fixture::with(&receiver.url(), &planned, Duration::from_secs(5), true).await;
    let mut other = Deliverer::new(
        DeliveryParts {
            kv: fixture.kv.clone(),
            clock: fixture.clock.clone(),
            metrics: Arc::new(Metrics::new()),
            node: "host-b".into(),
            shares_kv: true,
        },
        fixture.deliverer.settings.clone(),
    );
    let stopping = fixture.stopping.clone();
    let (a, b) = tokio::join!(fixture.pass(), other.pass(&stopping));
    let b = b.unwrap();
    assert_eq!(a.delivered + b.delivered, 6, "{a:?} {b:?}");
    assert!(
        a.delivered > 0 && b.delivered > 0,
        "both took part: {a:?} {b:?}"
    );
    let mut got = keys(&receiver.seen());
    got.sort();
    let mut want: Vec<String> = planned.iter().map(Entry::idempotency_key).collect();
    want.sort();
    assert_eq!(got, want, "each posted once");
    assert!(fixture.rows().await.is_empty());
}
