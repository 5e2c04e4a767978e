//! Listings: current objects and every version, both from
//! ListObjectVersions (the etags this backend issues need each object's
//! version id, which ListObjectsV2 does not return).
//!
//! Two S3 details shape this module:
//!
//! - ListObjectVersions interleaves `<Version>` and `<DeleteMarker>`
//!   entries in one order (keys ascending, newest first), but the SDK
//!   deserialises them into two separate lists. Timestamps cannot restore
//!   the order (two writes in one millisecond tie), so an interceptor
//!   records the element order of the raw response and the lists are
//!   merged by it ([`DocumentOrder`]).
//!   Some servers (LocalStack, moto) group the elements by kind instead,
//!   and their timestamps have one-second resolution, so neither source
//!   orders a key's noncurrent versions against its noncurrent markers
//!   when both were written in the same second. Unless bootstrap has
//!   seen the server interleave, such a key's order is asked of the
//!   server itself, one entry per page ([`S3Store::resolve_ties`]).
//! - A version-listing cursor names the last version returned. S3 resumes
//!   after a version id positionally, but not every server does (moto
//!   finds nothing after a deleted one), so a cursor whose version is gone
//!   resumes from the version that followed it, which the cursor also
//!   carries: `key NUL version NUL next-version-of-the-same-key`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use aws_sdk_s3::config::interceptors::AfterDeserializationInterceptorContextRef;
use aws_sdk_s3::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_s3::error::BoxError;
use aws_sdk_s3::types::{DeleteMarkerEntry, ObjectVersion};

use super::super::{
    ListPage, ListedObject, ListedVersion, MAX_LIST_PAGE, ObjectError, ObjectKey, validate_limit,
};
use super::errors;
use super::meta::millis;
use super::versions::validate_version_id;
use super::{S3Store, etag};

/// Most entries of one key ordered one page at a time (see
/// [`S3Store::resolve_ties`]). Bounds the requests one listing spends on
/// one key; past it the key keeps the timestamp order.
const MAX_STEPPED_ENTRIES: usize = 1000;

/// Most listing pages one `list` call reads before answering with what it
/// has (a cursor that resumes where it stopped). Bounds the latency and
/// memory of one call on a prefix with many noncurrent versions.
const MAX_PAGES_PER_CALL: usize = 16;

/// One entry of a version listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Entry {
    /// The bucket key.
    pub full_key: String,
    /// Its version id (`null` on an unversioned bucket).
    pub version_id: String,
    /// S3's etag; empty for a delete marker.
    pub e_tag: String,
    /// Length; 0 for a delete marker.
    pub size: u64,
    /// The key's newest entry.
    pub is_latest: bool,
    /// A delete marker.
    pub is_delete_marker: bool,
    /// When it was written.
    pub last_modified_ms: Option<u64>,
}

/// Records, per response, whether each entry element is a `<Version>`
/// (`false`) or a `<DeleteMarker>` (`true`), in document order.
#[derive(Debug, Clone, Default)]
struct DocumentOrder(Arc<Mutex<Option<Vec<bool>>>>);

impl DocumentOrder {
    fn take(&self) -> Option<Vec<bool>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

impl Intercept for DocumentOrder {
    fn name(&self) -> &'static str {
        "CustodianListingOrder"
    }

    fn read_after_deserialization(
        &self,
        context: &AfterDeserializationInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        // A non-streaming response is in memory by now; each retry
        // overwrites the previous attempt's record.
        let order = context.response().body().bytes().map(element_order);
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = order;
        Ok(())
    }
}

/// The kinds of entry elements in `xml`, in order. Keys are XML-escaped
/// in the response, so these exact tags cannot occur inside one.
fn element_order(xml: &[u8]) -> Vec<bool> {
    const VERSION: &[u8] = b"<Version>";
    const MARKER: &[u8] = b"<DeleteMarker>";
    let mut order = Vec::new();
    let mut at = 0;
    while let Some(offset) = xml[at..].iter().position(|&b| b == b'<') {
        let rest = &xml[at + offset..];
        if rest.starts_with(VERSION) {
            order.push(false);
        } else if rest.starts_with(MARKER) {
            order.push(true);
        }
        at += offset + 1;
    }
    order
}

