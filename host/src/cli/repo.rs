//! `custodian repo …`: push local files and directories into a
//! repository's content, list its entries, and read a file back.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::anyhow;
use clap::Subcommand;
use custodian::checksum::Crc64Nvme;
use custodian::clock::{Clock, SystemClock};
use custodian::content::{self, ContentError, Entry, PushProgress, RepoName, Withheld, read};
use custodian::kv::Kv;
use custodian::object::ObjectStore;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use super::options::{DataArgs, Global};
use super::sink::Sink;
use super::{Failure, Outcome, io_runtime, open_data};

/// Pushes at least this large show a progress bar (on a terminal).
const PROGRESS_FROM: u64 = 64 << 20;
/// Entries read per page when listing.
const PAGE: u32 = 1000;

/// `custodian repo` subcommands.
#[derive(Debug, Subcommand)]
pub enum RepoCommand {
    /// Push files and directories into a repository; print each entry made.
    ///
    /// Content is addressed by its BLAKE3 hash and stored once in the
    /// `serving` store (the configuration's [stores.serving], else
    /// DATA/serving), whichever repositories push it:
    ///   - a file of at most 4 MiB is one blob; a larger one is 4 MiB
    ///     chunks (blobs) and a manifest listing them;
    ///   - a directory is a pack listing its entries in name order
    ///     (subdirectories as their own packs).
    ///
    /// A file PATH is entered under its name, a directory DIR as `DIR/`
    /// and everything in it by its path (`DIR/sub/`, `DIR/sub/file`). A
    /// push adds or replaces entries; it removes none.
    ///
    /// Output: one line per entry, in path order:
    ///   ID  KIND  SIZE  PATH
    /// the object id (64 hex digits), blob|manifest|pack, the size in
    /// bytes (a manifest's is its file's length), the entry path.
    /// --json prints one JSON object a line instead:
    ///   {"path": "d/x.txt", "id": "…", "kind": "blob", "size": 1}
    /// A progress bar shows on stderr for large pushes when stderr is a
    /// terminal.
    ///
    /// The whole tree is checked before anything is stored: names must
    /// be UTF-8 without control characters, links inside a directory are
    /// refused (the PATHs given are followed). Bytes are stored before
    /// the index rows that name them, so an interrupted push leaves
    /// nothing dangling, and running it again completes it without
    /// uploading anything twice.
    ///
    /// Content a takedown withholds is never stored again, whole or as a
    /// chunk of another file: such a push stops there (exit 4), keeping
    /// what it stored before.
    ///
    /// Exit 0 when every entry is made, 1 when storing failed, 2 for input
    /// that cannot be pushed (a bad repository name, a refused file), 3
    /// when another process holds the data directory, 4 when a takedown
    /// withholds an object of the push.
    #[command(verbatim_doc_comment)]
    Push {
        #[command(flatten)]
        data: DataArgs,
        /// The repository, `namespace/name` (each 1..=64 bytes of
        /// [a-z0-9._-], not starting with `.`).
        repository: String,
        /// Files and directories to push.
        #[arg(required = true, value_name = "PATH")]
        paths: Vec<PathBuf>,
        /// Print one JSON object a line.
        #[arg(long)]
        json: bool,
    },
    /// List a repository's entries in path order.
    ///
    /// Output as `custodian repo push` prints it: ID  KIND  SIZE  PATH a
    /// line, or with --json one JSON object a line ({"path", "id",
    /// "kind", "size"}). An entry a takedown withholds is still listed,
    /// marked: `[taken down by REQUEST]` after the path, or with --json
    /// "taken_down": {"request", "since_ms"}. An unknown repository has
    /// no entries.
    #[command(verbatim_doc_comment)]
    Ls {
        #[command(flatten)]
        data: DataArgs,
        /// The repository, `namespace/name`.
        repository: String,
        /// Print one JSON object a line.
        #[arg(long)]
        json: bool,
    },
    /// Write a repository's file to OUTPUT (stdout by default, or `-`).
    ///
    /// The file is read from the serving store as it was pushed — a blob
    /// as itself, a larger file's chunks in order — a span at a time, so
    /// memory stays bounded whatever its size. Its CRC-64/NVME is checked
    /// as it is written; a file is written under a temporary name and
    /// renamed into place only when complete and checked, so a failed read
    /// leaves nothing behind.
    ///
    /// Exit 0 when the file is written, 1 when it cannot be read (no such
    /// path, the store failed, the bytes do not match their checksum), 2
    /// for a bad repository name or path or a path that names a
    /// directory, 3 when another process holds the data directory, 4 when
    /// a takedown withholds the file (nothing is written; the message
    /// names the request).
    #[command(verbatim_doc_comment)]
    Get {
        #[command(flatten)]
        data: DataArgs,
        /// The repository, `namespace/name`.
        repository: String,
        /// The file's path in the repository.
        path: String,
        /// Where to write it; `-` is stdout.
        #[arg(short, long, value_name = "OUTPUT", default_value = "-")]
        output: String,
    },
}

/// A content error, with what was being done, failing the command by its
/// kind.
fn content_error(what: String) -> impl FnOnce(ContentError) -> Failure {
    move |e| Failure::of_kind(e.kind(), anyhow!(e).context(what))
}

fn repository(text: &str) -> Result<RepoName, Failure> {
    RepoName::parse(text).map_err(|e| Failure::Usage(e.into()))
}

