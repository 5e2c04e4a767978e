//! `custodian:host/kv` over the [`custodian_kv::Kv`] mechanism, restricted to
//! the plugin's granted partitions.

use super::HostView;
use crate::Grants;
use crate::bindings::HostError;
use crate::bindings::host::custodian::host::kv as wit;
use crate::bindings::host::custodian::host::types::Error;
use custodian_kv::{
    Answer, Batch, KvError, MAX_KEY_BYTES, MAX_VALUE_BYTES, Outcome, Page, Partition, Precondition,
    Read, Write, validate_caller_batch, validate_get_many, validate_reads, validate_scan,
};

/// A `get-many` whose values outgrow what the guest can still hold.
fn too_large(read: usize, asked: usize, room: usize) -> HostError {
    HostError::Guest(Error::BudgetExhausted(format!(
        "the first {read} of {asked} values read exceed the {room} bytes this plugin's memory \
         can still take; read fewer keys at a time"
    )))
}

pub(crate) fn kv_error(error: KvError) -> HostError {
    HostError::Guest(wit_error(error))
}

/// A mechanism error as the guest sees it.
pub(crate) fn wit_error(error: KvError) -> Error {
    super::guest_error(error.kind(), error.into_message())
}

/// The partition named `name`, if `grants` let the plugin write it. Found
/// in the grants by name: every granted name is valid, so the hot path
/// neither validates nor allocates.
fn granted<'g>(grants: &'g Grants, name: &str) -> Result<&'g Partition, Error> {
    if let Some(granted) = grants.partitions.get(name) {
        return Ok(granted);
    }
    let partition = Partition::new(name).map_err(wit_error)?;
    Err(Error::AccessDenied(
        if grants.read_partitions.contains(name) {
            format!("partition {partition} is granted to this plugin for reading only")
        } else {
            format!("partition {partition} is not granted to this plugin")
        },
    ))
}

/// The partition named `name`, if `grants` let the plugin read it.
fn readable<'g>(grants: &'g Grants, name: &str) -> Result<&'g Partition, Error> {
    if let Some(granted) = grants.readable_partition(name) {
        return Ok(granted);
    }
    let partition = Partition::new(name).map_err(wit_error)?;
    Err(Error::AccessDenied(format!(
        "partition {partition} is not granted to this plugin"
    )))
}

