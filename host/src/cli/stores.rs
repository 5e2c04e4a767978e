//! The host's named object stores (`serving`, `preserved`, ...): from the
//! configuration file when it names them, else the embedded default in
//! the data directory.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, anyhow};
use custodian::clock::Clock;
use custodian::config::Config;
use custodian::data_dir::DataDir;
use custodian::object::ObjectStore;
use custodian::object::open::StoreUrl;

use super::Failure;

/// Opens the store called `name`: the configuration's `[stores.NAME]`
/// when present, else the filesystem store `DATA/NAME` (created, with the
/// data directory, if missing; versioned when new).
///
/// # Errors
/// [`Failure::Usage`] when the configured store's URL is unusable;
/// [`Failure::Failed`] when the store or the data directory cannot be
/// opened.
pub(super) async fn open_named(
    config: Option<&Config>,
    data: &Path,
    name: &str,
    clock: Arc<dyn Clock>,
) -> Result<Arc<dyn ObjectStore>, Failure> {
    let url = match config.filter(|config| config.stores.contains_key(name)) {
        Some(config) => config.store(name).map_err(|e| Failure::Usage(e.into()))?,
        None => {
            // Created owner-only first, as every command creates it, so a
            // store opened before the KV does not leave it world-readable.
            let dir = DataDir::create(data)
                .with_context(|| format!("cannot use the data directory {}", data.display()))
                .map_err(Failure::Failed)?;
            StoreUrl::File {
                // Store URLs are absolute: a store's identity must not
                // depend on the working directory.
                root: std::path::absolute(dir.root())
                    .with_context(|| format!("cannot resolve {}", data.display()))
                    .map_err(Failure::Failed)?
                    .join(name),
                versioned: None,
            }
        }
    };
    url.open(clock)
        .await
        .map_err(|e| Failure::Failed(anyhow!(e).context(format!("cannot open the {name} store"))))
}
