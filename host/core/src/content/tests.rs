//! Pushing trees into repositories, against real backends: what is
//! stored, what is indexed, and how a push converges.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;

use super::index::ObjectRow;
use super::push::push_bytes;
use super::*;
use custodian_base::checksum::crc64_nvme;
use custodian_base::clock::{Clock, FixedClock};
use custodian_kv::intercept::{Call, Hook, Intercepted};
use custodian_kv::memory::MemoryKv;
use custodian_kv::redb::RedbKv;
use custodian_kv::{Kv, KvError, Page};
use custodian_object::ObjectStore;
use custodian_object::ObjectStoreExt;
use custodian_object::fs::FsStore;
use custodian_object::memory::MemoryStore;

const NOW: u64 = 1_700_000_000_000;

fn clock() -> Arc<dyn Clock> {
    Arc::new(FixedClock::new(NOW))
}

fn repo(text: &str) -> RepoName {
    RepoName::parse(text).unwrap()
}

/// `a.txt`, and `d/` holding `x.txt`, `sub/y.txt` and an empty `empty/`.
fn sample_tree() -> (tempfile::TempDir, Vec<PathBuf>) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::write(root.join("a.txt"), "hello").unwrap();
    std::fs::create_dir_all(root.join("d/sub")).unwrap();
    std::fs::create_dir_all(root.join("d/empty")).unwrap();
    std::fs::write(root.join("d/x.txt"), "x").unwrap();
    std::fs::write(root.join("d/sub/y.txt"), "y").unwrap();
    let paths = vec![root.join("a.txt"), root.join("d")];
    (dir, paths)
}

async fn push_quietly(
    kv: &dyn Kv,
    serving: &dyn ObjectStore,
    repo: &RepoName,
    paths: &[PathBuf],
    now_ms: u64,
) -> Result<Vec<Entry>, ContentError> {
    push(kv, serving, repo, paths, now_ms, |_| {}).await
}

/// Every row of the content partition.
async fn rows(kv: &dyn Kv) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut all = Vec::new();
    let mut cursor: Option<Vec<u8>> = None;
    loop {
        let Page { entries, next } = kv
            .scan(&partition(), b"", None, cursor.as_deref(), 1000)
            .await
            .unwrap();
        all.extend(entries);
        match next {
            Some(next) => cursor = Some(next),
            None => return all,
        }
    }
}

/// Every content key in the serving store.
async fn stored(serving: &dyn ObjectStore) -> Vec<String> {
    let page = serving.list(OBJECT_KEY_PREFIX, None, 1000).await.unwrap();
    assert!(page.next.is_none());
    page.items.into_iter().map(|item| item.key).collect()
}

async fn read(serving: &dyn ObjectStore, id: &ObjectId) -> Vec<u8> {
    serving
        .get_whole(&object_key(id), None)
        .await
        .unwrap()
        .1
        .to_vec()
}

fn entry<'a>(entries: &'a [Entry], path: &str) -> &'a Entry {
    entries
        .iter()
        .find(|e| e.path == path)
        .unwrap_or_else(|| panic!("no entry {path}"))
}

/// Checks the durability invariant: every row names bytes the serving
/// store has, and every sealed pack's members are indexed.
async fn assert_no_row_without_bytes(kv: &dyn Kv, serving: &dyn ObjectStore) {
    let keys: std::collections::HashSet<String> = stored(serving).await.into_iter().collect();
    for (key, value) in rows(kv).await {
        let id = match key[0] {
            b'o' | b'h' | b's' => ObjectId::from_slice(&key[1..33]).unwrap(),
            b'r' => ObjectId::from_slice(&value[..32]).unwrap(),
            b'c' => {
                // A chunk-of row names the chunk and its manifest.
                let manifest = ObjectId::from_slice(&key[33..65]).unwrap();
                assert!(
                    keys.contains(&object_key(&manifest)),
                    "{key:?} names a manifest with missing bytes"
                );
                ObjectId::from_slice(&key[1..33]).unwrap()
            }
            other => panic!("an unexpected row tag {other}"),
        };
        assert!(
            keys.contains(&object_key(&id)),
            "{key:?} names missing bytes"
        );
        if key[0] == b's' {
            let pack = Pack::parse(&read(serving, &id).await).unwrap();
            for member in pack.members() {
                assert!(object_row(kv, &member.id).await.unwrap().is_some());
            }
        }
    }
}

