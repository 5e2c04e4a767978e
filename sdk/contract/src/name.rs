//! The one alphabet of names that become key segments: partitions, fence
//! namespaces and shards, timer kinds, node names and repository parts.
//!
//! `[a-z0-9._-]` excludes `/` and `\0`, the separators of every key layout
//! built from these names, so a name can never split into two segments or
//! collide with a layout's own punctuation.

/// Whether `name` is 1..=`max_bytes` bytes of `[a-z0-9._-]`.
pub fn is_name(name: &str, max_bytes: usize) -> bool {
    (1..=max_bytes).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
}

/// Longest repository namespace or name, in bytes: both end up inside
/// content-index keys, which the host bounds to 1 KiB.
pub const MAX_REPOSITORY_PART_BYTES: usize = 64;

/// Whether `part` may be a repository namespace or name: a name of at most
/// [`MAX_REPOSITORY_PART_BYTES`] not starting with `.` (no hidden or
/// relative-looking names).
pub fn is_repository_part(part: &str) -> bool {
    is_name(part, MAX_REPOSITORY_PART_BYTES) && !part.starts_with('.')
}

#[cfg(test)]
mod tests {
    use super::{is_name, is_repository_part};

    #[test]
    fn a_name_is_one_to_max_bytes_of_lower_case_digits_dot_underscore_and_dash() {
        assert!(is_name("a", 3));
        assert!(is_name("a.b", 3));
        assert!(is_name("0_-", 3));
        assert!(!is_name("", 3));
        assert!(!is_name("abcd", 3));
        for bad in ["A", "a/b", "a\0", "é", " "] {
            assert!(!is_name(bad, 8), "{bad:?}");
        }
    }

    #[test]
    fn a_repository_part_is_a_name_that_does_not_start_with_a_dot() {
        assert!(is_repository_part("alpha"));
        assert!(is_repository_part("a.b"));
        assert!(!is_repository_part(".hidden"));
        assert!(!is_repository_part(".."));
        let long = core::str::from_utf8(&[b'a'; 65]).expect("ASCII");
        assert!(!is_repository_part(long));
    }
}
