//! Denial work: a takedown's first effect is that its content stops
//! being served. The host refuses every read and push of an object with a
//! row in partition `denial` (the contract's [`rows`] module); this module
//! writes those rows, in bounded, guarded chunks, and lifts them again
//! when the request is withdrawn: the first chunk with the filing
//! ([`crate::create`]), the rest by `plan-denial` ([`plan`]) or a step
//! ([`step`]).
//!
//! A request denies every object it names; for a pack, the pack and every
//! member, nested packs (sealed or not) and their members included,
//! recursively; for a manifest, the manifest and every chunk it lists
//! (read from its serving copy, or a preserved copy once that is removed;
//! [`crate::source`]). Chunks are denied by id too, a chunk being a piece
//! of the taken-down file; the host checks a file read against the file's
//! own object only, so another file sharing a chunk keeps serving by its
//! path.
//!
//! Progress is kept in partition `takedown` (see the crate doc): the
//! `denial` row ([`DenialState`]), one `deny-todo` row ([`Cursor`]) per
//! pack or manifest still being walked, and one `denied` row per object
//! the request denies, so lifting knows exactly what to lift, and denying
//! again (an object named twice, a pack nested twice) is a no-op.
//!
//! Lifting a withdrawn request's denials runs in three stages, each in
//! bounded chunks: its pending removals of serving copies are finished
//! ([`remove::finish_for_lift`]); the restore pass puts back every
//! serving copy that is missing and needed ([`restore`]); only then are
//! the denials lifted. The `denial` row also counts the serving copies
//! the request removed and restored.
//!
//! Every chunk is guarded on the `denial` row as read and changes it
//! ([`DenialState::revision`]), so two hosts working on the same request
//! cannot both commit; each object's denial row is guarded on its value as
//! read, so requests naming the same object cannot lose each other's
//! denial.

use std::collections::{BTreeMap, BTreeSet};

use custodian_sdk::audit::Entry;
use custodian_sdk::contract::denial::{self as rows, Denial, MAX_DENIALS};
use custodian_sdk::kv::MAX_READS;
use custodian_sdk::steps::{StepResult, Timer, WitCommit};
use custodian_sdk::{Batch, Commit, Error, kv};

use crate::codec::{Id, corrupt, decode, encode, hex};
use crate::content::{self, BLOB, MANIFEST, PACK};
use crate::denial::{COMMIT_OPS, Cursor, DenialState, Loaded, state_key};
use crate::keys::{self, PARTITION};
use crate::reads::Reads;
use crate::request::{self, APPLY_WINDOW_MS, Request};
use crate::{remove, restore, source};

/// Operations of a `plan-denial` or step chunk besides its work: the
/// guard on the `denial` row, the not-after deadline, the row's write.
const OWN_OPS: usize = 3;
/// The least an object costs to deny: guard, denial row, `denied` row.
const DENY_OPS: usize = 3;
/// Read rounds per chunk (and one more that only looks for what is
/// left): each makes at most 6 host calls (a pack's or manifest's header
/// and a range of its entries, or the `actions` row; the candidates' `o`
/// rows, `denied` rows and denial rows, one `get-many` each; a scan for
/// the next `deny-todo` row). So a chunk makes at most ~55 host calls
/// with its own reads (a call's budget is 256).
const MAX_ROUNDS: usize = 8;

/// One bounded chunk of denial work, to be committed with the `denial`
/// row it was planned from.
#[derive(Debug)]
pub struct Work {
    /// The chunk's guards and writes (partitions `denial` and `takedown`).
    pub batch: Batch,
    /// Its audit entries (at most 7): a withdrawal's `ServingCopyRemoved`
    /// (pending removals finished) or `ServingCopyRestored`, then
    /// `TakedownDenialActivated` or `TakedownDenialLifted` when the chunk
    /// settles the request.
    pub events: Vec<Entry>,
}

