//! What S3 says about an object, turned into [`ObjectMeta`]: the issued
//! etag, the stored CRC-64/NVME and the user metadata without this
//! backend's reserved keys.

use custodian_base::detail::Detail;
use std::collections::HashMap;

use aws_sdk_s3::primitives::DateTime;
use aws_sdk_s3::types::StorageClass;

use super::super::{MAX_METADATA_ENTRIES, Metadata, ObjectError, ObjectMeta};
use super::etag;
use custodian_base::checksum;

/// The metadata key that carries the full-object CRC on servers that do
/// not return a stored CRC64NVME checksum (bootstrap finds out). Reserved:
/// callers may not set it.
pub(super) const CRC_KEY: &str = "custodian-crc64";

/// Most metadata entries this backend writes: the caller's (at most
/// [`MAX_METADATA_ENTRIES`], which the trait's validation enforces for
/// every backend because of S3's response headers) plus its CRC record.
const MAX_STORED_ENTRIES: usize = MAX_METADATA_ENTRIES + 1;

/// The fields of a HEAD, GET or listing that describe one version.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Described<'a> {
    /// S3's etag.
    pub e_tag: Option<&'a str>,
    /// `x-amz-version-id`.
    pub version_id: Option<&'a str>,
    /// The object's length.
    pub size: Option<i64>,
    /// `x-amz-checksum-crc64nvme`.
    pub crc64: Option<&'a str>,
    /// `Last-Modified`.
    pub last_modified: Option<&'a DateTime>,
    /// `x-amz-meta-*`, prefix stripped by the SDK.
    pub metadata: Option<&'a HashMap<String, String>>,
    /// `x-amz-storage-class`; absent is STANDARD.
    pub storage_class: Option<&'a StorageClass>,
}

/// Milliseconds since the epoch, `None` before 1970 or when absent.
pub(super) fn millis(time: Option<&DateTime>) -> Option<u64> {
    time.and_then(|t| t.to_millis().ok())
        .and_then(|ms| u64::try_from(ms).ok())
}

/// The full-object CRC an object carries: S3's stored CRC64NVME when it
/// returns a full-object one, else this backend's metadata record.
///
/// # Errors
/// `Corrupt` when either is malformed, or when both exist and disagree.
pub(super) fn stored_crc(
    what: &str,
    header: Option<&str>,
    metadata: Option<&HashMap<String, String>>,
) -> Result<Option<u64>, ObjectError> {
    let decode = |source: &str, wire: &str| {
        checksum::from_wire(wire).map_err(|e| {
            ObjectError::Corrupt(Detail::caused_by(format!("{what}: the {source} CRC"), e))
        })
    };
    // A "-N" suffix marks a composite (per-part) checksum: not the
    // object's CRC, so not evidence either way.
    let from_header = match header {
        Some(wire) if !wire.contains('-') => Some(decode("stored", wire)?),
        _ => None,
    };
    let from_metadata = match metadata.and_then(|m| m.get(CRC_KEY)) {
        Some(wire) => Some(decode("recorded", wire)?),
        None => None,
    };
    match (from_header, from_metadata) {
        (Some(stored), Some(recorded)) if stored != recorded => Err(ObjectError::Corrupt(format!(
            "{what}: the server stores CRC {stored:016x} but the publish recorded {recorded:016x}"
        ).into())),
        (stored, recorded) => Ok(stored.or(recorded)),
    }
}

/// The caller's metadata: everything but the reserved keys.
pub(super) fn user_metadata(metadata: Option<&HashMap<String, String>>) -> Metadata {
    metadata
        .into_iter()
        .flatten()
        .filter(|(key, _)| key.as_str() != CRC_KEY)
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect()
}

