//! The native host's object stores run the host's own object conformance
//! suite (`custodian_object::object_conformance_tests!`, its `guest` form),
//! so a plugin's native unit tests see the conditional-publish, copy,
//! range, listing and bounds semantics every host backend has.
//!
//! [`NativeObjects`] adapts the SDK's native `objects` functions (what a
//! plugin can call: the WIT `objects` interface) to the host's
//! [`ObjectStore`] trait. The primitives the WIT cannot express (multipart
//! uploads, and so compose; the operator's `admin` calls) answer
//! `Unsupported`, and the `guest` form skips exactly the checks that need
//! them. The native host is thread-local: each generated `#[tokio::test]`
//! runs on a current-thread runtime, so every call of one check reaches the
//! same state, and the factory resets that state, so every check starts
//! from an empty store even when libtest reuses a thread.

use std::ops::Range;

use async_trait::async_trait;
use bytes::Bytes;
use custodian_object::{
    BootstrapReport, CompleteOptions, CopyOptions, DeleteOptions, GetOptions, GetResult,
    HeadOptions, ListPage, ListedObject, ListedVersion, Metadata, ObjectAdmin, ObjectError,
    ObjectKey, ObjectMeta, ObjectStore, PartData, PendingUpload, PutCondition, PutOptions,
    UploadOptions,
};
use custodian_sdk::objects::{self as wit, MAX_BODY_BYTES};
use custodian_sdk::{Error, testing};

/// The one store every check uses (the native host grants any name).
const STORE: &str = "conformance";

/// The native host's objects behind the host's [`ObjectStore`] trait.
struct NativeObjects;

impl NativeObjects {
    /// Empties this thread's native host.
    fn new() -> Self {
        testing::reset(0);
        Self
    }
}

/// A native host error as the host's object stores report it: the inverse
/// of the runtime's mapping of [`ObjectError`] kinds to WIT errors.
///
/// `other` is the WIT's "no kind", which no object-store failure has (the
/// runtime answers it only for its own internal errors), so it is a
/// conformance failure of the native host, reported as such.
fn object_error(error: Error) -> ObjectError {
    match error {
        Error::NotFound(m) => ObjectError::NotFound(m.into()),
        Error::PreconditionFailed(m) => ObjectError::PreconditionFailed(m.into()),
        Error::Conflict(m) => ObjectError::Conflict(m.into()),
        Error::ChecksumMismatch(m) => ObjectError::ChecksumMismatch(m.into()),
        Error::InvalidArgument(m) => ObjectError::InvalidArgument(m.into()),
        Error::Unsupported(m) => ObjectError::Unsupported(m.into()),
        Error::AccessDenied(m) => ObjectError::Auth(m.into()),
        Error::Unavailable(m) => ObjectError::Unavailable(m.into()),
        Error::Corrupt(m) => ObjectError::Corrupt(m.into()),
        Error::BudgetExhausted(m) => ObjectError::BudgetExhausted(m.into()),
        error @ Error::Other(_) => {
            panic!("the native objects answered {error:?}, which no object call answers")
        }
    }
}

/// What the WIT cannot ask for.
fn inexpressible(what: &str) -> ObjectError {
    ObjectError::Unsupported(format!("{what}: the WIT `objects` interface has no such call").into())
}

fn wit_condition(condition: &PutCondition) -> wit::PutCondition {
    match condition {
        PutCondition::IfMatch(etag) => wit::PutCondition::IfMatch(etag.clone()),
        PutCondition::IfNoneMatchAny => wit::PutCondition::IfNoneMatchAny,
        PutCondition::Unconditional => wit::PutCondition::Unconditional,
    }
}

