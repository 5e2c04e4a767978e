//! Rolling a plugin out to a cluster: `custodian serve` hosts `alpha` and
//! `beta` (and later `gamma`) share a one-member etcd (the KV, which holds
//! the cluster's plugin set and the plugins' bytes) and an S3 server (the
//! stores).
//!
//! What must hold:
//! - a takedown plugin swapped through alpha while takedowns run is
//!   adopted by beta within seconds, both hosts run the new plugin's steps,
//!   and no step of the old plugin commits under the swap's authority
//!   generation or a later one, on either host;
//! - a host restarted with its unchanged configuration, or started for the
//!   first time, follows the cluster's set instead of its configured
//!   plugin, and does not undo the swap on the others;
//! - a host restarted with a configuration that names another plugin (a
//!   deliberate change) swaps the whole cluster to it, audited as that
//!   host's swap.

use std::path::Path;
use std::time::{Duration, Instant};

use custodian::kv::etcd::local_server::EtcdCluster;
use custodian::object::s3::local_server::{self, Kind};
use serde_json::Value;

use crate::serve::{
    file_takedown, plugin_hash_of, plugins, push, rebuilt_takedown, swap_takedown_with_cli,
    takedown_status,
};
use crate::server::{Server, agent, answer, bearer, wait_for};
use crate::support::Rng;
use crate::takedown::noise;

const TAKEDOWNS: usize = 6;
const FILES: usize = 3;
/// Short, so the takedowns purge within the test; the wait it puts
/// between a request's first steps and its purge leaves steps for the
/// swapped-in plugin.
const RETENTION_MS: u64 = 3_000;
/// How long a host may take to follow the cluster's set (it polls about
/// once a second).
const FOLLOW_WITHIN: Duration = Duration::from_secs(10);

/// What the hosts share: the etcd member, the S3 server's buckets, the
/// KV prefix of this test and the deployer's retention.
pub(crate) struct Cluster {
    etcd: EtcdCluster,
    retention_ms: u64,
    s3: String,
    buckets: [String; 2],
    prefix: String,
    env: Vec<(&'static str, String)>,
}

impl Cluster {
    /// A fresh cluster keeping preserved copies `retention_ms`, or `None`
    /// when etcd or moto is unavailable outside CI (as in the scale-out
    /// test).
    pub(crate) fn start(retention_ms: u64) -> Option<Self> {
        let etcd = EtcdCluster::start_or_skip(1)?;
        let s3 = local_server::server(Kind::Moto)?;
        let io = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let serving = io.block_on(local_server::store(Kind::Moto)).unwrap();
        let preserved = io.block_on(local_server::store(Kind::Moto)).unwrap();
        let credentials = local_server::credentials();
        Some(Self {
            etcd,
            retention_ms,
            s3: s3.endpoint.clone(),
            buckets: [serving.bucket().to_owned(), preserved.bucket().to_owned()],
            prefix: format!("e2e-{}/", Rng::from_env().below(1 << 40)),
            env: vec![
                ("AWS_ACCESS_KEY_ID", credentials.access_key_id().to_owned()),
                (
                    "AWS_SECRET_ACCESS_KEY",
                    credentials.secret_access_key().to_owned(),
                ),
                ("AWS_EC2_METADATA_DISABLED", "true".to_owned()),
            ],
        })
    }

    /// The configuration of host `node`, with the bundled plugins. Swaps
    /// here must land while takedowns run, so they skip the replay of the
    /// timers due next (on etcd and S3 it costs as much as 16 steps; it
    /// is proven in `rollback.rs`).
    fn config(&self, node: &str) -> String {
        let endpoints: Vec<String> = self
            .etcd
            .endpoints()
            .iter()
            .map(|e| format!("{e:?}"))
            .collect();
        format!(
            "[server]\nnode = \"{node}\"\nworkers = 2\n\n\
             [kv]\nbackend = \"etcd\"\nendpoints = [{}]\nprefix = \"{}\"\n\n\
             [retention]\nretention_ms = {}\n\n\
             [probation]\nreplay_timers = 0\n\n\
             [stores.serving]\nurl = \"s3://{}\"\nendpoint = \"{}\"\nregion = \"us-east-1\"\n\n\
             [stores.preserved]\nurl = \"s3://{}\"\nendpoint = \"{}\"\nregion = \"us-east-1\"\n",
            endpoints.join(", "),
            self.prefix,
            self.retention_ms,
            self.buckets[0],
            self.s3,
            self.buckets[1],
            self.s3,
        )
    }

