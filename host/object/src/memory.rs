//! The in-memory backend: the reference model every other object store is
//! compared against. Not durable; one mutex makes every call trivially
//! serializable, so it never answers [`ObjectError::Conflict`] (there is
//! no concurrent writer in flight for a second one to collide with).
//!
//! Every key holds its versions oldest first. On an unversioned store a
//! key holds at most one, and a publish replaces it; on a versioned store
//! a publish or a delete appends. Keys with no versions are removed from
//! the map, so "a key is present" and "it has versions" are one fact.

use std::collections::BTreeMap;
use std::ops::{Bound, Range};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use bytes::Bytes;

use super::{
    BootstrapReport, CompleteOptions, CopyOptions, DeleteOptions, GetOptions, GetResult,
    HeadOptions, LifecycleView, ListPage, ListedObject, ListedVersion, MAX_PART_NUMBER, Metadata,
    ObjectAdmin, ObjectError, ObjectKey, ObjectMeta, ObjectStore, PartData, PendingUpload,
    PutCondition, PutOptions, RetentionOutcome, UploadOptions, UploadedPart, validate_limit,
    validate_metadata, validate_part_number, validate_range,
};
use custodian_base::checksum::crc64_nvme;
use custodian_base::clock::Clock;

/// The digits of a version id. Zero-padded so that ids compare as strings
/// in creation order, which is what lets a version-listing cursor resume
/// after a version that has since been deleted.
const VERSION_ID_DIGITS: usize = 20;

/// One published body.
#[derive(Debug, Clone)]
struct Object {
    body: Bytes,
    etag: String,
    crc64: u64,
    content_md5: Option<[u8; 16]>,
    metadata: Metadata,
    /// `None` is the standard class; every publish starts there.
    storage_class: Option<String>,
}

/// One entry in a key's history.
#[derive(Debug, Clone)]
struct Version {
    /// Unique across the store; sorts by creation.
    id: String,
    last_modified_ms: u64,
    /// `None` is a delete marker.
    object: Option<Object>,
}

/// S3's multipart granularity, modelled so that a caller planning parts
/// against this double plans what S3 will accept.
const MIN_PART_SIZE: u64 = 5 << 20;

/// A multipart assembly in progress.
#[derive(Debug)]
struct Upload {
    key: String,
    initiated_ms: u64,
    /// Declared at creation, published at completion.
    metadata: Metadata,
    /// Part number to bytes and CRC.
    parts: BTreeMap<u32, (Bytes, u64)>,
}

#[derive(Debug, Default)]
struct State {
    /// Versions of each key, oldest first; never empty.
    keys: BTreeMap<String, Vec<Version>>,
    /// Pending uploads by id.
    uploads: BTreeMap<String, Upload>,
    /// Lifecycle rules, stored and never executed (as on the local S3
    /// servers the tests use).
    lifecycle: Vec<LifecycleView>,

    /// Store-wide publish counter: makes every etag and version id unique
    /// even when the same bytes are published twice.
    seq: u64,
}

impl State {
    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// The current object: the newest version, unless that is a marker.
    /// An older version behind a marker is deliberately not current.
    fn current(&self, key: &str) -> Option<(&Version, &Object)> {
        let newest = self.keys.get(key)?.last()?;
        Some((newest, newest.object.as_ref()?))
    }

    fn version(&self, key: &str, version_id: &str) -> Option<&Version> {
        self.keys.get(key)?.iter().find(|v| v.id == version_id)
    }

    /// One exact version with bytes: `NotFound` if it does not exist,
    /// `PreconditionFailed` if it is a delete marker.
    fn readable_version(
        &self,
        key: &str,
        version_id: &str,
    ) -> Result<(&Version, &Object), ObjectError> {
        let version = self
            .version(key, version_id)
            .ok_or_else(|| version_not_found(key, version_id))?;
        let object = version
            .object
            .as_ref()
            .ok_or_else(|| marker_version(key, version_id))?;
        Ok((version, object))
    }
}