#[test]
fn repository_names_are_namespace_slash_name_of_safe_bytes() {
    let name = repo("acme/site-1.0_x");
    assert_eq!((name.namespace(), name.name()), ("acme", "site-1.0_x"));
    assert_eq!(name.to_string(), "acme/site-1.0_x");
    let long = format!("a/{}", "x".repeat(65));
    for bad in [
        "",
        "acme",
        "acme/",
        "/site",
        "a/b/c",
        "Acme/site",
        "acme/.hidden",
        ".a/b",
        "a/b c",
        "a/b\0c",
        &long,
    ] {
        assert!(
            matches!(RepoName::parse(bad), Err(ContentError::InvalidArgument(_))),
            "{bad:?}"
        );
    }
    assert!(RepoName::parse(&format!("a/{}", "x".repeat(64))).is_ok());
}

#[test]
fn object_ids_print_and_parse_as_lowercase_hex() {
    let id = ObjectId::of(b"hello");
    assert_eq!(id.0, *blake3::hash(b"hello").as_bytes());
    let hex = id.to_hex();
    assert_eq!(hex.len(), 64);
    assert_eq!(hex, hex.to_lowercase());
    assert_eq!(ObjectId::from_hex(&hex).unwrap(), id);
    assert_eq!(ObjectId::from_hex(&hex.to_uppercase()).unwrap(), id);
    assert_eq!(object_key(&id), format!("content/{hex}"));
    for bad in ["", "00", &"g".repeat(64), &"é".repeat(32)] {
        assert!(ObjectId::from_hex(bad).is_err(), "{bad:?}");
    }
    assert!(matches!(
        ObjectId::from_slice(&[0; 31]),
        Err(ContentError::Corrupt(_))
    ));
}

#[tokio::test]
async fn pushing_a_tree_creates_objects_rows_holders_seals_and_entries() {
    let (kv, serving) = (MemoryKv::new(clock()), MemoryStore::versioned(clock()));
    let (_dir, paths) = sample_tree();
    let site = repo("acme/site");
    let entries = push_quietly(&kv, &serving, &site, &paths, NOW)
        .await
        .unwrap();

    let paths: Vec<_> = entries.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "a.txt",
            "d/",
            "d/empty/",
            "d/sub/",
            "d/sub/y.txt",
            "d/x.txt"
        ]
    );
    let a = entry(&entries, "a.txt");
    assert_eq!(
        (a.id, a.kind, a.size),
        (ObjectId::of(b"hello"), ObjectKind::Blob, 5)
    );
    assert_eq!(read(&serving, &a.id).await, b"hello");

    // `d`'s pack lists empty/, sub/ and x.txt, in name order.
    let d = entry(&entries, "d/");
    assert_eq!(d.kind, ObjectKind::Pack);
    let pack = Pack::parse(&read(&serving, &d.id).await).unwrap();
    let members: Vec<_> = pack.members().iter().map(|m| (m.id, m.kind)).collect();
    assert_eq!(
        members,
        [
            (entry(&entries, "d/empty/").id, ObjectKind::Pack),
            (entry(&entries, "d/sub/").id, ObjectKind::Pack),
            (ObjectId::of(b"x"), ObjectKind::Blob),
        ]
    );
    assert_eq!(d.size, 14 + 3 * 33);
    let sub = Pack::parse(&read(&serving, &entry(&entries, "d/sub/").id).await).unwrap();
    assert_eq!(sub.members().len(), 1);
    assert_eq!(sub.members()[0].id, ObjectId::of(b"y"));
    assert!(
        Pack::parse(&read(&serving, &entry(&entries, "d/empty/").id).await)
            .unwrap()
            .members()
            .is_empty()
    );

    for e in &entries {
        let bytes = read(&serving, &e.id).await;
        let row = object_row(&kv, &e.id)
            .await
            .unwrap()
            .expect("an object row");
        assert_eq!(
            row,
            ObjectRow {
                kind: e.kind,
                size: bytes.len() as u64,
                crc64: crc64_nvme(&bytes)
            }
        );
        let page = holders(&kv, &e.id, None, 10).await.unwrap();
        assert_eq!(page.holders, std::slice::from_ref(&site));
        let sealed = sealed_at(&kv, &e.id).await.unwrap();
        assert_eq!(
            sealed,
            (e.kind == ObjectKind::Pack).then_some(NOW),
            "{}",
            e.path
        );
    }
    let listed = super::entries(&kv, &site, None, 1000).await.unwrap();
    assert_eq!(listed.entries, entries);
    assert_eq!(listed.next, None);
    // Six distinct objects: hello, x, y, and three packs.
    assert_eq!(stored(&serving).await.len(), 6);
    assert_no_row_without_bytes(&kv, &serving).await;
}

