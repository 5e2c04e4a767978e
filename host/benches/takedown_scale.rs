//! A 10,000-object takedown on the embedded default, end to end through
//! the real `custodian` binary and the bundled plugins:
//!
//! ```text
//! cargo bench -p custodian --bench takedown_scale [-- OBJECTS]
//! ```
//!
//! It pushes a directory of OBJECTS (default 10,000) files of 1 KiB to
//! `alpha/one` (one pack), files one request for the pack, then times
//! `custodian tick --now T0 --fast-forward-to … --until-idle` from filing
//! to the retain phase (every object selected, copied, verified and its
//! holders discovered; each step one durable, fsynced transaction on the
//! redb KV), and again from the end of retention to purged. The clock is
//! simulated (`--fast-forward-to`), so the figures are the host's and the
//! plugins' work alone.
//!
//! ```text
//! cargo bench -p custodian --bench takedown_scale -- serve [OBJECTS] [REQUESTS]
//! ```
//!
//! runs on the real clock instead, as an operator would: it pushes one
//! pack of OBJECTS (default 1,000) files of 1 KiB into each of REQUESTS+1
//! repositories (default 10), starts `custodian serve` on the embedded
//! default with its default workers, runs an untimed request of one
//! object (so that no timed part pays for compiling a plugin on its
//! first use), then files one request through the API and times it from
//! the filing to `retain`; then files the other
//! REQUESTS at once and times them until every one is in `retain`. It
//! prints both times and their ratio (REQUESTS = 0 skips the concurrent
//! run), each with the server's CPU time over it (CPU near cores × wall
//! is bound by the cores; far below, by syncs) and what the server did
//! per object over it (steps, failed steps, KV calls in all and by
//! operation, store calls in all and by store and operation, and the
//! durable writes: the KV's commits and the stores' syncs by kind, from
//! its `/metrics`), and then how long a `syncfs` of the data's filesystem
//! takes (what the part left the kernel to write back: a journaled
//! publish syncs only its record), with the ratio counted both ways.
//! `workers=N` starts the server with `--workers N`;
//! `config=FILE` with `--config FILE` (e.g. `[plugins.takedown] path =
//! …`, to time another build of the policy against the bundled one).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

#[path = "support/disk.rs"]
mod disk;
#[path = "support/metrics.rs"]
mod metrics;
#[path = "support/server.rs"]
mod server;
use disk::syncfs;
use metrics::{failed_steps, kv_applies, kv_reads, metric, series};
use server::{Server, TOKEN};

const T0: u64 = 1_700_000_000_000;
const DAY: u64 = 86_400_000;

fn custodian(cache: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_custodian"));
    command
        .env("CUSTODIAN_CACHE_DIR", cache)
        .env_remove("RUST_LOG");
    command
}

