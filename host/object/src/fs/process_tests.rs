//! Tests that need more than one process: conditional writers racing from
//! several processes, and a writer killed (SIGKILL) at random moments.
//!
//! Each test re-executes its own test binary as the child processes:
//! `current_exe() --exact <this test> --nocapture` with a variable set
//! to what the child should do. The test function sees the variable and
//! plays the child instead of the parent.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;

use super::layout::{KeyPath, STAGING};
use super::tests::{Outcome, XorShift, assert_one_winner_per_generation, block_on, open, race};
use super::versions::version_ids;
use crate::{MAX_LIST_PAGE, Metadata, ObjectError, ObjectStore, ObjectStoreExt, PutCondition};
use custodian_base::checksum::crc64_nvme;
use custodian_base::child_process::{ChildTests, stderr_of, wait_for};

/// This module's child processes, told their role in this variable.
const CHILDREN: ChildTests = ChildTests::new(module_path!(), "CUSTODIAN_FS_TEST_CHILD");

fn staging_is_empty(root: &Path) -> bool {
    std::fs::read_dir(root.join(STAGING))
        .unwrap()
        .next()
        .is_none()
}

// ── several processes racing ─────────────────────────────────────────

const RACERS: usize = 4;
/// Each racer reopens the store (running recovery while the others
/// write) between batches.
const RACE_BATCHES: usize = 5;
const RACE_ROUNDS: usize = 5;

#[test]
fn processes_racing_conditional_puts_get_one_winner_per_generation() {
    if let Some(role) = CHILDREN.role() {
        // role: <root>\t<versioned>\t<who>\t<go file>\t<results file>
        let [root, versioned, who, go, results] = role.split('\t').collect::<Vec<_>>()[..] else {
            panic!("bad role {role:?}")
        };
        let (root, versioned) = (Path::new(root), versioned == "true");
        drop(open(root, versioned));
        std::fs::write(format!("{results}.ready"), b"").unwrap();
        while !Path::new(go).exists() {
            std::thread::sleep(Duration::from_micros(200));
        }
        let mut lines = Vec::new();
        for _ in 0..RACE_BATCHES {
            // Recovery runs here while the other processes are writing:
            // it must not disturb them (a staging file it wrongly removed
            // would fail their publish).
            let store = open(root, versioned);
            lines.extend(
                race(&store, "k", who, RACE_ROUNDS)
                    .iter()
                    .map(Outcome::to_line),
            );
        }
        std::fs::write(results, lines.join("\n")).unwrap();
        return;
    }
    for versioned in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("store");
        let go = dir.path().join("go");
        let mut children = Vec::new();
        for who in 0..RACERS {
            let results = dir.path().join(format!("results-{who}"));
            let role = format!(
                "{}\t{versioned}\tprocess {who}\t{}\t{}",
                root.display(),
                go.display(),
                results.display()
            );
            let mut child = CHILDREN.spawn(
                "processes_racing_conditional_puts_get_one_winner_per_generation",
                &role,
            );
            wait_for(
                &PathBuf::from(format!("{}.ready", results.display())),
                &mut child,
            );
            children.push((child, results));
        }
        std::fs::write(&go, b"").unwrap();
        let mut outcomes = Vec::new();
        for (mut child, results) in children {
            let status = child.wait().unwrap();
            assert!(
                status.success(),
                "a racer failed: {}",
                stderr_of(&mut child)
            );
            let text = std::fs::read_to_string(results).unwrap();
            outcomes.extend(text.lines().map(Outcome::from_line));
        }
        assert_eq!(outcomes.len(), RACERS * RACE_BATCHES * RACE_ROUNDS);
        let won = outcomes.iter().filter(|o| **o != Outcome::Lost).count();
        eprintln!(
            "versioned={versioned}: {won} generations won, {} attempts lost",
            outcomes.len() - won
        );
        assert!(
            won < outcomes.len(),
            "the processes never collided; the test proves nothing"
        );
        let store = open(&root, versioned);
        let current = block_on(store.head("k")).unwrap().etag;
        let versions = versioned.then(|| {
            block_on(store.list_versions("k", None, MAX_LIST_PAGE))
                .unwrap()
                .items
        });
        assert_one_winner_per_generation(&outcomes, &current, versions.as_deref());
        assert!(staging_is_empty(&root));
    }
}

