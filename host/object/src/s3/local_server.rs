//! Real S3-compatible servers for tests and benchmarks, started on
//! 127.0.0.1 and a free port the first time one is asked for, shared by the
//! whole process, and stopped when the process ends. Compiled for the
//! crate's tests and with the `local-servers` feature (the benchmarks).
//!
//! Statics are never dropped, so the server cannot be stopped by a
//! destructor. It is started through `sh -c '<server> & read _; kill'`
//! with its stdin piped from this process and the pipe's write end held
//! in the static: when the test process exits, however it exits, the pipe
//! closes, `read` returns and the wrapper kills the server.
//!
//! Which servers: moto (`CUSTODIAN_MOTO_SERVER`, the path of
//! `moto_server`) and LocalStack (`CUSTODIAN_LOCALSTACK_PYTHON`, a Python
//! with `localstack` installed). A server that is not configured or does
//! not start skips the tests that need it, saying why; under `CI=true` it
//! fails them instead.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use aws_sdk_s3::config::Credentials;
use aws_sdk_s3::types::{BucketVersioningStatus, VersioningConfiguration};

use super::{S3Config, S3Store};
use custodian_base::clock::SystemClock;

/// How long a server may take to become ready. LocalStack takes a few
/// seconds on a warm machine and much longer on a cold, busy one.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// The two servers the tests know how to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// moto's standalone server: light, but lax (see the tests' flags).
    Moto,
    /// LocalStack's S3, without Docker: the faithful one.
    LocalStack,
}

impl Kind {
    fn env_var(self) -> &'static str {
        match self {
            Kind::Moto => "CUSTODIAN_MOTO_SERVER",
            Kind::LocalStack => "CUSTODIAN_LOCALSTACK_PYTHON",
        }
    }

    fn slot(self) -> &'static OnceLock<Result<Server, String>> {
        static MOTO: OnceLock<Result<Server, String>> = OnceLock::new();
        static LOCALSTACK: OnceLock<Result<Server, String>> = OnceLock::new();
        match self {
            Kind::Moto => &MOTO,
            Kind::LocalStack => &LOCALSTACK,
        }
    }
}

/// A running server.
pub struct Server {
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    /// Closing this (at process exit) stops the server.
    _stdin: Mutex<ChildStdin>,
    _wrapper: Mutex<Child>,
    /// Logs and LocalStack's state; removed with the process's temp files.
    _dir: tempfile::TempDir,
}

/// The running server of `kind`, started on first use; `None` (having
/// said why) when it cannot run and skipping is allowed.
///
/// # Panics
/// Under `CI=true` when the server cannot run: CI must not pass by
/// skipping.
pub fn server(kind: Kind) -> Option<&'static Server> {
    match kind.slot().get_or_init(|| start(kind)) {
        Ok(server) => Some(server),
        Err(why) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("{kind:?} is required under CI=true: {why}")
        }
        Err(why) => {
            eprintln!("skipping: {kind:?} S3 server unavailable: {why}");
            None
        }
    }
}

fn free_port() -> Result<u16, String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("binding a port: {e}"))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("reading the port: {e}"))
}

