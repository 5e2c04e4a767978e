//! Scale-out under crashes: three `custodian serve` processes share a
//! three-member etcd cluster (the KV) and one S3 server (the stores). Fifty
//! takedowns run to `purged` while a random host and a random etcd member
//! are killed with SIGKILL and restarted every few seconds.
//!
//! What must hold:
//! - every API request completes (retried on another host when the one it
//!   reached died): status polls, and object writes and reads made
//!   throughout, each object reading back as written;
//! - takedowns filed during the chaos with an `Idempotency-Key` are filed
//!   once each, however often a lost answer made the client retry;
//! - every request's preserved pieces are all there, once each, once it is
//!   verified (a legal hold keeps its purge away until the test has
//!   looked), and none is left after its purge;
//! - no policy transition is audited twice;
//! - every timer step is committed exactly once: the audit's step numbers
//!   of each timer are 1..=n without a repeat, and n is the timer's own
//!   step count in the KV;
//! - every host did part of the work.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use custodian::kv::etcd::local_server::EtcdCluster;
use custodian::object::s3::local_server::{self, Kind};
use custodian::object::{ObjectError, ObjectStore};
use serde_json::{Value, json};

use crate::server::{Server, agent, bearer, json_body};
use crate::support::{Rng, custodian, outcome};
use crate::takedown::{events_by, noise};

const HOSTS: usize = 3;
const TAKEDOWNS: usize = 50;
/// Of those, filed once the chaos has begun, each under its own key.
const FILED_DURING_CHAOS: usize = 10;
const FILES: usize = 4;
/// Short: a legal hold, set when a request is filed and released once the
/// test has checked its pieces, keeps the purge away until then.
const RETENTION_MS: u64 = 5_000;
/// How long a request may keep failing over before the test gives up: a
/// restart of a host or of an etcd member (with its election) fits many
/// times over.
const REQUEST_PATIENCE: Duration = Duration::from_secs(60);
const DEADLINE: Duration = Duration::from_secs(600);

/// The client's view of the system: where the hosts listen (a restarted
/// host listens on a new port), and what its requests have met.
struct System {
    bases: Arc<Mutex<Vec<String>>>,
    rng: Rng,
    /// Attempts that failed over to another host (a dead host, a 5xx).
    retries: u64,
    /// Requests made.
    requests: u64,
    /// Objects written and read back during the chaos.
    objects: u64,
    /// Keyed filings whose retry found the filing done (200, replayed).
    replayed: u64,
}