    /// Starts host `node` with [`Cluster::config`].
    pub(crate) fn host(&self, node: &str) -> Server {
        let env: Vec<(&str, &str)> = self.env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        Server::start_in_env(&self.config(node), &[], &env, |_| {})
    }
}

/// The hash of the takedown plugin in a `GET /v1/plugins` answer.
fn takedown_hash(listing: &Value) -> &str {
    listing["plugins"]
        .as_array()
        .unwrap_or_else(|| panic!("no plugin list in {listing}"))
        .iter()
        .find(|p| p["world"] == "takedown")
        .unwrap_or_else(|| panic!("no takedown plugin in {listing}"))["hash"]
        .as_str()
        .unwrap()
}

/// Whether `server` runs `hash` as its takedown plugin and says it is in
/// sync with the cluster's set, with no error following it.
fn runs_in_sync(server: &Server, hash: &str) -> bool {
    let listing = plugins(server);
    takedown_hash(&listing) == hash
        && listing["shared"]["in_sync"] == true
        && listing["shared"]["last_error"].is_null()
}

/// Waits up to [`FOLLOW_WITHIN`] for `server` to run `hash` in sync;
/// fails naming `who` and what it showed last.
fn wait_to_follow(who: &str, server: &Server, hash: &str) {
    let started = Instant::now();
    while !runs_in_sync(server, hash) {
        assert!(
            started.elapsed() < FOLLOW_WITHIN,
            "{who} did not run takedown plugin {hash} in sync within {FOLLOW_WITHIN:?}; \
             GET /v1/plugins shows {}\nlog:\n{}",
            plugins(server),
            server.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("{who} followed in {:?}", started.elapsed());
}

/// Every audit record, oldest first, paged through `server` (the audit
/// lives in the shared KV, so any host shows all of it).
fn audit(server: &Server) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/audit?limit=1000&cursor={c}"),
            None => "/v1/audit?limit=1000".to_owned(),
        };
        let (status, body) = answer(
            agent()
                .get(&server.url(&path))
                .header("authorization", &bearer())
                .call(),
        );
        assert_eq!(status, 200, "GET {path}: {body}");
        out.extend(body["records"].as_array().unwrap().iter().cloned());
        match body["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return out,
        }
    }
}

fn targets(record: &Value) -> Vec<&str> {
    record["targets"]
        .as_array()
        .unwrap_or_else(|| panic!("no targets in {record}"))
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect()
}

/// The records of `event`.
fn events<'a>(records: &'a [Value], event: &str) -> Vec<&'a Value> {
    records.iter().filter(|r| r["event"] == event).collect()
}

/// One committed timer step, from its audit record's detail
/// ("step N by plugin:takedown@HASH12 on NODE.wI under authority G; …").
#[derive(Debug)]
struct Step {
    /// The first 12 hex digits of the plugin's hash.
    plugin: String,
    /// `NODE.wI`.
    worker: String,
    authority: u64,
}

fn steps(records: &[Value]) -> Vec<Step> {
    records
        .iter()
        .filter(|r| r["actor"] == "system:timer")
        .filter(|r| r["event"] == "timer/step" || r["event"] == "timer/done")
        .map(|r| {
            let detail = r["detail"].as_str().unwrap_or_default();
            let parse = || -> Option<Step> {
                let plugin = detail.split(" by plugin:takedown@").nth(1)?;
                let (plugin, rest) = plugin.split_once(" on ")?;
                let (worker, rest) = rest.split_once(" under authority ")?;
                let authority = rest.split(|c: char| !c.is_ascii_digit()).next()?;
                Some(Step {
                    plugin: plugin.to_owned(),
                    worker: worker.to_owned(),
                    authority: authority.parse().ok()?,
                })
            };
            parse()
                .unwrap_or_else(|| panic!("a step record without plugin, worker or authority: {r}"))
        })
        .collect()
}

/// The pushed files' ids.
fn push_files(server: &Server) -> Vec<String> {
    (0..FILES)
        .map(|i| {
            let bytes = noise(24_000 + i * 1_234, i as u64 + 11);
            push(server, "acme/site", &format!("f{i}.bin"), &bytes)
        })
        .collect()
}

/// Two more builds of the bundled takedown plugin, each with its own hash.
fn two_builds(dir: &Path, bundled: &str) -> [(std::path::PathBuf, String); 2] {
    let builds = ["rollout-1", "rollout-2"].map(|name| {
        let path = rebuilt_takedown(dir, name);
        let hash = plugin_hash_of(&path);
        (path, hash)
    });
    assert_ne!(builds[0].1, builds[1].1, "the two builds share a hash");
    assert!(
        builds.iter().all(|(_, hash)| hash != bundled),
        "a build has the bundled plugin's hash"
    );
    builds
}

