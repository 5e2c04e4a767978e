//! A content fixture writer and a step driver over the SDK's native host,
//! with the host's lock rules enforced below the policy.

#![allow(dead_code)]

use std::cell::{Cell, RefCell};

use custodian_plugin_retention::Policy as Retention;
use custodian_plugin_takedown::Policy;
use custodian_sdk::audit::Entry;
use custodian_sdk::contract::denial;
use custodian_sdk::contract::lock::{self as locks, RequestLock, RowKey};
use custodian_sdk::kv::{Outcome, WitBatch, Write};
use custodian_sdk::objects::{self, PutCondition};
use custodian_sdk::retention::{Assessment, Item, RetentionRules, Settings};
use custodian_sdk::steps::{StepResult, Timer, WitCommit};
use custodian_sdk::takedown::{Request, RequestStatus, TakedownSteps};
use custodian_sdk::testing::{self, Guard, ObjectWrite, RetentionOracle};
use custodian_sdk::{Batch, Error, checksum, clock, kv};

pub type Id = [u8; 32];

/// When every test starts.
pub const T0: u64 = 1_700_000_000_000;
pub const HOUR: u64 = 3_600_000;
/// The deployer's retention in these tests.
pub const RETENTION_MS: u64 = 24 * HOUR;
pub const MIB: usize = 1024 * 1024;

fn settings() -> Settings {
    Settings {
        retention_ms: RETENTION_MS,
        noncurrent_retention_ms: 0,
    }
}

/// The bundled retention policy's assessment with these tests' settings.
pub fn bundled_assess(item: Item, now: u64) -> Result<Assessment, Error> {
    Retention::assess(settings(), item, now)
}

/// Routes `retention-oracle.assess` to `assess` (holds as the bundled
/// policy decides them): a retention plugin swapped in by a test.
pub fn swap_retention(assess: fn(Item, u64) -> Result<Assessment, Error>) {
    testing::set_retention(RetentionOracle {
        assess,
        set_hold: |item, enabled| Retention::set_hold(item, enabled),
    });
}

/// An empty native host at [`T0`], with the bundled retention policy
/// answering `retention-oracle` and the host's lock rules enforced
/// ([`host_lock_rows`], [`host_locked_objects`]).
pub fn setup() {
    testing::reset(T0);
    REFUSALS.with(|r| r.borrow_mut().clear());
    keep_released_pieces(None);
    swap_retention(bundled_assess);
    testing::set_guard(Guard {
        batch: host_lock_rows,
        object: host_locked_objects,
    });
}

