//! A soak run of `custodian serve` on the embedded default: mixed object,
//! takedown and plugin-swap traffic for a bounded time, reporting the
//! server's resident memory and the object requests' p99 latency over
//! time.
//!
//! ```text
//! cargo bench -p custodian --bench soak [-- SECONDS [INTERVAL [SWAP_EVERY [KV_CACHE_MIB]]]]
//! ```
//!
//! For SECONDS (default 600) it runs, against one server (the release
//! binary, redb and the filesystem store on disk, real clock):
//! - 4 object clients, each a loop of `PUT` of a 16 KiB object to one of
//!   4 096 keys then `GET` of it (so the store's size levels off);
//! - a takedown client: every 2 s it pushes 8 new 1 KiB files to a
//!   repository and files a takedown of them (each request then runs its
//!   steps to `retain` on the timer workers);
//! - a swapper: every SWAP_EVERY s (default 60) it swaps the takedown
//!   plugin between two builds
//!   (the bundled one and the same bytes with a custom section: two
//!   hashes), each swap proved, fenced and audited, then on probation.
//!
//! The server runs with its default settings, but for `[kv] cache_mib`
//! when KV_CACHE_MIB is given.
//!
//! Every INTERVAL seconds (default 30) it prints the server's RSS (VmRSS
//! from `/proc`), the size of its KV file (whose pages redb caches up to
//! `cache_mib`), and the p99 and count of the interval's object requests;
//! at the end, the RSS growth from the end of warm-up (the first fifth of
//! the run) to the end, and the whole run's p99. Run it on an otherwise
//! idle machine: the clients share its cores with the server.

use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[path = "support/server.rs"]
mod server;
use server::{Server, TOKEN};
#[path = "support/builds.rs"]
mod builds;
use builds::takedown_builds;

/// Object clients.
const CLIENTS: usize = 4;
/// Distinct object keys the clients cycle through.
const KEYS: u64 = 4_096;
/// Object body size.
const BODY: usize = 16 * 1024;

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into()
}

fn bearer() -> String {
    format!("Bearer {TOKEN}")
}

/// Resident memory of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Size of the file at `path`, in MiB (0 when it cannot be read).
fn file_mib(path: &std::path::Path) -> f64 {
    std::fs::metadata(path).map_or(0.0, |m| m.len() as f64 / (1024.0 * 1024.0))
}