/// Objects held in process memory, with the full conditional, checksum
/// and version semantics of the [`ObjectStore`] contract.
pub struct MemoryStore {
    state: Mutex<State>,
    clock: Arc<dyn Clock>,
    versioned: bool,
}

impl MemoryStore {
    /// An empty store that keeps every version and marks deletes, stamping
    /// versions with `clock`.
    pub fn versioned(clock: Arc<dyn Clock>) -> Self {
        Self::new(clock, true)
    }

    /// An empty store where a publish replaces the object and a delete
    /// removes it, stamping objects with `clock`.
    pub fn unversioned(clock: Arc<dyn Clock>) -> Self {
        Self::new(clock, false)
    }

    fn new(clock: Arc<dyn Clock>, versioned: bool) -> Self {
        Self {
            state: Mutex::new(State::default()),
            clock,
            versioned,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave a half-applied call:
        // every check runs before the first mutation, and the mutations
        // (a counter bump, then one push, clear, retain or remove) do not
        // panic midway. The only code between them that could panic is the
        // injected clock, and a panic there costs an unused sequence
        // number, which nothing reads as meaningful. So the state behind a
        // poisoned lock is consistent.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Replaces the lifecycle rules, as another tool (or the bucket's owner)
    /// would: lets tests check that this host never drops a rule it did not
    /// write.
    pub fn set_lifecycle_rules(&self, rules: Vec<LifecycleView>) {
        self.lock().lifecycle = rules;
    }

    /// Puts the current object at `key` in a storage class, as a lifecycle
    /// transition would; lets tests exercise the copy-source guard.
    pub fn set_storage_class(&self, key: &str, class: &str) {
        let mut state = self.lock();
        if let Some(object) = state
            .keys
            .get_mut(key)
            .and_then(|versions| versions.last_mut())
            .and_then(|newest| newest.object.as_mut())
        {
            object.storage_class = Some(class.to_owned());
        }
    }

    fn upload<'s>(
        state: &'s mut State,
        key: &str,
        upload_id: &str,
    ) -> Result<&'s mut Upload, ObjectError> {
        match state.uploads.get_mut(upload_id) {
            Some(upload) if upload.key == key => Ok(upload),
            _ => Err(ObjectError::NoSuchUpload(
                format!("{upload_id:?} for {key:?}").into(),
            )),
        }
    }

    /// The current object (`version_id: None`) or one exact version with
    /// bytes.
    fn readable<'s>(
        &self,
        state: &'s State,
        key: &str,
        version_id: Option<&str>,
    ) -> Result<(&'s Version, &'s Object), ObjectError> {
        match version_id {
            None => state.current(key).ok_or_else(|| not_found(key)),
            Some(version_id) => {
                self.require_versions("reading a version")?;
                state.readable_version(key, version_id)
            }
        }
    }

    fn require_versions(&self, call: &str) -> Result<(), ObjectError> {
        if self.versioned {
            Ok(())
        } else {
            Err(ObjectError::Unsupported(
                format!("{call} needs a versioned store").into(),
            ))
        }
    }

    fn meta(&self, key: &str, version: &Version, object: &Object) -> ObjectMeta {
        ObjectMeta {
            storage_class: object.storage_class.clone(),
            key: key.to_owned(),
            version_id: self.versioned.then(|| version.id.clone()),
            etag: object.etag.clone(),
            size: object.body.len() as u64,
            crc64: Some(object.crc64),
            content_md5: object.content_md5,
            last_modified_ms: Some(version.last_modified_ms),
            metadata: object.metadata.clone(),
        }
    }

    /// Publishes `body` at `key` under `condition`, after every argument
    /// has been checked; the one place the state grows an object.
    fn publish(
        &self,
        state: &mut State,
        key: &str,
        body: Bytes,
        (crc64, content_md5): (u64, Option<[u8; 16]>),
        condition: &PutCondition,
        metadata: &Metadata,
    ) -> Result<ObjectMeta, ObjectError> {
        check_condition(state, key, condition)?;
        let seq = state.next_seq();
        let version = Version {
            id: format!("{seq:0width$}", width = VERSION_ID_DIGITS),
            last_modified_ms: self.clock.now_ms(),
            object: Some(Object {
                body,
                etag: format!("\"{crc64:016x}-{seq}\""),
                crc64,
                content_md5,
                metadata: metadata.clone(),
                storage_class: None,
            }),
        };
        let versions = state.keys.entry(key.to_owned()).or_default();
        if !self.versioned {
            versions.clear();
        }
        versions.push(version);
        let newest = versions.last().expect("a version was just pushed");
        let object = newest.object.as_ref().expect("a publish is not a marker");
        Ok(self.meta(key, newest, object))
    }
}

