//! How redb's errors become [`KvError`]s: what cannot be decoded is
//! `Corrupt`, everything else (I/O, a refused transaction, a closed or
//! previously failed database) is `Unavailable`, always naming the file
//! and what was being done.

use std::any::Any;
use std::path::Path;

use crate::{Detail, KvError};

/// Maps `error`, met while `doing` something to the file at `path`.
pub(super) fn redb_error(doing: &str, path: &Path, error: ::redb::Error) -> KvError {
    use ::redb::Error as E;
    // redb's own error is the source: the message says only what was
    // being done, so a printed chain does not repeat it.
    let message = format!("{doing} {}", path.display());
    let detail = |error: ::redb::Error| Detail::caused_by(message, error);
    match error {
        // A table of ours always holds byte slices: any other shape, or a
        // multimap, was not written by this backend.
        E::Corrupted(_)
        | E::UpgradeRequired(_)
        | E::TableTypeMismatch { .. }
        | E::TableIsMultimap(_)
        | E::TypeDefinitionChanged { .. } => KvError::Corrupt(detail(error)),
        // redb reports a file that is not a database as invalid data, and
        // a damaged one can point past its end.
        E::Io(ref io)
            if matches!(
                io.kind(),
                std::io::ErrorKind::InvalidData | std::io::ErrorKind::UnexpectedEof
            ) =>
        {
            KvError::Corrupt(detail(error))
        }
        error => KvError::Unavailable(detail(error)),
    }
}

/// The message a panic carried, for reporting it as an error.
pub(super) fn describe_panic(panic: &(dyn Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}
