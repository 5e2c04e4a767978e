//! A takedown keeps moving, with the real binary and the bundled plugins:
//! on the real clock through `custodian serve` it reaches retain in
//! seconds, and a push racing its filing is either refused or found as a
//! holder; a manifest that no longer reassembles is recorded once and the
//! request goes on; raising the retention setting mid-acquisition neither
//! stalls a request nor moves its retain-until; and removing a serving
//! copy costs the store one decision's `head`, one version listing and
//! one delete.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use custodian::object::PutCondition;
use custodian_object::ObjectStoreExt;
use serde_json::{Value, json};

use crate::serve::metric;
use crate::server::{Server, agent, answer, bearer, json_body, wait_for};
use crate::takedown::{
    DAY, HOUR, MINUTE, RETENTION, T0, block, noise, ok, policy_events, push, status, store,
};

/// One tick of the schedule at `now` with retention `retention_ms`: fires
/// what is due (one takedown step).
fn tick_once(data: &str, now: u64, retention_ms: u64) {
    ok(&[
        "tick",
        "--data",
        data,
        "--now",
        &now.to_string(),
        "--retention-ms",
        &retention_ms.to_string(),
        "--json",
    ]);
}

/// Runs the schedule from `now` until `until` with retention
/// `retention_ms`, and checks that every step it fired committed (none
/// failed to be retried).
fn tick_until(data: &str, now: u64, until: u64, retention_ms: u64) {
    let report = ok(&[
        "tick",
        "--data",
        data,
        "--now",
        &now.to_string(),
        "--fast-forward-to",
        &until.to_string(),
        "--until-idle",
        "--retention-ms",
        &retention_ms.to_string(),
        "--json",
    ]);
    let report: Value = serde_json::from_str(&report).unwrap();
    let fired = report["fired"].as_array().unwrap();
    assert!(
        fired.iter().all(|f| f["outcome"] == "rescheduled"),
        "every step committed: {report}"
    );
}

/// Files a takedown of `objects` of `repo` at [`T0`]; its id.
fn file(data: &str, repo: &str, objects: &[&str]) -> String {
    let mut args = vec!["takedown", "create", repo];
    for object in objects {
        args.extend(["--object", object]);
    }
    let now = T0.to_string();
    args.extend([
        "--data",
        data,
        "--now",
        &now,
        "--retention-ms",
        RETENTION,
        "--json",
    ]);
    let created: Value = serde_json::from_str(&ok(&args)).unwrap();
    created["id"].as_str().unwrap().to_owned()
}

#[test]
fn a_manifest_that_no_longer_reassembles_is_recorded_once_and_the_request_reaches_retain() {
    let dir = tempfile::tempdir().unwrap();
    let data_path = dir.path().join("data");
    let data = data_path.to_str().unwrap();
    let big = dir.path().join("big.bin");
    std::fs::write(&big, noise(4 * 1024 * 1024 + 4096, 3)).unwrap();
    let pushed = push(data, "alpha/one", &[big.as_path()]);
    let manifest = pushed["big.bin"]["id"].as_str().unwrap().to_owned();
    assert_eq!(pushed["big.bin"]["kind"], "manifest");
    let id = file(data, "alpha/one", &[&manifest]);

    // Step until the preserved copy is complete and closure is next.
    // A step with work left is due again at once: 1 ms on (a tick fires
    // what is due strictly before its now).
    let mut steps = 0;
    while status(data, &id)["phase"] != "closure" {
        steps += 1;
        tick_once(data, T0 + steps, DAY);
        assert!(steps < 40, "{}", status(data, &id));
    }
    // A fault past the host changes a preserved chunk (the host's locks
    // keep it from every caller that goes through it).
    let preserved = store(&data_path, "preserved");
    let pieces = crate::takedown::objects(preserved.as_ref(), &format!("pieces/{id}/"));
    let chunk_piece = pieces
        .keys()
        .find(|key| !key.contains(&manifest))
        .expect("a chunk's piece")
        .clone();
    let forged = noise(pieces[&chunk_piece].len(), 99);
    block(preserved.put_whole(
        &chunk_piece,
        bytes::Bytes::from(forged.clone()),
        &PutCondition::Unconditional,
        &Default::default(),
        custodian::checksum::crc64_nvme(&forged),
    ))
    .unwrap();

    tick_until(data, T0 + steps, T0 + 30 * MINUTE, DAY);
    let s = status(data, &id);
    assert_eq!(s["phase"], "retain", "the request moved on: {s}");
    assert_eq!(s["verification"], "closure-mismatch", "{s}");
    assert_eq!(s["counts"]["corrupt"], 1, "{s}");
    assert!(s["last_error"].as_str().unwrap().contains(&manifest), "{s}");
    let events = policy_events(data);
    let mismatches: Vec<_> = events
        .iter()
        .filter(|(e, _, _)| e == "PreservationClosureMismatch")
        .collect();
    assert_eq!(mismatches.len(), 1, "recorded once: {events:?}");
    let chunk = chunk_piece.split('/').nth(3).unwrap();
    assert_eq!(
        mismatches[0].1,
        [id.clone(), manifest.clone(), chunk.to_owned()]
    );
    assert!(
        !events.iter().any(|(e, _, _)| e == "PreservationVerified"),
        "{events:?}"
    );
}

