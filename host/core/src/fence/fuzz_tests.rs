//! Fuzz targets of the fencing rows' codec and key layout: every record
//! round-trips, and arbitrary stored bytes decode within the documented
//! bounds or are `Corrupt`, never a panic. Each is a `#[test]` that bolero
//! runs for a bounded time (see the README's "Fuzzing").

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::codec::{
    self, EpochLease, EpochRow, LeaseRecovery, LeasedShard, MAX_CHECKPOINT_BYTES, MAX_ROW_BYTES,
    NamespaceRecord, RevokeCheckpoint,
};
use super::keys;
use super::{FenceError, Namespace, ShardId, is_name};
use custodian_base::fuzz_input::name;
use custodian_kv::MAX_KEY_BYTES;

/// `record` decodes from its encoding to itself.
fn round_trips<T>(record: T)
where
    T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let bytes = codec::encode("record", &record).expect("records encode");
    assert_eq!(codec::decode_row::<T>("record", &bytes), Ok(record));
}

#[test]
fn fencing_records_round_trip_through_their_encoding() {
    bolero::check!()
        .with_type::<([u64; 8], Option<u64>, bool, Vec<u8>)>()
        .cloned()
        .for_each(|(n, ready, recovered, cursor)| {
            round_trips(EpochRow { generation: n[0] });
            round_trips(NamespaceRecord {
                config_version: n[1],
            });
            let recovery = LeaseRecovery {
                recovered_at_ms: n[2],
                declarations: n[3],
            };
            round_trips(recovery);
            round_trips(LeasedShard {
                epoch: n[0],
                acked_epoch: n[1],
                authority_generation: n[2],
                acked_authority_generation: n[3],
                expires_at_ms: n[4],
            });
            round_trips(EpochLease {
                epoch: n[5],
                authority_generation: n[6],
                authority_ready: ready,
                expires_at_ms: n[7],
                config_version: n[0],
            });
            let checkpoint = RevokeCheckpoint {
                generation: n[4],
                recovery: recovered.then_some(recovery),
                cursor,
            };
            let bytes = codec::encode("checkpoint", &checkpoint).expect("checkpoints encode");
            let decoded = codec::decode_checkpoint(&bytes);
            if checkpoint.cursor.len() <= MAX_KEY_BYTES {
                assert_eq!(decoded, Ok(checkpoint));
            } else {
                assert!(matches!(decoded, Err(FenceError::Corrupt(_))));
            }
        });
}

/// `result` is a value or `Corrupt`, nothing else.
fn corrupt_or_value<T>(result: Result<T, FenceError>) -> Option<T> {
    match result {
        Ok(value) => Some(value),
        Err(FenceError::Corrupt(_)) => None,
        Err(other) => panic!("a stored row failed as {other:?}, not Corrupt"),
    }
}

#[test]
fn arbitrary_fencing_rows_decode_within_their_bounds_or_are_corrupt() {
    bolero::check!()
        .with_type::<(bool, Vec<u8>)>()
        .for_each(|(framed, bytes)| {
            // Framed: past the format byte, so the fuzzer's bytes reach
            // the JSON.
            let bytes = if *framed {
                [&[1][..], bytes].concat()
            } else {
                bytes.clone()
            };
            let row_fits = bytes.len() <= MAX_ROW_BYTES;
            for decoded in [
                corrupt_or_value(codec::decode_row::<EpochRow>("row", &bytes)).is_some(),
                corrupt_or_value(codec::decode_row::<NamespaceRecord>("row", &bytes)).is_some(),
                corrupt_or_value(codec::decode_row::<LeaseRecovery>("row", &bytes)).is_some(),
                corrupt_or_value(codec::decode_row::<LeasedShard>("row", &bytes)).is_some(),
                corrupt_or_value(codec::decode_row::<EpochLease>("row", &bytes)).is_some(),
            ] {
                assert!(
                    row_fits || !decoded,
                    "a row over {MAX_ROW_BYTES} bytes decoded"
                );
            }
            if let Some(checkpoint) = corrupt_or_value(codec::decode_checkpoint(&bytes)) {
                assert!(bytes.len() <= MAX_CHECKPOINT_BYTES);
                assert!(checkpoint.cursor.len() <= MAX_KEY_BYTES);
            }
            let _ = corrupt_or_value(codec::epoch_of(Some(&bytes)));
        });
}

#[test]
fn leased_shard_keys_round_trip_and_foreign_keys_are_corrupt() {
    bolero::check!()
        .with_type::<(Vec<u8>, Vec<u8>, Vec<u8>)>()
        .for_each(|(namespace, shard, key)| {
            let namespace = format!("n{}", name(&namespace[..namespace.len().min(40)]));
            let ns = Namespace::new(namespace).expect("a short name of the alphabet");
            if let Ok(shard) = ShardId::new(name(shard)) {
                let key = keys::leased_shard(&ns, &shard);
                assert_eq!(keys::parse_leased_shard(&ns, &key), Ok(shard));
            }
            // Any key under the namespace's class range, or any at all.
            let (start, _) = keys::leased_shard_range(&ns);
            for key in [key.clone(), [start.as_slice(), key].concat()] {
                if let Some(shard) = corrupt_or_value(keys::parse_leased_shard(&ns, &key)) {
                    assert!(is_name(shard.as_str()));
                    assert_eq!(keys::leased_shard(&ns, &shard), key);
                }
            }
        });
}
