//! Several rows and ranges read in one host call (`kv.read`): one
//! snapshot, and one round trip on a networked KV, where a step's reads
//! are most of its cost. A step gathers what it can ask without knowing
//! the answers, asks it at once, and takes the answers by the index each
//! read was given.

use std::collections::BTreeSet;

use custodian_sdk::Error;
use custodian_sdk::kv::{self, KeyRef, MAX_READS, Page, ReadAnswer, ReadOp, ScanRange};

use crate::codec::{Id, corrupt};
use crate::keys::{self, PARTITION};

/// Which of `objects` have a row tagged `tag` of request `id`, in one
/// `get-many`.
pub fn tagged<'a>(
    tag: &str,
    id: &Id,
    objects: impl IntoIterator<Item = &'a Id>,
) -> Result<BTreeSet<Id>, Error> {
    let objects: Vec<Id> = objects.into_iter().copied().collect();
    if objects.is_empty() {
        return Ok(BTreeSet::new());
    }
    let rows = kv::get_many(PARTITION, &keys::object_keys(id, &objects, &[tag]))?;
    Ok(objects
        .into_iter()
        .zip(rows)
        .filter(|(_, row)| row.is_some())
        .map(|(object, _)| object)
        .collect())
}

/// Reads to make together, in the order added.
#[derive(Debug, Default)]
pub struct Reads {
    ops: Vec<ReadOp>,
}

impl Reads {
    /// No reads yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a read of `key` in `partition`; the index of its answer.
    pub fn get(&mut self, partition: &str, key: Vec<u8>) -> usize {
        self.ops.push(ReadOp::Get(KeyRef {
            partition: partition.to_owned(),
            key,
        }));
        self.ops.len() - 1
    }

    /// Adds a scan of up to `limit` rows of `[start, end)` in `partition`
    /// after `cursor`; the index of its answer.
    pub fn scan(
        &mut self,
        partition: &str,
        (start, end): (Vec<u8>, Vec<u8>),
        cursor: Option<Vec<u8>>,
        limit: u32,
    ) -> usize {
        self.ops.push(ReadOp::Scan(ScanRange {
            partition: partition.to_owned(),
            start,
            end: Some(end),
            cursor,
            limit,
        }));
        self.ops.len() - 1
    }

    /// Makes the reads: one host call, however many they are (at most
    /// [`MAX_READS`]; more is a bug of the step that gathered them).
    pub fn run(self) -> Result<Answers, Error> {
        if self.ops.len() > MAX_READS {
            return Err(Error::InvalidArgument(format!(
                "a step gathered {} reads for one snapshot, more than {MAX_READS}",
                self.ops.len()
            )));
        }
        if self.ops.is_empty() {
            return Ok(Answers(Vec::new()));
        }
        let answers = kv::read(&self.ops)?;
        if answers.len() != self.ops.len() {
            return Err(corrupt("the host answered a read with another count"));
        }
        Ok(Answers(answers.into_iter().map(Some).collect()))
    }
}

/// The answers of [`Reads::run`], each taken once by its index.
#[derive(Debug)]
pub struct Answers(Vec<Option<ReadAnswer>>);

impl Answers {
    /// The value the get at `index` read.
    pub fn value(&mut self, index: usize) -> Result<Option<Vec<u8>>, Error> {
        match self.0.get_mut(index).and_then(Option::take) {
            Some(ReadAnswer::Value(value)) => Ok(value),
            _ => Err(corrupt("a read's answer is missing or not a value")),
        }
    }

    /// The page the scan at `index` read.
    pub fn page(&mut self, index: usize) -> Result<Page, Error> {
        match self.0.get_mut(index).and_then(Option::take) {
            Some(ReadAnswer::Page(page)) => Ok(page),
            _ => Err(corrupt("a read's answer is missing or not a page")),
        }
    }
}