/// The `q` quantile of `samples` (µs), in ms.
fn quantile_ms(samples: &mut [u64], q: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    samples.sort_unstable();
    let index = ((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1;
    samples[index] as f64 / 1e3
}

fn object_client(
    base: String,
    client: u64,
    stop: Arc<AtomicBool>,
    latencies: Arc<Mutex<Vec<u64>>>,
) {
    let agent = agent();
    let body = vec![client as u8; BODY];
    let mut n = client;
    while !stop.load(Ordering::Relaxed) {
        let url = format!("{base}/v1/stores/serving/objects/soak/{}", n % KEYS);
        n += CLIENTS as u64;
        let started = Instant::now();
        // Overwrites on purpose: the key set stays the same size.
        let put = agent
            .put(&url)
            .header("authorization", &bearer())
            .header("x-custodian-unconditional", "true")
            .send(&body[..]);
        let put_us = started.elapsed().as_micros() as u64;
        let started = Instant::now();
        let get = agent.get(&url).header("authorization", &bearer()).call();
        let get_us = started.elapsed().as_micros() as u64;
        let check = |what: &str, r: Result<ureq::http::Response<ureq::Body>, ureq::Error>| {
            let mut r = r.unwrap_or_else(|e| panic!("{what} {url}: {e}"));
            let body = r.body_mut().read_to_vec().unwrap_or_default();
            assert!(
                r.status().is_success(),
                "{what} {url}: {} {}",
                r.status(),
                String::from_utf8_lossy(&body)
            );
        };
        check("PUT", put);
        check("GET", get);
        latencies.lock().unwrap().extend([put_us, get_us]);
    }
}

fn takedown_client(base: String, stop: Arc<AtomicBool>, filed: Arc<AtomicU64>) {
    let agent = agent();
    let mut round = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let mut objects = Vec::new();
        for file in 0..8 {
            let url = format!("{base}/v1/repos/soak/r{round}/files/f{file}.txt");
            let body = format!("soak round {round} file {file} {}", "x".repeat(1000));
            let mut response = agent
                .put(&url)
                .header("authorization", &bearer())
                .send(body.as_bytes())
                .expect("the server answers");
            let text = response.body_mut().read_to_string().unwrap_or_default();
            assert!(response.status().is_success(), "push: {text}");
            let answer: serde_json::Value = serde_json::from_str(&text).unwrap();
            objects.push(answer["id"].as_str().expect("an object id").to_owned());
        }
        let request = serde_json::json!({
            "repository": format!("soak/r{round}"),
            "objects": objects,
        });
        let mut response = agent
            .post(&format!("{base}/v1/takedowns"))
            .header("authorization", &bearer())
            .header("content-type", "application/json")
            .send(request.to_string().as_bytes())
            .expect("the server answers");
        let text = response.body_mut().read_to_string().unwrap_or_default();
        assert!(response.status().is_success(), "file: {text}");
        filed.fetch_add(1, Ordering::Relaxed);
        round += 1;
        std::thread::sleep(Duration::from_secs(2));
    }
}

fn swapper(
    base: String,
    builds: [Vec<u8>; 2],
    every: Duration,
    stop: Arc<AtomicBool>,
    swaps: Arc<AtomicU64>,
) {
    let agent = agent();
    let mut next = 1;
    let mut last = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(200));
        if last.elapsed() < every {
            continue;
        }
        last = Instant::now();
        let mut response = agent
            .put(&format!("{base}/v1/plugins/takedown"))
            .header("authorization", &bearer())
            .send(&builds[next][..])
            .expect("the server answers");
        let text = response.body_mut().read_to_string().unwrap_or_default();
        assert!(response.status().is_success(), "swap: {text}");
        swaps.fetch_add(1, Ordering::Relaxed);
        next = 1 - next;
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let seconds: u64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(600);
    let interval: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(30);
    let swap_every: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(60);
    let dir = tempfile::tempdir().unwrap();
    let builds = takedown_builds("custodian-soak");
    let kv_cache_mib: Option<u64> = args.get(3).and_then(|a| a.parse().ok());
    let mut command = Command::new(env!("CARGO_BIN_EXE_custodian"));
    command.env("CUSTODIAN_CACHE_DIR", dir.path().join("cache"));
    if let Some(mib) = kv_cache_mib {
        let config = dir.path().join("custodian.toml");
        std::fs::write(&config, format!("[kv]\ncache_mib = {mib}\n")).unwrap();
        command.arg("--config").arg(config);
    }
    let data = dir.path().join("data");
    let server = Server::start(command, &["--data".as_ref(), data.as_os_str()]);
    let pid = server.pid();

    let stop = Arc::new(AtomicBool::new(false));
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let (filed, swaps) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut threads = Vec::new();
    for client in 0..CLIENTS as u64 {
        let (base, stop, latencies) = (server.base.clone(), stop.clone(), latencies.clone());
        threads.push(std::thread::spawn(move || {
            object_client(base, client, stop, latencies);
        }));
    }
    {
        let (base, stop, filed) = (server.base.clone(), stop.clone(), filed.clone());
        threads.push(std::thread::spawn(move || {
            takedown_client(base, stop, filed)
        }));
    }
    {
        let (base, stop, swaps) = (server.base.clone(), stop.clone(), swaps.clone());
        let every = Duration::from_secs(swap_every);
        threads.push(std::thread::spawn(move || {
            swapper(base, builds, every, stop, swaps);
        }));
    }

    println!(
        "soak: custodian serve on the embedded default (redb + fs, real clock), {seconds} s; \
         {CLIENTS} object clients (PUT+GET 16 KiB over {KEYS} keys), a takedown of 8 new files \
         every 2 s, a takedown plugin swap every {swap_every} s; [kv] cache_mib = {}",
        kv_cache_mib.map_or("default".to_owned(), |m| m.to_string())
    );
    println!(
        "{:>6}  {:>9}  {:>8}  {:>9}  {:>8}  {:>7}  {:>5}",
        "t (s)", "RSS (MiB)", "KV (MiB)", "requests", "p99 (ms)", "filed", "swaps"
    );
    let started = Instant::now();
    let warm_up = Duration::from_secs(seconds / 5);
    let (mut all, mut warm_rss, mut peak) = (Vec::new(), None, 0u64);
    while started.elapsed() < Duration::from_secs(seconds) {
        std::thread::sleep(Duration::from_secs(interval));
        let mut window = std::mem::take(&mut *latencies.lock().unwrap());
        let count = window.len();
        let p99 = quantile_ms(&mut window, 0.99);
        all.extend(window);
        let rss = rss_kib(pid);
        peak = peak.max(rss);
        if warm_rss.is_none() && started.elapsed() >= warm_up {
            warm_rss = Some(rss);
        }
        println!(
            "{:>6}  {:>9.1}  {:>8.1}  {:>9}  {:>8.1}  {:>7}  {:>5}",
            started.elapsed().as_secs(),
            rss as f64 / 1024.0,
            file_mib(&data.join(custodian::data_dir::KV_FILE)),
            count,
            p99,
            filed.load(Ordering::Relaxed),
            swaps.load(Ordering::Relaxed)
        );
    }
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        thread.join().expect("a client thread failed");
    }
    let end_rss = rss_kib(pid);
    let warm = warm_rss.unwrap_or(end_rss).max(1);
    println!(
        "RSS after warm-up {:.1} MiB, at the end {:.1} MiB ({:+.1} %), peak {:.1} MiB; \
         p50 {:.1} ms, p99 {:.1} ms over {} object requests",
        warm as f64 / 1024.0,
        end_rss as f64 / 1024.0,
        (end_rss as f64 / warm as f64 - 1.0) * 100.0,
        peak as f64 / 1024.0,
        quantile_ms(&mut all, 0.5),
        quantile_ms(&mut all, 0.99),
        all.len()
    );
}
