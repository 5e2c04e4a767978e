//! Denial: what a request stops the host from serving, how it is
//! activated in bounded commits, and how a withdrawal lifts it.

mod support;

use custodian_plugin_takedown::Policy;
use custodian_sdk::Error;
use custodian_sdk::contract::denial::{self, Denial, MAX_DENIALS};
use custodian_sdk::kv::{self, Outcome, Precondition, Write};
use custodian_sdk::steps::StepResult;
use custodian_sdk::takedown::TakedownSteps;
use custodian_sdk::testing;
use support::*;

const REPO: &str = "acme/widgets";

/// A manifest listing `count` distinct chunk ids, held by [`REPO`].
fn big_manifest(count: u32) -> (Id, Vec<Id>) {
    let chunks: Vec<Id> = (0..count).map(|n| id_of(&n.to_be_bytes())).collect();
    let m = manifest_of(&chunks);
    hold(&m, REPO);
    (m, chunks)
}

fn denial_key(id: &Id) -> Vec<u8> {
    let mut key = b"denial\0".to_vec();
    key.extend_from_slice(id);
    key
}

fn event<'a>(driver: &'a Driver, name: &str) -> Option<&'a custodian_sdk::audit::Entry> {
    driver.events.iter().find(|e| e.event == name)
}

#[test]
fn a_request_naming_a_few_blobs_is_fully_denied_by_its_filing_commit() {
    setup();
    let blobs: Vec<Id> = (1..=3).map(|n| blob(&bytes(n, 100))).collect();
    for b in &blobs {
        hold(b, REPO);
    }
    let driver = file_only(actions(request_id(1), REPO, &blobs));

    for b in &blobs {
        assert_eq!(
            denials(b),
            [Denial {
                request: request_id(1),
                since_ms: T0
            }]
        );
    }
    assert!(
        Policy::plan_denial(request_id(1).to_vec(), T0)
            .unwrap()
            .is_none(),
        "nothing is left for plan-denial"
    );
    let activated = event(&driver, "TakedownDenialActivated").expect("audited by the filing");
    assert_eq!(activated.targets, [hex(&driver.id)]);
    assert_eq!(activated.detail.as_deref(), Some("3 objects denied"));
    let status = driver.status().denial;
    assert!(status.settled);
    assert_eq!(status.denied, 3);
    assert_eq!(driver.rows("denied").len(), 3);
    assert!(driver.rows("deny-todo").is_empty());
}

#[test]
fn a_manifest_with_more_chunks_than_one_commit_can_deny_is_denied_by_repeated_plan_denial_commits()
{
    setup();
    let (m, chunks) = big_manifest(100);
    let mut driver = file_only(actions(request_id(2), REPO, &[m]));
    assert!(!driver.status().denial.settled);
    assert_eq!(denied_by(&m), [driver.id], "the named manifest first");
    assert!(event(&driver, "TakedownDenialActivated").is_none());

    // Each commit is bounded (settle_denial asserts at most 72 ops), so
    // 100 chunks take several.
    let commits = driver.settle_denial(20);
    assert!(commits >= 4, "{commits} plan-denial commits");
    for object in std::iter::once(&m).chain(&chunks) {
        assert_eq!(denied_by(object), [driver.id], "{}", hex(object));
    }
    let status = driver.status().denial;
    assert!(status.settled);
    assert_eq!(status.denied, 101);
    assert!(driver.rows("deny-todo").is_empty());
    let activated = event(&driver, "TakedownDenialActivated").unwrap();
    assert_eq!(activated.detail.as_deref(), Some("101 objects denied"));
}

