//! `wrk` (Debian's package) for the benchmarks that load a server over
//! HTTP: one run and the figures read from its report, shared by those
//! benchmarks (each includes this file as a module).

use std::path::Path;
use std::process::Command;

/// Requests per second, p50 and p99 in ms, and failures: non-2xx answers
/// and broken connections.
#[derive(Debug, Clone, Copy)]
pub struct Figures {
    pub rps: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub errors: u64,
}

fn millis(text: &str) -> f64 {
    let text = text.trim();
    for (unit, factor) in [("us", 1e-3), ("ms", 1.0), ("s", 1e3)] {
        if let Some(number) = text.strip_suffix(unit)
            && let Ok(value) = number.parse::<f64>()
        {
            return value * factor;
        }
    }
    panic!("not a wrk latency: {text:?}")
}

/// Runs wrk for `seconds` with 2 threads and 16 connections against
/// `base` + `path`, with `script` (Lua) when given.
pub fn run(base: &str, seconds: u64, script: Option<&Path>, path: &str) -> Figures {
    let mut command = Command::new("wrk");
    command.args(["-t2", "-c16", "--latency", &format!("-d{seconds}s")]);
    if let Some(script) = script {
        command.arg("-s").arg(script);
    }
    let output = command
        .arg(format!("{base}{path}"))
        .output()
        .expect("wrk runs (apt-get install wrk)");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let field = |prefix: &str| -> Option<String> {
        text.lines()
            .find(|l| l.trim_start().starts_with(prefix))
            .map(|l| l.trim_start()[prefix.len()..].trim().to_owned())
    };
    let rps: f64 = field("Requests/sec:")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no requests/sec in {text}"));
    let p50 = millis(&field("50%").unwrap_or_else(|| panic!("no p50 in {text}")));
    let p99 = millis(&field("99%").unwrap_or_else(|| panic!("no p99 in {text}")));
    // Both refused answers and broken connections count as failures.
    let mut errors = field("Non-2xx or 3xx responses:")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if let Some(socket) = field("Socket errors:") {
        errors += socket
            .split(',')
            .filter_map(|part| part.split_whitespace().last()?.parse::<u64>().ok())
            .sum::<u64>();
    }
    Figures {
        rps,
        p50_ms: p50,
        p99_ms: p99,
        errors,
    }
}
