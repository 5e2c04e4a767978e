//! Exponential back-off, bounded: how long delivery waits after failures.
//! The same curve spaces one entry's attempts (by its own failures) and
//! the worker's attempts at a receiver that keeps failing (by its
//! failures in a row).

use std::time::Duration;

/// `initial` after the first failure, doubling with each one after it, never
/// more than `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
}

impl Backoff {
    /// The curve from `initial` up to `max`; an `initial` above `max` is
    /// held to it.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial: initial.min(max),
            max,
        }
    }

    /// The wait after the first failure.
    pub fn initial(&self) -> Duration {
        self.initial
    }

    /// The longest wait.
    pub fn max(&self) -> Duration {
        self.max
    }

    /// The wait after `failures` failures: none after none, then
    /// `initial × 2^(failures − 1)` up to the cap, for any count (it never
    /// overflows, and never gives up).
    pub fn after(&self, failures: u32) -> Duration {
        let Some(doublings) = failures.checked_sub(1) else {
            return Duration::ZERO;
        };
        // 2^31 × the smallest positive initial is already past any cap a
        // configuration allows, so the exponent can stop there.
        let factor = 1u32 << doublings.min(31);
        self.initial
            .checked_mul(factor)
            .map_or(self.max, |wait| wait.min(self.max))
    }

    /// [`Backoff::after`] in whole ms, saturating.
    pub fn after_ms(&self, failures: u32) -> u64 {
        u64::try_from(self.after(failures).as_millis()).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_wait_doubles_from_the_initial_one_and_stops_at_the_cap() {
        let backoff = Backoff::new(ms(500), ms(60_000));
        let waits: Vec<u64> = (0..=9).map(|n| backoff.after_ms(n)).collect();
        assert_eq!(
            waits,
            [
                0, 500, 1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000
            ]
        );
    }

    #[test]
    fn any_number_of_failures_waits_the_cap_without_overflowing() {
        let backoff = Backoff::new(ms(1), ms(3_600_000));
        for failures in [32, 33, 64, 1_000, u32::MAX] {
            assert_eq!(backoff.after(failures), ms(3_600_000), "{failures}");
        }
        let huge = Backoff::new(Duration::MAX, Duration::MAX);
        assert_eq!(huge.after(40), Duration::MAX);
    }

    #[test]
    fn an_initial_wait_above_the_cap_is_held_to_it() {
        let backoff = Backoff::new(ms(5_000), ms(1_000));
        assert_eq!(backoff.initial(), ms(1_000));
        assert_eq!(backoff.after(1), ms(1_000));
        assert_eq!(backoff.max(), ms(1_000));
    }
}
