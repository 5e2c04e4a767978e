//! Verifying 10,000 pinned versions on moto: listing-batched (the default)
//! against one HEAD per pin, in the same run:
//!
//! ```text
//! cargo bench -p custodian --features local-servers --bench versions_verify [-- WORD]
//! ```
//!
//! Servers come from `CUSTODIAN_MOTO_SERVER` and
//! `CUSTODIAN_LOCALSTACK_PYTHON` (as the tests take them); `WORD` keeps
//! only the servers whose name contains it. The pins are 100 prefixes of
//! 100 objects each, so every prefix is one listing page. Prints the
//! store requests and the times of both ways, and their ratios.
//!
//! moto answers every ListObjectVersions by scanning the whole bucket
//! (its cost grows with the bucket, not the page), so there the fewer
//! requests can take longer; S3 and LocalStack index by key.

use custodian_object::ObjectStoreExt;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use custodian::object::s3::local_server::{self, Kind};
use custodian::object::{Metadata, ObjectStore, PutCondition};
use custodian::versions::aliases::Aliases;
use custodian::versions::digest::Digest;
use custodian::versions::exact_row::ExactRowPolicy;
use custodian::versions::pins::Pin;
use custodian::versions::verify::{VerifyOptions, VerifyReport, verify_with};
use futures::StreamExt;

// The server's allocator, with the settings `.cargo/config.toml` compiles
// in, so these figures are what the `custodian` binary's calls cost.
#[path = "../src/allocator.rs"]
mod allocator;

const PREFIXES: usize = 100;
const PER_PREFIX: usize = 100;
/// Publishes in flight while setting up.
const SETUP_IN_FLIGHT: usize = 32;

async fn setup(store: Arc<dyn ObjectStore>) -> Vec<Pin> {
    let keys: Vec<(usize, usize)> = (0..PREFIXES)
        .flat_map(|p| (0..PER_PREFIX).map(move |i| (p, i)))
        .collect();
    futures::stream::iter(keys)
        .map(|(p, i)| {
            let store = store.clone();
            async move {
                let bytes = format!("prefix {p} object {i}");
                let key = format!("pins/p{p:03}/o{i:03}");
                let meta = store
                    .put_whole(
                        &key,
                        Bytes::from(bytes.clone().into_bytes()),
                        &PutCondition::Unconditional,
                        &Metadata::new(),
                        custodian::checksum::crc64_nvme(bytes.as_bytes()),
                    )
                    .await
                    .expect("a publish");
                Pin {
                    key,
                    version_id: meta.version_id.expect("a versioned bucket"),
                    etag: Some(meta.etag),
                    size: Some(meta.size),
                    digest: Digest::Md5(Digest::Md5(String::new()).of(bytes.as_bytes())),
                    manifest: "bench".into(),
                }
            }
        })
        .buffer_unordered(SETUP_IN_FLIGHT)
        .collect()
        .await
}

async fn run(store: &dyn ObjectStore, pins: &[Pin], listing: bool) -> (VerifyReport, f64) {
    let started = Instant::now();
    let report = verify_with(
        store,
        pins,
        &Aliases::none(),
        &ExactRowPolicy,
        VerifyOptions { listing },
    )
    .await
    .expect("a versioned store");
    let elapsed = started.elapsed().as_secs_f64();
    assert!(report.ok(), "{:?}", report.problems.first());
    assert_eq!(report.checked.len(), pins.len());
    (report, elapsed)
}

fn wanted(what: &str) -> bool {
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    filter.is_empty() || filter.iter().any(|f| what.contains(f.as_str()))
}

fn main() {
    let io = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    for (name, kind) in [("moto", Kind::Moto), ("localstack", Kind::LocalStack)] {
        if wanted(name) {
            println!("== {name}");
            io.block_on(bench(kind));
        }
    }
}

async fn bench(kind: Kind) {
    {
        let Some(store) = local_server::store(kind).await else {
            return;
        };
        let store: Arc<dyn ObjectStore> = Arc::new(store);
        let started = Instant::now();
        let pins = setup(store.clone()).await;
        println!(
            "setup: {} objects in {:.1} s",
            pins.len(),
            started.elapsed().as_secs_f64()
        );
        // Warm up the connection pool and moto, then measure.
        run(store.as_ref(), &pins[..PER_PREFIX], true).await;
        let (batched, batched_s) = run(store.as_ref(), &pins, true).await;
        let (headed, headed_s) = run(store.as_ref(), &pins, false).await;
        let requests = |r: &VerifyReport| r.list_calls + r.head_calls;
        println!(
            "listing-batched: {:>6} ListObjectVersions + {:>6} HEAD = {:>6} requests, {:>7.3} s",
            batched.list_calls,
            batched.head_calls,
            requests(&batched),
            batched_s
        );
        println!(
            "HEAD per pin:    {:>6} ListObjectVersions + {:>6} HEAD = {:>6} requests, {:>7.3} s",
            headed.list_calls,
            headed.head_calls,
            requests(&headed),
            headed_s
        );
        println!(
            "ratio (HEAD per pin / batched): requests {:.1}x, time {:.2}x",
            requests(&headed) as f64 / requests(&batched) as f64,
            headed_s / batched_s
        );
    }
}
