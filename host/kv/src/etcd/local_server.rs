//! Real etcd clusters for tests: each member its own `etcd` process with
//! its own data directory, on 127.0.0.1 and free ports. Compiled for the
//! crate's tests and with the `local-servers` feature (end-to-end tests
//! in other crates).
//!
//! The binary is `$CUSTODIAN_ETCD` if set, else `etcd` on `PATH`; the
//! flags are etcd 3.4's. Members keep etcd's defaults, fsync included:
//! what the tests see committed is durable as in production.
//!
//! # Processes
//!
//! Each member runs under a small `sh` wrapper whose stdin is a pipe from
//! this process:
//!
//! ```text
//! sh -c '"$etcd" <flags> >>log 2>&1 & echo $!; read what; kill -9 $!; wait; [ "$what" = keep ] || rm -rf <member dir>'
//! ```
//!
//! - [`EtcdCluster::kill`] writes `keep`: the wrapper SIGKILLs the etcd
//!   process itself and keeps its data directory for
//!   [`EtcdCluster::restart`].
//! - Closing the pipe (dropping the cluster, or this process exiting in
//!   any way, even by SIGKILL) SIGKILLs etcd and removes the member's
//!   directory. So a test process never leaks etcd processes, and the
//!   clusters [`shared`] keeps in statics (which are never dropped) stop
//!   when the process ends.
//! - A cluster dropped while its test panics keeps every directory, logs
//!   included, and prints where. A member that is killed (not restarted)
//!   when the process dies leaves its directory behind.

use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a cluster may take to elect a leader and answer, and a
/// restarted member to answer. Generous: a busy CI machine with fsync is
/// slow.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Attempts at starting a cluster: a free port found by binding can be
/// taken by someone else before etcd binds it.
const START_ATTEMPTS: usize = 3;
/// The environment variable naming the etcd binary.
pub const ENV_ETCD_BINARY: &str = "CUSTODIAN_ETCD";

/// The wrapper of one member; `$1` is etcd, `$2` the member's directory,
/// `$3` the cluster's directory, the rest etcd's flags.
const WRAPPER: &str = r#"etcd="$1"; dir="$2"; root="$3"; shift 3
"$etcd" "$@" >>"$dir/etcd.log" 2>&1 </dev/null &
pid=$!
echo $pid
read what
kill -9 $pid 2>/dev/null
wait $pid
if [ "$what" != keep ]; then
  rm -rf "$dir"
  rmdir "$root" 2>/dev/null
fi
exit 0"#;

/// A real etcd cluster of N members on 127.0.0.1 free ports, each member
/// its own process and data dir.
pub struct EtcdCluster {
    etcd: PathBuf,
    root: PathBuf,
    token: String,
    members: Vec<Member>,
}

struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    dir: PathBuf,
    process: Option<Process>,
}

/// A running member: its wrapper, the pipe that stops it, etcd's pid.
struct Process {
    wrapper: Child,
    stdin: ChildStdin,
    pid: u32,
}

impl EtcdCluster {
    /// Starts `members` members (1 or 3) and waits until the cluster
    /// answers; Err(why) if etcd cannot run.
    pub fn start(members: usize) -> Result<EtcdCluster, String> {
        if members != 1 && members != 3 {
            return Err(format!("a test cluster has 1 or 3 members, not {members}"));
        }
        let etcd = etcd_binary()?;
        let mut last = String::new();
        for _ in 0..START_ATTEMPTS {
            match Self::start_once(&etcd, members) {
                Ok(cluster) => return Ok(cluster),
                // A port taken under us: try again on new ones.
                Err(why) => last = why,
            }
        }
        Err(last)
    }

    fn start_once(etcd: &Path, members: usize) -> Result<EtcdCluster, String> {
        static CLUSTERS: AtomicU64 = AtomicU64::new(0);
        let root = tempfile::Builder::new()
            .prefix("custodian-etcd-")
            .tempdir()
            .map_err(|e| format!("a temp dir: {e}"))?
            .keep();
        let ports = free_ports(2 * members)?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let token = format!(
            "custodian-{}-{}-{nanos}",
            std::process::id(),
            CLUSTERS.fetch_add(1, Ordering::Relaxed)
        );
        let mut cluster = EtcdCluster {
            etcd: etcd.to_owned(),
            token,
            members: (0..members)
                .map(|i| Member {
                    name: format!("m{i}"),
                    client_port: ports[2 * i],
                    peer_port: ports[2 * i + 1],
                    dir: root.join(format!("m{i}")),
                    process: None,
                })
                .collect(),
            root,
        };
        for i in 0..members {
            cluster.spawn(i)?;
        }
        cluster.wait_healthy(READY_TIMEOUT)?;
        Ok(cluster)
    }

    /// Like `start`, but `None` after printing "skipping: ..." when etcd
    /// is missing, and a panic under CI=true.
    pub fn start_or_skip(members: usize) -> Option<EtcdCluster> {
        match Self::start(members) {
            Ok(cluster) => Some(cluster),
            Err(why) => skip_or_panic(&why),
        }
    }

