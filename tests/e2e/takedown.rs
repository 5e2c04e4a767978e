//! A takedown end to end: the real `custodian` binary with the bundled
//! takedown and retention plugins, on the embedded default (a redb KV and
//! filesystem `serving` and `preserved` stores in one data directory).
//! Time is driven with `tick --now … --fast-forward-to …`.

use custodian_object::ObjectStoreExt;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use custodian::clock::SystemClock;
use custodian::object::open::StoreUrl;
use custodian::object::{ObjectStore, PutCondition};
use serde_json::Value;

use crate::support::{outcome, run};

pub(crate) const T0: u64 = 1_700_000_000_000;
pub(crate) const MINUTE: u64 = 60_000;
pub(crate) const HOUR: u64 = 3_600_000;
pub(crate) const DAY: u64 = 24 * HOUR;
/// The retention every run here uses: one day after filing.
pub(crate) const RETENTION: &str = "86400000";

/// Runs `custodian ARGS`, asserting exit 0; its stdout.
pub(crate) fn ok(args: &[&str]) -> String {
    let (code, stdout, stderr) = outcome(&run(args));
    assert_eq!(code, 0, "custodian {args:?} failed: {stderr}");
    stdout
}

/// Every JSON value on stdout: an array's items, or one value a line.
fn json_values(stdout: &str) -> Vec<Value> {
    let trimmed = stdout.trim();
    if let Ok(Value::Array(items)) = serde_json::from_str(trimmed) {
        return items;
    }
    trimmed
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// A repository push; the entries it printed, by path.
pub(crate) fn push(data: &str, repo: &str, paths: &[&Path]) -> BTreeMap<String, Value> {
    let mut args = vec!["repo", "push", repo, "--data", data, "--json"];
    let paths: Vec<&str> = paths.iter().map(|p| p.to_str().unwrap()).collect();
    args.extend(paths);
    json_values(&ok(&args))
        .into_iter()
        .map(|e| (e["path"].as_str().unwrap().to_owned(), e))
        .collect()
}

/// Runs the schedule from `now` until `until`.
pub(crate) fn tick(data: &str, now: u64, until: u64) {
    ok(&[
        "tick",
        "--data",
        data,
        "--now",
        &now.to_string(),
        "--fast-forward-to",
        &until.to_string(),
        "--until-idle",
        "--retention-ms",
        RETENTION,
        "--json",
    ]);
}

pub(crate) fn status(data: &str, id: &str) -> Value {
    serde_json::from_str(&ok(&["takedown", "status", id, "--data", data, "--json"])).unwrap()
}

pub(crate) fn audit(data: &str) -> Vec<Value> {
    json_values(&ok(&["audit", "--data", data, "--json"]))
}

/// The events of the audit log, in order, that the takedown policy wrote.
pub(crate) fn policy_events(data: &str) -> Vec<(String, Vec<String>, Option<String>)> {
    events_by(&audit(data), "plugin:")
}

/// `(event, targets, detail)` of the `records` whose actor starts with
/// `actor`, in order.
pub(crate) fn events_by(
    records: &[Value],
    actor: &str,
) -> Vec<(String, Vec<String>, Option<String>)> {
    records
        .iter()
        .filter(|r| r["actor"].as_str().unwrap().starts_with(actor))
        .map(|r| {
            (
                r["event"].as_str().unwrap().to_owned(),
                r["targets"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t.as_str().unwrap().to_owned())
                    .collect(),
                r["detail"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

/// A store of the data directory, opened directly (no process holds it
/// between commands).
pub(crate) fn store(data: &Path, name: &str) -> Arc<dyn ObjectStore> {
    let url: StoreUrl = format!("file://{}", data.join(name).display())
        .parse()
        .unwrap();
    block(url.open(Arc::new(SystemClock))).unwrap()
}

pub(crate) fn block<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// Every current object under `prefix`, with its bytes.
pub(crate) fn objects(store: &dyn ObjectStore, prefix: &str) -> BTreeMap<String, Vec<u8>> {
    block(async {
        let mut out = BTreeMap::new();
        let mut cursor = None;
        loop {
            let page = store.list(prefix, cursor.as_deref(), 1000).await.unwrap();
            for item in page.items {
                let (_, bytes) = store.get_whole(&item.key, None).await.unwrap();
                out.insert(item.key, bytes.to_vec());
            }
            match page.next {
                Some(next) => cursor = Some(next),
                None => return out,
            }
        }
    })
}

/// Every stored version (and delete marker) under `prefix`: a purge must
/// leave none, not merely hide the current objects.
pub(crate) fn versions(store: &dyn ObjectStore, prefix: &str) -> Vec<String> {
    block(async {
        let page = store.list_versions(prefix, None, 1000).await.unwrap();
        page.items
            .into_iter()
            .map(|v| format!("{}@{}", v.key, v.version_id))
            .collect()
    })
}

/// Deterministic bytes that do not compress or repeat.
pub(crate) fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The tree pushed to `alpha/one`: a small file, a file large enough to
/// be chunked under a manifest, and a subdirectory (a nested pack).
pub(crate) fn site(root: &Path) -> PathBuf {
    let site = root.join("site");
    std::fs::create_dir_all(site.join("docs")).unwrap();
    std::fs::write(site.join("readme.txt"), b"hello, takedown\n").unwrap();
    std::fs::write(site.join("big.bin"), noise(4 * 1024 * 1024 + 100 * 1024, 7)).unwrap();
    std::fs::write(site.join("docs/a.txt"), b"shared with beta/two\n").unwrap();
    std::fs::write(site.join("docs/b.txt"), noise(3000, 11)).unwrap();
    site
}

/// Files the takedown of `site` preserves: each piece's object,
/// reassembled from the preserved store, must hash to its object id
/// (BLAKE3, the content address every repository pushed it under): the
/// preserved copy is the pushed content byte for byte, whether or not its
/// serving copy is still there (a takedown removes it once preserved).
pub(crate) fn assert_preserved_is_the_content(data: &Path, request: &str) -> usize {
    let preserved = objects(
        store(data, "preserved").as_ref(),
        &format!("pieces/{request}/"),
    );
    let mut by_object: BTreeMap<String, Vec<(u64, Vec<u8>)>> = BTreeMap::new();
    for (key, bytes) in &preserved {
        let mut parts = key.rsplit('/');
        let offset = u64::from_str_radix(parts.next().unwrap(), 16).unwrap();
        let object = parts.next().unwrap().to_owned();
        by_object
            .entry(object)
            .or_default()
            .push((offset, bytes.clone()));
    }
    for (object, mut pieces) in by_object.clone() {
        pieces.sort();
        let mut whole = Vec::new();
        for (offset, bytes) in pieces {
            assert_eq!(
                offset,
                whole.len() as u64,
                "pieces of {object} are contiguous"
            );
            whole.extend_from_slice(&bytes);
        }
        assert_eq!(
            blake3::hash(&whole).to_hex().as_str(),
            object,
            "the preserved copy of {object} is its content"
        );
    }
    by_object.len()
}

fn first_index(events: &[(String, Vec<String>, Option<String>)], name: &str) -> usize {
    events
        .iter()
        .position(|(e, _, _)| e == name)
        .unwrap_or_else(|| panic!("no {name} in {events:?}"))
}

#[test]
fn a_takedown_preserves_verifies_discovers_retains_respects_a_hold_purges_and_resweeps() {
    let dir = tempfile::tempdir().unwrap();
    let data_path = dir.path().join("data");
    let data = data_path.to_str().unwrap();
    let site = site(dir.path());
    let alpha = push(data, "alpha/one", &[&site]);
    let beta = push(data, "beta/two", &[&site.join("docs/a.txt")]);
    let pack = alpha["site/"]["id"].as_str().unwrap().to_owned();
    assert_eq!(alpha["site/big.bin"]["kind"], "manifest");
    assert_eq!(alpha["site/docs/"]["kind"], "pack");
    assert_eq!(beta["a.txt"]["id"], alpha["site/docs/a.txt"]["id"]);

    let created: Value = serde_json::from_str(&ok(&[
        "takedown",
        "create",
        "alpha/one",
        "--pack",
        &pack,
        "--data",
        data,
        "--now",
        &T0.to_string(),
        "--retention-ms",
        RETENTION,
        "--json",
    ]))
    .unwrap();
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(status(data, &id)["phase"], "seed");

    // Acquisition, closure and discovery run in (simulated) minutes.
    tick(data, T0, T0 + 30 * MINUTE);
    let s = status(data, &id);
    assert_eq!(s["phase"], "retain", "{s}");
    assert_eq!(s["verification"], "verified", "{s}");
    assert_eq!(s["counts"]["holders"], 2, "alpha/one and beta/two: {s}");
    assert_eq!(s["counts"]["corrupt"], 0);
    assert_eq!(s["retain_until_ms"], T0 + DAY);
    // readme, big.bin's manifest and its 2 chunks, a.txt, b.txt.
    assert_eq!(s["counts"]["verified"], 6, "{s}");
    assert_eq!(assert_preserved_is_the_content(&data_path, &id), 6);

    let events = policy_events(data);
    let order = [
        "PreservationSourceSelected",
        "PreservationClosurePending",
        "PreservationVerified",
        "PreservationDiscoveryComplete",
    ];
    let positions: Vec<usize> = order.iter().map(|e| first_index(&events, e)).collect();
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "{order:?} at {positions:?}"
    );
    assert!(
        !events
            .iter()
            .any(|(e, _, _)| e.starts_with("PreservationPurge"))
    );

    // An operator keeps the evidence longer, explicitly and audited; a
    // retain-until never shrinks.
    let extend = |until: u64| {
        run(&[
            "takedown",
            "extend",
            &id,
            "--until",
            &until.to_string(),
            "--data",
            data,
            "--now",
            &(T0 + 40 * MINUTE).to_string(),
            "--retention-ms",
            RETENTION,
        ])
    };
    let extended = extend(T0 + DAY + HOUR);
    assert!(extended.status.success(), "{extended:?}");
    assert_eq!(status(data, &id)["retain_until_ms"], T0 + DAY + HOUR);
    let shorter = extend(T0 + DAY);
    assert_eq!(shorter.status.code(), Some(1), "{shorter:?}");
    assert!(
        String::from_utf8_lossy(&shorter.stderr).contains("an extension must be later"),
        "{shorter:?}"
    );
    assert!(
        audit(data).iter().any(|r| r["event"] == "takedown/extend"
            && r["actor"].as_str().unwrap().starts_with("operator:")),
        "the extension is audited"
    );

    // A legal hold keeps everything past retain-until.
    ok(&[
        "takedown",
        "hold",
        &id,
        "on",
        "--data",
        data,
        "--now",
        &(T0 + HOUR).to_string(),
        "--retention-ms",
        RETENTION,
    ]);
    tick(data, T0 + HOUR, T0 + 3 * DAY);
    let s = status(data, &id);
    assert_eq!(s["phase"], "retain", "{s}");
    assert_eq!(s["hold"], true);
    assert_eq!(
        assert_preserved_is_the_content(&data_path, &id),
        6,
        "nothing purged while held"
    );
    assert!(
        !policy_events(data)
            .iter()
            .any(|(e, _, _)| e.starts_with("PreservationPurge"))
    );

    // Released, it is purged.
    let released = T0 + 3 * DAY + MINUTE;
    ok(&[
        "takedown",
        "hold",
        &id,
        "off",
        "--data",
        data,
        "--now",
        &released.to_string(),
        "--retention-ms",
        RETENTION,
    ]);
    tick(data, released, released + 30 * MINUTE);
    let s = status(data, &id);
    assert_eq!(s["phase"], "purged", "{s}");
    assert_eq!(s["purged"], true);
    let pieces = s["counts"]["pieces"].as_u64().unwrap();
    assert_eq!(
        s["counts"]["purged_pieces"].as_u64().unwrap(),
        pieces,
        "{s}"
    );
    let preserved = store(&data_path, "preserved");
    assert!(
        objects(preserved.as_ref(), "pieces/").is_empty(),
        "every piece is purged"
    );
    assert_eq!(
        versions(preserved.as_ref(), "pieces/"),
        Vec::<String>::new(),
        "no version kept"
    );
    let events = policy_events(data);
    let started = first_index(&events, "PreservationPurgeStarted");
    let complete = first_index(&events, "PreservationPurgeComplete");
    assert!(started < complete);
    let purged = events
        .iter()
        .filter(|(e, _, d)| e == "PreservationPiecePurged" && d.as_deref() == Some("deleted"))
        .count() as u64;
    assert_eq!(purged, pieces);

    // A write that lands after the purge is found by the hourly re-sweep.
    let readme = alpha["site/readme.txt"]["id"].as_str().unwrap();
    let late_key = format!("pieces/{id}/{}/{readme}/0000000000000000", &readme[..2]);
    let late = b"hello, takedown\n";
    block(preserved.put_whole(
        &late_key,
        bytes::Bytes::from_static(late),
        &PutCondition::Unconditional,
        &Default::default(),
        custodian::checksum::crc64_nvme(late),
    ))
    .unwrap();
    tick(data, released + 30 * MINUTE, released + 3 * HOUR);
    let s = status(data, &id);
    assert_eq!(s["phase"], "purged");
    assert_eq!(
        s["counts"]["purged_pieces"].as_u64().unwrap(),
        pieces + 1,
        "{s}"
    );
    assert!(
        objects(preserved.as_ref(), "pieces/").is_empty(),
        "the late write is gone"
    );
    assert_eq!(
        versions(preserved.as_ref(), "pieces/"),
        Vec::<String>::new()
    );
}

#[test]
fn corrupt_serving_content_ends_acquisition_incomplete_and_the_request_moves_on() {
    let dir = tempfile::tempdir().unwrap();
    let data_path = dir.path().join("data");
    let data = data_path.to_str().unwrap();
    let file = dir.path().join("victim.txt");
    std::fs::write(&file, b"original bytes").unwrap();
    let entries = push(data, "alpha/one", &[&file]);
    let object = entries["victim.txt"]["id"].as_str().unwrap().to_owned();
    let serving = store(&data_path, "serving");
    block(serving.put_whole(
        &format!("content/{object}"),
        bytes::Bytes::from_static(b"tampered bytes"),
        &PutCondition::Unconditional,
        &Default::default(),
        custodian::checksum::crc64_nvme(b"tampered bytes"),
    ))
    .unwrap();
    drop(serving);
    let id = ok(&[
        "takedown",
        "create",
        "alpha/one",
        "--object",
        &object,
        "--data",
        data,
        "--now",
        &T0.to_string(),
        "--retention-ms",
        RETENTION,
    ])
    .trim()
    .to_owned();
    tick(data, T0, T0 + 30 * MINUTE);
    let s = status(data, &id);
    assert_eq!(s["verification"], "source-corrupt", "{s}");
    assert_eq!(s["phase"], "retain", "not stuck: {s}");
    assert_eq!(s["counts"]["corrupt"], 1);
    let events = policy_events(data);
    let corrupt = first_index(&events, "PreservationSourceCorrupt");
    let incomplete = first_index(&events, "PreservationAcquisitionIncomplete");
    assert!(corrupt < incomplete);
    assert!(events[corrupt].1.contains(&object), "{:?}", events[corrupt]);
    assert_eq!(
        events
            .iter()
            .filter(|(e, _, _)| e == "PreservationSourceCorrupt")
            .count(),
        1,
        "recorded once, not retried forever"
    );
}

#[test]
fn a_request_for_an_object_the_repository_does_not_hold_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data_path = dir.path().join("data");
    let data = data_path.to_str().unwrap();
    let file = dir.path().join("f.txt");
    std::fs::write(&file, b"f").unwrap();
    let entries = push(data, "alpha/one", &[&file]);
    let object = entries["f.txt"]["id"].as_str().unwrap();
    let (code, _, stderr) = outcome(&run(&[
        "takedown", "create", "beta/two", "--object", object, "--data", data,
    ]));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("not found"), "{stderr}");
    let (code, _, stderr) = outcome(&run(&[
        "takedown",
        "create",
        "alpha/one",
        "--object",
        "abc",
        "--data",
        data,
    ]));
    assert_eq!(code, 2, "{stderr}");
}

#[test]
fn on_moto_a_takedown_preserves_to_and_purges_from_an_s3_preserved_store() {
    use custodian::object::s3::local_server::{self, Kind};
    let Some(server) = local_server::server(Kind::Moto) else {
        return;
    };
    let Some(bucket_store) = block(local_server::store(Kind::Moto)) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let data_path = dir.path().join("data");
    let data = data_path.to_str().unwrap();
    let config = dir.path().join("custodian.toml");
    std::fs::write(
        &config,
        format!(
            "[stores.preserved]\nurl = \"s3://{}/preserved\"\nendpoint = \"{}\"\nregion = \"us-east-1\"\n",
            bucket_store.bucket(),
            server.endpoint
        ),
    )
    .unwrap();
    let credentials = local_server::credentials();
    let env = [
        ("CUSTODIAN_CONFIG", config.display().to_string()),
        ("AWS_ACCESS_KEY_ID", credentials.access_key_id().to_owned()),
        (
            "AWS_SECRET_ACCESS_KEY",
            credentials.secret_access_key().to_owned(),
        ),
        ("AWS_EC2_METADATA_DISABLED", "true".to_owned()),
    ];
    let custodian = |args: &[&str]| {
        let output = crate::support::custodian()
            .args(args)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .output()
            .unwrap();
        let (code, stdout, stderr) = outcome(&output);
        // stdout has the report of each step, a failed one's error too.
        assert_eq!(code, 0, "custodian {args:?}: {stderr}\n{stdout}");
        stdout
    };
    let file = dir.path().join("big.bin");
    std::fs::write(&file, noise(5 * 1024 * 1024, 3)).unwrap();
    let entries = push(data, "alpha/one", &[&file]);
    let manifest = entries["big.bin"]["id"].as_str().unwrap().to_owned();
    let id = custodian(&[
        "takedown",
        "create",
        "alpha/one",
        "--object",
        &manifest,
        "--data",
        data,
        "--now",
        &T0.to_string(),
        "--retention-ms",
        RETENTION,
    ])
    .trim()
    .to_owned();
    let tick = |from: u64, to: u64| {
        custodian(&[
            "tick",
            "--data",
            data,
            "--now",
            &from.to_string(),
            "--fast-forward-to",
            &to.to_string(),
            "--until-idle",
            "--retention-ms",
            RETENTION,
        ]);
    };
    tick(T0, T0 + 30 * MINUTE);
    let s: Value = serde_json::from_str(&custodian(&[
        "takedown", "status", &id, "--data", data, "--json",
    ]))
    .unwrap();
    assert_eq!(s["phase"], "retain", "{s}");
    assert_eq!(s["verification"], "verified", "{s}");
    let preserved = objects(&bucket_store, "preserved/pieces/");
    assert_eq!(
        preserved.len() as u64,
        s["counts"]["pieces"].as_u64().unwrap()
    );
    assert_eq!(
        preserved.values().map(Vec::len).sum::<usize>() as u64,
        s["counts"]["bytes"].as_u64().unwrap()
    );

    tick(T0 + DAY, T0 + DAY + 30 * MINUTE);
    let s: Value = serde_json::from_str(&custodian(&[
        "takedown", "status", &id, "--data", data, "--json",
    ]))
    .unwrap();
    assert_eq!(s["phase"], "purged", "{s}");
    assert!(objects(&bucket_store, "preserved/pieces/").is_empty());
    assert_eq!(
        versions(&bucket_store, "preserved/pieces/"),
        Vec::<String>::new()
    );
}
