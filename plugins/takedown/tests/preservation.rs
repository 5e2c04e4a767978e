//! Acquisition, closure, pack walks, corrupt sources, discovery and
//! crash replay, driven step by step over the native host.

mod support;

use custodian_plugin_retention::Policy as RetentionPolicy;
use custodian_sdk::Error;
use custodian_sdk::audit::Entry;
use custodian_sdk::contract::invalidation;
use custodian_sdk::objects::{self, PutCondition};
use custodian_sdk::retention::{Assessment, Item, RetentionRules, Settings};
use custodian_sdk::testing;
use support::*;

const REPO: &str = "acme/widgets";

#[test]
fn an_actions_request_goes_through_every_phase_in_order_to_retain_with_every_byte_preserved_and_verified()
 {
    setup();
    let small = bytes(1, 100);
    let large = bytes(2, 2 * MIB + MIB / 2);
    let (a, b) = (blob(&small), blob(&large));
    hold(&a, REPO);
    hold(&b, REPO);
    let mut driver = file(actions(request_id(1), REPO, &[a, b]));
    driver.until("retain", 40);

    assert_eq!(
        driver.phase_sequence(),
        ["seed", "acquire", "discover", "remove", "retain"]
    );
    assert_eq!(driver.preserved(&a), small);
    assert_eq!(driver.preserved(&b), large);
    let names = driver.event_names();
    assert_eq!(names.first().map(String::as_str), Some("TakedownRequested"));
    assert_eq!(
        names
            .iter()
            .filter(|n| *n == "PreservationSourceSelected")
            .count(),
        2
    );
    let verified = names
        .iter()
        .position(|n| n == "PreservationVerified")
        .unwrap();
    let discovered = names
        .iter()
        .position(|n| n == "PreservationDiscoveryComplete")
        .unwrap();
    assert!(verified < discovered);
    let status = driver.status();
    assert_eq!(status.verification, "verified");
    assert_eq!(status.repository, REPO);
    assert_eq!(status.counts.objects, 2);
    assert_eq!(status.counts.verified, 2);
    assert_eq!(status.counts.pieces, 4, "1 piece + 3 pieces of 1 MiB");
    assert_eq!(status.counts.bytes, (small.len() + large.len()) as u64);
    assert_eq!(status.counts.holders, 1);
    assert_eq!(status.counts.corrupt, 0);
    // Each piece's intent is audited in the intent's own commit: the small
    // object's in its selection's step, the large one's in their own.
    let mut intents: Vec<String> = testing::audit_entries()
        .into_iter()
        .chain(driver.events.iter().cloned())
        .filter(|e| e.event == "PreservationPieceIntent")
        .map(|e| e.targets[2].clone())
        .collect();
    intents.sort();
    assert_eq!(intents, driver.preserved_keys());
    assert_eq!(status.last_error, None);
    assert_eq!(status.retain_until_ms, T0 + RETENTION_MS);
    assert_eq!(status.next_purge_ms, Some(T0 + RETENTION_MS));
    assert!(driver.rows("todo").is_empty() && driver.rows("discover").is_empty());
    assert_eq!(driver.rows("piece").len(), 4);
    assert_eq!(driver.rows("source").len(), 2);
    for entry in &driver.events[1..] {
        assert_eq!(entry.targets[0], hex(&driver.id), "{entry:?}");
    }
}

#[test]
fn retaining_waits_for_retention_with_hourly_checkpoints() {
    setup();
    let a = blob(&bytes(1, 10));
    hold(&a, REPO);
    let mut driver = file(actions(request_id(1), REPO, &[a]));
    driver.until("retain", 20);
    let before = driver.now;
    let events = driver.step();
    assert_eq!(events[0].event, "PreservationCheckpoint");
    assert_eq!(driver.now - before, HOUR);
    assert_eq!(driver.status().phase, "retain");
}

