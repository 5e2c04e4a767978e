//! `custodian:host/audit`: immediate appends to the host's audit log.

use super::HostView;
use super::kv::kv_error;
use crate::bindings::HostError;
use crate::bindings::host::custodian::host::audit as wit;
use crate::bindings::host::custodian::host::types::Error;
use custodian_core::audit::{self, Record};

impl wit::Host for HostView<'_> {
    fn append(&mut self, entry: wit::Entry) -> Result<(), HostError> {
        self.charge()?;
        let record = Record {
            at_ms: self.call.services.clock.now_ms(),
            actor: self.call.actor.clone(),
            event: entry.event,
            targets: entry.targets,
            detail: entry.detail,
        };
        record
            .validate()
            .map_err(|e| HostError::Guest(Error::InvalidArgument(e)))?;
        self.wait(audit::append(self.call.services.kv.as_ref(), &record))?
            .map_err(kv_error)
    }
}