/// Plans the next chunk of request `id`'s denial work within `budget`
/// operations at `now`, advancing `state` (the caller writes it):
/// activation, or once withdrawn the lifting (pending removals finished,
/// then the restore pass, then the lifts; see [`crate::restore`]).
/// `named`: the named objects when the caller has them (`plan-create`,
/// before the `actions` row exists); otherwise they are read when needed.
/// With `named` (the filing), a walk of a pack or manifest that fails
/// ends the chunk rather than failing it: the filing still records the
/// request and denies what it names.
pub fn work(
    id: &Id,
    request: &Request,
    named: Option<&[Id]>,
    state: &mut DenialState,
    budget: usize,
    now: u64,
) -> Result<Work, Error> {
    state.revision += 1;
    let (batch, settled, mut events) = if state.withdrawn_ms.is_some() {
        withdrawal(id, state, budget, now)?
    } else {
        let (batch, settled) = activate(id, request, named, state, budget)?;
        (batch, settled, Vec::new())
    };
    if batch.len() > budget {
        return Err(Error::InvalidArgument(format!(
            "a denial chunk planned {} operations of {budget}",
            batch.len()
        )));
    }
    if settled {
        state.settled = true;
        events.push(if state.withdrawn_ms.is_some() {
            Entry {
                event: "TakedownDenialLifted".into(),
                targets: vec![hex(id)],
                detail: Some(format!(
                    "every denial of the request is lifted; {} serving copies restored",
                    state.restored
                )),
            }
        } else {
            Entry {
                event: "TakedownDenialActivated".into(),
                targets: vec![hex(id)],
                detail: Some(format!("{} objects denied", state.denied)),
            }
        });
    }
    Ok(Work { batch, events })
}

/// A chunk of a withdrawn request's lifting: its pending removals
/// finished, else a chunk of the restore pass, and once that pass is
/// complete, lifts. Returns the batch, whether lifting is complete, and
/// the audit entries.
fn withdrawal(
    id: &Id,
    state: &mut DenialState,
    budget: usize,
    now: u64,
) -> Result<(Batch, bool, Vec<Entry>), Error> {
    if !state.restore_done {
        if let Some((batch, events)) = remove::finish_for_lift(id, state, now)? {
            return Ok((batch, false, events));
        }
        let events = restore::chunk(id, state)?;
        if !state.restore_done {
            return Ok((Batch::new(), false, events));
        }
        let (batch, settled) = lift(id, state, budget)?;
        return Ok((batch, settled, events));
    }
    let (batch, settled) = lift(id, state, budget)?;
    Ok((batch, settled, Vec::new()))
}

/// A chunk of work as a commit: guarded on the `denial` row as read,
/// with its new value, and the chunk's audit entry if it settled (else,
/// for a step, `PreservationCheckpoint`).
fn chunk_commit(
    id: &Id,
    request: &Request,
    loaded: &Loaded,
    now: u64,
    step: bool,
) -> Result<Commit, Error> {
    let mut state = loaded.state.clone();
    let work = work(id, request, None, &mut state, COMMIT_OPS - OWN_OPS, now)?;
    let key = state_key(id);
    let batch = Batch::new()
        .require_observed(PARTITION, key.clone(), loaded.raw.as_deref())
        .not_after(now.saturating_add(APPLY_WINDOW_MS))
        .extend(work.batch)
        .put(PARTITION, key, encode(&state)?);
    let mut commit = Commit::new(batch);
    let quiet = work.events.is_empty();
    for event in work.events {
        commit = commit.audit(event);
    }
    if quiet && step {
        commit = commit.audit(Entry {
            event: "PreservationCheckpoint".into(),
            targets: vec![hex(id)],
            detail: Some(
                if state.withdrawn_ms.is_some() {
                    "denial lifting"
                } else {
                    "denial activation"
                }
                .into(),
            ),
        });
    }
    Ok(commit)
}

/// `plan-denial`: see `sdk/wit/takedown.wit`.
pub fn plan(request_id: &[u8], now: u64) -> Result<Option<WitCommit>, Error> {
    let id = request::id_arg(request_id)?;
    // The request and its `denial` row in one read.
    let [request, denial]: [Option<Vec<u8>>; 2] =
        get_many(PARTITION, &[request::key(&id), state_key(&id)])?
            .try_into()
            .map_err(|_| corrupt("get-many answered a different number of keys"))?;
    let request = request::decode_record(&request.ok_or_else(|| request::not_found(&id))?)?;
    let loaded = crate::denial::loaded(denial, &request)?;
    if loaded.state.settled {
        return Ok(None);
    }
    Ok(Some(
        chunk_commit(&id, &request, &loaded, now, false)?.into_wit(),
    ))
}

/// A step of a request whose denial is not settled: one chunk of denial
/// work and nothing else (no preservation before denial), stepped again
/// at once (the host paces its timers).
pub fn step(
    id: &Id,
    request: &Request,
    loaded: &Loaded,
    timer: &Timer,
) -> Result<StepResult, Error> {
    Ok(chunk_commit(id, request, loaded, timer.now_ms, true)?.reschedule(timer.now_ms))
}

/// A walk (`deny-todo`) this chunk works on.
#[derive(Debug)]
struct Walk {
    object: Id,
    cursor: Cursor,
    /// Read from a `deny-todo` row (else started by this chunk).
    stored: bool,
    /// Advanced by this chunk.
    dirty: bool,
    /// Every entry is denied.
    done: bool,
}