#[test]
fn a_chunked_manifest_is_verified_by_reassembling_its_preserved_chunks() {
    setup();
    let chunks = vec![bytes(1, MIB + MIB / 2), bytes(2, 4000), bytes(3, 1)];
    let (m, file_bytes) = manifest(&chunks);
    hold(&m, REPO);
    let mut driver = file(actions(request_id(2), REPO, &[m]));
    driver.until("retain", 60);

    assert_eq!(
        driver.phase_sequence(),
        ["seed", "acquire", "closure", "discover", "remove", "retain"]
    );
    let names = driver.event_names();
    let pending = names
        .iter()
        .position(|n| n == "PreservationClosurePending")
        .unwrap();
    let verified = names
        .iter()
        .position(|n| n == "PreservationVerified")
        .unwrap();
    assert!(pending < verified);
    let reassembled: Vec<u8> = chunks
        .iter()
        .flat_map(|c| driver.preserved(&id_of(c)))
        .collect();
    assert_eq!(reassembled, file_bytes);
    let status = driver.status();
    assert_eq!(status.verification, "verified");
    assert_eq!(
        status.counts.objects, 4,
        "the manifest and its three chunks"
    );
    assert_eq!(status.counts.verified, 4);
    assert!(driver.rows("closure").is_empty());
}

/// Asserts that `mismatch` blames `chunk` of manifest `m` of the
/// driver's request, its detail saying `why`.
fn assert_blames(driver: &Driver, mismatch: &Entry, m: &Id, chunk: &Id, why: &str) {
    assert_eq!(mismatch.targets, [hex(&driver.id), hex(m), hex(chunk)]);
    assert!(
        mismatch.detail.as_deref().unwrap().contains(why),
        "{mismatch:?}"
    );
}

#[test]
fn a_preserved_chunk_that_no_longer_matches_is_recorded_once_and_the_request_reaches_retain() {
    setup();
    let chunks = vec![bytes(1, 300), bytes(2, 400)];
    let (m, _) = manifest(&chunks);
    hold(&m, REPO);
    let mut driver = file(actions(request_id(2), REPO, &[m]));
    driver.until("closure", 30);
    let chunk = id_of(&chunks[1]);
    let key = format!(
        "pieces/{}/{}/{}/{:016x}",
        hex(&driver.id),
        &hex(&chunk)[..2],
        hex(&chunk),
        0
    );
    // The lock keeps the piece from every caller: only a fault past the
    // host changes it.
    behind_the_host(|| {
        objects::put(
            "preserved",
            &key,
            &bytes(9, 400),
            &PutCondition::Unconditional,
            None,
            &[],
        )
    })
    .unwrap();
    let events = driver.step();
    let mismatch = events
        .iter()
        .find(|e| e.event == "PreservationClosureMismatch")
        .expect("the mismatch is recorded");
    assert_blames(&driver, mismatch, &m, &chunk, "differs from its intent");
    driver.until("retain", 30);
    let names = driver.event_names();
    let recorded = names
        .iter()
        .filter(|n| *n == "PreservationClosureMismatch")
        .count();
    assert_eq!(recorded, 1, "recorded once: {names:?}");
    assert!(names.contains(&"PreservationClosureIncomplete".to_owned()));
    assert!(!names.contains(&"PreservationVerified".to_owned()));
    let status = driver.status();
    assert_eq!(status.verification, "closure-mismatch");
    assert_eq!(status.counts.corrupt, 1);
    assert!(status.last_error.unwrap().contains(&hex(&m)));
    assert!(driver.rows("closure").is_empty());
}

