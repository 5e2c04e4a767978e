//! `custodian:host/log`: guest diagnostics into the host's log, bounded
//! per call.

use super::HostView;
use crate::bindings::host::custodian::host::log as wit;

/// Longest message kept; the rest is cut at a character boundary.
const MAX_MESSAGE_BYTES: usize = 4096;

impl wit::Host for HostView<'_> {
    fn log(&mut self, level: wit::Level, mut message: String) -> wasmtime::Result<()> {
        if self.meter.logs_left == 0 {
            self.meter.logs_dropped += 1;
            return Ok(());
        }
        self.meter.logs_left -= 1;
        if message.len() > MAX_MESSAGE_BYTES {
            let mut end = MAX_MESSAGE_BYTES;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            message.truncate(end);
            message.push('…');
        }
        let actor = self.call.actor.as_str();
        match level {
            wit::Level::Trace => tracing::trace!(target: "plugin", actor, "{message}"),
            wit::Level::Debug => tracing::debug!(target: "plugin", actor, "{message}"),
            wit::Level::Info => tracing::info!(target: "plugin", actor, "{message}"),
            wit::Level::Warn => tracing::warn!(target: "plugin", actor, "{message}"),
            wit::Level::Error => tracing::error!(target: "plugin", actor, "{message}"),
        }
        Ok(())
    }
}
