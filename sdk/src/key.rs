//! Order-preserving key layout.
//!
//! Keys are compared bytewise, so a key is built from components whose
//! encodings sort the way their values do and can never run into each
//! other:
//!
//! - [`Key::str`] / [`Key::bytes`]: the bytes with every `0x00` written as
//!   `0x00 0xFF`, then a `0x00` terminator. A component that is a prefix of
//!   another sorts first, and no component can forge a boundary.
//! - [`Key::u64`]: 8 big-endian bytes, so numbers sort numerically.
//! - [`Key::fixed`]: raw bytes, for values of one fixed width (hashes).
//!
//! ```
//! use custodian_sdk::key::{Key, prefix_end};
//! let a = Key::new().str("state").u64(7).build();
//! let b = Key::new().str("state").u64(300).build();
//! assert!(a < b);
//! let prefix = Key::new().str("state").build();
//! assert!(a.starts_with(&prefix) && b < prefix_end(&prefix).unwrap());
//! ```

/// A key under construction.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Key(Vec<u8>);

impl Key {
    /// The empty key.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a string component.
    pub fn str(self, value: &str) -> Self {
        self.bytes(value.as_bytes())
    }

    /// Appends a variable-length byte component.
    pub fn bytes(mut self, value: &[u8]) -> Self {
        for &byte in value {
            self.0.push(byte);
            if byte == 0 {
                self.0.push(0xFF);
            }
        }
        self.0.push(0);
        self
    }

    /// Appends a number that sorts numerically.
    pub fn u64(mut self, value: u64) -> Self {
        self.0.extend_from_slice(&value.to_be_bytes());
        self
    }

    /// Appends raw bytes; only for components of one fixed width.
    pub fn fixed(mut self, value: &[u8]) -> Self {
        self.0.extend_from_slice(value);
        self
    }

    /// The encoded key.
    pub fn build(self) -> Vec<u8> {
        self.0
    }
}

/// The smallest key greater than every key that starts with `prefix`, for
/// the exclusive end of a prefix scan; `None` when no such key exists
/// (`prefix` is empty or all `0xFF`), meaning "scan to the end".
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xFF {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_components_sort_like_their_values_even_with_zero_bytes() {
        let mut values = ["", "a", "a\0", "a\0b", "ab", "b", "\0"];
        let mut keys: Vec<Vec<u8>> = values.iter().map(|v| Key::new().str(v).build()).collect();
        values.sort();
        keys.sort();
        let decoded: Vec<Vec<u8>> = values.iter().map(|v| Key::new().str(v).build()).collect();
        assert_eq!(keys, decoded);
    }

    #[test]
    fn a_component_cannot_forge_the_boundary_of_the_next() {
        let one = Key::new().str("a\0").str("b").build();
        let two = Key::new().str("a").str("\0b").build();
        assert_ne!(one, two);
    }

    #[test]
    fn numbers_sort_numerically() {
        assert!(Key::new().u64(9).build() < Key::new().u64(10).build());
        assert!(Key::new().u64(255).build() < Key::new().u64(256).build());
    }

    #[test]
    fn prefix_end_bounds_exactly_the_keys_with_that_prefix() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_end(b"\xff\xff"), None);
        assert_eq!(prefix_end(b""), None);
    }
}
