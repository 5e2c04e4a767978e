//! `custodian purge …` against a real filesystem store, with the bundled
//! purge and retention plugins deciding.

use custodian::object::ObjectMeta;
use custodian::object::ObjectStoreExt;
use serde_json::{Value, json};

use crate::support::{StoreFixture, outcome, run};

/// Far after every version written here: retention has ended for all.
const LATER: &str = "4102444800000";

/// The shared store fixture, with this module's helpers.
struct Fixture(StoreFixture);

impl std::ops::Deref for Fixture {
    type Target = StoreFixture;
    fn deref(&self) -> &StoreFixture {
        &self.0
    }
}

impl Fixture {
    /// Every `(key, version)` under `prefix`.
    fn versions(&self, prefix: &str) -> Vec<(String, String)> {
        let page = self
            .io
            .block_on(self.store.list_versions(prefix, None, 1000))
            .unwrap();
        page.items
            .into_iter()
            .map(|v| (v.key, v.version_id))
            .collect()
    }

    /// A copied registry of `source` → `archive/task` mapping `moved`
    /// (each copy really made, so that its history holds), published;
    /// returns its coordination proof.
    fn publish(&self, source: &str, moved: &[&ObjectMeta]) -> Value {
        let rows: Vec<Value> = moved
            .iter()
            .map(|meta| {
                let suffix = meta.key.strip_prefix(&format!("{source}/")).unwrap();
                let version = meta.version_id.as_deref().unwrap();
                let (_, bytes) = self
                    .io
                    .block_on(self.store.get_version(&meta.key, version))
                    .unwrap();
                let copy = self.put(&format!("archive/task/{suffix}"), &bytes);
                json!({"source_object": meta.key, "source_version_id": meta.version_id,
                       "source_etag": meta.etag,
                       "destination_object": copy.key,
                       "destination_version_id": copy.version_id,
                       "destination_etag": copy.etag,
                       "size": meta.size, "delete_marker": false})
            })
            .collect();
        let document = json!({"schema_version": 1, "status": "copied", "source": source,
                              "destination": "archive/task", "versions": rows});
        let meta = self.put(
            &format!("{source}/.custodian-archive.json"),
            document.to_string().as_bytes(),
        );
        json!({"receipt": document, "coordination": {
            "registry_version_id": meta.version_id, "registry_etag": meta.etag}})
    }

    /// `custodian purge delete --store URL --plan PLAN --json` at a time
    /// when retention has ended; its exit code, report and stderr.
    fn delete(&self, plan: &Value, extra: &[&str]) -> (i32, Value, String) {
        let plan = self.file("plan.json", &plan.to_string());
        let mut args = vec![
            "--plan",
            &plan,
            "--retention-ms",
            "1",
            "--now",
            LATER,
            "--json",
        ];
        args.extend_from_slice(extra);
        let output = self.run(&["purge", "delete"], &args);
        let (code, stdout, stderr) = outcome(&output);
        (
            code,
            serde_json::from_str(&stdout).unwrap_or(Value::Null),
            stderr,
        )
    }
}

fn archived(source: &str, meta: &ObjectMeta) -> Value {
    json!({"pointer": format!("{source}/.custodian-archive.json"), "object": meta.key,
           "version_id": meta.version_id})
}

#[test]
fn purge_list_prints_every_pinned_version_as_a_candidate() {
    let fixture = Fixture(StoreFixture::fs(""));
    let manifest = fixture.file(
        "pins.json",
        r#"{"pins": [{"key": "data/a.csv", "version_id": "v1", "md5": "900150983cd24fb0d6963f7d28e17f72"},
                     {"key": "data/b.csv", "version_id": "v2", "crc64nvme": "ae8b14860a799888"}]}"#,
    );
    let (code, stdout, stderr) = outcome(&run(&["purge", "list", "--pins", &manifest, "--json"]));
    assert_eq!(code, 0, "{stderr}");
    let listed: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        listed,
        json!([{"pointer": manifest, "object": "data/a.csv", "version_id": "v1"},
               {"pointer": manifest, "object": "data/b.csv", "version_id": "v2"}])
    );
    let missing = fixture.file("nopin.json", r#"{"pins": [{"key": "a", "md5": "x"}]}"#);
    let (code, _, stderr) = outcome(&run(&["purge", "list", "--pins", &missing]));
    assert_eq!(code, 2, "{stderr}");
}

#[test]
fn an_archive_prefix_is_retired_through_the_plugins_and_cleaned_keeping_its_registry() {
    an_archive_prefix_is_retired_through_the_plugins_and_cleaned_keeping_its_registry_on(&Fixture(
        StoreFixture::fs(""),
    ));
}