fn version_entry(v: &ObjectVersion) -> Entry {
    Entry {
        full_key: v.key().unwrap_or_default().to_owned(),
        version_id: v.version_id().unwrap_or("null").to_owned(),
        e_tag: v.e_tag().unwrap_or_default().to_owned(),
        size: v.size().and_then(|s| u64::try_from(s).ok()).unwrap_or(0),
        is_latest: v.is_latest().unwrap_or(false),
        is_delete_marker: false,
        last_modified_ms: millis(v.last_modified()),
    }
}

fn marker_entry(m: &DeleteMarkerEntry) -> Entry {
    Entry {
        full_key: m.key().unwrap_or_default().to_owned(),
        version_id: m.version_id().unwrap_or("null").to_owned(),
        e_tag: String::new(),
        size: 0,
        is_latest: m.is_latest().unwrap_or(false),
        is_delete_marker: true,
        last_modified_ms: millis(m.last_modified()),
    }
}

/// Whether `entries` are in S3's listing order as far as can be told:
/// keys ascending, and each key's newest entry first.
fn plausible(entries: &[Entry]) -> bool {
    entries.windows(2).all(|pair| {
        let (a, b) = (&pair[0], &pair[1]);
        match a.full_key.cmp(&b.full_key) {
            std::cmp::Ordering::Less => true,
            std::cmp::Ordering::Equal => !b.is_latest,
            std::cmp::Ordering::Greater => false,
        }
    })
}

/// Interleaves versions and markers in the response's own order. When
/// that was not recorded, or is not S3's order (moto writes every version
/// before every marker), they are sorted by key, the newest flag, then
/// time (newest first), versions before markers on a tie: right unless a
/// key has a version and a marker, neither newest, written within the
/// timestamp's resolution of each other.
fn merge(
    versions: &[ObjectVersion],
    markers: &[DeleteMarkerEntry],
    order: Option<Vec<bool>>,
) -> Vec<Entry> {
    let versions = versions.iter().map(version_entry);
    let markers = markers.iter().map(marker_entry);
    if let Some(order) = order
        && order.len() == versions.len() + markers.len()
        && order.iter().filter(|m| **m).count() == markers.len()
    {
        let (mut versions, mut markers) = (versions.clone(), markers.clone());
        let interleaved: Vec<Entry> = order
            .into_iter()
            .filter_map(|is_marker| {
                if is_marker {
                    markers.next()
                } else {
                    versions.next()
                }
            })
            .collect();
        if plausible(&interleaved) {
            return interleaved;
        }
    }
    let mut entries: Vec<Entry> = versions.chain(markers).collect();
    entries.sort_by(|a, b| {
        a.full_key
            .cmp(&b.full_key)
            .then(b.is_latest.cmp(&a.is_latest))
            .then(b.last_modified_ms.cmp(&a.last_modified_ms))
    });
    entries
}

/// A resumable walk over ListObjectVersions pages.
struct Scan<'s> {
    store: &'s S3Store,
    prefix: String,
    /// Where the next page starts: after this key (and version).
    marker: Option<(String, Option<String>)>,
    buffer: VecDeque<Entry>,
    exhausted: bool,
    page_size: i32,
    pages: usize,
    /// Whether the order among a key's noncurrent entries matters (it
    /// does not for current objects, and settling it costs requests).
    exact: bool,
}

impl<'s> Scan<'s> {
    fn new(
        store: &'s S3Store,
        prefix: String,
        marker: Option<(String, Option<String>)>,
        page_size: u32,
        exact: bool,
    ) -> Self {
        Self {
            store,
            prefix,
            marker,
            buffer: VecDeque::new(),
            exhausted: false,
            page_size: i32::try_from(page_size.clamp(1, MAX_LIST_PAGE)).unwrap_or(1000),
            pages: 0,
            exact,
        }
    }

    /// Whether the next entry needs another page.
    fn needs_page(&self) -> bool {
        self.buffer.is_empty() && !self.exhausted
    }

    async fn next(&mut self) -> Result<Option<Entry>, ObjectError> {
        while self.needs_page() {
            self.fetch().await?;
        }
        Ok(self.buffer.pop_front())
    }

