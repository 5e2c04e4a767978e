//! Legal hold: set or cleared by an operator, decided with the retention
//! policy, refused once purging has begun. The request's lock carries the
//! hold in the same commit ([`crate::lock`]), so the host holds every
//! piece from the moment the hold is recorded.

use custodian_sdk::audit::Entry;
use custodian_sdk::steps::WitCommit;
use custodian_sdk::{Batch, Commit, Error, retention_oracle};

use crate::codec::{encode, hex};
use crate::keys::PARTITION;
use crate::lock;
use crate::request::{self, APPLY_WINDOW_MS};
use crate::state;

/// `plan-hold`: see `sdk/wit/takedown.wit`.
pub fn plan(request_id: &[u8], enabled: bool, now: u64) -> Result<WitCommit, Error> {
    let id = request::id_arg(request_id)?;
    let request = request::require(&id)?;
    let loaded = state::load(&id, &request, now)?;
    let locked = lock::load(&id, &request)?;
    let mut state = loaded.state;
    // The lock too: the host refuses a hold on a lock that is purging.
    if enabled && (state.purge_begun() || locked.purging()) {
        return Err(Error::PreconditionFailed(format!(
            "purging of takedown request {} has begun; a legal hold can no longer be placed",
            hex(&id)
        )));
    }
    let item = state.item(&request, state.schedule_stage());
    state.hold = retention_oracle::set_hold(item, enabled)?.hold;
    state.check(&request)?;
    let key = state::key(&id);
    let batch = Batch::new()
        .require_observed(PARTITION, key.clone(), loaded.raw.as_deref())
        .not_after(now.saturating_add(APPLY_WINDOW_MS))
        .put(PARTITION, key, encode(&state)?);
    let batch = locked.write(batch, &id, &locked.next(&request, &state));
    Ok(Commit::new(batch)
        .audit(Entry {
            event: "PreservationLegalHold".into(),
            targets: vec![hex(&id)],
            detail: Some(if enabled { "on" } else { "off" }.into()),
        })
        .into_wit())
}
