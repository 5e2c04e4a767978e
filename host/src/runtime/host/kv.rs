//! `custodian:host/kv` over the [`crate::kv::Kv`] mechanism, restricted to
//! the plugin's granted partitions.

use super::{HostError, HostView};
use crate::kv::{Batch, KvError, Outcome, Partition, Precondition, Write};
use crate::runtime::bindings::host::custodian::host::kv as wit;
use crate::runtime::bindings::host::custodian::host::types::Error;

pub(crate) fn kv_error(error: KvError) -> HostError {
    HostError::Guest(match error {
        KvError::InvalidArgument(m) => Error::InvalidArgument(m),
        KvError::Unavailable(m) => Error::Unavailable(m),
        KvError::Corrupt(m) => Error::Corrupt(m),
    })
}

impl HostView<'_> {
    /// The partition named `name`, if it is granted to this plugin. Found
    /// in the grants by name: every granted name is valid, so the hot path
    /// neither validates nor allocates.
    fn partition(&self, name: &str) -> Result<&Partition, HostError> {
        if let Some(granted) = self.call.grants.partitions.get(name) {
            return Ok(granted);
        }
        let partition = Partition::new(name).map_err(kv_error)?;
        Err(HostError::Guest(Error::AccessDenied(format!(
            "partition {partition} is not granted to this plugin"
        ))))
    }

    fn batch(&self, batch: wit::Batch) -> Result<Batch, HostError> {
        let mut out = Batch {
            preconditions: Vec::with_capacity(batch.preconditions.len()),
            writes: Vec::with_capacity(batch.writes.len()),
        };
        for precondition in batch.preconditions {
            out.preconditions.push(match precondition {
                wit::Precondition::Absent(r) => Precondition::Absent {
                    partition: self.partition(&r.partition)?.clone(),
                    key: r.key,
                },
                wit::Precondition::Equals(e) => Precondition::Equals {
                    partition: self.partition(&e.partition)?.clone(),
                    key: e.key,
                    value: e.value,
                },
                wit::Precondition::NotAfter(deadline) => Precondition::NotAfter(deadline),
            });
        }
        for write in batch.writes {
            out.writes.push(match write {
                wit::Write::Put(e) => Write::Put {
                    partition: self.partition(&e.partition)?.clone(),
                    key: e.key,
                    value: e.value,
                },
                wit::Write::Delete(r) => Write::Delete {
                    partition: self.partition(&r.partition)?.clone(),
                    key: r.key,
                },
            });
        }
        Ok(out)
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
        let batch = self.batch(batch)?;
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