thread_local! {
    /// Set while a test writes behind the host's back.
    static BEHIND: Cell<bool> = const { Cell::new(false) };
    /// Why the host refuses deletes of released pieces, when a test says so.
    static KEEPING: Cell<Option<&'static str>> = const { Cell::new(None) };
    /// Every write the host's lock rules refused, with why.
    static REFUSALS: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// Runs `write` as a fault or an operator on the raw storage would, past
/// the host's lock rules (a test tampering with preserved pieces or lock
/// rows).
pub fn behind_the_host<T>(write: impl FnOnce() -> T) -> T {
    BEHIND.with(|b| b.set(true));
    let out = write();
    BEHIND.with(|b| b.set(false));
    out
}

/// Every write the host's lock rules refused so far, with why.
pub fn refusals() -> Vec<String> {
    REFUSALS.with(|r| r.borrow().clone())
}

fn refuse(why: String) -> Error {
    REFUSALS.with(|r| r.borrow_mut().push(why.clone()));
    Error::AccessDenied(why)
}

/// The host's check of a batch's writes to partition `lock`, as it makes
/// it for every caller: a request's lock only moves forward
/// ([`RequestLock::check_transition`] at the host's now), a piece's lock
/// never changes hands and names a request whose lock is there, and no
/// lock row is ever deleted.
pub fn host_lock_rows(batch: &WitBatch) -> Result<(), Error> {
    if BEHIND.with(Cell::get) {
        return Ok(());
    }
    let now = clock::now_ms();
    for write in &batch.writes {
        match write {
            Write::Put(e) if e.partition == locks::PARTITION => {
                let current = kv::get(locks::PARTITION, &e.key)?;
                let checked = match locks::parse_key(&e.key) {
                    Some(RowKey::Request(_)) => match RequestLock::decode(&e.value) {
                        Ok(next) => {
                            let current = current
                                .map(|c| RequestLock::decode(&c).expect("stored locks decode"));
                            RequestLock::check_transition(current.as_ref(), &next, now)
                                .map_err(|r| r.0)
                        }
                        Err(why) => Err(why.to_string()),
                    },
                    Some(RowKey::Piece { .. }) => match locks::decode_piece(&e.value) {
                        Ok(request) if request_lock(&request).is_none() => {
                            Err("a piece locked to a request with no lock".into())
                        }
                        Ok(_) => {
                            locks::check_piece_write(current.as_deref(), &e.value).map_err(|r| r.0)
                        }
                        Err(why) => Err(why.to_string()),
                    },
                    None => Err(format!("{:?} is not a lock row", e.key)),
                };
                checked.map_err(refuse)?;
            }
            Write::Delete(r) if r.partition == locks::PARTITION => {
                return Err(refuse("lock rows are never deleted".into()));
            }
            _ => {}
        }
    }
    Ok(())
}

/// The host's check of an object write: a delete, or a put over an
/// existing object, of a key with a piece lock goes only while the lock
/// releases it and the retention plugin (asked by the host) allows the
/// delete. Beyond the host, a check of this policy: nothing is written to
/// `preserved` before its key is locked.
pub fn host_locked_objects(store: &str, key: &str, write: ObjectWrite) -> Result<(), Error> {
    if BEHIND.with(Cell::get) {
        return Ok(());
    }
    let Some(owner) = kv::get(locks::PARTITION, &locks::piece_key(store, key))? else {
        assert!(
            store != "preserved" || write == ObjectWrite::Delete,
            "{key} was written to preserved before its lock"
        );
        return Ok(());
    };
    let exists = objects::head(store, key).is_ok();
    if write == ObjectWrite::Put && !exists {
        return Ok(());
    }
    let owner = locks::decode_piece(&owner).expect("piece locks decode");
    let lock = request_lock(&owner).expect("a locked piece's request has a lock");
    let now = clock::now_ms();
    if !lock.releases(now) {
        return Err(refuse(format!("{store}/{key}: its lock holds it")));
    }
    // The lock alone decides; a test may have the host refuse anyway.
    match KEEPING.with(Cell::get) {
        Some(why) => Err(refuse(format!("{store}/{key}: {why}"))),
        None => Ok(()),
    }
}

/// Has the host refuse every delete of a released piece with `why`
/// (`None`: the lock alone decides again), as a host would that fails
/// closed for a reason of its own.
pub fn keep_released_pieces(why: Option<&'static str>) {
    KEEPING.with(|k| k.set(why));
}

/// Request `id`'s lock, if it has one.
pub fn request_lock(id: &Id) -> Option<RequestLock> {
    kv::get(locks::PARTITION, &locks::request_key(id))
        .unwrap()
        .map(|raw| RequestLock::decode(&raw).expect("stored locks decode"))
}

/// The request whose lock keeps `key` in `preserved`, if any.
pub fn piece_lock(key: &str) -> Option<Id> {
    kv::get(locks::PARTITION, &locks::piece_key("preserved", key))
        .unwrap()
        .map(|raw| locks::decode_piece(&raw).expect("piece locks decode"))
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Deterministic bytes that differ per `seed`.
pub fn bytes(seed: u8, len: usize) -> Vec<u8> {
    let mut state = u32::from(seed).wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state as u8
        })
        .collect()
}

pub fn id_of(bytes: &[u8]) -> Id {
    *blake3::hash(bytes).as_bytes()
}

fn put_content(key: Vec<u8>, value: Vec<u8>) {
    let outcome = Batch::new().put("content", key, value).apply().unwrap();
    assert_eq!(outcome, Outcome::Committed);
}

