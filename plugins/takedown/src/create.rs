//! Filing a request (`plan-create`): checks it (the repository holds what
//! it names; a pack is one), writes its record, the objects it names, its
//! first state and its lock ([`crate::lock`]: retain-until as the
//! retention policy answers now, so the state and the lock agree from the
//! start), and denies as much as fits in the same commit
//! ([`crate::denial_work`]); `plan-denial` or the steps do the rest.

use custodian_sdk::audit::Entry;
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

/// `plan-create`: see `sdk/wit/takedown.wit`.
pub fn plan(filed: WitRequest, now: u64) -> Result<WitCommit, Error> {
    let (id, request, objects) = request::validate(&filed)?;
    let named: Vec<Id> = request.pack.map_or_else(|| objects.clone(), |p| vec![p]);
    let missing = content::not_held(&request.repository, &named)?;
    if !missing.is_empty() {
        let listed: Vec<String> = missing
            .iter()
            .take(MAX_NAMED_MISSING)
            .map(|o| hex(o))
            .collect();
        return Err(Error::NotFound(format!(
            "{} does not hold {} of the named objects: {}{}",
            request.repository,
            missing.len(),
            listed.join(", "),
            if missing.len() > MAX_NAMED_MISSING {
                ", …"
            } else {
                ""
            }
        )));
    }
    if let Some(pack) = request.pack {
        let row = content::object_row(&pack)?;
        if row.is_none_or(|row| row.kind != content::PACK) {
            return Err(Error::NotFound(format!(
                "{} is not a pack in the content index",
                hex(&pack)
            )));
        }
    }
    let key = request::key(&id);
    // The request's row and its lock row, in one read.
    let mut reads = Reads::new();
    let (record, locked) = (
        reads.get(PARTITION, key.clone()),
        reads.get(lock::PARTITION, lock::key(&id)),
    );
    let mut answers = reads.run()?;
    if answers.value(record)?.is_some() {
        return Err(Error::PreconditionFailed(format!(
            "takedown request {} exists",
            hex(&id)
        )));
    }
    // Lock rows are never deleted: a request of this id whose other rows
    // were removed left its lock, which this one cannot take over (it may
    // be purging, or have another creation time).
    if answers.value(locked)?.is_some() {
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
