//! The locks this policy writes for the host to enforce: the request's
//! lock with the filing, the hold with the legal hold, purging only once
//! retain-until has passed with no hold, each piece's lock with its intent
//! before its bytes; every commit of a request's life checked against the
//! host's lock rules (the support's guard refuses any other).

mod support;

use custodian_plugin_takedown::Policy;
use custodian_sdk::contract::lock::{self as locks, RequestLock};
use custodian_sdk::kv::Precondition;
use custodian_sdk::retention::{Assessment, Item, Verdict};
use custodian_sdk::takedown::TakedownSteps;
use custodian_sdk::{Batch, Error};
use support::*;

const REPO: &str = "acme/widgets";

/// The lock a request filed at [`T0`] starts with.
fn filed_lock() -> RequestLock {
    RequestLock {
        created_ms: T0,
        retain_until_ms: T0 + RETENTION_MS,
        hold: false,
        purging: false,
    }
}

/// A request over one blob of `len` bytes, driven to `retain`.
fn retained(len: usize) -> Driver {
    let a = blob(&bytes(1, len));
    hold(&a, REPO);
    let mut driver = file(actions(request_id(1), REPO, &[a]));
    driver.until("retain", 40);
    driver
}

/// Writes request `id`'s lock row as the host's rules allow any writer to.
fn write_lock(id: &Id, lock: RequestLock) {
    Batch::new()
        .put(
            locks::PARTITION,
            locks::request_key(id),
            lock.encode().to_vec(),
        )
        .apply()
        .expect("the host's rules allow it");
}

/// Removes every lock row past the host, as if they had never been
/// written (a request filed before locks existed).
fn forget_locks() {
    for (key, _) in custodian_sdk::testing::partition(locks::PARTITION) {
        behind_the_host(|| Batch::new().delete(locks::PARTITION, key).apply()).unwrap();
    }
}

/// Every piece this request recorded, as keys in `preserved`.
fn piece_keys(driver: &Driver) -> Vec<String> {
    driver
        .rows("piece")
        .iter()
        .map(|(_, value)| {
            let piece: serde_json::Value = serde_json::from_slice(value).unwrap();
            piece["key"].as_str().unwrap().to_owned()
        })
        .collect()
}

#[test]
fn filing_writes_the_requests_lock_guarded_on_its_absence() {
    setup();
    let a = blob(&bytes(1, 10));
    hold(&a, REPO);
    let id = request_id(1);
    let commit = Policy::plan_create(actions(id, REPO, &[a]), T0).unwrap();
    assert!(commit.batch.preconditions.iter().any(|p| matches!(
        p,
        Precondition::Absent(r) if r.partition == locks::PARTITION && r.key == locks::request_key(&id)
    )));
    apply(&commit);
    assert_eq!(request_lock(&id), Some(filed_lock()));
    let status = Policy::status(id.to_vec()).unwrap();
    assert_eq!(status.retain_until_ms, filed_lock().retain_until_ms);
}

#[test]
fn filing_is_refused_over_a_lock_its_id_left_behind() {
    setup();
    let a = blob(&bytes(1, 10));
    hold(&a, REPO);
    let id = request_id(1);
    write_lock(&id, filed_lock());
    assert!(matches!(
        Policy::plan_create(actions(id, REPO, &[a]), T0),
        Err(Error::PreconditionFailed(_))
    ));
}

#[test]
fn a_legal_hold_and_its_release_are_carried_by_the_lock() {
    setup();
    let mut driver = retained(10);
    driver.hold(true).unwrap();
    let held = RequestLock {
        hold: true,
        ..filed_lock()
    };
    assert_eq!(request_lock(&driver.id), Some(held));
    driver.step();
    assert_eq!(request_lock(&driver.id), Some(held), "steps keep the hold");
    driver.hold(false).unwrap();
    assert_eq!(request_lock(&driver.id), Some(filed_lock()));
}

#[test]
fn a_hold_is_refused_once_the_lock_is_purging() {
    setup();
    let mut driver = retained(10);
    // Set past the host (its rules would not let it purge before
    // retain-until): the lock is what the host enforces, so it decides.
    let purging = RequestLock {
        purging: true,
        ..filed_lock()
    };
    behind_the_host(|| {
        Batch::new()
            .put(
                locks::PARTITION,
                locks::request_key(&driver.id),
                purging.encode().to_vec(),
            )
            .apply()
    })
    .unwrap();
    assert!(matches!(
        driver.hold(true),
        Err(Error::PreconditionFailed(_))
    ));
}