#[test]
fn raising_retention_mid_acquisition_neither_stalls_the_request_nor_moves_its_retain_until() {
    let dir = tempfile::tempdir().unwrap();
    let data_path = dir.path().join("data");
    let data = data_path.to_str().unwrap();
    let big = dir.path().join("big.bin");
    std::fs::write(&big, noise(3 * 1024 * 1024, 5)).unwrap();
    let small = dir.path().join("small.txt");
    std::fs::write(&small, b"small").unwrap();
    let pushed = push(data, "alpha/one", &[big.as_path(), small.as_path()]);
    let objects: Vec<&str> = ["big.bin", "small.txt"]
        .iter()
        .map(|p| pushed[*p]["id"].as_str().unwrap())
        .collect();
    let id = file(data, "alpha/one", &objects);
    let mut steps = 0;
    while status(data, &id)["phase"] != "acquire" {
        steps += 1;
        tick_once(data, T0 + steps, DAY);
        assert!(steps < 20, "{}", status(data, &id));
    }

    // The deployer raises retention tenfold: new requests get it; this
    // one keeps what it was filed with, and does not stall.
    let raised = 10 * DAY;
    tick_until(data, T0 + steps, T0 + 30 * MINUTE, raised);
    let s = status(data, &id);
    assert_eq!(s["phase"], "retain", "{s}");
    assert_eq!(s["verification"], "verified", "{s}");
    assert_eq!(s["retain_until_ms"], T0 + DAY, "{s}");
    assert_eq!(s["next_purge_ms"], T0 + DAY, "{s}");

    // Retention ends when it was fixed, under the raised setting too.
    tick_until(data, T0 + 30 * MINUTE, T0 + DAY + HOUR, raised);
    let s = status(data, &id);
    assert_eq!(s["phase"], "purged", "{s}");
    assert!(
        crate::takedown::objects(store(&data_path, "preserved").as_ref(), "pieces/").is_empty()
    );
}

fn put(base: &str, path: &str, bytes: &[u8]) -> (u16, Value) {
    answer(
        agent()
            .put(&format!("{base}{path}"))
            .header("authorization", &bearer())
            .send(bytes),
    )
}

fn get_json(base: &str, path: &str) -> Value {
    let (code, body) = answer(
        agent()
            .get(&format!("{base}{path}"))
            .header("authorization", &bearer())
            .call(),
    );
    assert_eq!(code, 200, "{path}: {body}");
    body
}