#[test]
fn every_member_of_a_pack_at_every_level_is_denied_nested_packs_and_manifest_chunks_included() {
    setup();
    let (a, b, c) = (
        blob(&bytes(1, 10)),
        blob(&bytes(2, 20)),
        blob(&bytes(3, 30)),
    );
    let (m, chunks) = {
        let chunks = [id_of(b"chunk one"), id_of(b"chunk two")];
        (manifest_of(&chunks), chunks)
    };
    let inner = pack(&[(b, 1), (m, 2)]);
    seal(&inner);
    let unsealed = pack(&[(c, 1), (a, 1)]);
    let middle = pack(&[(inner, 3), (unsealed, 3)]);
    seal(&middle);
    let root = pack(&[(a, 1), (middle, 3), (inner, 3)]);
    seal(&root);
    hold(&root, REPO);
    let mut driver = file_only(pack_request(request_id(3), REPO, root));
    assert_eq!(
        driver.settle_denial(10),
        0,
        "a pack this small is denied by its filing's commit"
    );

    let every = [
        root, middle, inner, unsealed, a, b, c, m, chunks[0], chunks[1],
    ];
    for object in &every {
        assert_eq!(
            denied_by(object),
            [driver.id],
            "{} denied once",
            hex(object)
        );
    }
    let status = driver.status().denial;
    assert!(status.settled);
    assert_eq!(status.denied, every.len() as u64);
    assert_eq!(driver.rows("denied").len(), every.len());
}

#[test]
fn two_requests_naming_the_same_object_both_deny_it_and_withdrawing_one_leaves_the_others() {
    setup();
    let (shared, own) = (blob(&bytes(1, 10)), blob(&bytes(2, 10)));
    hold(&shared, REPO);
    hold(&own, REPO);
    let mut first = file(actions(request_id(1), REPO, &[shared, own]));
    let second = file(actions(request_id(2), REPO, &[shared]));
    assert_eq!(denied_by(&shared), [first.id, second.id]);
    assert_eq!(denied_by(&own), [first.id]);

    first.withdraw().unwrap();
    assert!(!first.status().denial.settled);
    first.settle_denial(5);
    assert_eq!(denied_by(&shared), [second.id], "the other's denial stays");
    assert!(
        kv::get(denial::PARTITION, &denial::key(&own))
            .unwrap()
            .is_none(),
        "an emptied row is deleted"
    );
    assert!(first.rows("denied").is_empty());
    let lifted = event(&first, "TakedownDenialLifted").expect("audited");
    assert_eq!(lifted.targets, [hex(&first.id)]);
    assert!(second.status().denial.settled);
    assert_eq!(second.status().denial.denied, 1);
}

#[test]
fn an_object_denied_by_the_most_requests_refuses_one_more_with_a_conflict_naming_it() {
    setup();
    let a = blob(&bytes(1, 10));
    hold(&a, REPO);
    let others: Vec<Denial> = (0..MAX_DENIALS)
        .map(|n| Denial {
            request: id_of(&n.to_be_bytes()),
            since_ms: T0,
        })
        .collect();
    let outcome = custodian_sdk::Batch::new()
        .put(denial::PARTITION, denial::key(&a), denial::encode(&others))
        .apply()
        .unwrap();
    assert_eq!(outcome, Outcome::Committed);
    match Policy::plan_create(actions(request_id(1), REPO, &[a]), T0) {
        Err(Error::Conflict(message)) => assert!(message.contains(&hex(&a)), "{message}"),
        other => panic!("expected a conflict, got {other:?}"),
    }
}

#[test]
fn withdrawal_is_refused_once_purging_has_begun() {
    setup();
    let a = blob(&bytes(1, 10));
    hold(&a, REPO);
    let mut driver = file(actions(request_id(1), REPO, &[a]));
    driver.until("retain", 20);
    driver.now = T0 + RETENTION_MS;
    driver.until("purging", 2);
    assert!(matches!(
        driver.withdraw(),
        Err(Error::PreconditionFailed(_))
    ));
    driver.until("purged", 5);
    assert!(matches!(
        driver.withdraw(),
        Err(Error::PreconditionFailed(_))
    ));
    assert_eq!(denied_by(&a), [driver.id], "the denial stays");
}

