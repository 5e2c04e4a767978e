//! Upload and download throughput of a 256 MiB object through the S3
//! backend against boto3's transfer manager, on the same local server in
//! the same run:
//!
//! ```text
//! cargo bench -p custodian --features local-servers --bench s3_transfer [-- WORD]
//! ```
//!
//! Servers come from `CUSTODIAN_LOCALSTACK_PYTHON` and
//! `CUSTODIAN_MOTO_SERVER` (as the tests take them; `.ci/run` installs
//! both); boto3 is the one installed beside LocalStack (or
//! `CUSTODIAN_BOTO3_PYTHON`). `WORD` keeps only the servers whose name
//! contains it. The backend uploads by composing 16 MiB parts (four in
//! flight: the backend's own choice) and downloads 16 MiB ranges, ten in
//! flight (the caller's choice, matched to boto3); boto3 uses its default
//! ten threads with 16 MiB chunks.

use std::sync::Arc;
use std::time::{Duration, Instant};

use custodian::object::s3::local_server::{self, Kind};
use custodian::object::{
    ComposeSpec, GetOptions, Metadata, ObjectKey, ObjectStore, PartSource, PutCondition,
};

// The server's allocator, with the settings `.cargo/config.toml` compiles
// in, so these figures are what the `custodian` binary's calls cost.
#[path = "../src/allocator.rs"]
mod allocator;

const MIB: u64 = 1 << 20;
const SIZE: u64 = 256 * MIB;
const PART: u64 = 16 * MIB;
/// Ranges in flight on download: as many as boto3's transfer manager
/// keeps threads, so both sides get the same concurrency.
const READS_IN_FLIGHT: usize = 10;

fn wanted(what: &str) -> bool {
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    filter.is_empty() || filter.iter().any(|f| what.contains(f.as_str()))
}

fn rate(elapsed: Duration) -> f64 {
    SIZE as f64 / MIB as f64 / elapsed.as_secs_f64()
}

/// The backend's upload and download times.
async fn backend(store: Arc<dyn ObjectStore>, file: &std::path::Path) -> (Duration, Duration) {
    let spec = ComposeSpec {
        key: &ObjectKey::new("bench/backend").expect("a valid key"),
        local_path: file,
        parts: (0..SIZE / PART)
            .map(|i| PartSource::Local {
                offset: i * PART,
                len: PART,
            })
            .collect(),
        base_key: None,
        base_etag: None,
        condition: PutCondition::Unconditional,
        metadata: Metadata::new(),
        crc64: None,
        progress: None,
    };
    let started = Instant::now();
    let meta = store.compose(&spec).await.expect("the upload");
    let upload = started.elapsed();

    let started = Instant::now();
    let mut reads = tokio::task::JoinSet::new();
    let mut received = 0u64;
    let mut offsets = (0..SIZE).step_by(usize::try_from(PART).expect("16 MiB fits"));
    loop {
        while reads.len() < READS_IN_FLIGHT {
            let Some(offset) = offsets.next() else { break };
            let (store, etag) = (store.clone(), meta.etag.clone());
            reads.spawn(async move {
                let options = GetOptions {
                    range: Some(offset..offset + PART),
                    if_match: Some(&etag),
                    ..GetOptions::default()
                };
                let key = ObjectKey::new("bench/backend").expect("a valid key");
                let got = store.get_opts(&key, options).await.expect("a range");
                got.len()
            });
        }
        match reads.join_next().await {
            Some(read) => received += read.expect("a read task"),
            None => break,
        }
    }
    assert_eq!(received, SIZE, "every byte came back");
    (upload, started.elapsed())
}

/// boto3's upload and download times, or why it could not run.
fn boto3(endpoint: &str, bucket: &str, file: &std::path::Path) -> Result<(f64, f64), String> {
    let python = std::env::var("CUSTODIAN_BOTO3_PYTHON")
        .or_else(|_| std::env::var("CUSTODIAN_LOCALSTACK_PYTHON"))
        .map_err(|_| "no Python with boto3 (set CUSTODIAN_BOTO3_PYTHON)".to_owned())?;
    let script = format!(
        r#"
import boto3, time, sys
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
s3 = boto3.client("s3", endpoint_url="{endpoint}", region_name="us-east-1",
    aws_access_key_id="custodian-test", aws_secret_access_key="custodian-test-secret",
    config=Config(s3={{"addressing_style": "path"}}))
cfg = TransferConfig(multipart_chunksize={PART}, multipart_threshold={PART})
t = time.time(); s3.upload_file(sys.argv[1], "{bucket}", "bench/boto3", Config=cfg); up = time.time() - t
t = time.time(); s3.download_file("{bucket}", "bench/boto3", sys.argv[1] + ".down", Config=cfg); down = time.time() - t
print(up, down)
"#
    );
    let output = std::process::Command::new(python)
        .arg("-c")
        .arg(script)
        .arg(file)
        .output()
        .map_err(|e| format!("running boto3: {e}"))?;
    let _ = std::fs::remove_file(format!("{}.down", file.display()));
    let text = String::from_utf8_lossy(&output.stdout);
    let mut times = text.split_whitespace().filter_map(|t| t.parse().ok());
    match (times.next(), times.next()) {
        (Some(up), Some(down)) => Ok((up, down)),
        _ => Err(String::from_utf8_lossy(&output.stderr).into_owned()),
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let bytes: Vec<u8> = (0..SIZE)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let mut file = tempfile::NamedTempFile::new().expect("a temp file");
    std::io::Write::write_all(&mut file, &bytes).expect("writing the data");
    drop(bytes);
    println!(
        "environment: RUST_BACKTRACE={}, 256 MiB object, 16 MiB parts",
        std::env::var("RUST_BACKTRACE").unwrap_or_default()
    );
    println!(
        "{:<12} {:>14} {:>14} {:>14} {:>14}   backend/boto3",
        "server", "backend up", "boto3 up", "backend down", "boto3 down"
    );
    for (kind, name) in [(Kind::LocalStack, "localstack"), (Kind::Moto, "moto")] {
        if !wanted(name) {
            continue;
        }
        let Some(server) = local_server::server(kind) else {
            continue;
        };
        let store = runtime
            .block_on(local_server::store(kind))
            .expect("a store");
        let bucket = store.bucket().to_owned();
        let (up, down) = runtime.block_on(backend(Arc::new(store), file.path()));
        match boto3(&server.endpoint, &bucket, file.path()) {
            Ok((boto_up, boto_down)) => {
                let boto_rate = |secs: f64| SIZE as f64 / MIB as f64 / secs;
                println!(
                    "{name:<12} {:>9.1} MiB/s {:>9.1} MiB/s {:>9.1} MiB/s {:>9.1} MiB/s   up {:.2}x, down {:.2}x",
                    rate(up),
                    boto_rate(boto_up),
                    rate(down),
                    boto_rate(boto_down),
                    rate(up) / boto_rate(boto_up),
                    rate(down) / boto_rate(boto_down),
                );
            }
            Err(why) => println!(
                "{name:<12} {:>9.1} MiB/s {:>14} {:>9.1} MiB/s   (boto3 failed: {why})",
                rate(up),
                "-",
                rate(down)
            ),
        }
    }
}