#[test]
fn a_swap_through_one_host_mid_run_is_adopted_by_the_other_and_no_old_step_commits_after_it() {
    let Some(cluster) = Cluster::start(RETENTION_MS) else {
        return;
    };
    let started = Instant::now();
    let alpha = cluster.host("alpha");
    let beta = cluster.host("beta");
    let bundled = takedown_hash(&plugins(&alpha)).to_owned();
    assert!(
        runs_in_sync(&beta, &bundled),
        "beta does not start on alpha's plugin set: {}",
        plugins(&beta)
    );
    let scratch = tempfile::tempdir().unwrap();
    let [(build, hash), _] = two_builds(scratch.path(), &bundled);

    // Takedowns filed through both hosts; the swap once the bundled plugin
    // has committed its first step.
    let ids = push_files(&alpha);
    let requests: Vec<String> = (0..TAKEDOWNS)
        .map(|n| file_takedown(if n % 2 == 0 { &alpha } else { &beta }, &ids))
        .collect();
    let old = bundled[..12].to_owned();
    wait_for(
        "the bundled plugin's first steps",
        Duration::from_secs(20),
        || steps(&audit(&alpha)).iter().any(|s| s.plugin == old),
    );
    let (status, report) = answer(
        agent()
            .put(&alpha.url("/v1/plugins/takedown"))
            .header("authorization", &bearer())
            .header("expect", "100-continue")
            .send(&std::fs::read(&build).unwrap()[..]),
    );
    assert_eq!(status, 200, "the swap through alpha: {report}");
    let swapped_at = Instant::now();
    assert_eq!(report["world"], "takedown", "{report}");
    assert_eq!(report["changed"], true, "{report}");
    assert_eq!(report["previous"]["hash"], bundled.as_str(), "{report}");
    assert_eq!(report["current"]["hash"], hash.as_str(), "{report}");
    assert!(report["elapsed_ms"].is_number(), "{report}");
    let generation = report["authority_generation"]
        .as_u64()
        .unwrap_or_else(|| panic!("no authority generation in {report}"));
    assert!(
        runs_in_sync(&alpha, &hash),
        "alpha does not run what it swapped in: {}",
        plugins(&alpha)
    );
    assert!(
        requests
            .iter()
            .any(|id| takedown_status(&alpha, id)["phase"] != "purged"),
        "every takedown finished before the swap: the test proves nothing"
    );

    // Beta follows within seconds, and says so in the audit.
    wait_to_follow("beta", &beta, &hash);
    assert!(
        swapped_at.elapsed() <= FOLLOW_WITHIN,
        "beta followed only {:?} after the swap",
        swapped_at.elapsed()
    );
    let records = audit(&beta);
    let swaps = events(&records, "plugin/swap");
    assert_eq!(swaps.len(), 1, "one swap audited: {swaps:?}");
    // The audit names the authenticated principal: the bootstrap token's.
    assert_eq!(swaps[0]["actor"], "principal:admin", "{}", swaps[0]);
    for target in [
        "world:takedown".to_owned(),
        format!("from:{bundled}"),
        format!("to:{hash}"),
    ] {
        assert!(
            targets(swaps[0]).contains(&target.as_str()),
            "the swap's audit record lacks {target}: {}",
            swaps[0]
        );
    }
    let adoptions = events(&records, "plugin/adopt");
    let by_beta: Vec<&&Value> = adoptions
        .iter()
        .filter(|r| targets(r).contains(&"node:beta"))
        .collect();
    assert_eq!(by_beta.len(), 1, "beta adopted once: {adoptions:?}");
    assert_eq!(by_beta[0]["actor"], "host:beta", "{}", by_beta[0]);
    for target in [
        "world:takedown".to_owned(),
        format!("from:{bundled}"),
        format!("to:{hash}"),
    ] {
        assert!(
            targets(by_beta[0]).contains(&target.as_str()),
            "beta's adoption record lacks {target}: {}",
            by_beta[0]
        );
    }
    assert!(
        !adoptions.iter().any(|r| targets(r).contains(&"node:alpha")),
        "alpha, which swapped, also audited an adoption: {adoptions:?}"
    );

    // Every takedown runs to its end, on the new plugin.
    wait_for("every takedown to purge", Duration::from_secs(40), || {
        requests
            .iter()
            .all(|id| takedown_status(&beta, id)["phase"] == "purged")
    });

    let steps = steps(&audit(&alpha));
    let new = hash[..12].to_owned();
    let strangers: Vec<&Step> = steps
        .iter()
        .filter(|s| s.plugin != old && s.plugin != new)
        .collect();
    assert!(
        strangers.is_empty(),
        "steps by neither plugin: {strangers:?}"
    );
    let (before, after): (Vec<&Step>, Vec<&Step>) = steps.iter().partition(|s| s.plugin == old);
    assert!(!before.is_empty(), "no step by the bundled plugin");
    assert!(!after.is_empty(), "no step by the swapped-in plugin");
    let late: Vec<&&Step> = before
        .iter()
        .filter(|s| s.authority >= generation)
        .collect();
    assert!(
        late.is_empty(),
        "steps of the swapped-out plugin committed under the swap's authority {generation} or \
         later: {late:?}"
    );
    let early: Vec<&&Step> = after.iter().filter(|s| s.authority < generation).collect();
    assert!(
        early.is_empty(),
        "steps of the swapped-in plugin committed under an authority before the swap's \
         {generation}: {early:?}"
    );
    for node in ["alpha", "beta"] {
        assert!(
            after
                .iter()
                .any(|s| s.worker.starts_with(&format!("{node}.w"))),
            "no step of the swapped-in plugin ran on {node}'s workers: {after:?}"
        );
    }
    eprintln!(
        "{} steps before the swap, {} after, under authority {generation}; {:?} in all",
        before.len(),
        after.len(),
        started.elapsed()
    );
}

