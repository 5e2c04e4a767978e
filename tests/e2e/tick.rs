//! `custodian tick`, `timer` and `audit` on a real data directory with a
//! real takedown-world guest.

use std::path::Path;

use serde_json::Value;

use crate::support::{outcome, run, stepper};

const T0: u64 = 1_700_000_000_000;

fn data(dir: &tempfile::TempDir) -> String {
    dir.path().join("data").display().to_string()
}

fn schedule(data: &str, reference: &str, due: u64) {
    let (code, _, stderr) = outcome(&run(&[
        "timer",
        "schedule",
        "--data",
        data,
        "takedown",
        reference,
        "--due",
        &due.to_string(),
    ]));
    assert_eq!(code, 0, "{stderr}");
}

fn tick(data: &str, now: u64, extra: &[&str]) -> (i32, Value, String) {
    let now = now.to_string();
    let plugin = stepper().to_str().unwrap();
    let mut args = vec![
        "tick", "--data", data, "--plugin", plugin, "--now", &now, "--json",
    ];
    args.extend_from_slice(extra);
    let (code, stdout, stderr) = outcome(&run(&args));
    let report = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout} {stderr}"));
    (code, report, stderr)
}

fn lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn timers(data: &str) -> Vec<Value> {
    let (code, stdout, stderr) = outcome(&run(&["timer", "list", "--data", data, "--json"]));
    assert_eq!(code, 0, "{stderr}");
    lines(&stdout)
}

fn audit(data: &str) -> Vec<Value> {
    let (code, stdout, stderr) = outcome(&run(&["audit", "--data", data, "--json"]));
    assert_eq!(code, 0, "{stderr}");
    lines(&stdout)
}

#[test]
fn tick_runs_a_plugin_step_per_due_timer_until_the_timer_is_done() {
    let dir = tempfile::tempdir().unwrap();
    let data = data(&dir);
    schedule(&data, "count:3:a", T0);
    let mut outcomes = Vec::new();
    for i in 0..4 {
        let (code, report, stderr) = tick(&data, T0 + i * 1_000, &[]);
        assert_eq!(code, 0, "{stderr}");
        outcomes.extend(report["fired"].as_array().unwrap().iter().map(|f| {
            (
                f["step"].as_u64().unwrap(),
                f["outcome"].as_str().unwrap().to_owned(),
            )
        }));
    }
    assert_eq!(
        outcomes,
        vec![
            (1, "rescheduled".to_owned()),
            (2, "rescheduled".to_owned()),
            (3, "done".to_owned())
        ]
    );
    assert!(timers(&data).is_empty());
    let records = audit(&data);
    let counted: Vec<_> = records
        .iter()
        .filter(|r| r["event"] == "Counted")
        .map(|r| r["targets"][1].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(counted, ["count:1", "count:2", "count:3"]);
    assert!(
        records
            .iter()
            .filter(|r| r["event"] == "Counted")
            .all(|r| r["actor"].as_str().unwrap().starts_with("plugin:takedown@"))
    );
    assert_eq!(
        records
            .iter()
            .filter(|r| r["event"] == "timer/done")
            .count(),
        1
    );
}

#[test]
fn a_trapping_step_commits_nothing_and_its_error_stays_on_the_timer() {
    let dir = tempfile::tempdir().unwrap();
    let data = data(&dir);
    schedule(&data, "trap:x", T0);
    let (code, report, stderr) = tick(&data, T0, &[]);
    assert_eq!(code, 1, "{stderr}");
    let fired = &report["fired"][0];
    assert_eq!(fired["outcome"], "failed");
    let error = fired["error"].as_str().unwrap();
    assert!(error.contains("stepper was told to trap"), "{error}");
    assert!(stderr.contains("will be retried"), "{stderr}");
    // `tick` reports each failed step itself; the worker's own warning,
    // meant for a server's log, is filtered out rather than said twice.
    assert!(!stderr.contains("timer step failed"), "{stderr}");
    let listed = timers(&data);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["failures"], 1);
    assert_eq!(listed[0]["steps"], 0);
    assert!(listed[0]["last_error"].as_str().unwrap().contains("trap"));
    assert!(
        listed[0]["due_ms"].as_u64().unwrap() >= T0 + 1_000,
        "retried after a back-off"
    );
    assert_only_the_failure_is_logged(&data);
}

/// A failed step commits nothing: the audit log holds only the decision
/// log's record of the failure, naming the plugin and the timer.
fn assert_only_the_failure_is_logged(data: &str) {
    let records = audit(data);
    assert_eq!(records.len(), 1, "{records:?}");
    let record = &records[0];
    assert_eq!(record["event"], "decision/takedown/step", "{record}");
    let targets = record["targets"].to_string();
    assert!(targets.contains("outcome:failed"), "{record}");
    assert!(targets.contains("timer:takedown/"), "{record}");
}

#[test]
fn a_step_that_never_returns_is_stopped_by_its_time_limit() {
    let dir = tempfile::tempdir().unwrap();
    let data = data(&dir);
    schedule(&data, "spin:x", T0);
    let (code, report, stderr) = tick(&data, T0, &["--timeout-ms", "200"]);
    assert_eq!(code, 1, "{stderr}");
    let error = report["fired"][0]["error"].as_str().unwrap();
    assert!(error.contains("time limit"), "{error}");
}

#[test]
fn a_step_that_overspends_its_store_budget_commits_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = data(&dir);
    schedule(&data, "greedy:x", T0);
    let (code, report, stderr) = tick(&data, T0, &["--step-calls", "10"]);
    assert_eq!(code, 1, "{stderr}");
    let error = report["fired"][0]["error"].as_str().unwrap();
    assert!(error.contains("budget of 10 store calls"), "{error}");
    assert_only_the_failure_is_logged(&data);
}