fn run(cache: &Path, args: &[&str]) -> (String, Duration) {
    let started = Instant::now();
    let output = custodian(cache)
        .args(args)
        .output()
        .expect("custodian runs");
    let elapsed = started.elapsed();
    assert!(
        output.status.success(),
        "custodian {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    (String::from_utf8(output.stdout).unwrap(), elapsed)
}

/// Runs the schedule from `now` to `until`; (steps fired, time).
fn tick(cache: &Path, data: &str, now: u64, until: u64) -> (u64, Duration) {
    let (stdout, elapsed) = run(
        cache,
        &[
            "tick",
            "--data",
            data,
            "--now",
            &now.to_string(),
            "--fast-forward-to",
            &until.to_string(),
            "--until-idle",
            "--max-ticks",
            "10000000",
            "--retention-ms",
            &DAY.to_string(),
            "--json",
        ],
    );
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let fired = report["fired"].as_array().unwrap();
    assert!(
        fired.iter().all(|f| f["outcome"] == "rescheduled"),
        "every step committed"
    );
    (fired.len() as u64, elapsed)
}

fn status(cache: &Path, data: &str, id: &str) -> serde_json::Value {
    let (stdout, _) = run(cache, &["takedown", "status", id, "--data", data, "--json"]);
    serde_json::from_str(&stdout).unwrap()
}

/// A directory `tree` of `objects` distinct files of 1 KiB (`seed` makes
/// each tree's content its own).
fn make_tree(tree: &Path, objects: usize, seed: u64) {
    std::fs::create_dir_all(tree).unwrap();
    for i in 0..objects {
        let mut body = vec![0u8; 1024];
        body[..8].copy_from_slice(&(i as u64).to_le_bytes());
        body[8..16].copy_from_slice(&seed.to_le_bytes());
        std::fs::write(tree.join(format!("f{i:06}")), body).unwrap();
    }
}

/// Pushes `tree` (a directory named `tree`) into `repo`; its pack's id
/// and the time it took.
fn push_pack(cache: &Path, data: &str, repo: &str, tree: &Path) -> (String, Duration) {
    let (pushed, time) = run(
        cache,
        &[
            "repo",
            "push",
            repo,
            tree.to_str().unwrap(),
            "--data",
            data,
            "--json",
        ],
    );
    let pack = pushed
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|e| e["path"] == "tree/")
        .expect("the directory's pack")["id"]
        .as_str()
        .unwrap()
        .to_owned();
    (pack, time)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let numbers: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    if args.iter().any(|a| a == "serve") {
        let objects = numbers.first().copied().unwrap_or(1_000);
        let requests = numbers.get(1).copied().unwrap_or(10);
        let workers = args.iter().find_map(|a| a.strip_prefix("workers="));
        let config = args.iter().find_map(|a| a.strip_prefix("config="));
        return real_clock(objects, requests, workers, config);
    }
    let objects = numbers.first().copied().unwrap_or(10_000);
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let tree = dir.path().join("tree");
    make_tree(&tree, objects, 0);
    let data_path = dir.path().join("data");
    let data = data_path.to_str().unwrap();

    let (pack, push_time) = push_pack(&cache, data, "alpha/one", &tree);
    let (created, _) = run(
        &cache,
        &[
            "takedown",
            "create",
            "alpha/one",
            "--pack",
            &pack,
            "--data",
            data,
            "--now",
            &T0.to_string(),
            // Retain-until is fixed at the filing.
            "--retention-ms",
            &DAY.to_string(),
        ],
    );
    let id = created.trim().to_owned();

    let (acquire_steps, acquire_time) = tick(&cache, data, T0, T0 + DAY / 2);
    let s = status(&cache, data, &id);
    assert_eq!(s["phase"], "retain", "{s}");
    assert_eq!(s["counts"]["verified"], objects as u64, "{s}");
    let (purge_steps, purge_time) = tick(&cache, data, T0 + DAY, T0 + DAY + DAY / 24 - 1);
    let s = status(&cache, data, &id);
    assert_eq!(s["phase"], "purged", "{s}");

    println!("takedown of {objects} objects of 1 KiB (one pack), embedded default (redb + fs):");
    println!("  push            {:>8.1} s", push_time.as_secs_f64());
    println!(
        "  file → retain   {:>8.1} s  {acquire_steps} steps  {:.0} steps/s",
        acquire_time.as_secs_f64(),
        acquire_steps as f64 / acquire_time.as_secs_f64()
    );
    println!(
        "  retain → purged {:>8.1} s  {purge_steps} steps  {:.0} steps/s",
        purge_time.as_secs_f64(),
        purge_steps as f64 / purge_time.as_secs_f64()
    );
    println!(
        "  total           {:>8.1} s",
        (acquire_time + purge_time).as_secs_f64()
    );
}

/// `custodian serve` on a free port of 127.0.0.1 over `data`, with its
/// defaults or `workers` and the configuration file `config`; the server
/// and its base URL.
fn serve(
    cache: &Path,
    data: &str,
    workers: Option<&str>,
    config: Option<&str>,
) -> (Server, String) {
    let mut args: Vec<&std::ffi::OsStr> = vec!["--data".as_ref(), data.as_ref()];
    if let Some(workers) = workers {
        args.extend([std::ffi::OsStr::new("--workers"), workers.as_ref()]);
    }
    if let Some(config) = config {
        args.extend([std::ffi::OsStr::new("--config"), config.as_ref()]);
    }
    let server = Server::start(custodian(cache), &args);
    let base = server.base.clone();
    (server, base)
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(120)))
        .build()
        .into()
}

