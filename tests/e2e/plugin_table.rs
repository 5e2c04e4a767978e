//! `custodian plugin test`: a table of cases against a built plugin, as a
//! plugin author and CI run it.

use serde_json::{Value, json};

use crate::support::{self, outcome, run};

fn repo(path: &str) -> String {
    format!("{}/../{path}", env!("CARGO_MANIFEST_DIR"))
}

fn table(cases: &Value) -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), cases.to_string()).unwrap();
    file
}

#[test]
fn the_bundled_tables_pass_through_the_built_plugins() {
    let retention = support::retention().to_str().unwrap();
    for (plugin, cases, count) in [
        (retention, "plugins/retention/cases.json", 17),
        ("builtin:access", "plugins/access/cases.json", 181),
    ] {
        let (code, stdout, stderr) = outcome(&run(&[
            "plugin",
            "test",
            plugin,
            "--cases",
            &repo(cases),
            "--json",
        ]));
        assert_eq!(code, 0, "{stdout}{stderr}");
        let report: Value = serde_json::from_str(&stdout).unwrap();
        assert!(report["cases"].as_u64().unwrap() >= count, "{report}");
        assert_eq!(report["failed"], 0);
        assert_eq!(report["passed"], report["cases"]);
    }
}

#[test]
fn a_failing_case_is_reported_with_each_difference_and_the_run_exits_1() {
    let cases: Vec<Value> = serde_json::from_str(
        &std::fs::read_to_string(repo("plugins/retention/cases.json")).unwrap(),
    )
    .unwrap();
    let mut wrong = cases[0].clone();
    wrong["name"] = json!("a wrong expectation");
    wrong["expect"]["ok"]["next-check-ms"] = json!(1);
    let mut missing = cases[1].clone();
    missing["name"] = json!("a function the plugin lacks");
    missing["function"] = json!("asses");
    let mut misfit = cases[1].clone();
    misfit["name"] = json!("input that does not fit");
    misfit["input"] = json!({"settings": 3});
    let file = table(&json!([cases[0], wrong, missing, misfit]));
    let retention = support::retention().to_str().unwrap();
    let cases_path = file.path().to_str().unwrap();

    let (code, stdout, stderr) =
        outcome(&run(&["plugin", "test", retention, "--cases", cases_path]));
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stdout.contains(&format!("ok    {}", cases[0]["name"].as_str().unwrap())),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "FAIL  a wrong expectation\n      .ok.next-check-ms: expected 1, got 1700000002000"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("FAIL  a function the plugin lacks\n      no answer: asses"),
        "{stdout}"
    );
    assert!(stdout.contains("4 cases: 1 passed, 3 failed"), "{stdout}");
    assert!(stderr.contains("error: 3 of 4 cases failed"), "{stderr}");

    let (code, stdout, _) = outcome(&run(&[
        "plugin", "test", retention, "--cases", cases_path, "--json",
    ]));
    assert_eq!(code, 1);
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        (report["passed"].as_u64(), report["failed"].as_u64()),
        (Some(1), Some(3))
    );
    let results = report["results"].as_array().unwrap();
    assert_eq!(
        results[1]["differences"],
        json!([{"path": ".ok.next-check-ms", "expected": 1, "got": 1_700_000_002_000_u64}])
    );
    assert_eq!(
        results[1]["got"]["ok"]["next-check-ms"],
        1_700_000_002_000_u64
    );
    assert!(
        results[3]["error"].as_str().unwrap().contains("settings"),
        "{}",
        results[3]
    );

    let (code, stdout, _) = outcome(&run(&[
        "plugin", "test", retention, "--cases", cases_path, "--filter", "wrong", "--json",
    ]));
    assert_eq!(code, 1);
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["cases"], 1, "--filter runs the matching cases only");
}

#[test]
fn an_unusable_table_or_plugin_is_refused_with_exit_2() {
    let retention = support::retention().to_str().unwrap();
    let one = json!([{"name": "a", "function": "assess", "input": {}, "expect": {"ok": null}}]);
    for (cases, said) in [
        (json!([]), "the file holds no cases"),
        (json!({"name": "a"}), "JSON array"),
        (
            json!([{"name": "a", "expect": 1, "expected": 2}]),
            "unknown field \"expected\"",
        ),
        (
            json!([{"name": "a", "expect": 1}, {"name": "a", "expect": 1}]),
            "another case has this name",
        ),
    ] {
        let file = table(&cases);
        let (code, _, stderr) = outcome(&run(&[
            "plugin",
            "test",
            retention,
            "--cases",
            file.path().to_str().unwrap(),
        ]));
        assert_eq!(code, 2, "{cases}: {stderr}");
        assert!(stderr.contains(said), "{cases}: {stderr}");
    }
    let file = table(&one);
    let cases = file.path().to_str().unwrap();
    for (args, said) in [
        (
            vec!["plugin", "test", retention, "--cases", "/nonexistent.json"],
            "cannot read the cases file",
        ),
        (
            vec!["plugin", "test", "/nonexistent.wasm", "--cases", cases],
            "nonexistent.wasm",
        ),
        (
            vec![
                "plugin", "test", retention, "--cases", cases, "--world", "access",
            ],
            "access",
        ),
        (
            vec![
                "plugin", "test", retention, "--cases", cases, "--filter", "zzz",
            ],
            "no case's name contains",
        ),
    ] {
        let (code, _, stderr) = outcome(&run(&args));
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains(said), "{args:?}: {stderr}");
    }
}

#[test]
fn a_case_without_a_function_calls_the_world_s_only_one() {
    let file = table(&json!([{
        "name": "a stranger may not read",
        "input": {"request": {
            "principal": {"name": "eve", "roles": []},
            "action": "read",
            "target": {"store": "serving", "repository": null, "key": "a", "version": null, "size": null, "subject": null},
            "headers": []
        }},
        "expect": {"deny": "x"}
    }]));
    let (code, stdout, _) = outcome(&run(&[
        "plugin",
        "test",
        "builtin:access",
        "--cases",
        file.path().to_str().unwrap(),
        "--json",
    ]));
    assert_eq!(code, 1, "the reason differs: {stdout}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let difference = &report["results"][0]["differences"][0];
    assert_eq!(difference["path"], ".deny", "{report}");
    assert!(difference["got"].is_string(), "an answer came: {report}");
}
