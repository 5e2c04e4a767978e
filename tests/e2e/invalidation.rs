//! Cache invalidations end to end: a takedown of content five
//! repositories hold plans five invalidations (the real takedown plugin,
//! through `custodian tick`); the real `custodian serve` delivers them to a
//! webhook receiver this test runs on 127.0.0.1 — every one exactly once
//! by its idempotency key, across an outage of the receiver and across a
//! SIGKILL of the host mid-delivery — or leaves them to the pull feed,
//! paged with a cursor and acknowledged through the API and the CLI.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::{Value, json};

use crate::server::{Server, agent, answer, bearer, json_body, wait_for};
use crate::support::{custodian, outcome, run};
use crate::takedown::{MINUTE, RETENTION, T0, ok, push, tick};

/// The repositories holding the content taken down: each gets one
/// invalidation.
const HOLDERS: [&str; 5] = [
    "acme/site",
    "beta/one",
    "gamma/two",
    "delta/three",
    "omega/four",
];

/// How long a test waits for the host to catch up.
const PATIENCE: Duration = Duration::from_secs(60);

/// What the receiver does with a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Answer with this status.
    Answer(u16),
    /// Never answer.
    Stall,
}

/// One delivery as the receiver saw it.
#[derive(Debug, Clone)]
struct Delivery {
    /// The `Idempotency-Key` header.
    header: String,
    body: Value,
    /// What it was answered (`None`: stalled).
    status: Option<u16>,
}

impl Delivery {
    fn key(&self) -> &str {
        self.body["idempotency_key"].as_str().unwrap_or_default()
    }
}

#[derive(Default)]
struct Shared {
    mode: Mutex<Option<Mode>>,
    log: Mutex<Vec<Delivery>>,
}

/// A webhook receiver on 127.0.0.1 that can go down and come back on the
/// same port.
struct Receiver {
    io: tokio::runtime::Runtime,
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: Option<tokio::task::JoinHandle<()>>,
}

impl Receiver {
    fn start(mode: Mode) -> Self {
        let io = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = io
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared::default());
        *shared.mode.lock().unwrap() = Some(mode);
        let mut receiver = Self {
            io,
            addr,
            shared,
            server: None,
        };
        receiver.serve(listener);
        receiver
    }

    fn serve(&mut self, listener: tokio::net::TcpListener) {
        let app = Router::new()
            .route("/invalidate", post(receive))
            .with_state(self.shared.clone());
        self.server = Some(self.io.spawn(async move {
            let _ = axum::serve(listener, app).await;
        }));
    }

    fn url(&self) -> String {
        format!("http://{}/invalidate", self.addr)
    }

    fn set(&self, mode: Mode) {
        *self.shared.mode.lock().unwrap() = Some(mode);
    }

    /// Closes the port: connections are refused until [`Receiver::resume`].
    fn stop(&mut self) {
        if let Some(server) = self.server.take() {
            server.abort();
            let _ = self.io.block_on(server);
        }
    }

    /// Listens again on the same port.
    fn resume(&mut self) {
        let listener = self
            .io
            .block_on(tokio::net::TcpListener::bind(self.addr))
            .unwrap();
        self.serve(listener);
    }

    fn log(&self) -> Vec<Delivery> {
        self.shared.log.lock().unwrap().clone()
    }

    /// How many deliveries of `key` got a 2xx.
    fn accepted(&self, key: &str) -> usize {
        self.log()
            .iter()
            .filter(|d| d.key() == key && d.status.is_some_and(|s| (200..300).contains(&s)))
            .count()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            server.abort();
        }
    }
}

async fn receive(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let mode = shared.mode.lock().unwrap().unwrap_or(Mode::Answer(200));
    let header = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    assert_eq!(content_type, "application/json");
    shared.log.lock().unwrap().push(Delivery {
        header,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        status: match mode {
            Mode::Answer(status) => Some(status),
            Mode::Stall => None,
        },
    });
    match mode {
        Mode::Answer(status) => StatusCode::from_u16(status).unwrap(),
        Mode::Stall => std::future::pending().await,
    }
}

