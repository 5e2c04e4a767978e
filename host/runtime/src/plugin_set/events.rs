//! What a plugin set tells its host about itself, for the host's metrics:
//! the set lives below the server, so it reports through this trait
//! rather than through the server's counters.

/// Receives a plugin set's events.
pub trait SetEvents: Send + Sync {
    /// Whether this host now runs exactly the shared plugin set.
    fn in_sync(&self, in_sync: bool);

    /// One plugin swap of `world`: `completed`, `refused`, or `adopted`
    /// (made on another host, followed here).
    fn swap(&self, world: &str, outcome: &'static str);
}

/// Events nobody counts: a one-shot command has no metrics to keep.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoEvents;

impl SetEvents for NoEvents {
    fn in_sync(&self, _: bool) {}

    fn swap(&self, _: &str, _: &'static str) {}
}
