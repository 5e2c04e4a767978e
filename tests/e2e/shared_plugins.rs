//! One plugin set for several hosts: two `custodian serve` processes,
//! `alpha` and `beta`, share an etcd member (the KV) and an S3 server (the
//! stores). A takedown plugin swapped through alpha while takedowns run
//! must run on beta too, with no step of the old plugin committed on
//! either host after the swap, and must outlive beta's restarts; a changed
//! configuration file on beta swaps both hosts.

use std::time::{Duration, Instant};

use custodian::kv::etcd::local_server::EtcdCluster;
use custodian::object::s3::local_server::{self, Kind};
use serde_json::{Value, json};

use crate::serve::{
    authority_of, plugin_hash, plugin_hash_of, push, rebuilt_takedown, takedown_status,
};
use crate::server::{Server, agent, answer, bearer, json_body, wait_for};
use crate::support::Rng;
use crate::takedown::noise;

const TAKEDOWNS: usize = 6;

fn config(node: &str, etcd: &[String], prefix: &str, s3: &str, buckets: [&str; 2]) -> String {
    let endpoints: Vec<String> = etcd.iter().map(|e| format!("{e:?}")).collect();
    format!(
        "[server]\nnode = \"{node}\"\nworkers = 2\n\n\
         [kv]\nbackend = \"etcd\"\nendpoints = [{}]\nprefix = \"{prefix}\"\n\n\
         [retention]\nretention_ms = 3000\n\n\
         [stores.serving]\nurl = \"s3://{}\"\nendpoint = \"{s3}\"\nregion = \"us-east-1\"\n\n\
         [stores.preserved]\nurl = \"s3://{}\"\nendpoint = \"{s3}\"\nregion = \"us-east-1\"\n",
        endpoints.join(", "),
        buckets[0],
        buckets[1],
    )
}

/// Every audit record, oldest first, read through `server`.
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
        assert_eq!(status, 200, "{body}");
        out.extend(body["records"].as_array().unwrap().iter().cloned());
        match body["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return out,
        }
    }
}

fn has_target(record: &Value, target: &str) -> bool {
    record["targets"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t == target)
}

/// Whether `server` runs exactly the shared set.
fn in_sync(server: &Server) -> bool {
    let (status, body) = answer(
        agent()
            .get(&server.url("/v1/plugins"))
            .header("authorization", &bearer())
            .call(),
    );
    assert_eq!(status, 200, "{body}");
    body["shared"]["in_sync"] == true
}

/// The steps committed by the takedown plugin `hash`: (node, authority).
fn steps_by(records: &[Value], hash: &str) -> Vec<(String, u64)> {
    let by = format!("by plugin:takedown@{} on ", &hash[..12]);
    records
        .iter()
        .filter(|r| r["actor"] == "system:timer")
        .filter_map(|r| r["detail"].as_str())
        .filter_map(|detail| {
            let node = detail.split(&by).nth(1)?.split(".w").next()?.to_owned();
            Some((node, authority_of(detail)))
        })
        .collect()
}

