//! The native host's KV runs the host's own KV conformance suite
//! (`custodian_kv::kv_conformance_tests!`), so a plugin's native unit tests
//! see the guarded-batch, scan and bounds semantics every host backend has.
//!
//! [`NativeKv`] adapts the SDK's native `kv` functions to the host's
//! [`Kv`] trait. The native host is thread-local: each generated
//! `#[tokio::test]` runs on a current-thread runtime, so every call of one
//! check reaches the same state, and the factory resets that state, so every
//! check starts from an empty store even when libtest reuses a thread.

use std::sync::Arc;

use async_trait::async_trait;
use custodian_base::clock::Clock;
use custodian_kv::conformance::FixedClock;
use custodian_kv::{
    Answer, Batch, Kv, KvError, Outcome, Page, Partition, Precondition, Read, Write,
};
use custodian_sdk::kv::{
    Entry, KeyRef, Outcome as WitOutcome, Precondition as WitPrecondition, ReadAnswer, ReadOp,
    ScanRange, WitBatch, Write as WitWrite,
};
use custodian_sdk::{Error, testing};

/// The native host's KV behind the host's [`Kv`] trait, its clock following
/// the suite's [`FixedClock`].
struct NativeKv {
    clock: Arc<FixedClock>,
}

impl NativeKv {
    /// Empties this thread's native host and reads `clock` from now on.
    fn new(clock: Arc<FixedClock>) -> Self {
        testing::reset(clock.now_ms());
        Self { clock }
    }

    /// Sets the native host's "now" to the suite's clock, which a check may
    /// have moved since the last call.
    fn sync_clock(&self) {
        testing::set_now(self.clock.now_ms());
    }
}

/// A native host error as the host's KV reports it.
///
/// The KV-level cases map one to one. `AccessDenied` has no KV case: on the
/// real host it comes from the runtime's grant check above the KV, and the
/// only partitions no deployer can grant are the host-reserved ones, which
/// `Grants` refuses as an invalid argument; so it maps to `InvalidArgument`.
/// The object-store cases (and `unsupported`, `other`) are never a KV
/// answer: one is a conformance failure of the native host, reported as
/// such.
fn kv_error(error: Error) -> KvError {
    match error {
        Error::InvalidArgument(m) => KvError::InvalidArgument(m.into()),
        Error::Unavailable(m) => KvError::Unavailable(m.into()),
        Error::Corrupt(m) => KvError::Corrupt(m.into()),
        Error::BudgetExhausted(m) => KvError::BudgetExhausted(m.into()),
        Error::AccessDenied(m) => KvError::InvalidArgument(format!("access denied: {m}").into()),
        error @ (Error::NotFound(_)
        | Error::PreconditionFailed(_)
        | Error::Conflict(_)
        | Error::ChecksumMismatch(_)
        | Error::Unsupported(_)
        | Error::Other(_)) => {
            panic!("the native KV answered {error:?}, which no KV call answers")
        }
    }
}

/// The host's batch as the guest builds it.
fn wit_batch(batch: &Batch) -> WitBatch {
    let key_ref = |partition: &Partition, key: &[u8]| KeyRef {
        partition: partition.as_str().to_owned(),
        key: key.to_vec(),
    };
    let entry = |partition: &Partition, key: &[u8], value: &[u8]| Entry {
        partition: partition.as_str().to_owned(),
        key: key.to_vec(),
        value: value.to_vec(),
    };
    WitBatch {
        preconditions: batch
            .preconditions
            .iter()
            .map(|precondition| match precondition {
                Precondition::Absent { partition, key } => {
                    WitPrecondition::Absent(key_ref(partition, key))
                }
                Precondition::Equals {
                    partition,
                    key,
                    value,
                } => WitPrecondition::Equals(entry(partition, key, value)),
                Precondition::NotAfter(deadline) => WitPrecondition::NotAfter(*deadline),
            })
            .collect(),
        writes: batch
            .writes
            .iter()
            .map(|write| match write {
                Write::Put {
                    partition,
                    key,
                    value,
                } => WitWrite::Put(entry(partition, key, value)),
                Write::Delete { partition, key } => WitWrite::Delete(key_ref(partition, key)),
            })
            .collect(),
    }
}

