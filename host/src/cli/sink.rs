//! Where a command writes bytes it reads from a store: stdout (`-`), or a
//! file written under a temporary name beside it and renamed into place
//! when complete, so a failed or interrupted read leaves nothing behind
//! and never a half-written file under the target's name.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;

/// An output being written.
pub(super) enum Sink {
    /// Standard output.
    Stdout(std::io::StdoutLock<'static>),
    /// A temporary file beside the target, renamed onto it when complete.
    File(tempfile::NamedTempFile, PathBuf),
}

impl Sink {
    /// Opens `target` (`-` is stdout).
    ///
    /// # Errors
    /// When no temporary file can be made beside the target.
    pub(super) fn open(target: &str) -> anyhow::Result<Self> {
        if target == "-" {
            return Ok(Sink::Stdout(std::io::stdout().lock()));
        }
        let target = PathBuf::from(target);
        let dir = target
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let temp = tempfile::NamedTempFile::new_in(dir)
            .with_context(|| format!("cannot write into {}", dir.display()))?;
        Ok(Sink::File(temp, target))
    }

    /// Writes `bytes`.
    ///
    /// # Errors
    /// When the output cannot be written.
    pub(super) fn write_all(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        match self {
            Sink::Stdout(out) => out.write_all(bytes),
            Sink::File(temp, _) => temp.write_all(bytes),
        }
        .context("cannot write the output")
    }

    /// Completes the output: a file is synced and renamed onto its target.
    /// Dropping a sink without finishing it removes the temporary file.
    ///
    /// # Errors
    /// When the output cannot be flushed or renamed.
    pub(super) fn finish(self) -> anyhow::Result<()> {
        match self {
            Sink::File(temp, target) => {
                temp.as_file()
                    .sync_all()
                    .context("cannot flush the output")?;
                temp.persist(&target)
                    .with_context(|| format!("cannot write {}", target.display()))?;
            }
            Sink::Stdout(mut out) => out.flush().context("cannot write stdout")?,
        }
        Ok(())
    }
}
