//! Filing requests, legal hold, purge and re-sweep, and corrupt rows.

mod support;

use custodian_plugin_takedown::Policy;
use custodian_sdk::Error;
use custodian_sdk::kv::Precondition;
use custodian_sdk::objects::{self, PutCondition};
use custodian_sdk::steps::StepResult;
use custodian_sdk::takedown::TakedownSteps;
use support::*;

const REPO: &str = "acme/widgets";

/// A request over one blob of `len` bytes, driven to `retain`.
fn retained(len: usize) -> (Driver, Id, Vec<u8>) {
    setup();
    let body = bytes(1, len);
    let a = blob(&body);
    hold(&a, REPO);
    let mut driver = file(actions(request_id(1), REPO, &[a]));
    driver.until("retain", 40);
    (driver, a, body)
}

/// Moves the driver's clock past retention.
fn past_retention(driver: &mut Driver) {
    driver.now = driver.now.max(T0 + RETENTION_MS);
}

#[test]
fn plan_create_refuses_malformed_requests_as_invalid_arguments() {
    setup();
    let a = blob(&bytes(1, 10));
    hold(&a, REPO);
    let mut short_id = actions(request_id(1), REPO, &[a]);
    short_id.id.pop();
    let mut both = actions(request_id(1), REPO, &[a]);
    both.pack = Some(a.to_vec());
    let neither = actions(request_id(1), REPO, &[]);
    let too_many = actions(
        request_id(1),
        REPO,
        &(0..1025u32)
            .map(|n| id_of(&n.to_le_bytes()))
            .collect::<Vec<_>>(),
    );
    let twice = actions(request_id(1), REPO, &[a, a]);
    let mut short_object = actions(request_id(1), REPO, &[a]);
    short_object.objects[0].pop();
    let cases = [
        ("a 31-byte id", short_id),
        ("objects and a pack", both),
        ("neither", neither),
        ("1025 objects", too_many),
        ("an object twice", twice),
        ("a 31-byte object", short_object),
        ("no slash", actions(request_id(1), "acme", &[a])),
        ("two slashes", actions(request_id(1), "a/b/c", &[a])),
        ("an empty name", actions(request_id(1), "acme/", &[a])),
    ];
    for (what, request) in cases {
        assert!(
            matches!(
                Policy::plan_create(request, T0),
                Err(Error::InvalidArgument(_))
            ),
            "{what}"
        );
    }
}

