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
//! plugins' work, not the policy's one-second pacing.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

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

fn main() {
    let objects: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(10_000);
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let tree = dir.path().join("tree");
    std::fs::create_dir_all(&tree).unwrap();
    for i in 0..objects {
        let mut body = vec![0u8; 1024];
        body[..8].copy_from_slice(&(i as u64).to_le_bytes());
        std::fs::write(tree.join(format!("f{i:06}")), body).unwrap();
    }
    let data_path = dir.path().join("data");
    let data = data_path.to_str().unwrap();

    let (pushed, push_time) = run(
        &cache,
        &[
            "repo",
            "push",
            "alpha/one",
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