// ── a writer killed at random moments ────────────────────────────────

const KEY: &str = "big";
const KILLS_PER_MODE: usize = 32;

/// The body of generation `generation`, a few MiB (the length varies with
/// the generation): 4 KiB blocks of a fill derived from the generation,
/// each block starting with the generation and its own index, so a block
/// of another generation or from another offset never passes for this
/// one.
fn body_of(generation: u64) -> Vec<u8> {
    const BLOCK: usize = 4096;
    let len = (3 << 20) + (generation % 7) as usize * 4099;
    let mut rng = XorShift(generation.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let fill: Vec<u8> = (0..BLOCK / 8)
        .flat_map(|_| rng.next().to_le_bytes())
        .collect();
    let mut body = Vec::with_capacity(len + BLOCK);
    for index in 0..len.div_ceil(BLOCK) as u64 {
        let start = body.len();
        body.extend_from_slice(&fill);
        body[start..start + 8].copy_from_slice(&generation.to_le_bytes());
        body[start + 8..start + 16].copy_from_slice(&index.to_le_bytes());
    }
    body.truncate(len);
    body
}

/// The generation a body claims, after checking the body is exactly that
/// generation's.
fn generation_of(body: &[u8]) -> u64 {
    let generation = u64::from_le_bytes(body[..8].try_into().unwrap());
    assert!(
        body == body_of(generation),
        "a body that no generation has: torn or mixed"
    );
    generation
}

/// The child: publish generation after generation, each guarded on the
/// previous one, until killed. Every acknowledged generation is appended
/// to `acked` (no fsync: the kill is of the process, not the machine, so
/// the page cache survives it).
fn crash_child(role: &str) {
    let [root, versioned, ready, acked] = role.split('\t').collect::<Vec<_>>()[..] else {
        panic!("bad role {role:?}")
    };
    let store = open(Path::new(root), versioned == "true");
    let (mut generation, mut condition) = match block_on(store.get_whole(KEY, None)) {
        Ok((meta, body)) => (generation_of(&body), PutCondition::IfMatch(meta.etag)),
        Err(ObjectError::NotFound(_)) => (0, PutCondition::IfNoneMatchAny),
        Err(e) => panic!("reading the current generation: {e}"),
    };
    let mut acked = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(acked)
        .unwrap();
    // A generation published but not acknowledged before the last kill is
    // read back now: acknowledge it, or a kill before this child's first
    // acknowledgement would find the current generation two ahead of the
    // log.
    acked
        .write_all(format!("{generation}\n").as_bytes())
        .unwrap();
    std::fs::write(ready, b"").unwrap();
    loop {
        generation += 1;
        let body = Bytes::from(body_of(generation));
        let crc = crc64_nvme(&body);
        let meta = block_on(store.put_whole(KEY, body, &condition, &Metadata::new(), crc))
            .unwrap_or_else(|e| panic!("publishing generation {generation}: {e}"));
        // One write per line: a kill between a number and its newline
        // would glue it to the next child's first line.
        acked
            .write_all(format!("{generation}\n").as_bytes())
            .unwrap();
        condition = PutCondition::IfMatch(meta.etag);
    }
}

/// Where the kills landed, to show the test exercised the crash windows.
#[derive(Debug, Default)]
struct KillStats {
    /// Kills that left a staging file (mid-write or before the rename).
    mid_write: usize,
    /// Kills after a rename but before the writer acknowledged it.
    unacknowledged: usize,
}

/// After a kill: recovery leaves no staging file; the current object is a
/// whole generation no older than the last acknowledged one (and at most
/// one newer: the publish the kill interrupted after its rename); every
/// version reads back whole. Returns the current generation.
fn check_after_kill(
    root: &Path,
    versioned: bool,
    acked: &Path,
    at_least: u64,
    stats: &mut KillStats,
) -> u64 {
    if !staging_is_empty(root) {
        stats.mid_write += 1;
    }
    let store = open(root, versioned);
    assert!(staging_is_empty(root), "recovery leaves no staging file");
    let last_acked = std::fs::read_to_string(acked)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.parse::<u64>().ok())
        .max()
        .unwrap_or(0);
    let current = match block_on(store.get_whole(KEY, None)) {
        Ok((meta, body)) => {
            assert_eq!(meta.crc64, Some(crc64_nvme(&body)));
            generation_of(&body)
        }
        Err(ObjectError::NotFound(_)) => 0,
        Err(e) => panic!("reading after a kill: {e}"),
    };
    assert!(
        (last_acked..=last_acked + 1).contains(&current),
        "current generation {current}, last acknowledged {last_acked}"
    );
    if current == last_acked + 1 {
        stats.unacknowledged += 1;
    }
    assert!(
        current >= at_least,
        "the key went back from generation {at_least} to {current}"
    );
    let versions_dir = store
        .layout
        .versions_dir(&KeyPath::new(&crate::ObjectKey::new(KEY).unwrap()));
    if versioned {
        let versions = block_on(store.list_versions(KEY, None, MAX_LIST_PAGE))
            .unwrap()
            .items;
        let mut previous = u64::MAX;
        for version in &versions {
            let (_, body) = block_on(store.get_version(KEY, &version.version_id))
                .unwrap_or_else(|e| panic!("version {}: {e}", version.version_id));
            let generation = generation_of(&body);
            assert!(generation < previous, "versions out of order");
            previous = generation;
        }
        // Keep the disk bounded: only the current version carries over.
        for version in versions.iter().skip(1) {
            block_on(store.delete_version(KEY, &version.version_id)).unwrap();
        }
    } else {
        assert!(
            version_ids(&versions_dir).unwrap().len() <= 1,
            "recovery removed superseded versions"
        );
    }
    current
}

