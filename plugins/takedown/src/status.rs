//! `status`: a request's state as an operator sees it.

use custodian_sdk::takedown::RequestStatus;
use custodian_sdk::{Error, clock};

use crate::state::{self, Phase};
use crate::{denial, lock, request};

/// `status`: see `sdk/wit/takedown.wit`.
pub fn of(request_id: &[u8]) -> Result<RequestStatus, Error> {
    let id = request::id_arg(request_id)?;
    let request = request::require(&id)?;
    let state = state::load(&id, &request, clock::now_ms())?.state;
    let denial = denial::load(&id, &request)?.state;
    let lock = lock::load(&id, &request)?;
    // The answer in force: the lock's (extended by an operator, perhaps)
    // or the state's, whichever is later.
    let retain_until = lock.retain_until(&state);
    let next_purge_ms = if state.purged {
        Some(state.next_purge_at)
    } else if state.hold || lock.hold() || state.phase == Phase::Purging {
        None
    } else {
        Some(retain_until)
    };
    Ok(RequestStatus {
        repository: request.repository.to_string(),
        created_ms: request.created_ms,
        phase: state.phase.name().into(),
        verification: state.verification.name().into(),
        counts: state.counts.to_wit(),
        retain_until_ms: retain_until,
        hold: state.hold,
        purged: state.purged,
        next_purge_ms,
        // A withdrawal's problem is the later one.
        last_error: denial.last_error.clone().or(state.last_error),
        denial: denial.to_wit(),
    })
}
