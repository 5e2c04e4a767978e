//! Removal of serving copies once preserved, restoration on withdrawal,
//! and acquisition from another request's preserved copy once a serving
//! copy is gone.
//!
//! The native test host's stores are unversioned, so "every version" is
//! the current object here (`list-versions` answers `unsupported` and the
//! removal falls back to a delete, as on the host's unversioned stores).

mod support;

use custodian_plugin_takedown::Policy;
use custodian_sdk::Error;
use custodian_sdk::kv::Outcome;
use custodian_sdk::objects;
use custodian_sdk::takedown::TakedownSteps;
use support::*;

const REPO: &str = "acme/widgets";

/// Whether `object` has a serving copy.
fn serving(object: &Id) -> bool {
    match objects::head("serving", &format!("content/{}", hex(object))) {
        Ok(_) => true,
        Err(Error::NotFound(_)) => false,
        Err(other) => panic!("head: {other:?}"),
    }
}

/// `object`'s serving bytes.
fn served(object: &Id) -> Vec<u8> {
    objects::get("serving", &format!("content/{}", hex(object)), None)
        .unwrap()
        .1
}

/// The reason of `driver`'s `kept` row of `object`, if any.
fn kept(driver: &Driver, object: &Id) -> Option<String> {
    let mut key = b"kept\0".to_vec();
    key.extend_from_slice(&driver.id);
    key.extend_from_slice(object);
    get_row(&key).map(|raw| String::from_utf8(raw).unwrap())
}

/// Audit entries named `event` about `object`.
fn events_about(driver: &Driver, event: &str, object: &Id) -> usize {
    driver
        .events
        .iter()
        .filter(|e| e.event == event && e.targets.get(1) == Some(&hex(object)))
        .count()
}

#[test]
fn serving_copies_of_a_verified_request_are_removed_all_versions_and_counted() {
    setup();
    let (a, b) = (blob(&bytes(1, 100)), blob(&bytes(2, 2 * MIB + 3)));
    let chunks = vec![bytes(3, 500), bytes(4, 700)];
    let (m, _) = manifest(&chunks);
    for object in [a, b, m] {
        hold(&object, REPO);
    }
    let mut driver = file(actions(request_id(1), REPO, &[a, b, m]));
    driver.until("retain", 80);

    let every = [a, b, m, id_of(&chunks[0]), id_of(&chunks[1])];
    for object in &every {
        assert!(!serving(object), "{} is removed", hex(object));
        assert_eq!(
            events_about(&driver, "ServingCopyRemoved", object),
            1,
            "audited once"
        );
        assert!(
            !driver.preserved(object).is_empty(),
            "the preserved copy stays"
        );
    }
    let status = driver.status();
    assert_eq!(status.denial.removed, every.len() as u64);
    assert_eq!(status.denial.restored, 0);
    assert_eq!(driver.rows("removed").len(), every.len());
    assert!(driver.rows("remove").is_empty(), "no intent is left");
    assert!(driver.rows("kept").is_empty());
    let removed = driver
        .events
        .iter()
        .find(|e| e.event == "ServingCopyRemoved")
        .unwrap();
    assert_eq!(removed.targets[0], hex(&driver.id));
    // Still denied by id: the host refuses them whatever the store holds.
    for object in &every {
        assert_eq!(denied_by(object), [driver.id]);
    }
}

#[test]
fn nothing_is_removed_before_verification() {
    setup();
    let big = bytes(1, 9 * MIB + 5);
    let a = blob(&big);
    let chunks = vec![bytes(2, MIB + 1), bytes(3, 40)];
    let (m, _) = manifest(&chunks);
    hold(&a, REPO);
    hold(&m, REPO);
    let mut driver = file(actions(request_id(1), REPO, &[a, m]));
    let every = [a, m, id_of(&chunks[0]), id_of(&chunks[1])];
    let mut steps_before = 0;
    for _ in 0..80 {
        let status = driver.status();
        if status.phase == "retain" {
            break;
        }
        for object in &every {
            if !serving(object) {
                assert!(
                    matches!(status.phase.as_str(), "remove" | "retain"),
                    "{} removed in phase {}",
                    hex(object),
                    status.phase
                );
                assert_eq!(status.verification, "verified");
            }
        }
        if every.iter().all(serving) {
            steps_before += 1;
        }
        driver.step();
    }
    assert!(
        steps_before > 8,
        "acquisition and closure took {steps_before} steps"
    );
    assert!(every.iter().all(|o| !serving(o)), "removed once verified");
}