impl Walk {
    /// Whether the chunk ends with a write of its row.
    fn writes(&self) -> bool {
        if self.stored { self.dirty } else { !self.done }
    }
}

/// An activation chunk being planned.
struct Activation {
    id: Id,
    since_ms: u64,
    budget: usize,
    batch: Batch,
    /// Objects handled by this chunk (denied, or found denied already).
    seen: BTreeSet<Id>,
    walks: Vec<Walk>,
    /// The last `deny-todo` row read; rows up to it are in `walks`.
    scanned: Option<Vec<u8>>,
    /// No `deny-todo` row follows `scanned`.
    scan_done: bool,
    /// Objects newly denied by this chunk.
    added: u64,
}

impl Activation {
    /// Operations left: the batch and every walk row still to write count.
    fn available(&self) -> usize {
        let writes = self.walks.iter().filter(|w| w.writes()).count();
        self.budget.saturating_sub(self.batch.len() + writes)
    }

    fn add(&mut self, f: impl FnOnce(Batch) -> Batch) {
        self.batch = f(std::mem::take(&mut self.batch));
    }

    /// Denies `candidates` (object, kind) in order while the budget
    /// allows; returns how many were handled (denied, or found denied by
    /// this request already).
    fn deny(&mut self, candidates: &[(Id, u8)]) -> Result<usize, Error> {
        let fresh: Vec<Id> = candidates
            .iter()
            .map(|(object, _)| *object)
            .filter(|object| !self.seen.contains(object))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        // Each object's `denied` mark and denial row, in snapshot reads of
        // up to MAX_READS rows (one, for a chunk's at most 18 objects).
        let mut read: BTreeMap<Id, (bool, Option<Vec<u8>>)> = BTreeMap::new();
        for group in fresh.chunks(MAX_READS / 2) {
            let mut reads = Reads::new();
            let asked: Vec<(usize, usize)> = group
                .iter()
                .map(|o| {
                    (
                        reads.get(PARTITION, keys::object_key(keys::DENIED, &self.id, o)),
                        reads.get(rows::PARTITION, rows::key(o)),
                    )
                })
                .collect();
            let mut answers = reads.run()?;
            for (object, (mark, row)) in group.iter().zip(asked) {
                let marked = answers.value(mark)?.is_some();
                read.insert(*object, (marked, answers.value(row)?));
            }
        }
        // Decide first, apply after: a failure (a corrupt row, a full
        // one) leaves the chunk as it was.
        let available = self.available();
        let mut spent = 0;
        let mut seen = BTreeSet::new();
        let mut denied = Vec::new();
        for (object, kind) in candidates {
            if self.seen.contains(object) || seen.contains(object) {
                continue;
            }
            let (marked, row) = &read[object];
            if *marked {
                // Denied by an earlier chunk (and walked, or being walked).
                seen.insert(*object);
                continue;
            }
            let mut denials = match row {
                Some(raw) => rows::decode(raw)
                    .map_err(|why| corrupt(format!("the denial row of {}: {why}", hex(object))))?,
                None => Vec::new(),
            };
            let listed = denials.iter().any(|d| d.request == self.id);
            let walks = *kind == PACK || *kind == MANIFEST;
            let cost = 1 + if listed { 0 } else { 2 } + usize::from(walks);
            if spent + cost > available {
                break;
            }
            let row_write = if listed {
                None
            } else if denials.len() >= MAX_DENIALS {
                return Err(Error::Conflict(format!(
                    "object {} is denied by {MAX_DENIALS} other requests already",
                    hex(object)
                )));
            } else {
                denials.push(Denial {
                    request: self.id,
                    since_ms: self.since_ms,
                });
                Some((row.clone(), rows::encode(&denials)))
            };
            spent += cost;
            seen.insert(*object);
            denied.push((*object, *kind, walks, row_write));
        }
        // Candidates up to the first left for a later round.
        let handled = candidates
            .iter()
            .take_while(|(object, _)| self.seen.contains(object) || seen.contains(object))
            .count();
        self.seen.extend(seen);
        for (object, kind, walks, row_write) in denied {
            if let Some((observed, value)) = row_write {
                let key = rows::key(&object);
                self.add(|b| {
                    b.require_observed(rows::PARTITION, key.clone(), observed.as_deref())
                        .put(rows::PARTITION, key, value)
                });
            }
            let mark = keys::object_key(keys::DENIED, &self.id, &object);
            self.add(|b| b.put(PARTITION, mark, Vec::new()));
            self.added += 1;
            if walks {
                self.walks.push(Walk {
                    object,
                    cursor: Cursor {
                        kind,
                        next: 0,
                        count: None,
                    },
                    stored: false,
                    dirty: true,
                    done: false,
                });
            }
        }
        Ok(handled)
    }