#[tokio::test]
async fn pushing_the_same_content_to_two_repositories_stores_the_bytes_once_and_records_both_holders()
 {
    let (kv, serving) = (MemoryKv::new(clock()), MemoryStore::versioned(clock()));
    let (_dir, paths) = sample_tree();
    let first = push_quietly(&kv, &serving, &repo("acme/one"), &paths, NOW)
        .await
        .unwrap();
    let objects = stored(&serving).await;
    let mut uploads = 0;
    let second = push(&kv, &serving, &repo("zeta/two"), &paths, NOW + 1, |p| {
        uploads = p.uploaded;
    })
    .await
    .unwrap();
    assert_eq!(uploads, 0);
    assert_eq!(stored(&serving).await, objects);
    assert_eq!(first, second);
    for e in &first {
        let page = holders(&kv, &e.id, None, 10).await.unwrap();
        assert_eq!(
            page.holders,
            [repo("acme/one"), repo("zeta/two")],
            "{}",
            e.path
        );
        // Sealed once, by the first push.
        if e.kind == ObjectKind::Pack {
            assert_eq!(sealed_at(&kv, &e.id).await.unwrap(), Some(NOW));
        }
    }
}

#[tokio::test]
async fn a_re_push_uploads_nothing_and_leaves_the_index_as_it_was() {
    let (kv, serving) = (MemoryKv::new(clock()), MemoryStore::versioned(clock()));
    let (_dir, paths) = sample_tree();
    let site = repo("acme/site");
    let first = push_quietly(&kv, &serving, &site, &paths, NOW)
        .await
        .unwrap();
    let before = rows(&kv).await;
    let versions = serving.list_versions("", None, 1000).await.unwrap().items;
    let (mut uploaded, mut present) = (0, 0);
    let again = push(&kv, &serving, &site, &paths, NOW + 60_000, |p| {
        (uploaded, present) = (p.uploaded, p.present);
    })
    .await
    .unwrap();
    assert_eq!(again, first);
    assert_eq!((uploaded, present), (0, 6));
    assert_eq!(rows(&kv).await, before, "seal times and rows are kept");
    assert_eq!(
        serving.list_versions("", None, 1000).await.unwrap().items,
        versions,
        "no new version of any object"
    );
}