#[test]
fn a_chunk_shared_with_a_manifest_that_is_not_denied_keeps_its_serving_copy_while_the_taken_down_files_own_chunks_go()
 {
    setup();
    let (shared, own, other) = (bytes(1, 300), bytes(2, 400), bytes(3, 500));
    let (taken, _) = manifest(&[shared.clone(), own.clone()]);
    let (served_file, _) = manifest(&[shared.clone(), other.clone()]);
    hold(&taken, REPO);
    hold(&served_file, REPO);
    let mut driver = file(actions(request_id(1), REPO, &[taken]));
    driver.until("retain", 60);

    assert!(!serving(&taken));
    assert!(!serving(&id_of(&own)), "the file's own chunk goes");
    assert!(serving(&id_of(&shared)), "the shared chunk stays");
    assert!(serving(&served_file) && serving(&id_of(&other)));
    let reason = kept(&driver, &id_of(&shared)).expect("recorded as kept");
    assert!(reason.contains(&hex(&served_file)), "{reason}");
    assert!(reason.contains("not taken down"), "{reason}");
    assert_eq!(driver.status().denial.removed, 2);
    assert_eq!(
        denied_by(&id_of(&shared)),
        [driver.id],
        "still denied by id"
    );
}

#[test]
fn a_chunk_shared_with_two_manifests_both_denied_is_removed() {
    setup();
    let (shared, one, two) = (bytes(1, 300), bytes(2, 400), bytes(3, 500));
    let (first, _) = manifest(&[shared.clone(), one.clone()]);
    let (second, _) = manifest(&[two.clone(), shared.clone()]);
    hold(&first, REPO);
    hold(&second, REPO);
    let mut driver = file(actions(request_id(1), REPO, &[first, second]));
    driver.until("retain", 60);

    for object in [first, second, id_of(&shared), id_of(&one), id_of(&two)] {
        assert!(!serving(&object), "{}", hex(&object));
    }
    assert_eq!(driver.status().denial.removed, 5);
    assert_eq!(
        events_about(&driver, "ServingCopyRemoved", &id_of(&shared)),
        1
    );
}

#[test]
fn an_object_another_denying_request_has_not_verified_yet_is_not_removed_until_it_has() {
    setup();
    let x = blob(&bytes(1, 100));
    hold(&x, REPO);
    let mut first = file(actions(request_id(1), REPO, &[x]));
    let mut second = file(actions(request_id(2), REPO, &[x]));
    assert_eq!(denied_by(&x), [first.id, second.id]);

    first.until("retain", 20);
    assert!(serving(&x), "the second request has not verified it");
    let reason = kept(&first, &x).expect("recorded as kept");
    assert!(reason.contains(&hex(&second.id)), "{reason}");
    assert_eq!(first.status().denial.removed, 0);

    second.until("retain", 20);
    assert!(!serving(&x), "the last to verify removes it");
    assert_eq!(second.status().denial.removed, 1);
    assert_eq!(events_about(&second, "ServingCopyRemoved", &x), 1);
    assert_eq!(first.status().denial.removed, 0);
}

#[test]
fn a_crash_between_the_removal_intent_and_the_commit_finishes_the_removal_once_audited_once() {
    setup();
    let (a, b) = (blob(&bytes(1, 100)), blob(&bytes(2, 200)));
    hold(&a, REPO);
    hold(&b, REPO);
    let mut driver = file(actions(request_id(1), REPO, &[a, b]));
    driver.until("remove", 30);

    // The removal step commits its intents and deletes the serving copies,
    // then the host crashes before committing the step.
    driver.try_step().expect("the removal step runs");
    assert_eq!(driver.rows("remove").len(), 2, "the intents are committed");
    assert!(!serving(&a) && !serving(&b));
    assert_eq!(driver.status().denial.removed, 0);
    assert!(driver.rows("removed").is_empty());

    // The timer fires again: the pending removals are finished, not
    // decided again.
    let events = driver.step();
    let removed: Vec<_> = events
        .iter()
        .filter(|e| e.event == "ServingCopyRemoved")
        .collect();
    assert_eq!(removed.len(), 2);
    assert!(
        removed[0]
            .detail
            .as_deref()
            .unwrap()
            .contains("gone already"),
        "{removed:?}"
    );
    assert!(driver.rows("remove").is_empty());
    driver.until("retain", 10);

    for object in [a, b] {
        assert_eq!(events_about(&driver, "ServingCopyRemoved", &object), 1);
    }
    let status = driver.status();
    assert_eq!(status.denial.removed, 2);
    assert_eq!(driver.rows("removed").len(), 2);
    assert!(driver.rows("kept").is_empty());
}