    async fn fetch(&mut self) -> Result<(), ObjectError> {
        let order = DocumentOrder::default();
        let (key_marker, version_marker) = self.marker.clone().unzip();
        let out = self
            .store
            .client
            .list_object_versions()
            .bucket(&self.store.bucket)
            .prefix(&self.prefix)
            .max_keys(self.page_size)
            .set_key_marker(key_marker)
            .set_version_id_marker(version_marker.flatten())
            .customize()
            .interceptor(order.clone())
            .send()
            .await
            .map_err(|e| {
                errors::object_error(&e, "ListObjectVersions", &format!("{:?}", self.prefix))
            })?;
        self.pages += 1;
        let trusted = self.store.listing_interleaves();
        let mut entries = merge(
            out.versions(),
            out.delete_markers(),
            order.take().filter(|_| trusted),
        );
        if self.exact && !trusted {
            self.store.resolve_ties(&mut entries).await?;
        }
        let next = if out.is_truncated() == Some(true) {
            match (out.next_key_marker(), entries.last()) {
                (Some(key), _) => Some((
                    key.to_owned(),
                    out.next_version_id_marker().map(str::to_owned),
                )),
                (None, Some(last)) => Some((last.full_key.clone(), Some(last.version_id.clone()))),
                (None, None) => None,
            }
        } else {
            None
        };
        match next {
            // A truncated page that does not move the marker would repeat
            // forever.
            Some(next) if self.marker.as_ref() == Some(&next) => {
                return Err(ObjectError::Unavailable(
                    format!(
                        "listing {:?}: the server's continuation marker did not advance",
                        self.prefix
                    )
                    .into(),
                ));
            }
            Some(next) => self.marker = Some(next),
            None => self.exhausted = true,
        }
        self.buffer.extend(entries);
        Ok(())
    }
}

/// A parsed version-listing cursor.
#[derive(Debug, PartialEq, Eq)]
struct Cursor<'a> {
    key: &'a str,
    version_id: &'a str,
    /// The version of the same key that followed, `""` if none did.
    next_version_id: &'a str,
}

fn parse_cursor(cursor: &str) -> Result<Cursor<'_>, ObjectError> {
    let malformed = || {
        ObjectError::InvalidArgument(
            format!("{cursor:?} is not a version-listing cursor of this store").into(),
        )
    };
    let mut parts = cursor.split('\0');
    let (Some(key), Some(version_id), Some(next_version_id), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(malformed());
    };
    ObjectKey::new(key).map_err(|_| malformed())?;
    validate_version_id(version_id).map_err(|_| malformed())?;
    if !next_version_id.is_empty() {
        validate_version_id(next_version_id).map_err(|_| malformed())?;
    }
    Ok(Cursor {
        key,
        version_id,
        next_version_id,
    })
}

/// Whether a key's entries (one key, listing order) hold a noncurrent
/// version and a noncurrent marker with the same timestamp: an order the
/// listing alone does not settle.
fn ambiguous(entries: &[Entry]) -> bool {
    entries.iter().filter(|e| !e.is_latest).any(|a| {
        entries.iter().any(|b| {
            !b.is_latest
                && a.is_delete_marker != b.is_delete_marker
                && a.last_modified_ms == b.last_modified_ms
        })
    })
}

impl S3Store {
    /// Puts each key whose order the listing does not settle (see
    /// [`ambiguous`]) in the server's own order, learnt by listing that key
    /// one entry per page: a page boundary is a position, whatever the
    /// document's layout.
    async fn resolve_ties(&self, entries: &mut [Entry]) -> Result<(), ObjectError> {
        let mut start = 0;
        while start < entries.len() {
            let key = entries[start].full_key.clone();
            let end = start
                + entries[start..]
                    .iter()
                    .take_while(|e| e.full_key == key)
                    .count();
            let run = &mut entries[start..end];
            if ambiguous(run) {
                let order = self.step_key(&key).await?;
                // Entries the stepping did not see keep their place after
                // those it did (stable sort).
                run.sort_by_key(|e| {
                    order
                        .iter()
                        .position(|id| *id == e.version_id)
                        .unwrap_or(usize::MAX)
                });
            }
            start = end;
        }
        Ok(())
    }

