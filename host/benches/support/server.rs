//! `custodian serve` for the benchmarks that drive the real binary: one
//! way to start it on a free loopback port and to stop it, shared by those
//! benchmarks (each includes this file as a module).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// The bootstrap token every benchmark server starts with.
pub const TOKEN: &str = "bench-token-0123456789abcdef";

/// A running server, killed when dropped.
pub struct Server {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// The S3 endpoint's `http://127.0.0.1:PORT`, when started with
    /// `--s3-listen`.
    // Only the S3 peer benchmark reads it; every benchmark includes this
    // module whole.
    #[allow(dead_code)]
    pub s3: Option<String>,
}

impl Server {
    /// Runs `command` (the `custodian` binary with the benchmark's global
    /// options and environment) as `serve --listen 127.0.0.1:0` followed
    /// by `args`, with [`TOKEN`], and waits for the line saying where it
    /// listens.
    pub fn start(mut command: Command, args: &[&std::ffi::OsStr]) -> Self {
        let mut child = command
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(args)
            .env("CUSTODIAN_TOKEN", TOKEN)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the server starts");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut line = String::new();
        stdout
            .read_line(&mut line)
            .expect("the server writes where it listens");
        let base = line
            .trim()
            .strip_prefix("listening on ")
            .expect("the server says where it listens")
            .to_owned();
        // The S3 endpoint's line follows at once; it is read before the
        // pipe is dropped, so the server never writes into a closed one.
        let s3 = args.iter().any(|a| *a == "--s3-listen").then(|| {
            line.clear();
            stdout
                .read_line(&mut line)
                .expect("the server writes where its S3 endpoint listens");
            line.trim()
                .strip_prefix("s3 endpoint on ")
                .expect("the server says where its S3 endpoint listens")
                .to_owned()
        });
        Self { child, base, s3 }
    }

    /// The server's process id.
    // Only the soak benchmark samples the process; every benchmark
    // includes this module whole.
    #[allow(dead_code)]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
