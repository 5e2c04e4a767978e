//! Takedown steps per second with 1, 2 and 3 `custodian serve` hosts
//! sharing one etcd cluster and one S3 server, and what each step costs
//! the KV:
//!
//! ```text
//! cargo bench -p custodian --features local-servers --bench scale_out [-- TAKEDOWNS [MEMBERS]] [workers=N] [config=FILE]
//! ```
//!
//! Needs `etcd` (Debian: `etcd-server`) and moto (`CUSTODIAN_MOTO_SERVER`,
//! as `.ci/run` installs it). For each host count it starts that many
//! hosts (2 worker loops each, or `workers=N`) on a fresh key prefix and fresh buckets,
//! pushes 4 files for every 64 requests (the most the contract lets deny
//! one object), files TAKEDOWNS requests (default 150) over them, each
//! naming one group of 4, with a retention of an hour, and times how long the hosts take to bring every
//! request to `retain` (acquisition, closure, verification, discovery: the
//! steps that do work). Steps per second is the timers' committed steps
//! over that time. From each host's `/metrics` it then reads the KV calls
//! and batch sizes, per step and per request: all of the run's, and
//! those from the first filing on (without the hosts' start and the
//! push), and those last by operation (`get`, `get_many`, `scan`,
//! `read`, `apply`), to tell which reads grow as hosts are added.
//!
//! Every process (etcd members, moto, the hosts) shares this machine's
//! cores: compare ratios between host counts, not absolutes, and expect
//! the ratio to be bounded by the core count.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use custodian::kv::etcd::local_server::EtcdCluster;
use custodian::object::s3::local_server::{self, Kind};
use custodian_contract::denial::MAX_DENIALS;

#[path = "support/metrics.rs"]
mod metrics;
use metrics::{failed_steps, kv_applies, kv_reads, metric, series};

const TOKEN: &str = "bench-token-0123456789abcdef";
/// Files each request names.
const FILES: usize = 4;

struct Host(Child, String);

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into()
}