#[test]
fn a_preserved_chunk_whose_pieces_match_their_intents_but_not_its_id_is_a_mismatch_naming_the_hash()
{
    setup();
    let chunks = vec![bytes(1, 300), bytes(2, MIB + 400)];
    let (m, _) = manifest(&chunks);
    hold(&m, REPO);
    let mut driver = file(actions(request_id(2), REPO, &[m]));
    driver.until("closure", 30);
    let chunk = id_of(&chunks[1]);
    // Its second piece and that piece's intent both changed alike, past
    // the host: every piece checks out, and only the chunk's BLAKE3
    // (hashed by the host) can tell.
    let forged = bytes(9, 400);
    let (row, intent) = driver
        .rows("piece")
        .into_iter()
        .find_map(|(key, value)| {
            let intent: serde_json::Value = serde_json::from_slice(&value).unwrap();
            (intent["object"] == hex(&chunk) && intent["offset"] == MIB).then_some((key, intent))
        })
        .expect("the chunk's second piece intent");
    let mut changed = intent.clone();
    changed["crc64"] = custodian_sdk::checksum::crc64_nvme(&forged).into();
    put_row(row, serde_json::to_vec(&changed).unwrap());
    let key = intent["key"].as_str().unwrap().to_owned();
    behind_the_host(|| {
        objects::put(
            "preserved",
            &key,
            &forged,
            &PutCondition::Unconditional,
            None,
            &[],
        )
    })
    .unwrap();
    let mismatch = driver.until_event("PreservationClosureMismatch", 10);
    assert_blames(&driver, &mismatch, &m, &chunk, "does not hash to its id");
    driver.until("retain", 30);
    assert_eq!(driver.status().verification, "closure-mismatch");
}

#[test]
fn a_request_with_work_is_due_again_at_once_and_waits_only_in_retain() {
    setup();
    let chunks = vec![bytes(1, MIB + 10), bytes(2, 4000)];
    let (m, _) = manifest(&chunks);
    let a = blob(&bytes(3, 10));
    for object in [m, a] {
        hold(&object, REPO);
    }
    let mut driver = file(actions(request_id(3), REPO, &[m, a]));
    let mut steps = 0;
    while driver.status().phase != "retain" {
        let before = driver.now;
        driver.step();
        steps += 1;
        assert!(steps < 60, "stuck in {}", driver.status().phase);
        if driver.status().phase != "retain" {
            assert_eq!(driver.now, before, "active work waits for nothing");
        }
    }
    let before = driver.now;
    driver.step();
    assert!(driver.now > before, "retaining waits");
    assert!(driver.now <= T0 + RETENTION_MS);
}

/// The bundled policy's answers with ten times this deployment's
/// retention: the settings raised after a request was filed.
fn raised(item: Item, now: u64) -> Result<Assessment, Error> {
    let settings = Settings {
        retention_ms: 10 * RETENTION_MS,
        noncurrent_retention_ms: 0,
    };
    RetentionPolicy::assess(settings, item, now)
}

#[test]
fn raising_retention_mid_acquisition_neither_stalls_the_request_nor_moves_its_retain_until() {
    setup();
    let a = blob(&bytes(1, 3 * MIB));
    let b = blob(&bytes(2, 10));
    for object in [a, b] {
        hold(&object, REPO);
    }
    let mut driver = file(actions(request_id(4), REPO, &[a, b]));
    driver.until("acquire", 10);
    swap_retention(raised);
    driver.until("retain", 40);
    let status = driver.status();
    assert_eq!(
        status.retain_until_ms,
        T0 + RETENTION_MS,
        "fixed at the filing"
    );
    assert_eq!(status.next_purge_ms, Some(T0 + RETENTION_MS));
    while driver.now < T0 + RETENTION_MS {
        driver.step();
    }
    assert_eq!(driver.step()[0].event, "PreservationPurgeStarted");
    driver.until("purged", 10);
    assert!(driver.preserved_keys().is_empty());
}