/// Pushes one file into every holder repository, files a takedown of it
/// against `acme/site` and runs its steps through discovery: the outbox
/// then holds one entry per holder. The entries, as `custodian
/// invalidations list --json` shows them.
fn plan_invalidations(data: &Path) -> Vec<Value> {
    let dir = data.parent().unwrap();
    let file = dir.join("shared.txt");
    std::fs::write(&file, b"the same bytes in five repositories\n").unwrap();
    let data = data.to_str().unwrap();
    let mut object = String::new();
    for repo in HOLDERS {
        let pushed = push(data, repo, &[&file]);
        object = pushed["shared.txt"]["id"].as_str().unwrap().to_owned();
    }
    ok(&[
        "takedown",
        "create",
        "acme/site",
        "--object",
        &object,
        "--data",
        data,
        "--now",
        &T0.to_string(),
        "--retention-ms",
        RETENTION,
        "--json",
    ]);
    tick(data, T0, T0 + 10 * MINUTE);
    let listed: Value =
        serde_json::from_str(&ok(&["invalidations", "list", "--data", data, "--json"])).unwrap();
    assert_eq!(listed["next"], Value::Null);
    let entries = listed["entries"].as_array().unwrap().clone();
    let mut repositories: Vec<&str> = entries
        .iter()
        .map(|e| e["repository"].as_str().unwrap())
        .collect();
    repositories.sort_unstable();
    let mut holders = HOLDERS.to_vec();
    holders.sort_unstable();
    assert_eq!(repositories, holders, "one invalidation per holder");
    for entry in &entries {
        assert_eq!(entry["objects"], json!([object]));
        assert_eq!(entry["attempts"], 0);
    }
    entries
}

fn keys(entries: &[Value]) -> Vec<String> {
    entries
        .iter()
        .map(|e| e["idempotency_key"].as_str().unwrap().to_owned())
        .collect()
}

/// The configuration of a server delivering to `url`.
fn webhook_config(url: &str, timeout_ms: u64) -> String {
    format!(
        "[invalidation]\nwebhook = \"{url}\"\ntimeout_ms = {timeout_ms}\n\
         initial_backoff_ms = 100\nmax_backoff_ms = 500\n"
    )
}

/// `GET /v1/invalidations` with `query`.
fn feed(server: &Server, query: &str) -> Value {
    let (status, body) = answer(
        agent()
            .get(&server.url(&format!("/v1/invalidations{query}")))
            .header("authorization", &bearer())
            .call(),
    );
    assert_eq!(status, 200, "{body}");
    body
}

fn ack(server: &Server, ids: Value) -> (u16, Value) {
    answer(
        agent()
            .post(&server.url("/v1/invalidations/ack"))
            .header("authorization", &bearer())
            .header("content-type", "application/json")
            .send(&json_body(json!({ "ids": ids }))),
    )
}

fn pending(server: &Server) -> usize {
    feed(server, "")["entries"].as_array().unwrap().len()
}

