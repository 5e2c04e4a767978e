//! A plugin that runs away within what it is allowed: a takedown step
//! that reschedules itself into the past, forever. `custodian serve`
//! contains it: the `[timers]` ceilings quarantine the plugin, its timers
//! pause, the quarantine is audited and counted, and an operator can let
//! it run again (when it is quarantined again at the ceiling).

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::serve::audit;
use crate::server::{
    Server, agent, answer, bearer, schedule_takedown_timer, timer_steps, wait_for,
};
use crate::support::{run, stepper};

/// The ceiling the test sets on one timer's steps per window.
const CEILING: u64 = 200;

fn quarantined(server: &Server) -> Vec<Value> {
    let (status, body) = answer(
        agent()
            .get(&server.url("/v1/timers/quarantine"))
            .header("Authorization", bearer())
            .call(),
    );
    assert_eq!(status, 200, "{body}");
    body["quarantined"].as_array().unwrap().clone()
}

/// The sum of every series of `family` on `/metrics`.
fn metric_sum(server: &Server, family: &str) -> u64 {
    let (status, body) = answer(agent().get(&server.url("/metrics")).call());
    assert_eq!(status, 200);
    body.as_str()
        .unwrap()
        .lines()
        .filter(|line| line.starts_with(family) && !line.starts_with('#'))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

fn steps(server: &Server) -> u64 {
    timer_steps(server)[0]
}

#[test]
fn a_plugin_rescheduling_into_the_past_is_quarantined_at_its_ceiling_and_can_be_released() {
    let config = format!(
        "[plugins.takedown]\npath = {:?}\n\n[timers]\nwindow_ms = 600000\nmax_timer_steps = {CEILING}\n",
        stepper().display().to_string()
    );
    let mut server = Server::start_prepared(&config, &[], |data| {
        schedule_takedown_timer(data, "past:runaway");
    });
    let started = Instant::now();
    wait_for("the quarantine", Duration::from_secs(60), || {
        !quarantined(&server).is_empty()
    });
    let took = started.elapsed();
    let held = quarantined(&server);
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0]["kind"], "takedown");
    assert!(
        held[0]["actor"]
            .as_str()
            .unwrap()
            .starts_with("plugin:takedown@"),
        "{held:?}"
    );
    assert!(
        held[0]["reason"]
            .as_str()
            .unwrap()
            .contains(&format!("more than {CEILING} steps")),
        "{held:?}"
    );
    // Paused: the step count stops just past the ceiling (a step of the
    // same worker may have been in flight) and stays there.
    let at_quarantine = steps(&server);
    assert!(
        (CEILING + 1..=CEILING + 2).contains(&at_quarantine),
        "{at_quarantine} steps"
    );
    std::thread::sleep(Duration::from_millis(1_500));
    assert_eq!(steps(&server), at_quarantine, "the timer stays paused");
    assert_eq!(metric_sum(&server, "custodian_plugin_quarantines_total"), 1);
    assert!(metric_sum(&server, "custodian_timers_paused_total") > 0);
    eprintln!("quarantined after {at_quarantine} steps in {took:?}");

    // Released, it runs again, and is quarantined again at the ceiling.
    let (status, body) = answer(
        agent()
            .delete(&server.url("/v1/timers/quarantine/takedown"))
            .header("Authorization", bearer())
            .call(),
    );
    assert_eq!(status, 204, "{body}");
    wait_for("the second quarantine", Duration::from_secs(60), || {
        steps(&server) > at_quarantine && !quarantined(&server).is_empty()
    });
    let again = steps(&server);
    assert!(again <= at_quarantine + CEILING + 2, "{again} steps");
    let (status, _) = answer(
        agent()
            .delete(&server.url("/v1/timers/quarantine/nothing"))
            .header("Authorization", bearer())
            .call(),
    );
    assert_eq!(status, 404);

    let exit = server.terminate();
    assert!(exit.success(), "{}", server.log());
    let events: Vec<Value> = audit(&server.data)
        .into_iter()
        .map(|r| r["event"].clone())
        .collect();
    assert_eq!(
        events.iter().filter(|e| *e == "plugin/quarantine").count(),
        2
    );
    assert_eq!(events.iter().filter(|e| *e == "plugin/release").count(), 1);
    // The offline CLI sees the quarantine in force.
    let output = run(&[
        "timer",
        "quarantined",
        "--data",
        server.data.to_str().unwrap(),
        "--json",
    ]);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(String::from_utf8(output.stdout).unwrap().lines().count(), 1);
}