fn start_host(dir: &std::path::Path, config: &str, cache: &std::path::Path) -> Host {
    std::fs::create_dir_all(dir).unwrap();
    let config_path = dir.join("custodian.toml");
    std::fs::write(&config_path, config).unwrap();
    let credentials = local_server::credentials();
    let mut child = Command::new(env!("CARGO_BIN_EXE_custodian"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(dir.join("data"))
        .arg("--config")
        .arg(&config_path)
        .env("CUSTODIAN_TOKEN", TOKEN)
        .env("CUSTODIAN_CACHE_DIR", cache)
        .env("AWS_ACCESS_KEY_ID", credentials.access_key_id())
        .env("AWS_SECRET_ACCESS_KEY", credentials.secret_access_key())
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the host starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    Host(child, base)
}

fn json(response: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> serde_json::Value {
    let mut response = response.expect("the host answers");
    let status = response.status();
    let text = response.body_mut().read_to_string().unwrap();
    assert!(status.is_success(), "{status}: {text}");
    serde_json::from_str(&text).unwrap()
}

struct Run {
    hosts: usize,
    steps: u64,
    seconds: f64,
    applies: u64,
    reads: u64,
    batch_ops: u64,
    batch_bytes: u64,
    max_ops: u64,
    max_bytes: u64,
    failed_steps: u64,
    /// KV applies and reads from the first filing on: the takedowns'
    /// own, without the hosts' start (plugin upload, fence leases, the
    /// bootstrap principal) and the files' push.
    work_applies: u64,
    work_reads: u64,
    /// KV calls from the first filing on, by operation, summed over the
    /// hosts: which reads grow as hosts are added.
    work_calls: BTreeMap<String, u64>,
}

/// `host`'s `/metrics` as text.
fn metrics_of(agent: &ureq::Agent, host: &Host) -> String {
    let mut response = agent.get(&format!("{}/metrics", host.1)).call().unwrap();
    response.body_mut().read_to_string().unwrap()
}

/// Every host's KV applies and reads so far, summed, and its KV calls by
/// operation.
fn kv_calls(agent: &ureq::Agent, running: &[Host]) -> (u64, u64, BTreeMap<String, u64>) {
    running.iter().fold(
        (0, 0, BTreeMap::new()),
        |(applies, reads, mut calls), host| {
            let text = metrics_of(agent, host);
            add_calls(&mut calls, &text);
            (applies + kv_applies(&text), reads + kv_reads(&text), calls)
        },
    )
}

/// Adds a host's KV calls by operation, from its metrics `text`, to
/// `calls`.
fn add_calls(calls: &mut BTreeMap<String, u64>, text: &str) {
    for (labels, n) in series(text, "custodian_kv_calls_total") {
        *calls.entry(labels).or_default() += n;
    }
}

/// One round of `hosts` hosts, each running `workers` worker loops;
/// `extra` is appended to their configuration.
fn run(
    hosts: usize,
    takedowns: usize,
    etcd: &EtcdCluster,
    round: usize,
    (workers, extra): (u32, &str),
) -> Run {
    let moto = local_server::server(Kind::Moto).expect("moto runs (CUSTODIAN_MOTO_SERVER)");
    let io = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let serving = io.block_on(local_server::store(Kind::Moto)).unwrap();
    let preserved = io.block_on(local_server::store(Kind::Moto)).unwrap();
    let endpoints: Vec<String> = etcd.endpoints().iter().map(|e| format!("{e:?}")).collect();
    let s3 = &moto.endpoint;
    let config = format!(
        "[server]\nworkers = {workers}\n\n\
         [kv]\nbackend = \"etcd\"\nendpoints = [{}]\nprefix = \"bench-{round}-{hosts}/\"\n\n\
         [retention]\nretention_ms = 3600000\n\n\
         [stores.serving]\nurl = \"s3://{}\"\nendpoint = \"{s3}\"\nregion = \"us-east-1\"\n\n\
         [stores.preserved]\nurl = \"s3://{}\"\nendpoint = \"{s3}\"\nregion = \"us-east-1\"\n\n{extra}",
        endpoints.join(", "),
        serving.bucket(),
        preserved.bucket(),
    );
    let dir = tempfile::tempdir().unwrap();
    let cache = std::env::temp_dir().join("custodian-bench-cache");
    let running: Vec<Host> = (0..hosts)
        .map(|i| start_host(&dir.path().join(format!("host{i}")), &config, &cache))
        .collect();
    let agent = agent();
    let auth = format!("Bearer {TOKEN}");
    let base = &running[0].1;
    // The contract lets at most `MAX_DENIALS` requests deny one object, so
    // the requests take down groups of `FILES` files, each group named by
    // at most that many; the files differ in content, so in id.
    let groups = takedowns.div_ceil(MAX_DENIALS).max(1);
    let bodies: Vec<String> = (0..groups)
        .map(|group| {
            let ids: Vec<String> = (0..FILES)
                .map(|i| {
                    let bytes: Vec<u8> = (0..20_000 + i * 1_000)
                        .map(|b| (b * 7 + i + 31 * group) as u8)
                        .collect();
                    let url = format!("{base}/v1/repos/acme/site/files/g{group}/f{i}.bin");
                    json(
                        agent
                            .put(&url)
                            .header("authorization", &auth)
                            .send(&bytes[..]),
                    )["id"]
                        .as_str()
                        .unwrap()
                        .to_owned()
                })
                .collect();
            serde_json::json!({"repository": "acme/site", "objects": ids}).to_string()
        })
        .collect();
    let before = kv_calls(&agent, &running);
    let started = Instant::now();
    for i in 0..takedowns {
        // Spread over the hosts, as a load balancer would.
        let base = &running[i % hosts].1;
        json(
            agent
                .post(&format!("{base}/v1/takedowns"))
                .header("authorization", &auth)
                .header("content-type", "application/json")
                .send(bodies[i % groups].as_bytes()),
        );
    }
    // Retained: the next step is due at the end of retention, an hour on.
    let steps = loop {
        std::thread::sleep(Duration::from_millis(500));
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let page = json(
            agent
                .get(&format!("{base}/v1/timers?limit=1000"))
                .header("authorization", &auth)
                .call(),
        );
        let timers = page["timers"].as_array().unwrap();
        let retained = timers
            .iter()
            .filter(|t| t["due_ms"].as_u64().unwrap() > now_ms + 30 * 60 * 1000)
            .count();
        if timers.len() == takedowns && retained == takedowns {
            break timers
                .iter()
                .map(|t| t["steps"].as_u64().unwrap())
                .sum::<u64>();
        }
        assert!(
            started.elapsed() < Duration::from_secs(1200),
            "{retained} of {takedowns} retained after 20 minutes"
        );
    };
    let seconds = started.elapsed().as_secs_f64();
    let mut out = Run {
        hosts,
        steps,
        seconds,
        applies: 0,
        reads: 0,
        batch_ops: 0,
        batch_bytes: 0,
        max_ops: 0,
        max_bytes: 0,
        failed_steps: 0,
        work_applies: 0,
        work_reads: 0,
        work_calls: BTreeMap::new(),
    };
    let mut calls = BTreeMap::<String, u64>::new();
    for host in &running {
        let text = metrics_of(&agent, host);
        add_calls(&mut calls, &text);
        out.applies += kv_applies(&text);
        out.reads += kv_reads(&text);
        out.batch_ops += metric(&text, "custodian_kv_batch_ops_total", "");
        out.batch_bytes += metric(&text, "custodian_kv_batch_bytes_total", "");
        out.max_ops = out
            .max_ops
            .max(metric(&text, "custodian_kv_batch_ops_max", ""));
        out.max_bytes = out
            .max_bytes
            .max(metric(&text, "custodian_kv_batch_bytes_max", ""));
        out.failed_steps += failed_steps(&text);
    }
    out.work_applies = out.applies - before.0;
    out.work_reads = out.reads - before.1;
    out.work_calls = calls
        .into_iter()
        .map(|(labels, n)| {
            let earlier = before.2.get(&labels).copied().unwrap_or(0);
            (labels, n - earlier)
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    out
}

/// The value of the command-line argument `NAME=value`, given `NAME=`.
fn named_arg(name: &str) -> Option<String> {
    std::env::args().find_map(|a| a.strip_prefix(name).map(str::to_owned))
}

fn main() {
    // `config=FILE`: appended to every host's configuration (e.g.
    // `[plugins.takedown] path = …`, to measure another build of a policy).
    let extra = named_arg("config=")
        .map(|path| std::fs::read_to_string(&path).expect("the config= file reads"))
        .unwrap_or_default();
    // `workers=N`: worker loops per host (the server's default is 8).
    let workers: u32 = named_arg("workers=")
        .map(|n| n.parse().expect("workers=N takes a number"))
        .unwrap_or(2);
    let mut args = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-') && !a.contains('='));
    let takedowns: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(150);
    let members: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let etcd = EtcdCluster::start(members).expect("etcd runs (apt-get install etcd-server)");
    println!(
        "{takedowns} takedowns of {FILES} files each to `retain`; etcd: {members} member(s); \
         {workers} worker loops per host\n"
    );
    println!(
        "| hosts | steps | seconds | steps/s | vs 1 host | applies/step | reads/step | applies, reads per request | from the first filing: applies, reads per step | ops/batch (mean, max of 128) | bytes/batch (mean, max) | lost or failed |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut reference = None;
    let mut by_operation = Vec::new();
    for (round, hosts) in [1usize, 2, 3].into_iter().enumerate() {
        let r = run(hosts, takedowns, &etcd, round, (workers, &extra));
        by_operation.push(format!(
            "{hosts} host(s): {}",
            r.work_calls
                .iter()
                .map(|(labels, n)| format!("{labels} {:.2}", *n as f64 / r.steps as f64))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        let rate = r.steps as f64 / r.seconds;
        let base = *reference.get_or_insert(rate);
        println!(
            "| {} | {} | {:.1} | {:.1} | {:.2}x | {:.2} | {:.1} | {:.1}, {:.1} | {:.2}, {:.1} | {:.1}, {} | {:.0}, {} | {} |",
            r.hosts,
            r.steps,
            r.seconds,
            rate,
            rate / base,
            r.applies as f64 / r.steps as f64,
            r.reads as f64 / r.steps as f64,
            // How many steps a request takes is the policy's choice (a
            // step may take several objects): per request is the KV's
            // cost of the work itself.
            r.applies as f64 / takedowns as f64,
            r.reads as f64 / takedowns as f64,
            r.work_applies as f64 / r.steps as f64,
            r.work_reads as f64 / r.steps as f64,
            r.batch_ops as f64 / r.applies.max(1) as f64,
            r.max_ops,
            r.batch_bytes as f64 / r.applies.max(1) as f64,
            r.max_bytes,
            r.failed_steps,
        );
    }
    println!("\nKV calls per step from the first filing, by operation:");
    for line in by_operation {
        println!("- {line}");
    }
}
