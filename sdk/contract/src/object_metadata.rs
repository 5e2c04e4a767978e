//! The object-metadata rule: which user metadata a publish may carry. It
//! is S3's, so a publish that passes on one backend passes on all; the
//! host's stores and the SDK's native host check the same rule.

use core::fmt;

use crate::limits::{MAX_METADATA_BYTES, MAX_METADATA_ENTRIES};

/// Why a set of metadata pairs cannot be published. Its
/// [`Display`](fmt::Display) is the whole message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetadataRefusal<'a> {
    /// More than [`MAX_METADATA_ENTRIES`] entries; how many.
    TooManyEntries(usize),
    /// More than [`MAX_METADATA_BYTES`] of keys and values; how many.
    TooManyBytes(usize),
    /// A key outside lowercase `[a-z0-9_-]` (or empty), or a value outside
    /// printable ASCII; the pair's key.
    Pair(&'a str),
}

impl fmt::Display for MetadataRefusal<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooManyEntries(count) => {
                write!(f, "{count} metadata entries exceed {MAX_METADATA_ENTRIES}")
            }
            Self::TooManyBytes(total) => {
                write!(f, "{total} bytes of metadata exceed {MAX_METADATA_BYTES}")
            }
            Self::Pair(key) => write!(
                f,
                "metadata {key:?}: keys are lowercase [a-z0-9_-], values printable ASCII"
            ),
        }
    }
}

/// Whether `key` may name a metadata entry: non-empty lowercase
/// `[a-z0-9_-]` (S3 lowercases header names, so `A` and `a` would
/// collide).
pub fn is_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// Whether `value` may be a metadata value: printable ASCII (S3 re-encodes
/// anything else, so it would not read back as written).
pub fn is_value(value: &str) -> bool {
    value.bytes().all(|b| (b' '..=b'~').contains(&b))
}

/// Checks user metadata the way S3 will: at most [`MAX_METADATA_ENTRIES`]
/// entries (each comes back as a response header) and
/// [`MAX_METADATA_BYTES`] in total, every key [`is_key`] and every value
/// [`is_value`]. Distinct keys are the caller's to ensure (a map has them
/// by construction).
///
/// # Errors
/// The first [`MetadataRefusal`] that applies, in the order above.
pub fn check<'a, I>(pairs: I) -> Result<(), MetadataRefusal<'a>>
where
    I: IntoIterator<Item = (&'a str, &'a str)>,
    I::IntoIter: Clone,
{
    let pairs = pairs.into_iter();
    let count = pairs.clone().count();
    if count > MAX_METADATA_ENTRIES {
        return Err(MetadataRefusal::TooManyEntries(count));
    }
    let total: usize = pairs.clone().map(|(k, v)| k.len() + v.len()).sum();
    if total > MAX_METADATA_BYTES {
        return Err(MetadataRefusal::TooManyBytes(total));
    }
    for (key, value) in pairs {
        if !is_key(key) || !is_value(value) {
            return Err(MetadataRefusal::Pair(key));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{MetadataRefusal, check};
    use crate::limits::{MAX_METADATA_BYTES, MAX_METADATA_ENTRIES};
    use alloc::format;
    use alloc::string::{String, ToString};
    use alloc::vec::Vec;

    fn pairs(owned: &[(String, String)]) -> impl Iterator<Item = (&str, &str)> + Clone {
        owned.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    #[test]
    fn metadata_is_at_most_the_entries_and_bytes_s3_keeps() {
        let entries = |n: usize| -> Vec<(String, String)> {
            (0..n).map(|i| (format!("m{i:02}"), "v".into())).collect()
        };
        assert_eq!(check(pairs(&entries(MAX_METADATA_ENTRIES))), Ok(()));
        assert_eq!(
            check(pairs(&entries(MAX_METADATA_ENTRIES + 1))),
            Err(MetadataRefusal::TooManyEntries(MAX_METADATA_ENTRIES + 1))
        );
        let biggest = "v".repeat(MAX_METADATA_BYTES - 1);
        assert_eq!(check([("k", biggest.as_str())]), Ok(()));
        let too_big = "v".repeat(MAX_METADATA_BYTES);
        assert_eq!(
            check([("k", too_big.as_str())]),
            Err(MetadataRefusal::TooManyBytes(MAX_METADATA_BYTES + 1))
        );
        assert_eq!(check([]), Ok(()));
    }

    #[test]
    fn keys_are_lowercase_alphanumerics_dash_and_underscore_and_values_printable_ascii() {
        assert_eq!(check([("gen", "7"), ("a_b-0", " ~printable~ ")]), Ok(()));
        for (key, value) in [
            ("", "v"),
            ("Upper", "v"),
            ("has space", "v"),
            ("k\0", "v"),
            ("k", "line\nbreak"),
            ("k", "caf\u{e9}"),
        ] {
            assert_eq!(check([(key, value)]), Err(MetadataRefusal::Pair(key)));
        }
        assert_eq!(
            MetadataRefusal::Pair("Upper").to_string(),
            "metadata \"Upper\": keys are lowercase [a-z0-9_-], values printable ASCII"
        );
    }
}
