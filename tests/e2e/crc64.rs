//! `custodian crc64`: the output formats, stdin, failures, and agreement
//! with AWS's reference implementation (`awscrt` from PyPI).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use custodian::checksum::{READ_BLOCK, crc64_nvme};
use serde_json::Value;

use crate::support::{custodian, outcome, run};

/// The version of `awscrt` that `.ci/run` installs.
const AWSCRT: &str = "awscrt==0.38.1";

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Deterministic bytes that look random (splitmix64), so no run of equal
/// bytes hides a fault in how blocks are cut and folded.
fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Writes one file of each size into `dir`.
fn files(dir: &Path, sizes: &[usize]) -> Vec<PathBuf> {
    sizes
        .iter()
        .map(|&size| {
            let file = dir.join(format!("{size}.bin"));
            std::fs::write(&file, bytes(size, size as u64)).unwrap();
            file
        })
        .collect()
}

/// `custodian crc64 --json` on `files`, as (path, size, hex, wire).
fn custodian_json(files: &[PathBuf], extra: &[&str]) -> Vec<(String, u64, String, String)> {
    let mut args = vec!["crc64", "--json"];
    args.extend_from_slice(extra);
    args.extend(files.iter().map(|f| path(f)));
    let (code, stdout, stderr) = outcome(&run(&args));
    assert_eq!(code, 0, "{stderr}");
    let rows: Vec<Value> = serde_json::from_str(&stdout).unwrap();
    rows.iter()
        .map(|row| {
            (
                row["path"].as_str().unwrap().to_owned(),
                row["size"].as_u64().unwrap(),
                row["crc64"].as_str().unwrap().to_owned(),
                row["wire"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn crc64_prints_the_catalog_check_value_in_hex_and_wire_form() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("check.txt");
    std::fs::write(&file, "123456789").unwrap();
    let (code, stdout, stderr) = outcome(&run(&["crc64", path(&file)]));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stdout,
        format!("ae8b14860a799888  rosUhgp5mIg=  {}\n", path(&file))
    );
    assert_eq!(stderr, "");
}

#[test]
fn crc64_reads_stdin_for_a_dash() {
    let mut child = custodian()
        .args(["crc64", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"123456789").unwrap();
    let (code, stdout, stderr) = outcome(&child.wait_with_output().unwrap());
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "ae8b14860a799888  rosUhgp5mIg=  -\n");
}

#[test]
fn a_missing_file_exits_1_naming_it_while_the_other_files_still_print() {
    let dir = tempfile::tempdir().unwrap();
    let (first, last) = (dir.path().join("first"), dir.path().join("last"));
    std::fs::write(&first, "123456789").unwrap();
    std::fs::write(&last, "").unwrap();
    let missing = dir.path().join("missing");
    let (code, stdout, stderr) =
        outcome(&run(&["crc64", path(&first), path(&missing), path(&last)]));
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(
        stdout,
        format!(
            "ae8b14860a799888  rosUhgp5mIg=  {}\n0000000000000000  AAAAAAAAAAA=  {}\n",
            path(&first),
            path(&last)
        )
    );
    assert!(
        stderr.starts_with(&format!("error: cannot open {}\n", path(&missing)))
            && stderr.contains("caused by: ")
            && stderr.contains("1 of 3 files could not be checksummed"),
        "{stderr}"
    );

    // The JSON lists the files that were read; the failure is on stderr.
    let (code, stdout, stderr) = outcome(&run(&["crc64", "--json", path(&missing), path(&first)]));
    assert_eq!(code, 1, "{stderr}");
    let rows: Vec<Value> = serde_json::from_str(&stdout).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["path"], path(&first));
    assert!(stderr.contains(path(&missing)), "{stderr}");
}

#[test]
fn crc64_json_is_one_array_with_path_size_hex_and_wire_form() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("check.txt");
    std::fs::write(&file, "123456789").unwrap();
    let rows = custodian_json(std::slice::from_ref(&file), &[]);
    assert_eq!(
        rows,
        [(
            path(&file).to_owned(),
            9,
            "ae8b14860a799888".to_owned(),
            "rosUhgp5mIg=".to_owned()
        )]
    );
}

#[test]
fn crc64_help_explains_the_output_stdin_json_threads_and_failures() {
    let (code, stdout, _) = outcome(&run(&["crc64", "--help"]));
    assert_eq!(code, 0);
    for word in [
        "wire form",
        "`-`",
        "--json",
        "--threads",
        "progress bar",
        "constant",
        "exit code is 1",
    ] {
        assert!(stdout.contains(word), "crc64 --help lacks {word}: {stdout}");
    }
}

#[test]
fn every_thread_count_gives_the_one_pass_checksum_across_block_boundaries() {
    let dir = tempfile::tempdir().unwrap();
    let sizes = [READ_BLOCK - 1, READ_BLOCK, 2 * READ_BLOCK + 7];
    let files = files(dir.path(), &sizes);
    for threads in ["0", "1", "2", "3"] {
        let rows = custodian_json(&files, &["--threads", threads]);
        for ((file, size), (_, got_size, hex, _)) in files.iter().zip(sizes).zip(rows) {
            let expected = crc64_nvme(&std::fs::read(file).unwrap());
            assert_eq!(got_size, size as u64);
            assert_eq!(hex, format!("{expected:016x}"), "{size} bytes, {threads}");
        }
    }
}

/// Prints, for each path in argv, `HEX SIZE` as awscrt computes it, reading
/// in 1 MiB pieces and chaining `previous_crc64nvme`.
const AWSCRT_SCRIPT: &str = r#"
import sys
from awscrt.checksums import crc64nvme
for name in sys.argv[1:]:
    crc, size = 0, 0
    with open(name, "rb") as f:
        while True:
            piece = f.read(1 << 20)
            if not piece:
                break
            crc = crc64nvme(piece, crc)
            size += len(piece)
    print("%016x %d" % (crc, size))
"#;

/// The Python with awscrt, or `None` (after saying why) when this is not CI
/// and it is missing. Under `CI=true` a missing awscrt fails the test.
fn python_with_awscrt() -> Option<String> {
    let python = std::env::var("CUSTODIAN_PYTHON").unwrap_or_else(|_| "python3".into());
    let probe = Command::new(&python)
        .args(["-c", "import awscrt.checksums"])
        .output();
    let problem = match probe {
        Ok(output) if output.status.success() => return Some(python),
        // The last line of a traceback says what went wrong.
        Ok(output) => String::from_utf8_lossy(&output.stderr)
            .lines()
            .last()
            .unwrap_or("no message")
            .to_owned(),
        Err(e) => format!("cannot run {python}: {e}"),
    };
    let how = format!(
        "install it with `{python} -m pip install '{AWSCRT}'`, or point \
         CUSTODIAN_PYTHON at a Python that has it (.ci/run makes a venv \
         with it)"
    );
    if std::env::var("CI").is_ok_and(|ci| ci == "true") {
        panic!("awscrt cannot be imported by {python}: {problem}\n{how}");
    }
    eprintln!(
        "notice: skipping the comparison with awscrt: it cannot be imported \
         by {python} ({problem}); {how}"
    );
    None
}

#[test]
fn crc64_agrees_with_awscrt_on_files_of_several_sizes() {
    let Some(python) = python_with_awscrt() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let files = files(dir.path(), &[0, 1, 4095, (1 << 20) + 7, (40 << 20) + 13]);

    let output = Command::new(&python)
        .arg("-c")
        .arg(AWSCRT_SCRIPT)
        .args(&files)
        .output()
        .unwrap();
    let (code, stdout, stderr) = outcome(&output);
    assert_eq!(code, 0, "awscrt failed: {stderr}");
    let reference: Vec<(String, u64)> = stdout
        .lines()
        .map(|line| {
            let (hex, size) = line.split_once(' ').unwrap();
            (hex.to_owned(), size.parse().unwrap())
        })
        .collect();
    assert_eq!(reference.len(), files.len(), "{stdout}");

    let ours = custodian_json(&files, &[]);
    for ((file, (hex, size)), (got_path, got_size, got_hex, got_wire)) in
        files.iter().zip(reference).zip(ours)
    {
        assert_eq!(got_path, path(file));
        assert_eq!(
            (got_hex.as_str(), got_size),
            (hex.as_str(), size),
            "{got_path}"
        );
        let crc = u64::from_str_radix(&hex, 16).unwrap();
        assert_eq!(got_wire, custodian::checksum::to_wire(crc), "{got_path}");
    }
}
