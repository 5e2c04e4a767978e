//! `custodian:host/audit`: immediate appends to the host's audit log, and
//! a batch committed with its entries.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};

use super::HostView;
use super::kv::{convert_batch, kv_error};
use crate::bindings::HostError;
use crate::bindings::host::custodian::host::audit as wit;
use crate::bindings::host::custodian::host::kv::Outcome as WitOutcome;
use crate::bindings::host::custodian::host::types::Error;
use custodian_core::audit::{self, Record};
use custodian_kv::Outcome;

/// Most entries one `apply-with` may carry, as many as a step's commit.
pub const MAX_ENTRIES: usize = 8;

/// Attempts at an `apply-with` whose audit keys collided with records
/// already there (two calls in the same millisecond with the same
/// nonce hash prefix: 2^-56 each): each attempt takes a fresh nonce.
const ATTEMPTS: u32 = 4;

/// Makes each `apply-with`'s audit keys differ from every other's in this
/// process; [`SALT`] keeps them apart across processes, and a collision
/// fails the guard, never overwrites (see [`audit::plan`]).
static NONCE: AtomicU64 = AtomicU64::new(0);

/// Random bytes and the process id, drawn once per process. Without them
/// a process restarted on a fixed or simulated clock (`tick --now`, a
/// host killed and started again within a millisecond) stamps the same
/// milliseconds with the same nonces as the one before it, and each of
/// its first calls finds all [`ATTEMPTS`] keys taken.
static SALT: LazyLock<[u8; 20]> = LazyLock::new(|| {
    let mut salt = [0u8; 20];
    // Should the OS refuse randomness, the process id still separates
    // two processes alive at once.
    let _ = getrandom::fill(&mut salt[..16]);
    salt[16..].copy_from_slice(&std::process::id().to_be_bytes());
    salt
});

impl wit::Host for HostView<'_> {
    fn append(&mut self, entry: wit::Entry) -> Result<(), HostError> {
        self.charge()?;
        let record = Record {
            at_ms: self.call.services.clock.now_ms(),
            actor: self.call.actor.clone(),
            event: entry.event,
            targets: entry.targets,
            detail: entry.detail,
        };
        record
            .validate()
            .map_err(|e| HostError::Guest(Error::InvalidArgument(e)))?;
        self.wait(audit::append(self.call.services.kv.as_ref(), &record))?
            .map_err(kv_error)
    }

    fn apply_with(
        &mut self,
        batch: crate::bindings::host::custodian::host::kv::Batch,
        entries: Vec<wit::Entry>,
    ) -> Result<WitOutcome, HostError> {
        self.charge()?;
        if entries.len() > MAX_ENTRIES {
            return Err(HostError::Guest(Error::InvalidArgument(format!(
                "apply-with carries at most {MAX_ENTRIES} audit entries, not {}",
                entries.len()
            ))));
        }
        let batch = convert_batch(&self.call.grants, batch)?;
        let at_ms = self.call.services.clock.now_ms();
        let records: Vec<Record> = entries
            .into_iter()
            .map(|entry| Record {
                at_ms,
                actor: self.call.actor.clone(),
                event: entry.event,
                targets: entry.targets,
                detail: entry.detail,
            })
            .collect();
        // The plugin's own guards come first, so an index it is told
        // about is one of them; one past them is an audit key collision.
        let own = batch.preconditions.len();
        for _ in 0..ATTEMPTS {
            let mut planned = batch.clone();
            let nonce = NONCE.fetch_add(1, Ordering::Relaxed);
            let unique = [
                &b"apply-with"[..],
                &SALT[..],
                &at_ms.to_be_bytes(),
                &nonce.to_be_bytes(),
            ]
            .concat();
            // At most MAX_ENTRIES records (checked above): a byte indexes
            // them without wrapping.
            for (i, record) in (0u8..).zip(&records) {
                let (guard, write) = audit::plan(record, &unique, i)
                    .map_err(|e| HostError::Guest(Error::InvalidArgument(e.into_message())))?;
                planned.preconditions.push(guard);
                planned.writes.push(write);
            }
            let outcome = self
                .wait(self.call.services.kv.apply(&planned))?
                .map_err(kv_error)?;
            match outcome {
                Outcome::PreconditionFailed { index } if (index as usize) >= own => {}
                Outcome::PreconditionFailed { index } => {
                    return Ok(WitOutcome::PreconditionFailed(index));
                }
                Outcome::Committed => return Ok(WitOutcome::Committed),
                Outcome::DeadlinePassed => return Ok(WitOutcome::DeadlinePassed),
            }
        }
        Err(HostError::Guest(Error::Unavailable(
            "could not find free audit keys for apply-with".into(),
        )))
    }
}
