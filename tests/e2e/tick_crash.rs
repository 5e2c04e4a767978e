//! Crash safety of `custodian tick`: processes killed with SIGKILL at
//! random moments, over and over, until the work is done. Every timer's
//! steps must each take effect exactly once, with no partial batch.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use custodian::clock::SystemClock;
use custodian::data_dir::DataDir;
use custodian::kv::Partition;

use crate::support::{Rng, custodian, stepper};

const T0: u64 = 1_700_000_000_000;
const TIMERS: u64 = 24;
/// Steps per timer: each launch takes about one step of each timer, so
/// this is about the launches the work lasts, and so the chances of a
/// kill landing mid-work (with 20, a loaded CI machine once saw 4 such
/// kills, under the 5 required).
const STEPS: u64 = 40;
/// Launches that may be killed; the ones after it run to completion, so
/// the test always finishes.
const KILLED_LAUNCHES: u32 = 100;
const MAX_LAUNCHES: u32 = 400;

fn reference(i: u64) -> String {
    format!("count:{STEPS}:r{i:02}")
}

#[test]
fn ticks_killed_at_random_moments_still_commit_every_step_exactly_once() {
    let mut rng = Rng::from_env();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data_arg = data.to_str().unwrap();
    for i in 0..TIMERS {
        let status = custodian()
            .args(["timer", "schedule", "--data", data_arg, "takedown"])
            .arg(reference(i))
            .args(["--due", &T0.to_string()])
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
    }

    let plugin = stepper().to_str().unwrap();
    let (mut killed, mut launches, mut now) = (0u32, 0u32, T0);
    // Grows to the longest uninterrupted run seen.
    let mut typical_run = Duration::from_millis(60);
    let (mut progress, mut killed_mid_work) = (0u64, 0u32);
    while progress < TIMERS * STEPS {
        assert!(launches < MAX_LAUNCHES, "the work never finished");
        let mut child = custodian()
            .args([
                "tick",
                "--data",
                data_arg,
                "--plugin",
                plugin,
                "--until-idle",
            ])
            .args(["--now", &now.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let started = Instant::now();
        if launches < KILLED_LAUNCHES {
            // Uniform over the span a whole run takes, so kills land during
            // start-up, between steps and inside commits alike.
            let span = typical_run.as_micros().max(1_000) as u64;
            let deadline = started + Duration::from_micros(rng.below(span));
            while Instant::now() < deadline && child.try_wait().unwrap().is_none() {
                std::thread::sleep(Duration::from_micros(200));
            }
            if child.try_wait().unwrap().is_none() {
                child.kill().unwrap();
                killed += 1;
            }
        }
        let status = child.wait().unwrap();
        if status.success() {
            typical_run = typical_run.max(started.elapsed());
        }
        let now_done = steps_done(&data);
        if status.code().is_none() && now_done > progress {
            killed_mid_work += 1;
        }
        progress = now_done;
        assert!(
            status.success() || status.code().is_none(),
            "a tick failed: {status}"
        );
        launches += 1;
        now += 1_000;
    }
    eprintln!(
        "{launches} launches, {killed} killed with SIGKILL, {killed_mid_work} of them after \
         committing some steps"
    );
    assert!(
        killed_mid_work >= 5,
        "too few launches were killed mid-work; the test proved little"
    );
    check(&data);
}

/// Steps committed so far, from the timers left: a finished timer has
/// done all its steps.
fn steps_done(data: &Path) -> u64 {
    let output = custodian()
        .args(["timer", "list", "--json", "--data", data.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8(output.stdout).unwrap();
    let left: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let pending: u64 = left
        .iter()
        .map(|t| STEPS - t["steps"].as_u64().unwrap())
        .sum();
    TIMERS * STEPS - pending
}

fn check(data: &Path) {
    let kv = DataDir::create(data)
        .unwrap()
        .open_kv(
            Arc::new(SystemClock),
            custodian::kv::redb::DEFAULT_CACHE_BYTES,
        )
        .unwrap();
    let io = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let partition = Partition::new("takedown").unwrap();
    for i in 0..TIMERS {
        let value = io
            .block_on(kv.get(&partition, reference(i).as_bytes()))
            .unwrap()
            .expect("every counter exists");
        assert_eq!(value, STEPS.to_be_bytes(), "{}", reference(i));
    }
    let mut counted: BTreeMap<(String, String), u32> = BTreeMap::new();
    let mut host_steps: BTreeMap<(String, String), u32> = BTreeMap::new();
    let mut finished: BTreeMap<String, u32> = BTreeMap::new();
    let mut cursor: Option<Vec<u8>> = None;
    loop {
        let (records, next) = io
            .block_on(custodian::audit::read(
                kv.as_ref(),
                0,
                cursor.as_deref(),
                1000,
            ))
            .unwrap();
        for r in records {
            let key = (r.targets[0].clone(), r.targets[1].clone());
            match r.event.as_str() {
                "Counted" => *counted.entry(key).or_default() += 1,
                "timer/step" | "timer/done" => *host_steps.entry(key).or_default() += 1,
                // The decision log: a step that ends its timer always, a
                // routine one as sampled; each committed with its step.
                "decision/takedown/step" => {
                    if r.targets.iter().any(|t| t == "outcome:done") {
                        let timer = r.targets.iter().find(|t| t.starts_with("timer:"));
                        *finished.entry(timer.cloned().unwrap()).or_default() += 1;
                    }
                }
                other => panic!("unexpected audit event {other}"),
            }
        }
        match next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let total = usize::try_from(TIMERS * STEPS).unwrap();
    assert_eq!(counted.len(), total, "one Counted record per step");
    assert!(counted.values().all(|n| *n == 1), "{counted:?}");
    assert_eq!(host_steps.len(), total, "one timer record per step");
    assert_eq!(
        finished.len(),
        usize::try_from(TIMERS).unwrap(),
        "each timer's end is logged"
    );
    assert!(finished.values().all(|n| *n == 1), "{finished:?}");
    assert!(host_steps.values().all(|n| *n == 1), "{host_steps:?}");
}
