//! `custodian versions …` against a real filesystem store, with the
//! bundled archive plugin choosing archive hops.

use custodian::object::ObjectMeta;
use serde_json::{Value, json};

use crate::support::{StoreFixture, outcome};

/// The shared store fixture, with this module's helpers.
struct Fixture(StoreFixture);

impl std::ops::Deref for Fixture {
    type Target = StoreFixture;
    fn deref(&self) -> &StoreFixture {
        &self.0
    }
}

impl Fixture {
    /// `custodian versions VERB --store URL … --pins MANIFEST ARGS`.
    fn command(&self, verb: &str, manifest: &str, args: &[&str]) -> std::process::Output {
        let mut all = vec!["--pins", manifest];
        all.extend_from_slice(args);
        self.run(&["versions", verb], &all)
    }

    /// `custodian versions VERB --store URL --pins MANIFEST ARGS… --json`.
    fn versions(&self, verb: &str, manifest: &str, args: &[&str]) -> (i32, Value, String) {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let (code, stdout, stderr) = outcome(&self.command(verb, manifest, &all));
        let report = serde_json::from_str(&stdout).unwrap_or(Value::Null);
        (code, report, stderr)
    }

    /// A registry moving `rows` (source version, source etag, destination
    /// version, destination etag) of `from/file` to `to/file`.
    fn registry(&self, from: &str, to: &str, rows: &[(String, String, String, String)], size: u64) {
        let versions: Vec<_> = rows
            .iter()
            .map(|(sv, se, dv, de)| {
                json!({"source_object": format!("{from}/file"), "source_version_id": sv,
                       "source_etag": se, "destination_object": format!("{to}/file"),
                       "destination_version_id": dv, "destination_etag": de,
                       "size": size, "delete_marker": false})
            })
            .collect();
        let document = json!({"schema_version": 1, "status": "copied", "source": from,
                              "destination": to, "versions": versions});
        self.put(
            &format!("{from}/.custodian-archive.json"),
            document.to_string().as_bytes(),
        );
    }

    /// The bytes at the end of `hops` archive moves; a pin on the start.
    fn chain(&self, hops: usize) -> Value {
        let bytes = b"archived long ago";
        let last = self.put(&format!("h{hops}/task/file"), bytes);
        let version = |i: usize| {
            if i == hops {
                last.version_id.clone().unwrap()
            } else {
                format!("gone{i}")
            }
        };
        let etag = |i: usize| {
            if i == hops {
                last.etag.clone()
            } else {
                format!("e{i}")
            }
        };
        for i in 0..hops {
            self.registry(
                &format!("h{i}/task"),
                &format!("h{}/task", i + 1),
                &[(version(i), etag(i), version(i + 1), etag(i + 1))],
                last.size,
            );
        }
        json!({"key": "h0/task/file", "version_id": version(0), "etag": etag(0),
               "size": last.size, "md5": md5(bytes), "hash": "md5"})
    }
}

fn md5(bytes: &[u8]) -> String {
    custodian::versions::digest::Digest::Md5(String::new()).of(bytes)
}

fn pin(meta: &ObjectMeta, bytes: &[u8]) -> Value {
    json!({"key": meta.key, "version_id": meta.version_id, "etag": meta.etag,
           "size": meta.size, "md5": md5(bytes), "hash": "md5"})
}

fn manifest(pins: &[Value]) -> String {
    json!({ "pins": pins }).to_string()
}

#[test]
fn pinned_versions_are_verified_and_a_wrong_pin_fails_with_exit_1() {
    pinned_versions_are_verified_and_a_wrong_pin_fails_with_exit_1_on(&Fixture(StoreFixture::fs(
        "",
    )));
}

#[test]
fn on_moto_pinned_versions_are_verified_and_a_wrong_pin_fails_with_exit_1() {
    if let Some(fixture) = StoreFixture::moto().map(Fixture) {
        pinned_versions_are_verified_and_a_wrong_pin_fails_with_exit_1_on(&fixture);
    }
}

