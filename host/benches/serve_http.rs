//! Object PUT and GET with 64 KiB bodies against `custodian serve` on the
//! embedded default, driven by `wrk` on loopback, steady and during plugin
//! swaps:
//!
//! ```text
//! cargo bench -p custodian --bench serve_http [-- SECONDS]
//! ```
//!
//! Needs `wrk` on the PATH (Debian: `apt-get install wrk`). It starts the
//! real binary on a free port with a fresh data directory, then runs, each
//! for SECONDS (default 10) with 2 threads and 16 connections:
//! 1. `GET /healthz` (the HTTP stack's ceiling: the reference);
//! 2. `PUT` of distinct keys with `If-None-Match: *` (each a durable,
//!    fsynced publish to the filesystem store);
//! 3. `GET` of those keys;
//! 4. the same PUT and GET while the takedown plugin is swapped back and
//!    forth between two builds every second (each swap: compile, smoke
//!    call, authority fence raised and revoked, audited);
//! 5. the takedown denial check's cost: PUT of content keys
//!    (`content/<64 hex>`, which every read checks against the denial
//!    rows: one KV point read) then `GET` of them, alternated twice with
//!    `GET` of the plain keys of step 3 (not content, so not checked),
//!    the same size from the same store in the same run.
//!
//! After step 3, when nginx is installed (Debian: `apt-get install nginx`,
//! or `CUSTODIAN_NGINX`), nginx serves the same 64 KiB body as a static
//! file (its defaults: `sendfile`, a worker per core) to the same wrk
//! load: a reference for what a 64 KiB read over HTTP costs here, beside
//! `/healthz`, which reads nothing.
//!
//! It prints requests per second, p50 and p99 latency, and the ratios of
//! the swap runs to the steady ones and of checked to unchecked GETs. The
//! load generator shares the machine's cores with the server; compare
//! ratios, not absolutes.
//!
//! `cargo bench -p custodian --bench serve_http -- SECONDS access` instead
//! measures the access plugin's cost: two servers of the same build, one
//! asking the bundled access plugin about every request and one with
//! `[server] access_checks = false`, each called by a principal with role
//! `writer:store/serving` (so the plugin matches a scoped role), PUT and
//! then GET alternated between them twice; it prints the ratios of checked
//! to unchecked req/s and both p99s.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

#[path = "support/server.rs"]
mod server;
use server::{Server, TOKEN};
#[path = "support/builds.rs"]
mod builds;
#[path = "support/nginx.rs"]
mod nginx;
#[path = "support/wrk.rs"]
mod wrk;
use builds::takedown_builds;
use wrk::Figures;