/// Serves `body` under `object`'s key and indexes it with `kind`; the
/// index's CRC is `body`'s.
pub fn serve_as(object: &Id, body: &[u8], kind: u8) {
    objects::put(
        "serving",
        &format!("content/{}", hex(object)),
        body,
        &PutCondition::Unconditional,
        None,
        &[],
    )
    .unwrap();
    let mut row = vec![kind];
    row.extend_from_slice(&(body.len() as u64).to_be_bytes());
    row.extend_from_slice(&checksum::crc64_nvme(body).to_be_bytes());
    put_content([b"o".as_slice(), object].concat(), row);
}

/// Stores `body` as content of `kind` and returns its id.
pub fn object(body: &[u8], kind: u8) -> Id {
    let id = id_of(body);
    serve_as(&id, body, kind);
    id
}

pub fn blob(body: &[u8]) -> Id {
    object(body, 1)
}

/// Records that `namespace/name` holds `object`.
pub fn hold(object: &Id, repository: &str) {
    let (namespace, name) = repository.split_once('/').unwrap();
    let mut key = [b"h".as_slice(), object].concat();
    key.extend_from_slice(namespace.as_bytes());
    key.push(0);
    key.extend_from_slice(name.as_bytes());
    put_content(key, Vec::new());
}

/// Marks `pack` sealed.
pub fn seal(pack: &Id) {
    put_content([b"s".as_slice(), pack].concat(), T0.to_be_bytes().to_vec());
}

/// A manifest over `chunks` (each stored as a blob): its id and the
/// reassembled file.
pub fn manifest(chunks: &[Vec<u8>]) -> (Id, Vec<u8>) {
    let file: Vec<u8> = chunks.concat();
    let mut body = b"CUSTMNFT".to_vec();
    body.extend_from_slice(&(file.len() as u64).to_le_bytes());
    body.extend_from_slice(&1u16.to_le_bytes());
    body.extend_from_slice(&(chunks.len() as u32).to_le_bytes());
    for chunk in chunks {
        body.extend_from_slice(&blob(chunk));
    }
    body.extend_from_slice(&checksum::crc64_nvme(&file).to_le_bytes());
    let chunk_ids: Vec<Id> = chunks.iter().map(|c| id_of(c)).collect();
    (indexed_manifest(&body, &chunk_ids), file)
}

/// Stores and indexes a manifest as a push does: its chunks' `c` rows
/// first, then the manifest. Returns its id.
fn indexed_manifest(body: &[u8], chunks: &[Id]) -> Id {
    let id = id_of(body);
    for chunk in chunks {
        put_content([b"c".as_slice(), chunk, &id].concat(), Vec::new());
    }
    object(body, 2)
}

/// A manifest listing `chunks` by id (the chunks themselves are not
/// stored: denial reads only the list), built with the contract's
/// encoder; stored and indexed as a manifest. Returns its id.
pub fn manifest_of(chunks: &[Id]) -> Id {
    use custodian_sdk::contract::content::{CHUNK_BYTES, manifest};
    let header = manifest::Header {
        file_len: chunks.len() as u64 * CHUNK_BYTES,
        count: chunks.len() as u32,
    };
    let mut body = header.encode().to_vec();
    for chunk in chunks {
        body.extend_from_slice(chunk);
    }
    body.extend_from_slice(&manifest::encode_trailer(0));
    indexed_manifest(&body, chunks)
}

/// The bytes of a pack of `members` (id, kind).
pub fn pack_body(members: &[(Id, u8)]) -> Vec<u8> {
    let mut body = b"CUSTPACK".to_vec();
    body.extend_from_slice(&1u16.to_le_bytes());
    body.extend_from_slice(&(members.len() as u32).to_le_bytes());
    for (id, kind) in members {
        body.extend_from_slice(id);
        body.push(*kind);
    }
    body
}

/// Stores a pack of `members` and returns its id.
pub fn pack(members: &[(Id, u8)]) -> Id {
    object(&pack_body(members), 3)
}

pub fn request_id(seed: u8) -> Id {
    [seed; 32]
}

pub fn actions(id: Id, repository: &str, objects: &[Id]) -> Request {
    Request {
        id: id.to_vec(),
        repository: repository.into(),
        created_ms: T0,
        objects: objects.iter().map(|o| o.to_vec()).collect(),
        pack: None,
    }
}