fn start(kind: Kind) -> Result<Server, String> {
    let program =
        std::env::var(kind.env_var()).map_err(|_| format!("{} is not set", kind.env_var()))?;
    if !std::path::Path::new(&program).exists() {
        return Err(format!("{}={program:?} does not exist", kind.env_var()));
    }
    let port = free_port()?;
    let dir = tempfile::tempdir().map_err(|e| format!("a temp dir: {e}"))?;
    let log_path = dir.path().join("server.log");
    let log = std::fs::File::create(&log_path).map_err(|e| format!("the log: {e}"))?;
    let log_err = log.try_clone().map_err(|e| format!("the log: {e}"))?;
    // `read` returns when this process's end of the pipe closes.
    let script = match kind {
        Kind::Moto => r#""$1" -H 127.0.0.1 -p "$2" & pid=$!; read _; kill $pid; wait $pid"#,
        Kind::LocalStack => {
            r#""$1" -m localstack.runtime.main & pid=$!; read _; kill $pid; wait $pid"#
        }
    };
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(script)
        .arg("sh")
        .arg(&program)
        .arg(port.to_string())
        .stdin(Stdio::piped())
        .stdout(log)
        .stderr(log_err);
    if kind == Kind::LocalStack {
        command
            .env("SERVICES", "s3")
            .env("GATEWAY_LISTEN", format!("127.0.0.1:{port}"))
            .env("DNS_ADDRESS", "0")
            .env("DISABLE_EVENTS", "1")
            .env("SKIP_SSL_CERT_DOWNLOAD", "1")
            .env("LOCALSTACK_VOLUME_DIR", dir.path().join("vol"))
            .env("FILESYSTEM_ROOT", dir.path().join("fs"));
    }
    let mut wrapper = command
        .spawn()
        .map_err(|e| format!("starting {program:?}: {e}"))?;
    let stdin = wrapper
        .stdin
        .take()
        .ok_or("the server's stdin was not piped")?;
    let endpoint = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if ready(kind, port) {
            break;
        }
        let exited = wrapper.try_wait().ok().flatten();
        if exited.is_some() || Instant::now() > deadline {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            let tail: String = log.lines().rev().take(20).collect::<Vec<_>>().join("\n");
            let _ = wrapper.kill();
            return Err(format!(
                "{kind:?} at {endpoint} did not become ready ({}); last log lines, newest first:\n{tail}",
                match exited {
                    Some(status) => format!("exited: {status}"),
                    None => format!("not ready after {READY_TIMEOUT:?}"),
                }
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(Server {
        endpoint,
        _stdin: Mutex::new(stdin),
        _wrapper: Mutex::new(wrapper),
        _dir: dir,
    })
}

fn ready(kind: Kind, port: u16) -> bool {
    let url = match kind {
        Kind::Moto => format!("http://127.0.0.1:{port}/moto-api/"),
        Kind::LocalStack => format!("http://127.0.0.1:{port}/_localstack/health"),
    };
    match http("GET", &url, &[]) {
        Ok((200, body)) => match kind {
            Kind::Moto => true,
            Kind::LocalStack => {
                let body = String::from_utf8_lossy(&body);
                body.contains("\"s3\": \"available\"") || body.contains("\"s3\": \"running\"")
            }
        },
        _ => false,
    }
}

/// A plain HTTP/1.1 request over a fresh TCP connection (no TLS; the
/// servers listen on loopback): status and body. Just enough HTTP for
/// readiness checks and for fetching presigned URLs without the SDK.
pub fn http(method: &str, url: &str, body: &[u8]) -> Result<(u16, Vec<u8>), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url:?} is not http://"))?;
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };
    let mut stream = TcpStream::connect(host).map_err(|e| format!("connecting {host}: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(body))
        .map_err(|e| format!("sending to {host}: {e}"))?;
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .map_err(|e| format!("reading from {host}: {e}"))?;
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no end of headers")?;
    let head = String::from_utf8_lossy(&response[..split]).to_string();
    let mut payload = response[split + 4..].to_vec();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no status in {head:?}"))?;
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        payload = dechunk(&payload)?;
    }
    Ok((status, payload))
}

fn dechunk(mut data: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let line_end = data
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("a chunk without a size line")?;
        let size_text = String::from_utf8_lossy(&data[..line_end]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|e| format!("chunk size {size_text:?}: {e}"))?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        let chunk = data.get(..size).ok_or("a short chunk")?;
        out.extend_from_slice(chunk);
        data = data.get(size + 2..).ok_or("a chunk without its CRLF")?;
    }
}

/// The test credentials: S3-compatible test servers accept any.
pub fn credentials() -> Credentials {
    Credentials::new(
        "custodian-test",
        "custodian-test-secret",
        None,
        None,
        "tests",
    )
}

impl Server {
    /// A configuration for `bucket` on this server.
    pub fn config(&self, bucket: &str) -> S3Config {
        let mut config = S3Config::new(bucket);
        config.endpoint = Some(self.endpoint.clone());
        config.region = Some("us-east-1".into());
        config.force_path_style = true;
        config
    }

    /// A new, empty, versioned bucket with a name no other test uses.
    pub async fn fresh_bucket(&self) -> String {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let bucket = format!("ct-{}-{n}-{nanos}", std::process::id());
        let client = self
            .config(&bucket)
            .client(Some(super::config::shared_credentials(credentials())))
            .await
            .expect("a test client");
        client
            .create_bucket()
            .bucket(&bucket)
            .send()
            .await
            .unwrap_or_else(|e| panic!("creating {bucket}: {e:?}"));
        client
            .put_bucket_versioning()
            .bucket(&bucket)
            .versioning_configuration(
                VersioningConfiguration::builder()
                    .status(BucketVersioningStatus::Enabled)
                    .build(),
            )
            .send()
            .await
            .unwrap_or_else(|e| panic!("versioning {bucket}: {e:?}"));
        bucket
    }

    /// A store on a fresh bucket, not bootstrapped.
    pub async fn raw_store(&self) -> S3Store {
        let bucket = self.fresh_bucket().await;
        S3Store::connect_with_credentials(
            self.config(&bucket),
            Arc::new(SystemClock),
            credentials(),
        )
        .await
        .unwrap_or_else(|e| panic!("connecting to {bucket}: {e}"))
    }
}

/// A bootstrapped store on a fresh versioned bucket of `kind`'s server;
/// `None` when the server cannot run (see [`server`]).
pub async fn store(kind: Kind) -> Option<S3Store> {
    let server = server(kind)?;
    let store = server.raw_store().await;
    let report = super::super::ObjectAdmin::bootstrap(&store, "")
        .await
        .unwrap_or_else(|e| panic!("bootstrapping on {kind:?}: {e}"));
    assert!(report.ok(), "{report:?}");
    Some(store)
}