#[test]
fn a_nested_sealed_pack_is_walked_once_even_when_referenced_twice() {
    setup();
    let (x, y, z) = (
        blob(&bytes(1, 50)),
        blob(&bytes(2, 60)),
        blob(&bytes(3, 70)),
    );
    let inner = pack(&[(x, 1), (y, 1)]);
    seal(&inner);
    let middle = pack(&[(inner, 3), (z, 1)]);
    seal(&middle);
    let loose_member = blob(&bytes(4, 80));
    let unsealed = pack(&[(loose_member, 1)]);
    let root = pack(&[(inner, 3), (middle, 3), (inner, 3), (unsealed, 3), (x, 1)]);
    seal(&root);
    hold(&root, REPO);
    let mut driver = file(pack_request(request_id(3), REPO, root));

    let mut walks_of_inner = 0;
    let inner_todo = {
        let mut key = b"pack-todo\0".to_vec();
        key.extend_from_slice(&driver.id);
        key.extend_from_slice(&inner);
        key
    };
    let mut present = false;
    for _ in 0..40 {
        if driver.status().phase != "seed" {
            break;
        }
        driver.step();
        let now_present = get_row(&inner_todo).is_some();
        if now_present && !present {
            walks_of_inner += 1;
        }
        present = now_present;
    }
    assert_eq!(walks_of_inner, 1);
    assert_eq!(driver.rows("pack-seen").len(), 3, "root, inner, middle");
    assert!(driver.rows("pack-todo").is_empty());
    driver.until("retain", 60);

    every_object_verified(&driver, 4, "x, y, z and the unsealed pack as one object");
    for object in [x, y, z] {
        assert!(!driver.preserved(&object).is_empty());
    }
    assert_eq!(driver.preserved(&unsealed), pack_body(&[(loose_member, 1)]));
    assert!(
        driver.preserved(&inner).is_empty(),
        "a walked pack is not copied"
    );
    assert!(driver.preserved(&loose_member).is_empty());
}

#[test]
fn a_corrupt_serving_copy_is_recorded_as_source_corrupt_then_acquisition_incomplete_and_the_request_moves_on()
 {
    setup();
    let good = blob(&bytes(1, 500));
    let genuine = bytes(2, 500);
    let bad = id_of(&genuine);
    // The index is consistent with what is served, but the served bytes
    // are not the object's.
    serve_as(&bad, &bytes(3, 500), 1);
    hold(&good, REPO);
    hold(&bad, REPO);
    let mut driver = file(actions(request_id(4), REPO, &[good, bad]));
    driver.until("retain", 40);

    let corrupt = driver
        .events
        .iter()
        .find(|e| e.event == "PreservationSourceCorrupt")
        .expect("the corrupt source is recorded");
    assert_eq!(corrupt.targets, [hex(&driver.id), hex(&bad)]);
    let names = driver.event_names();
    let at = names
        .iter()
        .position(|n| n == "PreservationSourceCorrupt")
        .unwrap();
    let incomplete = names
        .iter()
        .position(|n| n == "PreservationAcquisitionIncomplete")
        .unwrap();
    assert!(at < incomplete);
    // Its holders are still found: discovery does not depend on the bytes.
    assert!(names.contains(&"PreservationDiscoveryComplete".to_owned()));
    assert!(!names.contains(&"PreservationVerified".to_owned()));
    let status = driver.status();
    assert_eq!(status.verification, "source-corrupt");
    assert_eq!(status.counts.corrupt, 1);
    assert_eq!(status.counts.verified, 1);
    assert!(status.last_error.unwrap().contains(&hex(&bad)));
    assert_eq!(driver.rows("source").len(), 2, "the corrupt source is kept");
    assert!(driver.preserved(&bad).is_empty());
    assert!(!driver.preserved(&good).is_empty());
}

#[test]
fn a_serving_copy_missing_at_selection_is_data_loss_recorded_like_corruption() {
    setup();
    let gone = id_of(&bytes(7, 10));
    hold(&gone, REPO);
    let mut driver = file(actions(request_id(4), REPO, &[gone]));
    driver.until("retain", 20);
    let status = driver.status();
    assert_eq!(status.verification, "source-corrupt");
    assert_eq!(status.counts.corrupt, 1);
    assert!(driver.rows("source").is_empty());
}

