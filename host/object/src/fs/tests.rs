//! Behaviour only a filesystem store has: persistence, on-disk damage,
//! crash leftovers, the key encoding, and races between threads.
//! Races between processes and crashes of a writer process are in
//! `process_tests`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

use super::FsStore;
use super::layout::{KeyPath, STAGING};
use super::versions::version_ids;
use crate::{
    CompleteOptions, ListedVersion, MAX_LIST_PAGE, MAX_OBJECT_KEY_BYTES, Metadata, ObjectAdmin,
    ObjectError, ObjectKey, ObjectMeta, ObjectStore, ObjectStoreExt, PartData, PutCondition,
    UploadOptions,
};
use custodian_base::checksum::crc64_nvme;
use custodian_base::clock::{Clock, FixedClock};

pub(super) fn clock() -> Arc<dyn Clock> {
    Arc::new(FixedClock::new(1_000_000))
}

pub(super) fn open(root: &Path, versioned: bool) -> FsStore {
    FsStore::open(root, clock(), versioned)
        .unwrap_or_else(|e| panic!("opening {}: {e}", root.display()))
}

/// Runs one store call to completion on the calling thread.
pub(super) fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread runtime")
        .block_on(future)
}

pub(super) fn put(
    store: &FsStore,
    key: &str,
    body: &[u8],
    condition: &PutCondition,
) -> Result<ObjectMeta, ObjectError> {
    let body = Bytes::copy_from_slice(body);
    let crc = crc64_nvme(&body);
    block_on(store.put_whole(key, body, condition, &Metadata::new(), crc))
}

pub(super) fn create(store: &FsStore, key: &str, body: &[u8]) -> ObjectMeta {
    put(store, key, body, &PutCondition::IfNoneMatchAny).unwrap()
}

fn all_versions(store: &FsStore, prefix: &str) -> Vec<ListedVersion> {
    let page = block_on(store.list_versions(prefix, None, MAX_LIST_PAGE)).unwrap();
    assert_eq!(page.next, None);
    page.items
}

fn all_keys(store: &FsStore, prefix: &str) -> Vec<String> {
    let page = block_on(store.list(prefix, None, MAX_LIST_PAGE)).unwrap();
    assert_eq!(page.next, None);
    page.items.into_iter().map(|o| o.key).collect()
}

/// Every file under `root` with its length: what "nothing on disk
/// changed" compares.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, u64> {
    let mut files = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            // Settling the journal's segments changes no key.
            if entry.path() == root.join(super::layout::JOURNAL) {
                continue;
            }
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                stack.push(entry.path());
            }
            files.insert(entry.path(), if meta.is_dir() { 0 } else { meta.len() });
        }
    }
    files
}

/// The file of the key's newest version.
pub(super) fn newest_file(store: &FsStore, key: &str) -> PathBuf {
    let dir = store
        .layout
        .versions_dir(&KeyPath::new(&ObjectKey::new(key).unwrap()));
    dir.join(version_ids(&dir).unwrap().pop().expect("a version"))
}

fn is_corrupt<T>(got: Result<T, ObjectError>) -> bool {
    matches!(got, Err(ObjectError::Corrupt(_)))
}

fn invalid<T>(got: Result<T, ObjectError>) -> bool {
    matches!(got, Err(ObjectError::InvalidArgument(_)))
}

fn staging_files(root: &Path) -> Vec<PathBuf> {
    entries(&root.join(STAGING))
}

/// What directory `dir` holds.
pub(super) fn entries(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect()
}

/// Starts a multipart upload of `key` without metadata; its id.
fn start_upload(store: &FsStore, key: &str) -> String {
    let options = UploadOptions {
        metadata: &Metadata::new(),
    };
    block_on(store.create_upload(&ObjectKey::new(key).unwrap(), options)).unwrap()
}

/// Stores `body` as part `number` of upload `id` of key `k`.
fn send_part(store: &FsStore, id: &str, number: u32, body: &Bytes) {
    let data = PartData::Bytes {
        body: body.clone(),
        crc64: crc64_nvme(body),
    };
    block_on(store.upload_part(&ObjectKey::new("k").unwrap(), id, number, data)).unwrap();
}

#[test]
fn versions_and_delete_markers_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = {
        let store = open(dir.path(), true);
        let first = create(&store, "k", b"one");
        let second = put(
            &store,
            "k",
            b"two",
            &PutCondition::IfMatch(first.etag.clone()),
        )
        .unwrap();
        create(&store, "gone", b"x");
        block_on(store.delete("gone")).unwrap();
        (first, second)
    };
    let store = open(dir.path(), true);
    let head = block_on(store.head("k")).unwrap();
    assert_eq!(
        (head.etag.as_str(), head.version_id.as_ref()),
        (second.etag.as_str(), second.version_id.as_ref())
    );
    let (_, old) = block_on(store.get_version("k", first.version_id.as_deref().unwrap())).unwrap();
    assert_eq!(old, "one");
    assert!(matches!(
        block_on(store.head("gone")),
        Err(ObjectError::NotFound(_))
    ));
    let shape: Vec<_> = all_versions(&store, "")
        .iter()
        .map(|v| (v.key.clone(), v.is_current, v.is_delete_marker))
        .collect();
    assert_eq!(
        shape,
        [
            ("gone".to_owned(), true, true),
            ("gone".to_owned(), false, false),
            ("k".to_owned(), true, false),
            ("k".to_owned(), false, false),
        ]
    );
    // The guard carries over: the etag read before the restart still works.
    put(&store, "k", b"three", &PutCondition::IfMatch(second.etag)).unwrap();
}

