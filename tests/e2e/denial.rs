//! Takedown denial end to end, with the real binary: through `custodian
//! serve` on the embedded default, through the offline commands on a data
//! directory, and across two hosts sharing etcd. A filing answers only
//! once its content answers 451 everywhere; once preserved, the serving
//! copies go (a chunk another file shares stays); a withdrawal restores
//! them and serves the files again, byte-identical.

use std::time::Duration;

use serde_json::{Value, json};

use crate::plugin_rollout::Cluster;
use crate::server::{Server, agent, answer, answer_bytes, bearer, json_body, wait_for};
use crate::support::{outcome, run};
use crate::takedown::{MINUTE, T0, noise, ok, status, tick};

/// 4 MiB: a file larger than this is chunked under a manifest.
const CHUNK: usize = 4 << 20;

/// GET `path` of `base`: the status and the raw body.
fn get(base: &str, path: &str) -> (u16, Vec<u8>) {
    answer_bytes(
        agent()
            .get(&format!("{base}{path}"))
            .header("authorization", &bearer())
            .call(),
    )
}

fn put(base: &str, path: &str, bytes: &[u8]) -> (u16, Value) {
    answer(
        agent()
            .put(&format!("{base}{path}"))
            .header("authorization", &bearer())
            .send(bytes),
    )
}

fn push(base: &str, repo: &str, path: &str, bytes: &[u8]) -> String {
    let (status, body) = put(base, &format!("/v1/repos/{repo}/files/{path}"), bytes);
    assert_eq!(status, 200, "{body}");
    body["id"].as_str().unwrap().to_owned()
}

fn file(base: &str, repo: &str, objects: &[&str]) -> Value {
    let (status, body) = answer(
        agent()
            .post(&format!("{base}/v1/takedowns"))
            .header("authorization", &bearer())
            .send(&json_body(json!({"repository": repo, "objects": objects}))[..]),
    );
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["denial_settled"], true, "{body}");
    body
}

fn status_of(base: &str, id: &str) -> Value {
    let (code, body) = get(base, &format!("/v1/takedowns/{id}"));
    assert_eq!(code, 200);
    serde_json::from_slice(&body).unwrap()
}

fn withdraw(base: &str, id: &str) -> (u16, Value) {
    answer(
        agent()
            .delete(&format!("{base}/v1/takedowns/{id}"))
            .header("authorization", &bearer())
            .call(),
    )
}

/// Asserts GET `path` is 451 `taken_down` naming `request`.
fn assert_withheld(base: &str, path: &str, request: &str) {
    let (status, body) = get(base, path);
    let text = String::from_utf8_lossy(&body);
    assert_eq!(status, 451, "{path}: {text}");
    let error: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(error["error"]["code"], "taken_down", "{path}: {text}");
    assert_eq!(error["error"]["request"], request, "{path}: {text}");
}

fn hex_id(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

#[test]
fn through_the_server_a_takedown_answers_451_on_every_path_at_once_and_a_withdrawal_restores_it() {
    let server = Server::start("");
    let base = server.base.as_str();
    let (shared, own, other) = (noise(CHUNK, 1), noise(CHUNK / 2, 2), noise(1000, 3));
    let taken = [shared.clone(), own.clone()].concat();
    let kept = [shared.clone(), other].concat();
    let manifest = push(base, "alpha/one", "docs/taken.bin", &taken);
    push(base, "beta/two", "copy.bin", &taken);
    push(base, "gamma/keep", "kept.bin", &kept);

    let filed = file(base, "alpha/one", &[&manifest]);
    let request = filed["id"].as_str().unwrap();
    // No tick, no wait: the filing's answer means every path is denied.
    for path in [
        "/v1/repos/alpha/one/files/docs/taken.bin".to_owned(),
        "/v1/repos/beta/two/files/copy.bin".to_owned(),
        format!("/v1/stores/serving/objects/content/{manifest}"),
        format!("/v1/stores/serving/objects/content/{}", hex_id(&shared)),
        format!("/v1/stores/serving/objects/content/{}", hex_id(&own)),
    ] {
        assert_withheld(base, &path, request);
    }
    for repo in ["alpha/one", "beta/two"] {
        let (status, body) = get(base, &format!("/v1/repos/{repo}/files"));
        assert_eq!(status, 200);
        let listed: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            listed["entries"][0]["taken_down"]["request"], request,
            "{repo}: {listed}"
        );
    }
    let (status, body) = put(base, "/v1/repos/delta/again/files/x.bin", &taken);
    assert_eq!(status, 451, "the re-push: {body}");
    assert_eq!(body["error"]["request"], request);
    let (status, body) = get(base, "/v1/repos/gamma/keep/files/kept.bin");
    assert_eq!(status, 200, "the file sharing a chunk keeps serving");
    assert!(body == kept, "byte-identical");

    // Once preserved and verified, the serving copies go: every version
    // of the manifest and of the chunk only the taken-down file holds;
    // the chunk the kept file shares stays.
    wait_for(
        "the serving copies' removal",
        Duration::from_secs(180),
        || status_of(base, request)["denial"]["removed"] == 2,
    );
    let status = status_of(base, request);
    assert_eq!(status["verification"], "verified", "{status}");
    for (object, present) in [
        (manifest.clone(), false),
        (hex_id(&own), false),
        (hex_id(&shared), true),
    ] {
        let (code, body) = get(
            base,
            &format!("/v1/stores/serving/versions?prefix=content/{object}"),
        );
        assert_eq!(code, 200);
        let listed: Value = serde_json::from_slice(&body).unwrap();
        let versions = listed["versions"].as_array().unwrap().len();
        assert_eq!(versions > 0, present, "{object}: {listed}");
    }
    let (status, body) = get(base, "/v1/repos/gamma/keep/files/kept.bin");
    assert_eq!(status, 200, "the kept file still reads after the removal");
    assert!(body == kept, "byte-identical");

    let (status, body) = withdraw(base, request);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["denial"]["denied"], 0, "{body}");
    assert_eq!(body["denial"]["restored"], 2, "{body}");
    for path in [
        "/v1/repos/alpha/one/files/docs/taken.bin",
        "/v1/repos/beta/two/files/copy.bin",
    ] {
        let (status, body) = get(base, path);
        assert_eq!(status, 200, "{path}");
        assert!(body == taken, "{path}: byte-identical after the withdrawal");
    }
    let (status, body) = withdraw(base, request);
    assert_eq!(status, 409, "a second withdrawal: {body}");
}

