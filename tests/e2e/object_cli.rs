//! `custodian object …` against a real filesystem store.

use serde_json::Value;

use crate::support::{outcome, run};

fn store(dir: &tempfile::TempDir) -> String {
    format!("file://{}", dir.path().join("store").display())
}

fn json(stdout: &str) -> Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

#[test]
fn put_then_get_round_trips_a_file_and_reports_etag_version_and_crc() {
    let dir = tempfile::tempdir().unwrap();
    let url = store(&dir);
    let source = dir.path().join("in.txt");
    std::fs::write(&source, "123456789").unwrap();
    let (code, stdout, stderr) = outcome(&run(&[
        "object",
        "put",
        "--store",
        &url,
        "docs/a.txt",
        source.to_str().unwrap(),
        "--if-none-match",
        "--json",
    ]));
    assert_eq!(code, 0, "{stderr}");
    let meta = json(&stdout);
    assert_eq!(meta["crc64"], "ae8b14860a799888");
    assert_eq!(meta["crc64_wire"], "rosUhgp5mIg=");
    assert_eq!(meta["size"], 9);
    assert!(meta["etag"].as_str().unwrap().len() > 2);
    assert!(meta["version_id"].is_string());
    let target = dir.path().join("out.txt");
    let (code, _, stderr) = outcome(&run(&[
        "object",
        "get",
        "--store",
        &url,
        "docs/a.txt",
        target.to_str().unwrap(),
    ]));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "123456789");
    let (code, stdout, _) = outcome(&run(&[
        "object",
        "get",
        "--store",
        &url,
        "docs/a.txt",
        "-",
        "--range",
        "2-4",
    ]));
    assert_eq!(code, 0);
    assert_eq!(stdout, "345");
}

#[test]
fn a_failed_condition_exits_1_naming_the_condition() {
    let dir = tempfile::tempdir().unwrap();
    let url = store(&dir);
    let source = dir.path().join("in");
    std::fs::write(&source, "v1").unwrap();
    let put = |guard: &[&str]| {
        let mut args = vec![
            "object",
            "put",
            "--store",
            &url,
            "k",
            source.to_str().unwrap(),
            "--json",
        ];
        args.extend_from_slice(guard);
        outcome(&run(&args))
    };
    let (code, stdout, _) = put(&["--if-none-match"]);
    assert_eq!(code, 0);
    let first = json(&stdout)["etag"].as_str().unwrap().to_owned();
    let (code, _, stderr) = put(&["--if-none-match"]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("the --if-none-match condition failed"),
        "{stderr}"
    );
    let (code, stdout, _) = put(&["--if-match", &first]);
    assert_eq!(code, 0);
    assert_ne!(json(&stdout)["etag"], first.as_str());
    let (code, _, stderr) = put(&["--if-match", &first]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("the --if-match condition failed"),
        "{stderr}"
    );
}

#[test]
fn a_put_without_a_condition_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, stderr) = outcome(&run(&[
        "object",
        "put",
        "--store",
        &store(&dir),
        "k",
        "/dev/null",
    ]));
    assert_eq!(code, 2);
    assert!(stderr.contains("--if-none-match"), "{stderr}");
}

#[test]
fn bad_keys_and_store_urls_are_refused_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    for key in ["a/../b", "a//b", "/lead", "trail/"] {
        let (code, _, stderr) = outcome(&run(&[
            "object",
            "put",
            "--store",
            &store(&dir),
            key,
            "/dev/null",
            "--unconditional",
        ]));
        assert_eq!(code, 2, "{key}: {stderr}");
        assert!(stderr.contains("object key"), "{stderr}");
    }
    let (code, _, stderr) = outcome(&run(&["object", "ls", "--store", "file://relative"]));
    assert_eq!(code, 2);
    assert!(stderr.contains("absolute"), "{stderr}");
}

