//! Purge: delete every preserved piece once retention allows it, keep the
//! intents, and re-sweep after a pass so a delayed write is found too.
//! A purge never touches the serving store: a serving copy removed before
//! it stays removed (the object stays denied, a purging request being
//! beyond withdrawal), one kept stays.
//!
//! Every piece is locked to its request ([`crate::lock`]), and the host
//! deletes a locked piece only while the lock releases it (purging,
//! retain-until passed, no hold). So a pass begins only once the lock's
//! retain-until has passed with no hold; a delete the host refuses anyway
//! (`access-denied`) is recorded for that piece (audited, `last_error`)
//! and the pass goes on: the next re-sweep tries it again.

use custodian_sdk::{Error, kv};

use crate::codec::{decode, describe, hex};
use crate::context::{MAX_AUDIT, Step};
use crate::copy::Piece;
use crate::keys::{self, PARTITION, PRESERVED};
use crate::state::Phase;
use crate::versions;

/// Pieces handled per step: each is a head, maybe a delete, and an audit
/// entry, and a commit carries at most [`MAX_AUDIT`] entries.
const PIECES_PER_STEP: usize = MAX_AUDIT;

/// The purge check every step starts with: begins a purge pass when no
/// hold is set (in the state or the lock), none is under way, the lock's
/// retain-until has passed and, once purged, the re-sweep is due. Returns
/// whether it began one (the step does nothing else then; its commit sets
/// the lock purging).
///
/// The retention policy is not asked again: the lock's retain-until is
/// its answer when the request was filed (grown only by an operator's
/// extension), so a later change of the settings governs new requests.
pub fn start(step: &mut Step) -> Result<bool, Error> {
    let state = &step.state;
    let due = !state.purged || step.now >= state.next_purge_at;
    if state.hold
        || state.phase == Phase::Purging
        || step.lock.hold()
        || step.now < step.lock.retain_until(state)
        || !due
    {
        return Ok(false);
    }
    let state = &mut step.state;
    state.resume_phase = state.phase;
    state.phase = Phase::Purging;
    state.purge_after = None;
    // A purge during the remove phase ends it (see `complete`).
    state.remove_after = None;
    let detail = format!(
        "{} pass, resuming {}",
        if state.purged { "re-sweep" } else { "first" },
        state.resume_phase.name()
    );
    step.event("PreservationPurgeStarted", &[], Some(detail));
    Ok(true)
}

/// One purge step.
pub fn run(step: &mut Step) -> Result<(), Error> {
    let (start, end) = keys::range(keys::PIECE, &step.id);
    let cursor = keys::cursor(step.state.purge_after.as_deref(), (&start, &end), "purge")?;
    let limit = PIECES_PER_STEP.saturating_sub(step.audit_len()).max(1);
    let page = kv::scan(
        PARTITION,
        &start,
        Some(&end),
        cursor.as_deref(),
        limit as u32,
    )?;
    let handled = page.entries.len();
    for entry in page.entries {
        let piece: Piece = decode(&entry.value, "a piece intent")?;
        let object = piece.check(&step.id, &entry.key)?;
        // The intent is kept: a write delayed past this pass is found by
        // the next one.
        let detail = match versions::destroy(PRESERVED, &piece.key, VERSION_PAGES) {
            Ok(0) => "absent".to_owned(),
            Ok(_) => {
                step.state.counts.purged_pieces += 1;
                "deleted".to_owned()
            }
            Err(refused @ Error::AccessDenied(_)) => {
                let why = describe(&refused);
                step.state
                    .set_error(&format!("preserved piece {}: {why}", piece.key));
                format!("refused: {why}")
            }
            Err(other) => return Err(other),
        };
        step.event(
            "PreservationPiecePurged",
            &[hex(&object), piece.key.clone()],
            Some(detail),
        );
        step.state.purge_after = Some(hex(&entry.key));
    }
    if page.next.is_none() && (handled == 0 || step.audit_len() < MAX_AUDIT) {
        complete(step)?;
    }
    Ok(())
}

/// How long after a pass the next re-sweep for late writes starts (the
/// seed's hour): the pace of purging is this policy's, not retention's.
pub const RESWEEP_MS: u64 = 3_600_000;

/// Version pages read per piece: a piece has one version, plus one per
/// late write; past this the piece is left to the next pass (the step
/// fails and is retried) rather than spending the step's budget.
const VERSION_PAGES: usize = 4;

/// Every piece row was visited: the pass is over.
fn complete(step: &mut Step) -> Result<(), Error> {
    let state = &mut step.state;
    state.phase = match state.resume_phase {
        Phase::Acquire | Phase::Closure => Phase::Discover,
        // Nothing is removed once the preserved copy is purged: it is
        // what a withdrawal would restore the serving copy from.
        Phase::Remove | Phase::Retain => Phase::Purged,
        other => other,
    };
    state.purged = true;
    state.purge_after = None;
    state.next_purge_at = step.now.saturating_add(RESWEEP_MS);
    let detail = format!(
        "{} pieces deleted in all; next re-sweep at {}",
        state.counts.purged_pieces, state.next_purge_at
    );
    step.event("PreservationPurgeComplete", &[], Some(detail));
    Ok(())
}