/// The S3 metadata of a publish: the caller's, plus the CRC record when
/// the server keeps none.
///
/// # Errors
/// `InvalidArgument` when the caller uses a reserved key.
pub(super) fn publish_metadata(
    metadata: &Metadata,
    crc64: Option<u64>,
) -> Result<HashMap<String, String>, ObjectError> {
    if metadata.contains_key(CRC_KEY) {
        return Err(ObjectError::InvalidArgument(
            format!("metadata key {CRC_KEY:?} is reserved by the S3 backend").into(),
        ));
    }
    let entries = metadata.len() + usize::from(crc64.is_some());
    if entries > MAX_STORED_ENTRIES {
        return Err(ObjectError::InvalidArgument(format!(
            "{entries} metadata entries exceed the S3 backend's {MAX_STORED_ENTRIES} (each is a \
             response header, and the client reads at most 100)"
        ).into()));
    }
    let mut out: HashMap<String, String> = metadata
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if let Some(crc) = crc64 {
        out.insert(CRC_KEY.to_owned(), checksum::to_wire(crc));
    }
    Ok(out)
}

/// The storage class as the contract reports it: `None` for STANDARD.
pub(super) fn storage_class(class: Option<&StorageClass>) -> Option<String> {
    class
        .map(StorageClass::as_str)
        .filter(|c| *c != "STANDARD")
        .map(str::to_owned)
}

/// Builds the [`ObjectMeta`] of `key` from what S3 said.
///
/// # Errors
/// `Corrupt` when S3 omits the etag or length, or the CRC is malformed.
pub(super) fn object_meta(
    key: &str,
    versioned: bool,
    described: &Described<'_>,
) -> Result<ObjectMeta, ObjectError> {
    let e_tag = described
        .e_tag
        .ok_or_else(|| ObjectError::Corrupt(format!("{key:?}: the server sent no etag").into()))?;
    let size = described
        .size
        .and_then(|s| u64::try_from(s).ok())
        .ok_or_else(|| {
            ObjectError::Corrupt(format!("{key:?}: the server sent no length").into())
        })?;
    let version_id = etag::real_version(described.version_id);
    Ok(ObjectMeta {
        key: key.to_owned(),
        version_id: if versioned {
            version_id.map(str::to_owned)
        } else {
            None
        },
        etag: etag::issue(e_tag, version_id),
        size,
        crc64: stored_crc(key, described.crc64, described.metadata)?,
        content_md5: None,
        last_modified_ms: millis(described.last_modified),
        metadata: user_metadata(described.metadata),
        storage_class: storage_class(described.storage_class),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stored_crc_comes_from_the_server_or_the_metadata_record() {
        let wire = checksum::to_wire(0xAE8B_1486_0A79_9888);
        assert_eq!(
            stored_crc("k", Some(&wire), None),
            Ok(Some(0xAE8B_1486_0A79_9888))
        );
        let record: HashMap<_, _> = [(CRC_KEY.to_owned(), wire.clone())].into();
        assert_eq!(
            stored_crc("k", None, Some(&record)),
            Ok(Some(0xAE8B_1486_0A79_9888))
        );
        assert_eq!(stored_crc("k", Some("abcd-3"), None), Ok(None));
        assert_eq!(stored_crc("k", None, None), Ok(None));
    }

    #[test]
    fn a_malformed_or_contradicted_crc_is_corrupt() {
        assert!(matches!(
            stored_crc("k", Some("nope"), None),
            Err(ObjectError::Corrupt(_))
        ));
        let record: HashMap<_, _> = [(CRC_KEY.to_owned(), checksum::to_wire(1))].into();
        assert!(matches!(
            stored_crc("k", Some(&checksum::to_wire(2)), Some(&record)),
            Err(ObjectError::Corrupt(_))
        ));
    }

    #[test]
    fn the_crc_record_is_reserved_and_hidden_from_callers() {
        let mut caller = Metadata::new();
        caller.insert("gen".into(), "1".into());
        let sent = publish_metadata(&caller, Some(7)).unwrap();
        assert_eq!(sent.len(), 2);
        assert_eq!(user_metadata(Some(&sent)), caller);
        caller.insert(CRC_KEY.into(), "x".into());
        assert!(matches!(
            publish_metadata(&caller, None),
            Err(ObjectError::InvalidArgument(_))
        ));
    }
}
