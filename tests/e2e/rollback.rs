//! A swapped-in plugin that passes its smoke call and then fails every
//! step is on probation: `custodian serve` counts its steps and, past the
//! allowed share of failures, restores the plugin it replaced through the
//! same fenced swap, audited as `plugin/rollback` (or, with `rollback =
//! "alert"`, reports it and leaves it serving).

use std::time::Duration;

use serde_json::Value;

use crate::serve::{plugin_hash, plugin_hash_of};
use crate::server::{
    Server, agent, answer, bearer, schedule_takedown_timer, timer_steps, wait_for,
};
use crate::support::{run, stepper};

/// Counting timers the stepper runs (one step a second each): enough
/// steps for a verdict within seconds.
const TIMERS: usize = 12;

fn start(mode: &str) -> Server {
    let config = format!(
        "[plugins.takedown]\npath = {:?}\n\n[probation]\nmin_steps = 8\nrollback = {mode:?}\n",
        stepper().display().to_string()
    );
    Server::start_prepared(&config, &[], |data| {
        for i in 0..TIMERS {
            schedule_takedown_timer(data, &format!("count:100000:c{i}"));
        }
    })
}

fn steps(server: &Server) -> u64 {
    timer_steps(server).iter().sum()
}

/// Swaps in the bundled takedown plugin: it passes the smoke call, and
/// fails every step of the stepper's counting timers (their references
/// are not request ids).
fn swap_to_a_plugin_that_fails_every_step(server: &Server) -> String {
    let path = custodian::bundled::path(custodian::runtime::World::Takedown).unwrap();
    let (status, body) = answer(
        agent()
            .put(&server.url("/v1/plugins/takedown"))
            .header("Authorization", bearer())
            .send(std::fs::read(path).unwrap()),
    );
    assert_eq!(status, 200, "{body}");
    plugin_hash_of(path)
}

fn audit(server: &Server) -> Vec<Value> {
    let output = run(&["audit", "--data", server.data.to_str().unwrap(), "--json"]);
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn rollbacks(server: &Server, outcome: &str) -> bool {
    let (_, body) = answer(agent().get(&server.url("/metrics")).call());
    body.as_str().unwrap().contains(&format!(
        "custodian_plugin_rollbacks_total{{world=\"takedown\",outcome=\"{outcome}\"}} 1"
    ))
}

#[test]
fn a_plugin_failing_every_step_after_its_smoke_call_is_rolled_back_and_audited() {
    let mut server = start("auto");
    let good = plugin_hash_of(stepper());
    wait_for(
        "the counting timers to step",
        Duration::from_secs(30),
        || steps(&server) >= TIMERS as u64,
    );
    let bad = swap_to_a_plugin_that_fails_every_step(&server);
    assert_eq!(plugin_hash(&server, "takedown"), bad);
    wait_for("the rollback", Duration::from_secs(60), || {
        plugin_hash(&server, "takedown") == good
    });
    // Counted once the rollback's audit is written, just after the swap.
    wait_for("the rollback's count", Duration::from_secs(10), || {
        rollbacks(&server, "rolled_back")
    });
    // The restored plugin counts again.
    let restored_at = steps(&server);
    wait_for("steps after the rollback", Duration::from_secs(30), || {
        steps(&server) > restored_at
    });
    // It stays: the restored plugin is not on probation.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(plugin_hash(&server, "takedown"), good);

    assert!(server.terminate().success(), "{}", server.log());
    let records = audit(&server);
    let rollback: Vec<&Value> = records
        .iter()
        .filter(|r| r["event"] == "plugin/rollback")
        .collect();
    assert_eq!(rollback.len(), 1, "{records:?}");
    assert_eq!(rollback[0]["actor"], "system:probation");
    let targets: Vec<&str> = rollback[0]["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(
        targets,
        [
            "world:takedown".to_owned(),
            format!("from:{bad}"),
            format!("to:{good}")
        ]
    );
    let detail = rollback[0]["detail"].as_str().unwrap();
    assert!(detail.contains("steps on probation failed"), "{detail}");
    // The restore went through the swap path: audited as a swap too.
    assert!(
        records
            .iter()
            .any(|r| r["event"] == "plugin/swap" && r["actor"] == "system:probation"),
        "{records:?}"
    );
}

#[test]
fn with_rollback_alert_a_failing_plugin_is_reported_and_left_serving() {
    let mut server = start("alert");
    wait_for(
        "the counting timers to step",
        Duration::from_secs(30),
        || steps(&server) >= TIMERS as u64,
    );
    let bad = swap_to_a_plugin_that_fails_every_step(&server);
    wait_for("the alert", Duration::from_secs(60), || {
        rollbacks(&server, "alerted")
    });
    assert_eq!(plugin_hash(&server, "takedown"), bad);
    assert!(server.terminate().success(), "{}", server.log());
    let records = audit(&server);
    assert!(
        records
            .iter()
            .any(|r| r["event"] == "plugin/probation-failed" && r["actor"] == "system:probation"),
        "{records:?}"
    );
    assert!(!records.iter().any(|r| r["event"] == "plugin/rollback"));
}
