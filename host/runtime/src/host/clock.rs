//! `custodian:host/clock`: the call's clock (pinned in tests and replays).

use super::HostView;
use crate::bindings::host::custodian::host::clock as wit;

impl wit::Host for HostView<'_> {
    fn now_ms(&mut self) -> wasmtime::Result<u64> {
        Ok(self.call.services.clock.now_ms())
    }
}