    /// The walk to continue: an unfinished one of this chunk, else the
    /// next `deny-todo` row; `None` when every walk is done.
    fn next_walk(&mut self) -> Result<Option<usize>, Error> {
        if let Some(index) = self.walks.iter().position(|w| !w.done) {
            return Ok(Some(index));
        }
        if self.scan_done {
            return Ok(None);
        }
        let (start, end) = keys::range(keys::DENY_TODO, &self.id);
        let page = kv::scan(PARTITION, &start, Some(&end), self.scanned.as_deref(), 1)?;
        let Some(entry) = page.entries.into_iter().next() else {
            self.scan_done = true;
            return Ok(None);
        };
        let object = keys::object_of(&entry.key, &start, "deny-todo")?;
        let cursor: Cursor = decode(&entry.value, "a denial cursor")?;
        if !matches!(cursor.kind, PACK | MANIFEST) || cursor.count.is_some_and(|c| cursor.next > c)
        {
            return Err(corrupt(format!(
                "the denial cursor of {} is inconsistent",
                hex(&object)
            )));
        }
        self.scanned = Some(entry.key);
        self.walks.push(Walk {
            object,
            cursor,
            stored: true,
            dirty: false,
            done: false,
        });
        Ok(Some(self.walks.len() - 1))
    }

    /// Denies the next entries of walk `index`; returns whether it
    /// progressed.
    fn advance(&mut self, index: usize) -> Result<bool, Error> {
        let was_dirty = self.walks[index].dirty;
        self.walks[index].dirty = true;
        let available = self.available();
        if available < DENY_OPS {
            self.walks[index].dirty = was_dirty;
            return Ok(false);
        }
        let max = u32::try_from(available / DENY_OPS).unwrap_or(u32::MAX);
        let Walk { object, cursor, .. } = &self.walks[index];
        let object = *object;
        let (count, candidates) = if cursor.kind == PACK {
            let (count, members) = source::pack_inventory(&object, cursor.next, cursor.count, max)?;
            let ids: Vec<Id> = members.iter().map(|(id, _)| *id).collect();
            let kinds = content::object_rows(&ids)?
                .into_iter()
                .zip(&ids)
                .map(|(row, member)| {
                    row.map(|row| (*member, row.kind)).ok_or_else(|| {
                        corrupt(format!(
                            "pack {} lists {}, which the content index does not know",
                            hex(&object),
                            hex(member)
                        ))
                    })
                })
                .collect::<Result<Vec<_>, Error>>()?;
            (count, kinds)
        } else {
            let (count, chunks) = source::manifest_chunks(&object, cursor.next, cursor.count, max)?;
            // A chunk is a piece of a file, never a manifest or pack.
            (count, chunks.into_iter().map(|c| (c, BLOB)).collect())
        };
        let handled = self.deny(&candidates)?;
        let walk = &mut self.walks[index];
        walk.cursor.count = Some(count);
        // At most `max` entries.
        walk.cursor.next += handled as u32;
        walk.done = walk.cursor.next == count;
        Ok(handled > 0 || walk.done)
    }

    /// The chunk's batch with every walk row written.
    fn finish(mut self) -> Result<Batch, Error> {
        for walk in std::mem::take(&mut self.walks) {
            let key = keys::object_key(keys::DENY_TODO, &self.id, &walk.object);
            if !walk.writes() {
                continue;
            }
            if walk.done {
                self.add(|b| b.delete(PARTITION, key));
            } else {
                let value = encode(&walk.cursor)?;
                self.add(|b| b.put(PARTITION, key, value));
            }
        }
        Ok(self.batch)
    }
}