/// A guest's batch as a host batch, every partition checked against
/// `grants` (a precondition only reads, so a readable partition will do;
/// a write needs a writable one) and the whole against the caller bounds
/// (which leave room for the rows the host adds when it commits a step).
pub(crate) fn convert_batch(grants: &Grants, batch: wit::Batch) -> Result<Batch, Error> {
    let mut out = Batch {
        preconditions: Vec::with_capacity(batch.preconditions.len()),
        writes: Vec::with_capacity(batch.writes.len()),
    };
    for precondition in batch.preconditions {
        out.preconditions.push(match precondition {
            wit::Precondition::Absent(r) => Precondition::Absent {
                partition: readable(grants, &r.partition)?.clone(),
                key: r.key,
            },
            wit::Precondition::Equals(e) => Precondition::Equals {
                partition: readable(grants, &e.partition)?.clone(),
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

/// A page of `partition` as the guest sees it.
fn wit_page(partition: &Partition, page: Page) -> wit::Page {
    wit::Page {
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
    }
}

/// Lowers the limits of `reads`' scans until their largest possible
/// answer fits `room`, what the guest can still hold, so the host never
/// holds more for it than that: a page may end early with its cursor, as
/// `scan`'s do. A snapshot cannot be split as `get-many` is, so gets
/// whose largest values alone could not fit are refused, and each scan
/// keeps at least one entry (or a guest with little memory left could
/// never page at all; its copy may then trap on the memory limit).
fn fit_answers(reads: &mut [Read], room: usize) -> Result<(), HostError> {
    let gets = reads
        .iter()
        .filter(|read| matches!(read, Read::Get { .. }))
        .count();
    let scans = reads.len() - gets;
    let Some(left) = room.checked_sub(gets * MAX_VALUE_BYTES) else {
        return Err(HostError::Guest(Error::BudgetExhausted(format!(
            "{gets} values of up to {MAX_VALUE_BYTES} bytes each could exceed the {room} bytes \
             this plugin's memory can still take; read fewer keys at a time"
        ))));
    };
    if scans == 0 {
        return Ok(());
    }
    let each = left / scans / (MAX_VALUE_BYTES + MAX_KEY_BYTES);
    let most = u32::try_from(each.max(1)).unwrap_or(u32::MAX);
    for read in reads {
        if let Read::Scan { limit, .. } = read {
            *limit = (*limit).min(most);
        }
    }
    Ok(())
}

impl HostView<'_> {
    fn partition(&self, name: &str) -> Result<&Partition, HostError> {
        readable(&self.call.grants, name).map_err(HostError::Guest)
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
        validate_get_many(&keys).map_err(kv_error)?;
        // Read in groups whose largest possible answer fits what the guest
        // can still hold, so the host never holds more for it than that.
        let mut room = self.answer_room();
        let mut values = Vec::with_capacity(keys.len());
        let mut rest = keys.as_slice();
        while !rest.is_empty() {
            let group = rest.len().min((room / MAX_VALUE_BYTES).max(1));
            let (now, later) = rest.split_at(group);
            let read = self
                .wait(self.call.services.kv.get_many(partition, now))?
                .map_err(kv_error)?;
            let bytes: usize = read.iter().flatten().map(Vec::len).sum();
            if bytes > room {
                return Err(too_large(values.len() + read.len(), keys.len(), room));
            }
            room -= bytes;
            values.extend(read);
            rest = later;
        }
        Ok(values)
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
        validate_scan(&start, end.as_deref(), cursor.as_deref(), limit).map_err(kv_error)?;
        // Scanned in pages whose largest possible answer fits what the
        // guest can still hold; past that the page ends early with its
        // cursor (a page holds *at most* `limit` entries), so the guest
        // pages on instead of the host holding more than it can take.
        let mut room = self.answer_room();
        let mut entries = Vec::new();
        let mut cursor = cursor;
        let next = loop {
            let left = (limit as usize).saturating_sub(entries.len());
            let fits = room / (MAX_VALUE_BYTES + MAX_KEY_BYTES);
            if fits == 0 && !entries.is_empty() {
                break cursor;
            }
            // At least one entry, or a guest with little memory left could
            // never page at all; its copy may then trap on the memory limit.
            let page_limit = u32::try_from(left.min(fits.max(1))).unwrap_or(limit);
            let page = self
                .wait(self.call.services.kv.scan(
                    partition,
                    &start,
                    end.as_deref(),
                    cursor.as_deref(),
                    page_limit,
                ))?
                .map_err(kv_error)?;
            let bytes: usize = page.entries.iter().map(|(k, v)| k.len() + v.len()).sum();
            room = room.saturating_sub(bytes);
            entries.extend(page.entries);
            match page.next {
                Some(next) if entries.len() < limit as usize => cursor = Some(next),
                next => break next,
            }
        };
        Ok(wit_page(partition, Page { entries, next }))
    }

    fn read(&mut self, reads: Vec<wit::ReadOp>) -> Result<Vec<wit::ReadAnswer>, HostError> {
        self.charge()?;
        let mut host_reads = Vec::with_capacity(reads.len());
        for read in reads {
            host_reads.push(match read {
                wit::ReadOp::Get(at) => Read::Get {
                    partition: self.partition(&at.partition)?.clone(),
                    key: at.key,
                },
                wit::ReadOp::Scan(range) => Read::Scan {
                    partition: self.partition(&range.partition)?.clone(),
                    start: range.start,
                    end: range.end,
                    cursor: range.cursor,
                    limit: range.limit,
                },
            });
        }
        validate_reads(&host_reads).map_err(kv_error)?;
        fit_answers(&mut host_reads, self.answer_room())?;
        let answers = self
            .wait(self.call.services.kv.read(&host_reads))?
            .map_err(kv_error)?;
        Ok(host_reads
            .iter()
            .zip(answers)
            .map(|(read, answer)| match (read, answer) {
                (_, Answer::Value(value)) => wit::ReadAnswer::Value(value),
                (read, Answer::Page(page)) => {
                    wit::ReadAnswer::Page(wit_page(read.partition(), page))
                }
            })
            .collect())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn key_ref(partition: &str) -> wit::KeyRef {
        wit::KeyRef {
            partition: partition.into(),
            key: b"k".to_vec(),
        }
    }

    fn entry(partition: &str) -> wit::Entry {
        wit::Entry {
            partition: partition.into(),
            key: b"k".to_vec(),
            value: b"v".to_vec(),
        }
    }

    fn grants() -> Grants {
        Grants::none()
            .partition("mine")
            .unwrap()
            .read_partition("index")
            .unwrap()
    }

    #[test]
    fn a_batch_may_guard_on_a_read_only_partition_and_write_its_own() {
        let batch = wit::Batch {
            preconditions: vec![
                wit::Precondition::Absent(key_ref("index")),
                wit::Precondition::Equals(entry("index")),
            ],
            writes: vec![wit::Write::Put(entry("mine"))],
        };
        let converted = convert_batch(&grants(), batch).unwrap();
        assert_eq!(converted.preconditions.len(), 2);
        assert_eq!(converted.writes.len(), 1);
    }

    #[test]
    fn a_write_to_a_read_only_partition_is_refused_saying_so() {
        for write in [
            wit::Write::Put(entry("index")),
            wit::Write::Delete(key_ref("index")),
        ] {
            let batch = wit::Batch {
                preconditions: Vec::new(),
                writes: vec![write],
            };
            match convert_batch(&grants(), batch) {
                Err(Error::AccessDenied(message)) => {
                    assert!(message.contains("reading only"), "{message}");
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn an_ungranted_partition_is_neither_readable_nor_a_guard() {
        assert!(readable(&grants(), "other").is_err());
        let batch = wit::Batch {
            preconditions: vec![wit::Precondition::Absent(key_ref("other"))],
            writes: Vec::new(),
        };
        assert!(matches!(
            convert_batch(&grants(), batch),
            Err(Error::AccessDenied(_))
        ));
        assert_eq!(readable(&grants(), "index").unwrap().as_str(), "index");
    }

    #[test]
    fn a_read_only_store_is_readable_but_not_writable() {
        let grants = Grants::none().read_store("serving").store("preserved");
        assert!(grants.may_read_store("serving"));
        assert!(grants.may_read_store("preserved"));
        assert!(!grants.stores.contains("serving"));
        assert!(!grants.may_read_store("other"));
    }
}
