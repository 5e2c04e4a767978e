//! `custodian serve` end to end: the real binary on a free port, real
//! plugins, HTTP load while a plugin is hot-swapped.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::server::{
    Server, TOKEN, agent, answer, bearer, json_body, schedule_takedown_timer, wait_for,
};
use crate::support::{Rng, custodian, future_contract, outcome, run, stepper, trapper};

/// The bundled takedown plugin with a custom section appended: another
/// build of the same policy, with its own content hash (one per `build`
/// name).
pub fn rebuilt_takedown(dir: &Path, build: &str) -> PathBuf {
    let mut bytes = std::fs::read(
        custodian::bundled::path(custodian::runtime::World::Takedown).expect("bundled"),
    )
    .unwrap();
    let name = b"custodian-e2e-build";
    let payload = build.as_bytes();
    let mut content = vec![name.len() as u8];
    content.extend_from_slice(name);
    content.extend_from_slice(payload);
    // Section id 0 (custom), then the size as one LEB128 byte.
    assert!(content.len() < 128);
    bytes.push(0);
    bytes.push(content.len() as u8);
    bytes.extend_from_slice(&content);
    let path = dir.join(format!("takedown-{build}.wasm"));
    std::fs::write(&path, bytes).unwrap();
    path
}

/// `GET /v1/plugins` of `server`.
pub fn plugins(server: &Server) -> Value {
    let (status, body) = answer(
        agent()
            .get(&server.url("/v1/plugins"))
            .header("authorization", &bearer())
            .call(),
    );
    assert_eq!(status, 200, "GET /v1/plugins: {body}");
    body
}

/// `field` of `world`'s plugin in `GET /v1/plugins` of `server`.
pub fn plugin_field(server: &Server, world: &str, field: &str) -> Value {
    plugins(server)["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["world"] == world)
        .unwrap()[field]
        .clone()
}

pub fn plugin_hash(server: &Server, world: &str) -> String {
    plugin_field(server, world, "hash")
        .as_str()
        .unwrap()
        .to_owned()
}

/// The content hash a plugin file is known by.
pub fn plugin_hash_of(path: &Path) -> String {
    blake3::hash(&std::fs::read(path).unwrap())
        .to_hex()
        .to_string()
}

pub fn metric(server: &Server, series: &str) -> u64 {
    let (status, body) = answer(agent().get(&server.url("/metrics")).call());
    assert_eq!(status, 200);
    let text = body.as_str().unwrap().to_owned();
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0)
}

/// Pushes `bytes` as `path` of `repo`; returns the object id.
pub fn push(server: &Server, repo: &str, path: &str, bytes: &[u8]) -> String {
    let (status, body) = answer(
        agent()
            .put(&server.url(&format!("/v1/repos/{repo}/files/{path}")))
            .header("authorization", &bearer())
            .send(bytes),
    );
    assert_eq!(status, 200, "{body}");
    body["id"].as_str().unwrap().to_owned()
}

/// `custodian plugin swap --world WORLD [extra] PLUGIN` against `server`,
/// with its token: how it ended.
pub fn swap_with_cli(
    server: &Server,
    world: &str,
    plugin: impl AsRef<std::ffi::OsStr>,
    extra: &[&str],
) -> std::process::Output {
    custodian()
        .args(["plugin", "swap", "--world", world])
        .args(extra)
        .args(["--server", &server.base])
        .arg(plugin)
        .env("CUSTODIAN_TOKEN", TOKEN)
        .output()
        .unwrap()
}

/// `custodian plugin swap --world takedown --json [extra] PLUGIN` against
/// `server`, which must succeed; its report.
pub fn swap_takedown_with_cli(server: &Server, plugin: &Path, extra: &[&str]) -> Value {
    let mut flags = vec!["--json"];
    flags.extend(extra);
    let swapped = swap_with_cli(server, "takedown", plugin, &flags);
    assert!(
        swapped.status.success(),
        "custodian plugin swap: {}",
        String::from_utf8_lossy(&swapped.stderr)
    );
    serde_json::from_slice(&swapped.stdout).unwrap()
}

