//! The object-key rule: which strings name an object. The host checks it
//! once where a key enters (`custodian_object::ObjectKey::new`) and the
//! SDK's native host checks the same, so a key a plugin's native tests
//! accept is one the host accepts.

use core::fmt;

use crate::limits::MAX_OBJECT_KEY_BYTES;

/// Why a string is not an object key. Its [`Display`](fmt::Display) is
/// the reason alone; each side prefixes the key its own way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyRefusal {
    /// Empty, or longer than [`MAX_OBJECT_KEY_BYTES`]; the key's length
    /// in bytes.
    Length(usize),
    /// A control character (NUL included) somewhere in the key.
    ControlCharacter,
    /// A leading, trailing or doubled `/`.
    EmptySegment,
    /// A segment that is `.` or `..`.
    DotSegment,
}

impl fmt::Display for KeyRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Length(len) => write!(f, "must be 1..={MAX_OBJECT_KEY_BYTES} bytes, not {len}"),
            Self::ControlCharacter => f.write_str("contains a control character"),
            Self::EmptySegment => {
                f.write_str("has an empty segment (a leading, trailing or doubled '/')")
            }
            Self::DotSegment => f.write_str("has a '.' or '..' segment"),
        }
    }
}

/// Checks `key`: 1..=[`MAX_OBJECT_KEY_BYTES`] bytes of UTF-8 (S3's
/// limit); no NUL or other control characters (NUL separates key from
/// version in cursors; control characters break logs and paths);
/// `/`-separated segments, none empty and none `.` or `..` (keys are paths
/// on the filesystem backend, and a key must never name anything outside
/// its store).
///
/// # Errors
/// The first [`KeyRefusal`] that applies, in the order above.
pub fn check(key: &str) -> Result<(), KeyRefusal> {
    if key.is_empty() || key.len() > MAX_OBJECT_KEY_BYTES {
        return Err(KeyRefusal::Length(key.len()));
    }
    if key.chars().any(char::is_control) {
        return Err(KeyRefusal::ControlCharacter);
    }
    for segment in key.split('/') {
        match segment {
            "" => return Err(KeyRefusal::EmptySegment),
            "." | ".." => return Err(KeyRefusal::DotSegment),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{KeyRefusal, check};
    use crate::limits::MAX_OBJECT_KEY_BYTES;
    use alloc::string::{String, ToString};

    #[test]
    fn a_key_is_one_to_max_bytes_of_non_control_utf8_in_named_segments() {
        for good in ["a", "a/b/c", "with space/ünïcode", "a.b/..c", "...", "`"] {
            assert_eq!(check(good), Ok(()), "{good:?}");
        }
        let longest: String = "k".repeat(MAX_OBJECT_KEY_BYTES);
        assert_eq!(check(&longest), Ok(()));
        let too_long = longest.clone() + "k";
        // The bound is on bytes, not characters.
        let too_long_utf8 = "é".repeat(MAX_OBJECT_KEY_BYTES / 2 + 1);
        for (bad, why) in [
            ("", KeyRefusal::Length(0)),
            (
                too_long.as_str(),
                KeyRefusal::Length(MAX_OBJECT_KEY_BYTES + 1),
            ),
            (
                too_long_utf8.as_str(),
                KeyRefusal::Length(MAX_OBJECT_KEY_BYTES + 2),
            ),
            ("a\0b", KeyRefusal::ControlCharacter),
            ("a\nb", KeyRefusal::ControlCharacter),
            ("a\u{7f}", KeyRefusal::ControlCharacter),
            ("/a", KeyRefusal::EmptySegment),
            ("a/", KeyRefusal::EmptySegment),
            ("a//b", KeyRefusal::EmptySegment),
            ("/", KeyRefusal::EmptySegment),
            ("a/./b", KeyRefusal::DotSegment),
            ("../a", KeyRefusal::DotSegment),
            ("..", KeyRefusal::DotSegment),
        ] {
            assert_eq!(check(bad), Err(why), "{bad:?}");
        }
    }

    #[test]
    fn a_refusal_reads_as_the_reason_alone() {
        assert_eq!(
            KeyRefusal::Length(0).to_string(),
            "must be 1..=1024 bytes, not 0"
        );
        assert_eq!(
            KeyRefusal::EmptySegment.to_string(),
            "has an empty segment (a leading, trailing or doubled '/')"
        );
    }
}
