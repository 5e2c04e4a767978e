//! What a request costs the KV in round trips. On a networked KV (etcd)
//! every host call of the KV is one, so a step gathers the rows it can ask
//! for before it knows any answer into one snapshot read. These tests hold
//! each phase to the host calls that design leaves it, counted by the
//! native host as the host's metrics count them.

mod support;

use custodian_plugin_takedown::Policy;
use custodian_sdk::takedown::TakedownSteps;
use custodian_sdk::testing;
use support::*;

const REPO: &str = "acme/site";

/// Files a request of `count` blobs of 4 KiB, each held by two
/// repositories, and steps it to `retain`.
fn to_retain(count: u8) -> Driver {
    setup();
    let objects: Vec<Id> = (0..count)
        .map(|seed| {
            let object = blob(&bytes(seed, 4096));
            hold(&object, REPO);
            hold(&object, "acme/mirror");
            object
        })
        .collect();
    let mut driver = file(actions(request_id(1), REPO, &objects));
    driver.until("retain", 100);
    driver
}

#[test]
fn every_step_reads_its_rows_and_its_queues_in_one_host_call_and_a_phase_in_at_most_two_more() {
    let driver = to_retain(8);
    let most = |phase: &str| match phase {
        // The object list: the only read seeding adds.
        "seed" => 2,
        // The objects' rows; the queue page came with the first read.
        "acquire" => 2,
        // The objects' rows with their holders, and the holders' markers.
        "discover" => 3,
        // The progress page; each object's rows, index, denial and `c`
        // rows (the other deniers' holdings would be one more; here there
        // are none).
        "remove" => 3,
        _ => 1,
    };
    for (phase, reads, _) in &driver.calls {
        assert!(
            *reads >= 1 && *reads <= most(phase),
            "a {phase} step made {reads} KV reads: {:?}",
            driver.calls
        );
    }
    // A step with nothing left in its phase (the last of acquisition,
    // of discovery) reads once and moves on.
    assert!(
        driver.calls.iter().any(|(_, reads, _)| *reads == 1),
        "{:?}",
        driver.calls
    );
}

#[test]
fn eight_objects_cost_no_more_steps_or_reads_than_one_and_one_intent_commit_more() {
    let one = to_retain(1);
    let eight = to_retain(8);
    let reads = |driver: &Driver| driver.calls.iter().map(|(_, r, _)| r).sum::<u64>();
    let applies = |driver: &Driver| driver.calls.iter().map(|(_, _, a)| a).sum::<u64>();
    assert_eq!(
        (one.calls.len(), reads(&one)),
        (eight.calls.len(), reads(&eight)),
        "steps and reads of one object and of eight: {:?} against {:?}",
        one.calls,
        eight.calls
    );
    // One object's selection commits its piece intent with it; eight
    // selections fill the step's audit bound, so their copy step commits
    // their eight intents at once. Both then commit one removal intent.
    assert_eq!(
        (applies(&one), applies(&eight)),
        (1, 2),
        "intent commits of one object and of eight: {:?} against {:?}",
        one.calls,
        eight.calls
    );
}

#[test]
fn filing_reads_the_request_its_lock_and_what_the_repository_holds_in_one_host_call() {
    setup();
    let objects: Vec<Id> = (0..8)
        .map(|seed| {
            let object = blob(&bytes(seed, 4096));
            hold(&object, REPO);
            object
        })
        .collect();
    let before = testing::kv_calls();
    Policy::plan_create(actions(request_id(1), REPO, &objects), T0).expect("a valid filing");
    let reads = testing::kv_calls().reads() - before.reads();
    // The filing's own read, then its denial: the objects' kinds, their
    // `denied` marks with their denial rows, and the walks left over.
    assert!(reads <= 4, "filing made {reads} KV reads");
}
