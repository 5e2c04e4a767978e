//! Crash safety of a takedown: `custodian tick` killed with SIGKILL at
//! random moments, over and over, through acquisition and then through
//! purging. No piece may be lost or written twice, no transition audited
//! twice, the content stays denied (451, `repo get` exit 4) after every
//! kill, and the request must complete after the restarts.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;
use std::time::{Duration, Instant};

use custodian::object::{ObjectStore, ObjectStoreExt};

use crate::support::{Rng, custodian};
use crate::takedown::{
    DAY, HOUR, MINUTE, RETENTION, T0, assert_preserved_is_the_content, block, objects, ok,
    policy_events, push, site, status, store,
};

/// Launches per phase that may be killed; later ones run to completion.
const KILLED_LAUNCHES: u32 = 40;
const MAX_LAUNCHES: u32 = 200;
/// Requests filed over the same content.
const REQUESTS: u64 = 4;
/// Small files besides the shared tree, so each request has work to do.
const BULK_FILES: usize = 24;

/// Steps the request's timer has committed.
fn steps(data: &str) -> u64 {
    let text = ok(&["timer", "list", "--data", data, "--json"]);
    text.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|t| t["steps"].as_u64().unwrap())
        .sum()
}

/// Launches `tick` from `T0` to `until` until `done` holds, killing the
/// first launches at random moments; returns (launches, killed mid-work).
fn crash_until(rng: &mut Rng, data: &str, until: u64, done: impl Fn() -> bool) -> (u32, u32) {
    let mut typical_run = Duration::from_millis(100);
    let (mut launches, mut killed_mid_work) = (0u32, 0u32);
    let mut progress = steps(data);
    while !done() {
        assert!(launches < MAX_LAUNCHES, "the takedown never finished");
        let mut child = custodian()
            .args(["tick", "--data", data, "--until-idle", "--json"])
            .args([
                "--now",
                &T0.to_string(),
                "--fast-forward-to",
                &until.to_string(),
            ])
            .args(["--retention-ms", RETENTION])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let started = Instant::now();
        if launches < KILLED_LAUNCHES {
            // Uniform over a whole run, so kills land in start-up, between
            // steps, between a piece's intent and its write, and in commits.
            let span = typical_run.as_micros().max(1_000) as u64;
            let deadline = started + Duration::from_micros(rng.below(span));
            while Instant::now() < deadline && child.try_wait().unwrap().is_none() {
                std::thread::sleep(Duration::from_micros(200));
            }
            if child.try_wait().unwrap().is_none() {
                child.kill().unwrap();
            }
        }
        let exit = child.wait().unwrap();
        if exit.success() {
            typical_run = typical_run.max(started.elapsed());
        }
        assert!(
            exit.success() || exit.code().is_none(),
            "a tick failed: {exit}"
        );
        let now_done = steps(data);
        if exit.code().is_none() && now_done > progress {
            killed_mid_work += 1;
        } else if exit.code().is_none() {
            // Killed before its first commit (start-up takes a while):
            // widen the window so later kills land among the steps.
            typical_run = (typical_run * 5 / 4).min(Duration::from_secs(10));
        }
        progress = now_done;
        launches += 1;
    }
    (launches, killed_mid_work)
}