#[test]
fn a_supplied_md5_is_recorded_in_the_version_file_and_survives_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let md5 = *b"0123456789abcdef";
    let body = Bytes::from_static(b"bytes with an md5");
    {
        let store = open(dir.path(), true);
        let options = crate::PutOptions {
            condition: &PutCondition::IfNoneMatchAny,
            metadata: &Metadata::new(),
            crc64: crc64_nvme(&body),
            content_md5: Some(md5),
        };
        let key = ObjectKey::new("k").unwrap();
        let written = block_on(store.put_opts(&key, body, options)).unwrap();
        assert_eq!(written.content_md5, Some(md5));
    }
    let store = open(dir.path(), true);
    assert_eq!(block_on(store.head("k")).unwrap().content_md5, Some(md5));
    assert_eq!(all_versions(&store, "")[0].content_md5, Some(md5));
    let page = block_on(store.list("", None, MAX_LIST_PAGE)).unwrap();
    assert_eq!(page.items[0].content_md5, Some(md5));
}

#[test]
fn an_unversioned_store_keeps_only_the_current_object_across_reopening() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(dir.path(), false);
        let first = create(&store, "k", b"one");
        put(&store, "k", b"two", &PutCondition::IfMatch(first.etag)).unwrap();
        create(&store, "gone", b"x");
        block_on(store.delete("gone")).unwrap();
    }
    let store = open(dir.path(), false);
    assert_eq!(block_on(store.get_whole("k", None)).unwrap().1, "two");
    assert_eq!(all_keys(&store, ""), ["k"]);
    let dir = store
        .layout
        .versions_dir(&KeyPath::new(&ObjectKey::new("k").unwrap()));
    assert_eq!(version_ids(&dir).unwrap().len(), 1);
    assert!(
        !store.layout.objects.join("gone").exists(),
        "a deleted key leaves no directory"
    );
}

#[test]
fn reopening_with_the_other_versioning_mode_is_refused() {
    for versioned in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        create(&open(dir.path(), versioned), "k", b"v");
        let before = snapshot(dir.path());
        let got = FsStore::open(dir.path(), clock(), !versioned);
        match got {
            Err(ObjectError::InvalidArgument(message)) => {
                assert!(message.contains("versioning mode"), "{message}");
            }
            other => panic!("reopening with versioned={}: {other:?}", !versioned),
        }
        assert_eq!(
            snapshot(dir.path()),
            before,
            "a refused open changes nothing"
        );
        assert_eq!(
            block_on(open(dir.path(), versioned).get_whole("k", None))
                .unwrap()
                .1,
            "v"
        );
    }
}

#[test]
fn a_directory_without_a_store_has_no_recorded_mode() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(FsStore::created_versioned(dir.path()), Ok(None));
    assert_eq!(
        FsStore::created_versioned(&dir.path().join("absent")),
        Ok(None)
    );
}

#[test]
fn a_corrupted_version_file_reads_as_corrupt() {
    let store = FsStore::temporary(true);
    let body: Vec<u8> = (0..200_000u32).map(|i| (i % 253) as u8).collect();
    let meta = create(&store, "k", &body);
    let path = newest_file(&store, "k");
    let pristine = std::fs::read(&path).unwrap();
    let header_len = pristine.len() - body.len() - 4 * 8;

    // A flipped bit in the body's third 64 KiB block.
    let mut damaged = pristine.clone();
    damaged[header_len + 150_000] ^= 0x10;
    std::fs::write(&path, &damaged).unwrap();
    assert!(is_corrupt(block_on(store.get_whole("k", None))));
    assert!(is_corrupt(block_on(store.get_range(
        "k",
        140_000..140_010,
        &meta.etag
    ))));
    let id = meta.version_id.as_deref().unwrap();
    assert!(is_corrupt(block_on(store.get_version("k", id))));
    let got = block_on(store.copy_object(
        "k",
        None,
        "copy",
        &PutCondition::IfNoneMatchAny,
        &Metadata::new(),
    ));
    assert!(is_corrupt(got), "a copy never spreads damage");
    assert!(matches!(
        block_on(store.head("copy")),
        Err(ObjectError::NotFound(_))
    ));
    // Blocks that are intact still read: the damage is located.
    assert_eq!(
        block_on(store.get_range("k", 0..10, &meta.etag)).unwrap(),
        body[..10]
    );

    // A flipped bit in the header.
    let mut damaged = pristine.clone();
    damaged[30] ^= 0x01;
    std::fs::write(&path, &damaged).unwrap();
    assert!(is_corrupt(block_on(store.head("k"))));

    // A torn (truncated) file.
    std::fs::write(&path, &pristine[..pristine.len() - 100]).unwrap();
    assert!(is_corrupt(block_on(store.head("k"))));
    assert!(is_corrupt(block_on(store.get_whole("k", None))));

    std::fs::write(&path, &pristine).unwrap();
    assert_eq!(block_on(store.get_whole("k", None)).unwrap().1, body);
    assert!(staging_files(store.root()).is_empty());
}

/// Makes a staging file of `store` with `hook` run in the window
/// between its create and its lock.
fn staged_with(
    store: &FsStore,
    hook: impl FnMut(&Path) + 'static,
) -> Result<super::durable::Staged, ObjectError> {
    super::durable::BEFORE_LOCK.set(Some(Box::new(hook)));
    let staged = super::durable::Staged::create(&store.layout, &store.ids);
    super::durable::BEFORE_LOCK.set(None);
    staged
}

#[test]
fn a_staging_file_recovery_removes_before_its_writer_locks_it_is_replaced_by_a_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), false);
    let root = dir.path().to_path_buf();
    let calls = std::rc::Rc::new(std::cell::Cell::new(0));
    let seen = calls.clone();
    let staged = staged_with(&store, move |path| {
        seen.set(seen.get() + 1);
        if seen.get() == 1 {
            // Another process opening the store sweeps `staging/` and
            // finds this file unlocked.
            drop(open(&root, false));
            assert!(!path.exists(), "recovery removed the unlocked file");
        }
    })
    .unwrap();
    assert_eq!(calls.get(), 2, "the writer made a second file");
    let files = staging_files(store.root());
    assert_eq!(files.len(), 1, "{files:?}");
    // The second is locked and named: the next recovery leaves it alone.
    drop(open(dir.path(), false));
    assert_eq!(staging_files(store.root()), files);
    drop(staged);
    assert!(staging_files(store.root()).is_empty());
}