#[test]
fn a_writer_killed_at_random_moments_never_leaves_a_torn_object() {
    if let Some(role) = CHILDREN.role() {
        crash_child(&role);
        return;
    }
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("kill schedule seed: {seed}");
    let mut rng = XorShift(seed);
    let dir = tempfile::tempdir().unwrap();
    for versioned in [true, false] {
        let root = dir.path().join(format!("store-{versioned}"));
        let acked = dir.path().join(format!("acked-{versioned}"));
        let mut generation = 0;
        let mut stats = KillStats::default();
        for kill in 0..KILLS_PER_MODE {
            let ready = dir.path().join(format!("ready-{versioned}-{kill}"));
            let role = format!(
                "{}\t{versioned}\t{}\t{}",
                root.display(),
                ready.display(),
                acked.display()
            );
            let mut child = CHILDREN.spawn(
                "a_writer_killed_at_random_moments_never_leaves_a_torn_object",
                &role,
            );
            wait_for(&ready, &mut child);
            std::thread::sleep(Duration::from_micros(rng.below(150_000)));
            if let Some(status) = child.try_wait().unwrap() {
                panic!(
                    "the writer stopped by itself ({status}): {}",
                    stderr_of(&mut child)
                );
            }
            child.kill().unwrap();
            child.wait().unwrap();
            generation = check_after_kill(&root, versioned, &acked, generation, &mut stats);
        }
        eprintln!(
            "versioned={versioned}: {KILLS_PER_MODE} kills, {generation} generations, {stats:?}"
        );
        assert!(generation > 0, "the writer never published anything");
        assert!(
            stats.mid_write > 0,
            "no kill landed mid-publish; the test proves little"
        );
    }
}

// ── a group of publishes killed midway ───────────────────────────────

/// Threads publishing at once in the grouped-kill child: enough that
/// publishes wait for the arbiter together and commit as groups.
const GROUP_WRITERS: usize = 8;
const GROUP_KILLS: usize = 12;

