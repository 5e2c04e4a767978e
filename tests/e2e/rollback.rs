//! A takedown plugin that passes its smoke call and then fails every real
//! step (the stepper guest: it answers `status` of the smoke call's zero
//! id, but knows no request's timer) is refused at the swap by the replay
//! of the timers due next (read-only, through the serving plugin and the
//! new one). With the replay off, it serves on probation: `custodian
//! serve` counts its steps and, past the allowed share of failures,
//! restores the plugin it replaced through the same fenced swap, audited
//! as `plugin/rollback` (or, with `rollback = "alert"`, reports it and
//! leaves it serving).

use std::time::Duration;

use serde_json::Value;

use crate::serve::{
    audit, file_takedown, metric, plugin_hash, plugin_hash_of, push, takedown_status,
};
use crate::server::{Server, agent, answer, bearer, wait_for};
use crate::support::stepper;

/// Requests filed before the swap, and objects in each: enough steps
/// still to run after it for a verdict. (A request's steps follow each
/// other at once on the real clock, so a small request is done before
/// the swap: with 60 objects each, four removals a step left enough
/// steps, eight did not.)
const REQUESTS: usize = 6;
const OBJECTS: usize = 150;

/// A server on the bundled takedown plugin; `replay_timers = 0` lets a
/// failing plugin past the swap, onto probation.
fn start(mode: &str, replay_timers: u32) -> Server {
    Server::start(&format!(
        "[probation]\nmin_steps = 8\nrollback = {mode:?}\nreplay_timers = {replay_timers}\n"
    ))
}

/// Files [`REQUESTS`] takedowns of [`OBJECTS`] new objects each, one
/// right after the other once every object is pushed (so all of them
/// are under way at the swap that follows); their ids.
fn file_requests(server: &Server) -> Vec<String> {
    let pushed: Vec<Vec<String>> = (0..REQUESTS)
        .map(|r| {
            (0..OBJECTS)
                .map(|o| {
                    let body = format!("request {r} object {o}");
                    push(
                        server,
                        "acme/site",
                        &format!("r{r}/o{o}.txt"),
                        body.as_bytes(),
                    )
                })
                .collect()
        })
        .collect();
    pushed
        .iter()
        .map(|objects| file_takedown(server, objects))
        .collect()
}

/// Asks to swap in the stepper; the answer.
fn swap_in_the_stepper(server: &Server) -> (u16, Value) {
    answer(
        agent()
            .put(&server.url("/v1/plugins/takedown"))
            .header("Authorization", bearer())
            .send(std::fs::read(stepper()).unwrap()),
    )
}

fn rollbacks(server: &Server, outcome: &str) -> bool {
    let series =
        format!("custodian_plugin_rollbacks_total{{world=\"takedown\",outcome=\"{outcome}\"}}");
    metric(server, &series) == 1
}

#[test]
fn a_plugin_failing_the_steps_the_serving_one_answers_is_refused_by_the_replay() {
    let mut server = start("auto", 8);
    let bundled = plugin_hash(&server, "takedown");
    file_requests(&server);
    let (status, body) = swap_in_the_stepper(&server);
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "plugin_refused", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("replaying timer 0x"), "{message}");
    assert!(
        message.contains("the serving plugin answered and the new one failed"),
        "{message}"
    );
    assert_eq!(plugin_hash(&server, "takedown"), bundled);
    assert!(server.terminate().success(), "{}", server.log());
    let swapped_in = format!("to:{}", plugin_hash_of(stepper()));
    assert!(
        !audit(&server.data)
            .iter()
            .any(|r| r["event"] == "plugin/swap" && r["targets"][2] == swapped_in.as_str()),
        "the refused plugin was swapped in"
    );
}

#[test]
fn a_plugin_failing_every_step_after_its_smoke_call_is_rolled_back_and_audited() {
    let mut server = start("auto", 0);
    let bundled = plugin_hash(&server, "takedown");
    let requests = file_requests(&server);
    let (status, body) = swap_in_the_stepper(&server);
    assert_eq!(status, 200, "{body}");
    let bad = plugin_hash_of(stepper());
    wait_for("the rollback", Duration::from_secs(60), || {
        plugin_hash(&server, "takedown") == bundled
    });
    // Counted once the rollback's audit is written, just after the swap.
    wait_for("the rollback's count", Duration::from_secs(10), || {
        rollbacks(&server, "rolled_back")
    });
    // The restored plugin takes every request on to retain.
    wait_for("every request in retain", Duration::from_secs(120), || {
        requests
            .iter()
            .all(|id| takedown_status(&server, id)["phase"] == "retain")
    });
    assert_eq!(plugin_hash(&server, "takedown"), bundled);

    assert!(server.terminate().success(), "{}", server.log());
    let records = audit(&server.data);
    let rollback: Vec<&Value> = records
        .iter()
        .filter(|r| r["event"] == "plugin/rollback")
        .collect();
    assert_eq!(rollback.len(), 1, "{records:?}");
    assert_eq!(rollback[0]["actor"], "system:probation");
    assert_eq!(
        rollback[0]["targets"],
        serde_json::json!([
            "world:takedown",
            format!("from:{bad}"),
            format!("to:{bundled}")
        ])
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
    let mut server = start("alert", 0);
    file_requests(&server);
    let (status, body) = swap_in_the_stepper(&server);
    assert_eq!(status, 200, "{body}");
    wait_for("the alert", Duration::from_secs(60), || {
        rollbacks(&server, "alerted")
    });
    assert_eq!(plugin_hash(&server, "takedown"), plugin_hash_of(stepper()));
    assert!(server.terminate().success(), "{}", server.log());
    let records = audit(&server.data);
    assert!(
        records
            .iter()
            .any(|r| r["event"] == "plugin/probation-failed" && r["actor"] == "system:probation"),
        "{records:?}"
    );
    assert!(!records.iter().any(|r| r["event"] == "plugin/rollback"));
}