/// Panics unless reading each of `files` (repository, path) is refused
/// as taken down (exit 4).
fn assert_denied(data: &str, files: &[(&str, &str)]) {
    for (repo, path) in files {
        let output = custodian()
            .args(["repo", "get", repo, path, "--data", data])
            .output()
            .unwrap();
        assert_eq!(
            output.status.code(),
            Some(4),
            "{repo} {path} must stay denied: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// Every current key under `prefix` of `store`.
fn keys(store: &dyn ObjectStore, prefix: &str) -> Vec<String> {
    block(async {
        let mut keys = Vec::new();
        let mut cursor = None;
        loop {
            let page = store.list(prefix, cursor.as_deref(), 1000).await.unwrap();
            keys.extend(page.items.into_iter().map(|i| i.key));
            match page.next {
                Some(next) => cursor = Some(next),
                None => return keys,
            }
        }
    })
}

/// Every content key `serving` holds now.
fn serving_keys(data: &std::path::Path) -> BTreeSet<String> {
    keys(store(data, "serving").as_ref(), "content/")
        .into_iter()
        .collect()
}

/// Panics unless every object of `before` missing from `serving` now has a
/// whole preserved copy (some request's pieces, contiguous, hashing to its
/// id): a serving copy never goes before its preserved copy is verified.
fn assert_removed_only_once_preserved(data: &std::path::Path, before: &BTreeSet<String>) {
    let now = serving_keys(data);
    let preserved = store(data, "preserved");
    let piece_keys = keys(preserved.as_ref(), "pieces/");
    for key in before.difference(&now) {
        let object = key.strip_prefix("content/").unwrap();
        let mut by_request: BTreeMap<&str, Vec<(u64, Vec<u8>)>> = BTreeMap::new();
        for piece in piece_keys
            .iter()
            .filter(|k| k.contains(&format!("/{object}/")))
        {
            let request = piece.split('/').nth(1).unwrap();
            let offset = u64::from_str_radix(piece.rsplit('/').next().unwrap(), 16).unwrap();
            let (_, bytes) = block(preserved.get_whole(piece, None)).unwrap();
            by_request
                .entry(request)
                .or_default()
                .push((offset, bytes.to_vec()));
        }
        let whole = by_request.into_values().any(|mut pieces| {
            pieces.sort();
            let bytes: Vec<u8> = pieces.into_iter().flat_map(|(_, b)| b).collect();
            blake3::hash(&bytes).to_hex().as_str() == object
        });
        assert!(
            whole,
            "{key} left serving without a whole preserved copy of it"
        );
    }
}

fn count(events: &[(String, Vec<String>, Option<String>)], name: &str) -> usize {
    events.iter().filter(|(e, _, _)| e == name).count()
}

#[test]
fn a_takedown_killed_at_random_moments_loses_and_duplicates_nothing_and_completes() {
    let mut rng = Rng::from_env();
    let dir = tempfile::tempdir().unwrap();
    let data_path = dir.path().join("data");
    let data = data_path.to_str().unwrap();
    let site = site(dir.path());
    let bulk = site.join("bulk");
    std::fs::create_dir_all(&bulk).unwrap();
    for i in 0..BULK_FILES {
        std::fs::write(
            bulk.join(format!("f{i:02}")),
            crate::takedown::noise(1000 + i * 37, i as u64),
        )
        .unwrap();
    }
    let alpha = push(data, "alpha/one", &[&site]);
    push(data, "beta/two", &[&site.join("docs/a.txt")]);
    let pack = alpha["site/"]["id"].as_str().unwrap();
    // Several requests over the same content, so a run has enough steps
    // for kills to land among them.
    let ids: Vec<String> = (0..REQUESTS)
        .map(|i| {
            ok(&[
                "takedown",
                "create",
                "alpha/one",
                "--pack",
                pack,
                "--data",
                data,
                "--now",
                &(T0 + i).to_string(),
                "--retention-ms",
                RETENTION,
            ])
            .trim()
            .to_owned()
        })
        .collect();
    let objects_per_request = 6 + BULK_FILES as u64;
    let denied = [
        ("alpha/one", "site/docs/a.txt"),
        ("alpha/one", "site/bulk/f07"),
        ("beta/two", "a.txt"),
    ];
    assert_denied(data, &denied);
    let served = serving_keys(&data_path);

    // Acquisition, closure, discovery, removal; after every launch, killed
    // or not, the content is still denied, and whatever left `serving`
    // has a whole preserved copy.
    let (launches, mid_work) = crash_until(&mut rng, data, T0 + 30 * MINUTE, || {
        assert_denied(data, &denied);
        assert_removed_only_once_preserved(&data_path, &served);
        ids.iter().all(|id| status(data, id)["phase"] == "retain")
    });
    let removed: u64 = ids
        .iter()
        .map(|id| status(data, id)["denial"]["removed"].as_u64().unwrap())
        .sum();
    let left = serving_keys(&data_path);
    assert_eq!(
        removed as usize,
        served.len() - left.len(),
        "every removal counted once, by one request"
    );
    assert!(removed > 0, "the serving copies went once preserved");
    eprintln!("acquisition: {launches} launches, {mid_work} killed after committing steps");
    let mut pieces = 0;
    for id in &ids {
        let s = status(data, id);
        assert_eq!(s["verification"], "verified", "{s}");
        assert_eq!(s["counts"]["verified"], objects_per_request, "{s}");
        assert_eq!(
            assert_preserved_is_the_content(&data_path, id) as u64,
            objects_per_request,
            "no piece lost"
        );
        let preserved = objects(
            store(&data_path, "preserved").as_ref(),
            &format!("pieces/{id}/"),
        );
        assert_eq!(
            preserved.len() as u64,
            s["counts"]["pieces"].as_u64().unwrap(),
            "one preserved object per recorded piece: none written twice"
        );
        pieces += preserved.len();
    }

    // Retention ends; purge and the first hourly re-sweep.
    let end = T0 + DAY + 2 * HOUR + MINUTE;
    let (launches, more) = crash_until(&mut rng, data, end, || {
        ids.iter().all(|id| {
            let s = status(data, id);
            s["phase"] == "purged" && s["next_purge_ms"].as_u64().unwrap_or(0) > T0 + DAY + 2 * HOUR
        })
    });
    eprintln!("purge: {launches} launches, {more} killed after committing steps");
    assert!(
        mid_work + more >= 10,
        "too few kills landed mid-work; the test proved little"
    );
    let preserved = store(&data_path, "preserved");
    assert!(objects(preserved.as_ref(), "pieces/").is_empty());
    assert!(
        crate::takedown::versions(preserved.as_ref(), "pieces/").is_empty(),
        "no version kept"
    );

    assert_denied(data, &denied);

    let events = policy_events(data);
    for once in [
        "TakedownDenialActivated",
        "PreservationClosurePending",
        "PreservationVerified",
        "PreservationDiscoveryComplete",
    ] {
        assert_eq!(
            count(&events, once),
            ids.len(),
            "{once} audited once per request"
        );
    }
    let mut selected: BTreeMap<Vec<String>, u32> = BTreeMap::new();
    let mut purged: BTreeMap<Vec<String>, (usize, u32)> = BTreeMap::new();
    let mut passes: BTreeMap<String, usize> = BTreeMap::new();
    for (event, targets, detail) in &events {
        match event.as_str() {
            "PreservationSourceSelected" => *selected.entry(targets.clone()).or_default() += 1,
            "PreservationPiecePurged" => {
                let seen = purged.entry(targets.clone()).or_default();
                seen.0 += 1;
                // A step killed between its DELETE and its commit finds the
                // piece absent when it runs again: deleted at most once.
                seen.1 += u32::from(detail.as_deref() == Some("deleted"));
            }
            "PreservationPurgeStarted" => *passes.entry(targets[0].clone()).or_default() += 1,
            _ => {}
        }
    }
    assert_eq!(selected.len() as u64, objects_per_request * REQUESTS);
    assert!(selected.values().all(|n| *n == 1), "{selected:?}");
    assert_eq!(purged.len(), pieces, "every piece purged");
    for (targets, (events, deleted)) in &purged {
        assert_eq!(
            *events, passes[&targets[0]],
            "one event per piece per pass: {targets:?}"
        );
        assert!(*deleted <= 1, "{targets:?} deleted twice");
    }
    assert_eq!(
        count(&events, "PreservationPurgeStarted"),
        count(&events, "PreservationPurgeComplete")
    );
    assert!(
        passes.values().all(|n| *n >= 2),
        "the purge and a re-sweep ran: {passes:?}"
    );
}
