//! The mechanism end to end on real backends: the in-memory store, and
//! moto's S3 for listing batching and exact-version reads over the wire.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use serde_json::json;

use super::VersionsError;
use super::aliases::Aliases;
use super::digest::Digest;
use super::exact_row::ExactRowPolicy;
use super::fetch::{cache_path, fetch};
use super::hops::MAX_ARCHIVE_HOPS;
use super::pins::Pin;
use super::verify::{Via, verify};
use custodian_base::clock::SystemClock;
use custodian_object::ObjectStoreExt;
use custodian_object::memory::MemoryStore;
use custodian_object::observed::{Call, Observed};
use custodian_object::{Metadata, ObjectError, ObjectMeta, ObjectStore, PutCondition};

/// Calls a [`counting`] store has seen.
#[derive(Default)]
struct Counts {
    lists: AtomicUsize,
    heads: AtomicUsize,
}

/// `inner`, counting version listings and HEADs, and refusing listing
/// when asked to.
fn counting(inner: Arc<dyn ObjectStore>, refuse_listing: bool) -> (Observed, Arc<Counts>) {
    let counts = Arc::new(Counts::default());
    let seen = counts.clone();
    let store = Observed::before(inner, move |call| {
        match call {
            Call::ListVersions { .. } => {
                seen.lists.fetch_add(1, Ordering::Relaxed);
                if refuse_listing {
                    return Err(ObjectError::Auth("ListObjectVersions denied".into()));
                }
            }
            Call::Head {
                version_id: Some(_),
                ..
            } => {
                seen.heads.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
        Ok(())
    });
    (store, counts)
}

fn memory() -> Arc<dyn ObjectStore> {
    Arc::new(MemoryStore::versioned(Arc::new(SystemClock)))
}

async fn put(store: &dyn ObjectStore, key: &str, bytes: &[u8]) -> ObjectMeta {
    store
        .put_whole(
            key,
            Bytes::copy_from_slice(bytes),
            &PutCondition::Unconditional,
            &Metadata::new(),
            custodian_base::checksum::crc64_nvme(bytes),
        )
        .await
        .unwrap_or_else(|e| panic!("publishing {key}: {e}"))
}

fn pin(meta: &ObjectMeta, bytes: &[u8]) -> Pin {
    let md5 = Digest::Md5(String::new()).of(bytes);
    Pin {
        key: meta.key.clone(),
        version_id: meta.version_id.clone().expect("a versioned store"),
        etag: Some(meta.etag.clone()),
        size: Some(meta.size),
        digest: Digest::Md5(md5),
        manifest: "test.json".into(),
    }
}

/// `n` objects under `dir/`, pinned.
async fn pinned(store: &dyn ObjectStore, dir: &str, n: usize) -> Vec<Pin> {
    let mut pins = Vec::new();
    for i in 0..n {
        let bytes = format!("object {i} of {dir}");
        let meta = put(store, &format!("{dir}/{i:05}"), bytes.as_bytes()).await;
        pins.push(pin(&meta, bytes.as_bytes()));
    }
    pins
}

#[tokio::test]
async fn pins_under_one_prefix_are_checked_from_a_listing_not_one_head_each() {
    let (store, counts) = counting(memory(), false);
    let pins = pinned(&store, "data/set", 10).await;
    let report = verify(&store, &pins, &Aliases::none(), &ExactRowPolicy)
        .await
        .unwrap();
    assert!(report.ok(), "{:?}", report.problems);
    assert_eq!(report.checked.len(), 10);
    assert!(report.checked.iter().all(|c| c.via == Via::Listing));
    assert_eq!(counts.lists.load(Ordering::Relaxed), 1);
    assert_eq!(counts.heads.load(Ordering::Relaxed), 0);
    assert_eq!((report.list_calls, report.head_calls), (1, 0));
}

#[tokio::test]
async fn a_refused_listing_falls_back_to_one_head_per_pin() {
    let (store, counts) = counting(memory(), true);
    let pins = pinned(&store, "data/set", 10).await;
    let report = verify(&store, &pins, &Aliases::none(), &ExactRowPolicy)
        .await
        .unwrap();
    assert!(report.ok(), "{:?}", report.problems);
    assert!(report.checked.iter().all(|c| c.via == Via::Head));
    assert_eq!(counts.lists.load(Ordering::Relaxed), 1);
    assert_eq!(counts.heads.load(Ordering::Relaxed), 10);
}

#[tokio::test]
async fn small_groups_and_top_level_keys_are_checked_by_head() {
    let (store, counts) = counting(memory(), false);
    let mut pins = pinned(&store, "small", 7).await;
    let bytes = b"top";
    pins.push(pin(&put(&store, "top-level", bytes).await, bytes));
    let report = verify(&store, &pins, &Aliases::none(), &ExactRowPolicy)
        .await
        .unwrap();
    assert!(report.ok(), "{:?}", report.problems);
    assert_eq!(counts.lists.load(Ordering::Relaxed), 0);
    assert_eq!(counts.heads.load(Ordering::Relaxed), 8);
}

#[tokio::test]
async fn listing_stops_after_two_pages_and_what_it_did_not_reach_is_headed() {
    let (store, counts) = counting(memory(), false);
    // 2,500 versions under the prefix: two pages of 1,000 reach the
    // first 2,000; pins on the last keys are left for HEADs.
    let mut pins = Vec::new();
    for i in 0..2500 {
        let bytes = format!("{i}");
        let meta = put(&store, &format!("big/{i:05}"), bytes.as_bytes()).await;
        if i % 250 == 0 || i >= 2490 {
            pins.push(pin(&meta, bytes.as_bytes()));
        }
    }
    let report = verify(&store, &pins, &Aliases::none(), &ExactRowPolicy)
        .await
        .unwrap();
    assert!(report.ok(), "{:?}", report.problems);
    assert_eq!(counts.lists.load(Ordering::Relaxed), 2);
    let headed = report.checked.iter().filter(|c| c.via == Via::Head).count();
    assert_eq!(headed, 12, "2250 and the last ten");
    assert_eq!(counts.heads.load(Ordering::Relaxed), 12);
}

#[tokio::test]
async fn every_failing_pin_is_reported_with_what_is_wrong() {
    let store = memory();
    let mut pins = pinned(store.as_ref(), "data/set", 12).await;
    pins[0].size = Some(999);
    pins[1].etag = Some("\"not-the-etag\"".into());
    pins[2].version_id = "no-such-version".into();
    store.delete("data/set/00003").await.unwrap();
    let marker = store
        .list_versions("data/set/00003", None, 10)
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|v| v.is_delete_marker)
        .unwrap();
    pins[3].version_id = marker.version_id;
    let report = verify(store.as_ref(), &pins, &Aliases::none(), &ExactRowPolicy)
        .await
        .unwrap();
    let kinds: Vec<_> = report.problems.iter().map(|p| p.error.kind()).collect();
    assert_eq!(
        kinds,
        vec!["mismatch", "mismatch", "missing-version", "delete-marker"]
    );
    assert!(report.problems[0].error.to_string().contains("size"));
    assert!(report.problems[1].error.to_string().contains("etag"));
    assert_eq!(report.checked.len(), 8);
}

#[tokio::test]
async fn an_unversioned_store_is_refused_saying_so() {
    let store = MemoryStore::unversioned(Arc::new(SystemClock));
    let error = verify(&store, &[], &Aliases::none(), &ExactRowPolicy)
        .await
        .unwrap_err();
    assert!(matches!(error, VersionsError::Unversioned(_)));
    assert!(
        error
            .to_string()
            .contains("does not have versioning enabled"),
        "{error}"
    );
}

#[tokio::test]
async fn a_crc64nvme_pin_is_checked_against_the_crc_the_store_recorded() {
    let store = memory();
    let meta = put(store.as_ref(), "c/x", b"123456789").await;
    let mut good = pin(&meta, b"123456789");
    good.digest = Digest::Crc64Nvme("ae8b14860a799888".into());
    let mut bad = good.clone();
    bad.digest = Digest::Crc64Nvme("0000000000000000".into());
    let report = verify(
        store.as_ref(),
        &[good, bad],
        &Aliases::none(),
        &ExactRowPolicy,
    )
    .await
    .unwrap();
    assert_eq!(report.checked.len(), 1);
    assert_eq!(report.problems.len(), 1);
    assert!(report.problems[0].error.to_string().contains("crc64nvme"));
}

/// A registry at `from/` moving `rows` (source version, source etag,
/// destination version, destination etag) of `from/file` to `to/file`.
async fn registry(
    store: &dyn ObjectStore,
    from: &str,
    to: &str,
    rows: &[(&str, &str, &str, &str)],
    size: u64,
) {
    let versions: Vec<_> = rows
        .iter()
        .map(|(sv, se, dv, de)| {
            json!({"source_object": format!("{from}/file"), "source_version_id": sv, "source_etag": se,
                   "destination_object": format!("{to}/file"), "destination_version_id": dv,
                   "destination_etag": de, "size": size, "delete_marker": false})
        })
        .collect();
    let document = json!({"schema_version": 1, "status": "copied", "source": from,
                          "destination": to, "versions": versions});
    put(
        store,
        &format!("{from}/{}", super::registry::REGISTRY_NAME),
        document.to_string().as_bytes(),
    )
    .await;
}

/// The object at the end of a chain of `hops` archive moves, and a pin
/// on where it started.
async fn chain(store: &dyn ObjectStore, hops: usize) -> Pin {
    let bytes = b"archived bytes";
    let last = put(store, &format!("h{hops}/task/file"), bytes).await;
    let version = |i: usize| {
        if i == hops {
            last.version_id.clone().unwrap()
        } else {
            format!("gone{i}")
        }
    };
    let etag = |i: usize| {
        if i == hops {
            last.etag.clone()
        } else {
            format!("e{i}")
        }
    };
    for i in 0..hops {
        registry(
            store,
            &format!("h{i}/task"),
            &format!("h{}/task", i + 1),
            &[(&version(i), &etag(i), &version(i + 1), &etag(i + 1))],
            last.size,
        )
        .await;
    }
    let mut pin = pin(&last, bytes);
    pin.key = "h0/task/file".into();
    pin.version_id = version(0);
    pin.etag = Some(etag(0));
    pin
}

#[tokio::test]
async fn a_version_moved_three_times_is_found_through_the_registries() {
    let store = memory();
    let pin = chain(store.as_ref(), 3).await;
    let report = verify(store.as_ref(), &[pin], &Aliases::none(), &ExactRowPolicy)
        .await
        .unwrap();
    assert!(report.ok(), "{:?}", report.problems);
    assert_eq!(report.checked[0].hops, 3);
    assert!(report.checked[0].found.starts_with("h3/task/file@"));
}

#[tokio::test]
async fn thirty_two_hops_are_followed_and_thirty_three_are_refused() {
    let store = memory();
    let pin = chain(store.as_ref(), MAX_ARCHIVE_HOPS).await;
    let report = verify(store.as_ref(), &[pin], &Aliases::none(), &ExactRowPolicy)
        .await
        .unwrap();
    assert!(report.ok(), "{:?}", report.problems);
    assert_eq!(report.checked[0].hops, 32);

    let store = memory();
    let pin = chain(store.as_ref(), MAX_ARCHIVE_HOPS + 1).await;
    let report = verify(store.as_ref(), &[pin], &Aliases::none(), &ExactRowPolicy)
        .await
        .unwrap();
    let error = &report.problems[0].error;
    assert!(
        matches!(error, VersionsError::HopLimit { limit: 32, .. }),
        "{error}"
    );
    assert!(error.to_string().contains("limit of 32"), "{error}");
}

#[tokio::test]
async fn a_cycle_of_archive_hops_is_refused_naming_the_version_revisited() {
    let store = memory();
    registry(
        store.as_ref(),
        "h0/task",
        "h1/task",
        &[("gone0", "e0", "gone1", "e1")],
        3,
    )
    .await;
    registry(
        store.as_ref(),
        "h1/task",
        "h0/task",
        &[("gone1", "e1", "gone0", "e0")],
        3,
    )
    .await;
    let mut pin = pin(&put(store.as_ref(), "elsewhere", b"abc").await, b"abc");
    pin.key = "h0/task/file".into();
    pin.version_id = "gone0".into();
    pin.etag = Some("e0".into());
    let report = verify(store.as_ref(), &[pin], &Aliases::none(), &ExactRowPolicy)
        .await
        .unwrap();
    let error = &report.problems[0].error;
    assert!(matches!(error, VersionsError::HopCycle { .. }), "{error}");
    assert!(
        error
            .to_string()
            .contains("cycle back to h0/task/file@gone0"),
        "{error}"
    );
}

#[tokio::test]
async fn a_version_no_registry_row_moves_is_a_missing_version() {
    let store = memory();
    registry(
        store.as_ref(),
        "h0/task",
        "h1/task",
        &[("other", "e0", "w", "e1")],
        3,
    )
    .await;
    let mut pin = pin(&put(store.as_ref(), "elsewhere", b"abc").await, b"abc");
    pin.key = "h0/task/file".into();
    pin.version_id = "gone0".into();
    let report = verify(store.as_ref(), &[pin], &Aliases::none(), &ExactRowPolicy)
        .await
        .unwrap();
    let error = &report.problems[0].error;
    assert!(
        matches!(error, VersionsError::MissingVersion { .. }),
        "{error}"
    );
    assert!(
        error
            .to_string()
            .starts_with("missing version: h0/task/file@gone0"),
        "{error}"
    );
}

#[tokio::test]
async fn a_pin_on_a_pending_destination_is_verified_at_its_source() {
    let store = memory();
    let meta = put(store.as_ref(), "live/data/x", b"abc").await;
    let receipt = json!({"schema_version": 1, "status": "planned", "store": "mem://",
        "source": "live/data", "destination": "archive/data",
        "versions": [{"source_object": "live/data/x", "source_version_id": meta.version_id,
                      "source_etag": meta.etag, "destination_object": "archive/data/x",
                      "size": 3, "delete_marker": false}]});
    let aliases = Aliases::from_receipts(&[receipt], "mem://", "r.json").unwrap();
    let mut pin = pin(&meta, b"abc");
    pin.key = "archive/data/x".into();
    let report = verify(store.as_ref(), &[pin], &aliases, &ExactRowPolicy)
        .await
        .unwrap();
    assert!(report.ok(), "{:?}", report.problems);
    assert!(report.checked[0].found.starts_with("live/data/x@"));
}

#[tokio::test]
async fn fetch_fills_the_cache_and_a_second_fetch_downloads_nothing() {
    let store = memory();
    let mut pins = pinned(store.as_ref(), "data/set", 9).await;
    pins.push(chain(store.as_ref(), 2).await);
    let cache = tempfile::tempdir().unwrap();
    let first = fetch_into(store.as_ref(), &pins, &[], cache.path()).await;
    assert!(first.ok(), "{:?}", first.problems);
    assert_eq!((first.downloaded.len(), first.cached.len()), (10, 0));
    for pin in &pins {
        let bytes = std::fs::read(cache_path(cache.path(), &pin.digest)).unwrap();
        assert_eq!(pin.digest.of(&bytes), pin.digest.value());
    }
    let second = fetch_into(store.as_ref(), &pins, &[], cache.path()).await;
    assert!(second.ok(), "{:?}", second.problems);
    assert_eq!((second.downloaded.len(), second.cached.len()), (0, 10));
    assert_eq!(second.cached_bytes, first.downloaded_bytes);
}

#[tokio::test]
async fn a_download_with_the_wrong_digest_fails_naming_it_and_installs_nothing() {
    let store = memory();
    let meta = put(store.as_ref(), "d/x", b"abc").await;
    let mut pin = pin(&meta, b"abc");
    pin.digest = Digest::Md5("00000000000000000000000000000000".into());
    let cache = tempfile::tempdir().unwrap();
    let report = fetch_into(
        store.as_ref(),
        std::slice::from_ref(&pin),
        &[],
        cache.path(),
    )
    .await;
    let error = &report.problems[0].error;
    assert!(
        matches!(error, VersionsError::DigestMismatch { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("d/x@"), "{error}");
    assert!(!cache_path(cache.path(), &pin.digest).exists());
}

#[tokio::test]
async fn a_cache_hit_whose_version_is_gone_from_the_store_still_fails() {
    let store = memory();
    let meta = put(store.as_ref(), "d/x", b"abc").await;
    let pin = pin(&meta, b"abc");
    let cache = tempfile::tempdir().unwrap();
    let path = cache_path(cache.path(), &pin.digest);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, b"abc").unwrap();
    store
        .delete_version("d/x", meta.version_id.as_deref().unwrap())
        .await
        .unwrap();
    let report = fetch_into(store.as_ref(), &[pin], &[], cache.path()).await;
    assert_eq!(report.problems[0].error.kind(), "missing-version");
    assert_eq!(report.downloaded.len(), 0);
}

mod s3 {
    use super::*;
    use custodian_object::s3::local_server::{self, Kind};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_moto_verify_batches_by_listing_and_fetch_reads_exact_versions() {
        let Some(store) = local_server::store(Kind::Moto).await else {
            return;
        };
        let (store, counts) = counting(Arc::new(store), false);
        let mut pins = pinned(&store, "data/set", 12).await;
        // A newer version of one key: its pin still names the old one.
        put(&store, "data/set/00000", b"newer bytes").await;
        // DVC records the plain S3 etag, without the backend's version.
        for pin in &mut pins[..6] {
            let etag = pin.etag.take().unwrap();
            let (s3_etag, version) = etag.trim_matches('"').split_once(':').unwrap();
            assert_eq!(version, pin.version_id);
            pin.etag = Some(s3_etag.to_owned());
        }
        let report = verify(&store, &pins, &Aliases::none(), &ExactRowPolicy)
            .await
            .unwrap();
        assert!(report.ok(), "{:?}", report.problems);
        assert!(report.checked.iter().all(|c| c.via == Via::Listing));
        assert_eq!(counts.lists.load(Ordering::Relaxed), 1);
        assert_eq!(counts.heads.load(Ordering::Relaxed), 0);

        let mut wrong = pins[7].clone();
        wrong.etag = Some("0123456789abcdef0123456789abcdef".into());
        pins.push(wrong);
        let report = verify(&store, &pins, &Aliases::none(), &ExactRowPolicy)
            .await
            .unwrap();
        assert_eq!(report.problems.len(), 1);
        assert!(report.problems[0].error.to_string().contains("etag"));
        pins.pop();

        let cache = tempfile::tempdir().unwrap();
        let first = fetch_into(&store, &pins, &[], cache.path()).await;
        assert!(first.ok(), "{:?}", first.problems);
        assert_eq!(first.downloaded.len(), 12);
        let old = std::fs::read(cache_path(cache.path(), &pins[0].digest)).unwrap();
        assert_eq!(old, b"object 0 of data/set");
        let second = fetch_into(&store, &pins, &[], cache.path()).await;
        assert_eq!((second.downloaded.len(), second.cached.len()), (0, 12));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_moto_a_missing_version_follows_the_archive_registry() {
        let Some(store) = local_server::store(Kind::Moto).await else {
            return;
        };
        let pin = chain(&store, 3).await;
        let report = verify(
            &store,
            std::slice::from_ref(&pin),
            &Aliases::none(),
            &ExactRowPolicy,
        )
        .await
        .unwrap();
        assert!(report.ok(), "{:?}", report.problems);
        assert_eq!(report.checked[0].hops, 3);
    }
}

#[tokio::test]
async fn a_pin_larger_than_one_read_is_fetched_in_ranges_and_installed_whole() {
    let store = memory();
    let bytes: Vec<u8> = (0..(super::fetch::WHOLE_READ_MAX + 5 * 1024 * 1024 + 7))
        .map(|i| (i % 251) as u8)
        .collect();
    let meta = put(store.as_ref(), "big/blob", &bytes).await;
    let pin = pin(&meta, &bytes);
    let cache = tempfile::tempdir().unwrap();
    let report = fetch_into(
        store.as_ref(),
        std::slice::from_ref(&pin),
        &[],
        cache.path(),
    )
    .await;
    assert!(report.ok(), "{:?}", report.problems);
    assert_eq!(report.downloaded_bytes, bytes.len() as u64);
    assert_eq!(
        std::fs::read(cache_path(cache.path(), &pin.digest)).unwrap(),
        bytes
    );
    let leftovers = std::fs::read_dir(cache.path())
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_type().unwrap().is_file())
        .count();
    assert_eq!(leftovers, 0, "no temporary file is left behind");
}

/// [`fetch`] of `pins` and `listings` into `cache`, with no aliases and
/// the exact-row hop policy.
async fn fetch_into(
    store: &dyn ObjectStore,
    pins: &[Pin],
    listings: &[super::dvc::Listing],
    cache: &std::path::Path,
) -> super::fetch::FetchReport {
    fetch(
        store,
        pins,
        listings,
        &Aliases::none(),
        &ExactRowPolicy,
        cache,
        None,
    )
    .await
    .unwrap()
}

/// The scratch directories left in `cache`.
fn scratch_dirs(cache: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(cache)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(".custodian-fetch-"))
        .collect()
}

#[tokio::test]
async fn one_failing_pin_installs_nothing_of_a_fetch_and_leaves_no_scratch() {
    let store = memory();
    let mut pins = Vec::new();
    for index in 0..3u8 {
        let bytes = [b'a' + index; 5];
        let meta = put(store.as_ref(), &format!("d/{index}"), &bytes).await;
        pins.push(pin(&meta, &bytes));
    }
    let meta = put(store.as_ref(), "d/bad", b"bad").await;
    let mut bad = pin(&meta, b"bad");
    bad.size = Some(4);
    pins.insert(1, bad);
    let cache = tempfile::tempdir().unwrap();
    let report = fetch_into(store.as_ref(), &pins, &[], cache.path()).await;
    assert!(!report.installed);
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    assert!(report.problems[0].pin.starts_with("d/bad@"));
    for pin in &pins {
        assert!(
            !cache_path(cache.path(), &pin.digest).exists(),
            "{} was installed",
            pin.key
        );
    }
    assert!(scratch_dirs(cache.path()).is_empty());
    // Without the bad pin, everything goes in.
    pins.remove(1);
    let report = fetch_into(store.as_ref(), &pins, &[], cache.path()).await;
    assert!(report.installed && report.ok(), "{:?}", report.problems);
    for pin in &pins {
        assert!(cache_path(cache.path(), &pin.digest).exists());
    }
}

#[tokio::test]
async fn a_dead_fetchs_scratch_is_removed_and_a_live_ones_is_kept() {
    let store = memory();
    let meta = put(store.as_ref(), "d/x", b"x").await;
    let cache = tempfile::tempdir().unwrap();
    let dead = cache.path().join(".custodian-fetch-dead");
    std::fs::create_dir_all(&dead).unwrap();
    std::fs::write(dead.join(".lock"), b"").unwrap();
    std::fs::write(dead.join("partial"), b"half a download").unwrap();
    let live = cache.path().join(".custodian-fetch-live");
    std::fs::create_dir_all(&live).unwrap();
    let held = std::fs::File::create(live.join(".lock")).unwrap();
    held.lock().unwrap();
    let report = fetch_into(store.as_ref(), &[pin(&meta, b"x")], &[], cache.path()).await;
    assert!(report.installed);
    assert!(!dead.exists(), "the dead fetch's scratch is removed");
    assert!(live.exists(), "a running fetch's scratch is left alone");
}

#[tokio::test]
async fn a_directory_listing_is_installed_beside_its_files_as_dvc_keeps_it() {
    let store = memory();
    let files = [("a.txt", &b"one\n"[..]), ("sub/b.txt", &b"two\n"[..])];
    let mut pins = Vec::new();
    let mut listed = Vec::new();
    for (relpath, bytes) in files {
        let meta = put(store.as_ref(), &format!("data/{relpath}"), bytes).await;
        let pin = pin(&meta, bytes);
        listed.push((relpath.to_owned(), pin.digest.value().to_owned()));
        pins.push(pin);
    }
    let bytes = super::dvc::listing_bytes(&listed);
    let listing = super::dvc::Listing {
        digest: Digest::Md5(Digest::Md5(String::new()).of(&bytes)),
        bytes,
        path: "data".into(),
        manifest: "data.dvc".into(),
    };
    let cache = tempfile::tempdir().unwrap();
    let report = fetch_into(
        store.as_ref(),
        &pins,
        std::slice::from_ref(&listing),
        cache.path(),
    )
    .await;
    assert!(report.installed && report.ok(), "{:?}", report.problems);
    assert_eq!(report.listings, 1);
    let path = super::fetch::listing_path(cache.path(), &listing);
    assert!(
        path.to_string_lossy().ends_with(".dir"),
        "{}",
        path.display()
    );
    assert_eq!(std::fs::read(&path).unwrap(), listing.bytes);
}

#[tokio::test]
async fn content_addressed_outputs_resolve_to_their_keys_current_versions_and_fetch_whole() {
    use super::addressed::resolve;
    use super::dvc::{Addressed, Pointers, layout_key, listing_bytes};
    let only = |output: Addressed| Pointers {
        addressed: vec![output],
        ..Pointers::default()
    };
    let store = memory();
    let (one, two) = (&b"one\n"[..], &b"two\n"[..]);
    let md5 = |bytes: &[u8]| Digest::Md5(Digest::Md5(String::new()).of(bytes));
    for bytes in [one, two] {
        put(store.as_ref(), &layout_key(&md5(bytes)), bytes).await;
    }
    let listing = listing_bytes(&[
        ("a.txt".into(), md5(one).value().into()),
        ("sub/b.txt".into(), md5(two).value().into()),
    ]);
    let directory = md5(&listing);
    let dir_key = format!("{}.dir", layout_key(&directory));
    put(store.as_ref(), &dir_key, &listing).await;
    let output = Addressed {
        key: dir_key.clone(),
        digest: directory.clone(),
        size: Some(8),
        directory: true,
        file_algorithm: "md5",
        path: "data".into(),
        manifest: "data.dvc".into(),
    };
    let resolved = resolve(store.as_ref(), only(output.clone())).await;
    assert!(resolved.problems.is_empty(), "{:?}", resolved.problems);
    let keys: Vec<&str> = resolved.pins.iter().map(|p| p.key.as_str()).collect();
    assert_eq!(keys, [layout_key(&md5(one)), layout_key(&md5(two))]);
    assert_eq!(resolved.listings[0].bytes, listing);
    let cache = tempfile::tempdir().unwrap();
    let report = fetch_into(
        store.as_ref(),
        &resolved.pins,
        &resolved.listings,
        cache.path(),
    )
    .await;
    assert!(report.installed && report.ok(), "{:?}", report.problems);
    assert_eq!(
        std::fs::read(cache_path(cache.path(), &md5(two))).unwrap(),
        two
    );

    // A `.dir` whose bytes are not its name's, and a file the remote
    // lacks, are problems naming the output.
    put(store.as_ref(), &dir_key, b"[]").await;
    let resolved = resolve(store.as_ref(), only(output.clone())).await;
    assert_eq!(resolved.problems[0].error.kind(), "digest-mismatch");
    assert!(resolved.problems[0].pin.contains("(data)"));
    let missing = Addressed {
        key: layout_key(&md5(b"absent")),
        digest: md5(b"absent"),
        directory: false,
        path: "f.txt".into(),
        ..output
    };
    let resolved = resolve(store.as_ref(), only(missing)).await;
    assert_eq!(resolved.problems[0].error.kind(), "store");
    assert!(resolved.pins.is_empty());
}
