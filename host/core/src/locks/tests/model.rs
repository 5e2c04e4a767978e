//! Random sequences of lock writes — legal, illegal, garbled — applied
//! through the guard, compared with a model of the rules written from the
//! issue's words: the guard commits exactly what the model allows, the
//! rows are the model's, and a lock turns from keeping its pieces to
//! releasing them only by the legal path (purging begun with retention
//! passed and no hold, or time passing a purging lock's retain-until).

use std::collections::BTreeMap;
use std::sync::Arc;

use custodian_base::clock::{Clock, FixedClock};
use custodian_contract::lock::{self, RequestLock};
use custodian_kv::memory::MemoryKv;
use custodian_kv::{Kv, Outcome, Write};

use super::{batch, lock_rows, partition, put_piece, put_request};
use crate::locks::LockGuard;

const SEEDS: u64 = 48;
const BATCHES: u32 = 300;
const REQUESTS: u8 = 4;
const PIECES: u8 = 6;

/// splitmix64: tiny, seedable, enough to pick actions; a failing seed
/// replays exactly.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// The model's state: each request's lock and each piece's request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Model {
    requests: BTreeMap<u8, RequestLock>,
    pieces: BTreeMap<u8, u8>,
}

/// One write the generator makes.
#[derive(Debug, Clone)]
enum Op {
    Request(u8, RequestLock),
    Piece(u8, u8),
    Delete,
    Garbled,
}

fn id(request: u8) -> [u8; 32] {
    [request + 1; 32]
}

fn piece_name(piece: u8) -> String {
    format!("p/{piece}")
}

/// The rules, as the model states them: a lock is created not
/// purging; then its creation time is fixed, its retain-until only grows,
/// purging is never lifted and begins only once retain-until has passed
/// with no hold before or after, and no hold is placed on a purging lock.
/// A piece is locked once, by a request that exists.
fn allowed(model: &Model, op: &Op, now: u64) -> bool {
    match op {
        Op::Delete | Op::Garbled => false,
        Op::Request(r, next) => match model.requests.get(r) {
            None => !next.purging,
            Some(was) => {
                let begins_purging = next.purging && !was.purging;
                let places_hold = next.hold && !was.hold;
                next.created_ms == was.created_ms
                    && next.retain_until_ms >= was.retain_until_ms
                    && (next.purging || !was.purging)
                    && (!begins_purging || (!was.hold && !next.hold && was.retain_until_ms <= now))
                    && (!places_hold || !was.purging)
            }
        },
        Op::Piece(p, r) => {
            model.requests.contains_key(r) && model.pieces.get(p).is_none_or(|held| held == r)
        }
    }
}

fn apply(model: &mut Model, op: &Op) {
    match op {
        Op::Request(r, next) => {
            model.requests.insert(*r, *next);
        }
        Op::Piece(p, r) => {
            model.pieces.insert(*p, *r);
        }
        Op::Delete | Op::Garbled => unreachable!("never allowed"),
    }
}

/// A write near the current state: mostly small legal-looking moves, some
/// of them illegal, a few plainly wrong.
fn generate(rng: &mut Rng, model: &Model, now: u64) -> Op {
    let r = rng.below(u64::from(REQUESTS)) as u8;
    match rng.below(100) {
        0..=2 => Op::Delete,
        3..=4 => Op::Garbled,
        5..=34 => Op::Piece(rng.below(u64::from(PIECES)) as u8, r),
        _ => {
            let base = model.requests.get(&r).copied().unwrap_or(RequestLock {
                created_ms: now,
                retain_until_ms: now + rng.below(40),
                hold: false,
                purging: false,
            });
            let mut next = base;
            match rng.below(8) {
                0 => next.retain_until_ms += rng.below(30),
                1 => next.retain_until_ms = next.retain_until_ms.saturating_sub(rng.below(30)),
                2 => next.hold = !next.hold,
                3 | 4 => next.purging = true,
                5 => next.purging = !next.purging,
                6 if rng.chance(30) => next.created_ms += 1,
                _ => {}
            }
            Op::Request(r, next)
        }
    }
}

fn write_of(op: &Op) -> Write {
    match op {
        Op::Request(r, lock) => put_request(&id(*r), lock),
        Op::Piece(p, r) => put_piece("preserved", &piece_name(*p), &id(*r)),
        Op::Delete => Write::Delete {
            partition: partition(),
            key: lock::request_key(&id(0)),
        },
        Op::Garbled => Write::Put {
            partition: partition(),
            key: lock::request_key(&id(1)),
            value: vec![9; 5],
        },
    }
}

/// The model's rows, as the KV stores them.
fn rows_of(model: &Model) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut rows: Vec<(Vec<u8>, Vec<u8>)> = model
        .requests
        .iter()
        .map(|(r, lock)| (lock::request_key(&id(*r)), lock.encode().to_vec()))
        .chain(model.pieces.iter().map(|(p, r)| {
            (
                lock::piece_key("preserved", &piece_name(*p)),
                id(*r).to_vec(),
            )
        }))
        .collect();
    rows.sort();
    rows
}

/// Whether a lock that kept its pieces at `then` may release them at
/// `now` as `after`: only by the legal path.
fn released_legally(before: &RequestLock, after: &RequestLock, now: u64) -> bool {
    let began = !before.purging && after.purging;
    let time_passed = before.purging && !before.hold && before.retain_until_ms <= now;
    (began && !before.hold && before.retain_until_ms <= now) || time_passed
}

#[tokio::test]
async fn random_lock_writes_through_the_guard_commit_exactly_what_the_rules_allow() {
    let mut committed = 0;
    let mut refused = 0;
    for seed in 0..SEEDS {
        let mut rng = Rng(seed);
        let clock = Arc::new(FixedClock::new(1_000));
        let dyn_clock: Arc<dyn Clock> = clock.clone();
        let kv = LockGuard::new(Arc::new(MemoryKv::new(dyn_clock.clone())), dyn_clock);
        let mut model = Model::default();
        for step in 0..BATCHES {
            let then = clock.now_ms();
            if rng.chance(20) {
                clock.set(then + rng.below(25));
            }
            let now = clock.now_ms();
            let ops: Vec<Op> = (0..=rng.below(3))
                .map(|_| generate(&mut rng, &model, now))
                .collect();
            // The model applies the batch's writes in order; all or none.
            let mut next = model.clone();
            let legal = ops.iter().all(|op| {
                let ok = allowed(&next, op, now);
                if ok {
                    apply(&mut next, op);
                }
                ok
            });
            let result = kv.apply(&batch(ops.iter().map(write_of).collect())).await;
            let context = format!("seed {seed} step {step}: {ops:?} -> {result:?}");
            if legal {
                assert_eq!(result, Ok(Outcome::Committed), "{context}");
                committed += 1;
            } else {
                assert!(
                    matches!(result, Err(custodian_kv::KvError::Retained(_))),
                    "{context}"
                );
                refused += 1;
            }
            if !legal {
                next = model.clone();
            }
            for (r, after) in &next.requests {
                if let Some(before) = model.requests.get(r)
                    && !before.releases(then)
                    && after.releases(now)
                {
                    assert!(released_legally(before, after, now), "{context}");
                }
            }
            model = next;
            assert_eq!(lock_rows(&kv).await, rows_of(&model), "{context}");
        }
    }
    // The generator must exercise both answers.
    assert!(
        committed > 1000 && refused > 1000,
        "{committed} / {refused}"
    );
}