#[test]
fn every_piece_is_locked_to_its_request_with_its_intent_before_its_bytes() {
    setup();
    let a = blob(&bytes(1, 3 * MIB + 5));
    let b = blob(&bytes(2, 100));
    hold(&a, REPO);
    hold(&b, REPO);
    // The support's host fails any write to `preserved` whose key is not
    // locked yet.
    let mut driver = file(actions(request_id(1), REPO, &[a, b]));
    driver.until("retain", 40);
    let keys = piece_keys(&driver);
    assert_eq!(keys.len(), 5);
    assert_eq!(driver.preserved_keys().len(), 5);
    for key in &keys {
        assert_eq!(piece_lock(key), Some(driver.id), "{key}");
    }
    // While retained, nobody deletes or overwrites a locked piece.
    assert!(matches!(
        custodian_sdk::objects::delete("preserved", &keys[0]),
        Err(Error::AccessDenied(_))
    ));
    assert_eq!(driver.preserved_keys().len(), 5);
}

/// A retention plugin swapped in that lets everything go at once.
fn eager(item: Item, now: u64) -> Result<Assessment, Error> {
    let mut answer = bundled_assess(item, now)?;
    if !item.hold {
        answer.may_purge = Verdict::Allow;
        answer.may_delete = Verdict::Allow;
    }
    Ok(answer)
}

#[test]
fn a_retention_policy_allowing_a_purge_early_cannot_begin_one_before_the_locks_retain_until() {
    setup();
    swap_retention(eager);
    let mut driver = retained(10);
    for _ in 0..3 {
        driver.step();
    }
    assert!(driver.now < T0 + RETENTION_MS);
    assert_eq!(driver.status().phase, "retain");
    assert_eq!(request_lock(&driver.id), Some(filed_lock()));
    assert!(
        !driver
            .event_names()
            .contains(&"PreservationPurgeStarted".to_owned())
    );

    driver.now = T0 + RETENTION_MS;
    assert_eq!(driver.step()[0].event, "PreservationPurgeStarted");
    assert!(request_lock(&driver.id).unwrap().purging);
    assert!(refusals().is_empty(), "{:?}", refusals());
}

#[test]
fn purging_begins_only_after_retain_until_with_no_hold() {
    setup();
    let mut driver = retained(10);
    driver.hold(true).unwrap();
    driver.now = T0 + RETENTION_MS;
    driver.step();
    driver.step();
    assert_eq!(driver.status().phase, "retain");
    assert!(!request_lock(&driver.id).unwrap().purging);
    driver.hold(false).unwrap();
    assert_eq!(driver.step()[0].event, "PreservationPurgeStarted");
    let lock = request_lock(&driver.id).unwrap();
    assert!(lock.purging && !lock.hold);
    assert!(lock.retain_until_ms <= driver.now);
}

#[test]
fn a_lock_extended_past_the_states_retain_until_keeps_the_purge_waiting_and_is_never_shortened() {
    setup();
    let mut driver = retained(10);
    let extended = RequestLock {
        retain_until_ms: T0 + RETENTION_MS + 3 * HOUR,
        ..filed_lock()
    };
    write_lock(&driver.id, extended);
    driver.now = T0 + RETENTION_MS;
    for _ in 0..2 {
        assert_eq!(driver.step()[0].event, "PreservationCheckpoint");
    }
    assert_eq!(driver.status().phase, "retain");
    assert_eq!(request_lock(&driver.id), Some(extended));

    driver.now = extended.retain_until_ms;
    assert_eq!(driver.step()[0].event, "PreservationPurgeStarted");
    assert_eq!(
        request_lock(&driver.id),
        Some(RequestLock {
            purging: true,
            ..extended
        })
    );
    driver.until("purged", 5);
    assert!(driver.preserved_keys().is_empty());
}

#[test]
fn a_hold_left_on_the_lock_without_one_in_the_state_is_cleared_before_a_purge_begins() {
    setup();
    let mut driver = retained(10);
    write_lock(
        &driver.id,
        RequestLock {
            hold: true,
            ..filed_lock()
        },
    );
    driver.now = T0 + RETENTION_MS;
    assert_eq!(driver.step()[0].event, "PreservationCheckpoint");
    assert_eq!(request_lock(&driver.id), Some(filed_lock()));
    assert_eq!(driver.step()[0].event, "PreservationPurgeStarted");
}

#[test]
fn a_piece_delete_the_host_refuses_is_recorded_and_the_pass_still_completes() {
    setup();
    keep_released_pieces(Some("kept for an audit"));
    let mut driver = retained(MIB + 1);
    driver.now = T0 + RETENTION_MS;
    assert_eq!(driver.step()[0].event, "PreservationPurgeStarted");
    let events = driver.step();
    let visited: Vec<_> = events
        .iter()
        .filter(|e| e.event == "PreservationPiecePurged")
        .collect();
    assert_eq!(visited.len(), 2);
    for event in visited {
        let detail = event.detail.as_deref().unwrap();
        assert!(detail.starts_with("refused:"), "{detail}");
        assert!(detail.contains("kept for an audit"), "{detail}");
    }
    assert_eq!(
        events.last().unwrap().event,
        "PreservationPurgeComplete",
        "the pass goes on"
    );
    let status = driver.status();
    assert_eq!(status.phase, "purged");
    assert_eq!(status.counts.purged_pieces, 0);
    assert!(status.last_error.unwrap().contains("access denied"));
    assert_eq!(driver.preserved_keys().len(), 2, "the host kept them");

    // The host lets them go: the hourly re-sweep deletes them.
    keep_released_pieces(None);
    assert_eq!(driver.step()[0].event, "PreservationPurgeStarted");
    driver.until("purged", 3);
    assert!(driver.preserved_keys().is_empty());
    assert_eq!(driver.status().counts.purged_pieces, 2);
}

