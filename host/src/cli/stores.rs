//! The host's named object stores (`serving`, `preserved`, ...): from the
//! configuration file when it names them, else the embedded default in
//! the data directory.

use std::path::Path;
use std::sync::Arc;

use custodian::clock::Clock;
use custodian::config::Config;
use custodian::kv::Kv;
use custodian::node::open_named_store;
use custodian::object::ObjectStore;

use super::{Failure, node_failure};

/// Opens the store called `name`, behind the locks read from `kv` (the
/// data directory's): the configuration's `[stores.NAME]` when present,
/// else the filesystem store `DATA/NAME` (created, with the data
/// directory, if missing; versioned when new).
///
/// # Errors
/// [`Failure::Usage`] when the configured store's URL is unusable;
/// [`Failure::Failed`] when the store or the data directory cannot be
/// opened.
pub(super) async fn open_named(
    config: Option<&Config>,
    data: &Path,
    name: &str,
    kv: Arc<dyn Kv>,
    clock: Arc<dyn Clock>,
) -> Result<Arc<dyn ObjectStore>, Failure> {
    open_named_store(config, data, name, kv, clock)
        .await
        .map_err(node_failure)
}
