//! The journal as a crash leaves it: files its records must bring back,
//! records a killed writer never renamed in, torn tails, and the rule
//! that nothing the journal holds is removed behind its back.
//!
//! A crash that loses what was never synced is simulated by removing or
//! damaging what the journal alone made durable (a version file, its
//! directory), and reopening the store.

use std::path::{Path, PathBuf};

use super::FsStore;
use super::journal::{MAX_BODY, SEGMENT_BYTES};
use super::layout::JOURNAL;
use super::tests::{block_on, create, entries, newest_file, open, put, synced_under};
use crate::{ObjectAdmin, ObjectError, ObjectStoreExt, PutCondition};

/// The segments in `root`'s journal.
fn segments(root: &Path) -> Vec<PathBuf> {
    entries(&root.join(JOURNAL))
}

fn body_of(store: &FsStore, key: &str) -> Result<Vec<u8>, ObjectError> {
    block_on(store.get_whole(key, None)).map(|(_, body)| body.to_vec())
}

#[test]
fn a_small_publish_is_answered_once_a_journal_record_holds_its_files_exact_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), true);
    create(&store, "a/b", b"hello");
    let file = newest_file(&store, "a/b");
    let segments = segments(dir.path());
    assert_eq!(segments.len(), 1, "{segments:?}");
    let journal = std::fs::read(&segments[0]).unwrap();
    let bytes = std::fs::read(&file).unwrap();
    let path = file
        .strip_prefix(dir.path())
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    // The record: magic, lengths and CRC, then the path and the bytes.
    let tail = [
        &(path.len() as u16).to_le_bytes()[..],
        path.as_bytes(),
        &bytes,
    ]
    .concat();
    assert!(
        journal.windows(tail.len()).any(|w| w == tail),
        "the record holds {path} and its bytes"
    );
}

#[test]
fn publishes_whose_files_a_crash_lost_or_tore_are_restored_when_the_store_is_opened_again() {
    for versioned in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path(), versioned);
        create(&store, "lost/whole", b"its directory went too");
        create(&store, "torn", b"its bytes never reached the disk");
        put(
            &store,
            "torn",
            b"a second version",
            &PutCondition::Unconditional,
        )
        .unwrap();
        let lost = newest_file(&store, "lost/whole");
        let torn = newest_file(&store, "torn");
        drop(store);
        std::fs::remove_dir_all(lost.parent().unwrap().parent().unwrap()).unwrap();
        let length = std::fs::metadata(&torn).unwrap().len();
        std::fs::write(&torn, vec![0; length as usize]).unwrap();

        let store = open(dir.path(), versioned);
        assert_eq!(
            body_of(&store, "lost/whole").unwrap(),
            b"its directory went too"
        );
        assert_eq!(body_of(&store, "torn").unwrap(), b"a second version");
        // Unversioned, the first version of `torn` was removed when the
        // second superseded it: it comes back, older, and recovery's
        // sweep removes it again.
        let restored = if versioned { 2 } else { 3 };
        let notes = block_on(store.bootstrap("")).unwrap().notes;
        assert!(
            notes
                .iter()
                .any(|n| n.contains(&format!("restored {restored} publish(es)"))),
            "{notes:?}"
        );
        assert!(
            segments(dir.path()).is_empty(),
            "opening settles the journal"
        );
    }
}

#[test]
fn a_deleted_object_does_not_come_back_when_the_store_is_opened_again() {
    for versioned in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path(), versioned);
        create(&store, "gone", b"deleted");
        create(&store, "kept", b"kept");
        block_on(store.delete("gone")).unwrap();
        drop(store);
        let store = open(dir.path(), versioned);
        assert!(matches!(
            body_of(&store, "gone"),
            Err(ObjectError::NotFound(_))
        ));
        assert_eq!(body_of(&store, "kept").unwrap(), b"kept");
    }
    // One version removed by id stays removed too.
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), true);
    let first = put(&store, "v", b"one", &PutCondition::Unconditional).unwrap();
    put(&store, "v", b"two", &PutCondition::Unconditional).unwrap();
    let id = first.version_id.unwrap();
    block_on(store.delete_version("v", &id)).unwrap();
    drop(store);
    let store = open(dir.path(), true);
    assert!(matches!(
        block_on(store.head_version("v", &id)),
        Err(ObjectError::NotFound(_))
    ));
}

#[test]
fn a_record_a_killed_writer_never_renamed_in_is_restored_before_the_next_decision() {
    let dir = tempfile::tempdir().unwrap();
    // Two stores on one root stand for two processes.
    let killed = open(dir.path(), true);
    let other = open(dir.path(), true);
    create(&killed, "contested", b"the writer's");
    // As if it was killed between its segment's sync and its rename.
    let file = newest_file(&killed, "contested");
    std::fs::remove_dir_all(file.parent().unwrap()).unwrap();

    let refused = put(
        &other,
        "contested",
        b"a second create",
        &PutCondition::IfNoneMatchAny,
    );
    assert!(
        matches!(refused, Err(ObjectError::PreconditionFailed(_))),
        "{refused:?}"
    );
    assert_eq!(body_of(&other, "contested").unwrap(), b"the writer's");

    // The other store settled the segment away; the first store's next
    // publish goes to a new one, not the removed file.
    create(&killed, "later", b"after the settle");
    let later = newest_file(&killed, "later");
    drop((killed, other));
    std::fs::remove_file(&later).unwrap();
    let store = open(dir.path(), true);
    assert_eq!(body_of(&store, "later").unwrap(), b"after the settle");
}

