//! `custodian:policy/retention-oracle`: a policy's retention questions,
//! routed to the deployer's retention plugin (see
//! [`RetentionOracle`]).

use super::HostView;
use crate::bindings::HostError;
use crate::bindings::host::custodian::host::types::Error;
use crate::bindings::policy::retention::custodian::policy::retention_types as types;
use crate::bindings::policy::takedown::custodian::policy::retention_oracle as wit;
use custodian_core::decisions::PolicyError;
use custodian_core::decisions::retention::{Item, RetentionOracle};

fn wit_error(error: PolicyError) -> Error {
    match error {
        PolicyError::NotFound(m) => Error::NotFound(m),
        PolicyError::PreconditionFailed(m) => Error::PreconditionFailed(m),
        PolicyError::Conflict(m) => Error::Conflict(m),
        PolicyError::ChecksumMismatch(m) => Error::ChecksumMismatch(m),
        PolicyError::Corrupt(m) => Error::Corrupt(m),
        PolicyError::Unavailable(m) => Error::Unavailable(m),
        PolicyError::BudgetExhausted(m) => Error::BudgetExhausted(m),
        PolicyError::AccessDenied(m) => Error::AccessDenied(m),
        PolicyError::InvalidArgument(m) => Error::InvalidArgument(m),
    }
}

impl HostView<'_> {
    fn oracle(&mut self) -> Result<std::sync::Arc<dyn RetentionOracle>, HostError> {
        // A question runs a whole plugin call: it counts like any other
        // capability call, so a policy cannot ask without bound.
        self.charge()?;
        self.call.services.retention.clone().ok_or_else(|| {
            HostError::Guest(Error::Unavailable(
                "no retention plugin is configured on this host".into(),
            ))
        })
    }
}

impl wit::Host for HostView<'_> {
    fn assess(&mut self, item: types::Item, now_ms: u64) -> Result<types::Assessment, HostError> {
        let oracle = self.oracle()?;
        oracle
            .assess(Item::from(item), now_ms)
            .map(types::Assessment::from)
            .map_err(|e| HostError::Guest(wit_error(e)))
    }

    fn set_hold(&mut self, item: types::Item, enabled: bool) -> Result<types::Item, HostError> {
        let oracle = self.oracle()?;
        oracle
            .set_hold(Item::from(item), enabled)
            .map(types::Item::from)
            .map_err(|e| HostError::Guest(wit_error(e)))
    }
}
