//! Store URLs: how deployers and scripts name an object store.
//!
//! - `file:///absolute/path` — the filesystem backend (the embedded
//!   default). A store keeps the mode it was created with: an existing
//!   store opens in its own mode, a new one is versioned unless the URL
//!   says `?versioned=false`. Relative paths are refused: a store's
//!   identity must not depend on the working directory.
//! - `mem://` — an empty in-memory store (tests, dry runs).
//! - `s3://bucket/prefix` — arrives with the S3 backend.

use std::path::PathBuf;
use std::sync::Arc;

use super::fs::FsStore;
use super::memory::MemoryStore;
use super::{ObjectError, ObjectStore};
use crate::clock::Clock;

/// A parsed store URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// A directory of the filesystem backend.
    File {
        /// The root directory.
        root: PathBuf,
        /// Whether it keeps versions, if the URL says; otherwise an
        /// existing store's own mode, and versioned for a new one.
        versioned: Option<bool>,
    },
    /// A fresh in-memory store.
    Memory,
}

impl std::str::FromStr for StoreUrl {
    type Err = ObjectError;

    fn from_str(url: &str) -> Result<Self, ObjectError> {
        let refuse = |why: &str| {
            Err(ObjectError::InvalidArgument(format!(
                "store URL {url:?}: {why} (expected file:///path, mem:// or s3://bucket/prefix)"
            )))
        };
        if url == "mem://" {
            return Ok(StoreUrl::Memory);
        }
        if url.starts_with("s3://") {
            return Err(ObjectError::Unsupported(
                "s3:// stores arrive with the S3 backend; this build has file:// and mem://".into(),
            ));
        }
        let Some(rest) = url.strip_prefix("file://") else {
            return refuse("unknown scheme");
        };
        let (path, query) = match rest.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (rest, None),
        };
        if !path.starts_with('/') {
            return refuse("the path must be absolute (file:///path)");
        }
        let versioned = match query {
            None => None,
            Some("versioned=true") => Some(true),
            Some("versioned=false") => Some(false),
            Some(_) => return refuse("the only option is versioned=true|false"),
        };
        Ok(StoreUrl::File {
            root: PathBuf::from(path),
            versioned,
        })
    }
}

impl StoreUrl {
    /// Opens the store, creating a filesystem store's directory if absent.
    ///
    /// # Errors
    /// The backend's error opening it.
    pub fn open(&self, clock: Arc<dyn Clock>) -> Result<Arc<dyn ObjectStore>, ObjectError> {
        Ok(match self {
            StoreUrl::File { root, versioned } => {
                let versioned = match versioned {
                    Some(versioned) => *versioned,
                    None => FsStore::created_versioned(root)?.unwrap_or(true),
                };
                Arc::new(FsStore::open(root, clock, versioned)?)
            }
            StoreUrl::Memory => Arc::new(MemoryStore::versioned(clock)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_urls_name_their_backend() {
        assert_eq!("mem://".parse::<StoreUrl>(), Ok(StoreUrl::Memory));
        assert_eq!(
            "file:///var/lib/custodian".parse::<StoreUrl>(),
            Ok(StoreUrl::File {
                root: "/var/lib/custodian".into(),
                versioned: None
            })
        );
        assert_eq!(
            "file:///x?versioned=false".parse::<StoreUrl>(),
            Ok(StoreUrl::File {
                root: "/x".into(),
                versioned: Some(false)
            })
        );
    }

    #[test]
    fn malformed_store_urls_are_refused_with_the_reason() {
        for bad in [
            "file://relative/path",
            "ftp://x",
            "/plain/path",
            "file:///x?mode=7",
        ] {
            let got = bad.parse::<StoreUrl>();
            assert!(
                matches!(got, Err(ObjectError::InvalidArgument(_))),
                "{bad}: {got:?}"
            );
        }
        assert!(matches!(
            "s3://bucket/p".parse::<StoreUrl>(),
            Err(ObjectError::Unsupported(_))
        ));
    }
}