#[test]
fn a_second_holder_repository_is_discovered_once_and_gets_one_invalidation_entry() {
    setup();
    let (a, b) = (blob(&bytes(1, 10)), blob(&bytes(2, 20)));
    for object in [a, b] {
        hold(&object, REPO);
        hold(&object, "other/fork");
    }
    let mut driver = file(actions(request_id(5), REPO, &[a, b]));
    driver.until("retain", 40);

    let entries: Vec<invalidation::Entry> = testing::partition(invalidation::PARTITION)
        .into_iter()
        .map(|(k, v)| invalidation::Entry::decode(&k, &v).unwrap())
        .collect();
    let mut repositories: Vec<&str> = entries.iter().map(|e| e.repository.as_str()).collect();
    repositories.sort_unstable();
    assert_eq!(repositories, ["acme/widgets", "other/fork"]);
    for entry in &entries {
        assert_eq!(entry.request, driver.id);
        assert_eq!(entry.objects, vec![a], "the first object revealed both");
        assert_eq!(
            entry.idempotency_key(),
            format!("takedown:{}:{}", hex(&driver.id), entry.repository)
        );
    }
    assert_eq!(driver.status().counts.holders, 2);
    assert_eq!(driver.rows("holder").len(), 2);
}

#[test]
fn holders_beyond_one_page_are_all_discovered() {
    setup();
    let a = blob(&bytes(1, 10));
    hold(&a, REPO);
    for n in 0..40 {
        hold(&a, &format!("ns{n:02}/repo"));
    }
    let mut driver = file(actions(request_id(5), REPO, &[a]));
    driver.until("retain", 40);
    assert_eq!(driver.status().counts.holders, 41);
    assert_eq!(driver.rows("holder").len(), 41);
}

#[test]
fn a_step_replayed_after_a_crash_between_intent_and_commit_leaves_no_duplicate_piece() {
    setup();
    let body = bytes(1, 2 * MIB + 17);
    let a = blob(&body);
    hold(&a, REPO);
    let mut driver = file(actions(request_id(6), REPO, &[a]));
    driver.until_event("PreservationSourceSelected", 10);

    // The copy step records its intents and writes its pieces, then the
    // host crashes before committing it.
    driver.try_step().expect("the copy step runs");
    assert_eq!(driver.rows("piece").len(), 3);
    assert_eq!(driver.preserved_keys().len(), 3);
    // The timer fires again; the same step finds the pieces already there.
    driver.step();
    driver.until("retain", 20);

    assert_eq!(driver.preserved_keys().len(), 3);
    assert_eq!(driver.rows("piece").len(), 3);
    assert_eq!(driver.preserved(&a), body);
    let status = driver.status();
    assert_eq!(status.counts.pieces, 3);
    assert_eq!(status.counts.bytes, body.len() as u64);
    assert_eq!(status.verification, "verified");
}

#[test]
fn a_preserved_piece_with_other_content_than_its_intent_is_corrupt() {
    setup();
    let a = blob(&bytes(1, 1000));
    hold(&a, REPO);
    let mut driver = file(actions(request_id(6), REPO, &[a]));
    driver.until_event("PreservationSourceSelected", 10);
    let key = format!(
        "pieces/{}/{}/{}/{:016x}",
        hex(&driver.id),
        &hex(&a)[..2],
        hex(&a),
        0
    );
    // Written past the host before the piece was even planned.
    behind_the_host(|| {
        objects::put(
            "preserved",
            &key,
            b"squatter",
            &PutCondition::Unconditional,
            None,
            &[],
        )
    })
    .unwrap();
    assert!(matches!(driver.try_step(), Err(Error::Corrupt(_))));
    assert_eq!(
        piece_lock(&key),
        Some(driver.id),
        "the piece was locked with its intent, before its put was tried"
    );
}