#[test]
fn withdrawal_restores_every_removed_object_byte_identical_before_lifting_and_counts_them() {
    setup();
    let (a, b) = (blob(&bytes(1, 100)), blob(&bytes(2, 5 * MIB + 3)));
    let chunks = vec![bytes(3, MIB + 7), bytes(4, 40)];
    let (m, _) = manifest(&chunks);
    for object in [a, b, m] {
        hold(&object, REPO);
    }
    let mut driver = file(actions(request_id(1), REPO, &[a, b, m]));
    driver.until("retain", 80);
    let every = [a, b, m, id_of(&chunks[0]), id_of(&chunks[1])];
    assert!(every.iter().all(|o| !serving(o)));
    assert_eq!(driver.status().denial.removed, 5);

    driver.withdraw().unwrap();
    // Lift as the host does, checking after every commit that nothing is
    // undenied without its serving copy.
    testing_now(&driver);
    let mut commits = 0;
    while let Some(commit) = Policy::plan_denial(driver.id.to_vec(), driver.now).unwrap() {
        assert!(ops(&commit) <= DENIAL_COMMIT_OPS);
        apply(&commit);
        driver.events.extend(commit.audit);
        commits += 1;
        assert!(commits < 20);
        for object in &every {
            assert!(
                !denied_by(object).is_empty() || serving(object),
                "{} undenied without a serving copy",
                hex(object)
            );
        }
    }
    for object in &every {
        assert!(denied_by(object).is_empty());
        assert_eq!(id_of(&served(object)), *object, "byte-identical (BLAKE3)");
        assert_eq!(events_about(&driver, "ServingCopyRestored", object), 1);
    }
    let status = driver.status();
    assert!(status.denial.settled);
    assert_eq!(status.denial.restored, 5);
    assert_eq!(status.last_error, None);
    let names = driver.event_names();
    let restored = names
        .iter()
        .rposition(|n| n == "ServingCopyRestored")
        .unwrap();
    let lifted = names
        .iter()
        .position(|n| n == "TakedownDenialLifted")
        .unwrap();
    assert!(restored < lifted);
}

fn testing_now(driver: &Driver) {
    custodian_sdk::testing::set_now(driver.now);
}

#[test]
fn withdrawing_one_of_two_requests_restores_nothing_while_the_other_still_denies() {
    setup();
    let x = blob(&bytes(1, 100));
    hold(&x, REPO);
    let mut first = file(actions(request_id(1), REPO, &[x]));
    let mut second = file(actions(request_id(2), REPO, &[x]));
    first.until("retain", 20);
    second.until("retain", 20);
    assert!(!serving(&x));

    first.withdraw().unwrap();
    first.settle_denial(5);
    assert_eq!(denied_by(&x), [second.id]);
    assert!(!serving(&x), "the other request still denies it");
    assert_eq!(first.status().denial.restored, 0);
    assert_eq!(events_about(&first, "ServingCopyRestored", &x), 0);

    // The last denier's withdrawal puts it back.
    second.withdraw().unwrap();
    second.settle_denial(5);
    assert!(denied_by(&x).is_empty());
    assert_eq!(id_of(&served(&x)), x);
    assert_eq!(second.status().denial.restored, 1);
}

#[test]
fn withdrawing_the_request_of_a_file_sharing_a_chunk_with_another_taken_down_file_restores_the_chunk()
 {
    setup();
    let (shared, one, two) = (bytes(1, 300), bytes(2, 400), bytes(3, 500));
    let (first_file, _) = manifest(&[shared.clone(), one.clone()]);
    let (second_file, _) = manifest(&[shared.clone(), two.clone()]);
    hold(&first_file, REPO);
    hold(&second_file, REPO);
    let mut first = file(actions(request_id(1), REPO, &[first_file]));
    let mut second = file(actions(request_id(2), REPO, &[second_file]));
    first.until("retain", 40);
    second.until("retain", 40);
    let shared_id = id_of(&shared);
    assert!(!serving(&shared_id), "both files are taken down");
    assert_eq!(denied_by(&shared_id), [first.id, second.id]);

    second.withdraw().unwrap();
    second.settle_denial(10);
    // The second file is served again, so all of it is back, the chunk the
    // first request still denies included.
    for object in [second_file, id_of(&two), shared_id] {
        assert!(serving(&object), "{}", hex(&object));
    }
    assert_eq!(denied_by(&shared_id), [first.id]);
    assert!(!serving(&first_file) && !serving(&id_of(&one)));
    assert_eq!(second.status().denial.restored, 3);
}