/// Whether a publish to `key` may go ahead.
fn check_condition(state: &State, key: &str, condition: &PutCondition) -> Result<(), ObjectError> {
    condition.check(
        key,
        state.current(key).map(|(_, object)| object.etag.as_str()),
    )
}

/// Refuses a read guard that does not name the current etag.
fn check_if_match(key: &str, object: &Object, if_match: Option<&str>) -> Result<(), ObjectError> {
    match if_match {
        Some(want) if want != object.etag => Err(ObjectError::PreconditionFailed(
            format!("{key:?} has etag {}, not {want}", object.etag).into(),
        )),
        _ => Ok(()),
    }
}

/// `range` of `body`, truncated at its end; empty from the end onwards.
fn slice(body: &Bytes, range: &Range<u64>) -> Bytes {
    let len = body.len() as u64;
    let start = range.start.min(len);
    let end = range.end.clamp(start, len);
    // Both are at most `len`, which came from a usize.
    body.slice(start as usize..end as usize)
}

fn not_found(key: &str) -> ObjectError {
    ObjectError::NotFound(format!("no current object at {key:?}").into())
}

fn version_not_found(key: &str, version_id: &str) -> ObjectError {
    ObjectError::NotFound(format!("no version {version_id:?} of {key:?}").into())
}

fn marker_version(key: &str, version_id: &str) -> ObjectError {
    ObjectError::PreconditionFailed(
        format!("version {version_id:?} of {key:?} is a delete marker and has no bytes").into(),
    )
}

/// Splits a version-listing cursor, `key\0version_id`, refusing anything
/// this store could not have handed out.
fn parse_version_cursor(cursor: &str) -> Result<(&str, &str), ObjectError> {
    let malformed = || {
        ObjectError::InvalidArgument(
            format!("{cursor:?} is not a version-listing cursor (key, NUL, version id)").into(),
        )
    };
    let (key, version_id) = cursor.split_once('\0').ok_or_else(malformed)?;
    let well_formed_id =
        version_id.len() == VERSION_ID_DIGITS && version_id.bytes().all(|b| b.is_ascii_digit());
    if ObjectKey::new(key).is_err() || !well_formed_id {
        return Err(malformed());
    }
    Ok((key, version_id))
}

#[async_trait]
impl ObjectStore for MemoryStore {
    fn versioned(&self) -> bool {
        self.versioned
    }

    fn min_part_size(&self) -> u64 {
        MIN_PART_SIZE
    }

    fn max_parts(&self) -> u32 {
        MAX_PART_NUMBER
    }

    async fn put_opts(
        &self,
        key: &ObjectKey,
        body: Bytes,
        options: PutOptions<'_>,
    ) -> Result<ObjectMeta, ObjectError> {
        validate_metadata(options.metadata)?;
        // Hashed before taking the lock: it is the slow part, and it
        // depends on nothing stored.
        let actual = crc64_nvme(&body);
        if actual != options.crc64 {
            return Err(ObjectError::ChecksumMismatch(
                format!(
                    "{key:?}: the body's CRC-64/NVME is {actual:016x}, the caller claimed {:016x}",
                    options.crc64
                )
                .into(),
            ));
        }
        let mut state = self.lock();
        let PutOptions {
            condition,
            metadata,
            crc64,
            content_md5,
        } = options;
        self.publish(
            &mut state,
            key,
            body,
            (crc64, content_md5),
            condition,
            metadata,
        )
    }

