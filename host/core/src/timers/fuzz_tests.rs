//! Fuzz targets of the timer rows' codecs: due rows (key and state),
//! index rows. The KV holds them, but a plugin's batch, a restore or a
//! bad disk can leave anything there, so a row decodes or is `Corrupt`,
//! never a panic. Each is a `#[test]` that bolero runs for a bounded time
//! (see the README's "Fuzzing").

use super::*;
use custodian_base::fuzz_input::name;

/// One generated timer: kind, reference, due time, steps, failures, last
/// error and when.
type TimerFields = (Vec<u8>, Vec<u8>, u64, u64, u32, Option<String>, Option<u64>);

#[test]
fn timer_rows_round_trip_through_their_key_and_value() {
    bolero::check!()
        .with_type::<TimerFields>()
        .cloned()
        .for_each(
            |(kind, reference, due_ms, steps, failures, last_error, at)| {
                let kind = name(&kind);
                let timer = Timer {
                    due_ms,
                    state: TimerState {
                        steps,
                        failures,
                        last_error,
                        last_error_at_ms: at,
                    },
                    kind,
                    reference,
                };
                let key = due_key(timer.due_ms, &timer.kind, &timer.reference);
                let parsed = parse_due(&key, &timer.state.encode());
                if validate(&timer.kind, &timer.reference).is_ok() {
                    assert_eq!(parsed, Ok(timer.clone()));
                } else {
                    assert!(matches!(parsed, Err(TimerError::Corrupt(_))), "{parsed:?}");
                }
                assert_eq!(decode_due_ms(&timer.due_ms.to_be_bytes()), Ok(timer.due_ms));
            },
        );
}

#[test]
fn arbitrary_timer_rows_decode_to_valid_timers_or_are_corrupt() {
    bolero::check!()
        .with_type::<(bool, Vec<u8>, Vec<u8>)>()
        .for_each(|(framed, key, value)| {
            // Framed: past the class and format bytes, so the fuzzer's
            // bytes reach the fields rather than the first check.
            let (key, value) = if *framed {
                (
                    [&[DUE][..], key].concat(),
                    [&[STATE_FORMAT][..], value].concat(),
                )
            } else {
                (key.clone(), value.clone())
            };
            match parse_due(&key, &value) {
                Ok(timer) => {
                    assert_eq!(validate(&timer.kind, &timer.reference), Ok(()));
                    assert_eq!(due_key(timer.due_ms, &timer.kind, &timer.reference), key);
                    assert_eq!(TimerState::decode(&value), Ok(timer.state));
                }
                Err(error) => assert!(matches!(error, TimerError::Corrupt(_)), "{error:?}"),
            }
            match decode_due_ms(&value) {
                Ok(due) => assert_eq!(due.to_be_bytes().as_slice(), value),
                Err(error) => assert!(matches!(error, TimerError::Corrupt(_))),
            }
        });
}
