//! DVC 3 against the S3 endpoint: a project pushes two revisions of its
//! outputs to a `version_aware` remote on `custodian serve`, pulls them
//! back, and Custodian verifies and fetches the versions DVC pinned. DVC
//! comes from the venv `.ci/run` makes (`CUSTODIAN_DVC` names its `dvc`,
//! pinned whole in `.ci/dvc-requirements.txt`); under `CI=true` a missing
//! DVC fails the test, elsewhere it says so and passes.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::s3::serve_with_key;
use crate::support::custodian;

/// The `dvc` executable, or `None` (after saying why) when this is not CI
/// and it is missing.
pub fn dvc() -> Option<PathBuf> {
    let found = std::env::var_os("CUSTODIAN_DVC")
        .map(PathBuf::from)
        .filter(|dvc| {
            Command::new(dvc)
                .arg("version")
                .env("DVC_NO_ANALYTICS", "1")
                .output()
                .is_ok_and(|o| o.status.success())
        });
    if found.is_some() {
        return found;
    }
    let how = "point CUSTODIAN_DVC at the dvc of a venv with \
               `pip install --no-deps -r .ci/dvc-requirements.txt` (.ci/run makes one)";
    if std::env::var("CI").is_ok_and(|ci| ci == "true") {
        panic!("DVC is missing: {how}");
    }
    eprintln!("notice: skipping the DVC test: DVC is missing; {how}");
    None
}

/// A command in the project `dir` with the S3 key in the standard AWS
/// variables, as a DVC user (or Custodian's S3 backend) reads them.
pub fn in_project(program: &Path, dir: &Path, (access, secret): (&str, &str)) -> Command {
    let mut command = Command::new(program);
    command
        .current_dir(dir)
        .env("AWS_ACCESS_KEY_ID", access)
        .env("AWS_SECRET_ACCESS_KEY", secret)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_DEFAULT_REGION", "us-east-1")
        // The machine's CA bundle is for HTTPS elsewhere; the endpoint
        // is plain HTTP.
        .env_remove("AWS_CA_BUNDLE")
        .env("DVC_NO_ANALYTICS", "1")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com");
    command
}

