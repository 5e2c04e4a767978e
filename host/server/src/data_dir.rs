//! The embedded default's data directory: everything one host keeps on
//! local disk, in one place an operator can back up or point a command at.
//!
//! Layout:
//! - `kv.redb` — the durable KV ([`custodian_kv::redb`]): timers, policy
//!   state, fences, the content index ([`custodian_core::content`]) and the audit
//!   log. One process at a time holds it; a second gets
//!   [`KvError::InUse`].
//! - `serving/` — the default `serving` object store (a filesystem store,
//!   [`custodian_object::fs`]): content as users pushed it, under
//!   `content/<id>`.
//! - `preserved/` — the default `preserved` object store: what the
//!   takedown policy preserves, kept apart from what it takes down.
//!
//! - `node` — this host's name among hosts sharing one KV (see
//!   [`DataDir::node_name`]).
//! - `lock` — held (an advisory lock) by the process serving from the
//!   directory when its KV lives elsewhere, since then no redb file
//!   keeps a second process out.
//!
//! A store named in the configuration file ([`crate::config`]) replaces
//! its default here; with `[kv] backend = "redb"` the KV lives in the data
//! directory, with `"etcd"` in the cluster.
//!
//! The directory is created on first use, readable by its owner only:
//! policy state and audit records are not for other local users.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use custodian_base::clock::Clock;
use custodian_kv::redb::RedbKv;
use custodian_kv::{Detail, Kv, KvError};

/// File name of the KV inside a data directory.
pub const KV_FILE: &str = "kv.redb";
/// File name of the node name inside a data directory.
pub const NODE_FILE: &str = "node";
/// File name of the lock inside a data directory.
pub const LOCK_FILE: &str = "lock";

/// The data directory held by this process until dropped.
#[derive(Debug)]
pub struct DirLock {
    _file: std::fs::File,
}

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

    /// Opens the durable KV, whose `NotAfter` guards read `clock`, keeping
    /// at most `cache_bytes` of its pages in memory.
    ///
    /// # Errors
    /// [`KvError::InUse`] if another process holds it; another
    /// [`KvError`] if it cannot be opened.
    pub fn open_kv(
        &self,
        clock: Arc<dyn Clock>,
        cache_bytes: usize,
    ) -> Result<Arc<dyn Kv>, KvError> {
        Ok(Arc::new(RedbKv::open_with_cache(
            &self.kv_path(),
            clock,
            cache_bytes,
        )?))
    }

    /// Holds the directory for this process, for a host whose KV is not a
    /// file in it.
    ///
    /// # Errors
    /// [`KvError::InUse`] if another process holds it;
    /// [`KvError::Unavailable`] if the lock file cannot be opened.
    pub fn lock(&self) -> Result<DirLock, KvError> {
        let path = self.root.join(LOCK_FILE);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| {
                KvError::Unavailable(Detail::caused_by(format!("opening {}", path.display()), e))
            })?;
        match file.try_lock() {
            Ok(()) => Ok(DirLock { _file: file }),
            Err(std::fs::TryLockError::WouldBlock) => Err(KvError::InUse(
                format!("{} is in use by another process", self.root.display()).into(),
            )),
            Err(std::fs::TryLockError::Error(e)) => Err(KvError::Unavailable(Detail::caused_by(
                format!("locking {}", path.display()),
                e,
            ))),
        }
    }

    /// This host's node name: the one in `DATA/node`, or a new random one
    /// (`n` and 12 hex digits) written there first, so a host keeps its
    /// name across restarts and its fence leases and claims with it.
    ///
    /// # Errors
    /// The file cannot be read or written, or holds no valid name.
    pub fn node_name(&self) -> std::io::Result<String> {
        let path = self.root.join(NODE_FILE);
        let invalid = |reason: String| std::io::Error::new(std::io::ErrorKind::InvalidData, reason);
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let name = text.trim().to_owned();
                crate::config::validate_node(&name)
                    .map_err(|e| invalid(format!("{}: {e}", path.display())))?;
                Ok(name)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut bytes = [0u8; 6];
                getrandom::fill(&mut bytes)
                    .map_err(|e| invalid(format!("no randomness for a node name: {e}")))?;
                let name = format!("n{}", hex::encode(bytes));
                // Written whole and renamed into place, so a crash leaves
                // either no name (a new one next time) or this one.
                let temporary = self.root.join(format!("{NODE_FILE}.tmp"));
                std::fs::write(&temporary, format!("{name}\n"))?;
                std::fs::rename(&temporary, &path)?;
                Ok(name)
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_keeps_the_name_it_was_given_on_first_start() {
        let root = tempfile::tempdir().unwrap();
        let dir = DataDir::create(root.path()).unwrap();
        let first = dir.node_name().unwrap();
        assert!(crate::config::validate_node(&first).is_ok(), "{first}");
        assert_eq!(
            DataDir::create(root.path()).unwrap().node_name().unwrap(),
            first
        );
        let other = DataDir::create(&root.path().join("other")).unwrap();
        assert_ne!(other.node_name().unwrap(), first, "each directory its own");
    }

    #[test]
    fn a_corrupt_node_file_is_an_error_not_a_new_name() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join(NODE_FILE), "Not A Name\n").unwrap();
        let error = DataDir::create(root.path())
            .unwrap()
            .node_name()
            .unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidData);
    }

    #[test]
    fn a_held_directory_cannot_be_held_again_until_released() {
        let root = tempfile::tempdir().unwrap();
        let dir = DataDir::create(root.path()).unwrap();
        let held = dir.lock().unwrap();
        assert!(matches!(dir.lock(), Err(KvError::InUse(_))));
        drop(held);
        dir.lock().unwrap();
    }
}