#[tokio::test]
async fn a_file_of_exactly_4_mib_is_one_blob_and_one_byte_more_is_a_manifest_of_two_chunks() {
    let (kv, serving) = (MemoryKv::new(clock()), MemoryStore::versioned(clock()));
    let dir = tempfile::tempdir().unwrap();
    let chunk = CHUNK_BYTES as usize;
    let bytes: Vec<u8> = (0..chunk + 1).map(|i| (i % 251) as u8).collect();
    let exact = dir.path().join("exact.bin");
    let over = dir.path().join("over.bin");
    std::fs::write(&exact, &bytes[..chunk]).unwrap();
    std::fs::write(&over, &bytes).unwrap();
    let site = repo("acme/big");
    let entries = push_quietly(&kv, &serving, &site, &[exact, over], NOW)
        .await
        .unwrap();

    let exact = entry(&entries, "exact.bin");
    assert_eq!(exact.kind, ObjectKind::Blob);
    assert_eq!(exact.size, CHUNK_BYTES);
    assert_eq!(exact.id, ObjectId::of(&bytes[..chunk]));

    let over = entry(&entries, "over.bin");
    assert_eq!(over.kind, ObjectKind::Manifest);
    assert_eq!(
        over.size,
        CHUNK_BYTES + 1,
        "the entry has the file's length"
    );
    let raw = read(&serving, &over.id).await;
    assert_eq!(u32::from_le_bytes(raw[18..22].try_into().unwrap()), 2);
    let manifest = Manifest::parse(&raw).unwrap();
    assert_eq!(manifest.file_len(), CHUNK_BYTES + 1);
    assert_eq!(manifest.file_crc64(), crc64_nvme(&bytes));
    assert_eq!(
        manifest.chunks(),
        [ObjectId::of(&bytes[..chunk]), ObjectId::of(&bytes[chunk..])]
    );
    // The first chunk is the 4 MiB blob pushed as `exact.bin`: stored once.
    assert_eq!(read(&serving, &manifest.chunks()[1]).await, &bytes[chunk..]);
    assert_eq!(stored(&serving).await.len(), 3);
    let row = object_row(&kv, &over.id).await.unwrap().unwrap();
    assert_eq!(
        (row.kind, row.size),
        (ObjectKind::Manifest, raw.len() as u64)
    );
    for chunk in manifest.chunks() {
        assert_eq!(
            object_row(&kv, chunk).await.unwrap().unwrap().kind,
            ObjectKind::Blob
        );
        assert_eq!(
            holders(&kv, chunk, None, 10).await.unwrap().holders,
            std::slice::from_ref(&site)
        );
    }
    assert_no_row_without_bytes(&kv, &serving).await;
}

#[tokio::test]
async fn each_chunk_of_a_manifest_has_a_row_naming_every_manifest_that_lists_it() {
    let (kv, serving) = (MemoryKv::new(clock()), MemoryStore::versioned(clock()));
    let chunk = CHUNK_BYTES as usize;
    let shared: Vec<u8> = (0..chunk).map(|i| (i % 253) as u8).collect();
    let first = [shared.clone(), vec![1; 10]].concat();
    let second = [shared.clone(), vec![2; 10]].concat();
    let site = repo("acme/big");
    let a = push_bytes(&kv, &serving, &site, "a", first.into())
        .await
        .unwrap();
    let b = push_bytes(&kv, &serving, &site, "b", second.into())
        .await
        .unwrap();

    let listing = |chunk: ObjectId| {
        let kv = &kv;
        async move {
            let prefix = custodian_contract::content::index::chunk_of_prefix(chunk.as_bytes());
            let page = kv
                .scan(&partition(), &prefix, None, None, 10)
                .await
                .unwrap();
            page.entries
                .into_iter()
                .filter(|(key, _)| key.starts_with(&prefix))
                .map(|(key, value)| {
                    assert!(value.is_empty());
                    ObjectId::from_slice(&key[prefix.len()..]).unwrap()
                })
                .collect::<Vec<_>>()
        }
    };
    let mut both = vec![a.id, b.id];
    both.sort();
    assert_eq!(
        listing(ObjectId::of(&shared)).await,
        both,
        "the shared chunk"
    );
    let own = ObjectId::of(&[1; 10]);
    assert_eq!(listing(own).await, vec![a.id], "a chunk only one file has");
    assert_eq!(
        listing(a.id).await,
        Vec::<ObjectId>::new(),
        "a manifest is no chunk"
    );
    assert_no_row_without_bytes(&kv, &serving).await;
}

/// Fails every commit after the first `commits` ones, as if the process
/// died there.
struct Dying {
    commits: AtomicUsize,
}

#[async_trait]
impl Hook for Dying {
    async fn before(&self, _: &dyn Kv, call: Call<'_>) -> Result<(), KvError> {
        if let Call::Apply(_) = call {
            self.commits
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .map_err(|_| KvError::Unavailable("the process died".into()))?;
        }
        Ok(())
    }
}

