//! `custodian:host/kv` over the [`crate::kv::Kv`] mechanism, restricted to
//! the plugin's granted partitions.

use super::{HostError, HostView};
use crate::kv::{Batch, KvError, Outcome, Partition, Precondition, Write, validate_caller_batch};
use crate::runtime::Grants;
use crate::runtime::bindings::host::custodian::host::kv as wit;
use crate::runtime::bindings::host::custodian::host::types::Error;

pub(crate) fn kv_error(error: KvError) -> HostError {
    HostError::Guest(wit_error(error))
}

/// A mechanism error as the guest sees it.
pub(crate) fn wit_error(error: KvError) -> Error {
    match error {
        KvError::InvalidArgument(m) => Error::InvalidArgument(m),
        KvError::Unavailable(m) | KvError::InUse(m) => Error::Unavailable(m),
        KvError::Corrupt(m) => Error::Corrupt(m),
        KvError::BudgetExhausted(m) => Error::BudgetExhausted(m),
    }
}

/// The partition named `name`, if it is in `grants`. Found in the grants
/// by name: every granted name is valid, so the hot path neither validates
/// nor allocates.
fn granted<'g>(grants: &'g Grants, name: &str) -> Result<&'g Partition, Error> {
    if let Some(granted) = grants.partitions.get(name) {
        return Ok(granted);
    }
    let partition = Partition::new(name).map_err(wit_error)?;
    Err(Error::AccessDenied(format!(
        "partition {partition} is not granted to this plugin"
    )))
}

/// A guest's batch as a host batch, every partition checked against
/// `grants` and the whole against the caller bounds (which leave room for
/// the rows the host adds when it commits a step).
pub(crate) fn convert_batch(grants: &Grants, batch: wit::Batch) -> Result<Batch, Error> {
    let mut out = Batch {
        preconditions: Vec::with_capacity(batch.preconditions.len()),
        writes: Vec::with_capacity(batch.writes.len()),
    };
    for precondition in batch.preconditions {
        out.preconditions.push(match precondition {
            wit::Precondition::Absent(r) => Precondition::Absent {
                partition: granted(grants, &r.partition)?.clone(),
                key: r.key,
            },
            wit::Precondition::Equals(e) => Precondition::Equals {
                partition: granted(grants, &e.partition)?.clone(),
                key: e.key,
                value: e.value,
            },
            wit::Precondition::NotAfter(deadline) => Precondition::NotAfter(deadline),
        });
    }
    for write in batch.writes {
        out.writes.push(match write {
            wit::Write::Put(e) => Write::Put {
                partition: granted(grants, &e.partition)?.clone(),
                key: e.key,
                value: e.value,
            },
            wit::Write::Delete(r) => Write::Delete {
                partition: granted(grants, &r.partition)?.clone(),
                key: r.key,
            },
        });
    }
    validate_caller_batch(&out).map_err(wit_error)?;
    Ok(out)
}

impl HostView<'_> {
    fn partition(&self, name: &str) -> Result<&Partition, HostError> {
        granted(&self.call.grants, name).map_err(HostError::Guest)
    }
}

impl wit::Host for HostView<'_> {
    fn get(&mut self, partition: String, key: Vec<u8>) -> Result<Option<Vec<u8>>, HostError> {
        self.charge()?;
        let partition = self.partition(&partition)?;
        self.wait(self.call.services.kv.get(partition, &key))?
            .map_err(kv_error)
    }

    fn get_many(
        &mut self,
        partition: String,
        keys: Vec<Vec<u8>>,
    ) -> Result<Vec<Option<Vec<u8>>>, HostError> {
        self.charge()?;
        let partition = self.partition(&partition)?;
        self.wait(self.call.services.kv.get_many(partition, &keys))?
            .map_err(kv_error)
    }

    fn scan(
        &mut self,
        partition: String,
        start: Vec<u8>,
        end: Option<Vec<u8>>,
        cursor: Option<Vec<u8>>,
        limit: u32,
    ) -> Result<wit::Page, HostError> {
        self.charge()?;
        let partition = self.partition(&partition)?;
        let page = self
            .wait(self.call.services.kv.scan(
                partition,
                &start,
                end.as_deref(),
                cursor.as_deref(),
                limit,
            ))?
            .map_err(kv_error)?;
        Ok(wit::Page {
            entries: page
                .entries
                .into_iter()
                .map(|(key, value)| wit::Entry {
                    partition: partition.as_str().to_owned(),
                    key,
                    value,
                })
                .collect(),
            next: page.next,
        })
    }

    fn apply(&mut self, batch: wit::Batch) -> Result<wit::Outcome, HostError> {
        self.charge()?;
        let batch = convert_batch(&self.call.grants, batch)?;
        let outcome = self
            .wait(self.call.services.kv.apply(&batch))?
            .map_err(kv_error)?;
        Ok(match outcome {
            Outcome::Committed => wit::Outcome::Committed,
            Outcome::PreconditionFailed { index } => wit::Outcome::PreconditionFailed(index),
            Outcome::DeadlinePassed => wit::Outcome::DeadlinePassed,
        })
    }
}
