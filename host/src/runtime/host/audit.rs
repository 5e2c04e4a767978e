//! `custodian:host/audit`: immediate appends to the host's audit log.

use super::kv::kv_error;
use super::{HostError, HostView};
use crate::audit::{self, Record};
use crate::runtime::bindings::host::custodian::host::audit as wit;
use crate::runtime::bindings::host::custodian::host::types::Error;

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
