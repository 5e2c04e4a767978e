//! The embedded default's data directory: everything one host keeps on
//! local disk, in one place an operator can back up or point a command at.
//!
//! Layout:
//! - `kv.redb` — the durable KV ([`crate::kv::redb`]): timers, policy
//!   state, fences, the content index ([`crate::content`]) and the audit
//!   log. One process at a time holds it; a second gets
//!   [`KvError::InUse`].
//! - `serving/` — the default `serving` object store (a filesystem store,
//!   [`crate::object::fs`]): content as users pushed it, under
//!   `content/<id>`.
//! - `preserved/` — the default `preserved` object store: what the
//!   takedown policy preserves, kept apart from what it takes down.
//!
//! A store named in the configuration file ([`crate::config`]) replaces
//! its default here; the KV always lives in the data directory.
//!
//! The directory is created on first use, readable by its owner only:
//! policy state and audit records are not for other local users.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::clock::Clock;
use crate::kv::redb::RedbKv;
use crate::kv::{Kv, KvError};

/// File name of the KV inside a data directory.
pub const KV_FILE: &str = "kv.redb";

/// A data directory.
#[derive(Debug, Clone)]
pub struct DataDir {
    root: PathBuf,
}

impl DataDir {
    /// Opens `root`, creating it (mode 0700) if it does not exist.
    ///
    /// # Errors
    /// The directory cannot be created, or `root` is not a directory.
    pub fn create(root: &Path) -> std::io::Result<Self> {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(root)?;
        if !root.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotADirectory,
                format!("{} is not a directory", root.display()),
            ));
        }
        Ok(Self {
            root: root.to_owned(),
        })
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the KV lives.
    pub fn kv_path(&self) -> PathBuf {
        self.root.join(KV_FILE)
    }

    /// Opens the durable KV, whose `NotAfter` guards read `clock`.
    ///
    /// # Errors
    /// [`KvError::InUse`] if another process holds it; another
    /// [`KvError`] if it cannot be opened.
    pub fn open_kv(&self, clock: Arc<dyn Clock>) -> Result<Arc<dyn Kv>, KvError> {
        Ok(Arc::new(RedbKv::open(&self.kv_path(), clock)?))
    }
}