    async fn copy_opts(
        &self,
        source: &ObjectKey,
        destination: &ObjectKey,
        options: CopyOptions<'_>,
    ) -> Result<ObjectMeta, ObjectError> {
        validate_metadata(options.metadata)?;
        let mut state = self.lock();
        let (_, object) = state.current(source).ok_or_else(|| not_found(source))?;
        check_if_match(source, object, options.source_if_match)?;
        // The bytes are shared, not duplicated; the CRC travels with them
        // because it describes the bytes, while the metadata describes a
        // publish and so comes only from the caller.
        let (body, sums) = (object.body.clone(), (object.crc64, object.content_md5));
        let (condition, metadata) = (options.condition, options.metadata);
        self.publish(&mut state, destination, body, sums, condition, metadata)
    }

    async fn head_opts(
        &self,
        key: &ObjectKey,
        options: HeadOptions<'_>,
    ) -> Result<ObjectMeta, ObjectError> {
        let state = self.lock();
        let (version, object) = self.readable(&state, key, options.version_id)?;
        Ok(self.meta(key, version, object))
    }

    /// A delete marker has no bytes to read: `PreconditionFailed`, as for a
    /// HEAD of it.
    async fn get_opts(
        &self,
        key: &ObjectKey,
        options: GetOptions<'_>,
    ) -> Result<GetResult, ObjectError> {
        if let Some(range) = &options.range {
            validate_range(range)?;
        }
        let state = self.lock();
        let (version, object) = self.readable(&state, key, options.version_id)?;
        check_if_match(key, object, options.if_match)?;
        let body = match &options.range {
            Some(range) => slice(&object.body, range),
            None => object.body.clone(),
        };
        Ok(GetResult {
            meta: self.meta(key, version, object),
            body: vec![body],
        })
    }

    /// On a versioned store, removing the current object always appends a
    /// delete marker, even when the key has no versions or is already
    /// behind a marker: that is what S3 does, and matching it keeps the
    /// version listing identical across backends.
    async fn delete_opts(
        &self,
        key: &ObjectKey,
        options: DeleteOptions<'_>,
    ) -> Result<(), ObjectError> {
        if let Some(version_id) = options.version_id {
            self.require_versions("deleting a version")?;
            let mut state = self.lock();
            if let Some(versions) = state.keys.get_mut(key.as_str()) {
                versions.retain(|v| v.id != version_id);
                if versions.is_empty() {
                    state.keys.remove(key.as_str());
                }
            }
            return Ok(());
        }
        let mut state = self.lock();
        if self.versioned {
            let seq = state.next_seq();
            let marker = Version {
                id: format!("{seq:0width$}", width = VERSION_ID_DIGITS),
                last_modified_ms: self.clock.now_ms(),
                object: None,
            };
            state
                .keys
                .entry(key.as_str().to_owned())
                .or_default()
                .push(marker);
        } else {
            state.keys.remove(key.as_str());
        }
        Ok(())
    }

