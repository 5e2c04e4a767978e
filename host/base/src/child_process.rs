//! Tests that need more than one process re-run their own test binary as
//! the children: `current_exe() --exact <module>::<test> --nocapture` with
//! an environment variable telling the child its role. The test function
//! sees the variable and plays the child instead of the parent.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The child processes of one test module.
pub struct ChildTests {
    /// The module's path, from `module_path!()`.
    module: &'static str,
    /// The variable a child finds its role in.
    env: &'static str,
}

impl ChildTests {
    /// Children of the tests in `module` (its `module_path!()`), told
    /// their role in the variable `env`.
    pub const fn new(module: &'static str, env: &'static str) -> Self {
        Self { module, env }
    }

    /// Runs this module's test `name` as a child process playing `role`.
    pub fn spawn(&self, name: &str, role: &str) -> Child {
        // Test names are relative to the crate: drop its name.
        let module = self
            .module
            .split_once("::")
            .map_or(self.module, |(_, rest)| rest);
        Command::new(std::env::current_exe().expect("the test binary"))
            .args([
                "--exact",
                &format!("{module}::{name}"),
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(self.env, role)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning a child test process")
    }

    /// The role of this process, if it is a child.
    pub fn role(&self) -> Option<String> {
        std::env::var(self.env).ok()
    }
}

/// What a child wrote on stderr (after it exited).
pub fn stderr_of(child: &mut Child) -> String {
    let mut text = String::new();
    if let Some(mut stderr) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
    }
    text
}

/// Waits until the child creates `path` (its "ready" signal), failing if
/// it exits first or takes more than 30 s.
pub fn wait_for(path: &Path, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !path.exists() {
        if let Some(status) = child.try_wait().expect("polling the child") {
            panic!("the child exited early ({status}): {}", stderr_of(child));
        }
        assert!(Instant::now() < deadline, "the child never got ready");
        std::thread::sleep(Duration::from_millis(1));
    }
}
