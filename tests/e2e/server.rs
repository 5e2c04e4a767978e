//! A `custodian serve` process for end-to-end tests, and the HTTP client
//! helpers that talk to it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::custodian;

/// The bearer token every test server is started with.
pub const TOKEN: &str = "e2e-token-0123456789abcdef";

/// A running `custodian serve`, killed if a test ends without stopping it.
pub struct Server {
    child: Child,
    /// `http://127.0.0.1:PORT`; a restart picks a new port.
    pub base: String,
    /// The S3 endpoint's `http://127.0.0.1:PORT`, when started with
    /// `--s3-listen`.
    pub s3: Option<String>,
    /// The data directory, kept across restarts.
    pub data: PathBuf,
    extra: Vec<String>,
    env: Vec<(String, String)>,
    dir: tempfile::TempDir,
}

impl Server {
    /// Starts the server with `config` (TOML) on a free loopback port.
    pub fn start(config: &str) -> Self {
        Self::start_with(config, &[])
    }

    /// The configuration file the server was started with.
    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("custodian.toml")
    }

    /// [`Server::start`] with extra arguments.
    pub fn start_with(config: &str, extra: &[&str]) -> Self {
        Self::start_prepared(config, extra, |_| {})
    }

    /// [`Server::start_with`], after `prepare` has set up the data
    /// directory (with the CLI, which cannot open it while a server runs).
    pub fn start_prepared(config: &str, extra: &[&str], prepare: impl FnOnce(&Path)) -> Self {
        Self::start_in_env(config, extra, &[], prepare)
    }

    /// [`Server::start_prepared`] with extra environment variables.
    pub fn start_in_env(
        config: &str,
        extra: &[&str],
        env: &[(&str, &str)],
        prepare: impl FnOnce(&Path),
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        prepare(&data);
        std::fs::write(dir.path().join("custodian.toml"), config).unwrap();
        let extra: Vec<String> = extra.iter().map(|s| (*s).to_owned()).collect();
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let (child, base, s3) = spawn(dir.path(), &data, &extra, &env);
        Self {
            child,
            base,
            s3,
            data,
            extra,
            env,
            dir,
        }
    }

    /// The server's log (stderr), across restarts.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// `base` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// SIGKILL, and wait for the process to be gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the server again on the same data directory and
    /// configuration (on a new port); the old process must be gone.
    pub fn restart(&mut self) {
        assert!(!self.is_running(), "restart of a running server");
        let (child, base, s3) = spawn(self.dir.path(), &self.data, &self.extra, &self.env);
        self.child = child;
        self.base = base;
        self.s3 = s3;
    }

    /// Sends SIGTERM and waits for the exit.
    pub fn terminate(&mut self) -> ExitStatus {
        let status = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the server did not exit after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts `custodian serve` for the server in `dir`; its process, the
/// address it printed and, with `--s3-listen`, the S3 endpoint's.
fn spawn(
    dir: &Path,
    data: &Path,
    extra: &[String],
    env: &[(String, String)],
) -> (Child, String, Option<String>) {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("server.log"))
        .unwrap();
    let mut child = custodian()
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(data)
        .arg("--config")
        .arg(dir.join("custodian.toml"))
        .args(extra)
        .env("CUSTODIAN_TOKEN", TOKEN)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        .spawn()
        .expect("the server starts");
    let stdout = child.stdout.take().unwrap();
    let lines = if extra.iter().any(|a| a == "--s3-listen") {
        2
    } else {
        1
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        for _ in 0..lines {
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            let _ = tx.send(line);
        }
    });
    let line = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("the server says where it listens");
    let base = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| {
            let log = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
            panic!("unexpected first line {line:?}; log:\n{log}")
        })
        .to_owned();
    let s3 = (lines == 2).then(|| {
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the server says where its S3 endpoint listens");
        line.trim()
            .strip_prefix("s3 endpoint on ")
            .unwrap_or_else(|| panic!("unexpected second line {line:?}"))
            .to_owned()
    });
    (child, base, s3)
}

/// An HTTP client that reports statuses instead of failing on them.
pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(120)))
        .build()
        .into()
}

/// Status and JSON body of a response.
pub fn answer(response: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> (u16, Value) {
    let mut response = response.expect("the server answers");
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// Status and raw body of a response (up to 64 MiB).
pub fn answer_bytes(
    response: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
) -> (u16, Vec<u8>) {
    let mut response = response.expect("the server answers");
    let status = response.status().as_u16();
    let body = response
        .body_mut()
        .with_config()
        .limit(64 << 20)
        .read_to_vec()
        .unwrap();
    (status, body)
}

/// `value` as a request body.
pub fn json_body(value: Value) -> Vec<u8> {
    value.to_string().into_bytes()
}

/// The `Authorization` header value.
pub fn bearer() -> String {
    format!("Bearer {TOKEN}")
}

/// Polls `done` every 100 ms until it holds, failing after `timeout`.
pub fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Schedules takedown timer `reference`, due at once, on the data
/// directory `data` of a server not yet started (with the CLI).
pub fn schedule_takedown_timer(data: &Path, reference: &str) {
    let output = custodian()
        .args(["timer", "schedule", "--data"])
        .arg(data)
        .args(["takedown", reference, "--due", "0"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
}

/// The steps each timer of `server` has taken, in due order.
pub fn timer_steps(server: &Server) -> Vec<u64> {
    let (status, body) = answer(
        agent()
            .get(&server.url("/v1/timers"))
            .header("Authorization", bearer())
            .call(),
    );
    assert_eq!(status, 200, "{body}");
    body["timers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["steps"].as_u64().unwrap())
        .collect()
}
