//! What the end-to-end tests share: real `.wasm` guests built from
//! `tests/guests/`, a runtime, call contexts, and the `custodian` binary.

use custodian_object::ObjectStoreExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, OnceLock};

use custodian::clock::{Clock, FixedClock};
use custodian::kv::Kv;
use custodian::kv::memory::MemoryKv;
use custodian::object::ObjectStore;
use custodian::object::memory::MemoryStore;
use custodian::runtime::{CallContext, Grants, Limits, Runtime, RuntimeConfig, Services};

include!("../../host/runtime/build/wasm.rs");

/// The test guests, built once per test process.
fn guests() -> &'static [PathBuf] {
    static GUESTS: OnceLock<Vec<PathBuf>> = OnceLock::new();
    GUESTS.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let target = custodian::bundled::wasm_target_dir().to_path_buf();
        build_wasm(
            root,
            &target,
            &[
                "custodian-guest-probe",
                "custodian-guest-future",
                "custodian-guest-stepper",
                "custodian-guest-trapper",
                "custodian-guest-legacy",
                "custodian-guest-gatekeeper",
                "custodian-guest-strict",
            ],
        )
        .unwrap_or_else(|e| panic!("{e}"))
    })
}

/// `tests/guests/probe`: misbehaves on request.
pub fn probe() -> &'static Path {
    &guests()[0]
}

/// `tests/guests/future`: built against `custodian:host@0.3.0`.
pub fn future_contract() -> &'static Path {
    &guests()[1]
}

/// `tests/guests/stepper`: a takedown-world guest that counts steps or
/// fails on request.
pub fn stepper() -> &'static Path {
    &guests()[2]
}

/// `tests/guests/trapper`: a takedown-world guest that traps on every
/// call.
pub fn trapper() -> &'static Path {
    &guests()[3]
}

/// `tests/guests/legacy`: a retention-world guest built against the
/// frozen 0.1 contract.
pub fn legacy_contract() -> &'static Path {
    &guests()[4]
}

/// `tests/guests/gatekeeper`: an access-world guest that allows reads
/// only, and traps for a principal named `trap`.
pub fn gatekeeper() -> &'static Path {
    &guests()[5]
}

/// `tests/guests/strict`: the README's retention example (30 days at
/// least, a hold always wins).
pub fn strict() -> &'static Path {
    &guests()[6]
}

/// The bundled retention plugin, as built from `plugins/retention`.
pub fn retention() -> &'static Path {
    Path::new(custodian::bundled::path(custodian::runtime::World::Retention).expect("bundled"))
}

/// The probe's interface.
pub const PROBE: &str = "custodian-test:probe/probe@0.1.0";

/// A cache directory shared by the tests, so only the first compiles.
pub fn cache_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("custodian-cache")
}

/// A runtime with the shared cache.
pub fn runtime() -> Runtime {
    Runtime::new(&RuntimeConfig {
        cache_dir: Some(cache_dir()),
        concurrent_calls: 16,
    })
    .expect("the runtime starts")
}

/// In-memory services: one KV, one store named `content`, a pinned clock.
pub struct World {
    pub kv: Arc<dyn Kv>,
    pub services: Arc<Services>,
    _io: tokio::runtime::Runtime,
}

impl World {
    pub fn new() -> Self {
        let io = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let clock: Arc<dyn Clock> = Arc::new(FixedClock::new(1_700_000_000_000));
        let kv: Arc<dyn Kv> = Arc::new(MemoryKv::new(clock.clone()));
        let content: Arc<dyn ObjectStore> = Arc::new(MemoryStore::versioned(clock.clone()));
        let services = Arc::new(Services {
            kv: kv.clone(),
            stores: [("content".to_owned(), content)].into_iter().collect(),
            clock,
            io: io.handle().clone(),
            retention: None,
        });
        Self {
            kv,
            services,
            _io: io,
        }
    }

    /// A call context with these grants and limits.
    pub fn call(&self, grants: Grants, limits: Limits) -> Arc<CallContext> {
        Arc::new(CallContext {
            services: self.services.clone(),
            grants,
            limits,
            actor: "plugin:test".into(),
        })
    }
}