/// The body of new key `key`: its own name, repeated, so a body of
/// another key or a torn one never passes.
fn group_body(key: &str) -> Bytes {
    Bytes::from(key.repeat(1 + key.len() % 7 * 100))
}

/// The grouped-kill child: GROUP_WRITERS threads create new keys (each
/// publish creates its key's directories, the syncs a group shares)
/// until killed, appending each acknowledged key to `acked`.
fn group_child(role: &str) {
    let [root, ready, acked, round] = role.split('\t').collect::<Vec<_>>()[..] else {
        panic!("bad role {role:?}")
    };
    let store = open(Path::new(root), true);
    let acked = std::sync::Mutex::new(
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(acked)
            .unwrap(),
    );
    std::fs::write(ready, b"").unwrap();
    std::thread::scope(|scope| {
        for writer in 0..GROUP_WRITERS {
            let (store, acked) = (&store, &acked);
            scope.spawn(move || {
                for n in 0.. {
                    let key = format!("g/{round}-{writer}-{n}");
                    let body = group_body(&key);
                    let crc = crc64_nvme(&body);
                    let condition = PutCondition::IfNoneMatchAny;
                    block_on(store.put_whole(&key, body, &condition, &Metadata::new(), crc))
                        .unwrap_or_else(|e| panic!("publishing {key}: {e}"));
                    acked
                        .lock()
                        .unwrap()
                        .write_all(format!("{key}\n").as_bytes())
                        .unwrap();
                }
            });
        }
    });
}

#[test]
fn writers_killed_in_the_middle_of_a_group_lose_no_acknowledged_publish() {
    if let Some(role) = CHILDREN.role() {
        group_child(&role);
        return;
    }
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    let acked = dir.path().join("acked");
    for kill in 0..GROUP_KILLS {
        let ready = dir.path().join(format!("ready-{kill}"));
        let role = format!(
            "{}\t{}\t{}\t{kill}",
            root.display(),
            ready.display(),
            acked.display()
        );
        let mut child = CHILDREN.spawn(
            "writers_killed_in_the_middle_of_a_group_lose_no_acknowledged_publish",
            &role,
        );
        wait_for(&ready, &mut child);
        std::thread::sleep(Duration::from_micros(20_000 + rng.below(200_000)));
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "the writers stopped by themselves ({status}): {}",
                stderr_of(&mut child)
            );
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let store = open(&root, true);
        assert!(staging_is_empty(&root), "recovery leaves no staging file");
        let acknowledged: Vec<String> = std::fs::read_to_string(&acked)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect();
        let mut listed = Vec::new();
        let mut cursor = None;
        loop {
            let page = block_on(store.list("g/", cursor.as_deref(), MAX_LIST_PAGE)).unwrap();
            listed.extend(page.items.into_iter().map(|item| item.key));
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        // Every key there, acknowledged or not, reads back whole.
        for key in &listed {
            let (meta, body) = block_on(store.get_whole(key, None))
                .unwrap_or_else(|e| panic!("reading {key} after kill {kill}: {e}"));
            assert_eq!(body, group_body(key), "{key} is whole");
            assert_eq!(meta.crc64, Some(crc64_nvme(&body)));
        }
        let listed: std::collections::BTreeSet<&str> = listed.iter().map(String::as_str).collect();
        for key in &acknowledged {
            assert!(
                listed.contains(key.as_str()),
                "{key} was acknowledged before kill {kill} and is gone"
            );
        }
        // At most one unacknowledged publish per writer was cut off
        // after its rename.
        assert!(
            listed.len() <= acknowledged.len() + GROUP_WRITERS * (kill + 1),
            "{} keys listed, {} acknowledged",
            listed.len(),
            acknowledged.len()
        );
    }
    let published = std::fs::read_to_string(&acked).unwrap().lines().count();
    eprintln!("{GROUP_KILLS} kills, {published} acknowledged publishes");
    assert!(
        published > GROUP_KILLS * GROUP_WRITERS,
        "the writers barely published; the test proves little"
    );
}