#[test]
fn a_request_filed_after_removal_acquires_from_the_other_requests_preserved_copy_and_verifies() {
    setup();
    let body = bytes(1, 3 * MIB + 9);
    let x = blob(&body);
    let chunks = vec![bytes(2, 800), bytes(3, 900)];
    let (m, file_bytes) = manifest(&chunks);
    hold(&x, REPO);
    hold(&m, REPO);
    hold(&x, "other/fork");
    hold(&m, "other/fork");
    let mut first = file(actions(request_id(1), REPO, &[x, m]));
    first.until("retain", 60);
    assert!(!serving(&x) && !serving(&m));

    // The manifest's chunk list is read from the first request's
    // preserved copy to deny the chunks. (Filed at T0, as every request
    // of these tests.)
    custodian_sdk::testing::set_now(T0);
    let mut second = file(actions(request_id(2), "other/fork", &[x, m]));
    for chunk in &chunks {
        assert_eq!(denied_by(&id_of(chunk)), [first.id, second.id]);
    }
    second.until("retain", 60);

    let status = second.status();
    assert_eq!(status.verification, "verified");
    assert_eq!(status.counts.verified, 4);
    assert_eq!(status.counts.corrupt, 0);
    assert_eq!(second.preserved(&x), body);
    let reassembled: Vec<u8> = chunks
        .iter()
        .flat_map(|c| second.preserved(&id_of(c)))
        .collect();
    assert_eq!(reassembled, file_bytes);
    for (_, raw) in second.rows("source") {
        let source: serde_json::Value = serde_json::from_slice(&raw).unwrap();
        assert_eq!(source["request"], hex(&first.id), "{source}");
        assert!(
            source["key"]
                .as_str()
                .unwrap()
                .starts_with(&format!("pieces/{}/", hex(&first.id)))
        );
    }
    let selected = second
        .events
        .iter()
        .find(|e| e.event == "PreservationSourceSelected")
        .unwrap();
    assert!(
        selected
            .detail
            .as_deref()
            .unwrap()
            .contains(&hex(&first.id))
    );
    // Nothing was left to remove, and nothing is counted twice.
    assert_eq!(status.denial.removed, 0);
    assert!(kept(&second, &x).unwrap().contains("gone already"));

    // Both withdrawn: the last one restores from its own copy.
    first.withdraw().unwrap();
    first.settle_denial(10);
    assert!(!serving(&x));
    second.withdraw().unwrap();
    second.settle_denial(10);
    assert_eq!(served(&x), body);
    assert_eq!(second.status().denial.restored, 4);
}

#[test]
fn a_request_finding_no_serving_copy_and_no_preserved_copy_records_the_source_as_missing() {
    setup();
    let x = blob(&bytes(1, 100));
    hold(&x, REPO);
    let mut first = file(actions(request_id(1), REPO, &[x]));
    first.until("retain", 20);
    assert!(!serving(&x));
    // The only preserved copy goes with a purge.
    first.now = T0 + RETENTION_MS;
    first.until("purged", 10);

    custodian_sdk::testing::set_now(T0);
    let mut second = file(actions(request_id(2), REPO, &[x]));
    second.until("retain", 20);
    let status = second.status();
    assert_eq!(status.verification, "source-corrupt");
    assert!(status.last_error.unwrap().contains("data loss"));
}

#[test]
fn an_object_over_16_mib_is_not_removed() {
    setup();
    let body = bytes(1, 1000);
    let x = blob(&body);
    hold(&x, REPO);
    let mut driver = file(actions(request_id(1), REPO, &[x]));
    driver.until("discover", 20);
    assert_eq!(driver.status().verification, "verified");
    // What a 16 MiB + 1 object's index row says (building one is slow).
    let mut row = vec![1];
    row.extend_from_slice(&(16 * MIB as u64 + 1).to_be_bytes());
    row.extend_from_slice(&custodian_sdk::checksum::crc64_nvme(&body).to_be_bytes());
    let outcome = custodian_sdk::Batch::new()
        .put("content", [b"o".as_slice(), &x].concat(), row)
        .apply()
        .unwrap();
    assert_eq!(outcome, Outcome::Committed);
    driver.until("retain", 10);

    assert!(serving(&x), "kept, and still denied by id");
    assert_eq!(denied_by(&x), [driver.id]);
    let reason = kept(&driver, &x).expect("recorded as kept");
    assert!(reason.contains("exceed"), "{reason}");
    assert_eq!(driver.status().denial.removed, 0);
}

