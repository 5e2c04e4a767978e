//! A key's version directory: which versions it holds, which is current,
//! and what they say about themselves.

use std::path::Path;

use crate::{ObjectError, ObjectMeta};

use super::ids::version_seq;
use super::layout::KeyPath;
use super::version_file::{Header, VersionFile};
use super::{FsStore, io_error};

/// How often a read looks a key up again when the version it found was
/// removed before it could open it. Each retry means another writer
/// published or deleted in between; past this many the key is churning
/// faster than it can be read, and the reader is told so.
const READ_ATTEMPTS: usize = 16;

/// Calls `each` with every version id in `dir`, in no particular order;
/// nothing if it does not exist. Names that are not version ids are
/// ignored.
fn each_version_id(dir: &Path, mut each: impl FnMut(&str)) -> Result<(), ObjectError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            return Ok(());
        }
        Err(e) => return Err(io_error("reading", dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| io_error("reading", dir, e))?;
        if let Some(name) = entry.file_name().to_str()
            && version_seq(name).is_some()
        {
            each(name);
        }
    }
    Ok(())
}

/// The version ids in `dir`, oldest first; none if it does not exist.
/// Names that are not version ids are ignored.
pub(super) fn version_ids(dir: &Path) -> Result<Vec<String>, ObjectError> {
    let mut ids = Vec::new();
    each_version_id(dir, |id| ids.push(id.to_owned()))?;
    // Zero-padded sequence numbers: string order is creation order.
    ids.sort_unstable();
    Ok(ids)
}

/// The newest version id in `dir` (the last of [`version_ids`]), found
/// without keeping or sorting the others: every read of a current object
/// asks this.
fn newest_version_id(dir: &Path) -> Result<Option<String>, ObjectError> {
    let mut newest: Option<String> = None;
    each_version_id(dir, |id| {
        if newest.as_deref().is_none_or(|n| id > n) {
            newest = Some(id.to_owned());
        }
    })?;
    Ok(newest)
}

fn not_found(key: &str) -> ObjectError {
    ObjectError::NotFound(format!("no current object at {key:?}").into())
}

impl FsStore {
    /// The key's newest version (a delete marker included), opened; `None`
    /// if the key has no versions.
    pub(super) fn newest(
        &self,
        key: &KeyPath,
    ) -> Result<Option<(String, VersionFile)>, ObjectError> {
        let dir = self.layout.versions_dir(key);
        for _ in 0..READ_ATTEMPTS {
            let Some(id) = newest_version_id(&dir)? else {
                return Ok(None);
            };
            if let Some(file) = VersionFile::open(&dir.join(&id), key.key())? {
                return Ok(Some((id, file)));
            }
        }
        Err(ObjectError::Conflict(
            format!(
                "{:?} changed {READ_ATTEMPTS} times while being read",
                key.key()
            )
            .into(),
        ))
    }

    /// The current object: the newest version unless that is a marker.
    pub(super) fn current(&self, key: &KeyPath) -> Result<(String, VersionFile), ObjectError> {
        match self.newest(key)? {
            Some((id, file)) if !file.header().delete_marker => Ok((id, file)),
            _ => Err(not_found(key.key())),
        }
    }

    /// One exact version that has bytes: `NotFound` if it does not exist,
    /// `PreconditionFailed` if it is a delete marker.
    pub(super) fn version_with_body(
        &self,
        key: &KeyPath,
        version_id: &str,
    ) -> Result<VersionFile, ObjectError> {
        let missing = || {
            ObjectError::NotFound(format!("no version {version_id:?} of {:?}", key.key()).into())
        };
        // Anything but a well-formed id names no file (and never a path
        // outside the key's directory).
        if version_seq(version_id).is_none() {
            return Err(missing());
        }
        let path = self.layout.versions_dir(key).join(version_id);
        let file = VersionFile::open(&path, key.key())?.ok_or_else(missing)?;
        if file.header().delete_marker {
            return Err(ObjectError::PreconditionFailed(
                format!(
                    "version {version_id:?} of {:?} is a delete marker and has no bytes",
                    key.key()
                )
                .into(),
            ));
        }
        Ok(file)
    }

    /// The current object (`version_id: None`) or one exact version that
    /// has bytes, with its id.
    pub(super) fn readable(
        &self,
        key: &KeyPath,
        version_id: Option<&str>,
    ) -> Result<(String, VersionFile), ObjectError> {
        match version_id {
            None => self.current(key),
            Some(version_id) => {
                self.require_versions("reading a version")?;
                let file = self.version_with_body(key, version_id)?;
                Ok((version_id.to_owned(), file))
            }
        }
    }

    /// What the trait reports about a version.
    pub(super) fn meta(&self, key: &str, version_id: &str, header: &Header) -> ObjectMeta {
        ObjectMeta {
            key: key.to_owned(),
            version_id: self.versioned.then(|| version_id.to_owned()),
            etag: header.etag.clone(),
            size: header.size,
            crc64: Some(header.crc64),
            content_md5: header.content_md5,
            last_modified_ms: Some(header.last_modified_ms),
            metadata: header.metadata.clone(),
            storage_class: None,
        }
    }
}
