//! DVC 3 directory outputs and git history against the S3 endpoint: a
//! project with a nested directory and a single file pushes two commits
//! to a `version_aware` remote (and its first to a content-addressed
//! one); Custodian verifies and fetches each revision's pins read from
//! git, `dvc checkout` restores the old revision from what Custodian
//! fetched, an interrupted fetch installs nothing, `purge list
//! --all-revisions` names every pinned version, and a purge whose
//! registry maps a version whose archived copy was deleted out of band is
//! refused with nothing deleted.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::s3::{boto3, clients, serve_with_key};
use crate::s3_dvc::{dvc, in_project, ok, start_project};
use crate::support::custodian;

/// Bytes of `len` derived from `seed`, unlike any other seed's.
fn bytes(seed: u32, len: usize) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_add(seed).wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

/// `custodian ARGS` in the project with the S3 key; its output.
fn custodian_in(dir: &Path, key: (&str, &str), args: &[&str]) -> std::process::Output {
    custodian()
        .current_dir(dir)
        .args(args)
        .env("AWS_ACCESS_KEY_ID", key.0)
        .env("AWS_SECRET_ACCESS_KEY", key.1)
        .env("AWS_REGION", "us-east-1")
        .env_remove("AWS_CA_BUNDLE")
        .output()
        .unwrap()
}

/// Its stdout as JSON, with stderr on failure to parse.
fn json_of(output: &std::process::Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// The files installed in a DVC cache directory (scratch excluded).
fn installed(cache: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(cache) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.len() == 2 && entry.path().is_dir() {
            for file in std::fs::read_dir(entry.path()).unwrap().flatten() {
                found.push(file.path());
            }
        }
    }
    found
}

fn scratch_dirs(cache: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(cache)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with(".custodian-fetch-")
                })
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{name} {pid}");
}