/// Files a takedown of `objects` of `acme/site` through `server`; its id.
pub fn file_takedown(server: &Server, objects: &[String]) -> String {
    let (status, created) = answer(
        agent()
            .post(&server.url("/v1/takedowns"))
            .header("authorization", &bearer())
            .header("content-type", "application/json")
            .send(&json_body(
                json!({"repository": "acme/site", "objects": objects}),
            )),
    );
    assert_eq!(status, 201, "filing a takedown: {created}");
    created["id"].as_str().unwrap().to_owned()
}

/// Sets (`enabled`) or clears request `id`'s legal hold.
fn set_hold(server: &Server, id: &str, enabled: bool) {
    let (status, body) = answer(
        agent()
            .put(&server.url(&format!("/v1/takedowns/{id}/hold")))
            .header("authorization", &bearer())
            .header("content-type", "application/json")
            .send(&json_body(json!({ "enabled": enabled }))),
    );
    assert_eq!(status, 200, "{body}");
}

pub fn takedown_status(server: &Server, id: &str) -> Value {
    let (status, body) = answer(
        agent()
            .get(&server.url(&format!("/v1/takedowns/{id}")))
            .header("authorization", &bearer())
            .call(),
    );
    assert_eq!(status, 200, "{body}");
    body
}

/// PUT-then-GET load on 64 KiB objects, counting every request and every
/// failure (a non-2xx answer, an error, or bytes that differ).
struct Load {
    stop: Arc<AtomicBool>,
    requests: Arc<AtomicU64>,
    failures: Arc<AtomicU64>,
    threads: Vec<std::thread::JoinHandle<Vec<String>>>,
}

impl Load {
    fn start(server: &Server, threads: u32) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(AtomicU64::new(0));
        let failures = Arc::new(AtomicU64::new(0));
        let threads = (0..threads)
            .map(|t| {
                let (stop, requests, failures) = (stop.clone(), requests.clone(), failures.clone());
                let base = server.base.clone();
                std::thread::spawn(move || {
                    let agent = agent();
                    let mut errors = Vec::new();
                    let mut body = vec![0u8; 64 << 10];
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        body[..8].copy_from_slice(&i.to_le_bytes());
                        body[8..12].copy_from_slice(&t.to_le_bytes());
                        let url = format!("{base}/v1/stores/serving/objects/load/{t}/{i}");
                        let put = agent
                            .put(&url)
                            .header("authorization", &bearer())
                            .header("if-none-match", "*")
                            .send(&body[..]);
                        requests.fetch_add(1, Ordering::Relaxed);
                        match put {
                            Ok(r) if r.status().is_success() => {}
                            other => {
                                failures.fetch_add(1, Ordering::Relaxed);
                                errors.push(format!("PUT {url}: {:?}", other.map(|r| r.status())));
                            }
                        }
                        let got = agent.get(&url).header("authorization", &bearer()).call();
                        requests.fetch_add(1, Ordering::Relaxed);
                        match got {
                            Ok(mut r) if r.status().is_success() => {
                                let read = r.body_mut().with_config().limit(1 << 20).read_to_vec();
                                if read.ok().as_deref() != Some(&body[..]) {
                                    failures.fetch_add(1, Ordering::Relaxed);
                                    errors.push(format!("GET {url}: bytes differ"));
                                }
                            }
                            other => {
                                failures.fetch_add(1, Ordering::Relaxed);
                                errors.push(format!("GET {url}: {:?}", other.map(|r| r.status())));
                            }
                        }
                        i += 1;
                    }
                    errors
                })
            })
            .collect();
        Self {
            stop,
            requests,
            failures,
            threads,
        }
    }

    /// Stops the load; returns (requests, failures, first errors).
    fn finish(self) -> (u64, u64, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        let mut errors = Vec::new();
        for thread in self.threads {
            errors.extend(thread.join().unwrap());
        }
        errors.truncate(10);
        (
            self.requests.load(Ordering::Relaxed),
            self.failures.load(Ordering::Relaxed),
            errors,
        )
    }
}