/// What pushing and reading content need: the I/O runtime, the data
/// directory's KV and its `serving` store (the configuration's, else the
/// data directory's own).
struct Content {
    io: tokio::runtime::Runtime,
    kv: Arc<dyn Kv>,
    serving: Arc<dyn ObjectStore>,
}

fn open_content(
    global: &Global,
    data: &DataArgs,
    clock: Arc<dyn Clock>,
) -> Result<Content, Failure> {
    let config = super::config(global)?;
    let io = io_runtime()?;
    let kv = open_data(data, clock.clone())?;
    let serving = io.block_on(super::stores::open_named(
        config.as_ref(),
        &data.data,
        content::SERVING_STORE,
        kv.clone(),
        clock,
    ))?;
    Ok(Content { io, kv, serving })
}

fn print_entry(entry: &Entry, withheld: Option<&Withheld>, as_json: bool) {
    if as_json {
        let mut line = json!({
            "path": entry.path,
            "id": entry.id.to_hex(),
            "kind": entry.kind.name(),
            "size": entry.size,
        });
        if let Some(withheld) = withheld {
            line["taken_down"] = json!({
                "request": withheld.request.to_hex(),
                "since_ms": withheld.since_ms,
            });
        }
        println!("{line}");
    } else {
        let mark = withheld
            .map(|w| format!("  [taken down by {}]", w.request))
            .unwrap_or_default();
        println!(
            "{}  {:<8}  {:>12}  {}{mark}",
            entry.id, entry.kind, entry.size, entry.path
        );
    }
}

pub(super) fn run(global: &Global, command: RepoCommand) -> Outcome {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    match command {
        RepoCommand::Push {
            data,
            repository: name,
            paths,
            json,
        } => {
            let repo = repository(&name)?;
            let Content { io, kv, serving } = open_content(global, &data, clock.clone())?;
            let mut bar = None;
            let pushed = io.block_on(content::push(
                kv.as_ref(),
                serving.as_ref(),
                &repo,
                &paths,
                clock.now_ms(),
                |progress| show(&mut bar, progress),
            ));
            if let Some(bar) = bar {
                bar.finish_and_clear();
            }
            for entry in &pushed.map_err(content_error(format!("cannot push to {repo}")))? {
                print_entry(entry, None, json);
            }
            Ok(())
        }
        RepoCommand::Ls {
            data,
            repository: name,
            json,
        } => {
            let repo = repository(&name)?;
            let io = io_runtime()?;
            let kv = open_data(&data, clock)?;
            let what = || format!("cannot list {repo}");
            let mut cursor: Option<String> = None;
            loop {
                let page = io
                    .block_on(content::entries(
                        kv.as_ref(),
                        &repo,
                        cursor.as_deref(),
                        PAGE,
                    ))
                    .map_err(content_error(what()))?;
                let ids: Vec<_> = page.entries.iter().map(|e| e.id).collect();
                let withheld = io
                    .block_on(content::denial::check_many(kv.as_ref(), &ids))
                    .map_err(content_error(what()))?;
                for (entry, withheld) in page.entries.iter().zip(&withheld) {
                    print_entry(entry, withheld.as_ref(), json);
                }
                match page.next {
                    Some(next) => cursor = Some(next),
                    None => return Ok(()),
                }
            }
        }
        RepoCommand::Get {
            data,
            repository: name,
            path,
            output,
        } => {
            let repo = repository(&name)?;
            content::index::validate_path(&path).map_err(|e| Failure::Usage(e.into()))?;
            let Content { io, kv, serving } = open_content(global, &data, clock)?;
            let what = || format!("cannot read {path:?} of {repo}");
            let file = io
                .block_on(content::open_file(
                    kv.as_ref(),
                    serving.as_ref(),
                    &repo,
                    &path,
                ))
                .map_err(content_error(what()))?;
            let mut sink = Sink::open(&output).map_err(Failure::Failed)?;
            let mut crc = Crc64Nvme::new();
            for (piece, span) in file.spans(0..file.len()) {
                let segments = io
                    .block_on(read::read_span(serving.as_ref(), &piece, span))
                    .map_err(content_error(what()))?;
                for segment in &segments {
                    crc.update(segment);
                    sink.write_all(segment).map_err(Failure::Failed)?;
                }
            }
            let read = crc.finalize();
            if read != file.crc64 {
                // Dropping the sink removes a file's temporary copy; what
                // already went to stdout cannot be taken back, but the exit
                // status says it is wrong.
                return Err(Failure::Failed(anyhow!(
                    "{}: the bytes read have CRC-64/NVME {read:016x}, the file was pushed with \
                     {:016x}; nothing was written",
                    what(),
                    file.crc64
                )));
            }
            sink.finish().map_err(Failure::Failed)
        }
    }
}

/// Draws a push's progress on stderr, if it is large and stderr is a
/// terminal.
fn show(bar: &mut Option<ProgressBar>, progress: &PushProgress<'_>) {
    if progress.bytes_total < PROGRESS_FROM || !std::io::stderr().is_terminal() {
        return;
    }
    let bar = bar.get_or_insert_with(|| {
        let style = ProgressStyle::with_template(
            "{msg} [{bar:30}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
        ProgressBar::new(progress.bytes_total).with_style(style)
    });
    bar.set_position(progress.bytes_done);
    bar.set_message(progress.path.to_owned());
}