fn pinned_versions_are_verified_and_a_wrong_pin_fails_with_exit_1_on(fixture: &Fixture) {
    let mut pins = Vec::new();
    for i in 0..10 {
        let bytes = format!("row {i}");
        pins.push(pin(
            &fixture.put(&format!("data/{i}.csv"), bytes.as_bytes()),
            bytes.as_bytes(),
        ));
    }
    // A newer version does not disturb the pin on the older one.
    fixture.put("data/0.csv", b"rewritten");
    let good = fixture.file("pins.json", &manifest(&pins));
    let (code, report, stderr) = fixture.versions("verify", &good, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(report["checked"].as_array().unwrap().len(), 10);
    assert_eq!(report["requests"]["list_versions"], 1);
    assert_eq!(report["requests"]["head_version"], 0);

    pins[3]["size"] = json!(999);
    pins[4]["version_id"] = json!("no-such-version");
    let bad = fixture.file("bad.json", &manifest(&pins));
    let (code, report, _) = fixture.versions("verify", &bad, &[]);
    assert_eq!(code, 1);
    let problems = report["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 2, "{report}");
    assert_eq!(problems[0]["kind"], "mismatch");
    assert!(problems[0]["error"].as_str().unwrap().contains("size"));
    assert_eq!(problems[1]["kind"], "missing-version");

    let (code, stdout, stderr) = outcome(&fixture.command("verify", &bad, &[]));
    assert_eq!(code, 1);
    assert!(stdout.contains("FAIL  data/3.csv@"), "{stdout}");
    assert!(stderr.contains("error: 2 of 10 pins failed"), "{stderr}");
}

#[test]
fn a_version_moved_through_three_archive_registries_is_found() {
    a_version_moved_through_three_archive_registries_is_found_on(&Fixture(StoreFixture::fs("")));
}

#[test]
fn on_moto_a_version_moved_through_three_archive_registries_is_found() {
    if let Some(fixture) = StoreFixture::moto().map(Fixture) {
        a_version_moved_through_three_archive_registries_is_found_on(&fixture);
    }
}

fn a_version_moved_through_three_archive_registries_is_found_on(fixture: &Fixture) {
    let pin = fixture.chain(3);
    let path = fixture.file("pins.json", &manifest(&[pin]));
    let (code, report, stderr) = fixture.versions("verify", &path, &[]);
    assert_eq!(code, 0, "{stderr} {report}");
    assert_eq!(report["checked"][0]["hops"], 3);
    assert!(
        report["checked"][0]["found"]
            .as_str()
            .unwrap()
            .starts_with("h3/task/file@")
    );
}

#[test]
fn a_cycle_of_archive_hops_is_refused_clearly() {
    let fixture = Fixture(StoreFixture::fs(""));
    let s = |v: &str| v.to_owned();
    fixture.registry(
        "h0/task",
        "h1/task",
        &[(s("gone0"), s("e0"), s("gone1"), s("e1"))],
        5,
    );
    fixture.registry(
        "h1/task",
        "h0/task",
        &[(s("gone1"), s("e1"), s("gone0"), s("e0"))],
        5,
    );
    let pin = json!({"key": "h0/task/file", "version_id": "gone0", "etag": "e0", "size": 5,
                     "md5": md5(b"bytes"), "hash": "md5"});
    let path = fixture.file("pins.json", &manifest(&[pin]));
    let (code, report, _) = fixture.versions("verify", &path, &[]);
    assert_eq!(code, 1);
    let problem = &report["problems"][0];
    assert_eq!(problem["kind"], "hop-cycle", "{report}");
    assert!(
        problem["error"]
            .as_str()
            .unwrap()
            .contains("cycle back to h0/task/file@gone0"),
        "{problem}"
    );
}

#[test]
fn a_chain_of_33_archive_hops_is_refused_clearly() {
    let fixture = Fixture(StoreFixture::fs(""));
    let pin = fixture.chain(33);
    let path = fixture.file("pins.json", &manifest(&[pin]));
    let (code, report, _) = fixture.versions("verify", &path, &[]);
    assert_eq!(code, 1);
    let problem = &report["problems"][0];
    assert_eq!(problem["kind"], "hop-limit", "{report}");
    assert!(
        problem["error"].as_str().unwrap().contains("limit of 32"),
        "{problem}"
    );
}

#[test]
fn fetch_fills_the_cache_and_a_second_fetch_downloads_nothing() {
    fetch_fills_the_cache_and_a_second_fetch_downloads_nothing_on(&Fixture(StoreFixture::fs("")));
}

#[test]
fn on_moto_fetch_fills_the_cache_and_a_second_fetch_downloads_nothing() {
    if let Some(fixture) = StoreFixture::moto().map(Fixture) {
        fetch_fills_the_cache_and_a_second_fetch_downloads_nothing_on(&fixture);
    }
}

fn fetch_fills_the_cache_and_a_second_fetch_downloads_nothing_on(fixture: &Fixture) {
    let mut pins = Vec::new();
    for i in 0..9 {
        let bytes = format!("sample {i}\r\n");
        pins.push(pin(
            &fixture.put(&format!("set/{i}"), bytes.as_bytes()),
            bytes.as_bytes(),
        ));
    }
    pins.push(fixture.chain(2));
    let path = fixture.file("pins.json", &manifest(&pins));
    let cache = fixture.dir.path().join("cache");
    let cache_arg = cache.display().to_string();
    let (code, report, stderr) = fixture.versions("fetch", &path, &["--cache", &cache_arg]);
    assert_eq!(code, 0, "{stderr} {report}");
    assert_eq!(report["downloaded"], 10);
    assert_eq!(report["cached"], 0);
    let digest = md5(b"sample 4\r\n");
    let cached = std::fs::read(cache.join(&digest[..2]).join(&digest[2..])).unwrap();
    assert_eq!(cached, b"sample 4\r\n");

    let (code, report, stderr) = fixture.versions("fetch", &path, &["--cache", &cache_arg]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(report["downloaded"], 0);
    assert_eq!(report["cached"], 10);
    assert_eq!(report["downloaded_bytes"], 0);
}

#[test]
fn a_dvc_pointer_file_works_as_a_pin_manifest() {
    a_dvc_pointer_file_works_as_a_pin_manifest_on(&Fixture(StoreFixture::fs("")));
}

#[test]
fn on_moto_a_dvc_pointer_file_works_as_a_pin_manifest() {
    if let Some(fixture) = StoreFixture::moto().map(Fixture) {
        a_dvc_pointer_file_works_as_a_pin_manifest_on(&fixture);
    }
}

fn a_dvc_pointer_file_works_as_a_pin_manifest_on(fixture: &Fixture) {
    let bytes = b"a,b\r\n1,2\r\n";
    let meta = fixture.put("data/train.csv", bytes);
    fixture.put("data/train.csv", b"a newer version");
    // DVC 2 wrote no `hash:` field: md5-dos2unix, CRLF hashed as LF.
    let dos2unix = md5(b"a,b\n1,2\n");
    let dvc = format!(
        "outs:\n- md5: {dos2unix}\n  size: {}\n  path: train.csv\n  cloud:\n    custodian:\n      etag: {}\n      version_id: {}\n",
        meta.size,
        meta.etag.trim_matches('"'),
        meta.version_id.as_deref().unwrap()
    );
    // Keys are relative to --root: `data/train.csv`.
    let pointer = fixture.file("checkout/data/train.csv.dvc", &dvc);
    let root = fixture.dir.path().join("checkout").display().to_string();
    let (code, report, stderr) = fixture.versions("verify", &pointer, &["--root", &root]);
    assert_eq!(code, 0, "{stderr} {report}");
    let checked = report["checked"][0]["pin"].as_str().unwrap();
    assert!(checked.starts_with("data/train.csv@"), "{checked}");

    let cache = fixture.dir.path().join("cache");
    let cache_arg = cache.display().to_string();
    let (code, report, stderr) =
        fixture.versions("fetch", &pointer, &["--root", &root, "--cache", &cache_arg]);
    assert_eq!(code, 0, "{stderr} {report}");
    assert_eq!(report["downloaded"], 1);
    let cached = std::fs::read(cache.join(&dos2unix[..2]).join(&dos2unix[2..])).unwrap();
    assert_eq!(cached, bytes, "the cache holds the bytes as stored");

    // Without --root the key is the path alone, which the store lacks.
    let (code, report, _) = fixture.versions("verify", &pointer, &[]);
    assert_eq!(code, 1);
    assert_eq!(report["problems"][0]["kind"], "missing-version", "{report}");
}

#[test]
fn an_unversioned_store_is_refused() {
    let fixture = Fixture(StoreFixture::fs("?versioned=false"));
    let meta = fixture.put("k", b"x");
    let path = fixture.file(
        "pins.json",
        &manifest(&[json!({"key": "k", "version_id": "v1", "md5": md5(b"x"), "size": meta.size})]),
    );
    let (code, _, stderr) = fixture.versions("verify", &path, &[]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("does not have versioning enabled"),
        "{stderr}"
    );
}

#[test]
fn a_pin_without_an_exact_version_is_a_usage_error_naming_it() {
    let fixture = Fixture(StoreFixture::fs(""));
    let path = fixture.file(
        "pins.json",
        &manifest(&[json!({"key": "data/x", "version_id": "null", "md5": md5(b"x")})]),
    );
    let (code, _, stderr) = fixture.versions("verify", &path, &[]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("\"data/x\" has no exact version id"),
        "{stderr}"
    );
}

#[test]
fn a_pin_on_a_pending_archive_destination_is_checked_at_its_source() {
    let fixture = Fixture(StoreFixture::fs(""));
    let meta = fixture.put("live/data/x", b"abc");
    let receipts = json!([{"schema_version": 1, "status": "planned", "store": fixture.url,
        "source": "live/data", "destination": "archive/data",
        "versions": [{"source_object": "live/data/x", "source_version_id": meta.version_id,
                      "source_etag": meta.etag, "destination_object": "archive/data/x",
                      "size": 3, "delete_marker": false}]}]);
    let receipts = fixture.file("receipts.json", &receipts.to_string());
    let mut pinned = pin(&meta, b"abc");
    pinned["key"] = json!("archive/data/x");
    let path = fixture.file("pins.json", &manifest(&[pinned]));
    let (code, report, stderr) = fixture.versions("verify", &path, &["--receipts", &receipts]);
    assert_eq!(code, 0, "{stderr} {report}");
    assert!(
        report["checked"][0]["found"]
            .as_str()
            .unwrap()
            .starts_with("live/data/x@")
    );
}