/// wrk's script for PUTs: a distinct key per request per thread.
const PUT_LUA: &str = r#"
local counter = 0
local thread_id = 0
local threads = {}
function setup(thread)
  thread:set("id", #threads)
  table.insert(threads, thread)
end
function init(args)
  body = string.rep("x", 65536)
end
request = function()
  counter = counter + 1
  local path = KEY
  return wrk.format("PUT", path, {
    ["Authorization"] = "Bearer TOKEN",
    ["If-None-Match"] = "*",
  }, body)
end
"#;

/// wrk's script for GETs of the keys the PUT run wrote. It starts at key
/// 2: wrk calls `request` once per thread before the run to check the
/// script, so the PUT run never sends its key 1.
const GET_LUA: &str = r#"
local threads = {}
function setup(thread)
  thread:set("id", #threads)
  table.insert(threads, thread)
end
local counter = 0
request = function()
  counter = (counter % LIMIT) + 2
  local path = KEY
  return wrk.format("GET", path, { ["Authorization"] = "Bearer TOKEN" })
end
"#;

/// A plain key of run RUN, thread `id`, request `counter`: not content,
/// so no read of it is checked for a takedown.
const PLAIN_KEY: &str =
    r#""/v1/stores/serving/objects/bench/" .. RUN .. "/" .. id .. "/" .. counter"#;

/// A content key (`content/` + 64 lowercase hex, the run's number, the
/// thread and the request): every read of it is checked for a takedown.
const CONTENT_KEY: &str = r#""/v1/stores/serving/objects/content/" .. string.format("%02x%02x%060x", RUN_NO, id, counter)"#;

/// Writes wrk script `name` from `template`, its requests naming `key`
/// (a Lua expression) of run `run` (`run_no` in content keys), GETs
/// cycling through the first `limit` keys of each thread.
fn script(
    dir: &Path,
    name: &str,
    (template, key): (&str, &str),
    (run, run_no): (&str, u8),
    limit: u64,
) -> std::path::PathBuf {
    let path = dir.join(name);
    let text = template
        .replace("KEY", key)
        .replace("RUN_NO", &run_no.to_string())
        .replace("TOKEN", TOKEN)
        .replace("RUN", &format!("\"{run}\""))
        .replace("LIMIT", &limit.to_string());
    std::fs::write(&path, text).unwrap();
    path
}

fn print(label: &str, f: &Figures) {
    println!(
        "{label:<28} {:>9.0} req/s   p50 {:>7.2} ms   p99 {:>7.2} ms   non-2xx {}",
        f.rps, f.p50_ms, f.p99_ms, f.errors
    );
}

/// Starts the real binary on a free port with data directory `DIR/name`
/// and configuration `config` (TOML; empty for none), the token
/// [`TOKEN`] its admin's.
fn start(dir: &Path, name: &str, config: &str) -> (Server, String) {
    let config_path = dir.join(format!("{name}.toml"));
    std::fs::write(&config_path, config).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_custodian"));
    command
        .arg("--config")
        .arg(&config_path)
        .env("CUSTODIAN_CACHE_DIR", dir.join("cache"));
    let data = dir.join(name);
    let server = Server::start(command, &["--data".as_ref(), data.as_os_str()]);
    let base = server.base.clone();
    (server, base)
}

/// Creates principal `name` with `role` on the (stopped) data directory
/// `data`; its token.
fn principal(data: &Path, name: &str, role: &str) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_custodian"))
        .args(["principal", "create", name, "--role", role, "--data"])
        .arg(data)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

/// The access plugin's cost: see the module documentation.
fn access(dir: &Path, seconds: u64) {
    let mut servers = Vec::new();
    for (name, config) in [
        ("checked", ""),
        ("unchecked", "[server]\naccess_checks = false\n"),
    ] {
        let token = principal(&dir.join(name), "bench-writer", "writer:store/serving");
        let (server, base) = start(dir, name, config);
        servers.push((name, server, base, token));
    }
    println!(
        "access plugin on vs off, 64 KiB objects, wrk -t2 -c16, {seconds} s per run, principal with role writer:store/serving"
    );
    let mut totals = std::collections::BTreeMap::<(&str, &str), (f64, f64)>::new();
    for round in 1..=2u8 {
        for (method, template) in [("PUT", PUT_LUA), ("GET", GET_LUA)] {
            for (name, _, base, token) in &servers {
                let run = format!("access{round}");
                let limit = totals.get(&("PUT", *name)).map_or(1, |(rps, _)| {
                    ((rps / f64::from(round).max(1.0) * seconds as f64) / 4.0) as u64
                });
                let path = script(
                    dir,
                    &format!("{method}-{name}-{round}.lua"),
                    (template, PLAIN_KEY),
                    (&run, round),
                    limit.clamp(1, 10_000),
                );
                let text = std::fs::read_to_string(&path)
                    .unwrap()
                    .replace(TOKEN, token);
                std::fs::write(&path, text).unwrap();
                let figures = wrk::run(base, seconds, Some(&path), "/");
                print(&format!("{method} {name}, round {round}"), &figures);
                assert_eq!(figures.errors, 0, "requests failed");
                let total = totals.entry((method, *name)).or_default();
                total.0 += figures.rps;
                total.1 = total.1.max(figures.p99_ms);
            }
        }
    }
    for method in ["PUT", "GET"] {
        let (checked, checked_p99) = totals[&(method, "checked")];
        let (unchecked, unchecked_p99) = totals[&(method, "unchecked")];
        println!(
            "ratio: {method} with the access plugin / access checks off {:.3} (p99 {checked_p99:.2} ms vs {unchecked_p99:.2} ms, worst of the rounds)",
            checked / unchecked
        );
    }
}

fn main() {
    let seconds: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(10);
    let dir = tempfile::tempdir().unwrap();
    if std::env::args().any(|a| a == "access") {
        access(dir.path(), seconds);
        return;
    }
    let (_server, base) = start(dir.path(), "data", "");
    // Two builds of the takedown policy to swap between.
    let [original, rebuilt] = takedown_builds("custodian-bench-build");
    let builds = [dir.path().join("a.wasm"), dir.path().join("b.wasm")];
    std::fs::write(&builds[0], &original).unwrap();
    std::fs::write(&builds[1], &rebuilt).unwrap();
    let swap = |to: &Path| {
        let output = Command::new(env!("CARGO_BIN_EXE_custodian"))
            .args(["plugin", "swap", "--world", "takedown", "--server", &base])
            .arg(to)
            .env("CUSTODIAN_TOKEN", TOKEN)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    };
    // Warm the compiled-plugin cache, so a swap measures the swap.
    swap(&builds[1]);
    swap(&builds[0]);

    println!("custodian serve, 64 KiB objects, wrk -t2 -c16, {seconds} s per run");
    let health = wrk::run(&base, seconds, None, "/healthz");
    print("GET /healthz (reference)", &health);

    let put = script(
        dir.path(),
        "put.lua",
        (PUT_LUA, PLAIN_KEY),
        ("steady", 0),
        0,
    );
    let steady_put = wrk::run(&base, seconds, Some(&put), "/");
    print("PUT 64 KiB", &steady_put);
    // GETs cycle through the first keys every thread wrote.
    let written = ((steady_put.rps * seconds as f64) / 2.0 / 2.0) as u64;
    let get = script(
        dir.path(),
        "get.lua",
        (GET_LUA, PLAIN_KEY),
        ("steady", 0),
        written.clamp(1, 10_000),
    );
    let steady_get = wrk::run(&base, seconds, Some(&get), "/");
    print("GET 64 KiB", &steady_get);
    // The same body as a static file from nginx: what reading 64 KiB over
    // HTTP costs on this machine with wrk on the same cores.
    let static_get = nginx::Nginx::start(&dir.path().join("nginx"), &[("object", &[b'x'; 65536])])
        .map(|nginx| wrk::run(&nginx.base, seconds, None, "/object"));
    if let Some(figures) = &static_get {
        print("GET 64 KiB, nginx static", figures);
        println!(
            "ratios: GET / healthz {:.2}; nginx static GET / healthz {:.2}; GET / nginx static GET {:.2}",
            steady_get.rps / health.rps,
            figures.rps / health.rps,
            steady_get.rps / figures.rps,
        );
    }

    // The denial check: content keys, written as the plain ones were,
    // read alternately with the plain ones (drift on a shared machine
    // falls on both alike).
    let put_content = script(
        dir.path(),
        "put-content.lua",
        (PUT_LUA, CONTENT_KEY),
        ("content", 1),
        0,
    );
    let content_put = wrk::run(&base, seconds, Some(&put_content), "/");
    print("PUT 64 KiB content keys", &content_put);
    let content_written = ((content_put.rps * seconds as f64) / 2.0 / 2.0) as u64;
    let get_content = script(
        dir.path(),
        "get-content.lua",
        (GET_LUA, CONTENT_KEY),
        ("content", 1),
        content_written
            .clamp(1, 10_000)
            .min(written.clamp(1, 10_000)),
    );
    let (mut plain_rps, mut checked_rps, mut checked_errors) = (0.0, 0.0, 0);
    for round in 1..=2 {
        let plain = wrk::run(&base, seconds, Some(&get), "/");
        print(&format!("GET plain, round {round}"), &plain);
        let checked = wrk::run(&base, seconds, Some(&get_content), "/");
        print(&format!("GET content (checked), round {round}"), &checked);
        plain_rps += plain.rps;
        checked_rps += checked.rps;
        checked_errors += plain.errors + checked.errors;
    }
    println!(
        "ratio: GET with the denial check / without {:.3}",
        checked_rps / plain_rps
    );
    assert_eq!(checked_errors + content_put.errors, 0, "requests failed");

    // The same under swaps, one a second, alternating builds.
    let swaps = AtomicU32::new(0);
    let during = |path: &Path| {
        let stop = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let swapper = scope.spawn(|| {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(1000));
                    swap(&builds[(i + 1) % 2]);
                    swaps.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
            });
            let figures = wrk::run(&base, seconds, Some(path), "/");
            stop.store(true, Ordering::Relaxed);
            swapper.join().unwrap();
            figures
        })
    };
    let put = script(
        dir.path(),
        "put-swap.lua",
        (PUT_LUA, PLAIN_KEY),
        ("swap", 0),
        0,
    );
    let swap_put = during(&put);
    print("PUT 64 KiB during swaps", &swap_put);
    let swap_get = during(&get);
    print("GET 64 KiB during swaps", &swap_get);
    println!(
        "swaps completed during the runs: {}",
        swaps.load(Ordering::Relaxed)
    );
    println!(
        "ratios: PUT during swaps / steady {:.2} (p99 {:.2}x); GET during swaps / steady {:.2} (p99 {:.2}x); steady GET / healthz {:.2}",
        swap_put.rps / steady_put.rps,
        swap_put.p99_ms / steady_put.p99_ms,
        swap_get.rps / steady_get.rps,
        swap_get.p99_ms / steady_get.p99_ms,
        steady_get.rps / health.rps,
    );
    let errors = steady_put.errors + steady_get.errors + swap_put.errors + swap_get.errors;
    assert_eq!(errors, 0, "requests failed");
}