#[test]
fn plan_create_names_objects_the_repository_does_not_hold() {
    setup();
    let a = blob(&bytes(1, 10));
    let b = blob(&bytes(2, 10));
    hold(&a, REPO);
    hold(&b, "other/repo");
    match Policy::plan_create(actions(request_id(1), REPO, &[a, b]), T0) {
        Err(Error::NotFound(message)) => {
            assert!(message.contains(&hex(&b)) && !message.contains(&hex(&a)));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn plan_create_refuses_a_pack_that_is_not_a_pack() {
    setup();
    let a = blob(&bytes(1, 10));
    hold(&a, REPO);
    assert!(matches!(
        Policy::plan_create(pack_request(request_id(1), REPO, a), T0),
        Err(Error::NotFound(_))
    ));
}

#[test]
fn plan_create_records_a_request_once_guarded_on_its_absence() {
    setup();
    let a = blob(&bytes(1, 10));
    hold(&a, REPO);
    let commit = Policy::plan_create(actions(request_id(1), REPO, &[a]), T0).unwrap();
    assert!(matches!(
        commit.batch.preconditions.first(),
        Some(Precondition::Absent(r)) if r.partition == "takedown"
    ));
    assert_eq!(commit.audit.len(), 2);
    assert_eq!(commit.audit[0].event, "TakedownRequested");
    assert_eq!(
        commit.audit[0].targets,
        [hex(&request_id(1)), REPO.to_owned()]
    );
    assert_eq!(commit.audit[1].event, "TakedownDenialActivated");
    apply(&commit);
    assert!(matches!(
        Policy::plan_create(actions(request_id(1), REPO, &[a]), T0),
        Err(Error::PreconditionFailed(_))
    ));
}

#[test]
fn plan_create_checks_more_objects_than_one_get_many_holds() {
    setup();
    let objects: Vec<Id> = (0..1024u32).map(|n| id_of(&n.to_le_bytes())).collect();
    for object in &objects {
        hold(object, REPO);
    }
    let commit = Policy::plan_create(actions(request_id(1), REPO, &objects), T0).unwrap();
    apply(&commit);
}

#[test]
fn steps_and_status_of_an_unknown_request_are_not_found() {
    setup();
    let driver = Driver {
        id: request_id(9),
        now: T0,
        events: vec![],
        phases: vec![],
        calls: vec![],
    };
    assert!(matches!(driver.try_step(), Err(Error::NotFound(_))));
    assert!(matches!(
        Policy::status(request_id(9).to_vec()),
        Err(Error::NotFound(_))
    ));
    assert!(matches!(
        Policy::plan_hold(request_id(9).to_vec(), true, T0),
        Err(Error::NotFound(_))
    ));
}

#[test]
fn a_legal_hold_blocks_purging_until_it_is_cleared() {
    let (mut driver, _, _) = retained(100);
    driver.hold(true).unwrap();
    assert_eq!(driver.events.last().unwrap().event, "PreservationLegalHold");
    assert_eq!(driver.events.last().unwrap().detail.as_deref(), Some("on"));
    assert!(driver.status().hold);
    assert_eq!(driver.status().next_purge_ms, None);
    past_retention(&mut driver);
    for _ in 0..3 {
        let before = driver.now;
        let events = driver.step();
        assert_eq!(events[0].event, "PreservationCheckpoint");
        assert_eq!(
            driver.now - before,
            HOUR,
            "held requests are checked hourly"
        );
    }
    assert_eq!(driver.status().phase, "retain");
    assert_eq!(driver.preserved_keys().len(), 1);

    driver.hold(false).unwrap();
    assert_eq!(driver.events.last().unwrap().detail.as_deref(), Some("off"));
    assert_eq!(driver.step()[0].event, "PreservationPurgeStarted");
}

#[test]
fn a_legal_hold_cannot_be_placed_once_purging_has_begun() {
    let (mut driver, _, _) = retained(100);
    past_retention(&mut driver);
    driver.until("purging", 2);
    assert!(matches!(
        driver.hold(true),
        Err(Error::PreconditionFailed(_))
    ));
    driver.until("purged", 5);
    assert!(matches!(
        driver.hold(true),
        Err(Error::PreconditionFailed(_))
    ));
    driver.hold(false).expect("clearing is always allowed");
}

#[test]
fn a_purge_deletes_every_piece_keeps_the_intents_and_an_hourly_re_sweep_finds_a_late_write() {
    let (mut driver, a, body) = retained(9 * MIB + 5);
    assert_eq!(driver.preserved_keys().len(), 10);
    past_retention(&mut driver);
    assert_eq!(driver.step()[0].event, "PreservationPurgeStarted");
    assert_eq!(driver.status().phase, "purging");
    let first = driver.step();
    assert_eq!(first.len(), 8, "eight pieces per step");
    assert!(first.iter().all(|e| e.event == "PreservationPiecePurged"
        && e.detail.as_deref() == Some("deleted")));
    let completed_at = driver.now;
    let second = driver.step();
    let names: Vec<&str> = second.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(
        names,
        [
            "PreservationPiecePurged",
            "PreservationPiecePurged",
            "PreservationPurgeComplete"
        ]
    );
    let status = driver.status();
    assert_eq!(status.phase, "purged");
    assert!(status.purged);
    assert_eq!(status.counts.purged_pieces, 10);
    assert!(driver.preserved_keys().is_empty());
    assert_eq!(driver.rows("piece").len(), 10, "intents are kept");
    let resweep_at = status.next_purge_ms.unwrap();
    assert_eq!(resweep_at, completed_at + HOUR, "an hour after completion");
    assert_eq!(
        driver.now, resweep_at,
        "the purged request checks back then"
    );

    // A write that was delayed past the purge lands now.
    let late = format!(
        "pieces/{}/{}/{}/{:016x}",
        hex(&driver.id),
        &hex(&a)[..2],
        hex(&a),
        MIB
    );
    objects::put(
        "preserved",
        &late,
        &body[MIB..2 * MIB],
        &PutCondition::IfNoneMatchAny,
        None,
        &[],
    )
    .unwrap();
    assert_eq!(driver.step()[0].event, "PreservationPurgeStarted");
    driver.until("purged", 4);
    let deleted: Vec<_> = driver
        .events
        .iter()
        .rev()
        .take_while(|e| e.event != "PreservationPurgeStarted")
        .filter(|e| e.detail.as_deref() == Some("deleted"))
        .collect();
    assert_eq!(deleted.len(), 1);
    assert_eq!(deleted[0].targets[2], late);
    assert!(driver.preserved_keys().is_empty());
    assert_eq!(driver.status().counts.purged_pieces, 11);
}

#[test]
fn purging_before_acquisition_finished_skips_to_discovery_and_ends_purged() {
    setup();
    // Larger than a step copies (8 pieces of 1 MiB), so the step after
    // the selection leaves `a` unfinished and `b` untouched.
    let a = blob(&bytes(1, 9 * MIB));
    let b = blob(&bytes(2, 10));
    hold(&a, REPO);
    hold(&b, REPO);
    let mut driver = file(actions(request_id(1), REPO, &[a, b]));
    driver.until_event("PreservationSourceSelected", 5);
    driver.step();
    assert_eq!(driver.rows("todo").len(), 2, "acquisition is unfinished");
    past_retention(&mut driver);
    assert_eq!(driver.step()[0].event, "PreservationPurgeStarted");
    driver.until("discover", 5);
    driver.until("purged", 20);
    assert!(driver.preserved_keys().is_empty());
    assert!(
        driver
            .event_names()
            .contains(&"PreservationDiscoveryIncomplete".to_owned())
    );
}

#[test]
fn a_takedown_step_is_never_done() {
    let (driver, _, _) = retained(10);
    assert!(matches!(driver.try_step(), Ok(StepResult::Reschedule(_))));
}

fn state_of(driver: &Driver) -> serde_json::Value {
    serde_json::from_slice(&get_row(&state_key(&driver.id)).unwrap()).unwrap()
}

fn with_state(driver: &Driver, edit: impl FnOnce(&mut serde_json::Value)) {
    let mut state = state_of(driver);
    edit(&mut state);
    put_row(state_key(&driver.id), serde_json::to_vec(&state).unwrap());
}

#[test]
fn corrupt_state_rows_are_reported_as_corrupt_never_a_panic() {
    type Edit = fn(&mut serde_json::Value);
    let edits: [(&str, Edit); 7] = [
        ("an unknown version", |s| s["version"] = 2.into()),
        ("an unknown field", |s| s["surprise"] = true.into()),
        ("an unknown phase", |s| s["phase"] = "lost".into()),
        ("a hold while purged", |s| {
            s["hold"] = true.into();
            s["purged"] = true.into();
            s["phase"] = "purged".into();
        }),
        ("a seed index past the actions", |s| s["seed"] = 5.into()),
        ("purged without a purge", |s| s["phase"] = "purged".into()),
        ("a missing field", |s| {
            s.as_object_mut().unwrap().remove("counts");
        }),
    ];
    for (what, edit) in edits {
        let (driver, _, _) = retained(10);
        with_state(&driver, edit);
        assert!(
            matches!(driver.try_step(), Err(Error::Corrupt(_))),
            "{what}"
        );
        assert!(
            matches!(Policy::status(driver.id.to_vec()), Err(Error::Corrupt(_))),
            "{what}"
        );
    }
    let (driver, _, _) = retained(10);
    put_row(state_key(&driver.id), b"\xff not json".to_vec());
    assert!(matches!(driver.try_step(), Err(Error::Corrupt(_))));
}

#[test]
fn corrupt_checkpoint_rows_are_reported_as_corrupt() {
    // A piece row whose key does not match its content, met by a purge.
    let (mut driver, a, _) = retained(10);
    let (key, value) = driver.rows("piece").remove(0);
    let mut moved = key.clone();
    *moved.last_mut().unwrap() = 1;
    put_row(moved, value);
    past_retention(&mut driver);
    driver.step();
    assert!(matches!(driver.try_step(), Err(Error::Corrupt(_))));

    // A todo row that is not a kind.
    setup();
    hold(&a, REPO);
    let driver = file(actions(request_id(2), REPO, &[a]));
    let mut driver = driver;
    driver.step();
    let (todo, _) = driver.rows("todo").remove(0);
    put_row(todo, vec![9]);
    assert!(matches!(driver.try_step(), Err(Error::Corrupt(_))));

    // An object row that contradicts itself.
    setup();
    let a = blob(&bytes(1, 10));
    hold(&a, REPO);
    let mut driver = file(actions(request_id(3), REPO, &[a]));
    driver.until_event("PreservationSourceSelected", 5);
    let (object, _) = driver.rows("object").remove(0);
    put_row(
        object,
        br#"{"kind":1,"size":10,"copied":11,"crc64":0,"chunks":0,"verified":false,"source_failed":false,"holders":null,"holders_done":false}"#.to_vec(),
    );
    assert!(matches!(driver.try_step(), Err(Error::Corrupt(_))));

    // A request record that does not decode.
    let mut request = b"request\0".to_vec();
    request.extend_from_slice(&driver.id);
    put_row(request, b"{}".to_vec());
    assert!(matches!(driver.try_step(), Err(Error::Corrupt(_))));
}