#[test]
fn versions_and_delete_markers_are_listed_and_a_version_stays_readable() {
    let dir = tempfile::tempdir().unwrap();
    let url = store(&dir);
    let source = dir.path().join("in");
    std::fs::write(&source, "one").unwrap();
    let (_, stdout, _) = outcome(&run(&[
        "object",
        "put",
        "--store",
        &url,
        "k",
        source.to_str().unwrap(),
        "--unconditional",
        "--json",
    ]));
    let first = json(&stdout)["version_id"].as_str().unwrap().to_owned();
    std::fs::write(&source, "two").unwrap();
    outcome(&run(&[
        "object",
        "put",
        "--store",
        &url,
        "k",
        source.to_str().unwrap(),
        "--unconditional",
    ]));
    let (code, _, _) = outcome(&run(&["object", "rm", "--store", &url, "k"]));
    assert_eq!(code, 0);
    let (code, _, stderr) = outcome(&run(&["object", "head", "--store", &url, "k"]));
    assert_eq!(code, 1);
    assert!(stderr.contains("not found"), "{stderr}");
    let (code, stdout, _) = outcome(&run(&["object", "versions", "--store", &url, "--json"]));
    assert_eq!(code, 0);
    let versions = json(&stdout);
    let markers: Vec<bool> = versions
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["is_delete_marker"].as_bool().unwrap())
        .collect();
    assert_eq!(markers, vec![true, false, false]);
    let (code, stdout, _) = outcome(&run(&[
        "object",
        "get",
        "--store",
        &url,
        "k",
        "-",
        "--version",
        &first,
    ]));
    assert_eq!(code, 0);
    assert_eq!(stdout, "one");
    let (code, stdout, _) = outcome(&run(&["object", "ls", "--store", &url, "--json"]));
    assert_eq!(code, 0);
    assert_eq!(json(&stdout), serde_json::json!([]));
}

#[test]
fn a_large_stdin_stream_is_composed_in_parts_and_reads_back_whole() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let url = store(&dir);
    let data: Vec<u8> = (0..(70u32 << 20))
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let mut child = crate::support::custodian()
        .args([
            "object",
            "put",
            "--store",
            &url,
            "big",
            "-",
            "--if-none-match",
            "--json",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&data).unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    let meta = json(&String::from_utf8_lossy(&output.stdout));
    assert_eq!(
        meta["crc64"],
        format!("{:016x}", custodian::checksum::crc64_nvme(&data))
    );
    let target = dir.path().join("big.out");
    let (code, _, stderr) = outcome(&run(&[
        "object",
        "get",
        "--store",
        &url,
        "big",
        target.to_str().unwrap(),
    ]));
    assert_eq!(code, 0, "{stderr}");
    assert!(std::fs::read(&target).unwrap() == data);
}

#[test]
fn a_store_named_in_the_configuration_file_is_used_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("custodian.toml");
    std::fs::write(
        &config,
        format!("[stores.main]\nurl = \"{}\"\n", store(&dir)),
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let source = dir.path().join("in.txt");
    std::fs::write(&source, "named").unwrap();
    let (code, _, stderr) = outcome(&run(&[
        "--config",
        config,
        "object",
        "put",
        "--store",
        "main",
        "a.txt",
        source.to_str().unwrap(),
        "--if-none-match",
    ]));
    assert_eq!(code, 0, "{stderr}");
    // The same bytes are in the store the name stands for.
    let (code, stdout, stderr) = outcome(&run(&[
        "object",
        "get",
        "--store",
        &store(&dir),
        "a.txt",
        "-",
    ]));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "named");

    let (code, _, stderr) = outcome(&run(&[
        "--config", config, "object", "ls", "--store", "other",
    ]));
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("no store named \"other\"") && stderr.contains("main"),
        "{stderr}"
    );
    let (code, _, stderr) = outcome(&run(&["object", "ls", "--store", "main"]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--config"), "{stderr}");
}