#[test]
fn a_staging_file_recovery_holds_locked_before_its_writer_does_is_replaced_by_a_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), false);
    let held = std::rc::Rc::new(std::cell::RefCell::new(None));
    let holder = held.clone();
    let staged = staged_with(&store, move |path| {
        if holder.borrow().is_none() {
            // Recovery has locked it and is about to remove it.
            let file = std::fs::File::open(path).unwrap();
            file.try_lock().unwrap();
            *holder.borrow_mut() = Some(file);
        }
    })
    .unwrap();
    assert!(held.borrow().is_some());
    assert_eq!(
        staging_files(store.root()).len(),
        1,
        "the first was removed"
    );
    drop(staged);
    assert!(staging_files(store.root()).is_empty());
}

#[test]
fn a_writer_whose_staging_files_keep_vanishing_gives_up_with_an_error_naming_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), false);
    let calls = std::rc::Rc::new(std::cell::Cell::new(0));
    let seen = calls.clone();
    let error = staged_with(&store, move |path| {
        seen.set(seen.get() + 1);
        std::fs::remove_file(path).unwrap();
    })
    .unwrap_err();
    assert_eq!(calls.get(), 8);
    assert!(matches!(error, ObjectError::Io(_)), "{error:?}");
    let message = error.to_string();
    assert!(
        message.contains("removed as soon as they were made"),
        "{message}"
    );
    assert!(message.contains(&STAGING.to_string()), "{message}");
    assert!(staging_files(store.root()).is_empty());
    // The store still publishes once nothing removes its files.
    create(&store, "k", b"v");
}

#[test]
fn a_stale_staging_file_is_removed_on_open_while_a_locked_one_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    create(&open(dir.path(), true), "k", b"v");
    let staging = dir.path().join(STAGING);
    let stale = staging.join("0123456789abcdef0123456789abcdef.stage");
    std::fs::write(&stale, b"half a version").unwrap();
    // A live writer in another process holds its staging file's lock.
    let live = staging.join("fedcba9876543210fedcba9876543210.stage");
    std::fs::write(&live, b"being written").unwrap();
    let writer = std::fs::File::open(&live).unwrap();
    writer.try_lock().unwrap();

    let store = open(dir.path(), true);
    assert!(!stale.exists(), "the stale staging file is removed");
    assert!(live.exists(), "the live writer's file is left alone");
    let report = block_on(store.bootstrap("")).unwrap();
    assert!(
        report
            .notes
            .iter()
            .any(|n| n.contains("removed 1 abandoned staging file(s); left 1")),
        "{report:?}"
    );
    drop(writer);
    drop(store);
    open(dir.path(), true);
    assert!(!live.exists(), "once its writer is gone it is stale too");
    assert!(staging_files(dir.path()).is_empty());
}

#[test]
fn invalid_keys_are_refused_and_nothing_on_disk_changes() {
    let store = FsStore::temporary(true);
    create(&store, "good", b"v");
    let before = snapshot(store.root());
    let too_long = "k".repeat(MAX_OBJECT_KEY_BYTES + 1);
    for bad in [
        "..",
        "a/../b",
        "../escape",
        "./a",
        "a/.",
        "a//b",
        "/a",
        "a/",
        "",
        "a\0b",
        "a\nb",
        too_long.as_str(),
    ] {
        assert!(
            invalid(put(&store, bad, b"v", &PutCondition::Unconditional)),
            "{bad:?}"
        );
        assert!(invalid(block_on(store.head(bad))), "{bad:?}");
        assert!(invalid(block_on(store.delete(bad))), "{bad:?}");
        assert!(invalid(block_on(
            store.delete_version(bad, "00000000000000000001-0000000000000000")
        )));
        // Every primitive takes a checked key: a bad one cannot be made.
        assert!(invalid(ObjectKey::new(bad)), "{bad:?}");
        let got = block_on(store.copy_object(
            "good",
            None,
            bad,
            &PutCondition::Unconditional,
            &Metadata::new(),
        ));
        assert!(invalid(got), "{bad:?}");
    }
    // Ids that are not this store's never name a path.
    for id in [
        "../../format",
        "..",
        "00000000000000000001-000000000000000/",
    ] {
        assert!(matches!(
            block_on(store.head_version("good", id)),
            Err(ObjectError::NotFound(_))
        ));
        block_on(store.delete_version("good", id)).unwrap();
        let got = block_on(store.abort_upload(&ObjectKey::new("good").unwrap(), id));
        assert!(got.is_ok());
    }
    assert_eq!(snapshot(store.root()), before);
}

#[test]
fn a_key_and_the_keys_below_it_coexist() {
    for versioned in [true, false] {
        let store = FsStore::temporary(versioned);
        create(&store, "a", b"a");
        create(&store, "a/b", b"ab");
        create(&store, "a/b/c", b"abc");
        create(&store, "a.b", b"a.b");
        assert_eq!(all_keys(&store, ""), ["a", "a.b", "a/b", "a/b/c"]);
        block_on(store.delete("a/b")).unwrap();
        assert_eq!(block_on(store.get_whole("a", None)).unwrap().1, "a");
        assert_eq!(block_on(store.get_whole("a/b/c", None)).unwrap().1, "abc");
        assert_eq!(all_keys(&store, "a/"), ["a/b/c"]);
        block_on(store.delete("a")).unwrap();
        assert_eq!(all_keys(&store, ""), ["a.b", "a/b/c"]);
        if !versioned {
            block_on(store.delete("a/b/c")).unwrap();
            block_on(store.delete("a.b")).unwrap();
            let left: Vec<_> = std::fs::read_dir(&store.layout.objects).unwrap().collect();
            assert!(
                left.is_empty(),
                "deleting every key prunes every directory: {left:?}"
            );
        }
    }
}

/// A deterministic generator, so a failure replays exactly.
pub(super) struct XorShift(pub u64);

