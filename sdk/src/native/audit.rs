use crate::Error;
use crate::bindings::host::custodian::host::audit::Entry;
use crate::bindings::host::custodian::host::kv::{Batch, Outcome};

/// The native host's `audit.append`; see `wit/deps/host/audit.wit`.
pub fn append(entry: &Entry) -> Result<(), Error> {
    check_entry(entry)?;
    super::with(|host| host.audit.push(entry.clone()));
    Ok(())
}

/// The native host's `audit.apply-with`; see `wit/deps/host/audit.wit`.
pub fn apply_with(batch: &Batch, entries: &[Entry]) -> Result<Outcome, Error> {
    if entries.len() > 8 {
        return Err(Error::InvalidArgument(
            "apply-with carries at most 8 audit entries".into(),
        ));
    }
    for entry in entries {
        check_entry(entry)?;
    }
    let outcome = super::kv::apply(batch)?;
    if outcome == Outcome::Committed {
        super::with(|host| host.audit.extend(entries.iter().cloned()));
    }
    Ok(outcome)
}

/// The host's audit bounds.
pub(crate) fn check_entry(entry: &Entry) -> Result<(), Error> {
    let ok = (1..=128).contains(&entry.event.len())
        && entry.targets.len() <= 64
        && entry.targets.iter().all(|t| t.len() <= 256)
        && entry.detail.as_ref().is_none_or(|d| d.len() <= 4096);
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidArgument(
            "audit entry exceeds its bounds".into(),
        ))
    }
}