#[test]
fn dvc_directory_outputs_are_verified_fetched_and_purged_from_git_history_through_the_s3_endpoint()
{
    let Some(dvc) = dvc() else { return };
    let Some(clients) = clients() else { return };
    let (server, access, secret) = serve_with_key("", &["writer:store/serving"]);
    let endpoint = server.s3.clone().unwrap();
    let key = (access.as_str(), secret.as_str());
    let project = tempfile::tempdir().unwrap();
    let dir = project.path();
    let git = |args: &[&str]| ok(in_project(Path::new("git"), dir, key).args(args));
    let dvc_run = |args: &[&str]| ok(in_project(&dvc, dir, key).args(args));
    start_project(&dvc, dir, key, &endpoint);
    dvc_run(&["remote", "add", "cas", "s3://serving/casstore"]);
    dvc_run(&["remote", "modify", "cas", "endpointurl", &endpoint]);

    // Revision one: a directory with nested files (one of them larger
    // than a single read, so it is fetched in ranges) and a single file.
    std::fs::create_dir_all(dir.join("data/sub/deep")).unwrap();
    let one = [
        ("data/a.txt", b"alpha one\n".to_vec()),
        ("data/sub/b.txt", b"beta\n".to_vec()),
        ("data/sub/deep/c.bin", bytes(1, 20 << 20)),
        ("model.bin", bytes(2, 1 << 20)),
    ];
    for (path, content) in &one {
        std::fs::write(dir.join(path), content).unwrap();
    }
    dvc_run(&["add", "-q", "data", "model.bin"]);
    dvc_run(&["push", "-q", "-r", "cas"]);
    let cas_pointer = std::fs::read_to_string(dir.join("data.dvc")).unwrap();
    dvc_run(&["push", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-qm", "one"]);
    let pointer = std::fs::read_to_string(dir.join("data.dvc")).unwrap();
    assert!(pointer.contains("files:"), "{pointer}");

    // Revision two changes two files of the directory.
    std::fs::write(dir.join("data/a.txt"), b"alpha two\n").unwrap();
    std::fs::write(dir.join("data/sub/deep/c.bin"), bytes(3, 20 << 20)).unwrap();
    dvc_run(&["add", "-q", "data"]);
    dvc_run(&["push", "-q"]);
    git(&["commit", "-qam", "two"]);

    let store = ["--store", "s3://serving/dvcstore", "--endpoint", &endpoint];
    let run = |args: &[&str]| custodian_in(dir, key, args);

    // Each revision's pins, read from git, verify: 3 files and the model.
    for revision in ["HEAD~1", "HEAD"] {
        let mut args = vec!["versions", "verify", "--json", "--revision", revision];
        args.extend(store);
        let output = run(&args);
        let report = json_of(&output);
        assert!(output.status.success(), "{revision}: {report}");
        let checked: Vec<&str> = report["checked"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["pin"].as_str().unwrap())
            .collect();
        assert_eq!(checked.len(), 4, "{report}");
        assert!(
            checked
                .iter()
                .any(|p| p.starts_with("data/sub/deep/c.bin@"))
        );
    }

    // The content-addressed remote: the `.dir` is read and its files
    // verified at their cache-layout keys.
    let cas = tempfile::tempdir().unwrap();
    std::fs::write(cas.path().join("data.dvc"), &cas_pointer).unwrap();
    let cas_pins = cas.path().join("data.dvc");
    let output = run(&[
        "versions",
        "verify",
        "--json",
        "--store",
        "s3://serving/casstore",
        "--endpoint",
        &endpoint,
        "--pins",
        cas_pins.to_str().unwrap(),
    ]);
    let report = json_of(&output);
    assert!(output.status.success(), "{report}");
    assert_eq!(report["checked"].as_array().unwrap().len(), 3, "{report}");
    assert!(
        report["checked"][0]["pin"]
            .as_str()
            .unwrap()
            .starts_with("files/md5/"),
        "{report}"
    );

    // ... and fetched: the files by digest, the `.dir` beside them.
    let cas_cache = dir.join("cas-cache");
    let output = run(&[
        "versions",
        "fetch",
        "--json",
        "--store",
        "s3://serving/casstore",
        "--endpoint",
        &endpoint,
        "--pins",
        cas_pins.to_str().unwrap(),
        "--cache",
        cas_cache.to_str().unwrap(),
    ]);
    let report = json_of(&output);
    assert!(output.status.success(), "{report}");
    assert_eq!(
        (report["downloaded"].as_u64(), report["listings"].as_u64()),
        (Some(3), Some(1)),
        "{report}"
    );
    let cas_files = installed(&cas_cache);
    assert_eq!(cas_files.len(), 4, "{cas_files:?}");
    assert!(
        cas_files
            .iter()
            .any(|p| p.extension().is_some_and(|e| e == "dir"))
    );

    // An interrupted fetch installs nothing: the store is frozen mid-
    // download, the fetch killed, and the cache holds no file of it.
    let frozen_cache = dir.join("frozen-cache");
    let mut fetch = custodian();
    fetch
        .current_dir(dir)
        .args(["versions", "fetch", "--json", "--revision", "HEAD"])
        .args(store)
        .arg("--cache")
        .arg(&frozen_cache)
        .env("AWS_ACCESS_KEY_ID", &access)
        .env("AWS_SECRET_ACCESS_KEY", &secret)
        .env("AWS_REGION", "us-east-1")
        .env_remove("AWS_CA_BUNDLE")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = fetch.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let downloading = loop {
        let busy = scratch_dirs(&frozen_cache).into_iter().any(|scratch| {
            std::fs::read_dir(scratch)
                .map(|e| e.flatten().any(|f| f.file_name() != ".lock"))
                .unwrap_or(false)
        });
        if busy {
            break true;
        }
        if child.try_wait().unwrap().is_some() || Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    signal(server.pid(), "STOP");
    let finished = child.try_wait().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    signal(server.pid(), "CONT");
    assert!(
        downloading && finished.is_none(),
        "the fetch was not caught mid-download (finished: {finished:?})"
    );
    assert_eq!(installed(&frozen_cache), Vec::<PathBuf>::new());
    assert_eq!(scratch_dirs(&frozen_cache).len(), 1, "its scratch is left");
    // The next fetch removes the dead one's scratch and installs it all.
    let mut args = vec!["versions", "fetch", "--json", "--revision", "HEAD"];
    args.extend(store);
    args.extend(["--cache", frozen_cache.to_str().unwrap()]);
    let output = run(&args);
    let report = json_of(&output);
    assert!(output.status.success(), "{report}");
    assert_eq!(report["installed"], true, "{report}");
    assert!(scratch_dirs(&frozen_cache).is_empty());
    assert_eq!(installed(&frozen_cache).len(), 5, "4 files and a listing");

    // Custodian fetches revision one into DVC's own cache, and DVC checks
    // that revision out from it without asking the remote.
    std::fs::remove_dir_all(dir.join(".dvc/cache")).unwrap();
    let cache = dir.join(".dvc/cache/files/md5");
    let mut args = vec!["versions", "fetch", "--json", "--revision", "HEAD~1"];
    args.extend(store);
    args.extend(["--cache", cache.to_str().unwrap()]);
    let output = run(&args);
    let report = json_of(&output);
    assert!(output.status.success(), "{report}");
    assert_eq!(report["listings"], 1, "{report}");
    let listing = installed(&cache)
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "dir"))
        .expect("the directory's listing is beside its files");
    let listed: Value = serde_json::from_slice(&std::fs::read(&listing).unwrap()).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 3, "{listed}");
    git(&["checkout", "-q", "HEAD~1"]);
    std::fs::remove_dir_all(dir.join("data")).unwrap();
    std::fs::remove_file(dir.join("model.bin")).unwrap();
    dvc_run(&["checkout", "-q"]);
    for (path, content) in &one {
        assert!(std::fs::read(dir.join(path)).unwrap() == *content, "{path}");
    }
    git(&["checkout", "-q", "-"]);

    // Every version any revision pinned is a history candidate, naming
    // the newest commit that pinned it.
    let output = run(&["purge", "list", "--all-revisions", "--json"]);
    let candidates = json_of(&output);
    assert!(output.status.success(), "{candidates}");
    let candidates = candidates.as_array().unwrap().clone();
    let objects: Vec<&str> = candidates
        .iter()
        .map(|c| c["object"].as_str().unwrap())
        .collect();
    // Four keys, two of them at two versions.
    assert_eq!(candidates.len(), 6, "{objects:?}");
    for key in ["data/a.txt", "data/sub/deep/c.bin"] {
        assert_eq!(objects.iter().filter(|o| **o == key).count(), 2, "{key}");
    }
    let first = git(&["rev-parse", "HEAD~1"]);
    let first = String::from_utf8_lossy(&first.stdout).trim().to_owned();
    let a_one = candidates
        .iter()
        .find(|c| c["object"] == "data/a.txt" && c["revision"] == json!(first))
        .expect("data/a.txt's first version names the first commit");

    // An archive task copied data/a.txt's first version and published a
    // registry; then the copy is deleted out of band. A purge relying on
    // that registry is refused, naming the row, and deletes nothing.
    let script = format!(
        r#"
version = {version:?}
copy = s3.copy_object(Bucket="serving", Key="dvcstore/archive/data/a.txt",
    CopySource={{"Bucket": "serving", "Key": "dvcstore/data/a.txt", "VersionId": version}})
head = s3.head_object(Bucket="serving", Key="dvcstore/data/a.txt", VersionId=version)
registry = {{"schema_version": 1, "status": "copied", "source": "data",
    "destination": "archive/data", "versions": [{{
    "source_object": "data/a.txt", "source_version_id": version,
    "source_etag": head["ETag"], "destination_object": "archive/data/a.txt",
    "destination_version_id": copy["VersionId"],
    "destination_etag": copy["CopyObjectResult"]["ETag"],
    "size": head["ContentLength"], "delete_marker": False}}]}}
published = s3.put_object(Bucket="serving", Key="dvcstore/data/.custodian-archive.json",
    Body=json.dumps(registry).encode())
s3.delete_object(Bucket="serving", Key="dvcstore/archive/data/a.txt", VersionId=copy["VersionId"])
out["proof"] = {{"receipt": registry, "coordination": {{
    "registry_version_id": published["VersionId"], "registry_etag": published["ETag"]}}}}
"#,
        version = a_one["version_id"].as_str().unwrap()
    );
    let made = boto3(&clients, &endpoint, &access, &secret, &script);
    let plan = json!({"candidates": candidates, "coordination": [made["proof"]]});
    let plan_path = dir.join("plan.json");
    std::fs::write(&plan_path, plan.to_string()).unwrap();
    let listing_script = r#"
pages = s3.get_paginator("list_object_versions").paginate(Bucket="serving", Prefix="dvcstore/")
out["versions"] = sorted(v["Key"] + "@" + v["VersionId"] for p in pages for v in p.get("Versions", []))
"#;
    let before = boto3(&clients, &endpoint, &access, &secret, listing_script);
    let mut args = vec![
        "purge",
        "delete",
        "--json",
        "--plan",
        plan_path.to_str().unwrap(),
    ];
    args.extend(store);
    args.extend(["--retention-ms", "1", "--now", "99999999999999"]);
    let output = run(&args);
    let report = json_of(&output);
    assert_eq!(output.status.code(), Some(1), "{report}");
    assert_eq!(report["kind"], "history", "{report}");
    assert_eq!(report["mode"], "permanent-version-deletion", "{report}");
    assert_eq!(report["remote"], "s3://serving/dvcstore", "{report}");
    let error = report["error"].as_str().unwrap();
    assert!(error.contains("data/a.txt@"), "{error}");
    assert!(error.contains("does not exist"), "{error}");
    assert_eq!(report["deleted"], json!([]), "{report}");
    let after = boto3(&clients, &endpoint, &access, &secret, listing_script);
    assert_eq!(before, after, "nothing was deleted");

    // With the copy made again and the registry re-published, the same
    // history check passes over the wire and the first version goes;
    // the second, which the registry does not map, stays.
    let script = format!(
        r#"
version = {version:?}
copy = s3.copy_object(Bucket="serving", Key="dvcstore/archive/data/a.txt",
    CopySource={{"Bucket": "serving", "Key": "dvcstore/data/a.txt", "VersionId": version}})
registry = json.loads({registry:?})
registry["versions"][0]["destination_version_id"] = copy["VersionId"]
registry["versions"][0]["destination_etag"] = copy["CopyObjectResult"]["ETag"]
published = s3.put_object(Bucket="serving", Key="dvcstore/data/.custodian-archive.json",
    Body=json.dumps(registry).encode())
out["proof"] = {{"receipt": registry, "coordination": {{
    "registry_version_id": published["VersionId"], "registry_etag": published["ETag"]}}}}
"#,
        version = a_one["version_id"].as_str().unwrap(),
        registry = made["proof"]["receipt"].to_string()
    );
    let made = boto3(&clients, &endpoint, &access, &secret, &script);
    let plan = json!({"candidates": [a_one], "coordination": [made["proof"]]});
    std::fs::write(&plan_path, plan.to_string()).unwrap();
    let output = run(&args);
    let report = json_of(&output);
    assert!(output.status.success(), "{report}");
    assert_eq!(
        report["deleted"][0]["deleted_version_ids"],
        json!([a_one["version_id"]]),
        "{report}"
    );
    assert_eq!(
        report["retained_unmapped"][0]["object"], "data/a.txt",
        "{report}"
    );
    let after = boto3(&clients, &endpoint, &access, &secret, listing_script);
    let gone = format!(
        "dvcstore/data/a.txt@{}",
        a_one["version_id"].as_str().unwrap()
    );
    let left: Vec<&str> = after["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(!left.contains(&gone.as_str()), "{left:?}");
    assert!(
        left.iter()
            .any(|v| v.starts_with("dvcstore/archive/data/a.txt@"))
    );
}

#[test]
fn bad_revisions_and_missing_manifests_are_usage_errors_naming_the_problem() {
    let project = tempfile::tempdir().unwrap();
    let dir = project.path();
    let git = |args: &[&str]| {
        ok(Command::new("git")
            .current_dir(dir)
            .args(args)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com"))
    };
    git(&["init", "-q"]);
    std::fs::write(
        dir.join("a.dvc"),
        "outs:\n- md5: 900150983cd24fb0d6963f7d28e17f72\n  hash: md5\n  path: a\n  cloud:\n    r:\n      version_id: v1\n",
    )
    .unwrap();
    git(&["add", "-A"]);
    git(&["commit", "-qm", "one"]);
    let run = |args: &[&str]| {
        let output = custodian().current_dir(dir).args(args).output().unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (code, stdout, _) = run(&["purge", "list", "--revision", "HEAD"]);
    assert_eq!(code, Some(0));
    assert!(stdout.contains(":a.dvc a@v1"), "{stdout}");
    let cases: [(&[&str], &str); 5] = [
        (
            &["purge", "list", "--revision", "no-such"],
            "is not a commit",
        ),
        (
            &["purge", "list", "--revision=--output=/tmp/x"],
            "is not a commit",
        ),
        (&["purge", "list"], "give --pins"),
        (
            &[
                "purge",
                "list",
                "--revision",
                "HEAD",
                "--pins",
                "absent.dvc",
            ],
            "every pointer file",
        ),
        (
            &["purge", "list", "--revision", "HEAD", "--all-revisions"],
            "cannot be used with",
        ),
    ];
    for (args, want) in cases {
        let (code, _, stderr) = run(args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }
    let outside = tempfile::tempdir().unwrap();
    let output = custodian()
        .current_dir(outside.path())
        .args(["purge", "list", "--all-revisions"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("git"));
}
