use crate::Error;
use crate::bindings::host::custodian::host::audit::Entry;

/// The native host's `audit.append`; see `wit/deps/host/audit.wit`.
pub fn append(entry: &Entry) -> Result<(), Error> {
    check_entry(entry)?;
    super::with(|host| host.audit.push(entry.clone()));
    Ok(())
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