/// The value of the metric series `series` (name and labels).
fn metric(server: &Server, series: &str) -> Option<u64> {
    let (status, body) = answer(agent().get(&server.url("/metrics")).call());
    assert_eq!(status, 200);
    body.as_str()
        .unwrap()
        .lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

/// Every planned key got exactly one 2xx, each delivery's header matches
/// its body, and the outbox is empty.
fn assert_each_delivered_once(receiver: &Receiver, server: &Server, planned: &[Value]) {
    for key in keys(planned) {
        assert_eq!(receiver.accepted(&key), 1, "{key}: {:#?}", receiver.log());
    }
    for delivery in receiver.log() {
        assert_eq!(delivery.header, delivery.key());
        assert!(
            keys(planned).iter().any(|k| k == delivery.key()),
            "an unplanned delivery: {delivery:?}"
        );
    }
    assert_eq!(pending(server), 0);
    wait_for("the pending gauge to reach 0", PATIENCE, || {
        metric(server, "custodian_invalidations_pending ") == Some(0)
    });
}

#[test]
fn a_webhook_receives_every_invalidation_exactly_once_by_key_across_an_outage() {
    let mut receiver = Receiver::start(Mode::Answer(503));
    let mut planned = Vec::new();
    let server = Server::start_prepared(&webhook_config(&receiver.url(), 5_000), &[], |data| {
        planned = plan_invalidations(data);
    });
    // The receiver answers 503: each attempt is recorded, none delivered.
    wait_for("three refused deliveries", PATIENCE, || {
        receiver.log().len() >= 3
    });
    assert_eq!(pending(&server), HOLDERS.len());
    // Then it is down altogether.
    receiver.stop();
    wait_for("a delivery refused a connection", PATIENCE, || {
        feed(&server, "")["entries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| {
                e["last_error"]
                    .as_str()
                    .is_some_and(|m| m.contains("cannot connect"))
            })
    });
    let listed = feed(&server, "");
    let failed: Vec<&Value> = listed["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["attempts"].as_u64().unwrap() > 0)
        .collect();
    assert!(!failed.is_empty());
    assert!(
        failed.iter().all(|e| e["next_attempt_ms"].is_u64()),
        "{listed}"
    );
    // Back: everything arrives, once each.
    receiver.set(Mode::Answer(200));
    receiver.resume();
    wait_for("every invalidation delivered", PATIENCE, || {
        pending(&server) == 0
    });
    assert_each_delivered_once(&receiver, &server, &planned);
    let refused = receiver
        .log()
        .iter()
        .filter(|d| d.status == Some(503))
        .count();
    assert!(refused >= 3);
    assert_eq!(
        metric(
            &server,
            "custodian_invalidation_deliveries_total{outcome=\"delivered\"}"
        ),
        Some(HOLDERS.len() as u64)
    );
    let failures = metric(
        &server,
        "custodian_invalidation_deliveries_total{outcome=\"failed\"}",
    )
    .unwrap();
    assert!(
        failures > refused as u64,
        "503s and refused connections: {failures}"
    );
    // Each delivery is audited, naming the entry by its key.
    let (_, audit) = answer(
        agent()
            .get(&server.url("/v1/audit?limit=1000"))
            .header("authorization", &bearer())
            .call(),
    );
    let mut delivered: Vec<String> = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["event"] == "invalidation/delivered")
        .map(|r| r["targets"][0].as_str().unwrap().to_owned())
        .collect();
    delivered.sort();
    let mut want: Vec<String> = keys(&planned)
        .iter()
        .map(|k| format!("invalidation:{k}"))
        .collect();
    want.sort();
    assert_eq!(delivered, want);
}

#[test]
fn a_host_killed_mid_delivery_delivers_the_entry_again_with_the_same_key_after_a_restart() {
    let receiver = Receiver::start(Mode::Stall);
    let mut planned = Vec::new();
    // A timeout far longer than the test waits: the delivery is still in
    // flight when the host dies.
    let mut server =
        Server::start_prepared(&webhook_config(&receiver.url(), 60_000), &[], |data| {
            planned = plan_invalidations(data);
        });
    wait_for("a delivery in flight", PATIENCE, || {
        !receiver.log().is_empty()
    });
    let stalled = receiver.log()[0].clone();
    assert_eq!(stalled.status, None);
    // In planning order: the first entry of the outbox goes first.
    assert_eq!(stalled.key(), keys(&planned)[0]);
    server.kill();
    receiver.set(Mode::Answer(204));
    server.restart();
    wait_for("every invalidation delivered", PATIENCE, || {
        pending(&server) == 0
    });
    assert_each_delivered_once(&receiver, &server, &planned);
    let again: Vec<Delivery> = receiver
        .log()
        .into_iter()
        .filter(|d| d.key() == stalled.key())
        .collect();
    assert_eq!(
        again.len(),
        2,
        "delivered again after the restart: {again:#?}"
    );
    assert_eq!(again[1].header, stalled.header, "the same idempotency key");
    assert_eq!(again[1].body, stalled.body, "the same invalidation");
    assert_eq!(again[1].status, Some(204));
}