impl XorShift {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
fn listing_order_is_byte_order_for_escaped_and_long_keys() {
    listing_is_byte_order(&FsStore::temporary(true));
}

#[test]
fn listing_order_is_byte_order_in_a_format_1_store_too() {
    listing_is_byte_order(&FsStore::temporary_of_format(true, Some(1)));
}

/// Lists random keys (escaped, long, prefixes of each other) with every
/// prefix and page size, against a `BTreeSet` of them.
fn listing_is_byte_order(store: &FsStore) {
    let store = store.clone();
    let long = "L".repeat(600);
    let long_escaped = "é".repeat(300);
    let pieces = [
        "a",
        "a!",
        "a/",
        "a/b",
        "ab",
        "A",
        "%",
        ".",
        "z",
        "é",
        " ",
        "-",
        long.as_str(),
        long_escaped.as_str(),
    ];
    let mut rng = XorShift(0x0DDB_1A5E_5BAD_5EED);
    let mut model = BTreeSet::new();
    while model.len() < 150 {
        let mut key = String::new();
        for _ in 0..1 + rng.below(4) {
            key.push_str(pieces[rng.below(pieces.len() as u64) as usize]);
        }
        if crate::ObjectKey::new(key.as_str()).is_ok() && model.insert(key.clone()) {
            create(&store, &key, key.as_bytes());
        }
    }
    // A few deleted keys must not appear.
    let deleted: Vec<String> = model.iter().step_by(17).cloned().collect();
    for key in &deleted {
        block_on(store.delete(key)).unwrap();
        model.remove(key);
    }
    let model: Vec<String> = model.into_iter().collect();
    for prefix in ["", "a", "a/", "é", "L", "zz"] {
        let want: Vec<&String> = model.iter().filter(|k| k.starts_with(prefix)).collect();
        for limit in [1, 7, 1000] {
            let mut seen: Vec<String> = Vec::new();
            let mut cursor: Option<String> = None;
            loop {
                let page = block_on(store.list(prefix, cursor.as_deref(), limit)).unwrap();
                seen.extend(page.items.into_iter().map(|o| o.key));
                assert!(seen.len() <= want.len(), "the listing repeats");
                match page.next {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
            assert_eq!(
                seen.iter().collect::<Vec<_>>(),
                want,
                "prefix {prefix:?}, limit {limit}"
            );
        }
    }
    let listed: Vec<_> = all_versions(&store, "")
        .into_iter()
        .filter(|v| !v.is_delete_marker)
        .map(|v| v.key)
        .collect();
    let mut every: Vec<String> = model.iter().chain(&deleted).cloned().collect();
    every.sort();
    assert_eq!(listed, every);
}

#[test]
fn a_key_and_the_prefix_directory_of_its_name_are_both_listed_when_a_re_read_splits_them() {
    // Seven keys sort before `a`; so the root's first read takes them and
    // key `a` (`a%v`), and leaves directory `a` (of `a/x`), which has the
    // same bound, to the re-read.
    let store = FsStore::temporary(true);
    let mut keys: Vec<String> = (0..7).map(|i| i.to_string()).collect();
    keys.extend(["a".into(), "a/x".into(), "b".into()]);
    for key in &keys {
        create(&store, key, b"x");
    }
    assert_eq!(all_keys(&store, ""), keys);
    for limit in 1..=3 {
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = block_on(store.list("", cursor.as_deref(), limit)).unwrap();
            seen.extend(page.items.into_iter().map(|o| o.key));
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        assert_eq!(seen, keys, "limit {limit}");
    }
}

#[test]
fn a_new_key_gets_one_directory_beside_its_prefix_in_a_new_store() {
    let store = FsStore::temporary(true);
    create(&store, "logs/1", b"x");
    create(&store, "logs", b"y");
    let objects = store.layout.objects.clone();
    let names = |dir: &Path| -> BTreeSet<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect()
    };
    assert_eq!(
        names(&objects),
        BTreeSet::from(["logs".into(), "logs%v".into()])
    );
    assert_eq!(names(&objects.join("logs")), BTreeSet::from(["1%v".into()]));
    assert_eq!(version_ids(&objects.join("logs/1%v")).unwrap().len(), 1);
    let notes = block_on(store.bootstrap("")).unwrap().notes;
    assert!(notes[0].contains("format 3"), "{notes:?}");
}

/// A directory holding only a versioned store's format record of
/// `format`, as the build that wrote it left it.
fn dir_of_format(format: u32) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    super::recovery::write_record_of(dir.path(), format, true);
    dir
}

#[test]
fn a_store_made_in_format_1_keeps_its_spelling_and_is_reported_as_such() {
    let dir = dir_of_format(1);
    let store = open(dir.path(), true);
    create(&store, "logs/1", b"x");
    let objects = store.layout.objects.clone();
    assert_eq!(version_ids(&objects.join("logs/1/%v")).unwrap().len(), 1);
    assert!(!objects.join("logs/1%v").exists());
    drop(store);
    let store = open(dir.path(), true);
    assert_eq!(all_keys(&store, ""), ["logs/1"]);
    let notes = block_on(store.bootstrap("")).unwrap().notes;
    assert!(notes[0].contains("format 1"), "{notes:?}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("format")).unwrap(),
        r#"{"format":1,"versioned":true}"#,
        "opening never rewrites the record"
    );
}

#[test]
fn a_store_of_an_unknown_format_is_refused_as_unsupported() {
    let dir = dir_of_format(4);
    let refused = FsStore::open(dir.path(), clock(), true).unwrap_err();
    assert!(
        matches!(&refused, ObjectError::Unsupported(d) if d.to_string().contains("format 4")),
        "{refused:?}"
    );
}

#[test]
fn superseded_versions_left_by_a_crash_are_ignored_and_removed_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), false);
    create(&store, "k", b"old");
    let old = newest_file(&store, "k");
    let saved = std::fs::read(&old).unwrap();
    put(&store, "k", b"new", &PutCondition::Unconditional).unwrap();
    // The crash: the old version's removal never reached the disk.
    std::fs::write(&old, saved).unwrap();
    let versions = store
        .layout
        .versions_dir(&KeyPath::new(&ObjectKey::new("k").unwrap()));
    assert_eq!(version_ids(&versions).unwrap().len(), 2);
    assert_eq!(block_on(store.get_whole("k", None)).unwrap().1, "new");
    drop(store);
    let store = open(dir.path(), false);
    assert_eq!(version_ids(&versions).unwrap().len(), 1);
    assert_eq!(block_on(store.get_whole("k", None)).unwrap().1, "new");
    let report = block_on(store.bootstrap("")).unwrap();
    assert!(
        report
            .notes
            .iter()
            .any(|n| n.contains("removed 1 superseded")),
        "{report:?}"
    );
}