#[test]
fn a_plugin_swapped_through_one_host_runs_on_every_host_and_outlives_their_restarts() {
    let Some(etcd) = EtcdCluster::start_or_skip(1) else {
        return;
    };
    let Some(s3) = local_server::server(Kind::Moto) else {
        return;
    };
    let io = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let serving = io.block_on(local_server::store(Kind::Moto)).unwrap();
    let preserved = io.block_on(local_server::store(Kind::Moto)).unwrap();
    let mut rng = Rng::from_env();
    let prefix = format!("e2e-{}/", rng.below(1 << 40));
    let buckets = [serving.bucket(), preserved.bucket()];
    let config = |node: &str| config(node, &etcd.endpoints(), &prefix, &s3.endpoint, buckets);
    let credentials = local_server::credentials();
    let env = [
        ("AWS_ACCESS_KEY_ID", credentials.access_key_id()),
        ("AWS_SECRET_ACCESS_KEY", credentials.secret_access_key()),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ];
    let alpha = Server::start_in_env(&config("alpha"), &[], &env, |_| {});
    let mut beta = Server::start_in_env(&config("beta"), &[], &env, |_| {});
    let scratch = tempfile::tempdir().unwrap();
    let first = rebuilt_takedown(scratch.path(), "first");
    let second = rebuilt_takedown(scratch.path(), "second");
    let bundled = plugin_hash(&alpha, "takedown");
    assert_eq!(plugin_hash(&beta, "takedown"), bundled);

    // Content, and takedowns filed through both hosts.
    let ids: Vec<String> = (0..2)
        .map(|i| {
            let bytes = noise(30_000 + i * 999, i as u64 + 7);
            push(&alpha, "acme/site", &format!("f{i}.bin"), &bytes)
        })
        .collect();
    let requests: Vec<String> = (0..TAKEDOWNS)
        .map(|n| {
            let host = if n % 2 == 0 { &alpha } else { &beta };
            let (status, created) = answer(
                agent()
                    .post(&host.url("/v1/takedowns"))
                    .header("authorization", &bearer())
                    .header("content-type", "application/json")
                    .send(&json_body(
                        json!({"repository": "acme/site", "objects": ids}),
                    )),
            );
            assert_eq!(status, 201, "{created}");
            created["id"].as_str().unwrap().to_owned()
        })
        .collect();

    // A few steps by the bundled plugin, then the swap through alpha.
    wait_for(
        "steps by the bundled plugin",
        Duration::from_secs(60),
        || steps_by(&audit(&alpha), &bundled).len() >= 2,
    );
    let (status, report) = answer(
        agent()
            .put(&alpha.url("/v1/plugins/takedown"))
            .header("authorization", &bearer())
            .send(&std::fs::read(&first).unwrap()[..]),
    );
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["previous"]["hash"], bundled.as_str());
    let swapped = report["current"]["hash"].as_str().unwrap().to_owned();
    let generation = report["authority_generation"].as_u64().unwrap();
    let answered = Instant::now();
    wait_for("beta to follow the swap", Duration::from_secs(15), || {
        plugin_hash(&beta, "takedown") == swapped && in_sync(&beta)
    });
    eprintln!(
        "swap through alpha: {:.0} ms to answer; beta followed {:?} later",
        report["elapsed_ms"].as_f64().unwrap(),
        answered.elapsed()
    );
    wait_for("every takedown to purge", Duration::from_secs(180), || {
        requests
            .iter()
            .all(|id| takedown_status(&alpha, id)["phase"] == "purged")
    });

    let records = audit(&alpha);
    let swaps: Vec<&Value> = records
        .iter()
        .filter(|r| r["event"] == "plugin/swap")
        .collect();
    assert_eq!(swaps.len(), 1, "{swaps:?}");
    assert!(has_target(swaps[0], &format!("to:{swapped}")));
    let adopted = records
        .iter()
        .find(|r| r["event"] == "plugin/adopt" && has_target(r, "node:beta"))
        .expect("beta's adoption is audited");
    assert_eq!(adopted["actor"], "host:beta");
    assert!(has_target(adopted, &format!("to:{swapped}")));

    let old = steps_by(&records, &bundled);
    let new = steps_by(&records, &swapped);
    assert!(old.len() >= 2, "{old:?}");
    assert!(
        old.iter().all(|(_, authority)| *authority < generation),
        "a step of the swapped-out plugin committed under the swap's authority {generation} \
         or later: {old:?}"
    );
    assert!(
        new.iter().all(|(_, authority)| *authority >= generation),
        "{new:?}"
    );
    for node in ["alpha", "beta"] {
        assert!(
            new.iter().any(|(n, _)| n == node),
            "no step of the new plugin ran on {node}: {new:?}"
        );
    }

    // Restarted with its unchanged file, beta keeps the swapped plugin.
    beta.kill();
    beta.restart();
    assert_eq!(plugin_hash(&beta, "takedown"), swapped);

    // Restarted with a changed file, beta swaps both hosts to it.
    let changed = format!(
        "{}\n[plugins.takedown]\npath = {:?}\n",
        config("beta"),
        second.display().to_string()
    );
    std::fs::write(beta.config_path(), changed).unwrap();
    beta.kill();
    beta.restart();
    let configured = plugin_hash_of(&second);
    assert_eq!(plugin_hash(&beta, "takedown"), configured);
    wait_for(
        "alpha to follow beta's file",
        Duration::from_secs(15),
        || plugin_hash(&alpha, "takedown") == configured,
    );
    let by_beta = audit(&alpha)
        .into_iter()
        .filter(|r| r["event"] == "plugin/swap" && r["actor"] == "host:beta")
        .collect::<Vec<_>>();
    assert_eq!(by_beta.len(), 1, "{by_beta:?}");
    assert!(has_target(&by_beta[0], &format!("from:{swapped}")));
    assert!(has_target(&by_beta[0], &format!("to:{configured}")));
}