impl System {
    /// Sends `call` to a random running host until one answers below 500
    /// with a whole body; the status and the body as JSON.
    fn request(
        &mut self,
        what: &str,
        call: impl Fn(&ureq::Agent, &str) -> Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> (u16, Value) {
        let (status, bytes) = self.request_bytes(what, call);
        let value = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        (status, value)
    }

    /// [`System::request`], with the body as bytes.
    fn request_bytes(
        &mut self,
        what: &str,
        call: impl Fn(&ureq::Agent, &str) -> Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> (u16, Vec<u8>) {
        self.requests += 1;
        let agent = agent();
        let started = Instant::now();
        let mut last = String::new();
        while started.elapsed() < REQUEST_PATIENCE {
            // Any host, dead or alive, as a load balancer without health
            // checks would pick: a dead one refuses the connection.
            let index = self.rng.below(HOSTS as u64) as usize;
            let base = self.bases.lock().unwrap()[index].clone();
            match call(&agent, &base) {
                Ok(mut response) if response.status().as_u16() < 500 => {
                    let status = response.status().as_u16();
                    match response
                        .body_mut()
                        .with_config()
                        .limit(1 << 20)
                        .read_to_vec()
                    {
                        Ok(bytes) => return (status, bytes),
                        // The host died while it answered.
                        Err(e) => last = format!("reading the body: {e}"),
                    }
                }
                Ok(response) => last = format!("status {}", response.status()),
                Err(e) => last = e.to_string(),
            }
            self.retries += 1;
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("{what} did not complete within {REQUEST_PATIENCE:?}: {last}");
    }

    fn get(&mut self, path: &str) -> (u16, Value) {
        self.request(&format!("GET {path}"), |agent, base| {
            agent
                .get(&format!("{base}{path}"))
                .header("authorization", &bearer())
                .call()
        })
    }

    /// Publishes a fresh object through one host and reads it back
    /// through another. A create that committed on a host that died
    /// before answering is retried and finds the key taken (412): then the
    /// stored bytes must be this request's.
    fn put_and_get(&mut self) {
        let n = self.objects;
        self.objects += 1;
        let bytes = noise(16 * 1024, 1_000 + n);
        let path = format!("/v1/stores/serving/objects/chaos/{n}");
        let (status, body) = self.request(&format!("PUT {path}"), |agent, base| {
            agent
                .put(&format!("{base}{path}"))
                .header("authorization", &bearer())
                .header("if-none-match", "*")
                .send(&bytes[..])
        });
        assert!(
            status == 201 || status == 412,
            "PUT {path}: {status} {body}"
        );
        let (status, got) = self.request_bytes(&format!("GET {path}"), |agent, base| {
            agent
                .get(&format!("{base}{path}"))
                .header("authorization", &bearer())
                .call()
        });
        assert_eq!(status, 200, "GET {path}");
        assert!(got == bytes, "GET {path}: the bytes differ from the PUT's");
    }

    /// Files a takedown of `objects` under the idempotency key `key`,
    /// retried like any request: a retry after a lost answer finds the
    /// filing done (200, replayed) instead of filing it again.
    fn file(&mut self, objects: &[String], key: &str) -> String {
        let body = json_body(json!({"repository": "acme/site", "objects": objects}));
        let (status, created) = self.request("a takedown", |agent, base| {
            agent
                .post(&format!("{base}/v1/takedowns"))
                .header("authorization", &bearer())
                .header("content-type", "application/json")
                .header("idempotency-key", key)
                .send(&body[..])
        });
        assert!(status == 201 || status == 200, "{status} {created}");
        if status == 200 {
            assert_eq!(created["replayed"], true, "{created}");
            self.replayed += 1;
        }
        created["id"].as_str().unwrap().to_owned()
    }

    /// Sets or clears request `id`'s legal hold (idempotent, so a retry
    /// after an unknown outcome is harmless).
    fn hold(&mut self, id: &str, enabled: bool) {
        let path = format!("/v1/takedowns/{id}/hold");
        let body = json_body(json!({ "enabled": enabled }));
        let (status, answer) = self.request(&format!("PUT {path}"), |agent, base| {
            agent
                .put(&format!("{base}{path}"))
                .header("authorization", &bearer())
                .header("content-type", "application/json")
                .send(&body[..])
        });
        assert_eq!(status, 200, "PUT {path}: {answer}");
    }

    /// Every record of the audit log, oldest first.
    fn audit(&mut self) -> Vec<Value> {
        let mut out = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let path = match &cursor {
                Some(c) => format!("/v1/audit?limit=1000&cursor={c}"),
                None => "/v1/audit?limit=1000".to_owned(),
            };
            let (status, body) = self.get(&path);
            assert_eq!(status, 200, "{body}");
            out.extend(body["records"].as_array().unwrap().iter().cloned());
            match body["next_cursor"].as_str() {
                Some(next) => cursor = Some(next.to_owned()),
                None => return out,
            }
        }
    }
}

/// The `preserved` bucket, read directly.
struct Preserved {
    store: custodian::object::s3::S3Store,
    /// The runtime the store's client was made on, which drives it.
    io: tokio::runtime::Runtime,
}

impl Preserved {
    /// Current objects under `prefix`.
    fn current(&self, prefix: &str) -> usize {
        self.count(prefix, false)
    }

    /// Stored versions and delete markers under `prefix`.
    fn versions(&self, prefix: &str) -> usize {
        self.count(prefix, true)
    }

    /// Objects (or all `versions`) under `prefix`, every page counted.
    /// A page the S3 server fails to list (moto answers an occasional 500
    /// while the hosts write the same bucket) is asked for again, a few
    /// times, as the hosts' own steps would retry it.
    fn count(&self, prefix: &str, versions: bool) -> usize {
        self.io.block_on(async {
            let (mut count, mut cursor) = (0, None::<String>);
            loop {
                let mut attempts = 0;
                let (items, next) = loop {
                    let page = if versions {
                        let page = self.store.list_versions(prefix, cursor.as_deref(), 1000);
                        page.await.map(|p| (p.items.len(), p.next))
                    } else {
                        let page = self.store.list(prefix, cursor.as_deref(), 1000);
                        page.await.map(|p| (p.items.len(), p.next))
                    };
                    match page {
                        Err(ObjectError::Unavailable(_)) if attempts < 5 => {
                            attempts += 1;
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                        page => break page.unwrap(),
                    }
                };
                count += items;
                match next {
                    Some(next) => cursor = Some(next),
                    None => return count,
                }
            }
        })
    }
}

fn config(etcd: &[String], prefix: &str, s3: &str, serving: &str, preserved: &str) -> String {
    let endpoints: Vec<String> = etcd.iter().map(|e| format!("{e:?}")).collect();
    format!(
        "[server]\nworkers = 2\n\n\
         [kv]\nbackend = \"etcd\"\nendpoints = [{}]\nprefix = \"{prefix}\"\nrequest_timeout_ms = 3000\n\n\
         [retention]\nretention_ms = {RETENTION_MS}\n\n\
         [stores.serving]\nurl = \"s3://{serving}\"\nendpoint = \"{s3}\"\nregion = \"us-east-1\"\n\n\
         [stores.preserved]\nurl = \"s3://{preserved}\"\nendpoint = \"{s3}\"\nregion = \"us-east-1\"\n",
        endpoints.join(", ")
    )
}

#[test]
fn three_hosts_on_etcd_and_s3_finish_fifty_takedowns_exactly_once_while_hosts_and_members_die() {
    let Some(etcd) = EtcdCluster::start_or_skip(3) else {
        return;
    };
    let Some(s3) = local_server::server(Kind::Moto) else {
        return;
    };
    let io = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let serving = io.block_on(local_server::store(Kind::Moto)).unwrap();
    let preserved = Preserved {
        store: io.block_on(local_server::store(Kind::Moto)).unwrap(),
        io,
    };
    let mut rng = Rng::from_env();
    let prefix = format!("e2e-{}/", rng.below(1 << 40));
    let config = config(
        &etcd.endpoints(),
        &prefix,
        &s3.endpoint,
        serving.bucket(),
        preserved.store.bucket(),
    );
    let credentials = local_server::credentials();
    let env = [
        ("AWS_ACCESS_KEY_ID", credentials.access_key_id()),
        ("AWS_SECRET_ACCESS_KEY", credentials.secret_access_key()),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ];
    let hosts: Vec<Server> = (0..HOSTS)
        .map(|_| Server::start_in_env(&config, &[], &env, |_| {}))
        .collect();
    let bases = Arc::new(Mutex::new(hosts.iter().map(|h| h.base.clone()).collect()));
    let mut system = System {
        bases: bases.clone(),
        rng,
        retries: 0,
        requests: 0,
        objects: 0,
        replayed: 0,
    };

    // Content, then the takedowns, each over all of it.
    let ids: Vec<String> = (0..FILES)
        .map(|i| {
            let bytes = noise(20_000 + i * 4_321, i as u64 + 1);
            let path = format!("/v1/repos/acme/site/files/f{i}.bin");
            let (status, body) = system.request("a push", |agent, base| {
                agent
                    .put(&format!("{base}{path}"))
                    .header("authorization", &bearer())
                    .send(&bytes[..])
            });
            assert_eq!(status, 200, "{body}");
            body["id"].as_str().unwrap().to_owned()
        })
        .collect();
    let mut requests: Vec<String> = (0..TAKEDOWNS - FILED_DURING_CHAOS)
        .map(|n| {
            let id = system.file(&ids, &format!("before-{n}"));
            system.hold(&id, true);
            id
        })
        .collect();

    // Chaos until every request is purged, while the requests are polled;
    // each request's pieces are checked the first time it is seen verified.
    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicU32::new(0));
    let chaos = Chaos {
        hosts,
        etcd,
        bases,
        rng: Rng::from_env(),
        stop: stop.clone(),
        rounds: rounds.clone(),
    };
    let chaos = std::thread::spawn(move || chaos.run());
    let started = Instant::now();
    let mut checked: BTreeSet<String> = BTreeSet::new();
    let mut purged: BTreeSet<String> = BTreeSet::new();
    while purged.len() < TAKEDOWNS {
        assert!(
            started.elapsed() < DEADLINE,
            "{} of {TAKEDOWNS} purged after {DEADLINE:?}",
            purged.len()
        );
        // One more filing per round of kills, so each meets kills along the
        // way, and the work lasts at least FILED_DURING_CHAOS rounds however
        // fast the requests run.
        let n = requests.len() + FILED_DURING_CHAOS - TAKEDOWNS;
        if n < FILED_DURING_CHAOS && rounds.load(Ordering::Relaxed) as usize > n {
            let id = system.file(&ids, &format!("during-{n}"));
            system.hold(&id, true);
            requests.push(id);
        }
        poll(
            &mut system,
            &requests,
            &mut checked,
            &mut purged,
            &preserved,
        );
    }
    stop.store(true, Ordering::Relaxed);
    let (_hosts, _etcd) = chaos.join().expect("the chaos thread");
    let kills = rounds.load(Ordering::Relaxed);
    let (host_kills, member_kills) = (kills, kills);
    eprintln!(
        "purged {TAKEDOWNS} takedowns in {:?}: {host_kills} host kills, {member_kills} etcd member \
         kills, {} requests ({} objects written and read back), {} failed over, {} keyed \
         filings replayed",
        started.elapsed(),
        system.requests,
        system.objects,
        system.retries,
        system.replayed
    );
    assert!(host_kills >= 5, "too few kills to prove anything");
    assert_eq!(
        checked.len(),
        TAKEDOWNS,
        "every request's pieces were checked before its purge"
    );

    // Purged: no piece and no version of one is left.
    assert_eq!(preserved.current("pieces/"), 0);
    assert_eq!(preserved.versions("pieces/"), 0, "no version kept");

    let records = system.audit();
    let filed: Vec<&Value> = records
        .iter()
        .filter(|r| r["event"] == "takedown/create")
        .collect();
    assert_eq!(filed.len(), TAKEDOWNS, "each takedown filed once");
    assert_steps_committed_once(&mut system, &records);
    assert_transitions_audited_once(&records, &requests, FILES);
}

/// Polls every request's status once, checking the pieces of requests
/// newly seen verified and not yet purging (then releasing their hold),
/// and noting the purged ones; then writes and reads an object.
fn poll(
    system: &mut System,
    requests: &[String],
    checked: &mut BTreeSet<String>,
    purged: &mut BTreeSet<String>,
    preserved: &Preserved,
) {
    for id in requests {
        if purged.contains(id) {
            continue;
        }
        let (status, body) = system.get(&format!("/v1/takedowns/{id}"));
        assert_eq!(status, 200, "{body}");
        let verified = body["verification"] == "verified";
        match body["phase"].as_str().unwrap() {
            "closure" | "discover" | "remove" | "retain" if verified && !checked.contains(id) => {
                check_verified(id, &body, preserved);
                checked.insert(id.clone());
                system.hold(id, false);
            }
            "purged" => {
                purged.insert(id.clone());
            }
            _ => {}
        }
    }
    system.put_and_get();
}

/// Kills a random host and a random etcd member every few seconds and
/// restarts them, until told to stop.
struct Chaos {
    hosts: Vec<Server>,
    etcd: EtcdCluster,
    bases: Arc<Mutex<Vec<String>>>,
    rng: Rng,
    stop: Arc<AtomicBool>,
    /// Rounds of kills made so far.
    rounds: Arc<AtomicU32>,
}

impl Chaos {
    /// Runs until stopped; hands back the hosts and the cluster (to be
    /// dropped, which stops them, after the test's last request).
    fn run(mut self) -> (Vec<Server>, EtcdCluster) {
        while !self.stop.load(Ordering::Relaxed) {
            let host = self.rng.below(HOSTS as u64) as usize;
            let member = self.rng.below(self.etcd.members() as u64) as usize;
            self.hosts[host].kill();
            self.etcd.kill(member);
            self.rounds.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(500 + self.rng.below(1_500)));
            self.etcd.restart(member).expect("the member restarts");
            self.hosts[host].restart();
            self.bases.lock().unwrap()[host] = self.hosts[host].base.clone();
            std::thread::sleep(Duration::from_millis(1_000 + self.rng.below(2_000)));
        }
        (self.hosts, self.etcd)
    }
}

/// A verified request before its purge: exactly one stored version of each
/// recorded piece (a piece written twice would have two).
fn check_verified(id: &str, status: &Value, preserved: &Preserved) {
    assert_eq!(status["verification"], "verified", "{status}");
    let pieces = status["counts"]["pieces"].as_u64().unwrap() as usize;
    assert!(pieces >= FILES, "{status}");
    let prefix = format!("pieces/{id}/");
    assert_eq!(
        preserved.current(&prefix),
        pieces,
        "no piece lost: {status}"
    );
    assert_eq!(
        preserved.versions(&prefix),
        pieces,
        "one version per piece, none written twice"
    );
}

/// Each timer's committed steps, from the audit, are 1..=n with no
/// repeat, and n is the step count its row in the KV holds.
fn assert_steps_committed_once(system: &mut System, records: &[Value]) {
    let mut steps: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let mut by_node: BTreeMap<String, u64> = BTreeMap::new();
    for record in records.iter().filter(|r| r["actor"] == "system:timer") {
        // "step N by plugin:takedown@HASH on NODE.wI under authority G; …"
        let detail = record["detail"].as_str().unwrap();
        let worker = detail
            .split(" on ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .unwrap_or_else(|| panic!("no worker in {detail:?}"));
        let node = worker.rsplit_once('.').unwrap().0.to_owned();
        *by_node.entry(node).or_default() += 1;
        let targets = record["targets"].as_array().unwrap();
        let timer = targets[0].as_str().unwrap().to_owned();
        let step = targets[1]
            .as_str()
            .unwrap()
            .strip_prefix("step:")
            .unwrap()
            .parse()
            .unwrap();
        steps.entry(timer).or_default().push(step);
    }
    let (status, body) = system.get("/v1/timers?limit=1000");
    assert_eq!(status, 200, "{body}");
    let timers = body["timers"].as_array().unwrap();
    assert_eq!(timers.len(), TAKEDOWNS, "{body}");
    for timer in timers {
        let name = format!(
            "timer:{}/{}",
            timer["kind"].as_str().unwrap(),
            timer["reference"].as_str().unwrap()
        );
        let committed = timer["steps"].as_u64().unwrap();
        let mut audited = steps.remove(&name).unwrap_or_default();
        audited.sort_unstable();
        let expected: Vec<u64> = (1..=committed).collect();
        assert_eq!(
            audited, expected,
            "{name}: the audited steps are each committed step exactly once"
        );
    }
    assert!(steps.is_empty(), "steps of unknown timers: {steps:?}");
    eprintln!("steps committed by node: {by_node:?}");
    assert_eq!(
        by_node.len(),
        HOSTS,
        "every host committed steps: {by_node:?}"
    );
}

/// Transitions that happen once per request are audited once; each source
/// is selected once; each piece is deleted at most once per purge pass.
fn assert_transitions_audited_once(records: &[Value], requests: &[String], files: usize) {
    let events = events_by(records, "plugin:takedown");
    // Plain files have no manifest closure to wait for; the purge's hourly
    // re-sweep comes long after the test, so each request had one pass.
    for once in [
        "PreservationVerified",
        "PreservationDiscoveryComplete",
        "PreservationPurgeStarted",
        "PreservationPurgeComplete",
    ] {
        let firsts: Vec<&String> = events
            .iter()
            .filter(|(e, _, _)| e == once)
            .map(|(_, targets, _)| &targets[0])
            .collect();
        let distinct: BTreeSet<&String> = firsts.iter().copied().collect();
        assert_eq!(
            firsts.len(),
            requests.len(),
            "{once} audited once per request"
        );
        assert_eq!(
            distinct.len(),
            requests.len(),
            "{once}: one for each request"
        );
    }
    let mut selected: BTreeMap<&[String], u32> = BTreeMap::new();
    let mut deleted: BTreeMap<&[String], u32> = BTreeMap::new();
    for (event, targets, detail) in &events {
        match event.as_str() {
            "PreservationSourceSelected" => *selected.entry(targets).or_default() += 1,
            "PreservationPiecePurged" if detail.as_deref() == Some("deleted") => {
                *deleted.entry(targets).or_default() += 1;
            }
            _ => {}
        }
    }
    assert_eq!(selected.len(), requests.len() * files);
    assert!(selected.values().all(|n| *n == 1), "{selected:?}");
    assert!(
        deleted.values().all(|n| *n == 1),
        "a piece deleted twice: {deleted:?}"
    );
}

#[test]
fn a_host_that_cannot_reach_etcd_or_names_a_bad_prefix_exits_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("custodian.toml");
    // A port nothing listens on once the probe is dropped.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let serve = |text: String| {
        std::fs::write(&config, text).unwrap();
        let mut child = custodian()
            .args(["serve", "--listen", "127.0.0.1:0", "--data"])
            .arg(dir.path().join("data"))
            .arg("--config")
            .arg(&config)
            .env("CUSTODIAN_TOKEN", crate::server::TOKEN)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let output = child.wait_with_output().unwrap();
                panic!(
                    "the host kept running without etcd: {}",
                    String::from_utf8_lossy(&output.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        outcome(&child.wait_with_output().unwrap())
    };
    let etcd = |extra: &str| {
        format!(
            "[kv]\nbackend = \"etcd\"\nendpoints = [\"http://127.0.0.1:{port}\"]\n\
             request_timeout_ms = 500\n{extra}"
        )
    };

    let started = Instant::now();
    let (code, stdout, stderr) = serve(etcd(""));
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(&format!("cannot reach etcd at http://127.0.0.1:{port}")),
        "{stderr}"
    );
    assert!(stdout.is_empty(), "it never listened: {stdout}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "it gave up within its request timeout, not after {:?}",
        started.elapsed()
    );

    let (code, _, stderr) = serve(etcd("prefix = \"no-slash\"\n"));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("must be empty or end in '/'"), "{stderr}");
}