#[test]
fn on_the_real_clock_pushes_racing_a_filing_are_refused_or_found_and_the_request_reaches_retain_in_seconds()
 {
    let server = Server::start("");
    let base = server.base.clone();
    let bytes = noise(200 * 1024, 17);
    let (code, entry) = put(&base, "/v1/repos/alpha/one/files/f.bin", &bytes);
    assert_eq!(code, 200, "{entry}");
    let object = entry["id"].as_str().unwrap().to_owned();

    // Eight pushes of the same bytes into other repositories race the
    // filing: each lands before the denial (and must be found as a
    // holder) or is refused with 451.
    const RACERS: usize = 8;
    let start = Arc::new(Barrier::new(RACERS + 1));
    let racers: Vec<_> = (0..RACERS)
        .map(|i| {
            let (base, bytes, start) = (base.clone(), bytes.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                // Staggered, so some land on each side of the filing.
                std::thread::sleep(Duration::from_millis(3 * i as u64));
                put(&base, &format!("/v1/repos/race/r{i}/files/f.bin"), &bytes).0
            })
        })
        .collect();
    start.wait();
    let filed_at = Instant::now();
    let (code, created) = answer(
        agent()
            .post(&format!("{base}/v1/takedowns"))
            .header("authorization", &bearer())
            .send(&json_body(json!({"repository": "alpha/one", "objects": [object]}))[..]),
    );
    assert_eq!(code, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    let codes: Vec<u16> = racers.into_iter().map(|r| r.join().unwrap()).collect();
    assert!(
        codes.iter().all(|c| *c == 200 || *c == 451),
        "every racing push landed or was refused: {codes:?}"
    );
    let landed = codes.iter().filter(|c| **c == 200).count() as u64;

    wait_for(
        "the request to reach retain",
        Duration::from_secs(30),
        || get_json(&base, &format!("/v1/takedowns/{id}"))["phase"] == "retain",
    );
    let reached = filed_at.elapsed();
    let s = get_json(&base, &format!("/v1/takedowns/{id}"));
    assert_eq!(
        s["counts"]["holders"],
        1 + landed,
        "alpha/one and every racing push that landed ({codes:?}): {s}"
    );
    let audit = get_json(&base, "/v1/audit?limit=1000");
    let events: Vec<&str> = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["event"].as_str().unwrap())
        .collect();
    assert!(
        events.contains(&"PreservationDiscoveryComplete"),
        "{events:?}"
    );
    eprintln!(
        "one object, {landed} of {RACERS} racing pushes landed: retain {:.2} s after the filing (real clock)",
        reached.as_secs_f64()
    );
}

/// `custodian_store_calls_total` of the `serving` store for each of
/// `operations`, on `/metrics`.
fn serving_calls(server: &Server, operations: &[&str]) -> Vec<u64> {
    operations
        .iter()
        .map(|op| {
            metric(
                server,
                &format!("custodian_store_calls_total{{store=\"serving\",operation=\"{op}\"}}"),
            )
        })
        .collect()
}

#[test]
fn a_takedown_decides_on_each_serving_copy_once_and_removes_it_with_one_listing_and_one_delete() {
    // 20 objects: the remove phase looks at 8 rows a step, so its steps
    // see 8, 8 and 4; a step removing fewer than it looked at would
    // decide on the rest again (and head their serving copies again).
    const OBJECTS: usize = 20;
    let server = Server::start("");
    let base = server.base.clone();
    let objects: Vec<String> = (0..OBJECTS)
        .map(|i| {
            let path = format!("/v1/repos/alpha/one/files/f{i}.bin");
            let (code, entry) = put(&base, &path, &noise(1024, 2 * i as u64 + 101));
            assert_eq!(code, 200, "{entry}");
            entry["id"].as_str().unwrap().to_owned()
        })
        .collect();
    const OPERATIONS: [&str; 4] = ["delete_version", "list_versions", "head", "get_whole"];
    let before = serving_calls(&server, &OPERATIONS);

    let (code, created) = answer(
        agent()
            .post(&format!("{base}/v1/takedowns"))
            .header("authorization", &bearer())
            .send(&json_body(json!({"repository": "alpha/one", "objects": objects}))[..]),
    );
    assert_eq!(code, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    wait_for(
        "the request to reach retain",
        Duration::from_secs(60),
        || get_json(&base, &format!("/v1/takedowns/{id}"))["phase"] == "retain",
    );
    let s = get_json(&base, &format!("/v1/takedowns/{id}"));
    assert_eq!(
        s["denial"]["removed"], OBJECTS,
        "every serving copy went: {s}"
    );

    let after = serving_calls(&server, &OPERATIONS);
    let made: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    let n = OBJECTS as u64;
    assert_eq!(
        made,
        [n, n, 2 * n, n],
        "per copy ({OPERATIONS:?}): one delete, one listing of its versions (not a second to \
         see it empty), one head when acquiring and one when deciding on its removal, one read"
    );
}