#[test]
fn a_serving_copy_replaced_after_selection_is_recorded_as_source_corrupt() {
    setup();
    let body = bytes(1, 700);
    let a = blob(&body);
    hold(&a, REPO);
    let mut driver = file(actions(request_id(7), REPO, &[a]));
    driver.until_event("PreservationSourceSelected", 10);
    // Same bytes, new etag: the selected copy is gone.
    serve_as(&a, &body, 1);
    let events = driver.step();
    assert_eq!(events[0].event, "PreservationSourceCorrupt");
    assert!(events[0].detail.as_deref().unwrap().contains("changed"));
    driver.until("retain", 10);
    assert_eq!(driver.status().verification, "source-corrupt");
    assert!(driver.preserved_keys().is_empty());
}

#[test]
fn a_manifest_with_many_chunks_is_queued_and_verified_across_steps() {
    setup();
    let chunks: Vec<Vec<u8>> = (0..70u8).map(|n| bytes(n, 100 + usize::from(n))).collect();
    let (m, _) = manifest(&chunks);
    hold(&m, REPO);
    let mut driver = file(actions(request_id(8), REPO, &[m]));
    driver.until("retain", 400);
    let status = driver.status();
    assert_eq!(status.verification, "verified");
    assert_eq!(status.counts.objects, 71);
    assert_eq!(status.counts.verified, 71);
    let closure_steps = driver.phases.iter().filter(|p| *p == "closure").count();
    assert!(closure_steps >= 9, "8 chunks per step: {closure_steps}");
}

#[test]
fn small_objects_are_selected_acquired_and_discovered_up_to_eight_a_step() {
    setup();
    let objects: Vec<Id> = (0..20u8)
        .map(|n| blob(&bytes(n, 100 + usize::from(n))))
        .collect();
    for object in &objects {
        hold(object, REPO);
    }
    let mut driver = file(actions(request_id(9), REPO, &objects));
    driver.until("retain", 40);

    let steps_in = |phase: &str| driver.phases.iter().filter(|p| *p == phase).count();
    // 20 objects, 8 a step: 3 steps select them, 3 acquire them, and one
    // finds the queue empty; one step per object would take 40.
    assert_eq!(steps_in("acquire"), 7, "{:?}", driver.phases);
    // 3 steps discover them (their one holder is planned once), one finds
    // none left.
    assert_eq!(steps_in("discover"), 4, "{:?}", driver.phases);
    let status = driver.status();
    assert_eq!(status.verification, "verified");
    assert_eq!(status.counts.verified, 20);
    assert_eq!(status.counts.pieces, 20);
    assert_eq!(status.counts.holders, 1);
    assert_eq!(
        driver
            .event_names()
            .iter()
            .filter(|n| *n == "PreservationSourceSelected")
            .count(),
        20
    );
    for object in &objects {
        assert!(!driver.preserved(object).is_empty());
    }
    assert_eq!(driver.rows("holder").len(), 1);
    assert_eq!(testing::partition(invalidation::PARTITION).len(), 1);
}

/// A request (id from `seed`) for a blob `a` of 4 MiB and one `b` of 10
/// bytes that comes after it in id order (the order queued objects are
/// taken in), both selected: (`a`'s bytes, `a`, `b`'s bytes, `b`, driver).
fn four_mebibytes_then_ten_bytes(seed: u8) -> (Vec<u8>, Id, Vec<u8>, Id, Driver) {
    setup();
    let large = bytes(1, 4 * MIB);
    let a = blob(&large);
    let small = (2..=u8::MAX)
        .map(|seed| bytes(seed, 10))
        .find(|small| id_of(small) > a)
        .unwrap();
    let b = blob(&small);
    hold(&a, REPO);
    hold(&b, REPO);
    let mut driver = file(actions(request_id(seed), REPO, &[a, b]));
    driver.until_event("PreservationSourceSelected", 5);
    (large, a, small, b, driver)
}