#[test]
fn on_moto_an_archive_prefix_is_retired_through_the_plugins_and_cleaned_keeping_its_registry() {
    if let Some(fixture) = StoreFixture::moto().map(Fixture) {
        an_archive_prefix_is_retired_through_the_plugins_and_cleaned_keeping_its_registry_on(
            &fixture,
        );
    }
}

fn an_archive_prefix_is_retired_through_the_plugins_and_cleaned_keeping_its_registry_on(
    fixture: &Fixture,
) {
    let x = fixture.put("old/task/x", b"x bytes");
    let y = fixture.put("old/task/sub/y", b"y bytes");
    let loose = fixture.put("loose/key", b"a managed key no archive covers");
    fixture.put("loose/key", b"its newer version");
    let proof = fixture.publish("old/task", &[&x, &y]);
    let plan = json!({
        "candidates": [archived("old/task", &x), archived("old/task", &y),
                       {"pointer": "pins.json", "object": "loose/key", "version_id": loose.version_id}],
        "prefixes": [proof["receipt"]],
        "coordination": [proof],
    });
    let (code, report, stderr) = fixture.delete(&plan, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(report["ok"], true);
    assert_eq!(report["cleaned_prefixes"], json!(["old/task"]));
    assert_eq!(report["deleted"].as_array().unwrap().len(), 3, "{report}");
    assert_eq!(
        report["deleted"][2]["deleted_version_ids"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let mut left: Vec<String> = fixture
        .versions("old/")
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    left.extend(fixture.versions("loose/").into_iter().map(|(k, _)| k));
    assert_eq!(left, ["old/task/.custodian-archive.json"]);
}

#[test]
fn a_registry_republished_since_its_proof_is_refused_with_exit_1_and_nothing_deleted() {
    a_registry_republished_since_its_proof_is_refused_with_exit_1_and_nothing_deleted_on(&Fixture(
        StoreFixture::fs(""),
    ));
}

#[test]
fn on_moto_a_registry_republished_since_its_proof_is_refused_with_exit_1_and_nothing_deleted() {
    if let Some(fixture) = StoreFixture::moto().map(Fixture) {
        a_registry_republished_since_its_proof_is_refused_with_exit_1_and_nothing_deleted_on(
            &fixture,
        );
    }
}

fn a_registry_republished_since_its_proof_is_refused_with_exit_1_and_nothing_deleted_on(
    fixture: &Fixture,
) {
    let x = fixture.put("old/task/x", b"x bytes");
    let proof = fixture.publish("old/task", &[&x]);
    fixture.publish("old/task", &[&x]);
    let before = fixture.versions("old/");
    let plan = json!({"candidates": [archived("old/task", &x)], "coordination": [proof]});
    let (code, report, stderr) = fixture.delete(&plan, &[]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("differs from the coordinated receipt"),
        "{stderr}"
    );
    assert_eq!(report["ok"], false);
    assert_eq!(report["kind"], "refused");
    assert_eq!(fixture.versions("old/"), before);
}

#[test]
fn a_version_still_retained_is_reported_and_kept() {
    let fixture = Fixture(StoreFixture::fs(""));
    let old = fixture.put("m/key", b"old");
    let plan = json!([{"pointer": "p", "object": "m/key", "version_id": old.version_id}]);
    let plan_file = fixture.file("plan.json", &plan.to_string());
    // Default retention (30 days) at the real time: just written, kept.
    let (code, stdout, stderr) = outcome(&run(&[
        "purge",
        "delete",
        "--store",
        &fixture.url,
        "--plan",
        &plan_file,
        "--json",
    ]));
    assert_eq!(code, 0, "{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["retained"][0]["candidate"]["object"], "m/key");
    assert!(
        report["retained"][0]["reason"]
            .as_str()
            .unwrap()
            .starts_with("retention"),
        "{report}"
    );
    assert_eq!(fixture.versions("m/").len(), 1);
}

#[test]
fn a_bad_plan_exits_2_and_a_zero_retention_is_the_retention_plugins_refusal() {
    let fixture = Fixture(StoreFixture::fs(""));
    let meta = fixture.put("m/key", b"bytes");
    let (code, _, stderr) = fixture.delete(
        &json!([{"pointer": "p", "object": "m/../key", "version_id": "v"}]),
        &[],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("invalid purge plan"), "{stderr}");
    let plan = json!([{"pointer": "p", "object": "m/key", "version_id": meta.version_id}]);
    let plan_file = fixture.file("plan.json", &plan.to_string());
    let (code, _, stderr) = outcome(&run(&[
        "purge",
        "delete",
        "--store",
        &fixture.url,
        "--plan",
        &plan_file,
        "--retention-ms",
        "0",
    ]));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("retention"), "{stderr}");
    assert_eq!(fixture.versions("m/").len(), 1);
}