/// Files a takedown of `pack` of `repo` through the API; its id.
fn file(base: &str, repo: &str, pack: &str) -> String {
    let body = serde_json::json!({"repository": repo, "pack": pack}).to_string();
    let mut response = agent()
        .post(&format!("{base}/v1/takedowns"))
        .header("authorization", &format!("Bearer {TOKEN}"))
        .send(body.as_bytes())
        .expect("the server answers");
    let text = response.body_mut().read_to_string().unwrap();
    assert_eq!(response.status().as_u16(), 201, "{text}");
    let created: serde_json::Value = serde_json::from_str(&text).unwrap();
    created["id"].as_str().unwrap().to_owned()
}

fn phase(base: &str, id: &str) -> serde_json::Value {
    let mut response = agent()
        .get(&format!("{base}/v1/takedowns/{id}"))
        .header("authorization", &format!("Bearer {TOKEN}"))
        .call()
        .expect("the server answers");
    serde_json::from_str(&response.body_mut().read_to_string().unwrap()).unwrap()
}

/// Waits until every request of `ids` is in `retain` (polling every
/// 50 ms); the time from `since`. Fails after an hour.
fn until_retained(base: &str, ids: &[String], since: Instant, objects: usize) -> Duration {
    let mut waiting: Vec<&String> = ids.iter().collect();
    while !waiting.is_empty() {
        assert!(since.elapsed() < Duration::from_secs(3600), "over an hour");
        waiting.retain(|id| {
            let s = phase(base, id);
            if s["phase"] == "retain" {
                assert_eq!(s["counts"]["verified"], objects as u64, "{s}");
                false
            } else {
                true
            }
        });
        if !waiting.is_empty() {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    since.elapsed()
}

/// The CPU time (user and system) process `pid` has used so far, from
/// `/proc/PID/stat`. It tells a run bound by the cores (CPU ≈ cores ×
/// wall) from one waiting on syncs.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the server runs");
    // The command name (field 2) is in parentheses and may hold spaces;
    // utime and stime are fields 14 and 15, counted after it.
    let after = &stat[stat.rfind(')').expect("a stat line") + 2..];
    let fields: Vec<&str> = after.split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // /proc counts in USER_HZ, which Linux fixes at 100 on x86 and arm64
    // whatever the kernel's own tick rate.
    ticks as f64 / 100.0
}

/// What the server has done so far, from its `/metrics`: a part's
/// figures are the difference of two of these.
#[derive(Debug, Clone)]
struct Work {
    steps: u64,
    /// Steps that failed or lost a race (and will run again).
    failed: u64,
    kv_applies: u64,
    kv_reads: u64,
    /// Object-store calls by their labels (store and operation).
    store_calls: BTreeMap<String, u64>,
    /// KV calls by their label (operation).
    kv_calls: BTreeMap<String, u64>,
    /// The filesystem stores' syncs by their label (what they made durable).
    syncs: BTreeMap<String, u64>,
    /// The embedded KV's commits (each one durable write).
    kv_commits: u64,
}

impl Work {
    fn of(base: &str) -> Self {
        let mut response = agent()
            .get(&format!("{base}/metrics"))
            .call()
            .expect("the server answers");
        let text = response.body_mut().read_to_string().unwrap();
        Self {
            steps: metric(&text, "custodian_steps_total", ""),
            failed: failed_steps(&text),
            kv_applies: kv_applies(&text),
            kv_reads: kv_reads(&text),
            store_calls: series(&text, "custodian_store_calls_total"),
            kv_calls: series(&text, "custodian_kv_calls_total"),
            syncs: series(&text, "custodian_fs_syncs_total"),
            kv_commits: metric(&text, "custodian_redb_commits_total", ""),
        }
    }

    /// What happened between `self` and `later`, per object of
    /// `objects`: one line of totals, one of KV calls by operation, one
    /// of store calls by store and operation, and one of durable writes
    /// (the stores' syncs by kind and the KV's commits).
    fn lines(&self, later: &Self, objects: usize) -> String {
        let per = |n: u64, m: u64| (m - n) as f64 / objects as f64;
        let calls = |work: &Self| work.store_calls.values().sum::<u64>();
        // The series of `later` that moved, each per object.
        let by_label = |earlier: &BTreeMap<String, u64>, later: &BTreeMap<String, u64>| {
            later
                .iter()
                .map(|(labels, n)| (labels, per(earlier.get(labels).copied().unwrap_or(0), *n)))
                .filter(|(_, per_object)| *per_object > 0.0)
                .map(|(labels, per_object)| format!("{labels} {per_object:.2}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "{} steps ({} failed or lost); per object: {:.2} steps, {:.2} KV applies, {:.2} KV reads, {:.2} store calls\n    KV calls per object: {}\n    store calls per object: {}\n    durable writes per object: {:.2} KV commits; store syncs: {}",
            later.steps - self.steps,
            later.failed - self.failed,
            per(self.steps, later.steps),
            per(self.kv_applies, later.kv_applies),
            per(self.kv_reads, later.kv_reads),
            per(calls(self), calls(later)),
            by_label(&self.kv_calls, &later.kv_calls),
            by_label(&self.store_calls, &later.store_calls),
            per(self.kv_commits, later.kv_commits),
            by_label(&self.syncs, &later.syncs),
        )
    }
}

/// The real-clock run: see the module documentation.
fn real_clock(objects: usize, requests: usize, workers: Option<&str>, config: Option<&str>) {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let data_path = dir.path().join("data");
    let data = data_path.to_str().unwrap();
    let mut packs = Vec::new();
    for k in 0..=requests {
        let tree = dir.path().join(format!("t{k}")).join("tree");
        make_tree(&tree, objects, k as u64);
        let repo = format!("alpha/r{k}");
        let (pack, _) = push_pack(&cache, data, &repo, &tree);
        packs.push((repo, pack));
    }
    // A request of one object first, untimed: the server compiles each
    // plugin on its first use (the compile cache is this run's own), and
    // the timed request must not pay for that.
    let warm_tree = dir.path().join("warm").join("tree");
    make_tree(&warm_tree, 1, u64::MAX);
    let warm = push_pack(&cache, data, "alpha/warm", &warm_tree);
    let (server, base) = serve(&cache, data, workers, config);
    let warm_id = file(&base, "alpha/warm", &warm.0);
    until_retained(&base, &[warm_id], Instant::now(), 1);

    let work = Work::of(&base);
    let started = Instant::now();
    let cpu = cpu_seconds(server.pid());
    let one = file(&base, &packs[0].0, &packs[0].1);
    let alone = until_retained(&base, &[one], started, objects);
    let cpu_alone = cpu_seconds(server.pid()) - cpu;
    let flush_alone = syncfs(&data_path);
    let work_alone = Work::of(&base);
    println!(
        "real clock, custodian serve on the embedded default (redb + fs, {} workers):",
        workers.unwrap_or("default")
    );
    println!(
        "  1 request of {objects} objects of 1 KiB (one pack): file -> retain {:>8.2} s, server CPU {cpu_alone:.2} s ({:.2} cores)",
        alone.as_secs_f64(),
        cpu_alone / alone.as_secs_f64()
    );
    println!("    {}", work.lines(&work_alone, objects));
    println!(
        "    then syncfs of the data's filesystem (what it left to write back): {:.2} s",
        flush_alone.as_secs_f64()
    );
    if requests == 0 {
        return;
    }
    let started = Instant::now();
    let cpu = cpu_seconds(server.pid());
    let ids: Vec<String> = packs[1..]
        .iter()
        .map(|(repo, pack)| file(&base, repo, pack))
        .collect();
    let together = until_retained(&base, &ids, started, objects);
    let cpu_together = cpu_seconds(server.pid()) - cpu;
    let flush_together = syncfs(&data_path);
    let work_together = Work::of(&base);
    println!(
        "  {requests} concurrent requests of {objects} objects each: file -> all retain {:>8.2} s, server CPU {cpu_together:.2} s ({:.2} cores)",
        together.as_secs_f64(),
        cpu_together / together.as_secs_f64()
    );
    println!(
        "    {}",
        work_alone.lines(&work_together, objects * requests)
    );
    println!(
        "    then syncfs of the data's filesystem: {:.2} s",
        flush_together.as_secs_f64()
    );
    println!(
        "  ratio concurrent / one: {:.2}x (target <= 2x); with each syncfs counted: {:.2}x",
        together.as_secs_f64() / alone.as_secs_f64(),
        (together + flush_together).as_secs_f64() / (alone + flush_alone).as_secs_f64()
    );
}