#[test]
fn the_pull_feed_pages_with_a_cursor_and_acknowledged_entries_leave_it() {
    let mut planned = Vec::new();
    let mut server = Server::start_prepared("", &[], |data| {
        planned = plan_invalidations(data);
    });
    // Three pages of at most two, in planning order.
    let mut paged = Vec::new();
    let mut query = "?limit=2".to_owned();
    let mut pages = 0;
    loop {
        let page = feed(&server, &query);
        pages += 1;
        let entries = page["entries"].as_array().unwrap();
        assert!(entries.len() <= 2);
        paged.extend(entries.iter().cloned());
        match page["next"].as_str() {
            Some(next) => query = format!("?limit=2&cursor={next}"),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(keys(&paged), keys(&planned));
    let times: Vec<u64> = paged
        .iter()
        .map(|e| e["requested_ms"].as_u64().unwrap())
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    assert!(
        paged.iter().all(|e| e["attempts"] == 0),
        "nothing is posted"
    );

    // Acknowledge the first page and an id the outbox does not hold.
    let mut ghost_key = hex::decode(paged[0]["id"].as_str().unwrap()).unwrap();
    *ghost_key.last_mut().unwrap() = b'z';
    let ghost = hex::encode(&ghost_key);
    let (status, acked) = ack(&server, json!([paged[0]["id"], paged[1]["id"], ghost]));
    assert_eq!(status, 200, "{acked}");
    assert_eq!(
        acked["acknowledged"],
        json!([paged[0]["id"], paged[1]["id"]])
    );
    assert_eq!(acked["unknown"], json!([ghost]));
    let (status, again) = ack(&server, json!([paged[0]["id"]]));
    assert_eq!((status, &again["unknown"]), (200, &json!([paged[0]["id"]])));
    let (status, refused) = ack(&server, json!(["not-an-id", paged[2]["id"]]));
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["code"], "invalid_argument");
    assert_eq!(
        keys(&feed(&server, "")["entries"].as_array().unwrap().clone()),
        keys(&paged[2..])
    );
    wait_for("the pending gauge to count three", PATIENCE, || {
        metric(&server, "custodian_invalidations_pending ") == Some(3)
    });

    // On the data directory, once the server is gone: the CLI.
    assert!(server.terminate().success());
    let data = server.data.to_str().unwrap().to_owned();
    let listed: Value = serde_json::from_str(&ok(&[
        "invalidations",
        "list",
        "--data",
        &data,
        "--limit",
        "1",
        "--json",
    ]))
    .unwrap();
    assert_eq!(
        keys(listed["entries"].as_array().unwrap()),
        keys(&paged[2..3])
    );
    let cursor = listed["next"].as_str().unwrap().to_owned();
    let text = ok(&[
        "invalidations",
        "list",
        "--data",
        &data,
        "--cursor",
        &cursor,
    ]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    let third = paged[3]["id"].as_str().unwrap();
    assert!(
        lines[0].starts_with(third) && lines[0].contains("attempts 0"),
        "{text}"
    );

    let (code, _, stderr) = outcome(&run(&["invalidations", "ack", "xyz", "--data", &data]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("not an invalidation id"), "{stderr}");
    let acked: Value = serde_json::from_str(&ok(&[
        "invalidations",
        "ack",
        paged[2]["id"].as_str().unwrap(),
        "--data",
        &data,
        "--operator",
        "e2e",
        "--json",
    ]))
    .unwrap();
    assert_eq!(acked["acknowledged"], json!([paged[2]["id"]]));
    // The rest through stdin, as a script pipes them.
    let rest = format!(
        "{}\n{}\n",
        paged[3]["id"].as_str().unwrap(),
        paged[4]["id"].as_str().unwrap()
    );
    let mut child = custodian()
        .args([
            "invalidations",
            "ack",
            "-",
            "--data",
            &data,
            "--operator",
            "e2e",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), rest.as_bytes()).unwrap();
    let (code, stdout, stderr) = outcome(&child.wait_with_output().unwrap());
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.starts_with("acknowledged "))
            .count(),
        2
    );
    let empty: Value =
        serde_json::from_str(&ok(&["invalidations", "list", "--data", &data, "--json"])).unwrap();
    assert_eq!(empty, json!({"entries": [], "next": null}));
    // Every acknowledgement is audited under who made it.
    let audit = ok(&["audit", "--data", &data, "--json"]);
    let actors: Vec<String> = audit
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["event"] == "invalidation/ack")
        .map(|r| r["actor"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(actors, ["principal:admin", "operator:e2e", "operator:e2e"]);
}