pub fn pack_request(id: Id, repository: &str, pack: Id) -> Request {
    Request {
        id: id.to_vec(),
        repository: repository.into(),
        created_ms: T0,
        objects: Vec::new(),
        pack: Some(pack.to_vec()),
    }
}

/// Most operations of a commit carrying denial work: the host's 96 less
/// the 24 it may add.
pub const DENIAL_COMMIT_OPS: usize = 72;

/// Operations (preconditions and writes) of a commit's batch.
pub fn ops(commit: &WitCommit) -> usize {
    commit.batch.preconditions.len() + commit.batch.writes.len()
}

/// The denials of `object`'s row in partition `denial`, in order (none
/// when it has no row).
pub fn denials(object: &Id) -> Vec<denial::Denial> {
    kv::get(denial::PARTITION, &denial::key(object))
        .unwrap()
        .map(|row| denial::decode(&row).expect("a denial row decodes"))
        .unwrap_or_default()
}

/// The requests denying `object`, in order.
pub fn denied_by(object: &Id) -> Vec<Id> {
    denials(object).iter().map(|d| d.request).collect()
}

/// Applies a commit's batch as the host would, asserting its bounds.
pub fn apply(commit: &WitCommit) {
    assert!(
        commit.audit.len() <= 8,
        "{} audit entries",
        commit.audit.len()
    );
    let outcome = kv::apply(&commit.batch).expect("the commit is within the host's bounds");
    assert_eq!(outcome, Outcome::Committed);
}

/// Files `request` as the host does: applies its commit, then
/// `plan-denial`'s until there are none; returns a driver for it.
pub fn file(request: Request) -> Driver {
    let mut driver = file_only(request);
    driver.settle_denial(100);
    driver
}

/// Files `request` applying only the `plan-create` commit (a host that
/// died before its denial was settled).
pub fn file_only(request: Request) -> Driver {
    let id: Id = request.id.as_slice().try_into().unwrap();
    let commit = Policy::plan_create(request, T0).expect("the request is valid");
    assert!(ops(&commit) <= DENIAL_COMMIT_OPS, "{} ops", ops(&commit));
    apply(&commit);
    let driver = Driver {
        id,
        now: T0,
        events: commit.audit,
        phases: vec![],
        calls: vec![],
    };
    let first = driver.status().phase;
    Driver {
        phases: vec![first],
        ..driver
    }
}

/// Runs one request's steps like the timer worker does.
pub struct Driver {
    pub id: Id,
    /// The time of the next step.
    pub now: u64,
    /// Every audit entry committed so far.
    pub events: Vec<Entry>,
    /// The phase after each committed step.
    pub phases: Vec<String>,
    /// Each committed step's phase before it ran, and the KV reads and
    /// applies the step made itself (not the commit the driver applies,
    /// nor its status reads).
    pub calls: Vec<(String, u64, u64)>,
}

impl Driver {
    pub fn timer(&self) -> Timer {
        Timer {
            kind: "takedown".into(),
            reference: self.id.to_vec(),
            due_at_ms: self.now,
            now_ms: self.now,
        }
    }

    /// Runs a step without committing it (a crash before the commit).
    pub fn try_step(&self) -> Result<StepResult, Error> {
        testing::set_now(self.now);
        Policy::step(self.timer())
    }

    /// Runs a step, commits it and moves time to its due time; returns
    /// its audit entries.
    pub fn step(&mut self) -> Vec<Entry> {
        let phase = self.phases.last().cloned().unwrap_or_default();
        let before = testing::kv_calls();
        let result = self.try_step().expect("the step succeeds");
        let after = testing::kv_calls();
        self.calls.push((
            phase,
            after.reads() - before.reads(),
            after.applies - before.applies,
        ));
        let StepResult::Reschedule(reschedule) = result else {
            panic!("a takedown step is never done");
        };
        // A step of denial work is due again at once (the host paces
        // timers); every other step is rescheduled later.
        assert!(
            reschedule.due_at_ms >= self.now,
            "the step is not rescheduled in the past"
        );
        apply(&reschedule.commit);
        self.now = reschedule.due_at_ms;
        self.events.extend(reschedule.commit.audit.iter().cloned());
        self.phases.push(self.status().phase);
        reschedule.commit.audit
    }

