//! `custodian object …`: every object store is scriptable from the shell.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, anyhow};
use bytes::Bytes;
use clap::{Args, Subcommand};
use custodian::checksum;
use custodian::clock::SystemClock;
use custodian::config::Config;
use custodian::object::ObjectStoreExt;
use custodian::object::open::StoreUrl;
use custodian::object::{
    ComposeSpec, ListPage, ListedObject, ListedVersion, MAX_LIST_PAGE, Metadata, ObjectError,
    ObjectKey, ObjectMeta, ObjectStore, PartSource, PutCondition,
};
use serde_json::{Value, json};

use super::options::{Global, StoreArgs};
use super::sink::Sink;
use super::{Failure, Outcome};

/// The condition a publish must meet; exactly one is required.
#[derive(Debug, Args)]
pub struct PutGuard {
    /// Replace the object only while its etag is ETAG.
    #[arg(long, value_name = "ETAG")]
    pub if_match: Option<String>,
    /// Create the object only if the key has none.
    #[arg(long)]
    pub if_none_match: bool,
    /// No guard: only for content-addressed keys, where every writer writes
    /// the same bytes.
    #[arg(long)]
    pub unconditional: bool,
}

#[derive(Debug, Subcommand)]
pub enum ObjectCommand {
    /// Publish a file (or stdin) at KEY; print the new etag, version id and
    /// CRC. Files over 64 MiB are composed in parts.
    Put {
        #[command(flatten)]
        store: StoreArgs,
        /// The object key: `/`-separated, no empty, `.` or `..` segments.
        key: String,
        /// The file to publish; `-` reads stdin.
        #[arg(default_value = "-")]
        file: String,
        #[command(flatten)]
        guard: PutGuard,
        /// User metadata to set, KEY=VALUE (repeatable; keys of lowercase
        /// [a-z0-9_-], printable ASCII values, 2 KiB in all).
        #[arg(long = "meta", value_name = "KEY=VALUE")]
        meta: Vec<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Write an object (or one version, or a range of it) to a file or
    /// stdout. Long reads are pinned to one generation: if the object is
    /// replaced midway, nothing is written and the command exits 1.
    #[command(disable_version_flag = true)]
    Get {
        #[command(flatten)]
        store: StoreArgs,
        /// The object key.
        key: String,
        /// Where to write; `-` is stdout. A file is written whole or not at
        /// all.
        #[arg(default_value = "-")]
        file: String,
        /// Read this exact version.
        #[arg(long, value_name = "ID")]
        version: Option<String>,
        /// Only bytes A through B (inclusive, as in HTTP), or from A to the
        /// end with `A-`.
        #[arg(long, value_name = "A-B")]
        range: Option<String>,
        /// Fail unless the current object has this etag.
        #[arg(long, value_name = "ETAG")]
        if_match: Option<String>,
    },
    /// Show an object's (or a version's) etag, version, size, CRC and
    /// metadata.
    #[command(disable_version_flag = true)]
    Head {
        #[command(flatten)]
        store: StoreArgs,
        /// The object key.
        key: String,
        /// This exact version.
        #[arg(long, value_name = "ID")]
        version: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// List current objects under a prefix.
    Ls {
        #[command(flatten)]
        store: StoreArgs,
        /// Only keys starting with this.
        #[arg(default_value = "")]
        prefix: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// List every version and delete marker under a prefix, newest first
    /// within a key (`*` marks the current one).
    Versions {
        #[command(flatten)]
        store: StoreArgs,
        /// Only keys starting with this.
        #[arg(default_value = "")]
        prefix: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Check (and where needed set up) a store: whether it keeps versions,
    /// whether abandoned uploads are cleaned up, whether the server
    /// validates checksums (an S3-compatible server that does not is
    /// probed and then verified by reading back every publish). Prints
    /// notes, warnings and errors; exits 1 if the store is not usable.
    Bootstrap {
        #[command(flatten)]
        store: StoreArgs,
        /// The key prefix the host will use.
        #[arg(default_value = "")]
        prefix: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove an object (a delete marker on a versioned store), or one
    /// exact version permanently with --version.
    #[command(disable_version_flag = true)]
    Rm {
        #[command(flatten)]
        store: StoreArgs,
        /// The object key.
        key: String,
        /// Remove this exact version permanently.
        #[arg(long, value_name = "ID")]
        version: Option<String>,
    },
}

/// Objects up to this size are published whole; larger ones are composed
/// from parts of this size, so memory stays bounded by one part.
const PART_BYTES: u64 = 64 << 20;
/// Reads of large objects go in ranges of this size, each pinned to the
/// same generation by its etag.
const READ_CHUNK: u64 = 16 << 20;

fn failed(error: impl Into<anyhow::Error>) -> Failure {
    Failure::Failed(error.into())
}

/// A store error, with what was being done; conditions name themselves.
fn store_error(what: String) -> impl FnOnce(ObjectError) -> Failure {
    move |e| Failure::of_kind(e.kind(), anyhow!(e).context(what))
}

fn meta_json(meta: &ObjectMeta) -> Value {
    json!({
        "key": meta.key,
        "version_id": meta.version_id,
        "etag": meta.etag,
        "size": meta.size,
        "crc64": meta.crc64.map(|c| format!("{c:016x}")),
        "crc64_wire": meta.crc64.map(checksum::to_wire),
        "last_modified_ms": meta.last_modified_ms,
        "metadata": meta.metadata,
        "storage_class": meta.storage_class,
    })
}

fn print_meta(meta: &ObjectMeta, as_json: bool) {
    if as_json {
        println!("{}", json!(meta_json(meta)));
        return;
    }
    println!("key       {}", meta.key);
    println!("etag      {}", meta.etag);
    println!("version   {}", meta.version_id.as_deref().unwrap_or("-"));
    println!("size      {}", meta.size);
    match meta.crc64 {
        Some(crc) => println!("crc64     {crc:016x} ({})", checksum::to_wire(crc)),
        None => println!("crc64     -"),
    }
    for (key, value) in &meta.metadata {
        println!("meta      {key}={value}");
    }
}

fn condition(guard: &PutGuard) -> Result<PutCondition, Failure> {
    match (&guard.if_match, guard.if_none_match, guard.unconditional) {
        (Some(etag), false, false) => Ok(PutCondition::IfMatch(etag.clone())),
        (None, true, false) => Ok(PutCondition::IfNoneMatchAny),
        (None, false, true) => Ok(PutCondition::Unconditional),
        _ => Err(Failure::Usage(anyhow!(
            "say exactly one of --if-match ETAG (replace that generation), --if-none-match \
             (create) or --unconditional (content-addressed keys only)"
        ))),
    }
}

/// Parses `A-B` (bytes A through B, inclusive, as in HTTP) or `A-`.
fn parse_range(range: &str) -> Result<(u64, Option<u64>), Failure> {
    let bad = || {
        Failure::Usage(anyhow!(
            "--range {range:?}: expected A-B or A- (bytes, inclusive)"
        ))
    };
    let (start, end) = range.split_once('-').ok_or_else(bad)?;
    let start: u64 = start.parse().map_err(|_| bad())?;
    let end = match end {
        "" => None,
        end => Some(end.parse::<u64>().map_err(|_| bad())?),
    };
    if end.is_some_and(|end| end < start) {
        return Err(bad());
    }
    Ok((start, end))
}

pub(super) fn run(global: &Global, command: ObjectCommand) -> Outcome {
    let config = super::config(global)?;
    let io = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the I/O runtime")
        .map_err(failed)?;
    io.block_on(dispatch(config.as_ref(), command))
}

/// The store `args` names: a URL, or (without `://`) a store of the
/// configuration file; flags override the file's endpoint and region.
pub(super) async fn open(
    config: Option<&Config>,
    args: &StoreArgs,
) -> Result<Arc<dyn ObjectStore>, Failure> {
    let url: StoreUrl = if args.url.contains("://") {
        args.url
            .parse()
            .map_err(|e: ObjectError| Failure::Usage(anyhow!(e)))?
    } else {
        let config = config.ok_or_else(|| {
            Failure::Usage(anyhow!(
                "--store {:?} is not a URL; to name a configured store, pass --config FILE",
                args.url
            ))
        })?;
        config
            .store(&args.url)
            .map_err(|e| Failure::Usage(e.into()))?
    };
    url.reached_at(args.endpoint.clone(), args.region.clone())
        .open(Arc::new(SystemClock))
        .await
        .map_err(|e| failed(anyhow!(e).context("cannot open the store")))
}

async fn dispatch(config: Option<&Config>, command: ObjectCommand) -> Outcome {
    match command {
        ObjectCommand::Bootstrap {
            store,
            prefix,
            json,
        } => {
            let store = open(config, &store).await?;
            let report = store
                .admin()
                .bootstrap(&prefix)
                .await
                .map_err(store_error("cannot bootstrap the store".into()))?;
            if json {
                println!(
                    "{}",
                    json!({"ok": report.ok(), "notes": report.notes, "warnings": report.warnings, "errors": report.errors})
                );
            } else {
                for note in &report.notes {
                    println!("note: {note}");
                }
                for warning in &report.warnings {
                    println!("warning: {warning}");
                }
                for error in &report.errors {
                    println!("error: {error}");
                }
            }
            if report.ok() {
                Ok(())
            } else {
                Err(failed(anyhow!("the store is not usable as it is")))
            }
        }
        ObjectCommand::Put {
            store,
            key,
            file,
            guard,
            meta,
            json,
        } => {
            let store = open(config, &store).await?;
            let metadata = meta
                .iter()
                .map(|pair| {
                    pair.split_once('=')
                        .map(|(k, v)| (k.to_owned(), v.to_owned()))
                        .ok_or_else(|| {
                            Failure::Usage(anyhow!("--meta {pair:?}: expected KEY=VALUE"))
                        })
                })
                .collect::<Result<Metadata, _>>()?;
            let meta = put(store.as_ref(), &key, &file, &condition(&guard)?, &metadata).await?;
            print_meta(&meta, json);
            Ok(())
        }
        ObjectCommand::Get {
            store,
            key,
            file,
            version,
            range,
            if_match,
        } => {
            let store = open(config, &store).await?;
            let range = range.as_deref().map(parse_range).transpose()?;
            get(
                store.as_ref(),
                &key,
                &file,
                version.as_deref(),
                range,
                if_match.as_deref(),
            )
            .await
        }
        ObjectCommand::Head {
            store,
            key,
            version,
            json,
        } => {
            let store = open(config, &store).await?;
            let meta = match &version {
                Some(version) => store.head_version(&key, version).await,
                None => store.head(&key).await,
            }
            .map_err(store_error(format!("cannot head {key}")))?;
            print_meta(&meta, json);
            Ok(())
        }
        ObjectCommand::Ls {
            store,
            prefix,
            json,
        } => {
            let store = open(config, &store).await?;
            print_listing(
                async |cursor: Option<String>| {
                    store
                        .list(&prefix, cursor.as_deref(), MAX_LIST_PAGE)
                        .await
                        .map_err(store_error(format!("cannot list {prefix:?}")))
                },
                json,
                |o: &ListedObject| {
                    json!({"key": o.key, "size": o.size, "etag": o.etag, "last_modified_ms": o.last_modified_ms})
                },
                |o| format!("{:>12}  {}  {}", o.size, o.etag, o.key),
            )
            .await
        }
        ObjectCommand::Versions {
            store,
            prefix,
            json,
        } => {
            let store = open(config, &store).await?;
            print_listing(
                async |cursor: Option<String>| {
                    store
                        .list_versions(&prefix, cursor.as_deref(), MAX_LIST_PAGE)
                        .await
                        .map_err(store_error(format!(
                            "cannot list the versions under {prefix:?}"
                        )))
                },
                json,
                |v: &ListedVersion| {
                    json!({"key": v.key, "version_id": v.version_id, "etag": v.etag, "size": v.size,
                        "is_current": v.is_current, "is_delete_marker": v.is_delete_marker,
                        "last_modified_ms": v.last_modified_ms})
                },
                |v| {
                    let what = if v.is_delete_marker {
                        "(delete marker)".to_owned()
                    } else {
                        format!("{:>12}  {}", v.size, v.etag)
                    };
                    let current = if v.is_current { "*" } else { " " };
                    format!("{current}  {}  {}  {what}", v.version_id, v.key)
                },
            )
            .await
        }
        ObjectCommand::Rm {
            store,
            key,
            version,
        } => {
            let store = open(config, &store).await?;
            match &version {
                Some(version) => store.delete_version(&key, version).await,
                None => store.delete(&key).await,
            }
            .map_err(store_error(format!("cannot remove {key}")))
        }
    }
}

/// Prints every page of a listing: one line per item, or one JSON array.
async fn print_listing<T>(
    mut page: impl AsyncFnMut(Option<String>) -> Result<ListPage<T>, Failure>,
    as_json: bool,
    to_json: impl Fn(&T) -> Value,
    to_text: impl Fn(&T) -> String,
) -> Outcome {
    let mut cursor = None;
    let mut rows = Vec::new();
    loop {
        let ListPage { items, next } = page(cursor).await?;
        for item in &items {
            if as_json {
                rows.push(to_json(item));
            } else {
                println!("{}", to_text(item));
            }
        }
        match next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    if as_json {
        println!("{}", Value::Array(rows));
    }
    Ok(())
}

/// Publishes `file` (or stdin for `-`) at `key`.
async fn put(
    store: &dyn ObjectStore,
    key: &str,
    file: &str,
    condition: &PutCondition,
    metadata: &Metadata,
) -> Result<ObjectMeta, Failure> {
    // Stdin is spooled to a temporary file so a large stream is composed
    // in parts like a file, never held in memory.
    let spooled;
    let path: &Path = if file == "-" {
        let mut spool = tempfile::NamedTempFile::new()
            .context("cannot spool stdin")
            .map_err(failed)?;
        std::io::copy(&mut std::io::stdin().lock(), &mut spool)
            .context("cannot read stdin")
            .map_err(failed)?;
        spooled = spool;
        spooled.path()
    } else {
        Path::new(file)
    };
    let size = std::fs::metadata(path)
        .with_context(|| format!("cannot read {}", path.display()))
        .map_err(failed)?
        .len();
    let what = format!("cannot publish {key}");
    let named = |e: ObjectError| match e {
        ObjectError::PreconditionFailed(reason) => failed(anyhow!(
            "the {} condition failed: {reason}",
            match condition {
                PutCondition::IfMatch(_) => "--if-match",
                PutCondition::IfNoneMatchAny => "--if-none-match",
                PutCondition::Unconditional => "unconditional",
            }
        )),
        other => store_error(what.clone())(other),
    };
    if size <= PART_BYTES {
        let mut body = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        std::fs::File::open(path)
            .and_then(|mut f| f.read_to_end(&mut body))
            .with_context(|| format!("cannot read {}", path.display()))
            .map_err(failed)?;
        let crc = checksum::crc64_nvme(&body);
        return store
            .put_whole(key, Bytes::from(body), condition, metadata, crc)
            .await
            .map_err(named);
    }
    let part = PART_BYTES.max(store.min_part_size());
    let parts = (0..size.div_ceil(part))
        .map(|i| PartSource::Local {
            offset: i * part,
            len: part.min(size - i * part),
        })
        .collect();
    let key = ObjectKey::new(key).map_err(named)?;
    let spec = ComposeSpec {
        key: &key,
        local_path: path,
        parts,
        base_key: None,
        base_etag: None,
        condition: condition.clone(),
        metadata: metadata.clone(),
        crc64: None,
        progress: None,
    };
    store.compose(&spec).await.map_err(named)
}

/// Writes `key` (or one version, or a range) to `file` (stdout for `-`),
/// in chunks pinned to one generation. A file is written under a
/// temporary name and renamed into place, so a failed read leaves nothing.
async fn get(
    store: &dyn ObjectStore,
    key: &str,
    file: &str,
    version: Option<&str>,
    range: Option<(u64, Option<u64>)>,
    if_match: Option<&str>,
) -> Outcome {
    let what = || format!("cannot read {key}");
    let meta = match version {
        Some(version) => store.head_version(key, version).await,
        None => store.head(key).await,
    }
    .map_err(store_error(what()))?;
    if let Some(etag) = if_match
        && etag != meta.etag
    {
        return Err(failed(anyhow!(
            "the --if-match condition failed: {key} is {}, not {etag}",
            meta.etag
        )));
    }
    let (start, end) = match range {
        Some((start, end)) => (
            start.min(meta.size),
            end.map_or(meta.size, |e| e.saturating_add(1).min(meta.size)),
        ),
        None => (0, meta.size),
    };
    let mut sink = Sink::open(file).map_err(failed)?;
    let mut offset = start;
    while offset < end {
        let next = (offset + READ_CHUNK).min(end);
        let chunk = match version {
            Some(version) => store.get_version_range(key, version, offset..next).await,
            None => store.get_range(key, offset..next, &meta.etag).await,
        }
        .map_err(|e| match e {
            ObjectError::PreconditionFailed(_) => failed(anyhow!(
                "{key} was replaced while it was being read; nothing was written"
            )),
            other => store_error(what())(other),
        })?;
        sink.write_all(&chunk).map_err(failed)?;
        offset = next;
    }
    sink.finish().map_err(failed)?;
    Ok(())
}