#[test]
fn a_step_takes_no_object_past_its_first_once_it_has_read_four_mebibytes() {
    let (large, a, small, b, mut driver) = four_mebibytes_then_ten_bytes(10);
    // The copy step reads all 4 MiB of `a`, then stops.
    driver.step();
    assert!(driver.preserved(&b).is_empty());
    assert_eq!(driver.preserved(&a), large);
    driver.until("retain", 20);
    assert_eq!(driver.preserved(&b), small);
    assert_eq!(driver.status().counts.verified, 2);
}

#[test]
fn two_manifests_sharing_chunks_acquired_in_one_step_queue_each_chunk_once() {
    setup();
    let shared = bytes(1, 300);
    let (m1, _) = manifest(&[shared.clone(), bytes(2, 400)]);
    let (m2, _) = manifest(&[shared, bytes(3, 500)]);
    hold(&m1, REPO);
    hold(&m2, REPO);
    let mut driver = file(actions(request_id(11), REPO, &[m1, m2]));
    driver.until("retain", 60);

    every_object_verified(&driver, 5, "two manifests and three distinct chunks");
}

/// Asserts that the request counted `objects` objects (`which`) and
/// verified each.
fn every_object_verified(driver: &Driver, objects: u64, which: &str) {
    let status = driver.status();
    assert_eq!(status.counts.objects, objects, "{which}");
    assert_eq!(status.counts.verified, objects);
    assert_eq!(status.verification, "verified");
}

thread_local! {
    /// Piece rows written by each batch that wrote any, in order.
    static INTENT_BATCHES: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
    /// Intent batches committed when each preserved piece was published.
    static INTENTS_AT_PUBLISH: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn counting_intents(batch: &custodian_sdk::kv::WitBatch) -> Result<(), Error> {
    host_lock_rows(batch)?;
    let pieces = batch
        .writes
        .iter()
        .filter(|w| matches!(w, custodian_sdk::kv::Write::Put(p) if p.key.starts_with(b"piece\0")))
        .count();
    if pieces > 0 {
        INTENT_BATCHES.with(|b| b.borrow_mut().push(pieces));
    }
    Ok(())
}

fn counting_publishes(
    store: &str,
    key: &str,
    write: custodian_sdk::testing::ObjectWrite,
) -> Result<(), Error> {
    host_locked_objects(store, key, write)?;
    if store == "preserved" {
        let committed = INTENT_BATCHES.with(|b| b.borrow().len());
        INTENTS_AT_PUBLISH.with(|p| p.borrow_mut().push(committed));
    }
    Ok(())
}

/// The objects (hex) of the piece intents audited in steps' own commits
/// so far, in order.
fn piece_intents(driver: &Driver) -> Vec<String> {
    driver
        .events
        .iter()
        .filter(|e| e.event == "PreservationPieceIntent")
        .map(|e| e.targets[1].clone())
        .collect()
}

#[test]
fn a_step_copying_several_objects_commits_the_piece_intents_its_selection_did_not_at_once_before_publishing_any()
 {
    setup();
    let objects: Vec<Id> = (0..5u8).map(|n| blob(&bytes(n, 64))).collect();
    for object in &objects {
        hold(object, REPO);
    }
    let mut driver = file(actions(request_id(12), REPO, &objects));
    driver.until_event("PreservationSourceSelected", 5);
    // Five selections audited, three entries of the step's eight left:
    // the selection committed the intents of the first three objects it
    // took (in the queue's order, the ids').
    let mut queued: Vec<String> = objects.iter().map(|o| hex(o)).collect();
    queued.sort();
    assert_eq!(piece_intents(&driver), queued[..3]);
    testing::set_guard(custodian_sdk::testing::Guard {
        batch: counting_intents,
        object: counting_publishes,
    });
    driver.step();

    assert_eq!(INTENT_BATCHES.with(|b| b.borrow().clone()), [2]);
    assert_eq!(
        INTENTS_AT_PUBLISH.with(|p| p.borrow().clone()),
        [1, 1, 1, 1, 1],
        "every piece is published after the one intent commit"
    );
    assert_eq!(driver.status().counts.pieces, 5);
    driver.until("retain", 20);
    for object in &objects {
        assert!(!driver.preserved(object).is_empty());
    }
}

#[test]
fn the_bytes_of_a_source_found_unusable_count_towards_a_steps_four_mebibytes() {
    let (large, a, small, b, mut driver) = four_mebibytes_then_ten_bytes(13);
    // Same bytes, new etag: `a`'s selected copy is gone.
    serve_as(&a, &large, 1);
    let events = driver.step();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].event, "PreservationSourceCorrupt");
    assert!(
        driver.preserved(&b).is_empty(),
        "the step read 4 MiB of `a`"
    );
    driver.until("retain", 20);
    assert_eq!(driver.preserved(&b), small);
}