/// Files a takedown of `object` (its denial row, as a takedown plugin
/// writes it) just before the first batch that would commit an index row
/// naming it: a filing that lands between a push's check and its commit.
struct DeniedMeanwhile {
    object: ObjectId,
    filed: AtomicUsize,
}

#[async_trait]
impl Hook for DeniedMeanwhile {
    async fn before(&self, inner: &dyn Kv, call: Call<'_>) -> Result<(), KvError> {
        let Call::Apply(batch) = call else {
            return Ok(());
        };
        let names_it = batch.writes.iter().any(|write| match write {
            custodian_kv::Write::Put { key, value, .. } => {
                key.ends_with(&self.object.0) || value.starts_with(&self.object.0)
            }
            custodian_kv::Write::Delete { .. } => false,
        });
        if names_it && self.filed.fetch_add(1, Ordering::SeqCst) == 0 {
            let denial = custodian_contract::denial::Denial {
                request: [9; 32],
                since_ms: NOW,
            };
            let row = custodian_kv::Batch {
                preconditions: Vec::new(),
                writes: vec![custodian_kv::Write::Put {
                    partition: denial::partition(),
                    key: custodian_contract::denial::key(&self.object.0),
                    value: custodian_contract::denial::encode(&[denial]),
                }],
            };
            inner.apply(&row).await?;
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_takedown_filed_between_a_pushs_check_and_its_commit_fails_the_commit_and_enters_nothing()
{
    let bytes = b"taken down while it was pushed".to_vec();
    let object = ObjectId::of(&bytes);
    let kv = Intercepted {
        inner: Arc::new(MemoryKv::new(clock())),
        hook: DeniedMeanwhile {
            object,
            filed: AtomicUsize::new(0),
        },
    };
    let serving = MemoryStore::versioned(clock());
    let site = repo("acme/late");
    let pushed = push_bytes(&kv, &serving, &site, "f", bytes.into()).await;

    match pushed {
        Err(ContentError::TakenDown(withheld)) => {
            assert_eq!(withheld.object, object);
            assert_eq!(withheld.request, ObjectId([9; 32]));
        }
        other => panic!("expected taken down, got {other:?}"),
    }
    assert_eq!(kv.filed.load(Ordering::SeqCst), 1, "the filing landed");
    assert!(
        read::entry(&kv, &site, "f").await.unwrap().is_none(),
        "no entry"
    );
    assert!(
        object_row(&kv, &object).await.unwrap().is_none(),
        "no object row"
    );
}

/// Records, for every committed batch, the holder rows it writes whose
/// object it does not guard against a denial.
struct HolderGuards {
    unguarded: std::sync::Mutex<Vec<Vec<u8>>>,
    holder_rows: AtomicUsize,
}

#[async_trait]
impl Hook for HolderGuards {
    async fn before(&self, _: &dyn Kv, call: Call<'_>) -> Result<(), KvError> {
        let Call::Apply(batch) = call else {
            return Ok(());
        };
        let guarded: Vec<&[u8]> = batch
            .preconditions
            .iter()
            .filter_map(|p| match p {
                custodian_kv::Precondition::Absent { partition, key }
                    if *partition == denial::partition() =>
                {
                    key.get(1..)
                }
                _ => None,
            })
            .collect();
        for write in &batch.writes {
            if let custodian_kv::Write::Put { key, .. } = write
                && key.first() == Some(&index::HOLDER_TAG)
            {
                self.holder_rows.fetch_add(1, Ordering::SeqCst);
                let object = &key[1..33];
                if !guarded.contains(&object) {
                    self.unguarded.lock().unwrap().push(key.clone());
                }
            }
        }
        Ok(())
    }
}

#[tokio::test]
async fn every_holder_row_commits_guarded_on_its_object_not_being_taken_down() {
    // A chunk's rows are the ones no entry names (only its manifest is
    // entered), so a batch boundary between a chunk's object row and its
    // holder row leaves the holder row with no other guard. Small files
    // before a chunked one move where the boundaries fall; across these
    // shapes some boundary splits a chunk's rows.
    for small in 100..=106 {
        let (dir, mut paths) = wide_tree(small);
        for i in 0..2u8 {
            let big = dir.path().join(format!("big{i}.bin"));
            let mut bytes = vec![i; 4 * 1024 * 1024 + 1];
            bytes[0] = small as u8;
            std::fs::write(&big, bytes).unwrap();
            paths.push(big);
        }
        let kv = Intercepted {
            inner: Arc::new(MemoryKv::new(clock())),
            hook: HolderGuards {
                unguarded: std::sync::Mutex::new(Vec::new()),
                holder_rows: AtomicUsize::new(0),
            },
        };
        let serving = MemoryStore::versioned(clock());
        for site in ["acme/wide", "other/fork"] {
            push_quietly(&kv, &serving, &repo(site), &paths, NOW)
                .await
                .unwrap();
        }
        // The small files and their pack, each big file's manifest and
        // two chunks, in two repositories.
        assert_eq!(kv.holder_rows.load(Ordering::SeqCst), 2 * (small + 1 + 6));
        let unguarded = kv.unguarded.lock().unwrap();
        assert!(
            unguarded.is_empty(),
            "after {small} small files: {} holder rows committed without their denial guard",
            unguarded.len()
        );
    }
}

/// A directory of `count` small files, enough for several batches.
fn wide_tree(count: usize) -> (tempfile::TempDir, Vec<PathBuf>) {
    let dir = tempfile::tempdir().unwrap();
    let wide = dir.path().join("wide");
    std::fs::create_dir(&wide).unwrap();
    for i in 0..count {
        std::fs::write(wide.join(format!("f{i:03}")), format!("file {i}")).unwrap();
    }
    (dir, vec![wide])
}

#[tokio::test]
async fn a_push_interrupted_midway_leaves_no_row_without_its_bytes_and_a_re_push_converges() {
    let (_dir, paths) = wide_tree(120);
    let site = repo("acme/wide");
    // The reference: one clean push.
    let (clean_kv, clean_serving) = (MemoryKv::new(clock()), MemoryStore::versioned(clock()));
    let clean = push_quietly(&clean_kv, &clean_serving, &site, &paths, NOW)
        .await
        .unwrap();
    let clean_rows = rows(&clean_kv).await;
    // 120 files of five operations each (two guarded rows and an entry)
    // take several batches.
    assert!(clean_rows.len() > 3 * 96 / 2);

    for survived in [0, 1, 3] {
        let kv = Intercepted {
            inner: Arc::new(MemoryKv::new(clock())),
            hook: Dying {
                commits: AtomicUsize::new(survived),
            },
        };
        let serving = MemoryStore::versioned(clock());
        let died = push_quietly(&kv, &serving, &site, &paths, NOW).await;
        assert!(
            matches!(died, Err(ContentError::Index(KvError::Unavailable(_)))),
            "{died:?}"
        );
        assert_no_row_without_bytes(&kv, &serving).await;
        assert!(
            super::entries(&kv, &site, None, 1000)
                .await
                .unwrap()
                .entries
                .iter()
                .all(|e| e.kind != ObjectKind::Pack),
            "the directory is not entered before its pack is sealed"
        );

        kv.commits.store(usize::MAX, Ordering::SeqCst);
        let again = push_quietly(&kv, &serving, &site, &paths, NOW)
            .await
            .unwrap();
        assert_eq!(again, clean);
        assert_eq!(
            rows(&kv).await,
            clean_rows,
            "after dying at commit {survived}"
        );
        assert_eq!(stored(&serving).await, stored(&clean_serving).await);
    }
}

#[tokio::test]
async fn bad_input_is_refused_before_anything_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir(root.join("control")).unwrap();
    std::fs::write(root.join("control/fine.txt"), "fine").unwrap();
    std::fs::write(root.join("control/bad\nname"), "bad").unwrap();
    std::fs::create_dir(root.join("linked")).unwrap();
    std::fs::write(root.join("linked/fine.txt"), "fine").unwrap();
    std::os::unix::fs::symlink(root.join("control"), root.join("linked/loop")).unwrap();
    std::fs::create_dir_all(root.join("one")).unwrap();
    std::fs::create_dir_all(root.join("two/one")).unwrap();
    let cases: [(&str, Vec<PathBuf>); 5] = [
        ("a control character", vec![root.join("control")]),
        ("a link inside a directory", vec![root.join("linked")]),
        (
            "two paths with one name",
            vec![root.join("one"), root.join("two/one")],
        ),
        ("nothing", vec![]),
        ("the root", vec![PathBuf::from("/")]),
    ];
    let (kv, serving) = (MemoryKv::new(clock()), MemoryStore::versioned(clock()));
    for (what, paths) in cases {
        let got = push_quietly(&kv, &serving, &repo("acme/bad"), &paths, NOW).await;
        assert!(
            matches!(got, Err(ContentError::InvalidArgument(_))),
            "{what}: {got:?}"
        );
        assert!(stored(&serving).await.is_empty(), "{what}");
        assert!(rows(&kv).await.is_empty(), "{what}");
    }
    let missing = push_quietly(&kv, &serving, &repo("acme/bad"), &[root.join("nope")], NOW).await;
    assert!(
        matches!(missing, Err(ContentError::Read { .. })),
        "{missing:?}"
    );
}

#[tokio::test]
async fn a_push_to_the_durable_backends_is_there_after_reopening_them() {
    let data = tempfile::tempdir().unwrap();
    let (_dir, paths) = sample_tree();
    let site = repo("acme/site");
    let kv_path = data.path().join("kv.redb");
    let store_path: &Path = &data.path().join("serving");
    let pushed = {
        let kv = RedbKv::open(&kv_path, clock()).unwrap();
        let serving = FsStore::open(store_path, clock(), true).unwrap();
        push_quietly(&kv, &serving, &site, &paths, NOW)
            .await
            .unwrap()
    };
    let kv = RedbKv::open(&kv_path, clock()).unwrap();
    let serving = FsStore::open(store_path, clock(), true).unwrap();
    assert_eq!(
        super::entries(&kv, &site, None, 1000)
            .await
            .unwrap()
            .entries,
        pushed
    );
    assert_no_row_without_bytes(&kv, &serving).await;
    let again = push_quietly(&kv, &serving, &site, &paths, NOW + 1)
        .await
        .unwrap();
    assert_eq!(again, pushed);
}

#[tokio::test]
async fn a_path_given_is_entered_under_its_own_name_even_as_a_link_or_dot() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir(root.join("project")).unwrap();
    std::fs::write(root.join("project/real.txt"), "real").unwrap();
    std::os::unix::fs::symlink(root.join("project/real.txt"), root.join("alias.txt")).unwrap();
    let (kv, serving) = (MemoryKv::new(clock()), MemoryStore::versioned(clock()));
    let paths = [root.join("alias.txt"), root.join("project/.")];
    let entries = push_quietly(&kv, &serving, &repo("acme/names"), &paths, NOW)
        .await
        .unwrap();
    let paths: Vec<_> = entries.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["alias.txt", "project/", "project/real.txt"]);
    assert_eq!(entries[0].id, ObjectId::of(b"real"));
}