    /// Whether the server's version listing of bucket key `full`, which
    /// holds exactly a version, a delete marker over it and a newer
    /// version, interleaves them as S3 does.
    pub(super) async fn probe_interleaving(&self, full: &str) -> Result<bool, ObjectError> {
        let order = DocumentOrder::default();
        self.client
            .list_object_versions()
            .bucket(&self.bucket)
            .prefix(full)
            .customize()
            .interceptor(order.clone())
            .send()
            .await
            .map_err(|e| errors::object_error(&e, "ListObjectVersions (probe)", full))?;
        Ok(order.take().as_deref() == Some(&[false, true, false][..]))
    }

    /// The version ids of bucket key `full`, in the server's order, one
    /// listing page of one entry at a time.
    async fn step_key(&self, full: &str) -> Result<Vec<String>, ObjectError> {
        let mut order = Vec::new();
        let mut marker: Option<(String, String)> = None;
        while order.len() < MAX_STEPPED_ENTRIES {
            let (key_marker, version_marker) = marker.clone().unzip();
            let out = self
                .client
                .list_object_versions()
                .bucket(&self.bucket)
                .prefix(full)
                .max_keys(1)
                .set_key_marker(key_marker)
                .set_version_id_marker(version_marker)
                .send()
                .await
                .map_err(|e| errors::object_error(&e, "ListObjectVersions (ordering)", full))?;
            let entry = out
                .versions()
                .iter()
                .map(version_entry)
                .chain(out.delete_markers().iter().map(marker_entry))
                .next();
            let Some(entry) = entry.filter(|e| e.full_key == full) else {
                break;
            };
            if marker.as_ref().is_some_and(|(_, v)| *v == entry.version_id) {
                break;
            }
            marker = Some((entry.full_key.clone(), entry.version_id.clone()));
            order.push(entry.version_id);
            if out.is_truncated() != Some(true) {
                break;
            }
        }
        Ok(order)
    }

    fn listed_version(&self, entry: &Entry, key: &str) -> ListedVersion {
        ListedVersion {
            key: key.to_owned(),
            version_id: entry.version_id.clone(),
            etag: if entry.is_delete_marker {
                String::new()
            } else {
                etag::issue(&entry.e_tag, Some(&entry.version_id))
            },
            content_md5: None,
            size: entry.size,
            is_current: entry.is_latest,
            is_delete_marker: entry.is_delete_marker,
            last_modified_ms: entry.last_modified_ms,
        }
    }