#[test]
fn until_idle_fires_everything_due_and_leaves_future_timers() {
    let dir = tempfile::tempdir().unwrap();
    let data = data(&dir);
    for i in 0..5 {
        schedule(&data, &format!("count:1:n{i}"), T0 - i);
    }
    schedule(&data, "count:1:later", T0 + 60_000);
    let (code, report, stderr) = tick(&data, T0, &["--until-idle"]);
    assert_eq!(code, 0, "{stderr}");
    // The takedown kind fires one step per tick, as the seed's worker does.
    assert_eq!(report["fired"].as_array().unwrap().len(), 5);
    assert_eq!(report["ticks"], 6);
    let left = timers(&data);
    assert_eq!(left.len(), 1);
    assert_eq!(left[0]["reference"], "count:1:later");
}

#[test]
fn a_second_process_on_a_held_data_directory_exits_3_and_touches_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = data(&dir);
    schedule(&data, "count:1:a", T0);
    let held = custodian::data_dir::DataDir::create(Path::new(&data)).unwrap();
    let kv = held
        .open_kv(
            std::sync::Arc::new(custodian::clock::SystemClock),
            custodian::kv::redb::DEFAULT_CACHE_BYTES,
        )
        .unwrap();
    let plugin = stepper().to_str().unwrap();
    let (code, stdout, stderr) = outcome(&run(&[
        "tick",
        "--data",
        &data,
        "--plugin",
        plugin,
        "--now",
        "1700000000000",
    ]));
    assert_eq!(code, 3, "{stdout} {stderr}");
    assert!(stderr.contains("in use"), "{stderr}");
    drop(kv);
    assert_eq!(timers(&data).len(), 1, "the timer was not fired");
}

#[test]
fn a_plugin_whose_world_has_no_steps_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let data = data(&dir);
    let (code, _, stderr) = outcome(&run(&[
        "tick",
        "--data",
        &data,
        "--plugin",
        "builtin:retention",
    ]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("no timer steps"), "{stderr}");
}

#[test]
fn timers_can_be_cancelled_and_cancelling_a_missing_one_fails() {
    let dir = tempfile::tempdir().unwrap();
    let data = data(&dir);
    schedule(&data, "0x00ff", T0);
    assert_eq!(timers(&data)[0]["reference"], "0x00ff");
    let cancel = |reference: &str| {
        outcome(&run(&[
            "timer", "cancel", "--data", &data, "takedown", reference,
        ]))
    };
    assert_eq!(cancel("0x00ff").0, 0);
    let (code, _, stderr) = cancel("0x00ff");
    assert_eq!(code, 1);
    assert!(stderr.contains("no timer takedown/0x00ff"), "{stderr}");
    let (code, _, stderr) = outcome(&run(&[
        "timer", "schedule", "--data", &data, "Bad Kind", "x",
    ]));
    assert_eq!(code, 2, "{stderr}");
}

#[test]
fn two_ticks_started_together_on_one_data_directory_never_double_a_step() {
    let dir = tempfile::tempdir().unwrap();
    let data = data(&dir);
    for i in 0..8 {
        schedule(&data, &format!("count:3:t{i}"), T0);
    }
    let plugin = stepper().to_str().unwrap();
    let mut codes = Vec::new();
    for round in 0..3u64 {
        let now = (T0 + round * 1_000).to_string();
        let spawn = || {
            crate::support::custodian()
                .args(["tick", "--data", &data, "--plugin", plugin, "--until-idle"])
                .args(["--now", &now])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (a, b) = (spawn(), spawn());
        for child in [a, b] {
            let output = child.wait_with_output().unwrap();
            let code = output.status.code().unwrap();
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(code == 0 || code == 3, "exit {code}: {stderr}");
            if code == 3 {
                assert!(stderr.contains("already in use"), "{stderr}");
            }
            codes.push(code);
        }
    }
    assert!(codes.contains(&0));
    assert!(timers(&data).is_empty(), "every timer finished");
    let mut counted: Vec<_> = audit(&data)
        .iter()
        .filter(|r| r["event"] == "Counted")
        .map(|r| format!("{}/{}", r["targets"][0], r["targets"][1]))
        .collect();
    let total = counted.len();
    counted.sort();
    counted.dedup();
    assert_eq!(total, 24, "{codes:?}");
    assert_eq!(counted.len(), 24, "no step took effect twice");
}

#[test]
fn the_takedown_driver_asks_the_plugin_for_status_and_hold_plans() {
    use custodian::policy::PolicyError;
    use custodian::policy::takedown::TakedownPolicy;
    use custodian::runtime::{Grants, Limits};

    let runtime = crate::support::runtime();
    let plugin = std::sync::Arc::new(runtime.load_file(stepper()).unwrap());
    let policy = TakedownPolicy::new(plugin).unwrap();
    let world = crate::support::World::new();
    let granted = Grants::none().partition("takedown").unwrap();
    let call = || world.call(granted.clone(), Limits::default());

    let missing = policy.status(call(), b"count:2:a").unwrap();
    assert!(
        matches!(missing, Err(PolicyError::NotFound(_))),
        "{missing:?}"
    );

    let plan = policy
        .plan_hold(call(), b"count:2:a", true, T0)
        .unwrap()
        .unwrap();
    assert_eq!(plan.batch.writes.len(), 1);
    // A plan touching a partition the plugin was not granted is refused.
    let refused = policy.plan_hold(
        world.call(Grants::none(), Limits::default()),
        b"x",
        true,
        T0,
    );
    assert!(
        matches!(refused, Ok(Err(PolicyError::AccessDenied(_)))),
        "{refused:?}"
    );
}