/// A WIT page of `partition` as the host's.
fn host_page(partition: &Partition, page: custodian_sdk::kv::Page) -> Page {
    Page {
        entries: page
            .entries
            .into_iter()
            .map(|entry| {
                // The WIT page names each entry's partition: the scanned one.
                assert_eq!(entry.partition, partition.as_str());
                (entry.key, entry.value)
            })
            .collect(),
        next: page.next,
    }
}

#[async_trait]
impl Kv for NativeKv {
    async fn get(&self, partition: &Partition, key: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        self.sync_clock();
        custodian_sdk::kv::get(partition.as_str(), key).map_err(kv_error)
    }

    async fn get_many(
        &self,
        partition: &Partition,
        keys: &[Vec<u8>],
    ) -> Result<Vec<Option<Vec<u8>>>, KvError> {
        self.sync_clock();
        custodian_sdk::kv::get_many(partition.as_str(), keys).map_err(kv_error)
    }

    async fn scan(
        &self,
        partition: &Partition,
        start: &[u8],
        end: Option<&[u8]>,
        cursor: Option<&[u8]>,
        limit: u32,
    ) -> Result<Page, KvError> {
        self.sync_clock();
        let page = custodian_sdk::kv::scan(partition.as_str(), start, end, cursor, limit)
            .map_err(kv_error)?;
        Ok(host_page(partition, page))
    }

    async fn read(&self, reads: &[Read]) -> Result<Vec<Answer>, KvError> {
        self.sync_clock();
        let ops: Vec<ReadOp> = reads
            .iter()
            .map(|read| match read {
                Read::Get { partition, key } => ReadOp::Get(KeyRef {
                    partition: partition.as_str().to_owned(),
                    key: key.clone(),
                }),
                Read::Scan {
                    partition,
                    start,
                    end,
                    cursor,
                    limit,
                } => ReadOp::Scan(ScanRange {
                    partition: partition.as_str().to_owned(),
                    start: start.clone(),
                    end: end.clone(),
                    cursor: cursor.clone(),
                    limit: *limit,
                }),
            })
            .collect();
        let answers = custodian_sdk::kv::read(&ops).map_err(kv_error)?;
        Ok(reads
            .iter()
            .zip(answers)
            .map(|(read, answer)| match (read, answer) {
                (_, ReadAnswer::Value(value)) => Answer::Value(value),
                (read, ReadAnswer::Page(page)) => Answer::Page(host_page(read.partition(), page)),
            })
            .collect())
    }

    async fn apply(&self, batch: &Batch) -> Result<Outcome, KvError> {
        self.sync_clock();
        Ok(
            match custodian_sdk::kv::apply(&wit_batch(batch)).map_err(kv_error)? {
                WitOutcome::Committed => Outcome::Committed,
                WitOutcome::PreconditionFailed(index) => Outcome::PreconditionFailed { index },
                WitOutcome::DeadlinePassed => Outcome::DeadlinePassed,
            },
        )
    }
}

custodian_kv::kv_conformance_tests!(|clock: Arc<FixedClock>| NativeKv::new(clock));

// What the guest-facing host adds above a backend, which the suite (written
// for backends) cannot see: the runtime's grant check, refusing the
// host-reserved partitions before anything else, and the caller bounds,
// tighter than a backend's commit bounds.

/// A partition no deployer can grant.
const RESERVED: &str = "custodian.timers";

/// `custodian.` partitions answer `access-denied` on every call, as on the
/// host, where `Grants` cannot hold them.
#[test]
fn the_host_reserved_partitions_are_denied_like_an_ungranted_one() {
    use custodian_sdk::kv::{get, get_many, scan};
    testing::reset(0);
    let denied =
        |got: Result<(), Error>| assert!(matches!(got, Err(Error::AccessDenied(_))), "{got:?}");
    denied(get(RESERVED, b"k").map(drop));
    denied(get_many(RESERVED, &[]).map(drop));
    denied(scan(RESERVED, b"", None, None, 10).map(drop));
    let guard = custodian_sdk::Batch::new().require_absent(RESERVED, b"k".to_vec());
    denied(guard.apply().map(drop));
    let write = custodian_sdk::Batch::new().delete(RESERVED, b"k".to_vec());
    denied(write.apply().map(drop));
    // The grant check comes before the bounds, as on the host.
    let oversized = (0..=custodian_sdk::kv::MAX_BATCH_OPS)
        .fold(custodian_sdk::Batch::new(), |batch, i| {
            batch.put("mine", vec![b'k', i as u8], b"v".to_vec())
        })
        .put(RESERVED, b"k".to_vec(), b"v".to_vec());
    denied(oversized.apply().map(drop));
}