/// Plans an activation chunk; returns its batch and whether activation is
/// complete.
fn activate(
    id: &Id,
    request: &Request,
    named: Option<&[Id]>,
    state: &mut DenialState,
    budget: usize,
) -> Result<(Batch, bool), Error> {
    let mut chunk = Activation {
        id: *id,
        since_ms: state.since_ms,
        budget,
        batch: Batch::new(),
        seen: BTreeSet::new(),
        walks: Vec::new(),
        scanned: None,
        scan_done: false,
        added: 0,
    };
    let count = request.named_count();
    let mut stored_named = None;
    let mut complete = false;
    // Named objects first (what users fetch), then the walks of packs and
    // manifests; the last round only looks whether anything is left.
    for round in 0..=MAX_ROUNDS {
        let last = round == MAX_ROUNDS;
        if state.next_action < count {
            if last || chunk.available() < DENY_OPS {
                break;
            }
            if named.is_none() && stored_named.is_none() {
                stored_named = Some(request.named(id)?);
            }
            let names = named.or(stored_named.as_deref()).unwrap_or_default();
            let max = chunk.available() / DENY_OPS;
            let batch: Vec<Id> = names
                .iter()
                .skip(state.next_action as usize)
                .take(max)
                .copied()
                .collect();
            let kinds: Vec<u8> = if request.pack.is_some() {
                // The pack itself; plan-create checked its kind.
                vec![PACK; batch.len()]
            } else {
                // A named object without an `o` row (data loss: preserving
                // it records so) is denied by id, like a blob.
                content::object_rows(&batch)?
                    .into_iter()
                    .map(|row| row.map_or(BLOB, |row| row.kind))
                    .collect()
            };
            let candidates: Vec<(Id, u8)> = batch.into_iter().zip(kinds).collect();
            let handled = chunk.deny(&candidates)?;
            // At most MAX_OBJECTS.
            state.next_action += handled as u32;
            if handled == 0 {
                break;
            }
            continue;
        }
        let Some(index) = chunk.next_walk()? else {
            complete = true;
            break;
        };
        if last {
            break;
        }
        match chunk.advance(index) {
            Ok(true) => {}
            Ok(false) => break,
            // The filing commits what it has (the request, its named
            // objects denied); the walk is `plan-denial`'s, which reports
            // the failure.
            Err(_) if named.is_some() => break,
            Err(error) => return Err(error),
        }
    }
    state.denied += chunk.added;
    Ok((chunk.finish()?, complete))
}

/// Plans a lifting chunk; returns its batch and whether lifting is
/// complete.
fn lift(id: &Id, state: &mut DenialState, budget: usize) -> Result<(Batch, bool), Error> {
    let mut batch = Batch::new();
    let (start, end) = keys::range(keys::DENIED, id);
    let limit = (budget / DENY_OPS).clamp(1, kv::MAX_PAGE_ENTRIES as usize);
    // At most MAX_PAGE_ENTRIES.
    let page = kv::scan(PARTITION, &start, Some(&end), None, limit as u32)?;
    let objects = page
        .entries
        .iter()
        .map(|entry| keys::object_of(&entry.key, &start, "denied"))
        .collect::<Result<Vec<Id>, Error>>()?;
    let row_keys: Vec<Vec<u8>> = objects.iter().map(rows::key).collect();
    let denial_rows = get_many(rows::PARTITION, &row_keys)?;
    for ((object, key), row) in objects.iter().zip(row_keys).zip(denial_rows) {
        if let Some(raw) = row {
            let mut denials = rows::decode(&raw)
                .map_err(|why| corrupt(format!("the denial row of {}: {why}", hex(object))))?;
            let before = denials.len();
            denials.retain(|d| d.request != *id);
            if denials.len() != before {
                batch = batch.require_observed(rows::PARTITION, key.clone(), Some(&raw));
                batch = if denials.is_empty() {
                    batch.delete(rows::PARTITION, key)
                } else {
                    batch.put(rows::PARTITION, key, rows::encode(&denials))
                };
            }
        }
        batch = batch.delete(PARTITION, keys::object_key(keys::DENIED, id, object));
        state.denied = state.denied.saturating_sub(1);
    }
    if page.next.is_some() {
        return Ok((batch, false));
    }
    // Every denial is lifted; an unfinished activation's walks go too.
    let room = budget.saturating_sub(batch.len());
    if room == 0 {
        return Ok((batch, false));
    }
    let (start, end) = keys::range(keys::DENY_TODO, id);
    let limit = room.min(kv::MAX_PAGE_ENTRIES as usize);
    // At most MAX_PAGE_ENTRIES.
    let todo = kv::scan(PARTITION, &start, Some(&end), None, limit as u32)?;
    for entry in todo.entries {
        batch = batch.delete(PARTITION, entry.key);
    }
    let complete = todo.next.is_none();
    if complete {
        state.denied = 0;
    }
    Ok((batch, complete))
}

/// `get-many` of at most a page of keys, checked to answer each.
fn get_many(partition: &str, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>, Error> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let rows = kv::get_many(partition, keys)?;
    if rows.len() != keys.len() {
        return Err(corrupt("get-many answered a different number of keys"));
    }
    Ok(rows)
}