#[test]
fn a_completed_upload_with_a_damaged_part_publishes_nothing() {
    let store = FsStore::temporary(true);
    let id = start_upload(&store, "k");
    let part = Bytes::from_static(b"part bytes");
    send_part(&store, &id, 1, &part);
    let path = store.layout.upload_dir(&id).join("part-00001");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[0] ^= 1;
    std::fs::write(&path, bytes).unwrap();
    let got = block_on(store.complete_upload(
        &ObjectKey::new("k").unwrap(),
        &id,
        CompleteOptions {
            parts: 1,
            condition: &PutCondition::IfNoneMatchAny,
            crc64: crc64_nvme(&part),
        },
    ));
    assert!(matches!(got, Err(ObjectError::Corrupt(_))), "{got:?}");
    assert!(matches!(
        block_on(store.head("k")),
        Err(ObjectError::NotFound(_))
    ));
    assert_eq!(
        block_on(store.list_uploads("")).unwrap().len(),
        1,
        "left for the caller to abort"
    );
    assert!(staging_files(store.root()).is_empty());
}

#[test]
fn bootstrap_warns_about_uploads_pending_for_over_a_day() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(FixedClock::new(1_000_000));
    let store = FsStore::open(dir.path(), clock.clone(), true).unwrap();
    start_upload(&store, "old/k");
    assert!(block_on(store.bootstrap("")).unwrap().warnings.is_empty());
    clock.set(1_000_000 + 25 * 60 * 60 * 1000);
    let report = block_on(store.bootstrap("")).unwrap();
    assert!(report.ok());
    assert_eq!(report.warnings.len(), 1, "{report:?}");
    assert!(
        block_on(store.bootstrap("other/"))
            .unwrap()
            .warnings
            .is_empty()
    );
}

/// What one racer saw of one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Published `new`, guarded on `guard` (`None`: if-none-match).
    Won { guard: Option<String>, new: String },
    /// Its guard failed.
    Lost,
}

impl Outcome {
    pub fn to_line(&self) -> String {
        match self {
            Outcome::Won { guard, new } => {
                format!("won\t{}\t{new}", guard.as_deref().unwrap_or("-"))
            }
            Outcome::Lost => "lost".into(),
        }
    }

    pub fn from_line(line: &str) -> Self {
        match line.split('\t').collect::<Vec<_>>()[..] {
            ["won", guard, new] => Outcome::Won {
                guard: (guard != "-").then(|| guard.to_owned()),
                new: new.to_owned(),
            },
            ["lost"] => Outcome::Lost,
            _ => panic!("not an outcome: {line:?}"),
        }
    }
}

/// Races for `rounds` generations of `key`: read the current etag, publish
/// guarded on it (or create if there is none).
pub(super) fn race(store: &FsStore, key: &str, who: &str, rounds: usize) -> Vec<Outcome> {
    let mut outcomes = Vec::new();
    for round in 0..rounds {
        let guard = match block_on(store.head(key)) {
            Ok(meta) => Some(meta.etag),
            Err(ObjectError::NotFound(_)) => None,
            Err(e) => panic!("{who}: head: {e}"),
        };
        let condition = guard
            .clone()
            .map_or(PutCondition::IfNoneMatchAny, PutCondition::IfMatch);
        let body = format!("{who} round {round}");
        match put(store, key, body.as_bytes(), &condition) {
            Ok(meta) => outcomes.push(Outcome::Won {
                guard,
                new: meta.etag,
            }),
            Err(ObjectError::PreconditionFailed(_) | ObjectError::Conflict(_)) => {
                outcomes.push(Outcome::Lost)
            }
            Err(e) => panic!("{who}: put: {e}"),
        }
    }
    outcomes
}

/// Every generation has exactly one winner. A guard can only hold on the
/// etag of the then-current generation, and every generation after the
/// first was made by a winner, so the winners must form one chain: a
/// create, then each winner guarded on the previous winner's etag, ending
/// at the current object. Two winners on one guard, or a winner outside
/// the chain, is a lost update. On a versioned store the chain must also
/// be exactly the key's versions, oldest first.
pub(super) fn assert_one_winner_per_generation(
    outcomes: &[Outcome],
    current: &str,
    versions: Option<&[ListedVersion]>,
) {
    let mut by_guard: BTreeMap<Option<String>, String> = BTreeMap::new();
    for outcome in outcomes {
        if let Outcome::Won { guard, new } = outcome {
            let previous = by_guard.insert(guard.clone(), new.clone());
            assert!(previous.is_none(), "two winners guarded on {guard:?}");
        }
    }
    let mut chain = Vec::new();
    let mut guard: Option<String> = None;
    while let Some(next) = by_guard.remove(&guard) {
        chain.push(next.clone());
        guard = Some(next);
    }
    assert!(
        by_guard.is_empty(),
        "winners outside the chain: {by_guard:?}"
    );
    assert_eq!(
        chain.last().map(String::as_str),
        Some(current),
        "the chain ends at the current object"
    );
    assert!(chain.len() > 1, "the race produced generations");
    if let Some(versions) = versions {
        let oldest_first: Vec<&str> = versions.iter().rev().map(|v| v.etag.as_str()).collect();
        assert_eq!(
            oldest_first, chain,
            "the versions are the winners, in order"
        );
    }
}