#[test]
fn a_withdrawn_request_removes_nothing() {
    setup();
    let x = blob(&bytes(1, 100));
    hold(&x, REPO);
    let mut driver = file(actions(request_id(1), REPO, &[x]));
    driver.withdraw().unwrap();
    driver.settle_denial(5);
    driver.until("retain", 20);
    assert_eq!(driver.status().verification, "verified");
    assert!(serving(&x));
    assert_eq!(driver.status().denial.removed, 0);
    assert!(driver.rows("removed").is_empty() && driver.rows("kept").is_empty());
}

thread_local! {
    /// A serving copy (key, body) the next put to its key finds written a
    /// moment before, by someone else.
    static PUT_FIRST: std::cell::RefCell<Option<(String, Vec<u8>)>> =
        const { std::cell::RefCell::new(None) };
}

/// The host's lock rules ([`host_locked_objects`]), and before a put to
/// `serving` of the key in [`PUT_FIRST`], that copy written behind the
/// host, as a concurrent run of the same restore chunk would.
fn put_back_meanwhile(
    store: &str,
    key: &str,
    write: custodian_sdk::testing::ObjectWrite,
) -> Result<(), Error> {
    if store == "serving" && write == custodian_sdk::testing::ObjectWrite::Put {
        let first = PUT_FIRST.with(|p| p.borrow_mut().take_if(|(k, _)| k == key));
        if let Some((key, body)) = first {
            behind_the_host(|| {
                objects::put(
                    "serving",
                    &key,
                    &body,
                    &objects::PutCondition::Unconditional,
                    None,
                    &[],
                )
            })
            .expect("the concurrent put");
        }
    }
    host_locked_objects(store, key, write)
}

/// A blob's id and its bytes.
type Blob = (Id, Vec<u8>);

/// A request for two blobs `a` and `b` of another repository's content,
/// their serving copies removed, then withdrawn: the driver and each
/// blob.
fn two_removed_then_withdrawn() -> (Driver, Blob, Blob) {
    setup();
    let (a_body, b_body) = (bytes(1, 100), bytes(2, 300));
    let (a, b) = (blob(&a_body), blob(&b_body));
    for object in [a, b] {
        hold(&object, REPO);
    }
    let mut driver = file(actions(request_id(1), REPO, &[a, b]));
    driver.until("retain", 40);
    assert_eq!(driver.status().denial.removed, 2);
    driver.withdraw().unwrap();
    (driver, (a, a_body), (b, b_body))
}

#[test]
fn a_serving_copy_put_back_meanwhile_by_a_concurrent_pass_counts_as_restored() {
    let (mut driver, (a, a_body), (b, b_body)) = two_removed_then_withdrawn();
    PUT_FIRST.with(|p| *p.borrow_mut() = Some((format!("content/{}", hex(&a)), a_body.clone())));
    custodian_sdk::testing::set_guard(custodian_sdk::testing::Guard {
        batch: host_lock_rows,
        object: put_back_meanwhile,
    });
    driver.settle_denial(5);
    assert!(
        PUT_FIRST.with(|p| p.borrow().is_none()),
        "the concurrent put never ran; the test proves nothing"
    );
    for (object, body) in [(a, a_body), (b, b_body)] {
        assert_eq!(served(&object), body);
        assert!(denied_by(&object).is_empty());
        assert_eq!(events_about(&driver, "ServingCopyRestored", &object), 1);
    }
    let status = driver.status();
    assert_eq!(status.denial.restored, 2, "{status:?}");
    assert_eq!(status.last_error, None);
}

#[test]
fn a_serving_copy_a_losing_run_put_back_before_the_committing_run_looked_counts_as_restored() {
    let (mut driver, (a, a_body), (b, b_body)) = two_removed_then_withdrawn();
    // The withdrawal's own call and the request's timer step run the same
    // restore chunk: the call put `a` back, then lost its commit to the
    // step, which looks only now.
    behind_the_host(|| {
        objects::put(
            "serving",
            &format!("content/{}", hex(&a)),
            &a_body,
            &objects::PutCondition::Unconditional,
            None,
            &[],
        )
    })
    .expect("the losing run's put");
    driver.settle_denial(5);
    for (object, body) in [(a, a_body), (b, b_body)] {
        assert_eq!(served(&object), body);
        assert!(denied_by(&object).is_empty());
        assert_eq!(
            events_about(&driver, "ServingCopyRestored", &object),
            1,
            "{}",
            hex(&object)
        );
    }
    let status = driver.status();
    assert_eq!(status.denial.restored, 2, "{status:?}");
    assert_eq!(status.last_error, None);
}