#[test]
fn restarted_and_new_hosts_follow_the_cluster_set_and_a_changed_config_swaps_the_cluster() {
    let Some(cluster) = Cluster::start(RETENTION_MS) else {
        return;
    };
    let started = Instant::now();
    let alpha = cluster.host("alpha");
    let mut beta = cluster.host("beta");
    let bundled = takedown_hash(&plugins(&alpha)).to_owned();
    let scratch = tempfile::tempdir().unwrap();
    let [(first, first_hash), (second, second_hash)] = two_builds(scratch.path(), &bundled);

    // Build 1, swapped in through alpha with the CLI.
    let report = swap_takedown_with_cli(&alpha, &first, &[]);
    assert_eq!(report["current"]["hash"], first_hash.as_str(), "{report}");
    wait_to_follow("beta", &beta, &first_hash);

    // Restarted with its unchanged configuration (which names the bundled
    // plugin), beta keeps the cluster's build 1.
    beta.kill();
    beta.restart();
    let listing = plugins(&beta);
    assert_eq!(
        takedown_hash(&listing),
        first_hash,
        "beta, restarted with its unchanged configuration, went back to its configured plugin \
         instead of the cluster's: {listing}"
    );
    assert_eq!(listing["shared"]["in_sync"], true, "{listing}");

    // A host's first start follows the set too.
    let gamma = cluster.host("gamma");
    let listing = plugins(&gamma);
    assert_eq!(
        takedown_hash(&listing),
        first_hash,
        "gamma, started for the first time, runs its configured plugin instead of the \
         cluster's: {listing}"
    );
    // Neither start undid the swap: after a few of alpha's polls of the
    // set, alpha still runs build 1 and no host audited a swap.
    std::thread::sleep(Duration::from_millis(2_500));
    assert!(
        runs_in_sync(&alpha, &first_hash),
        "a host's start swapped alpha away from build 1: {}",
        plugins(&alpha)
    );
    let swaps: Vec<Value> = events(&audit(&alpha), "plugin/swap")
        .into_iter()
        .cloned()
        .collect();
    assert_eq!(swaps.len(), 1, "only release-bot's swap: {swaps:?}");
    assert_eq!(swaps[0]["actor"], "principal:admin", "{}", swaps[0]);

    // Restarted with a configuration naming build 2, beta swaps the
    // cluster to it.
    let changed = format!(
        "{}\n[plugins.takedown]\npath = {:?}\n",
        cluster.config("beta"),
        second.display().to_string()
    );
    std::fs::write(beta.config_path(), changed).unwrap();
    beta.kill();
    beta.restart();
    let listing = plugins(&beta);
    assert_eq!(
        takedown_hash(&listing),
        second_hash,
        "beta, restarted with build 2 in its configuration, does not run it: {listing}\nlog:\n{}",
        beta.log()
    );
    wait_to_follow("alpha", &alpha, &second_hash);
    wait_to_follow("gamma", &gamma, &second_hash);
    let records = audit(&alpha);
    let swaps = events(&records, "plugin/swap");
    let by_beta: Vec<&&Value> = swaps.iter().filter(|r| r["actor"] == "host:beta").collect();
    assert_eq!(by_beta.len(), 1, "one swap by host:beta audited: {swaps:?}");
    for target in [
        "world:takedown".to_owned(),
        format!("from:{first_hash}"),
        format!("to:{second_hash}"),
    ] {
        assert!(
            targets(by_beta[0]).contains(&target.as_str()),
            "beta's swap record lacks {target}: {}",
            by_beta[0]
        );
    }
    assert_eq!(swaps.len(), 2, "release-bot's and beta's swaps: {swaps:?}");
    for node in ["alpha", "gamma"] {
        assert!(
            events(&records, "plugin/adopt").iter().any(|r| {
                let t = targets(r);
                t.contains(&format!("node:{node}").as_str())
                    && t.contains(&format!("to:{second_hash}").as_str())
            }),
            "{node}'s adoption of build 2 is not audited"
        );
    }
    eprintln!("{:?} in all", started.elapsed());
}