#[test]
fn threads_racing_conditional_puts_get_one_winner_per_generation() {
    for versioned in [true, false] {
        let store = FsStore::temporary(versioned);
        // A second store on the same directory, as a second process would
        // open it: its lock descriptor is its own.
        let twin = open(store.root(), versioned);
        let threads = 8;
        let barrier = std::sync::Barrier::new(threads);
        let outcomes: Vec<Outcome> = std::thread::scope(|scope| {
            let racers: Vec<_> = (0..threads)
                .map(|t| {
                    let store = if t % 2 == 0 { &store } else { &twin };
                    let barrier = &barrier;
                    scope.spawn(move || {
                        barrier.wait();
                        race(store, "k", &format!("thread {t}"), 15)
                    })
                })
                .collect();
            racers.into_iter().flat_map(|r| r.join().unwrap()).collect()
        });
        let lost = outcomes.iter().filter(|o| **o == Outcome::Lost).count();
        assert!(
            lost > 0,
            "the threads never collided; the test proves nothing"
        );
        let current = block_on(store.head("k")).unwrap().etag;
        let versions = versioned.then(|| all_versions(&store, "k"));
        assert_one_winner_per_generation(&outcomes, &current, versions.as_deref());
        assert!(
            staging_files(store.root()).is_empty(),
            "losers leave nothing behind"
        );
    }
}

#[test]
fn a_pending_upload_survives_reopening_and_completes() {
    let dir = tempfile::tempdir().unwrap();
    let (id, one, two) = {
        let store = open(dir.path(), true);
        let id = start_upload(&store, "k");
        let (one, two) = (Bytes::from_static(b"first "), Bytes::from_static(b"second"));
        send_part(&store, &id, 1, &one);
        send_part(&store, &id, 2, &two);
        (id, one, two)
    };
    let store = open(dir.path(), true);
    let pending = block_on(store.list_uploads("")).unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(
        (pending[0].key.as_str(), pending[0].upload_id.as_str()),
        ("k", id.as_str())
    );
    let whole = [one, two].concat();
    let meta = block_on(store.complete_upload(
        &ObjectKey::new("k").unwrap(),
        &id,
        CompleteOptions {
            parts: 2,
            condition: &PutCondition::IfNoneMatchAny,
            crc64: crc64_nvme(&whole),
        },
    ))
    .unwrap();
    assert_eq!(meta.size, whole.len() as u64);
    assert_eq!(block_on(store.get_whole("k", None)).unwrap().1, whole);
    assert!(block_on(store.list_uploads("")).unwrap().is_empty());
    // Completing twice is refused: the upload is gone.
    let again = block_on(store.complete_upload(
        &ObjectKey::new("k").unwrap(),
        &id,
        CompleteOptions {
            parts: 2,
            condition: &PutCondition::Unconditional,
            crc64: crc64_nvme(&whole),
        },
    ));
    assert!(
        matches!(again, Err(ObjectError::NoSuchUpload(_))),
        "{again:?}"
    );
}

#[test]
fn an_upload_left_without_its_record_by_a_crash_is_removed_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let id = {
        let store = open(dir.path(), true);
        let id = start_upload(&store, "k");
        let part = Bytes::from_static(b"bytes");
        send_part(&store, &id, 1, &part);
        // The crash: an abort removed the record and no more.
        std::fs::remove_file(store.layout.upload_dir(&id).join(super::uploads::META)).unwrap();
        id
    };
    let store = open(dir.path(), true);
    assert!(!store.layout.upload_dir(&id).exists());
    assert!(block_on(store.list_uploads("")).unwrap().is_empty());
    let report = block_on(store.bootstrap("")).unwrap();
    assert!(
        report
            .notes
            .iter()
            .any(|n| n.contains("removed 1 incomplete upload")),
        "{report:?}"
    );
}

#[test]
fn a_segment_longer_than_a_file_name_is_stored_in_chunks() {
    let store = FsStore::temporary(true);
    // 1024 bytes, one segment, every byte escaped: 3072 encoded bytes,
    // far over NAME_MAX, yet a legal key everywhere else.
    let worst = "é".repeat(MAX_OBJECT_KEY_BYTES / 2);
    let long_prefix = format!("{}/x", "p".repeat(300));
    for key in [worst.as_str(), long_prefix.as_str()] {
        create(&store, key, key.as_bytes());
        assert_eq!(
            block_on(store.get_whole(key, None)).unwrap().1,
            key.as_bytes()
        );
    }
    let mut want = vec![worst.clone(), long_prefix.clone()];
    want.sort();
    assert_eq!(all_keys(&store, ""), want);
    assert_eq!(all_keys(&store, &"p".repeat(299)), [long_prefix.as_str()]);
    assert_eq!(all_keys(&store, "é"), [worst.as_str()]);
    let too_long = format!("{worst}é");
    assert!(invalid(put(
        &store,
        &too_long,
        b"v",
        &PutCondition::Unconditional
    )));
}

#[test]
fn an_io_failure_keeps_the_operating_systems_error_as_its_source() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"not a directory").unwrap();
    let clock: Arc<dyn Clock> = Arc::new(FixedClock::new(0));
    let error = FsStore::open(&file.join("store"), clock, true).unwrap_err();
    assert!(matches!(error, ObjectError::Io(_)), "{error:?}");
    let source = std::error::Error::source(&error).expect("the OS error is kept");
    assert!(
        source.downcast_ref::<std::io::Error>().is_some(),
        "{source:?}"
    );
    // The message says what was being done; the cause is not repeated in it.
    assert!(!error.to_string().contains(&source.to_string()), "{error}");
    assert!(error.clone().into_message().ends_with(&source.to_string()));
}

#[test]
fn a_streamed_version_reads_back_whole_and_by_range_after_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let body: Bytes = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    let sums = crate::BodySums {
        crc64: crc64_nvme(&body),
        content_md5: Some([7; 16]),
    };
    let options = crate::PutOptions {
        condition: &PutCondition::IfNoneMatchAny,
        metadata: &Metadata::new(),
        crc64: 0,
        content_md5: None,
    };
    let key = crate::ObjectKey::new("streamed").unwrap();
    let streamed = crate::StreamedBody::of(body.clone(), sums);
    let written = block_on(open(dir.path(), true).put_stream(&key, streamed, u64::MAX, options));
    let written = written.unwrap();
    // Reopened, the header the writer filled in after the body reads as
    // any other: size, CRC, MD5 and the block CRCs a range is checked by.
    let store = open(dir.path(), true);
    let (meta, read) = block_on(store.get_whole("streamed", None)).unwrap();
    assert_eq!(read, body);
    assert_eq!(
        (meta.size, meta.crc64, meta.content_md5),
        (300_000, Some(sums.crc64), Some([7; 16]))
    );
    let range = block_on(store.get_range("streamed", 131_000..131_100, &written.etag)).unwrap();
    assert_eq!(range, body.slice(131_000..131_100));
}