#[tokio::test]
async fn pushing_bytes_makes_the_same_objects_rows_and_entry_as_pushing_the_file_from_disk() {
    let chunk = CHUNK_BYTES as usize;
    let small = b"hello".to_vec();
    let big: Vec<u8> = (0..2 * chunk + 5).map(|i| (i % 253) as u8).collect();
    let dir = tempfile::tempdir().unwrap();
    let site = repo("acme/site");
    for (name, bytes, kind) in [
        ("small.txt", &small, ObjectKind::Blob),
        ("big.bin", &big, ObjectKind::Manifest),
        ("empty", &Vec::new(), ObjectKind::Blob),
    ] {
        let file = dir.path().join(name);
        std::fs::write(&file, bytes).unwrap();
        let (disk_kv, disk_store) = (MemoryKv::new(clock()), MemoryStore::versioned(clock()));
        let from_disk = push_quietly(&disk_kv, &disk_store, &site, &[file], NOW)
            .await
            .unwrap();
        let (kv, serving) = (MemoryKv::new(clock()), MemoryStore::versioned(clock()));
        let entry = push_bytes(&kv, &serving, &site, name, bytes.clone().into())
            .await
            .unwrap();

        assert_eq!(from_disk, std::slice::from_ref(&entry), "{name}");
        assert_eq!(
            (entry.kind, entry.size),
            (kind, bytes.len() as u64),
            "{name}"
        );
        assert_eq!(stored(&serving).await, stored(&disk_store).await, "{name}");
        assert_eq!(rows(&kv).await, rows(&disk_kv).await, "{name}");
        assert_no_row_without_bytes(&kv, &serving).await;
    }
    let (kv, serving) = (MemoryKv::new(clock()), MemoryStore::versioned(clock()));
    let entry = push_bytes(&kv, &serving, &site, "big.bin", big.clone().into())
        .await
        .unwrap();
    let manifest = Manifest::parse(&read(&serving, &entry.id).await).unwrap();
    assert_eq!(manifest.chunks().len(), 3);
    assert_eq!(manifest.file_crc64(), crc64_nvme(&big));
}