    /// Steps until the phase is `phase`; panics after `limit` steps.
    pub fn until(&mut self, phase: &str, limit: usize) {
        for _ in 0..limit {
            if self.status().phase == phase {
                return;
            }
            self.step();
        }
        assert_eq!(self.status().phase, phase, "after {limit} steps");
    }

    /// Steps until an event named `event` is committed.
    pub fn until_event(&mut self, event: &str, limit: usize) -> Entry {
        for _ in 0..limit {
            if let Some(entry) = self.step().into_iter().find(|e| e.event == event) {
                return entry;
            }
        }
        panic!("no {event} within {limit} steps");
    }

    pub fn status(&self) -> RequestStatus {
        testing::set_now(self.now);
        Policy::status(self.id.to_vec()).expect("the request exists")
    }

    /// Names of every event so far, in order.
    pub fn event_names(&self) -> Vec<String> {
        self.events.iter().map(|e| e.event.clone()).collect()
    }

    /// The phases passed through, without repeats.
    pub fn phase_sequence(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for phase in &self.phases {
            if out.last() != Some(phase) {
                out.push(phase.clone());
            }
        }
        out
    }

    /// Rows of partition `takedown` for this request with `tag`.
    pub fn rows(&self, tag: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut prefix = tag.as_bytes().to_vec();
        prefix.push(0);
        prefix.extend_from_slice(&self.id);
        testing::partition("takedown")
            .into_iter()
            .filter(|(k, _)| k.starts_with(&prefix))
            .collect()
    }

    /// The preserved store's keys for this request.
    pub fn preserved_keys(&self) -> Vec<String> {
        let page = objects::list(
            "preserved",
            &format!("pieces/{}/", hex(&self.id)),
            None,
            1000,
        )
        .unwrap();
        page.objects.into_iter().map(|o| o.key).collect()
    }

    /// `object`'s preserved bytes, reassembled from its pieces.
    pub fn preserved(&self, object: &Id) -> Vec<u8> {
        let prefix = format!(
            "pieces/{}/{}/{}/",
            hex(&self.id),
            &hex(object)[..2],
            hex(object)
        );
        let page = objects::list("preserved", &prefix, None, 1000).unwrap();
        page.objects
            .iter()
            .flat_map(|o| objects::get("preserved", &o.key, None).unwrap().1)
            .collect()
    }

    /// Applies `plan-denial` commits until there are none; returns how
    /// many were applied. Panics after `limit`.
    pub fn settle_denial(&mut self, limit: usize) -> usize {
        testing::set_now(self.now);
        for applied in 0..limit {
            let planned = Policy::plan_denial(self.id.to_vec(), self.now).expect("plan-denial");
            let Some(commit) = planned else {
                return applied;
            };
            assert!(ops(&commit) <= DENIAL_COMMIT_OPS, "{} ops", ops(&commit));
            apply(&commit);
            self.events.extend(commit.audit);
        }
        panic!("the denial is not settled after {limit} plan-denial commits");
    }

    /// Applies a `plan-withdraw` commit.
    pub fn withdraw(&mut self) -> Result<(), Error> {
        testing::set_now(self.now);
        let commit = Policy::plan_withdraw(self.id.to_vec(), self.now)?;
        apply(&commit);
        self.events.extend(commit.audit);
        Ok(())
    }

    /// Applies a `plan-hold` commit.
    pub fn hold(&mut self, enabled: bool) -> Result<(), Error> {
        testing::set_now(self.now);
        let commit = Policy::plan_hold(self.id.to_vec(), enabled, self.now)?;
        apply(&commit);
        self.events.extend(commit.audit);
        Ok(())
    }
}

/// The state row's key of request `id`.
pub fn state_key(id: &Id) -> Vec<u8> {
    let mut key = b"state\0".to_vec();
    key.extend_from_slice(id);
    key
}

/// Overwrites a `takedown` row.
pub fn put_row(key: Vec<u8>, value: Vec<u8>) {
    let outcome = Batch::new().put("takedown", key, value).apply().unwrap();
    assert_eq!(outcome, Outcome::Committed);
}

pub fn get_row(key: &[u8]) -> Option<Vec<u8>> {
    kv::get("takedown", key).unwrap()
}
