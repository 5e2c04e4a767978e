//! How redb's errors become [`KvError`]s: what cannot be decoded is
//! `Corrupt`, everything else (I/O, a refused transaction, a closed or
//! previously failed database) is `Unavailable`, always naming the file
//! and what was being done.

use std::any::Any;
use std::path::Path;

use crate::KvError;

/// Maps `error`, met while `doing` something to the file at `path`.
pub(super) fn redb_error(doing: &str, path: &Path, error: ::redb::Error) -> KvError {
    use ::redb::Error as E;
    let message = format!("{doing} {}: {error}", path.display());
    match error {
        // A table of ours always holds byte slices: any other shape, or a
        // multimap, was not written by this backend.
        E::Corrupted(_)
        | E::UpgradeRequired(_)
        | E::TableTypeMismatch { .. }
        | E::TableIsMultimap(_)
        | E::TypeDefinitionChanged { .. } => KvError::Corrupt(message),
        // redb reports a file that is not a database as invalid data, and
        // a damaged one can point past its end.
        E::Io(ref io)
            if matches!(
                io.kind(),
                std::io::ErrorKind::InvalidData | std::io::ErrorKind::UnexpectedEof
            ) =>
        {
            KvError::Corrupt(message)
        }
        _ => KvError::Unavailable(message),
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
