//! The disk under a benchmark's files.

use std::path::Path;
use std::time::{Duration, Instant};

/// Flushes the filesystem holding `path` (`sync -f`: syncfs(2)) and how
/// long that took: what a timed part left the kernel to write back (a
/// journaled publish syncs only its record), so it can be counted.
pub fn syncfs(path: &Path) -> Duration {
    let started = Instant::now();
    let status = std::process::Command::new("sync")
        .arg("-f")
        .arg(path)
        .status()
        .expect("coreutils' sync runs");
    assert!(status.success(), "sync -f {}: {status}", path.display());
    started.elapsed()
}