    /// See [`super::super::ObjectStore::list`]. The cursor may be any
    /// string: the listing resumes strictly after it.
    pub(super) async fn list_current(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<ListPage<ListedObject>, ObjectError> {
        validate_limit(limit)?;
        let full_prefix = self.keys.unchecked(prefix)?;
        let after = cursor.filter(|c| *c >= prefix);
        let marker = after
            .map(|c| self.keys.unchecked(c))
            .transpose()?
            .map(|c| (c, None));
        let mut scan = Scan::new(self, full_prefix, marker, MAX_LIST_PAGE, false);
        let mut items: Vec<ListedObject> = Vec::new();
        let mut last_seen: Option<String> = None;
        let wanted = limit as usize + 1;
        while items.len() < wanted {
            if scan.needs_page() && scan.pages >= MAX_PAGES_PER_CALL {
                // Resume strictly after the last key examined: its current
                // version (listed first) has been seen already.
                return Ok(ListPage {
                    items,
                    next: last_seen,
                });
            }
            let Some(entry) = scan.next().await? else {
                break;
            };
            let Some(key) = self.keys.relative(&entry.full_key) else {
                continue;
            };
            // S3 resumes strictly after the marker; some servers resume at
            // it, so the bound is enforced here too.
            if after.is_some_and(|c| key <= c) {
                continue;
            }
            last_seen = Some(key.to_owned());
            if entry.is_latest && !entry.is_delete_marker {
                items.push(ListedObject {
                    key: key.to_owned(),
                    size: entry.size,
                    etag: etag::issue(&entry.e_tag, Some(&entry.version_id)),
                    content_md5: None,
                    last_modified_ms: entry.last_modified_ms,
                });
            }
        }
        let next = if items.len() > limit as usize {
            items.truncate(limit as usize);
            items.last().map(|item| item.key.clone())
        } else {
            None
        };
        Ok(ListPage { items, next })
    }

    /// See [`super::super::ObjectStore::list_versions`] and the module
    /// documentation for the cursor.
    pub(super) async fn list_all_versions(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<ListPage<ListedVersion>, ObjectError> {
        validate_limit(limit)?;
        let after = cursor.map(parse_cursor).transpose()?;
        let full_prefix = self.keys.unchecked(prefix)?;
        let mut replay: VecDeque<Entry> = VecDeque::new();
        let marker = match &after {
            Some(cursor) if cursor.key >= prefix => Some(self.resume(cursor, &mut replay).await?),
            _ => None,
        };
        let page = limit.saturating_add(1).min(MAX_LIST_PAGE);
        let mut scan = Scan::new(self, full_prefix.clone(), marker, page, true);
        let wanted = limit as usize + 1;
        let mut items: Vec<ListedVersion> = Vec::new();
        while items.len() < wanted {
            let entry = match replay.pop_front() {
                Some(entry) => entry,
                None => match scan.next().await? {
                    Some(entry) => entry,
                    None => break,
                },
            };
            if !entry.full_key.starts_with(&full_prefix) {
                continue;
            }
            if let Some(key) = self.keys.relative(&entry.full_key) {
                items.push(self.listed_version(&entry, key));
            }
        }
        let next = if items.len() > limit as usize {
            let lookahead = items.pop();
            items.last().map(|last| {
                let following = lookahead
                    .filter(|next| next.key == last.key)
                    .map(|next| next.version_id)
                    .unwrap_or_default();
                format!("{}\0{}\0{following}", last.key, last.version_id)
            })
        } else {
            None
        };
        Ok(ListPage { items, next })
    }

    /// Where a version listing resumes after `cursor`: S3's own marker when
    /// the cursor's version still exists; otherwise the versions of its key
    /// from the one that followed it are queued in `replay`, and the marker
    /// is set past that key.
    async fn resume(
        &self,
        cursor: &Cursor<'_>,
        replay: &mut VecDeque<Entry>,
    ) -> Result<(String, Option<String>), ObjectError> {
        let key = ObjectKey::new(cursor.key)?;
        let full = self.keys.full(&key)?;
        match self.head_exact(&key, cursor.version_id).await {
            Ok(_) | Err(ObjectError::PreconditionFailed(_)) => {
                return Ok((full, Some(cursor.version_id.to_owned())));
            }
            Err(ObjectError::NotFound(_)) => {}
            Err(other) => return Err(other),
        }
        let mut scan = Scan::new(self, full.clone(), None, MAX_LIST_PAGE, true);
        let mut versions = Vec::new();
        while let Some(entry) = scan.next().await? {
            if entry.full_key != full {
                break;
            }
            versions.push(entry);
        }
        let from = if cursor.next_version_id.is_empty() {
            // The cursor's version was the key's last: nothing of it is left.
            versions.len()
        } else {
            // Its successor is the resume point; if that is gone too, the
            // whole key is listed again (repeats rather than omissions).
            versions
                .iter()
                .position(|v| v.version_id == cursor.next_version_id)
                .unwrap_or(0)
        };
        let marker = (full, versions.last().map(|v| v.version_id.clone()));
        replay.extend(versions.into_iter().skip(from));
        Ok(marker)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_element_order_of_a_listing_is_recovered_from_the_raw_response() {
        let xml = b"<ListVersionsResult><Name>b</Name><VersionIdMarker/>\
            <Version><Key>a</Key><VersionId>1</VersionId></Version>\
            <DeleteMarker><Key>a</Key></DeleteMarker>\
            <Version><Key>&lt;Version&gt;</Key></Version>\
            <NextVersionIdMarker>x</NextVersionIdMarker></ListVersionsResult>";
        assert_eq!(element_order(xml), [false, true, false]);
    }

    #[test]
    fn version_cursors_round_trip_and_malformed_ones_are_invalid() {
        assert_eq!(
            parse_cursor("k/a\0v1\0v0"),
            Ok(Cursor {
                key: "k/a",
                version_id: "v1",
                next_version_id: "v0"
            })
        );
        assert_eq!(parse_cursor("k\0v1\0").unwrap().next_version_id, "");
        for bad in [
            "k",
            "",
            "\0",
            "k\0v",
            "\0v\0",
            "k\0\0w",
            "k\0v\0w\0x",
            "a/../b\0v\0",
        ] {
            assert!(
                matches!(parse_cursor(bad), Err(ObjectError::InvalidArgument(_))),
                "{bad:?}"
            );
        }
    }
}