fn wit_metadata(metadata: &Metadata) -> Vec<(String, String)> {
    metadata
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn host_meta(meta: wit::ObjectMeta) -> ObjectMeta {
    let count = meta.metadata.len();
    let metadata: Metadata = meta.metadata.into_iter().collect();
    // The host hands back a map: never a key twice.
    assert_eq!(metadata.len(), count, "metadata names a key twice");
    ObjectMeta {
        key: meta.key,
        version_id: meta.version_id,
        etag: meta.etag,
        size: meta.size,
        crc64: meta.crc64,
        // The WIT carries no MD5: a plugin publishes with a CRC only.
        content_md5: None,
        last_modified_ms: meta.last_modified_ms,
        metadata,
        // The WIT has no storage class; a guest sees only standard storage.
        storage_class: None,
    }
}

/// Reads `range` as a plugin must: in calls of at most [`MAX_BODY_BYTES`],
/// each through `read(offset, length)`, until a short read says the
/// object's end is reached. At least one call is made, so an empty range
/// still reaches the host's checks.
fn read_in_calls(
    range: &Range<u64>,
    mut read: impl FnMut(u64, u64) -> Result<Vec<u8>, Error>,
) -> Result<Vec<Bytes>, ObjectError> {
    let mut segments = Vec::new();
    let mut offset = range.start;
    loop {
        let length = range.end.saturating_sub(offset).min(MAX_BODY_BYTES);
        let chunk = read(offset, length).map_err(object_error)?;
        let got = chunk.len() as u64;
        segments.push(Bytes::from(chunk));
        offset += got;
        if got < length || got == 0 || offset >= range.end {
            return Ok(segments);
        }
    }
}

#[async_trait]
impl ObjectStore for NativeObjects {
    fn versioned(&self) -> bool {
        false
    }

    // No multipart assembly through the WIT: a plugin publishes one body
    // of at most `MAX_BODY_BYTES`, as one part.
    fn min_part_size(&self) -> u64 {
        MAX_BODY_BYTES
    }

    fn max_parts(&self) -> u32 {
        1
    }

    async fn put_opts(
        &self,
        key: &ObjectKey,
        body: Bytes,
        options: PutOptions<'_>,
    ) -> Result<ObjectMeta, ObjectError> {
        wit::put(
            STORE,
            key,
            &body,
            &wit_condition(options.condition),
            Some(options.crc64),
            &wit_metadata(options.metadata),
        )
        .map(host_meta)
        .map_err(object_error)
    }

    async fn copy_opts(
        &self,
        source: &ObjectKey,
        destination: &ObjectKey,
        options: CopyOptions<'_>,
    ) -> Result<ObjectMeta, ObjectError> {
        wit::copy(
            STORE,
            source,
            options.source_if_match,
            destination,
            &wit_condition(options.condition),
            &wit_metadata(options.metadata),
        )
        .map(host_meta)
        .map_err(object_error)
    }

    async fn head_opts(
        &self,
        key: &ObjectKey,
        options: HeadOptions<'_>,
    ) -> Result<ObjectMeta, ObjectError> {
        match options.version_id {
            None => wit::head(STORE, key),
            Some(version_id) => wit::head_version(STORE, key, version_id),
        }
        .map(host_meta)
        .map_err(object_error)
    }

    async fn get_opts(
        &self,
        key: &ObjectKey,
        options: GetOptions<'_>,
    ) -> Result<GetResult, ObjectError> {
        if let Some(range) = &options.range
            && range.start > range.end
        {
            // An offset and a length cannot say this (the suite's `guest`
            // form skips the check that asks).
            return Err(inexpressible("an inverted range"));
        }
        match (options.version_id, options.range) {
            // A whole current object: one `get`, guarded as asked.
            (None, None) => {
                let (meta, body) = wit::get(STORE, key, options.if_match).map_err(object_error)?;
                Ok(GetResult {
                    meta: host_meta(meta),
                    body: vec![Bytes::from(body)],
                })
            }
            // A range answer describes the whole object, which `get-range`
            // does not return: `head` first, then ranges pinned to the
            // guard asked for, or to the generation `head` saw.
            (None, Some(range)) => {
                let meta = host_meta(wit::head(STORE, key).map_err(object_error)?);
                let etag = options.if_match.unwrap_or(&meta.etag);
                let body = read_in_calls(&range, |offset, length| {
                    wit::get_range(STORE, key, offset, length, Some(etag))
                })?;
                Ok(GetResult { meta, body })
            }
            // A version is immutable, so its own etag is the guard a read
            // of it can have.
            (Some(version_id), range) => {
                let meta =
                    host_meta(wit::head_version(STORE, key, version_id).map_err(object_error)?);
                if let Some(want) = options.if_match
                    && want != meta.etag
                {
                    return Err(object_error(Error::PreconditionFailed(format!(
                        "{key:?} version {version_id} has etag {}, not {want}",
                        meta.etag
                    ))));
                }
                let range = range.unwrap_or(0..u64::MAX);
                let body = read_in_calls(&range, |offset, length| {
                    wit::get_version_range(STORE, key, version_id, offset, length)
                })?;
                Ok(GetResult { meta, body })
            }
        }
    }

    async fn delete_opts(
        &self,
        key: &ObjectKey,
        options: DeleteOptions<'_>,
    ) -> Result<(), ObjectError> {
        match options.version_id {
            None => wit::delete(STORE, key),
            Some(version_id) => wit::delete_version(STORE, key, version_id),
        }
        .map_err(object_error)
    }

    async fn list(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<ListPage<ListedObject>, ObjectError> {
        let page = wit::list(STORE, prefix, cursor, limit).map_err(object_error)?;
        Ok(ListPage {
            items: page
                .objects
                .into_iter()
                .map(|o| ListedObject {
                    key: o.key,
                    size: o.size,
                    etag: o.etag,
                    content_md5: None,
                    last_modified_ms: o.last_modified_ms,
                })
                .collect(),
            next: page.next,
        })
    }

    async fn list_versions(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<ListPage<ListedVersion>, ObjectError> {
        wit::list_versions(STORE, prefix, cursor, limit)
            .map(version_page)
            .map_err(object_error)
    }

    async fn list_key_versions(
        &self,
        key: &ObjectKey,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<ListPage<ListedVersion>, ObjectError> {
        wit::list_key_versions(STORE, key.as_str(), cursor, limit)
            .map(version_page)
            .map_err(object_error)
    }

    async fn create_upload(
        &self,
        _key: &ObjectKey,
        _options: UploadOptions<'_>,
    ) -> Result<String, ObjectError> {
        Err(inexpressible("a multipart upload"))
    }

    async fn upload_part(
        &self,
        _key: &ObjectKey,
        _upload_id: &str,
        _part: u32,
        _data: PartData<'_>,
    ) -> Result<u64, ObjectError> {
        Err(inexpressible("a multipart upload"))
    }

    async fn complete_upload(
        &self,
        _key: &ObjectKey,
        _upload_id: &str,
        _options: CompleteOptions<'_>,
    ) -> Result<ObjectMeta, ObjectError> {
        Err(inexpressible("a multipart upload"))
    }

    async fn abort_upload(&self, _key: &ObjectKey, _upload_id: &str) -> Result<(), ObjectError> {
        Err(inexpressible("a multipart upload"))
    }

    async fn list_uploads(&self, _prefix: &str) -> Result<Vec<PendingUpload>, ObjectError> {
        Err(inexpressible("a multipart upload"))
    }

    async fn list_parts(
        &self,
        _key: &ObjectKey,
        _upload_id: &str,
    ) -> Result<Vec<custodian_object::UploadedPart>, ObjectError> {
        Err(inexpressible("a multipart upload"))
    }

    fn admin(&self) -> &dyn ObjectAdmin {
        self
    }
}

/// No operator calls reach a plugin: bootstrap (and, by default, every
/// other admin call) is `Unsupported`.
#[async_trait]
impl ObjectAdmin for NativeObjects {
    async fn bootstrap(&self, _prefix: &str) -> Result<BootstrapReport, ObjectError> {
        Err(inexpressible("bootstrap"))
    }
}

custodian_object::object_conformance_tests!(unversioned guest: NativeObjects::new);

// What the suite cannot see through the adapter: `ObjectStoreExt` checks a
// key into an `ObjectKey` before the adapter is called, so these call the
// native host with raw strings and hold it to the host's own rules.

/// Keys on both sides of the host's rule, and at its edges.
fn sample_keys() -> Vec<String> {
    let longest = "k".repeat(custodian_object::MAX_OBJECT_KEY_BYTES);
    vec![
        "a".into(),
        "a/b/c".into(),
        "with space/ünïcode".into(),
        "a.b/..c".into(),
        longest.clone(),
        String::new(),
        longest + "k",
        "é".repeat(custodian_object::MAX_OBJECT_KEY_BYTES / 2 + 1),
        "a\0b".into(),
        "a\nb".into(),
        "/a".into(),
        "a/".into(),
        "a//b".into(),
        "a/./b".into(),
        "../a".into(),
    ]
}

/// Every call naming a key refuses exactly the keys `ObjectKey::new`
/// refuses, with the host's words.
#[test]
fn the_native_host_refuses_exactly_the_keys_the_host_refuses_in_the_same_words() {
    for key in sample_keys() {
        testing::reset(0);
        let host = ObjectKey::new(key.clone()).map(drop);
        let want = host.clone().map_err(ObjectError::into_message);
        let any = wit::PutCondition::Unconditional;
        let same = |call: &str, got: Result<(), Error>| match (&want, got) {
            (Ok(()), Ok(())) | (Ok(()), Err(Error::NotFound(_) | Error::Unsupported(_))) => {}
            (Err(want), Err(Error::InvalidArgument(got))) => {
                assert_eq!(&got, want, "{call} {key:?}");
            }
            (want, got) => panic!("{call} {key:?}: the host says {want:?}, native {got:?}"),
        };
        same(
            "put",
            wit::put(STORE, &key, b"v", &any, None, &[]).map(drop),
        );
        same("head", wit::head(STORE, &key).map(drop));
        same("get", wit::get(STORE, &key, None).map(drop));
        same(
            "get-range",
            wit::get_range(STORE, &key, 0, 1, None).map(drop),
        );
        same(
            "copy to",
            wit::copy(STORE, "a", None, &key, &any, &[]).map(drop),
        );
        same(
            "copy from",
            wit::copy(STORE, &key, None, "b", &any, &[]).map(drop),
        );
        same(
            "head-version",
            wit::head_version(STORE, &key, "v").map(drop),
        );
        same(
            "get-version-range",
            wit::get_version_range(STORE, &key, "v", 0, 1).map(drop),
        );
        same(
            "delete-version",
            wit::delete_version(STORE, &key, "v").map(drop),
        );
        same("delete", wit::delete(STORE, &key));
    }
}

/// `put` and `copy` refuse exactly the metadata `validate_metadata`
/// refuses, with the host's words, and a key named twice as the host's
/// conversion of the WIT list does.
#[test]
fn the_native_host_refuses_exactly_the_metadata_the_host_refuses_in_the_same_words() {
    use custodian_object::{MAX_METADATA_BYTES, MAX_METADATA_ENTRIES, validate_metadata};
    let pairs = |pairs: &[(&str, String)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    };
    let entries = |n: usize| -> Vec<(String, String)> {
        (0..n).map(|i| (format!("m{i:02}"), "v".into())).collect()
    };
    let samples = [
        pairs(&[("gen", "7".into()), ("a_b-0", " ~ ".into())]),
        entries(MAX_METADATA_ENTRIES),
        entries(MAX_METADATA_ENTRIES + 1),
        pairs(&[("k", "v".repeat(MAX_METADATA_BYTES - 1))]),
        pairs(&[("k", "v".repeat(MAX_METADATA_BYTES))]),
        pairs(&[("", "v".into())]),
        pairs(&[("Upper", "v".into())]),
        pairs(&[("k", "caf\u{e9}".into())]),
        pairs(&[("k", "line\nbreak".into())]),
    ];
    let any = wit::PutCondition::Unconditional;
    for metadata in &samples {
        testing::reset(0);
        wit::put(STORE, "src", b"v", &any, None, &[]).unwrap();
        let map: Metadata = metadata.iter().cloned().collect();
        let want = validate_metadata(&map).map_err(ObjectError::into_message);
        for (call, got) in [
            ("put", wit::put(STORE, "k", b"v", &any, None, metadata)),
            ("copy", wit::copy(STORE, "src", None, "k", &any, metadata)),
        ] {
            match (&want, got) {
                (Ok(()), Ok(meta)) => assert_eq!(host_meta(meta).metadata, map),
                (Err(want), Err(Error::InvalidArgument(got))) => {
                    assert_eq!(&got, want, "{call}");
                }
                (want, got) => panic!("{call} {metadata:?}: host {want:?}, native {got:?}"),
            }
        }
    }
    testing::reset(0);
    let twice = pairs(&[("k", "1".into()), ("k", "2".into())]);
    let got = wit::put(STORE, "k", b"v", &any, None, &twice);
    assert!(matches!(got, Err(Error::InvalidArgument(_))), "{got:?}");
    assert!(matches!(wit::head(STORE, "k"), Err(Error::NotFound(_))));
}

/// The host hands metadata back from a map, keys ascending, whatever order
/// the plugin wrote it in.
#[test]
fn metadata_reads_back_in_key_order() {
    testing::reset(0);
    let written = vec![("b".to_owned(), "2".to_owned()), ("a".into(), "1".into())];
    let any = wit::PutCondition::Unconditional;
    let put = wit::put(STORE, "k", b"v", &any, None, &written).unwrap();
    let sorted = vec![("a".to_owned(), "1".to_owned()), ("b".into(), "2".into())];
    assert_eq!(put.metadata, sorted);
    assert_eq!(wit::head(STORE, "k").unwrap().metadata, sorted);
}

/// A call with several faults is refused for the one the host checks
/// first: the body's size, then the key, then the metadata, then the CRC.
#[test]
fn a_put_with_several_faults_is_refused_for_the_one_the_host_checks_first() {
    testing::reset(0);
    let any = wit::PutCondition::Unconditional;
    let wrong_crc = Some(custodian_sdk::checksum::crc64_nvme(b"other"));
    let bad_metadata = vec![("Upper".to_owned(), "v".to_owned())];
    let got = wit::put(STORE, "a//b", b"v", &any, wrong_crc, &bad_metadata);
    assert!(
        matches!(&got, Err(Error::InvalidArgument(m)) if m.starts_with("object key")),
        "{got:?}"
    );
    let got = wit::put(STORE, "k", b"v", &any, wrong_crc, &bad_metadata);
    assert!(
        matches!(&got, Err(Error::InvalidArgument(m)) if m.starts_with("metadata")),
        "{got:?}"
    );
    let got = wit::put(STORE, "k", b"v", &any, wrong_crc, &[]);
    assert!(matches!(got, Err(Error::ChecksumMismatch(_))), "{got:?}");
    let oversized = vec![0; MAX_BODY_BYTES as usize + 1];
    let got = wit::put(STORE, "a//b", &oversized, &any, wrong_crc, &bad_metadata);
    assert!(
        matches!(&got, Err(Error::InvalidArgument(m)) if m.starts_with("a body")),
        "{got:?}"
    );
}

/// A range longer than one call may move is refused before the key is
/// looked up, so the answer does not depend on whether the key exists.
#[test]
fn a_range_longer_than_a_call_may_move_is_invalid_whether_or_not_the_key_exists() {
    testing::reset(0);
    let any = wit::PutCondition::Unconditional;
    wit::put(STORE, "k", b"v", &any, None, &[]).unwrap();
    for key in ["k", "absent"] {
        let got = wit::get_range(STORE, key, 0, MAX_BODY_BYTES + 1, None);
        assert!(matches!(got, Err(Error::InvalidArgument(_))), "{got:?}");
        let got = wit::get_version_range(STORE, key, "v", 0, MAX_BODY_BYTES + 1);
        assert!(matches!(got, Err(Error::InvalidArgument(_))), "{got:?}");
    }
    assert_eq!(
        wit::get_range(STORE, "k", 0, MAX_BODY_BYTES, None).unwrap(),
        b"v"
    );
}

/// A WIT version page as the host's stores return one.
fn version_page(page: wit::VersionPage) -> ListPage<ListedVersion> {
    ListPage {
        items: page
            .versions
            .into_iter()
            .map(|v| ListedVersion {
                key: v.key,
                version_id: v.version_id,
                etag: v.etag,
                content_md5: None,
                size: v.size,
                is_current: v.is_current,
                is_delete_marker: v.is_delete_marker,
                last_modified_ms: v.last_modified_ms,
            })
            .collect(),
        next: page.next,
    }
}
