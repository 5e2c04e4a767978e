//! The `custodian` binary: commands, JSON output, messages and exit codes.

use serde_json::{Value, json};

use crate::support::{self, custodian, outcome, run};

fn path(p: &std::path::Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn help_explains_every_command() {
    let (code, stdout, _) = outcome(&run(&["--help"]));
    assert_eq!(code, 0);
    for word in ["plugin", "run", "Exit codes"] {
        assert!(stdout.contains(word), "--help lacks {word}: {stdout}");
    }
    let (code, stdout, _) = outcome(&run(&["plugin", "--help"]));
    assert_eq!(code, 0);
    for word in ["inspect", "check", "list", "export"] {
        assert!(
            stdout.contains(word),
            "plugin --help lacks {word}: {stdout}"
        );
    }
    let (code, stdout, _) = outcome(&run(&["run", "--help"]));
    assert_eq!(code, 0);
    assert!(
        stdout.contains("--grant-partition") && stdout.contains("Example"),
        "{stdout}"
    );
}

/// jemalloc prints its options at exit when its own variable asks: the
/// settings `.cargo/config.toml` compiles into the binary's allocator
/// must be the ones in force (`host/src/allocator.rs` says why each).
#[cfg(not(target_env = "msvc"))]
#[test]
fn the_binary_allocates_with_jemalloc_under_its_compiled_in_settings() {
    let output = custodian()
        .env("_RJEM_MALLOC_CONF", "stats_print:true")
        .arg("--version")
        .output()
        .expect("custodian runs");
    let (code, stdout, stderr) = outcome(&output);
    assert_eq!(code, 0, "{stderr}");
    let printed = format!("{stdout}{stderr}");
    for option in [
        "opt.narenas: 2",
        "opt.background_thread: true",
        "opt.dirty_decay_ms: 1000",
        "opt.muzzy_decay_ms: 0",
    ] {
        assert!(
            printed.contains(option),
            "jemalloc's options lack {option}: {printed}"
        );
    }
}

#[test]
fn plugin_inspect_describes_a_plugin_as_json() {
    let (code, stdout, stderr) = outcome(&run(&[
        "plugin",
        "inspect",
        path(support::retention()),
        "--json",
    ]));
    assert_eq!(code, 0, "{stderr}");
    let info: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(info["worlds"], json!(["retention"]));
    assert_eq!(info["policy_version"], json!("0.2.0"));
    assert!(info["size"].as_u64().unwrap() > 1000);
    assert_eq!(info["hash"].as_str().unwrap().len(), 64);
    assert!(info["load_time"].as_f64().unwrap() > 0.0);
    assert!(
        info["imports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i == "custodian:host/types@0.2.0")
    );
}

#[test]
fn plugin_inspect_and_check_work_on_every_bundled_plugin() {
    let (code, stdout, _) = outcome(&run(&["plugin", "list", "--json"]));
    assert_eq!(code, 0);
    let bundled: Vec<Value> = serde_json::from_str(&stdout).unwrap();
    assert!(!bundled.is_empty());
    for plugin in bundled {
        let name = plugin["name"].as_str().unwrap();
        let world = plugin["world"].as_str().unwrap();
        let (code, stdout, stderr) = outcome(&run(&["plugin", "inspect", name]));
        assert_eq!(code, 0, "{stderr}");
        assert!(stdout.contains(&format!("world    {world}")), "{stdout}");
        let (code, stdout, stderr) = outcome(&run(&["plugin", "check", name, "--world", world]));
        assert_eq!(code, 0, "{stderr}");
        assert!(stdout.starts_with("ok: "), "{stdout}");
    }
}

#[test]
fn plugin_check_fails_clearly_on_a_core_module() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("core.wasm");
    std::fs::write(&file, wat::parse_str("(module)").unwrap()).unwrap();
    let (code, _, stderr) = outcome(&run(&["plugin", "check", path(&file)]));
    assert_eq!(code, 2);
    assert!(
        stderr.starts_with("error: ") && stderr.contains("core WebAssembly module"),
        "{stderr}"
    );
}

#[test]
fn plugin_check_fails_clearly_on_a_text_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("notes.txt");
    std::fs::write(&file, "not a plugin").unwrap();
    let (code, _, stderr) = outcome(&run(&["plugin", "check", path(&file)]));
    assert_eq!(code, 2);
    assert!(stderr.contains("is not WebAssembly"), "{stderr}");
}

#[test]
fn plugin_check_fails_clearly_on_a_missing_file() {
    let (code, _, stderr) = outcome(&run(&["plugin", "check", "/nowhere/plugin.wasm"]));
    assert_eq!(code, 2);
    assert!(stderr.contains("does not exist"), "{stderr}");
}

#[test]
fn plugin_check_refuses_a_plugin_of_another_world() {
    let (code, _, stderr) = outcome(&run(&[
        "plugin",
        "check",
        path(support::retention()),
        "--world",
        "takedown",
    ]));
    assert_eq!(code, 2);
    assert!(
        stderr.contains("is not a takedown plugin") && stderr.contains("retention"),
        "{stderr}"
    );
}

#[test]
fn plugin_check_names_the_import_of_an_incompatible_contract() {
    let (code, _, stderr) = outcome(&run(&["plugin", "check", path(support::future_contract())]));
    assert_eq!(code, 2);
    assert!(stderr.contains("custodian:host/clock@0.3.0"), "{stderr}");
}

