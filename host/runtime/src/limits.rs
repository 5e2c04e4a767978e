//! The bounds on one plugin call, and the meter that enforces them.

use std::time::{Duration, Instant};

/// What one call may consume. Every call is bounded by all four; exceeding
/// one stops the call with [`LimitExceeded`] and the host keeps running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock time for the whole call, guest code and host calls alike.
    pub timeout: Duration,
    /// Linear memory the guest may grow to, in bytes.
    pub memory_bytes: usize,
    /// Capability calls (kv, objects, audit) the guest may make.
    pub host_calls: u32,
}

/// Hard ceilings on [`Limits`], whatever a deployer configures: a policy
/// call is a bounded checkpoint, not a job.
impl Limits {
    /// Longest timeout a deployer may set.
    pub const MAX_TIMEOUT: Duration = Duration::from_secs(60);
    /// Largest memory cap a deployer may set (also the size of each pooled
    /// memory slot).
    pub const MAX_MEMORY_BYTES: usize = 1 << 30;
    /// Largest host-call budget a deployer may set.
    pub const MAX_HOST_CALLS: u32 = 100_000;

    /// Checks the limits against the ceilings.
    ///
    /// # Errors
    /// A message naming the limit out of range.
    pub fn validate(&self) -> Result<(), String> {
        if self.timeout.is_zero() || self.timeout > Self::MAX_TIMEOUT {
            return Err(format!(
                "timeout {:?} is outside (0, {:?}]",
                self.timeout,
                Self::MAX_TIMEOUT
            ));
        }
        if self.memory_bytes < 1 << 20 || self.memory_bytes > Self::MAX_MEMORY_BYTES {
            return Err(format!(
                "memory limit of {} bytes is outside [1 MiB, 1 GiB]",
                self.memory_bytes
            ));
        }
        if self.host_calls > Self::MAX_HOST_CALLS {
            return Err(format!(
                "host-call budget {} exceeds {}",
                self.host_calls,
                Self::MAX_HOST_CALLS
            ));
        }
        Ok(())
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(2),
            memory_bytes: 64 << 20,
            host_calls: 1_000,
        }
    }
}

/// The limit a call ran into.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitExceeded {
    /// The wall-clock deadline passed, in guest code or in a host call.
    #[error("its time limit of {0:?}")]
    Time(Duration),
    /// The guest tried to grow its memory past the cap.
    #[error("its memory limit of {limit} bytes (it asked for {requested})")]
    Memory {
        /// The cap.
        limit: usize,
        /// What the guest asked to grow to.
        requested: usize,
    },
    /// The guest kept calling the host after its budget was spent.
    #[error("its budget of {0} host calls")]
    HostCalls(u32),
}

/// What happens to a host call under the meter.
pub(crate) enum Charge {
    /// Go ahead.
    Granted,
    /// The budget just ran out: answer `budget-exhausted` to the guest.
    Exhausted,
    /// The guest ignored `budget-exhausted`: trap.
    Stop(LimitExceeded),
}

/// Per-call accounting.
pub(crate) struct Meter {
    pub(crate) limits: Limits,
    pub(crate) deadline: Instant,
    calls_left: u32,
    told_exhausted: bool,
    /// Log lines the guest may still write this call; a guest looping on
    /// `log` must not flood the host's log.
    pub(crate) logs_left: u32,
    pub(crate) logs_dropped: u32,
}

/// Log lines per call before the rest are dropped.
pub(crate) const MAX_LOGS_PER_CALL: u32 = 256;

impl Meter {
    pub(crate) fn new(limits: &Limits) -> Self {
        Self {
            deadline: Instant::now() + limits.timeout,
            calls_left: limits.host_calls,
            told_exhausted: false,
            logs_left: MAX_LOGS_PER_CALL,
            logs_dropped: 0,
            limits: limits.clone(),
        }
    }

    /// Accounts for one capability call. The first call past the budget
    /// gets a `budget-exhausted` answer so a well-behaved policy can stop
    /// cleanly; any call after that traps, so one that ignores it cannot
    /// spin on the host.
    pub(crate) fn charge(&mut self) -> Charge {
        if self.calls_left > 0 {
            self.calls_left -= 1;
            Charge::Granted
        } else if !self.told_exhausted {
            self.told_exhausted = true;
            Charge::Exhausted
        } else {
            Charge::Stop(LimitExceeded::HostCalls(self.limits.host_calls))
        }
    }

    pub(crate) fn time_limit(&self) -> LimitExceeded {
        LimitExceeded::Time(self.limits.timeout)
    }
}
