//! What a swap would change, before it is made: `PUT
//! /v1/plugins/{world}?dry_run=true` on a running server and `custodian
//! plugin diff` offline on its data, both replaying the deployment's own
//! takedown timers through the serving plugin and the candidate, and
//! changing nothing.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::serve::{file_takedown, plugin_hash, push, rebuilt_takedown, takedown_status};
use crate::server::{Server, agent, answer, bearer, wait_for};
use crate::support::{outcome, run, stepper};

/// `PUT /v1/plugins/takedown?QUERY` with `plugin`'s bytes, sent once the
/// server says go on (`Expect: 100-continue`), as `custodian plugin
/// swap` sends them: a query refused before the body is read is answered,
/// not cut off mid-upload.
fn put(server: &Server, query: &str, plugin: &Path) -> (u16, Value) {
    answer(
        agent()
            .put(&server.url(&format!("/v1/plugins/takedown?{query}")))
            .header("authorization", &bearer())
            .header("expect", "100-continue")
            .send(&std::fs::read(plugin).unwrap()[..]),
    )
}

#[test]
fn a_dry_run_reports_each_changed_step_online_and_offline_and_swaps_nothing() {
    let mut server = Server::start("[server]\nworkers = 1\n");
    let scratch = tempfile::tempdir().unwrap();
    let object = push(&server, "acme/site", "a.txt", b"evidence");
    let id = file_takedown(&server, &[object]);
    // Settled in retain, its timer waits for the end of retention: the
    // replay reads a state no worker is changing.
    wait_for("the request to retain", Duration::from_secs(60), || {
        takedown_status(&server, &id)["phase"] == "retain"
    });
    let serving = plugin_hash(&server, "takedown");

    let same = rebuilt_takedown(scratch.path(), "same");
    let (status, report) = put(&server, "dry_run=true", &same);
    assert_eq!(status, 200, "{report}");
    let items = report["items"].as_u64().unwrap();
    assert!(items >= 1, "{report}");
    assert_eq!(report["unchanged"].as_u64(), Some(items), "{report}");
    assert_eq!(report["serving"], serving.as_str());

    let (status, report) = put(&server, "dry_run=true&limit=10", stepper());
    assert_eq!(status, 200, "{report}");
    let changed = report["changed"].as_array().unwrap();
    assert!(!changed.is_empty(), "{report}");
    assert!(
        changed[0]["item"]
            .as_str()
            .unwrap()
            .starts_with("timer takedown "),
        "{report}"
    );
    assert_ne!(changed[0]["before"], changed[0]["after"]);

    // Refused by their query, before the body is read: a small body, so
    // the refusal cannot race the upload.
    let tiny = scratch.path().join("tiny.wasm");
    std::fs::write(&tiny, b"\0asm").unwrap();
    for (query, said) in [
        ("dry_run=maybe", "dry_run"),
        ("dry_run=true&limit=0", "limit"),
        ("limit=5", "dry run"),
        ("dry_run=true&nonsense=1", "nonsense"),
    ] {
        let (status, body) = put(&server, query, &tiny);
        assert_eq!(status, 400, "{query}: {body}");
        assert!(body.to_string().contains(said), "{query}: {body}");
    }
    let (status, body) = put(&server, "dry_run=true", crate::support::retention());
    assert_eq!(status, 422, "a plugin of another world is refused: {body}");
    assert_eq!(
        plugin_hash(&server, "takedown"),
        serving,
        "nothing was swapped"
    );

    // Offline, on the stopped server's data.
    assert!(server.terminate().success(), "{}", server.log());
    let data = server.data.to_str().unwrap();
    let stepper = stepper().to_str().unwrap();
    let (code, stdout, stderr) = outcome(&run(&[
        "plugin", "diff", "--world", "takedown", stepper, "--data", data, "--json",
    ]));
    assert_eq!(code, 0, "{stderr}");
    let offline: Value = serde_json::from_str(&stdout).unwrap();
    assert!(
        !offline["changed"].as_array().unwrap().is_empty(),
        "{offline}"
    );
    let (code, stdout, stderr) = outcome(&run(&[
        "plugin", "diff", "--world", "takedown", stepper, "--data", data,
    ]));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("changed  timer takedown"), "{stdout}");
    assert!(
        stdout.contains("before: ") && stdout.contains("after:  "),
        "{stdout}"
    );
    let (code, _, stderr) = outcome(&run(&[
        "plugin",
        "diff",
        "--world",
        "retention",
        stepper,
        "--data",
        data,
    ]));
    assert_eq!(
        code, 1,
        "a takedown plugin is refused as a retention one: {stderr}"
    );
    let audit = crate::serve::audit(&server.data);
    assert!(
        !audit.iter().any(|r| r["event"] == "plugin/swap"),
        "no swap was audited"
    );
}