#[test]
fn a_torn_record_at_a_segments_end_is_ignored_and_the_ones_before_it_restored() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), true);
    create(&store, "whole", b"acknowledged");
    let file = newest_file(&store, "whole");
    drop(store);
    let segment = segments(dir.path()).pop().unwrap();
    let mut bytes = std::fs::read(&segment).unwrap();
    // The start of another record: magic and a length past the end.
    bytes.extend_from_slice(b"cjr1\xff\xff\x00\x00");
    std::fs::write(&segment, bytes).unwrap();
    std::fs::remove_file(&file).unwrap();

    let store = open(dir.path(), true);
    assert_eq!(body_of(&store, "whole").unwrap(), b"acknowledged");
    assert!(segments(dir.path()).is_empty());
}

#[test]
fn a_large_publish_first_syncs_the_directories_only_the_journal_made_durable() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), true);
    // Creates `a/` in `objects/` and `small%v/` in `a/`, neither synced.
    create(&store, "a/small", b"journaled");
    let objects = store.layout.objects.clone();
    assert!(synced_under(&objects).is_empty());
    // Lands in `small%v/`: a crash that lost `a/` would lose it with it.
    let large = vec![7; MAX_BODY + 1];
    put(&store, "a/small", &large, &PutCondition::Unconditional).unwrap();
    let synced = synced_under(&objects);
    for parent in [objects.clone(), objects.join("a")] {
        assert!(
            synced.contains(&parent),
            "{} in {synced:?}",
            parent.display()
        );
    }
    assert_eq!(segments(dir.path()).len(), 1, "the journal is not settled");
    assert_eq!(body_of(&store, "a/small").unwrap(), large);
}

#[test]
fn a_segment_is_settled_once_it_is_full() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), false);
    // Past one segment's worth through the journal.
    let body = vec![1; MAX_BODY];
    let count = SEGMENT_BYTES as usize / MAX_BODY + 8;
    for n in 0..count {
        create(&store, &format!("k/{n}"), &body);
    }
    let held: u64 = segments(dir.path())
        .iter()
        .map(|s| std::fs::metadata(s).unwrap().len())
        .sum();
    assert!(held < SEGMENT_BYTES, "the journal holds {held} bytes");
    assert!(held > 0, "publishes after the settle are journaled again");
    for n in [0, count - 1] {
        assert_eq!(body_of(&store, &format!("k/{n}")).unwrap(), body);
    }
}

#[test]
fn a_delete_marker_a_crash_lost_is_restored_so_the_key_stays_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), true);
    create(&store, "k", b"before the delete");
    block_on(store.delete("k")).unwrap();
    let marker = newest_file(&store, "k");
    drop(store);
    std::fs::remove_file(&marker).unwrap();
    let store = open(dir.path(), true);
    assert!(matches!(
        body_of(&store, "k"),
        Err(ObjectError::NotFound(_))
    ));
}

#[test]
fn a_removal_a_crash_undid_is_made_again_when_the_store_is_opened() {
    for versioned in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path(), versioned);
        let meta = put(&store, "k", b"removed", &PutCondition::Unconditional).unwrap();
        let file = newest_file(&store, "k");
        let bytes = std::fs::read(&file).unwrap();
        if versioned {
            let id = meta.version_id.unwrap();
            block_on(store.delete_version("k", &id)).unwrap();
        } else {
            block_on(store.delete("k")).unwrap();
        }
        assert!(!file.exists());
        drop(store);
        // The unlink and the pruning never reached the disk.
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, bytes).unwrap();
        let store = open(dir.path(), versioned);
        assert!(
            matches!(body_of(&store, "k"), Err(ObjectError::NotFound(_))),
            "versioned: {versioned}"
        );
        let notes = block_on(store.bootstrap("")).unwrap().notes;
        assert!(
            notes.iter().any(|n| n.contains("redid 1 removal(s)")),
            "{notes:?}"
        );
    }
}

#[test]
fn concurrent_publishes_and_removals_share_the_journal_and_each_gets_its_own_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), false);
    std::thread::scope(|scope| {
        for writer in 0..8 {
            let store = &store;
            scope.spawn(move || {
                for n in 0..20 {
                    let key = format!("w{writer}/{n}");
                    create(store, &key, key.as_bytes());
                    if n % 2 == 0 {
                        block_on(store.delete(&key)).unwrap();
                    }
                }
            });
        }
    });
    drop(store);
    let store = open(dir.path(), false);
    for writer in 0..8 {
        for n in 0..20 {
            let key = format!("w{writer}/{n}");
            let got = body_of(&store, &key);
            if n % 2 == 0 {
                assert!(matches!(got, Err(ObjectError::NotFound(_))), "{key}");
            } else {
                assert_eq!(got.unwrap(), key.as_bytes());
            }
        }
    }
}