#[test]
fn withdrawal_is_refused_when_the_request_is_withdrawn_already() {
    setup();
    let a = blob(&bytes(1, 10));
    hold(&a, REPO);
    let mut driver = file(actions(request_id(1), REPO, &[a]));
    driver.withdraw().unwrap();
    assert!(matches!(
        driver.withdraw(),
        Err(Error::PreconditionFailed(_))
    ));
    driver.settle_denial(5);
    assert!(matches!(
        driver.withdraw(),
        Err(Error::PreconditionFailed(_))
    ));
}

#[test]
fn withdrawing_an_unknown_request_or_planning_its_denial_is_not_found() {
    setup();
    assert!(matches!(
        Policy::plan_withdraw(request_id(9).to_vec(), T0),
        Err(Error::NotFound(_))
    ));
    assert!(matches!(
        Policy::plan_denial(request_id(9).to_vec(), T0),
        Err(Error::NotFound(_))
    ));
}

#[test]
fn a_withdrawal_is_allowed_under_a_legal_hold_and_the_request_keeps_its_preserved_copy() {
    setup();
    let body = bytes(1, 100);
    let a = blob(&body);
    hold(&a, REPO);
    let mut driver = file(actions(request_id(1), REPO, &[a]));
    driver.until("retain", 20);
    driver.hold(true).unwrap();
    driver
        .withdraw()
        .expect("a hold keeps the evidence, not the denial");
    let withdrawn = event(&driver, "TakedownWithdrawn").expect("audited");
    assert_eq!(withdrawn.targets, [hex(&driver.id)]);

    // The steps lift the denial first (the serving copy its removal took
    // put back before), then the request goes on.
    let events = driver.step();
    let names: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(names, ["ServingCopyRestored", "TakedownDenialLifted"]);
    assert!(denials(&a).is_empty());
    driver.step();
    let status = driver.status();
    assert_eq!(status.phase, "retain");
    assert!(status.hold);
    assert_eq!(driver.preserved(&a), body, "the preserved copy stays");
}

#[test]
fn a_withdrawn_request_goes_on_to_preserve_retain_and_purge() {
    setup();
    let a = blob(&bytes(1, 100));
    hold(&a, REPO);
    let mut driver = file(actions(request_id(1), REPO, &[a]));
    driver.withdraw().unwrap();
    driver.settle_denial(5);
    assert!(denials(&a).is_empty());
    driver.until("retain", 20);
    assert_eq!(driver.status().verification, "verified");
    driver.now = T0 + RETENTION_MS;
    driver.until("purged", 10);
    assert!(driver.preserved_keys().is_empty());
}

#[test]
fn a_step_of_a_request_whose_activation_is_unfinished_does_only_denial_work() {
    setup();
    let (m, chunks) = big_manifest(60);
    let mut driver = file_only(actions(request_id(4), REPO, &[m]));
    assert!(!driver.status().denial.settled);
    let state_row = [b"state\0".as_slice(), &driver.id].concat();
    let filed = get_row(&state_row);
    assert!(filed.is_some(), "the filing writes the first state");

    let mut denial_steps = 0;
    while !driver.status().denial.settled {
        let Ok(StepResult::Reschedule(next)) = driver.try_step() else {
            panic!("a denial step reschedules");
        };
        assert_eq!(next.due_at_ms, driver.now, "due again at once");
        assert!(ops(&next.commit) <= DENIAL_COMMIT_OPS);
        for write in &next.commit.batch.writes {
            let (partition, key) = match write {
                Write::Put(e) => (&e.partition, &e.key),
                Write::Delete(r) => (&r.partition, &r.key),
            };
            let denial_work = partition == "denial"
                || ["denial\0", "denied\0", "deny-todo\0"]
                    .iter()
                    .any(|tag| key.starts_with(tag.as_bytes()));
            assert!(denial_work, "a denial step wrote {partition} {key:?}");
        }
        assert!(matches!(
            next.commit.batch.preconditions.first(),
            Some(Precondition::Equals(e)) if e.key == denial_key(&driver.id)
        ));
        driver.step();
        denial_steps += 1;
        assert!(denial_steps < 10);
    }
    assert!(denial_steps >= 2, "{denial_steps}");
    assert_eq!(get_row(&state_row), filed, "no preservation step ran");
    assert!(driver.rows("todo").is_empty());
    let names = driver.event_names();
    assert!(names.contains(&"TakedownDenialActivated".to_owned()));
    assert!(
        driver
            .events
            .iter()
            .filter(|e| e.event == "PreservationCheckpoint")
            .all(|e| e.detail.as_deref() == Some("denial activation"))
    );
    for chunk in &chunks {
        assert_eq!(denied_by(chunk), [driver.id]);
    }

    // Settled: the next step seeds.
    driver.step();
    assert_ne!(get_row(&state_row), filed);
    assert!(!driver.rows("todo").is_empty());
}