fn path(p: &std::path::Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn offline_the_commands_refuse_taken_down_content_with_exit_4_until_withdrawn() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let data = path(&data_dir);
    let source = dir.path().join("report.bin");
    let bytes = noise(10_000, 7);
    std::fs::write(&source, &bytes).unwrap();
    for repo in ["alpha/one", "beta/two"] {
        ok(&["repo", "push", repo, path(&source), "--data", data]);
    }
    let object = hex_id(&bytes);
    let out = dir.path().join("out.bin");
    // `repo get` of beta/two's copy into `out`: exit status and stderr.
    let read_back = || {
        let (code, _, stderr) = outcome(&run(&[
            "repo",
            "get",
            "beta/two",
            "report.bin",
            "-o",
            path(&out),
            "--data",
            data,
        ]));
        (code, stderr)
    };

    let t0 = T0.to_string();
    let filed = ok(&[
        "takedown",
        "create",
        "alpha/one",
        "--object",
        &object,
        "--data",
        data,
        "--json",
        "--now",
        &t0,
    ]);
    let filed: Value = serde_json::from_str(filed.trim()).unwrap();
    assert_eq!(filed["denial_settled"], true);
    let request = filed["id"].as_str().unwrap().to_owned();

    let (code, stderr) = read_back();
    assert_eq!(code, 4, "{stderr}");
    assert!(stderr.contains(&request), "{stderr}");
    assert!(!out.exists(), "nothing is written");
    let again = outcome(&run(&[
        "repo",
        "push",
        "gamma/three",
        path(&source),
        "--data",
        data,
    ]));
    assert_eq!(again.0, 4, "{}", again.2);
    assert!(again.2.contains(&request), "{}", again.2);
    let listed = ok(&["repo", "ls", "alpha/one", "--json", "--data", data]);
    let line: Value = serde_json::from_str(listed.trim()).unwrap();
    assert_eq!(line["taken_down"]["request"], request.as_str());
    let plain = ok(&["repo", "ls", "beta/two", "--data", data]);
    assert!(
        plain.contains(&format!("[taken down by {request}]")),
        "{plain}"
    );
    let filed_status = status(data, &request);
    assert_eq!(filed_status["denial"]["denied"], 1, "{filed_status}");
    assert_eq!(filed_status["denial"]["settled"], true, "{filed_status}");

    // The steps preserve it, then remove its serving copy; still 451.
    tick(data, T0, T0 + 10 * MINUTE);
    let preserved = status(data, &request);
    assert_eq!(preserved["verification"], "verified", "{preserved}");
    assert_eq!(preserved["denial"]["removed"], 1, "{preserved}");
    let serving = crate::takedown::store(&data_dir, "serving");
    assert!(
        crate::takedown::versions(serving.as_ref(), &format!("content/{object}")).is_empty(),
        "every version of the serving copy is gone"
    );
    drop(serving);
    assert_eq!(read_back().0, 4);

    let later = (T0 + 10 * MINUTE).to_string();
    ok(&[
        "takedown", "withdraw", &request, "--data", data, "--now", &later,
    ]);
    let withdrawn = status(data, &request);
    assert_eq!(withdrawn["denial"]["restored"], 1, "{withdrawn}");
    let (code, stderr) = read_back();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(std::fs::read(&out).unwrap(), bytes);
    let twice = outcome(&run(&["takedown", "withdraw", &request, "--data", data]));
    assert_eq!(twice.0, 1, "a second withdrawal fails: {}", twice.2);
}

#[test]
fn filed_on_one_host_a_takedown_is_451_on_another_sharing_etcd_at_its_next_read() {
    // A day's retention: nothing is purged while the test runs.
    let Some(cluster) = Cluster::start(24 * 3_600_000) else {
        return;
    };
    let (a, b) = (cluster.host("a"), cluster.host("b"));
    let bytes = noise(50_000, 9);
    let object = push(&a.base, "alpha/one", "f.bin", &bytes);
    let (status, _) = get(&b.base, "/v1/repos/alpha/one/files/f.bin");
    assert_eq!(status, 200, "served by the other host before the takedown");

    let filed = file(&a.base, "alpha/one", &[&object]);
    let request = filed["id"].as_str().unwrap();
    // Every read checks the denial row with a linearizable KV read: the
    // first read on the other host after the filing answered is refused.
    assert_withheld(&b.base, "/v1/repos/alpha/one/files/f.bin", request);
    assert_withheld(
        &b.base,
        &format!("/v1/stores/serving/objects/content/{object}"),
        request,
    );

    let (status, body) = withdraw(&b.base, request);
    assert_eq!(status, 200, "withdrawn through the other host: {body}");
    let (status, body) = get(&a.base, "/v1/repos/alpha/one/files/f.bin");
    assert_eq!(status, 200);
    assert!(body == bytes, "byte-identical");
}