    /// Client URLs, "http://127.0.0.1:PORT", one per member.
    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|member| format!("http://127.0.0.1:{}", member.client_port))
            .collect()
    }

    /// How many members the cluster has, running or not.
    pub fn members(&self) -> usize {
        self.members.len()
    }

    /// SIGKILL member i (no-op if not running).
    pub fn kill(&mut self, member: usize) {
        if let Some(process) = self.members[member].process.take() {
            process.stop(true);
        }
    }

    /// Starts a killed member again on the same ports and data dir (it
    /// rejoins the cluster). When a majority of the members is running,
    /// waits until the member is healthy (it has rejoined); otherwise only
    /// until it listens for its peers, since etcd serves clients only once
    /// a majority is up (restart the others, then
    /// [`EtcdCluster::wait_healthy`]). A running member is left alone.
    pub fn restart(&mut self, member: usize) -> Result<(), String> {
        if self.is_running(member) {
            return Ok(());
        }
        // A member that died on its own still has its wrapper waiting.
        self.kill(member);
        self.spawn(member)?;
        let deadline = Instant::now() + READY_TIMEOUT;
        let peer = std::net::SocketAddr::from(([127, 0, 0, 1], self.members[member].peer_port));
        while std::net::TcpStream::connect_timeout(&peer, Duration::from_secs(1)).is_err() {
            if !self.is_running(member) || Instant::now() > deadline {
                return Err(self.failure(member, "did not listen for its peers after a restart"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let running = (0..self.members.len())
            .filter(|&i| self.is_running(i))
            .count();
        if 2 * running > self.members.len() {
            while health(self.members[member].client_port) != Some(true) {
                if !self.is_running(member) || Instant::now() > deadline {
                    return Err(self.failure(member, "did not rejoin after a restart"));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(())
    }

    /// Whether member i's etcd process is alive.
    pub fn is_running(&self, member: usize) -> bool {
        self.members[member]
            .process
            .as_ref()
            .is_some_and(|process| alive(process.pid))
    }

    /// Waits until every running member reports itself healthy (it has a
    /// leader and answers a quorum read).
    ///
    /// # Errors
    /// Why not, after `timeout`, or as soon as a member has died.
    pub fn wait_healthy(&self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            let mut waiting = None;
            for (i, member) in self.members.iter().enumerate() {
                if member.process.is_none() {
                    continue;
                }
                if !self.is_running(i) {
                    return Err(self.failure(i, "exited"));
                }
                if health(member.client_port) != Some(true) {
                    waiting = Some(i);
                }
            }
            match waiting {
                None => return Ok(()),
                Some(i) if Instant::now() > deadline => {
                    return Err(self.failure(i, &format!("was not healthy within {timeout:?}")));
                }
                Some(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// The member that is the raft leader, as the running members see it;
    /// `None` when none of them knows a leader that is running.
    pub fn leader(&self) -> Option<usize> {
        let ids: Vec<Option<(String, String)>> = (0..self.members.len())
            .map(|i| {
                if self.is_running(i) {
                    status(self.members[i].client_port)
                } else {
                    None
                }
            })
            .collect();
        let leader = ids.iter().flatten().map(|(_, leader)| leader).next()?;
        ids.iter()
            .position(|id| id.as_ref().is_some_and(|(member, _)| member == leader))
    }

    /// Starts member i's wrapper.
    fn spawn(&mut self, i: usize) -> Result<(), String> {
        let member = &self.members[i];
        std::fs::create_dir_all(&member.dir)
            .map_err(|e| format!("creating {}: {e}", member.dir.display()))?;
        let peer = |m: &Member| format!("http://127.0.0.1:{}", m.peer_port);
        let client = format!("http://127.0.0.1:{}", member.client_port);
        let initial_cluster = self
            .members
            .iter()
            .map(|m| format!("{}={}", m.name, peer(m)))
            .collect::<Vec<_>>()
            .join(",");
        let mut wrapper = Command::new("sh")
            .arg("-c")
            .arg(WRAPPER)
            .arg("sh")
            .arg(&self.etcd)
            .arg(&member.dir)
            .arg(&self.root)
            .args(["--name", &member.name])
            .arg("--data-dir")
            .arg(member.dir.join("data"))
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer(member)])
            .args(["--initial-advertise-peer-urls", &peer(member)])
            .args(["--initial-cluster", &initial_cluster])
            // Ignored by a member that restarts on an existing data dir.
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", &self.token])
            .args(["--logger", "zap", "--log-outputs", "stderr"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting sh for etcd: {e}"))?;
        let stdin = wrapper
            .stdin
            .take()
            .ok_or("the wrapper's stdin was not piped")?;
        let stdout = wrapper
            .stdout
            .take()
            .ok_or("the wrapper's stdout was not piped")?;
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .map_err(|e| format!("reading etcd's pid: {e}"))?;
        let pid = line.trim().parse().map_err(|_| {
            let _ = wrapper.kill();
            format!("the etcd wrapper printed {line:?}, not a pid")
        })?;
        self.members[i].process = Some(Process {
            wrapper,
            stdin,
            pid,
        });
        Ok(())
    }

    /// `why` about member i, with the last lines of its log.
    fn failure(&self, i: usize, why: &str) -> String {
        let member = &self.members[i];
        let log = std::fs::read_to_string(member.dir.join("etcd.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(15).collect();
        format!(
            "etcd member {} (client port {}) {why}; last log lines, newest first:\n{}",
            member.name,
            member.client_port,
            tail.join("\n")
        )
    }
}

impl Process {
    /// SIGKILLs etcd through the wrapper and waits until it is gone; with
    /// `keep`, its data directory stays.
    fn stop(mut self, keep: bool) {
        if keep {
            // If the wrapper is gone the pipe is broken; it is stopping anyway.
            let _ = self.stdin.write_all(b"keep\n");
        }
        drop(self.stdin);
        let _ = self.wrapper.wait();
    }
}

/// Kills every member and removes the data dirs; a test that is
/// panicking keeps them (logs included) and says where.
impl Drop for EtcdCluster {
    fn drop(&mut self) {
        let keep = std::thread::panicking();
        for member in &mut self.members {
            if let Some(process) = member.process.take() {
                process.stop(keep);
            }
        }
        if keep {
            eprintln!(
                "etcd cluster kept for inspection in {}",
                self.root.display()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

/// One single-member and one 3-member cluster shared by the whole test
/// process, started on first use, stopped at process exit: their client
/// URLs, or `None` (having said why) when etcd cannot run.
///
/// # Panics
/// Under `CI=true` when etcd cannot run (CI must not pass by skipping),
/// and for a size other than 1 or 3.
pub fn shared(members: usize) -> Option<&'static [String]> {
    static ONE: OnceLock<Result<(EtcdCluster, Vec<String>), String>> = OnceLock::new();
    static THREE: OnceLock<Result<(EtcdCluster, Vec<String>), String>> = OnceLock::new();
    let slot = match members {
        1 => &ONE,
        3 => &THREE,
        _ => panic!("the shared etcd clusters have 1 or 3 members, not {members}"),
    };
    let started = slot.get_or_init(|| {
        EtcdCluster::start(members).map(|cluster| {
            let endpoints = cluster.endpoints();
            (cluster, endpoints)
        })
    });
    match started {
        Ok((_, endpoints)) => Some(endpoints),
        Err(why) => skip_or_panic(why),
    }
}

fn skip_or_panic<T>(why: &str) -> Option<T> {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("etcd is required under CI=true: {why}");
    }
    eprintln!("skipping: etcd unavailable: {why}");
    None
}

/// `$CUSTODIAN_ETCD`, or `etcd` on `PATH`.
pub(super) fn etcd_binary() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os(ENV_ETCD_BINARY) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!(
                "{ENV_ETCD_BINARY}={} is not a file",
                path.display()
            ))
        };
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("etcd"))
        .find(|path| path.is_file())
        .ok_or_else(|| format!("etcd is not on PATH and {ENV_ETCD_BINARY} is not set"))
}

/// `n` distinct ports that were free a moment ago.
pub(super) fn free_ports(n: usize) -> Result<Vec<u16>, String> {
    // Holding every listener until all are bound keeps the ports distinct.
    let listeners = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("binding a port: {e}"))?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("reading a port: {e}"))
}

/// Whether `pid` is a live process (not gone, not a zombie).
fn alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the command name, which is in parentheses and
    // may itself contain spaces or parentheses.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next());
    !matches!(state, None | Some("Z" | "X" | "x"))
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(2)))
        .build()
        .into()
}

/// What the member on `port` says of its health: `None` when it does not
/// answer, else whether it has a leader and serves quorum reads.
fn health(port: u16) -> Option<bool> {
    let mut response = agent()
        .get(&format!("http://127.0.0.1:{port}/health"))
        .call()
        .ok()?;
    let body = response.body_mut().read_to_string().ok()?;
    let health: serde_json::Value = serde_json::from_str(&body).ok()?;
    Some(health["health"] == "true")
}

/// The member's own id and its leader's id, through etcd's JSON gateway.
fn status(port: u16) -> Option<(String, String)> {
    let mut response = agent()
        .post(&format!("http://127.0.0.1:{port}/v3/maintenance/status"))
        .send("{}")
        .ok()?;
    let body = response.body_mut().read_to_string().ok()?;
    let status: serde_json::Value = serde_json::from_str(&body).ok()?;
    let member = status["header"]["member_id"].as_str()?.to_owned();
    let leader = status["leader"].as_str()?.to_owned();
    (leader != "0").then_some((member, leader))
}