#[test]
fn a_selection_commits_the_intents_of_its_one_piece_objects_so_their_copy_commits_no_intent_of_its_own()
 {
    setup();
    let objects: Vec<Id> = (0..4u8).map(|n| blob(&bytes(n, 64))).collect();
    for object in &objects {
        hold(object, REPO);
    }
    let mut driver = file(actions(request_id(14), REPO, &objects));
    driver.until_event("PreservationSourceSelected", 5);
    let mut queued: Vec<String> = objects.iter().map(|o| hex(o)).collect();
    queued.sort();
    assert_eq!(
        piece_intents(&driver),
        queued,
        "each intent audited in the selection's own commit"
    );
    assert_eq!(driver.rows("piece").len(), 4, "and its rows in it");
    assert!(driver.preserved_keys().is_empty(), "nothing published yet");
    testing::set_guard(custodian_sdk::testing::Guard {
        batch: counting_intents,
        object: counting_publishes,
    });
    driver.step();

    assert_eq!(
        INTENT_BATCHES.with(|b| b.borrow().clone()),
        Vec::<usize>::new(),
        "no intent commit before the pieces"
    );
    assert_eq!(INTENTS_AT_PUBLISH.with(|p| p.borrow().len()), 4);
    assert_eq!(driver.status().counts.pieces, 4);
    assert_eq!(piece_intents(&driver).len(), 4, "none audited twice");
    driver.until("retain", 20);
    for (n, object) in objects.iter().enumerate() {
        assert_eq!(driver.preserved(object), bytes(n as u8, 64));
    }
}

#[test]
fn an_object_of_several_pieces_has_no_intent_committed_at_its_selection() {
    setup();
    let large = blob(&bytes(1, MIB + 1));
    hold(&large, REPO);
    let mut driver = file(actions(request_id(15), REPO, &[large]));
    driver.until_event("PreservationSourceSelected", 5);
    assert!(piece_intents(&driver).is_empty());
    assert!(driver.rows("piece").is_empty());
    driver.until("retain", 20);
    assert_eq!(driver.preserved(&large), bytes(1, MIB + 1));
}

/// Retention of ten seconds, less than a step's commit may take to land.
fn ten_seconds(item: Item, now: u64) -> Result<Assessment, Error> {
    let settings = Settings {
        retention_ms: 10_000,
        noncurrent_retention_ms: 0,
    };
    RetentionPolicy::assess(settings, item, now)
}

#[test]
fn a_selection_whose_commit_could_land_past_retain_until_leaves_the_intents_to_their_own_deadlined_commit()
 {
    setup();
    swap_retention(ten_seconds);
    let object = blob(&bytes(1, 64));
    hold(&object, REPO);
    let mut driver = file(actions(request_id(16), REPO, &[object]));
    driver.until_event("PreservationSourceSelected", 5);
    assert!(
        piece_intents(&driver).is_empty(),
        "a step's commit may land 30 s after its start, past the retain-until"
    );
    driver.step();
    assert_eq!(
        testing::audit_entries()
            .iter()
            .filter(|e| e.event == "PreservationPieceIntent")
            .count(),
        1,
        "committed on its own, with the retain-until as its deadline"
    );
}