#[test]
fn a_stale_plan_denial_commit_fails_its_guard() {
    setup();
    let (m, _) = big_manifest(100);
    let driver = file_only(actions(request_id(5), REPO, &[m]));
    testing::set_now(driver.now);
    let stale = Policy::plan_denial(driver.id.to_vec(), driver.now)
        .unwrap()
        .unwrap();
    let fresh = Policy::plan_denial(driver.id.to_vec(), driver.now)
        .unwrap()
        .unwrap();
    apply(&fresh);
    assert!(matches!(
        stale.batch.preconditions[0],
        Precondition::Equals(ref e) if e.key == denial_key(&driver.id)
    ));
    assert_eq!(
        kv::apply(&stale.batch).unwrap(),
        Outcome::PreconditionFailed(0),
        "two hosts cannot both commit the same chunk"
    );
}

#[test]
fn a_withdrawal_cannot_land_after_the_step_that_starts_a_purge() {
    setup();
    let a = blob(&bytes(1, 10));
    hold(&a, REPO);
    let mut driver = file(actions(request_id(6), REPO, &[a]));
    driver.until("retain", 20);
    driver.now = T0 + RETENTION_MS;
    testing::set_now(driver.now);
    let withdrawal = Policy::plan_withdraw(driver.id.to_vec(), driver.now).unwrap();
    assert_eq!(driver.step()[0].event, "PreservationPurgeStarted");
    assert!(matches!(
        kv::apply(&withdrawal.batch).unwrap(),
        Outcome::PreconditionFailed(_)
    ));
    assert_eq!(denied_by(&a), [driver.id]);
}

#[test]
fn a_step_planned_before_a_withdrawal_cannot_land_after_it() {
    setup();
    let a = blob(&bytes(1, 10));
    hold(&a, REPO);
    let mut driver = file(actions(request_id(6), REPO, &[a]));
    let Ok(StepResult::Reschedule(step)) = driver.try_step() else {
        panic!("the step runs");
    };
    driver.withdraw().unwrap();
    assert!(matches!(
        kv::apply(&step.commit.batch).unwrap(),
        Outcome::PreconditionFailed(_)
    ));
}

#[test]
fn a_withdrawal_during_activation_drops_the_unfinished_walks_and_lifts_what_was_denied() {
    setup();
    let (m, chunks) = big_manifest(100);
    let mut driver = file_only(actions(request_id(7), REPO, &[m]));
    assert!(!driver.rows("deny-todo").is_empty());
    driver.withdraw().unwrap();
    assert!(
        Policy::plan_denial(driver.id.to_vec(), driver.now)
            .unwrap()
            .is_some()
    );
    driver.settle_denial(10);
    assert!(driver.rows("deny-todo").is_empty());
    assert!(driver.rows("denied").is_empty());
    assert!(testing::partition(denial::PARTITION).is_empty());
    for chunk in &chunks {
        assert!(denials(chunk).is_empty());
    }
    assert!(event(&driver, "TakedownDenialActivated").is_none());
    assert!(event(&driver, "TakedownDenialLifted").is_some());
}

#[test]
fn lifting_more_denials_than_one_commit_holds_takes_several_bounded_commits() {
    setup();
    let (m, _) = big_manifest(100);
    let mut driver = file(actions(request_id(8), REPO, &[m]));
    assert_eq!(driver.status().denial.denied, 101);
    driver.withdraw().unwrap();
    let commits = driver.settle_denial(20);
    assert!(commits >= 5, "{commits} lifting commits");
    assert!(testing::partition(denial::PARTITION).is_empty());
    let status = driver.status().denial;
    assert!(status.settled);
    assert_eq!(status.denied, 0);
}