/// `custodian plugin diff ARGS --json` (offline): the report.
fn diff(args: &[&str]) -> Value {
    let mut all = vec!["plugin", "diff", "--json"];
    all.extend(args);
    let (code, stdout, stderr) = outcome(&run(&all));
    assert_eq!(code, 0, "{stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

#[test]
fn a_diff_of_a_stricter_retention_plugin_shows_exactly_the_retained_requests_whose_purge_eligibility_it_changes()
 {
    use crate::takedown::{DAY, MINUTE, T0, audit, ok, push, status, tick};
    let dir = tempfile::tempdir().unwrap();
    let data_path = dir.path().join("data");
    let data = data_path.to_str().unwrap();
    let (a, b) = (dir.path().join("a.txt"), dir.path().join("b.txt"));
    std::fs::write(&a, b"filed long ago").unwrap();
    std::fs::write(&b, b"filed later").unwrap();
    let pushed = push(data, "acme/site", &[&a, &b]);
    // Both kept 60 days as filed, so both are still in retain at the diff.
    let file = |path: &str, at: u64| -> String {
        let created: Value = serde_json::from_str(&ok(&[
            "takedown",
            "create",
            "acme/site",
            "--object",
            pushed[path]["id"].as_str().unwrap(),
            "--data",
            data,
            "--now",
            &at.to_string(),
            "--retention-ms",
            &(60 * DAY).to_string(),
            "--json",
        ]))
        .unwrap();
        tick(data, at, at + 30 * MINUTE);
        let id = created["id"].as_str().unwrap().to_owned();
        assert_eq!(status(data, &id)["phase"], "retain");
        id
    };
    let ancient = file("a.txt", T0);
    let recent = file("b.txt", T0 + 15 * DAY);
    let audited = audit(data).len();

    // At T0 + 35 days with 10 days' retention, the bundled policy lets both
    // go; the strict one (30 days at least) lets the ancient one go too,
    // and keeps the recent one until it is 30 days old.
    let now = (T0 + 35 * DAY).to_string();
    let ten_days = (10 * DAY).to_string();
    let diff_with = |plugin: &Path| {
        diff(&[
            "--world",
            "retention",
            plugin.to_str().unwrap(),
            "--data",
            data,
            "--now",
            &now,
            "--retention-ms",
            &ten_days,
        ])
    };
    let report = diff_with(crate::support::strict());
    assert_eq!(report["items"], 2, "{report}");
    assert_eq!(report["unchanged"], 1, "{report}");
    let changed = report["changed"].as_array().unwrap();
    assert_eq!(changed.len(), 1, "{report}");
    let change = &changed[0];
    assert!(
        change["item"]
            .as_str()
            .unwrap()
            .starts_with(&format!("request {recent}")),
        "{report}"
    );
    assert!(!report.to_string().contains(&ancient), "{report}");
    assert_eq!(change["before"], "may be purged now", "{report}");
    let kept_until = T0 + 15 * DAY + 30 * DAY;
    assert_eq!(
        change["differences"],
        serde_json::json!([format!("purgeable now → kept until {kept_until}")]),
        "{report}"
    );

    // The serving policy's own build changes nothing; neither diff wrote.
    let same = diff_with(crate::support::retention());
    assert_eq!(
        (same["items"].as_u64(), same["unchanged"].as_u64()),
        (Some(2), Some(2))
    );
    assert_eq!(audit(data).len(), audited, "a diff writes nothing");
}

#[test]
fn the_strict_test_guest_is_the_readme_retention_example_word_for_word() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let opening = "cat > plugins/strict/src/lib.rs <<'EOF'\n";
    let start = readme.find(opening).expect("the README's example") + opening.len();
    let end = start + readme[start..].find("\nEOF\n").unwrap() + 1;
    let guest = std::fs::read_to_string(root.join("tests/guests/strict/src/lib.rs")).unwrap();
    assert!(
        guest.ends_with(&readme[start..end]),
        "tests/guests/strict/src/lib.rs must end with the README's example"
    );
}

#[test]
fn a_retention_diff_with_a_purge_plan_shows_each_version_the_run_would_keep_that_it_would_have_deleted()
 {
    use crate::takedown::DAY;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let source = dir.path().join("a.txt");
    // Two versions of one key in the data directory's serving store.
    let store = format!("file://{}", data.join("serving").display());
    let mut versions = Vec::new();
    let mut condition = vec!["--if-none-match".to_owned()];
    for body in ["first", "second"] {
        std::fs::write(&source, body).unwrap();
        let mut args = vec!["object", "put", "--store", &store, "docs/a.txt"];
        args.extend([source.to_str().unwrap(), "--json"]);
        args.extend(condition.iter().map(String::as_str));
        let (code, stdout, stderr) = outcome(&run(&args));
        assert_eq!(code, 0, "{stderr}");
        let meta: Value = serde_json::from_str(&stdout).unwrap();
        versions.push(meta["version_id"].as_str().unwrap().to_owned());
        condition = vec!["--if-match".into(), meta["etag"].as_str().unwrap().into()];
    }
    let plan = dir.path().join("plan.json");
    std::fs::write(
        &plan,
        serde_json::json!([{"pointer": "docs/a.txt.dvc", "object": "docs/a.txt", "version_id": versions[0]}])
            .to_string(),
    )
    .unwrap();

    // Twenty days on, with ten days' retention, the bundled policy would
    // let the run delete both; the strict one keeps each 30 days.
    let now = u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
        + 20 * DAY;
    let (now, ten_days) = (now.to_string(), (10 * DAY).to_string());
    let with_plan = |world: &str, plugin: &Path| -> Vec<String> {
        let mut args = vec!["plugin", "diff", "--json", "--world", world];
        args.extend([plugin.to_str().unwrap(), "--data", data.to_str().unwrap()]);
        args.extend(["--plan", plan.to_str().unwrap(), "--store", "serving"]);
        args.iter().map(|a| (*a).to_owned()).collect()
    };
    let mut args = with_plan("retention", crate::support::strict());
    args.extend(["--now".into(), now, "--retention-ms".into(), ten_days]);
    let (code, stdout, stderr) =
        outcome(&run(&args.iter().map(String::as_str).collect::<Vec<_>>()));
    assert_eq!(code, 0, "{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["items"], 2, "every version of the key: {report}");
    let changed = report["changed"].as_array().unwrap();
    assert_eq!(changed.len(), 2, "{report}");
    for (change, version) in changed.iter().zip(versions.iter().rev()) {
        assert_eq!(
            change["item"],
            format!("version serving/docs/a.txt@{version}"),
            "newest first: {report}"
        );
        assert_eq!(change["before"], "may be deleted now", "{report}");
        assert!(
            change["differences"][0]
                .as_str()
                .unwrap()
                .starts_with("deletable now → kept until "),
            "{report}"
        );
    }

    // A plan needs its store, and only a retention diff takes one.
    let args = with_plan("takedown", stepper());
    let (code, _, stderr) = outcome(&run(&args.iter().map(String::as_str).collect::<Vec<_>>()));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--world retention"), "{stderr}");
}