    /// `cursor` is the last key of the previous page and may be any string:
    /// the listing resumes strictly after it.
    async fn list(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<ListPage<ListedObject>, ObjectError> {
        validate_limit(limit)?;
        let lower = match cursor {
            Some(cursor) if cursor >= prefix => Bound::Excluded(cursor),
            _ => Bound::Included(prefix),
        };
        let state = self.lock();
        let mut current = state
            .keys
            .range::<str, _>((lower, Bound::Unbounded))
            .take_while(|(key, _)| key.starts_with(prefix))
            .filter_map(|(key, versions)| {
                let newest = versions.last()?;
                let object = newest.object.as_ref()?;
                Some(ListedObject {
                    key: key.clone(),
                    size: object.body.len() as u64,
                    etag: object.etag.clone(),
                    content_md5: object.content_md5,
                    last_modified_ms: Some(newest.last_modified_ms),
                })
            });
        let items: Vec<_> = current.by_ref().take(limit as usize).collect();
        let next = match current.next() {
            Some(_) => items.last().map(|item| item.key.clone()),
            None => None,
        };
        Ok(ListPage { items, next })
    }

    /// The cursor is `key\0version_id` of the last item returned. Resuming
    /// compares version ids rather than looking the version up, so a page
    /// boundary survives that version being deleted in between.
    async fn list_versions(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<ListPage<ListedVersion>, ObjectError> {
        self.require_versions("list_versions")?;
        validate_limit(limit)?;
        let after = cursor.map(parse_version_cursor).transpose()?;
        let lower = match after {
            Some((key, _)) if key >= prefix => key,
            _ => prefix,
        };
        let state = self.lock();
        let mut listed = state
            .keys
            .range::<str, _>((Bound::Included(lower), Bound::Unbounded))
            .take_while(|(key, _)| key.starts_with(prefix))
            .flat_map(|(key, versions)| {
                let newest = versions.len() - 1;
                versions
                    .iter()
                    .enumerate()
                    .rev()
                    .map(move |(index, version)| (key, index == newest, version))
            })
            .filter(|(key, _, version)| match after {
                Some((after_key, after_id)) => {
                    key.as_str() > after_key
                        || (key.as_str() == after_key && version.id.as_str() < after_id)
                }
                None => true,
            })
            .map(|(key, is_current, version)| ListedVersion {
                key: key.clone(),
                version_id: version.id.clone(),
                etag: version
                    .object
                    .as_ref()
                    .map_or_else(String::new, |o| o.etag.clone()),
                content_md5: version.object.as_ref().and_then(|o| o.content_md5),
                size: version.object.as_ref().map_or(0, |o| o.body.len() as u64),
                is_current,
                is_delete_marker: version.object.is_none(),
                last_modified_ms: Some(version.last_modified_ms),
            });
        let items: Vec<_> = listed.by_ref().take(limit as usize).collect();
        let next = match listed.next() {
            Some(_) => items
                .last()
                .map(|item| format!("{}\0{}", item.key, item.version_id)),
            None => None,
        };
        Ok(ListPage { items, next })
    }

    async fn create_upload(
        &self,
        key: &ObjectKey,
        options: UploadOptions<'_>,
    ) -> Result<String, ObjectError> {
        validate_metadata(options.metadata)?;
        let mut state = self.lock();
        let id = format!("upload-{}", state.next_seq());
        let upload = Upload {
            key: key.as_str().to_owned(),
            initiated_ms: self.clock.now_ms(),
            metadata: options.metadata.clone(),
            parts: BTreeMap::new(),
        };
        state.uploads.insert(id.clone(), upload);
        Ok(id)
    }

    async fn upload_part(
        &self,
        key: &ObjectKey,
        upload_id: &str,
        part: u32,
        data: PartData<'_>,
    ) -> Result<u64, ObjectError> {
        validate_part_number(part)?;
        let (body, crc64) =
            match data {
                PartData::Bytes { body, crc64 } => {
                    let actual = crc64_nvme(&body);
                    if actual != crc64 {
                        return Err(ObjectError::ChecksumMismatch(format!(
                        "part {part} of {key:?}: the body's CRC-64/NVME is {actual:016x}, not \
                         {crc64:016x}"
                    ).into()));
                    }
                    (body, crc64)
                }
                PartData::Copy {
                    source,
                    source_if_match,
                    range,
                } => {
                    validate_range(&range)?;
                    let state = self.lock();
                    let (_, object) = state.current(source).ok_or_else(|| not_found(source))?;
                    check_if_match(source, object, Some(source_if_match))?;
                    // S3 refuses a copy range outside the source rather than
                    // truncating.
                    if range.end > object.body.len() as u64 || range.is_empty() {
                        return Err(ObjectError::InvalidArgument(
                            format!(
                                "copy range {}..{} is outside {source:?} ({} bytes)",
                                range.start,
                                range.end,
                                object.body.len()
                            )
                            .into(),
                        ));
                    }
                    let body = slice(&object.body, &range);
                    let crc = crc64_nvme(&body);
                    (body, crc)
                }
            };
        let mut state = self.lock();
        Self::upload(&mut state, key, upload_id)?
            .parts
            .insert(part, (body, crc64));
        Ok(crc64)
    }

    async fn complete_upload(
        &self,
        key: &ObjectKey,
        upload_id: &str,
        options: CompleteOptions<'_>,
    ) -> Result<ObjectMeta, ObjectError> {
        let CompleteOptions {
            parts,
            condition,
            crc64,
        } = options;
        let mut state = self.lock();
        let upload = Self::upload(&mut state, key, upload_id)?;
        if parts == 0 || upload.parts.keys().copied().ne(1..=parts) {
            return Err(ObjectError::InvalidArgument(
                format!(
                    "upload {upload_id:?} holds parts {:?}, not exactly 1..={parts}",
                    upload.parts.keys().collect::<Vec<_>>()
                )
                .into(),
            ));
        }
        let mut body = Vec::new();
        for (number, (part, _)) in &upload.parts {
            if *number < parts && (part.len() as u64) < MIN_PART_SIZE {
                return Err(ObjectError::InvalidArgument(
                    format!(
                        "part {number} is {} bytes, under the minimum part of {MIN_PART_SIZE}",
                        part.len()
                    )
                    .into(),
                ));
            }
            body.extend_from_slice(part);
        }
        let actual = crc64_nvme(&body);
        if actual != crc64 {
            return Err(ObjectError::ChecksumMismatch(
                format!(
                    "{key:?}: the assembled object's CRC-64/NVME is {actual:016x}, not {crc64:016x}"
                )
                .into(),
            ));
        }
        let metadata = upload.metadata.clone();
        let meta = self.publish(
            &mut state,
            key,
            Bytes::from(body),
            // As the filesystem backend: no MD5 for an assembly.
            (crc64, None),
            condition,
            &metadata,
        )?;
        state.uploads.remove(upload_id);
        Ok(meta)
    }

    async fn abort_upload(&self, key: &ObjectKey, upload_id: &str) -> Result<(), ObjectError> {
        let mut state = self.lock();
        if state.uploads.get(upload_id).is_some_and(|u| u.key == **key) {
            state.uploads.remove(upload_id);
        }
        Ok(())
    }

    async fn list_uploads(&self, prefix: &str) -> Result<Vec<PendingUpload>, ObjectError> {
        let state = self.lock();
        Ok(state
            .uploads
            .iter()
            .filter(|(_, upload)| upload.key.starts_with(prefix))
            .map(|(id, upload)| PendingUpload {
                key: upload.key.clone(),
                upload_id: id.clone(),
                initiated_ms: Some(upload.initiated_ms),
            })
            .collect())
    }

    async fn list_parts(
        &self,
        key: &ObjectKey,
        upload_id: &str,
    ) -> Result<Vec<UploadedPart>, ObjectError> {
        let mut state = self.lock();
        let upload = Self::upload(&mut state, key, upload_id)?;
        Ok(upload
            .parts
            .iter()
            .map(|(&number, (body, crc64))| UploadedPart {
                number,
                size: body.len() as u64,
                crc64: Some(*crc64),
                // Parts keep no time here.
                last_modified_ms: None,
            })
            .collect())
    }

    fn admin(&self) -> &dyn ObjectAdmin {
        self
    }
}

#[async_trait]
impl ObjectAdmin for MemoryStore {
    async fn bootstrap(&self, prefix: &str) -> Result<BootstrapReport, ObjectError> {
        let pending = self.list_uploads(prefix).await?.len();
        let mut report = BootstrapReport::default();
        report.notes.push(format!(
            "in-memory store ({}), contents are lost when the process exits",
            if self.versioned {
                "versioned"
            } else {
                "unversioned"
            }
        ));
        report
            .notes
            .push("checksums are validated on every publish".into());
        if pending > 0 {
            report
                .warnings
                .push(format!("{pending} uploads under {prefix:?} are pending"));
        }
        Ok(report)
    }

    async fn lifecycle_rules(&self) -> Result<Vec<LifecycleView>, ObjectError> {
        Ok(self.lock().lifecycle.clone())
    }

    /// Read, merge, append: an enabled rule on exactly `prefix` that keeps
    /// noncurrent versions at least `days` satisfies the request; otherwise
    /// a rule is appended and every other rule is kept as it was.
    async fn ensure_noncurrent_retention(
        &self,
        prefix: &str,
        days: u64,
    ) -> Result<RetentionOutcome, ObjectError> {
        let mut state = self.lock();
        if let Some(rule) = state.lifecycle.iter().find(|r| {
            r.enabled && r.prefix == prefix && r.noncurrent_days.is_some_and(|d| d >= days)
        }) {
            return Ok(RetentionOutcome {
                rule_id: rule.id.clone(),
                noncurrent_days: rule.noncurrent_days.unwrap_or(days),
                created: false,
            });
        }
        let rule_id = format!("custodian-noncurrent-{days}d-{}", state.lifecycle.len());
        state.lifecycle.push(LifecycleView {
            id: rule_id.clone(),
            enabled: true,
            prefix: prefix.to_owned(),
            noncurrent_days: Some(days),
            expired_delete_marker: false,
        });
        Ok(RetentionOutcome {
            rule_id,
            noncurrent_days: days,
            created: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ObjectStoreExt;
    use custodian_base::clock::FixedClock;

    fn store(versioned: bool, clock: &Arc<FixedClock>) -> MemoryStore {
        let clock: Arc<dyn Clock> = clock.clone();
        if versioned {
            MemoryStore::versioned(clock)
        } else {
            MemoryStore::unversioned(clock)
        }
    }

    async fn put(store: &MemoryStore, key: &str, body: &'static [u8]) -> ObjectMeta {
        let body = Bytes::from_static(body);
        let crc = crc64_nvme(&body);
        store
            .put_whole(
                key,
                body,
                &PutCondition::Unconditional,
                &Metadata::new(),
                crc,
            )
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_supplied_md5_is_recorded_with_the_version() {
        let store = store(true, &Arc::new(FixedClock::new(0)));
        let md5 = *b"0123456789abcdef";
        let body = Bytes::from_static(b"x");
        let options = PutOptions {
            condition: &PutCondition::Unconditional,
            metadata: &Metadata::new(),
            crc64: crc64_nvme(&body),
            content_md5: Some(md5),
        };
        let key = ObjectKey::new("k").unwrap();
        assert_eq!(
            store
                .put_opts(&key, body, options)
                .await
                .unwrap()
                .content_md5,
            Some(md5)
        );
        assert_eq!(store.head("k").await.unwrap().content_md5, Some(md5));
    }

    #[tokio::test]
    async fn timestamps_come_from_the_injected_clock() {
        for versioned in [true, false] {
            let clock = Arc::new(FixedClock::new(5_000));
            let store = store(versioned, &clock);
            assert_eq!(put(&store, "a", b"1").await.last_modified_ms, Some(5_000));
            clock.set(7_000);
            put(&store, "b", b"2").await;
            let page = store.list("", None, 10).await.unwrap();
            let stamps: Vec<_> = page.items.iter().map(|o| o.last_modified_ms).collect();
            assert_eq!(stamps, vec![Some(5_000), Some(7_000)]);
            assert_eq!(store.head("b").await.unwrap().last_modified_ms, Some(7_000));
        }
    }

    #[tokio::test]
    async fn a_delete_marker_is_stamped_with_the_clock() {
        let clock = Arc::new(FixedClock::new(1_000));
        let store = store(true, &clock);
        put(&store, "k", b"v").await;
        clock.set(2_000);
        store.delete("k").await.unwrap();
        let page = store.list_versions("", None, 10).await.unwrap();
        let stamps: Vec<_> = page
            .items
            .iter()
            .map(|v| (v.is_delete_marker, v.last_modified_ms))
            .collect();
        assert_eq!(stamps, vec![(true, Some(2_000)), (false, Some(1_000))]);
    }

    #[tokio::test]
    async fn a_version_cursor_not_issued_by_this_store_is_invalid() {
        let store = store(true, &Arc::new(FixedClock::new(0)));
        let cursors = [
            "k\x00".to_owned(),
            "k\x00abc".to_owned(),
            "k\x001".to_owned(),
            format!("k\x00{:021}", 1),
            format!("k\x00{:020}\x00x", 1),
        ];
        for cursor in &cursors {
            let got = store.list_versions("", Some(cursor), 10).await;
            assert!(
                matches!(got, Err(ObjectError::InvalidArgument(_))),
                "{cursor:?}: {got:?}"
            );
        }
    }

    #[tokio::test]
    async fn an_unversioned_store_keeps_no_history() {
        // Invisible through the trait (version calls are unsupported), so
        // only this backend can check that a replace frees the old bytes.
        let store = store(false, &Arc::new(FixedClock::new(0)));
        for _ in 0..3 {
            put(&store, "k", b"v").await;
        }
        store.delete("gone").await.unwrap();
        let state = store.lock();
        assert_eq!(state.keys.len(), 1);
        assert_eq!(state.keys["k"].len(), 1);
    }

    mod versioned {
        use super::*;

        crate::object_conformance_tests!(versioned: || {
            MemoryStore::versioned(Arc::new(FixedClock::new(1_000_000)))
        });
    }

    mod unversioned {
        use super::*;

        crate::object_conformance_tests!(unversioned: || {
            MemoryStore::unversioned(Arc::new(FixedClock::new(1_000_000)))
        });
    }

    #[tokio::test]
    async fn retention_is_appended_without_dropping_a_foreign_rule() {
        let store = store(true, &Arc::new(FixedClock::new(0)));
        let foreign = LifecycleView {
            id: "owners-rule".into(),
            enabled: true,
            prefix: "logs/".into(),
            noncurrent_days: Some(1),
            expired_delete_marker: true,
        };
        store.set_lifecycle_rules(vec![foreign.clone()]);
        let outcome = store
            .ensure_noncurrent_retention("data/", 30)
            .await
            .unwrap();
        assert!(outcome.created);
        let again = store.ensure_noncurrent_retention("data/", 7).await.unwrap();
        assert!(!again.created, "a longer retention already covers 7 days");
        assert_eq!(again.rule_id, outcome.rule_id);
        let rules = store.lifecycle_rules().await.unwrap();
        assert_eq!(rules.len(), 2);
        assert_eq!(rules[0], foreign);
    }

    #[tokio::test]
    async fn a_base_in_an_archive_class_is_refused_as_a_copy_source() {
        use crate::{ComposeSpec, PartSource};
        let store = store(true, &Arc::new(FixedClock::new(0)));
        let data = vec![7u8; usize::try_from(MIN_PART_SIZE).unwrap() + 1];
        let body = Bytes::from(data.clone());
        let base = store
            .put_whole(
                "k",
                body,
                &PutCondition::IfNoneMatchAny,
                &Metadata::new(),
                crc64_nvme(&data),
            )
            .await
            .unwrap();
        store.set_storage_class("k", "GLACIER_IR");
        let mut file = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut file, &data).unwrap();
        let spec = ComposeSpec {
            key: &ObjectKey::new("k").unwrap(),
            local_path: file.path(),
            parts: vec![
                PartSource::BaseCopy {
                    offset: 0,
                    len: MIN_PART_SIZE,
                },
                PartSource::Local {
                    offset: MIN_PART_SIZE,
                    len: 1,
                },
            ],
            base_key: None,
            base_etag: Some(&base.etag),
            condition: PutCondition::IfMatch(base.etag.clone()),
            metadata: Metadata::new(),
            crc64: Some(crc64_nvme(&data)),
            progress: None,
        };
        let got = store.compose(&spec).await;
        assert!(
            matches!(got, Err(ObjectError::InvalidArgument(_))),
            "{got:?}"
        );
        assert!(store.list_uploads("").await.unwrap().is_empty());
    }
}