#[test]
fn status_shows_when_the_denial_took_effect_whether_it_is_settled_how_many_objects_and_the_withdrawal()
 {
    setup();
    let (m, _) = big_manifest(40);
    let mut driver = file_only(actions(request_id(9), REPO, &[m]));
    let filed = driver.status().denial;
    assert_eq!(filed.since_ms, T0);
    assert!(!filed.settled);
    assert!(filed.denied > 1 && filed.denied < 41, "{}", filed.denied);
    assert_eq!(filed.withdrawn_ms, None);

    driver.settle_denial(5);
    let settled = driver.status().denial;
    assert!(settled.settled);
    assert_eq!(settled.denied, 41);

    driver.now = T0 + HOUR;
    driver.withdraw().unwrap();
    let withdrawn = driver.status().denial;
    assert_eq!(withdrawn.since_ms, T0);
    assert!(!withdrawn.settled);
    assert_eq!(withdrawn.denied, 41);
    assert_eq!(withdrawn.withdrawn_ms, Some(T0 + HOUR));

    driver.settle_denial(5);
    let lifted = driver.status().denial;
    assert!(lifted.settled);
    assert_eq!(lifted.denied, 0);
    assert_eq!(lifted.withdrawn_ms, Some(T0 + HOUR));
}

#[test]
fn a_request_filed_before_denial_existed_is_settled_denying_nothing_and_can_be_withdrawn() {
    setup();
    let a = blob(&bytes(1, 10));
    hold(&a, REPO);
    let mut driver = file(actions(request_id(10), REPO, &[a]));
    // As an older version of this policy left it: no denial rows at all.
    for (key, _) in testing::partition("takedown") {
        if key.starts_with(b"denial\0") || key.starts_with(b"denied\0") {
            custodian_sdk::Batch::new()
                .delete("takedown", key)
                .apply()
                .unwrap();
        }
    }
    custodian_sdk::Batch::new()
        .delete(denial::PARTITION, denial::key(&a))
        .apply()
        .unwrap();
    let status = driver.status().denial;
    assert!(status.settled);
    assert_eq!(status.denied, 0);
    assert!(
        Policy::plan_denial(driver.id.to_vec(), driver.now)
            .unwrap()
            .is_none()
    );
    driver.until("retain", 20);
    driver.withdraw().unwrap();
    driver.settle_denial(3);
    assert!(driver.status().denial.settled);
}

#[test]
fn a_corrupt_denial_state_is_reported_as_corrupt() {
    setup();
    let a = blob(&bytes(1, 10));
    hold(&a, REPO);
    let driver = file(actions(request_id(11), REPO, &[a]));
    put_row(denial_key(&driver.id), b"{\"version\":2}".to_vec());
    assert!(matches!(driver.try_step(), Err(Error::Corrupt(_))));
    assert!(matches!(
        Policy::status(driver.id.to_vec()),
        Err(Error::Corrupt(_))
    ));
    assert!(matches!(
        Policy::plan_denial(driver.id.to_vec(), T0),
        Err(Error::Corrupt(_))
    ));
}

#[test]
fn a_pack_member_the_content_index_does_not_know_is_corrupt() {
    setup();
    let unknown = id_of(b"never indexed");
    let root = pack(&[(unknown, 1)]);
    seal(&root);
    hold(&root, REPO);
    let driver = file_only(pack_request(request_id(12), REPO, root));
    // The filing denied the pack; its member is left to plan-denial.
    assert_eq!(denied_by(&root), [driver.id]);
    match Policy::plan_denial(driver.id.to_vec(), T0) {
        Err(Error::Corrupt(message)) => assert!(message.contains(&hex(&unknown)), "{message}"),
        other => panic!("expected corrupt, got {other:?}"),
    }
}
