//! `custodian crc64 FILE...`: the CRC-64/NVME of files, in hex and in S3's
//! wire form, read in constant memory.

use std::fs::File;
use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow};
use clap::Args;
use custodian::checksum::{self, ReadCrc};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};

use super::{Failure, Outcome, report};

#[derive(Debug, Args)]
pub struct Crc64Args {
    /// The files to checksum, in order; `-` reads stdin.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Print one JSON array of {path, size, crc64, wire} instead of text.
    #[arg(long)]
    pub json: bool,
    /// Threads hashing each block, at most 64; 0 uses every available
    /// core.
    // Bounded so a typo cannot ask for thousands of threads; the checksum
    // module caps the count at the same number.
    #[arg(
        long,
        default_value_t = 0,
        value_name = "N",
        value_parser = clap::value_parser!(u16).range(0..=custodian::checksum::MAX_THREADS as i64)
    )]
    pub threads: u16,
}

/// Files at least this large get a progress bar (when stderr is a
/// terminal). Smaller ones take well under a second even from a slow disk
/// (~100 MB/s), and a bar that flashes and vanishes only adds noise.
const PROGRESS_FROM: u64 = 64 << 20;

pub(super) fn run(args: &Crc64Args) -> Outcome {
    let threads = usize::from(args.threads);
    let mut stdout = io::stdout().lock();
    let mut entries = Vec::new();
    let mut failed = 0;
    for path in &args.files {
        let name = path.display().to_string();
        match checksum_file(path, threads) {
            Ok(read) if args.json => entries.push(entry(&name, read)),
            // Printed as soon as it is known: stdout is line-buffered, so a
            // long list shows its progress file by file.
            Ok(read) => writeln!(stdout, "{}", line(&name, read.crc)).map_err(cannot_write)?,
            Err(error) => {
                // Reported now, and the next file is still checksummed.
                failed += 1;
                report(&error);
            }
        }
    }
    if args.json {
        serde_json::to_writer_pretty(&mut stdout, &entries)
            .map_err(io::Error::from)
            .and_then(|()| writeln!(stdout))
            .map_err(cannot_write)?;
    }
    if failed > 0 {
        return Err(Failure::Failed(anyhow!(
            "{failed} of {} files could not be checksummed",
            args.files.len()
        )));
    }
    Ok(())
}

fn cannot_write(error: io::Error) -> Failure {
    Failure::Failed(anyhow::Error::new(error).context("cannot write to stdout"))
}

/// The text line for one file: hex, wire form, name.
fn line(name: &str, crc: u64) -> String {
    format!("{crc:016x}  {}  {name}", checksum::to_wire(crc))
}

/// The JSON object for one file.
fn entry(name: &str, read: ReadCrc) -> Value {
    json!({
        "path": name,
        "size": read.size,
        "crc64": format!("{:016x}", read.crc),
        "wire": checksum::to_wire(read.crc),
    })
}

/// Reads `path` (`-`: stdin) to its end and checksums it.
fn checksum_file(path: &Path, threads: usize) -> anyhow::Result<ReadCrc> {
    if path.as_os_str() == "-" {
        return checksum::crc64_nvme_read(io::stdin().lock(), threads, |_| {})
            .context("cannot read stdin");
    }
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    // Only a regular file has a size worth a bar; a pipe or device is read
    // all the same.
    let size = file
        .metadata()
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.len());
    let bar = size.and_then(|size| progress_bar(path, size));
    let read = checksum::crc64_nvme_read(file, threads, |done| {
        if let Some(bar) = &bar {
            bar.set_position(done);
        }
    });
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    read.with_context(|| format!("cannot read {}", path.display()))
}

/// A progress bar on stderr for a large file, if stderr is a terminal.
fn progress_bar(path: &Path, size: u64) -> Option<ProgressBar> {
    if size < PROGRESS_FROM || !io::stderr().is_terminal() {
        return None;
    }
    let style = ProgressStyle::with_template(
        "{msg} [{bar:30}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} {eta}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ");
    Some(
        ProgressBar::new(size)
            .with_style(style)
            .with_message(path.display().to_string()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_the_hex_then_the_wire_form_then_the_name() {
        assert_eq!(
            line("check.txt", 0xAE8B_1486_0A79_9888),
            "ae8b14860a799888  rosUhgp5mIg=  check.txt"
        );
        assert_eq!(line("-", 0), "0000000000000000  AAAAAAAAAAA=  -");
    }

    #[test]
    fn a_json_entry_has_the_path_size_hex_and_wire_form() {
        let read = ReadCrc {
            crc: 0xAE8B_1486_0A79_9888,
            size: 9,
        };
        assert_eq!(
            entry("check.txt", read),
            json!({"path": "check.txt", "size": 9, "crc64": "ae8b14860a799888", "wire": "rosUhgp5mIg="})
        );
    }
}