const EXPIRED: &str = r#"{"settings": {"retention-ms": 86400000, "noncurrent-retention-ms": 0},
    "item": {"created-ms": 1700000000000, "hold": false, "stage": "retaining"},
    "now-ms": 1700090000000}"#;

#[test]
fn run_asks_the_bundled_retention_plugin_for_a_decision() {
    let (code, stdout, stderr) = outcome(&run(&["run", "retention", "assess", "--input", EXPIRED]));
    assert_eq!(code, 0, "{stderr}");
    let got: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(got["ok"]["may-delete"], json!("allow"));
    assert_eq!(got["ok"]["retain-until-ms"], json!(1_700_086_400_000u64));
}

#[test]
fn run_uses_the_plugin_at_the_given_path() {
    let (code, stdout, stderr) = outcome(&run(&[
        "run",
        "retention",
        "assess",
        "--plugin",
        path(support::retention()),
        "--input",
        EXPIRED,
        "--compact",
    ]));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
}

#[test]
fn run_reads_its_input_from_stdin() {
    use std::io::Write;
    let mut child = custodian()
        .args(["run", "retention", "assess", "--input", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(EXPIRED.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&output.stdout).contains("\"allow\""));
}

#[test]
fn a_policy_error_answer_exits_1_with_the_answer_on_stdout() {
    let input = r#"{"settings": {"retention-ms": 0, "noncurrent-retention-ms": 0},
        "item": {"created-ms": 1, "hold": false, "stage": "active"}, "now-ms": 2}"#;
    let (code, stdout, stderr) = outcome(&run(&["run", "retention", "assess", "--input", input]));
    assert_eq!(code, 1);
    let got: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        got["err"]["invalid-argument"],
        json!("retention-ms must be positive")
    );
    assert!(
        stderr.starts_with("error: the policy answered with an error"),
        "{stderr}"
    );
}

#[test]
fn a_guest_trap_exits_1_with_the_guests_panic_message() {
    let (code, _, stderr) = outcome(&run(&[
        "run",
        support::PROBE,
        "crash",
        "--plugin",
        path(support::probe()),
        "--input",
        r#"{"message": "kaboom"}"#,
    ]));
    assert_eq!(code, 1);
    assert!(
        stderr.contains("kaboom") && stderr.contains("guest panicked"),
        "{stderr}"
    );
}

#[test]
fn an_endless_guest_exits_1_naming_the_time_limit() {
    let (code, _, stderr) = outcome(&run(&[
        "run",
        support::PROBE,
        "spin",
        "--plugin",
        path(support::probe()),
        "--input",
        r#"{"seed": 1}"#,
        "--timeout-ms",
        "300",
    ]));
    assert_eq!(code, 1);
    assert!(stderr.contains("time limit of 300ms"), "{stderr}");
}

#[test]
fn input_that_does_not_fit_the_function_exits_2() {
    let (code, _, stderr) = outcome(&run(&[
        "run",
        "retention",
        "assess",
        "--input",
        r#"{"bogus": 1}"#,
    ]));
    assert_eq!(code, 2);
    assert!(stderr.contains("unknown parameter \"bogus\""), "{stderr}");
    let (code, _, stderr) = outcome(&run(&["run", "retention", "nonexistent"]));
    assert_eq!(code, 2);
    assert!(stderr.contains("no function nonexistent"), "{stderr}");
}

#[test]
fn a_second_start_reads_the_compiled_plugin_from_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let inspect = || {
        let output = custodian()
            .env("CUSTODIAN_CACHE_DIR", dir.path())
            .args(["plugin", "inspect", "builtin:retention", "--json"])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0));
        serde_json::from_slice::<Value>(&output.stdout).unwrap()
    };
    let cold = inspect();
    let warm = inspect();
    assert_eq!(cold["from_cache"], json!(false));
    assert_eq!(warm["from_cache"], json!(true));
}

#[test]
fn plugin_export_writes_a_loadable_copy_of_a_bundled_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("retention.wasm");
    let (code, _, stderr) = outcome(&run(&[
        "plugin",
        "export",
        "retention",
        "--output",
        path(&file),
    ]));
    assert_eq!(code, 0, "{stderr}");
    let (code, _, stderr) = outcome(&run(&[
        "plugin",
        "check",
        path(&file),
        "--world",
        "retention",
    ]));
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn a_data_directory_held_elsewhere_exits_3_with_redbs_refusal_printed_once_as_the_cause() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let clock = std::sync::Arc::new(custodian::clock::SystemClock);
    let _held =
        custodian::kv::redb::RedbKv::open(&data.join(custodian::data_dir::KV_FILE), clock).unwrap();
    let (code, _, stderr) = outcome(&run(&["timer", "list", "--data", path(&data)]));
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(
        stderr.contains("already in use by another custodian process"),
        "{stderr}"
    );
    // The backend's own error is the last link of the chain, and no line
    // before it repeats it.
    let redb = redb::DatabaseError::DatabaseAlreadyOpen.to_string();
    assert_eq!(
        stderr.lines().last(),
        Some(format!("  caused by: {redb}").as_str()),
        "{stderr}"
    );
    assert_eq!(stderr.matches(&redb).count(), 1, "{stderr}");
}