#[test]
fn a_request_filed_before_locks_gets_its_lock_in_a_step_of_its_own_before_any_piece() {
    setup();
    let a = blob(&bytes(1, 2 * MIB));
    hold(&a, REPO);
    let mut driver = file(actions(request_id(1), REPO, &[a]));
    forget_locks();
    let events = driver.step();
    assert_eq!(events[0].event, "PreservationCheckpoint");
    assert_eq!(request_lock(&driver.id), Some(filed_lock()));
    assert!(driver.rows("todo").is_empty(), "the step did nothing else");
    driver.until("retain", 40);
    for key in piece_keys(&driver) {
        assert_eq!(piece_lock(&key), Some(driver.id));
    }
}

#[test]
fn a_request_that_began_purging_before_locks_existed_finishes_without_one() {
    setup();
    let mut driver = retained(MIB + 1);
    driver.now = T0 + RETENTION_MS;
    assert_eq!(driver.step()[0].event, "PreservationPurgeStarted");
    forget_locks();
    driver.until("purged", 5);
    assert_eq!(request_lock(&driver.id), None);
    assert!(driver.preserved_keys().is_empty());
}

/// Records the request's lock after each operation of its life.
struct History {
    id: Id,
    seen: Vec<(u64, RequestLock)>,
}

impl History {
    fn record(&mut self, now: u64) {
        let lock = request_lock(&self.id).expect("a filed request has a lock");
        if self.seen.last().map(|(_, l)| l) != Some(&lock) {
            self.seen.push((now, lock));
        }
    }

    /// Every change was a transition the host allows at its time.
    fn check(&self) {
        for pair in self.seen.windows(2) {
            let ((_, from), (now, to)) = (pair[0], pair[1]);
            RequestLock::check_transition(Some(&from), &to, now)
                .unwrap_or_else(|why| panic!("{from:?} -> {to:?} at {now}: {why}"));
        }
    }
}

#[test]
fn over_a_requests_whole_life_every_commit_keeps_the_lock_rules() {
    setup();
    let a = blob(&bytes(1, 2 * MIB + 3));
    let b = blob(&bytes(2, 40));
    hold(&a, REPO);
    hold(&b, REPO);
    let mut driver = file(actions(request_id(1), REPO, &[a, b]));
    let mut history = History {
        id: driver.id,
        seen: Vec::new(),
    };
    history.record(driver.now);
    while driver.status().phase != "retain" {
        driver.step();
        history.record(driver.now);
    }
    assert_eq!(driver.rows("removed").len(), 2, "serving copies removed");
    driver.hold(true).unwrap();
    history.record(driver.now);
    driver.now = T0 + RETENTION_MS;
    driver.step();
    history.record(driver.now);
    driver.hold(false).unwrap();
    history.record(driver.now);
    while driver.status().phase != "purged" {
        driver.step();
        history.record(driver.now);
    }
    // A re-sweep, an hour later.
    assert_eq!(driver.step()[0].event, "PreservationPurgeStarted");
    driver.until("purged", 3);
    history.record(driver.now);

    history.check();
    let states: Vec<(bool, bool)> = history
        .seen
        .iter()
        .map(|(_, l)| (l.hold, l.purging))
        .collect();
    assert_eq!(
        states,
        [(false, false), (true, false), (false, false), (false, true)]
    );
    assert!(driver.preserved_keys().is_empty());
    assert!(refusals().is_empty(), "{:?}", refusals());
}

#[test]
fn a_withdrawal_keeps_the_lock_and_the_preserved_pieces_until_retention_lets_them_go() {
    setup();
    let body = bytes(1, MIB + 9);
    let a = blob(&body);
    hold(&a, REPO);
    let mut driver = file(actions(request_id(1), REPO, &[a]));
    driver.until("retain", 40);
    assert_eq!(driver.rows("removed").len(), 1);
    driver.withdraw().unwrap();
    driver.settle_denial(10);
    assert_eq!(driver.status().denial.restored, 1);
    assert_eq!(request_lock(&driver.id), Some(filed_lock()));
    let keys = piece_keys(&driver);
    assert_eq!(driver.preserved_keys().len(), keys.len());
    for key in &keys {
        assert_eq!(piece_lock(key), Some(driver.id));
    }
    assert_eq!(driver.preserved(&a), body);

    driver.now = T0 + RETENTION_MS;
    driver.until("purged", 6);
    assert!(driver.preserved_keys().is_empty());
    assert!(request_lock(&driver.id).unwrap().purging);
    assert!(refusals().is_empty(), "{:?}", refusals());
}
