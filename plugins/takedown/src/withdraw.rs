//! Withdrawing a request (`plan-withdraw`): it is marked withdrawn in its
//! `denial` row, and the denial work that follows
//! ([`crate::denial_work`]) puts back the serving copies it removed, then
//! lifts its denials. Refused once purging has begun.

use custodian_sdk::audit::Entry;
use custodian_sdk::steps::WitCommit;
use custodian_sdk::{Batch, Commit, Error};

use crate::codec::{encode, hex};
use crate::denial::{load, state_key};
use crate::keys::PARTITION;
use crate::request::{self, APPLY_WINDOW_MS};
use crate::state::{self, Phase};

/// `plan-withdraw`: see `sdk/wit/takedown.wit`.
pub fn plan(request_id: &[u8], now: u64) -> Result<WitCommit, Error> {
    let id = request::id_arg(request_id)?;
    let request = request::require(&id)?;
    let preservation = state::load(&id, &request, now)?;
    let phase = preservation.state.phase;
    if preservation.state.purged || matches!(phase, Phase::Purging | Phase::Purged) {
        return Err(Error::PreconditionFailed(format!(
            "purging of takedown request {} has begun; it can no longer be withdrawn",
            hex(&id)
        )));
    }
    let loaded = load(&id, &request)?;
    if let Some(withdrawn) = loaded.state.withdrawn_ms {
        return Err(Error::PreconditionFailed(format!(
            "takedown request {} was withdrawn at {withdrawn}",
            hex(&id)
        )));
    }
    let mut state = loaded.state.clone();
    state.withdrawn_ms = Some(now);
    state.settled = false;
    state.restore_done = false;
    state.restore_after = None;
    state.revision += 1;
    let key = state_key(&id);
    // Guarded on the preservation state as read too: a withdrawal cannot
    // land after a step that started a purge.
    let batch = Batch::new()
        .require_observed(PARTITION, key.clone(), loaded.raw.as_deref())
        .require_observed(PARTITION, state::key(&id), preservation.raw.as_deref())
        .not_after(now.saturating_add(APPLY_WINDOW_MS))
        .put(PARTITION, key, encode(&state)?);
    Ok(Commit::new(batch)
        .audit(Entry {
            event: "TakedownWithdrawn".into(),
            targets: vec![hex(&id)],
            detail: Some(format!("{} denied objects to lift", state.denied)),
        })
        .into_wit())
}