#[test]
fn concurrent_removals_from_one_directory_all_succeed_and_leave_it_pruned() {
    // The removals sync their directory outside the arbiter, and each
    // round's last one to prune finds the others' directory gone: every
    // one must still succeed, and nothing may be left behind.
    let store = FsStore::temporary(true);
    for round in 0..20 {
        let key = format!("shared/{round}/k");
        let versions: Vec<String> = (0..8)
            .map(|n| {
                let body = Bytes::from(format!("{round}-{n}"));
                let crc = crc64_nvme(&body);
                let meta = block_on(store.put_whole(
                    &key,
                    body,
                    &PutCondition::Unconditional,
                    &Metadata::new(),
                    crc,
                ))
                .unwrap();
                meta.version_id
                    .expect("a versioned store names its versions")
            })
            .collect();
        std::thread::scope(|scope| {
            for version in &versions {
                let (store, key) = (&store, &key);
                scope.spawn(move || block_on(store.delete_version(key, version)).unwrap());
            }
        });
        let left = block_on(store.list_key_versions(
            &ObjectKey::new(key.clone()).unwrap(),
            None,
            MAX_LIST_PAGE,
        ))
        .unwrap();
        assert!(left.items.is_empty(), "round {round}: {:?}", left.items);
        // Removing a version that is gone already succeeds too.
        block_on(store.delete_version(&key, &versions[0])).unwrap();
    }
    let left: Vec<_> = std::fs::read_dir(&store.layout.objects)
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "directories left: {left:?}");
}

#[test]
fn concurrent_deletes_of_keys_under_one_prefix_leave_nothing_behind() {
    let store = FsStore::temporary(false);
    let keys: Vec<String> = (0..32).map(|n| format!("p/q/{n}")).collect();
    for key in &keys {
        let body = Bytes::from(key.clone());
        let crc = crc64_nvme(&body);
        block_on(store.put_whole(
            key,
            body,
            &PutCondition::Unconditional,
            &Metadata::new(),
            crc,
        ))
        .unwrap();
    }
    std::thread::scope(|scope| {
        for key in &keys {
            let store = &store;
            scope.spawn(move || block_on(store.delete(key)).unwrap());
        }
    });
    for key in &keys {
        assert!(matches!(
            block_on(store.head(key)),
            Err(ObjectError::NotFound(_))
        ));
    }
    let left: Vec<_> = std::fs::read_dir(&store.layout.objects)
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "directories left: {left:?}");
}

/// The directories under `root` fsynced so far.
pub(super) fn synced_under(root: &Path) -> Vec<PathBuf> {
    super::syncer::SYNCED
        .lock()
        .unwrap()
        .iter()
        .filter(|dir| dir.starts_with(root))
        .cloned()
        .collect()
}

#[test]
fn a_keys_first_publish_has_synced_its_new_version_directory_and_its_parent_when_answered() {
    // A store without a journal: there every publish syncs (format 3's
    // large and streamed publishes take the same path).
    let store = FsStore::temporary_of_format(true, Some(2));
    let root = store.layout.root.clone();
    create(&store, "first/key", b"one");
    // Marks the answer in the record of syncs: what was synced before it
    // was durable when the publish was acknowledged.
    let answered = root.join("<answered>");
    super::syncer::SYNCED.lock().unwrap().push(answered.clone());
    let dir = store
        .layout
        .versions_dir(&KeyPath::new(&ObjectKey::new("first/key").unwrap()));
    let synced = synced_under(&root);
    let before = |d: &Path| {
        let at = |x: &Path| synced.iter().position(|s| s == x);
        matches!((at(d), at(&answered)), (Some(d), Some(a)) if d < a)
    };
    assert!(before(&dir), "{synced:?}");
    assert!(before(dir.parent().unwrap()), "{synced:?}");
    // The directory is synced once: by the group, not again by the writer.
    assert_eq!(
        synced.iter().filter(|d| **d == dir).count(),
        1,
        "{synced:?}"
    );

    // A later version goes into the existing directory, which its writer
    // syncs after the arbiter.
    put(&store, "first/key", b"two", &PutCondition::Unconditional).unwrap();
    let synced = synced_under(&root);
    assert_eq!(
        synced.iter().filter(|d| **d == dir).count(),
        2,
        "{synced:?}"
    );
}

#[test]
fn concurrent_first_publishes_each_have_their_version_directory_synced() {
    // Without a journal, as above.
    let store = FsStore::temporary_of_format(true, Some(2));
    let root = store.layout.root.clone();
    std::thread::scope(|scope| {
        for writer in 0..8 {
            let store = &store;
            scope.spawn(move || {
                for n in 0..10 {
                    create(store, &format!("many/{writer}/{n}"), b"x");
                }
            });
        }
    });
    let synced = synced_under(&root);
    for writer in 0..8 {
        for n in 0..10 {
            let key = ObjectKey::new(format!("many/{writer}/{n}")).unwrap();
            let dir = store.layout.versions_dir(&KeyPath::new(&key));
            assert!(synced.contains(&dir), "{} was never synced", dir.display());
        }
    }
}

#[test]
fn a_thread_marked_as_one_that_may_block_publishes_inline_without_the_blocking_pool() {
    // One blocking thread at most: a publish handed to the pool from the
    // pool's only thread would wait for it forever.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .max_blocking_threads(1)
        .enable_time()
        .build()
        .unwrap();
    let store = FsStore::temporary(true);
    let handle = runtime.handle().clone();
    let publish = runtime.spawn_blocking(move || {
        super::on_blocking_thread(|| {
            let body = Bytes::from_static(b"inline");
            let crc = crc64_nvme(&body);
            let none = PutCondition::IfNoneMatchAny;
            handle.block_on(store.put_whole("k", body, &none, &Metadata::new(), crc))
        })
    });
    let done = runtime.block_on(async {
        tokio::time::timeout(std::time::Duration::from_secs(20), publish).await
    });
    runtime.shutdown_background();
    assert!(
        matches!(done, Ok(Ok(Ok(_)))),
        "the publish waited for a blocking thread it was itself on"
    );
}