/// `get-many` checks its partition first, as the host's grant check does.
#[test]
fn the_partition_is_checked_even_when_no_key_is_asked() {
    testing::reset(0);
    let got = custodian_sdk::kv::get_many("Not A Name", &[]);
    assert!(matches!(got, Err(Error::InvalidArgument(_))), "{got:?}");
}

/// A scan bound longer than a key is refused, as `validate_scan` does.
#[test]
fn an_overlong_scan_bound_is_invalid() {
    let long = vec![b'k'; custodian_sdk::kv::MAX_KEY_BYTES + 1];
    testing::reset(0);
    for (start, end, cursor) in [
        (&long[..], None, None),
        (&b""[..], Some(&long[..]), None),
        (&b""[..], None, Some(&long[..])),
    ] {
        let got = custodian_sdk::kv::scan("a", start, end, cursor, 10);
        assert!(matches!(got, Err(Error::InvalidArgument(_))), "{got:?}");
        assert_eq!(
            custodian_kv::validate_scan(start, end, cursor, 10).is_err(),
            got.is_err()
        );
    }
}

/// The native host refuses exactly what `validate_caller_batch` refuses at
/// the bounds, below the backend's larger commit bounds the suite checks.
#[test]
fn a_guests_batch_is_held_to_the_caller_bounds_the_host_checks() {
    use custodian_sdk::kv::{MAX_BATCH_BYTES, MAX_BATCH_OPS, MAX_VALUE_BYTES};
    let ops = |n: usize| {
        (0..n).fold(custodian_sdk::Batch::new(), |batch, i| {
            batch.put("a", format!("k{i}").into_bytes(), b"v".to_vec())
        })
    };
    // Four one-byte keys whose values fill MAX_BATCH_BYTES exactly, then
    // one byte more.
    let value = MAX_BATCH_BYTES / 4 - 1;
    assert!(value < MAX_VALUE_BYTES);
    let bytes = |extra: usize| {
        (0..4u8).fold(custodian_sdk::Batch::new(), |batch, i| {
            let len = value + usize::from(i == 0) * extra;
            batch.put("a", vec![i + 1], vec![0; len])
        })
    };
    for (batch, fits) in [
        (ops(MAX_BATCH_OPS), true),
        (ops(MAX_BATCH_OPS + 1), false),
        (bytes(0), true),
        (bytes(1), false),
    ] {
        testing::reset(0);
        let host = host_batch(&batch.clone().into_wit());
        assert_eq!(custodian_kv::validate_caller_batch(&host).is_ok(), fits);
        // A backend takes more than a guest may send: the host's own rows.
        assert!(custodian_kv::validate_batch(&host).is_ok());
        let got = batch.apply();
        if fits {
            assert_eq!(got, Ok(WitOutcome::Committed));
        } else {
            assert!(matches!(got, Err(Error::InvalidArgument(_))), "{got:?}");
        }
    }
}

/// A guest's batch as the host's KV takes it (every partition valid).
fn host_batch(batch: &WitBatch) -> Batch {
    let p = |name: &str| Partition::new(name).expect("a valid partition");
    Batch {
        preconditions: batch
            .preconditions
            .iter()
            .map(|precondition| match precondition {
                WitPrecondition::Absent(r) => Precondition::Absent {
                    partition: p(&r.partition),
                    key: r.key.clone(),
                },
                WitPrecondition::Equals(e) => Precondition::Equals {
                    partition: p(&e.partition),
                    key: e.key.clone(),
                    value: e.value.clone(),
                },
                WitPrecondition::NotAfter(deadline) => Precondition::NotAfter(*deadline),
            })
            .collect(),
        writes: batch
            .writes
            .iter()
            .map(|write| match write {
                WitWrite::Put(e) => Write::Put {
                    partition: p(&e.partition),
                    key: e.key.clone(),
                    value: e.value.clone(),
                },
                WitWrite::Delete(r) => Write::Delete {
                    partition: p(&r.partition),
                    key: r.key.clone(),
                },
            })
            .collect(),
    }
}