#[tokio::test]
async fn pushing_bytes_again_or_under_a_nested_path_uploads_nothing_new_and_adds_the_entry() {
    let (kv, serving) = (MemoryKv::new(clock()), MemoryStore::versioned(clock()));
    let site = repo("acme/site");
    let first = push_bytes(&kv, &serving, &site, "a.txt", "same".into())
        .await
        .unwrap();
    let versions = serving.list_versions("", None, 1000).await.unwrap().items;
    let nested = push_bytes(&kv, &serving, &site, "docs/deep/b.txt", "same".into())
        .await
        .unwrap();
    assert_eq!(nested.id, first.id);
    assert_eq!(
        serving.list_versions("", None, 1000).await.unwrap().items,
        versions,
        "the bytes are stored once"
    );
    let listed = super::entries(&kv, &site, None, 1000).await.unwrap();
    let paths: Vec<_> = listed.entries.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["a.txt", "docs/deep/b.txt"], "no pack for `docs/`");
}

#[tokio::test]
async fn pushing_bytes_to_a_directory_or_a_malformed_path_is_refused_before_anything_is_stored() {
    let (kv, serving) = (MemoryKv::new(clock()), MemoryStore::versioned(clock()));
    for path in ["d/", "", "a//b", "../x", "a/./b", "bad\nname"] {
        let got = push_bytes(&kv, &serving, &repo("acme/bad"), path, "x".into()).await;
        assert!(
            matches!(got, Err(ContentError::InvalidArgument(_))),
            "{path:?}: {got:?}"
        );
    }
    assert!(stored(&serving).await.is_empty());
    assert!(rows(&kv).await.is_empty());
}

#[test]
fn each_content_error_says_its_kind_the_index_and_store_by_their_own() {
    let cases = [
        (
            ContentError::InvalidArgument("x".into()),
            ErrorKind::InvalidArgument,
        ),
        (ContentError::Corrupt("x".into()), ErrorKind::Corrupt),
        (ContentError::Conflict("x".into()), ErrorKind::Conflict),
        (
            ContentError::Read {
                path: "f".into(),
                source: std::io::Error::other("x"),
            },
            ErrorKind::Unavailable,
        ),
        (
            ContentError::Index(KvError::Unavailable("x".into())),
            ErrorKind::Unavailable,
        ),
        (
            ContentError::Index(KvError::InvalidArgument("x".into())),
            ErrorKind::Internal,
        ),
        (
            ContentError::Store(custodian_object::ObjectError::NoSuchUpload("u".into())),
            ErrorKind::NotFound,
        ),
    ];
    for (error, kind) in cases {
        assert_eq!(error.kind(), kind, "{error:?}");
    }
}
