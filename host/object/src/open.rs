//! Store URLs: how deployers and scripts name an object store.
//!
//! - `file:///absolute/path` — the filesystem backend (the embedded
//!   default). A store keeps the mode it was created with: an existing
//!   store opens in its own mode, a new one is versioned unless the URL
//!   says `?versioned=false`. Relative paths are refused: a store's
//!   identity must not depend on the working directory.
//! - `mem://` — an empty in-memory store (tests, dry runs).
//! - `s3://bucket/prefix` — a bucket (and a key prefix in it) reached
//!   through aws-sdk-s3: AWS by default, or any S3-compatible server with
//!   an endpoint ([`StoreUrl::reached_at`]; addressed path-style then).
//!   Credentials come from the standard AWS chain only.

use std::path::PathBuf;
use std::sync::Arc;

use super::fs::FsStore;
use super::memory::MemoryStore;
use super::s3::{S3Config, S3Store};
use super::{ObjectError, ObjectStore};
use custodian_base::clock::Clock;

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
    /// A bucket and prefix on S3 or an S3-compatible server.
    S3(Box<S3Config>),
}

impl std::str::FromStr for StoreUrl {
    type Err = ObjectError;

    fn from_str(url: &str) -> Result<Self, ObjectError> {
        let refuse =
            |why: &str| {
                Err(ObjectError::InvalidArgument(format!(
                "store URL {url:?}: {why} (expected file:///path, mem:// or s3://bucket/prefix)"
            ).into()))
            };
        if url == "mem://" {
            return Ok(StoreUrl::Memory);
        }
        if url.starts_with("s3://") {
            return S3Config::from_url(url).map(|config| StoreUrl::S3(Box::new(config)));
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
    /// Where an `s3://` store is reached: an S3-compatible server's
    /// `endpoint` (addressed path-style, as such servers expect) and the
    /// `region`; `None` keeps AWS's defaults. Other stores ignore both.
    #[must_use]
    pub fn reached_at(self, endpoint: Option<String>, region: Option<String>) -> Self {
        match self {
            StoreUrl::S3(mut config) => {
                if endpoint.is_some() {
                    config.force_path_style = true;
                    config.endpoint = endpoint;
                }
                if region.is_some() {
                    config.region = region;
                }
                StoreUrl::S3(config)
            }
            other => other,
        }
    }

    /// Opens the store, creating a filesystem store's directory if absent
    /// and connecting to an S3 bucket.
    ///
    /// # Errors
    /// The backend's error opening it.
    pub async fn open(&self, clock: Arc<dyn Clock>) -> Result<Arc<dyn ObjectStore>, ObjectError> {
        Ok(match self {
            StoreUrl::File { root, versioned } => {
                let versioned = match versioned {
                    Some(versioned) => *versioned,
                    None => FsStore::created_versioned(root)?.unwrap_or(true),
                };
                Arc::new(FsStore::open(root, clock, versioned)?)
            }
            StoreUrl::Memory => Arc::new(MemoryStore::versioned(clock)),
            StoreUrl::S3(config) => Arc::new(S3Store::connect((**config).clone(), clock).await?),
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
        let Ok(StoreUrl::S3(config)) = "s3://bucket/some/prefix".parse::<StoreUrl>() else {
            panic!("an s3:// URL names an S3 store");
        };
        assert_eq!(config.bucket, "bucket");
        let Ok(StoreUrl::S3(config)) = "s3://bucket/p".parse::<StoreUrl>().map(|u| {
            u.reached_at(
                Some("http://127.0.0.1:9000".into()),
                Some("eu-west-1".into()),
            )
        }) else {
            panic!("still an S3 store");
        };
        assert_eq!(config.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        assert_eq!(config.region.as_deref(), Some("eu-west-1"));
        assert!(
            config.force_path_style,
            "S3-compatible servers are addressed path-style"
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
            "s3://".parse::<StoreUrl>(),
            Err(ObjectError::InvalidArgument(_))
        ));
    }
}
