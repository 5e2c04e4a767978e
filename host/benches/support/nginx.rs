//! nginx (Debian's `nginx` package) serving one file from a directory of
//! its own, as a reference for what reading a static body over HTTP costs
//! on this machine. A benchmark that finds no nginx says so and goes on
//! without the reference.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running nginx, stopped (gracefully, so no worker outlives it) when
/// dropped.
pub struct Nginx {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
}

/// The nginx to run: `$CUSTODIAN_NGINX`, else `nginx` on the `PATH`, else
/// Debian's `/usr/sbin/nginx` (not on a non-root user's `PATH`).
fn binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("CUSTODIAN_NGINX") {
        return Some(path.into());
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("nginx"))
            .find(|candidate| candidate.is_file())
    });
    on_path.or_else(|| {
        let debian = PathBuf::from("/usr/sbin/nginx");
        debian.is_file().then_some(debian)
    })
}

impl Nginx {
    /// Starts nginx on a free port of 127.0.0.1 with `dir` as its prefix,
    /// serving `files` (name, bytes) from `dir/www` with its usual
    /// static-file settings (`sendfile` on) and as many workers as the
    /// machine has cores, as a deployer would run it. `None`, with the
    /// reason printed, when there is no nginx or it does not start.
    pub fn start(dir: &Path, files: &[(&str, &[u8])]) -> Option<Self> {
        let Some(binary) = binary() else {
            println!(
                "no nginx found (CUSTODIAN_NGINX, PATH, /usr/sbin/nginx): no static-file reference"
            );
            return None;
        };
        let www = dir.join("www");
        std::fs::create_dir_all(dir.join("temp")).unwrap();
        std::fs::create_dir_all(&www).unwrap();
        for (name, bytes) in files {
            std::fs::write(www.join(name), bytes).unwrap();
        }
        // A port nobody holds now; nginx binds it a moment later.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let temp = dir.join("temp");
        let temp = temp.display();
        // As root, nginx's workers would drop to `nobody`, who cannot
        // read a private temporary directory: they stay root instead.
        let user = if is_root() { "user root;" } else { "" };
        let config = format!(
            "{user}
daemon off;
worker_processes auto;
pid {dir}/nginx.pid;
error_log {dir}/error.log;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  sendfile on;
  keepalive_requests 1000000;
  client_body_temp_path {temp}/body;
  proxy_temp_path {temp}/proxy;
  fastcgi_temp_path {temp}/fastcgi;
  uwsgi_temp_path {temp}/uwsgi;
  scgi_temp_path {temp}/scgi;
  server {{
    listen 127.0.0.1:{port};
    root {www};
  }}
}}
",
            dir = dir.display(),
            www = www.display(),
        );
        let config_path = dir.join("nginx.conf");
        std::fs::write(&config_path, config).unwrap();
        let child = Command::new(&binary)
            .arg("-p")
            .arg(dir)
            .arg("-e")
            .arg(dir.join("error.log"))
            .arg("-c")
            .arg(&config_path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let mut child = match child {
            Ok(child) => child,
            Err(e) => {
                println!(
                    "{} did not start ({e}): no static-file reference",
                    binary.display()
                );
                return None;
            }
        };
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if started.elapsed() > Duration::from_secs(10)
                || child.try_wait().ok().flatten().is_some()
            {
                let log = std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
                let _ = child.kill();
                let _ = child.wait();
                println!("nginx did not start listening: no static-file reference\n{log}");
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(Self {
            child,
            base: format!("http://127.0.0.1:{port}"),
        })
    }
}

/// Whether this process runs as root (`id -u` is 0).
fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGQUIT: the master stops its workers and exits; a SIGKILL of
        // the master alone would leave them serving the port.
        let _ = Command::new("kill")
            .args(["-QUIT", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}