/// A multi-threaded runtime of one worker, as small as a runtime can be:
/// a worker that blocked without handing its tasks over would stop them.
fn one_worker() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_time()
        .build()
        .unwrap()
}

/// Publishes `body` to `key` of `store` from a task on `runtime`, with
/// `hook` run, on that task's thread only, between the staging file's
/// create and its lock; whether the hook ran (so whether the publish ran
/// on the task's own thread).
fn publish_with_hook_on_task_thread(
    runtime: &tokio::runtime::Runtime,
    store: &FsStore,
    key: &'static str,
    hook: impl FnMut(&Path) + Send + 'static,
) -> bool {
    let store = store.clone();
    let task = runtime.spawn(async move {
        let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = ran.clone();
        let mut hook = hook;
        super::durable::BEFORE_LOCK.set(Some(Box::new(move |path: &Path| {
            seen.store(true, std::sync::atomic::Ordering::SeqCst);
            hook(path);
        })));
        let body = Bytes::from_static(b"published from a task");
        let crc = crc64_nvme(&body);
        let none = PutCondition::IfNoneMatchAny;
        let published = store
            .put_whole(key, body, &none, &Metadata::new(), crc)
            .await;
        super::durable::BEFORE_LOCK.set(None);
        published.unwrap();
        ran.load(std::sync::atomic::Ordering::SeqCst)
    });
    runtime.block_on(task).unwrap()
}

/// Publishes `count` keys to `store` one after another, none overlapping.
fn calm_publishes(store: &FsStore, count: usize) {
    for n in 0..count {
        put(
            store,
            &format!("calm/{n}"),
            b"one at a time",
            &PutCondition::Unconditional,
        )
        .unwrap();
    }
}

#[test]
fn a_lone_publish_after_a_calm_spell_runs_on_its_tasks_thread_and_the_runtimes_other_tasks_go_on() {
    let runtime = one_worker();
    let store = FsStore::temporary(false);
    calm_publishes(&store, super::CALM_BEFORE_IN_PLACE);
    let (tell, told) = std::sync::mpsc::channel::<()>();
    // Queued behind the publishing task on the runtime's only worker: it
    // runs during the publish only if the worker handed its tasks over.
    let other = runtime.spawn(async move { tell.send(()).unwrap() });
    let ran = publish_with_hook_on_task_thread(&runtime, &store, "alone", move |_| {
        told.recv_timeout(std::time::Duration::from_secs(20))
            .expect("the runtime's other task ran while the publish blocked");
    });
    assert!(ran, "the publish ran on its task's own thread");
    runtime.block_on(other).unwrap();
}

#[test]
fn a_publish_runs_on_the_blocking_pool_while_another_change_is_under_way_and_until_a_calm_spell_follows()
 {
    let runtime = one_worker();
    let store = FsStore::temporary(false);
    assert!(
        !publish_with_hook_on_task_thread(&runtime, &store, "first", |_| {}),
        "a store's first changes go to the pool: nothing says yet it is alone"
    );
    calm_publishes(&store, super::CALM_BEFORE_IN_PLACE);
    let other = super::Changing::start(&store.changing);
    assert!(
        !publish_with_hook_on_task_thread(&runtime, &store, "contended", |_| {}),
        "handed to the pool, where groups form"
    );
    drop(other);
    calm_publishes(&store, super::CALM_BEFORE_IN_PLACE - 1);
    assert!(
        !publish_with_hook_on_task_thread(&runtime, &store, "not calm yet", |_| {}),
        "an overlap starts the calm spell again"
    );
    assert!(
        publish_with_hook_on_task_thread(&runtime, &store, "calm again", |_| {}),
        "in place again once the spell is over"
    );
}

#[test]
fn a_streamed_publish_joined_with_the_feeding_of_its_body_in_one_task_completes_on_a_multi_threaded_runtime()
 {
    let runtime = one_worker();
    let store = FsStore::temporary(true);
    // Calm, so that a change that may run in place would.
    calm_publishes(&store, super::CALM_BEFORE_IN_PLACE);
    let pieces: Vec<Bytes> = (0..16u8).map(|n| Bytes::from(vec![n; 4096])).collect();
    let whole: Vec<u8> = pieces.iter().flatten().copied().collect();
    let sums = crate::BodySums {
        crc64: crc64_nvme(&whole),
        content_md5: None,
    };
    let publisher = store.clone();
    let (done, published) = std::sync::mpsc::channel();
    runtime.spawn(async move {
        // A channel far narrower than the body: the store must read
        // while this very task feeds it, as the S3 endpoint does.
        let (sender, streamed) = crate::StreamedBody::channel(1);
        let feed = async move {
            for piece in pieces {
                sender.data(piece).await.unwrap();
            }
            sender.end(sums).await.unwrap();
        };
        let options = crate::PutOptions {
            condition: &PutCondition::IfNoneMatchAny,
            metadata: &Metadata::new(),
            crc64: 0,
            content_md5: None,
        };
        let key = crate::ObjectKey::new("fed").unwrap();
        let ((), published) = tokio::join!(
            feed,
            publisher.put_stream(&key, streamed, u64::MAX, options)
        );
        done.send(published).unwrap();
    });
    // Waited for off the runtime: a worker stuck in the publish could not
    // run a timer of the runtime's own.
    let published = published.recv_timeout(std::time::Duration::from_secs(20));
    runtime.shutdown_background();
    let meta = published
        .expect("the publish waited for a body its own task could not feed")
        .unwrap();
    assert_eq!(meta.size, whole.len() as u64);
    let (_, read) = block_on(store.get_whole("fed", None)).unwrap();
    assert_eq!(read, whole);
}