/// The `custodian` binary, with the tests' cache.
pub fn custodian() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_custodian"));
    command
        .env("CUSTODIAN_CACHE_DIR", cache_dir())
        .env_remove("RUST_LOG");
    command
}

/// Runs `custodian` with `args`.
pub fn run(args: &[&str]) -> Output {
    custodian().args(args).output().expect("custodian runs")
}

/// The exit code, stdout and stderr of a run, for assertions.
pub fn outcome(output: &Output) -> (i32, String, String) {
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A small deterministic generator for the crash tests; its seed is
/// printed so a failing run can be replayed with `CUSTODIAN_CRASH_SEED`.
pub struct Rng(u64);

impl Rng {
    /// Seeded from `CUSTODIAN_CRASH_SEED`, else from the clock; prints the
    /// seed.
    pub fn from_env() -> Self {
        let seed = std::env::var("CUSTODIAN_CRASH_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
                    | 1
            });
        eprintln!("CUSTODIAN_CRASH_SEED={seed}");
        Self(seed)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// A versioned object store for end-to-end tests of commands that take
/// `--store`: a filesystem store in a temporary directory, or a fresh
/// bucket on the local moto server; with what the binary needs to reach
/// it and a handle to write and read it directly.
pub struct StoreFixture {
    /// Scratch space for manifests, plans and caches.
    pub dir: tempfile::TempDir,
    /// `--store`'s value.
    pub url: String,
    /// Arguments after `--store URL` (an S3 server's endpoint, region).
    args: Vec<String>,
    /// Environment for the binary (an S3 server's credentials).
    env: Vec<(&'static str, String)>,
    /// The store itself.
    pub store: Arc<dyn ObjectStore>,
    /// Drives `store`.
    pub io: tokio::runtime::Runtime,
}

impl StoreFixture {
    fn io() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// A filesystem store; `query` is appended to its URL
    /// (`?versioned=false`).
    pub fn fs(query: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}{query}", dir.path().join("store").display());
        let io = Self::io();
        let parsed: custodian::object::open::StoreUrl = url.parse().unwrap();
        let store = io
            .block_on(parsed.open(Arc::new(custodian::clock::SystemClock)))
            .unwrap();
        Self {
            dir,
            url,
            args: Vec::new(),
            env: Vec::new(),
            store,
            io,
        }
    }

    /// A fresh versioned bucket on the local moto server; `None` (having
    /// said why) when moto cannot run here, which `CI=true` forbids.
    pub fn moto() -> Option<Self> {
        use custodian::object::s3::local_server::{self, Kind};
        let io = Self::io();
        let server = local_server::server(Kind::Moto)?;
        let store = io.block_on(local_server::store(Kind::Moto))?;
        let credentials = local_server::credentials();
        Some(Self {
            dir: tempfile::tempdir().unwrap(),
            url: format!("s3://{}", store.bucket()),
            args: vec![
                "--endpoint".into(),
                server.endpoint.clone(),
                "--region".into(),
                "us-east-1".into(),
            ],
            env: vec![
                ("AWS_ACCESS_KEY_ID", credentials.access_key_id().to_owned()),
                (
                    "AWS_SECRET_ACCESS_KEY",
                    credentials.secret_access_key().to_owned(),
                ),
                ("AWS_EC2_METADATA_DISABLED", "true".into()),
            ],
            store: Arc::new(store),
            io,
        })
    }

    /// `custodian COMMAND… --store URL [endpoint, region] ARGS…` with the
    /// store's environment.
    pub fn run(&self, command: &[&str], args: &[&str]) -> Output {
        custodian()
            .args(command)
            .args(["--store", &self.url])
            .args(&self.args)
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (*k, v.as_str())))
            .output()
            .expect("custodian runs")
    }

    /// Publishes `bytes` at `key` unconditionally.
    pub fn put(&self, key: &str, bytes: &[u8]) -> custodian::object::ObjectMeta {
        self.io
            .block_on(self.store.put_whole(
                key,
                bytes::Bytes::copy_from_slice(bytes),
                &custodian::object::PutCondition::Unconditional,
                &custodian::object::Metadata::new(),
                custodian::checksum::crc64_nvme(bytes),
            ))
            .unwrap()
    }

    /// Writes `text` to `name` in the scratch directory; its path.
    pub fn file(&self, name: &str, text: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }
}
