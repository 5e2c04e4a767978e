//! Filing a request (`plan-create`): checks it (the repository holds what
//! it names; a pack is one), writes its record, the objects it names, its
//! first state and its lock ([`crate::lock`]: retain-until as the
//! retention policy answers now, so the state and the lock agree from the
//! start), and denies as much as fits in the same commit
//! ([`crate::denial_work`]); `plan-denial` or the steps do the rest.

use custodian_sdk::audit::Entry;
use custodian_sdk::kv::MAX_READS;
use custodian_sdk::steps::WitCommit;
use custodian_sdk::takedown::Request as WitRequest;
use custodian_sdk::{Batch, Commit, Error};

use crate::codec::{Id, encode, hex};
use crate::content;
use crate::denial::{self, DenialState};
use crate::denial_work;
use crate::keys::{self, PARTITION};
use crate::lock::{self, Loaded};
use crate::reads::Reads;
use crate::request::{self, APPLY_WINDOW_MS};
use crate::state;

/// Most missing ids named in a `not-found` message: 1024 ids would make
/// an error message of 66 KiB.
const MAX_NAMED_MISSING: usize = 8;

/// What a filing reads before it plans.
struct Read {
    /// The named objects the repository does not hold.
    missing: Vec<Id>,
    /// A named pack's index row.
    pack: Option<content::ObjectRow>,
    /// The request's row exists.
    exists: bool,
    /// Its lock row exists.
    locked: bool,
}

/// Reads whether `request`'s repository holds each of `named`, a named
/// pack's index row, and the rows of the request (`key`) and its lock:
/// in one snapshot read when they fit one (a request naming up to 61
/// objects), else the holdings a `get-many` per 1000 objects first.
fn read(id: &Id, request: &request::Request, named: &[Id], key: Vec<u8>) -> Result<Read, Error> {
    let mut reads = Reads::new();
    let (record, locked) = (
        reads.get(PARTITION, key),
        reads.get(lock::PARTITION, lock::key(id)),
    );
    let pack = request
        .pack
        .map(|pack| reads.get(content::CONTENT, content::object_key(&pack)));
    // Each holding is a read of its own in a snapshot read, which holds
    // at most MAX_READS; more are read apart, a `get-many` per 1000.
    let together = named.len() <= MAX_READS - 3;
    let held: Vec<usize> = if together {
        named
            .iter()
            .map(|object| {
                reads.get(
                    content::CONTENT,
                    content::held_key(object, &request.repository),
                )
            })
            .collect()
    } else {
        Vec::new()
    };
    let mut answers = reads.run()?;
    let missing = if together {
        let mut missing = Vec::new();
        for (object, at) in named.iter().zip(held) {
            if answers.value(at)?.is_none() {
                missing.push(*object);
            }
        }
        missing
    } else {
        content::not_held(&request.repository, named)?
    };
    let pack = match (request.pack, pack) {
        (Some(pack), Some(at)) => content::decode_object_row(&pack, answers.value(at)?)?,
        _ => None,
    };
    Ok(Read {
        missing,
        pack,
        exists: answers.value(record)?.is_some(),
        locked: answers.value(locked)?.is_some(),
    })
}

/// `plan-create`: see `sdk/wit/takedown.wit`.
pub fn plan(filed: WitRequest, now: u64) -> Result<WitCommit, Error> {
    let (id, request, objects) = request::validate(&filed)?;
    let named: Vec<Id> = request.pack.map_or_else(|| objects.clone(), |p| vec![p]);
    let key = request::key(&id);
    let read = read(&id, &request, &named, key.clone())?;
    if !read.missing.is_empty() {
        let listed: Vec<String> = read
            .missing
            .iter()
            .take(MAX_NAMED_MISSING)
            .map(|o| hex(o))
            .collect();
        return Err(Error::NotFound(format!(
            "{} does not hold {} of the named objects: {}{}",
            request.repository,
            read.missing.len(),
            listed.join(", "),
            if read.missing.len() > MAX_NAMED_MISSING {
                ", …"
            } else {
                ""
            }
        )));
    }
    if let Some(pack) = request.pack
        && read.pack.is_none_or(|row| row.kind != content::PACK)
    {
        return Err(Error::NotFound(format!(
            "{} is not a pack in the content index",
            hex(&pack)
        )));
    }
    if read.exists {
        return Err(Error::PreconditionFailed(format!(
            "takedown request {} exists",
            hex(&id)
        )));
    }
    // Lock rows are never deleted: a request of this id whose other rows
    // were removed left its lock, which this one cannot take over (it may
    // be purging, or have another creation time).
    if read.locked {
        return Err(Error::PreconditionFailed(format!(
            "takedown request {} has a lock already",
            hex(&id)
        )));
    }
    let preservation = state::first(&request, now)?;
    let unlocked = Loaded::default();
    let lock = unlocked.next(&request, &preservation);
    let state_key = state::key(&id);
    let mut batch = Batch::new()
        .require_absent(PARTITION, key.clone())
        .not_after(now.saturating_add(APPLY_WINDOW_MS))
        .put(PARTITION, key, request::encode_record(&request)?)
        .require_absent(PARTITION, state_key.clone())
        .put(PARTITION, state_key, encode(&preservation)?);
    batch = unlocked.write(batch, &id, &lock);
    if !objects.is_empty() {
        batch = batch.put(
            PARTITION,
            keys::key(keys::ACTIONS, &id, &[]),
            objects.concat(),
        );
    }
    // The denial takes effect with the filing: as much of it as fits in
    // this commit, the rest through `plan-denial` (or the steps).
    let denial_key = denial::state_key(&id);
    let mut state = DenialState::initial(now);
    let budget = denial::COMMIT_OPS.saturating_sub(batch.len() + 2);
    let work = denial_work::work(&id, &request, Some(&named), &mut state, budget, now)?;
    let batch = batch
        .require_absent(PARTITION, denial_key.clone())
        .extend(work.batch)
        .put(PARTITION, denial_key, encode(&state)?);
    let mut commit = Commit::new(batch).audit(Entry {
        event: "TakedownRequested".into(),
        targets: vec![hex(&id), request.repository.to_string()],
        detail: Some(match request.pack {
            Some(pack) => format!("pack {}", hex(&pack)),
            None => format!("{} objects", request.objects),
        }),
    });
    for event in work.events {
        commit = commit.audit(event);
    }
    Ok(commit.into_wit())
}