/// The audit log of a stopped server's data directory, one JSON record a
/// line.
pub fn audit(data: &Path) -> Vec<Value> {
    let output = run(&["audit", "--data", data.to_str().unwrap(), "--json"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// `under authority N` in a step's audit detail.
fn authority_of(detail: &str) -> u64 {
    let rest = detail
        .split("under authority ")
        .nth(1)
        .unwrap_or_else(|| panic!("no authority in {detail:?}"));
    rest.split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn a_takedown_plugin_swapped_mid_run_under_load_fails_no_request_and_fences_the_old_plugin() {
    let mut server = Server::start("[server]\nworkers = 2\n\n[retention]\nretention_ms = 3000\n");
    let scratch = tempfile::tempdir().unwrap();
    let rebuilt = rebuilt_takedown(scratch.path(), "rebuilt");
    let old_hash = plugin_hash(&server, "takedown");

    // Content, and a takedown of part of it.
    let mut rng = Rng::from_env();
    let mut ids = Vec::new();
    for i in 0..3 {
        let bytes: Vec<u8> = (0..200_000 + i * 1000)
            .map(|_| rng.below(256) as u8)
            .collect();
        ids.push(push(
            &server,
            "acme/site",
            &format!("assets/file-{i}.bin"),
            &bytes,
        ));
    }
    let load = Load::start(&server, 4);
    let request = file_takedown(&server, &ids);

    // Let the old plugin commit a few steps, then swap it mid-run.
    let old_steps = format!(
        "custodian_steps_total{{plugin=\"plugin:takedown@{}\",outcome=\"rescheduled\"}}",
        &old_hash[..12]
    );
    wait_for("steps by the old plugin", Duration::from_secs(60), || {
        metric(&server, &old_steps) >= 2
    });
    // A request with work steps at once, so the old plugin may finish
    // all but the purge before the swap lands: a hold keeps the purge for
    // the new one.
    set_hold(&server, &request, true);
    let report = swap_takedown_with_cli(&server, &rebuilt, &[]);
    assert_eq!(report["previous"]["hash"], old_hash.as_str());
    let new_hash = report["current"]["hash"].as_str().unwrap().to_owned();
    assert_ne!(new_hash, old_hash);
    let generation = report["authority_generation"].as_u64().unwrap();
    assert_eq!(plugin_hash(&server, "takedown"), new_hash);
    set_hold(&server, &request, false);

    // The takedown runs to its end (purged) under the new plugin while the
    // load goes on.
    wait_for("the takedown to purge", Duration::from_secs(120), || {
        takedown_status(&server, &request)["phase"] == "purged"
    });
    let (requests, failures, errors) = load.finish();
    assert_eq!(failures, 0, "failed requests: {errors:?}");
    assert!(requests > 20, "the load made only {requests} requests");

    let exit = server.terminate();
    assert!(exit.success(), "exit {exit:?}; log:\n{}", server.log());

    let records = audit(&server.data);
    let swap = records
        .iter()
        .find(|r| r["event"] == "plugin/swap")
        .expect("the swap is audited");
    let targets: Vec<&str> = swap["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(
        targets.contains(&format!("from:{old_hash}").as_str()),
        "{swap}"
    );
    assert!(
        targets.contains(&format!("to:{new_hash}").as_str()),
        "{swap}"
    );

    let steps_by = |hash: &str| -> Vec<u64> {
        records
            .iter()
            .filter(|r| r["actor"] == "system:timer")
            .filter_map(|r| r["detail"].as_str())
            .filter(|d| d.contains(&format!("by plugin:takedown@{} ", &hash[..12])))
            .map(authority_of)
            .collect()
    };
    let old = steps_by(&old_hash);
    let new = steps_by(&new_hash);
    assert!(
        old.len() >= 2,
        "the old plugin committed {} steps",
        old.len()
    );
    assert!(
        old.iter().all(|a| *a < generation),
        "a step of the old plugin committed under authority {old:?} >= {generation}"
    );
    assert!(!new.is_empty(), "the new plugin committed no step");
    assert!(new.iter().all(|a| *a >= generation), "{new:?}");
    let last_phase_change = records
        .iter()
        .rev()
        .find(|r| {
            r["actor"]
                .as_str()
                .is_some_and(|a| a.starts_with("plugin:takedown@"))
        })
        .unwrap();
    assert_eq!(
        last_phase_change["actor"],
        format!("plugin:takedown@{}", &new_hash[..12]),
        "the takedown finished under the new plugin"
    );
}

#[test]
fn the_cli_on_a_stopped_servers_data_runs_the_plugin_the_server_swapped_in() {
    let mut server = Server::start("[server]\nworkers = 1\n");
    let scratch = tempfile::tempdir().unwrap();
    let rebuilt = rebuilt_takedown(scratch.path(), "cli");
    let object = push(&server, "acme/site", "a.txt", b"for the cli");
    let swapped = swap_takedown_with_cli(&server, &rebuilt, &[])["current"]["hash"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(server.terminate().success(), "{}", server.log());
    let data = server.data.to_str().unwrap();

    // A plugin other than the one the server swapped in is refused by
    // every command that changes state.
    for command in [
        &["takedown", "create", "acme/site", "--object", &object][..],
        &["tick"][..],
    ] {
        let mut args = command.to_vec();
        args.extend(["--data", data, "--plugin", "builtin:takedown"]);
        let (code, _, stderr) = outcome(&run(&args));
        assert_eq!(code, 2, "{command:?}: {stderr}");
        assert!(
            stderr.contains("shared plugin set names") && stderr.contains(&swapped[..12]),
            "{command:?}: {stderr}"
        );
    }

    // Without --plugin, the CLI runs the swapped-in build from the KV.
    let (code, stdout, stderr) = outcome(&run(&[
        "takedown",
        "create",
        "acme/site",
        "--object",
        &object,
        "--data",
        data,
        "--json",
    ]));
    assert_eq!(code, 0, "{stderr}");
    let id: Value = serde_json::from_str(&stdout).unwrap();
    let (code, stdout, stderr) = outcome(&run(&["tick", "--data", data, "--json"]));
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains(&format!("plugin:takedown@{}", &swapped[..12])),
        "the tick ran another plugin: {stdout}"
    );
    // Reading a status may use any build.
    let (code, _, stderr) = outcome(&run(&[
        "takedown",
        "status",
        id["id"].as_str().unwrap(),
        "--data",
        data,
        "--plugin",
        "builtin:takedown",
    ]));
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn refused_swaps_say_why_and_leave_the_old_plugin_serving() {
    let server = Server::start("");
    let scratch = tempfile::tempdir().unwrap();
    let core = scratch.path().join("core.wasm");
    std::fs::write(&core, b"\0asm\x01\0\0\0").unwrap();
    let old_hash = plugin_hash(&server, "takedown");
    let cases: [(&str, &Path, &str); 4] = [
        (
            "wrong world",
            Path::new(
                custodian::bundled::path(custodian::runtime::World::Retention).expect("bundled"),
            ),
            "is not a takedown plugin",
        ),
        (
            "incompatible version",
            future_contract(),
            "incompatible contract",
        ),
        ("core module", &core, "core WebAssembly module"),
        ("trap in the smoke call", trapper(), "failed its smoke call"),
    ];
    for (case, plugin, reason) in cases {
        let (status, body) = answer(
            agent()
                .put(&server.url("/v1/plugins/takedown"))
                .header("authorization", &bearer())
                .send(&std::fs::read(plugin).unwrap()[..]),
        );
        assert_eq!(status, 422, "{case}: {body}");
        assert_eq!(body["error"]["code"], "plugin_refused", "{case}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(reason), "{case}: {message}");
        assert_eq!(plugin_hash(&server, "takedown"), old_hash, "{case}");
    }
    // The trap is named, not just "unreachable".
    let swapped = swap_with_cli(&server, "takedown", trapper(), &[]);
    assert_eq!(
        swapped.status.code(),
        Some(2),
        "refused: the plugin's fault"
    );
    let stderr = String::from_utf8_lossy(&swapped.stderr);
    assert!(stderr.contains("trapper traps on status"), "{stderr}");
    // `plugin check` passes it unless asked for the swap's smoke call.
    let trapper_path = trapper().to_str().unwrap();
    let check = |extra: &[&str]| {
        let mut args = vec!["plugin", "check", trapper_path, "--world", "takedown"];
        args.extend(extra);
        outcome(&run(&args))
    };
    assert_eq!(check(&[]).0, 0);
    let (code, _, stderr) = check(&["--smoke"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("trapper traps on status"), "{stderr}");
    assert_eq!(
        metric(
            &server,
            "custodian_plugin_swaps_total{world=\"takedown\",result=\"refused\"}"
        ),
        5
    );

    // The old plugin still serves: it plans a new takedown.
    let id = push(&server, "acme/site", "a.txt", b"still served");
    file_takedown(&server, &[id]);
}

#[test]
fn an_unauthenticated_upload_written_whole_before_reading_still_gets_its_401() {
    use std::io::{Read, Write};
    let server = Server::start("");
    let address = server.base.trim_start_matches("http://");
    // A server that answered without reading would have closed the
    // connection under the writer by the time the body comes.
    let body = vec![7u8; 900 << 10];
    for token in ["", "authorization: Bearer wrong-token-0123456789\r\n"] {
        let mut stream = std::net::TcpStream::connect(address).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let head = format!(
            "PUT /v1/plugins/takedown HTTP/1.1\r\nhost: {address}\r\n{token}\
             content-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).unwrap();
        // The server decides on the headers alone; the body follows late,
        // as it does from a slow client or over a long link.
        std::thread::sleep(Duration::from_millis(300));
        stream
            .write_all(&body)
            .unwrap_or_else(|e| panic!("the server closed the upload ({token:?}): {e}"));
        let mut answer = String::new();
        stream
            .read_to_string(&mut answer)
            .unwrap_or_else(|e| panic!("no answer to the upload ({token:?}): {e}"));
        assert!(
            answer.starts_with("HTTP/1.1 401"),
            "{token:?}: {}",
            answer.lines().next().unwrap_or_default()
        );
        assert!(answer.contains("unauthorized"), "{answer}");
    }
}

#[test]
fn unauthenticated_mutations_get_401_and_change_nothing() {
    let server = Server::start("");
    let old_hash = plugin_hash(&server, "takedown");
    let object = server.url("/v1/stores/serving/objects/secret.txt");
    let scratch = tempfile::tempdir().unwrap();
    let rebuilt = rebuilt_takedown(scratch.path(), "rebuilt");
    let attempts: Vec<(&str, Result<ureq::http::Response<ureq::Body>, ureq::Error>)> = vec![
        (
            "put without a token",
            agent()
                .put(&object)
                .header("if-none-match", "*")
                .send(&b"x"[..]),
        ),
        (
            "put with a wrong token",
            agent()
                .put(&object)
                .header("if-none-match", "*")
                .header("authorization", "Bearer e2e-token-0123456789abcdeX")
                .send(&b"x"[..]),
        ),
        ("delete without a token", agent().delete(&object).call()),
        (
            "swap without a token",
            // As `custodian plugin swap` sends it: a refusal comes before
            // the upload, so the client waits for the go-ahead.
            agent()
                .put(&server.url("/v1/plugins/takedown"))
                .header("expect", "100-continue")
                .send(&std::fs::read(&rebuilt).unwrap()[..]),
        ),
        (
            "takedown without a token",
            agent()
                .post(&server.url("/v1/takedowns"))
                .header("content-type", "application/json")
                .send(&json_body(
                    json!({"repository": "acme/site", "objects": []}),
                )),
        ),
        ("read without a token", agent().get(&object).call()),
        (
            "plugins without a token",
            agent().get(&server.url("/v1/plugins")).call(),
        ),
    ];
    for (case, response) in attempts {
        let (status, body) = answer(response);
        assert_eq!(status, 401, "{case}: {body}");
        assert_eq!(body["error"]["code"], "unauthorized", "{case}");
    }
    let (status, _) = answer(
        agent()
            .get(&object)
            .header("authorization", &bearer())
            .call(),
    );
    assert_eq!(status, 404, "the unauthenticated PUT stored nothing");
    assert_eq!(plugin_hash(&server, "takedown"), old_hash);
    // Probes stay open.
    let (status, _) = answer(agent().get(&server.url("/healthz")).call());
    assert_eq!(status, 200);
}

#[test]
fn config_example_prints_a_file_that_config_check_accepts() {
    let output = run(&["config", "example"]);
    assert!(output.status.success());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("custodian.toml");
    std::fs::write(&file, &output.stdout).unwrap();
    let checked = run(&["config", "check", file.to_str().unwrap()]);
    assert!(
        checked.status.success(),
        "{}",
        String::from_utf8_lossy(&checked.stderr)
    );
    std::fs::write(&file, "[server]\nworkers = 0\n").unwrap();
    let checked = run(&["config", "check", file.to_str().unwrap()]);
    assert_eq!(checked.status.code(), Some(2));
}

#[test]
fn sighup_swaps_the_plugin_whose_configured_file_changed_and_logs_json() {
    let scratch = tempfile::tempdir().unwrap();
    let original = scratch.path().join("takedown.wasm");
    std::fs::copy(
        custodian::bundled::path(custodian::runtime::World::Takedown).expect("bundled"),
        &original,
    )
    .unwrap();
    let rebuilt = rebuilt_takedown(scratch.path(), "rebuilt");
    let config = |path: &Path| {
        format!(
            "[plugins.takedown]\npath = {:?}\n",
            path.display().to_string()
        )
    };
    let mut server = Server::start_with(&config(&original), &["--log-format", "json"]);
    let before = plugin_hash(&server, "takedown");
    assert_eq!(before, plugin_hash_of(&original));

    std::fs::write(server.config_path(), config(&rebuilt)).unwrap();
    let status = std::process::Command::new("kill")
        .args(["-HUP", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    wait_for("the SIGHUP swap", Duration::from_secs(60), || {
        plugin_hash(&server, "takedown") != before
    });
    assert_eq!(plugin_hash(&server, "takedown"), plugin_hash_of(&rebuilt));
    // The swap is counted just after the new plugin serves: wait for the
    // count, then check it is exactly one.
    let completed = "custodian_plugin_swaps_total{world=\"takedown\",result=\"completed\"}";
    wait_for("the swap's count", Duration::from_secs(10), || {
        metric(&server, completed) > 0
    });
    // The other worlds' files did not change: nothing else was swapped.
    assert_eq!(
        metric(
            &server,
            "custodian_plugin_swaps_total{world=\"takedown\",result=\"completed\"}"
        ),
        1
    );
    assert_eq!(
        metric(
            &server,
            "custodian_plugin_swaps_total{world=\"retention\",result=\"completed\"}"
        ),
        0
    );

    let exit = server.terminate();
    assert!(exit.success(), "{}", server.log());
    let log = server.log();
    let lines: Vec<Value> = log
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l["fields"]["message"] == "plugin swapped"),
        "{log}"
    );
    assert!(!log.contains(TOKEN), "the token must never be logged");
}

#[test]
fn sigterm_abandons_a_step_still_running_after_the_drain_period_and_it_commits_nothing() {
    // The stepper's `spin:` step never returns; its time limit (30 s) is
    // far beyond the drain period (300 ms).
    let config = format!(
        "[server]\ndrain_ms = 300\n\n[plugins.takedown]\npath = {:?}\ntimeout_ms = 30000\n",
        stepper().display().to_string()
    );
    let mut server = Server::start_prepared(&config, &[], |data| {
        schedule_takedown_timer(data, "spin:forever");
    });
    // The worker picks the timer up at once (it is due and the workers
    // start before the server listens); give the step ample time to begin
    // on a loaded machine.
    std::thread::sleep(Duration::from_millis(3000));
    let started = Instant::now();
    let exit = server.terminate();
    let took = started.elapsed();
    assert!(exit.success(), "exit {exit:?}; log:\n{}", server.log());
    assert!(took < Duration::from_secs(10), "shutdown took {took:?}");
    assert!(server.log().contains("abandoned"), "{}", server.log());

    // Nothing of the step committed: the timer is still due, unstepped and
    // not even counted as failed, and the audit log has no step.
    let output = run(&[
        "timer",
        "list",
        "--data",
        server.data.to_str().unwrap(),
        "--json",
    ]);
    assert!(output.status.success());
    let timers: Vec<Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(timers.len(), 1, "{timers:?}");
    assert_eq!(timers[0]["steps"], 0, "{timers:?}");
    assert_eq!(timers[0]["failures"], 0, "{timers:?}");
    assert!(
        audit(&server.data)
            .iter()
            .all(|r| r["actor"] != "system:timer"),
        "no step is audited"
    );
}

/// The source `GET /v1/plugins` names `world`'s plugin by.
fn plugin_source(server: &Server, world: &str) -> String {
    plugin_field(server, world, "source")
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn the_bundled_plugin_swaps_back_in_by_name_and_is_named_builtin_however_its_bytes_arrive() {
    let server = Server::start("");
    let upload = |bytes: &[u8]| {
        let (status, body) = answer(
            agent()
                .put(&server.url("/v1/plugins/retention"))
                .header("authorization", &bearer())
                .send(bytes),
        );
        assert_eq!(status, 200, "{body}");
    };
    let strict = std::fs::read(crate::support::strict()).unwrap();
    upload(&strict);
    assert!(plugin_source(&server, "retention").starts_with("upload by "));
    let swap_back = |spec: &str| swap_with_cli(&server, "retention", spec, &[]);
    let swapped = swap_back("builtin:retention");
    assert!(
        swapped.status.success(),
        "{}",
        String::from_utf8_lossy(&swapped.stderr)
    );
    assert_eq!(plugin_source(&server, "retention"), "builtin:retention");
    assert_eq!(
        plugin_hash(&server, "retention"),
        plugin_hash_of(crate::support::retention())
    );

    // The bundled bytes uploaded as a file are named for what they are.
    upload(&strict);
    upload(&std::fs::read(crate::support::retention()).unwrap());
    assert_eq!(plugin_source(&server, "retention"), "builtin:retention");

    // Another world's bundled plugin is the caller's mistake.
    let refused = swap_back("builtin:takedown");
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("not a retention plugin"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

#[test]
fn metrics_count_the_syncs_of_each_publish_by_what_they_made_durable() {
    let server = Server::start("");
    let syncs = |what: &str| {
        metric(
            &server,
            &format!("custodian_fs_syncs_total{{what=\"{what}\"}}"),
        )
    };
    let put = |key: &str, len: usize| {
        let (status, _) = answer(
            agent()
                .put(&server.url(&format!("/v1/stores/serving/objects/{key}")))
                .header("Authorization", &bearer())
                .header("If-None-Match", "*")
                .send(&vec![7u8; len][..]),
        );
        assert_eq!(status, 201, "PUT {key}");
    };
    let (journal, file) = (syncs("journal"), syncs("file"));
    put("syncs/small", 4096);
    assert_eq!(
        syncs("journal") - journal,
        1,
        "a small publish is one journal record under one sync"
    );
    assert_eq!(syncs("file") - file, 0, "and syncs no file of its own");
    let (file, directory) = (syncs("file"), syncs("directory"));
    put("syncs/large", 64 * 1024);
    assert_eq!(
        syncs("file") - file,
        1,
        "a large publish syncs its own file"
    );
    assert!(
        syncs("directory") > directory,
        "and the directories that hold the new key's names"
    );
    assert!(
        metric(&server, "custodian_redb_commits_total") > 0,
        "the server's start committed to its embedded KV"
    );
}