/// Runs `command`, which must succeed; its output.
pub fn ok(command: &mut Command) -> Output {
    let output = command.output().expect("the command runs");
    assert!(
        output.status.success(),
        "{command:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Makes `dir` a git repository and a DVC project whose default remote
/// `cust` is version-aware at `s3://serving/dvcstore` on `endpoint`.
pub fn start_project(dvc: &Path, dir: &Path, key: (&str, &str), endpoint: &str) {
    let run = |program: &Path, args: &[&str]| ok(in_project(program, dir, key).args(args));
    run(Path::new("git"), &["init", "-q"]);
    run(dvc, &["init", "-q"]);
    run(
        dvc,
        &["remote", "add", "-d", "cust", "s3://serving/dvcstore"],
    );
    run(dvc, &["remote", "modify", "cust", "endpointurl", endpoint]);
    run(dvc, &["remote", "modify", "cust", "version_aware", "true"]);
}

#[test]
fn dvc_pushes_and_pulls_two_revisions_through_the_s3_endpoint_and_custodian_verifies_and_fetches_its_pins()
 {
    let Some(dvc) = dvc() else { return };
    let (server, access, secret) = serve_with_key("", &["writer:store/serving"]);
    let endpoint = server.s3.clone().unwrap();
    let key = (access.as_str(), secret.as_str());
    let project = tempfile::tempdir().unwrap();
    let dir = project.path();
    let git = |args: &[&str]| ok(in_project(Path::new("git"), dir, key).args(args));
    let dvc_run = |args: &[&str]| ok(in_project(&dvc, dir, key).args(args));
    start_project(&dvc, dir, key, &endpoint);

    // Revision one: two single-file outputs.
    let model_v1: Vec<u8> = (0..(3u32 << 20))
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
        .collect();
    std::fs::write(dir.join("model.bin"), &model_v1).unwrap();
    std::fs::write(dir.join("params.txt"), b"lr = 0.1\n").unwrap();
    dvc_run(&["add", "-q", "model.bin", "params.txt"]);
    dvc_run(&["push", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-qm", "one"]);
    let pins_v1 = tempfile::tempdir().unwrap();
    for file in ["model.bin.dvc", "params.txt.dvc"] {
        std::fs::copy(dir.join(file), pins_v1.path().join(file)).unwrap();
    }

    // Revision two changes the model.
    let model_v2: Vec<u8> = model_v1.iter().map(|b| b ^ 0x5a).collect();
    std::fs::write(dir.join("model.bin"), &model_v2).unwrap();
    dvc_run(&["add", "-q", "model.bin"]);
    dvc_run(&["push", "-q"]);
    git(&["commit", "-qam", "two"]);

    // DVC pinned what the endpoint told it: each ETag is the file's MD5.
    let pointer = std::fs::read_to_string(dir.join("model.bin.dvc")).unwrap();
    let md5 = pointer
        .lines()
        .find_map(|l| l.trim().strip_prefix("- md5: "))
        .unwrap()
        .to_owned();
    assert!(pointer.contains(&format!("etag: {md5}")), "{pointer}");

    // Custodian verifies both revisions' pins through the endpoint, as
    // the S3 backend sees it, and directly on the embedded store.
    let store = ["--store", "s3://serving/dvcstore", "--endpoint", &endpoint];
    let verify = |pins: &Path, store: &[&str], root: &Path| {
        let mut command = custodian();
        command
            .current_dir(dir)
            .args(["versions", "verify", "--json"])
            .args(store)
            .arg("--root")
            .arg(root)
            .arg("--pins")
            .arg(pins.join("model.bin.dvc"))
            .arg(pins.join("params.txt.dvc"))
            .env("AWS_ACCESS_KEY_ID", &access)
            .env("AWS_SECRET_ACCESS_KEY", &secret)
            .env("AWS_REGION", "us-east-1")
            .env_remove("AWS_CA_BUNDLE");
        command.output().unwrap()
    };
    for pins in [dir, pins_v1.path()] {
        let output = verify(pins, &store, pins);
        let report: serde_json::Value = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stderr)));
        assert!(output.status.success(), "{report}");
        assert_eq!(report["checked"].as_array().unwrap().len(), 2, "{report}");
    }
    // Offline, on the embedded store (whose etags are generations, not
    // MD5s): the pin's etag names the MD5 it recorded.
    let offline = tempfile::tempdir().unwrap();
    std::fs::create_dir(offline.path().join("dvcstore")).unwrap();
    for file in ["model.bin.dvc", "params.txt.dvc"] {
        std::fs::copy(dir.join(file), offline.path().join("dvcstore").join(file)).unwrap();
    }
    let fs_store = format!("file://{}", server.data.join("serving").display());
    let output = verify(
        &offline.path().join("dvcstore"),
        &["--store", &fs_store],
        offline.path(),
    );
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    // A pin whose etag is not the version's fails, naming it.
    let tampered = pointer.replace(
        &format!("etag: {md5}"),
        "etag: 00000000000000000000000000000000",
    );
    let bad = tempfile::tempdir().unwrap();
    std::fs::write(bad.path().join("model.bin.dvc"), tampered).unwrap();
    std::fs::copy(
        dir.join("params.txt.dvc"),
        bad.path().join("params.txt.dvc"),
    )
    .unwrap();
    let output = verify(bad.path(), &store, bad.path());
    assert_eq!(output.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("etag"),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );

    // DVC pulls the current revision into an empty cache.
    std::fs::remove_dir_all(dir.join(".dvc/cache")).unwrap();
    std::fs::remove_file(dir.join("model.bin")).unwrap();
    dvc_run(&["pull", "-q"]);
    assert_eq!(std::fs::read(dir.join("model.bin")).unwrap(), model_v2);

    // Custodian fetches revision one's pins into DVC's cache, and DVC
    // checks that revision out from it without asking the remote.
    let cache = dir.join(".dvc/cache/files/md5");
    ok(custodian()
        .current_dir(dir)
        .args(["versions", "fetch"])
        .args(store)
        .arg("--root")
        .arg(pins_v1.path())
        .arg("--cache")
        .arg(&cache)
        .arg("--pins")
        .arg(pins_v1.path().join("model.bin.dvc"))
        .arg(pins_v1.path().join("params.txt.dvc"))
        .env("AWS_ACCESS_KEY_ID", &access)
        .env("AWS_SECRET_ACCESS_KEY", &secret)
        .env("AWS_REGION", "us-east-1")
        .env_remove("AWS_CA_BUNDLE"));
    git(&["checkout", "-q", "HEAD~1"]);
    dvc_run(&["checkout", "-q"]);
    assert_eq!(std::fs::read(dir.join("model.bin")).unwrap(), model_v1);
    assert_eq!(
        std::fs::read(dir.join("params.txt")).unwrap(),
        b"lr = 0.1\n"
    );
}
