//! Object keys under the store's prefix, and the URL-encoded copy source
//! S3 wants for server-side copies.

use super::super::{MAX_OBJECT_KEY_BYTES, ObjectError, ObjectKey};

/// Maps store keys to bucket keys and back.
#[derive(Debug, Clone)]
pub(super) struct Keys {
    /// `""` or a `/`-terminated path (checked by the config).
    prefix: String,
}

impl Keys {
    /// Keys under `prefix`.
    pub fn new(prefix: String) -> Self {
        Self { prefix }
    }

    /// The prefix itself.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The bucket key of store key `key`.
    ///
    /// # Errors
    /// `InvalidArgument` for a key that the prefix pushes past S3's
    /// 1024-byte limit.
    pub fn full(&self, key: &ObjectKey) -> Result<String, ObjectError> {
        self.unchecked(key)
    }

    /// The bucket key of a listing bound (a prefix or cursor), which need
    /// not be a valid key.
    ///
    /// # Errors
    /// `InvalidArgument` past S3's key limit.
    pub fn unchecked(&self, key: &str) -> Result<String, ObjectError> {
        let full = format!("{}{key}", self.prefix);
        if full.len() > MAX_OBJECT_KEY_BYTES {
            return Err(ObjectError::InvalidArgument(format!(
                "{key:?} under the store prefix {:?} is {} bytes, past S3's {MAX_OBJECT_KEY_BYTES}",
                self.prefix,
                full.len()
            ).into()));
        }
        Ok(full)
    }

    /// The store key of bucket key `full`; `None` outside the prefix
    /// (a listing never returns one, but a misbehaving server could).
    pub fn relative<'a>(&self, full: &'a str) -> Option<&'a str> {
        full.strip_prefix(self.prefix.as_str())
    }
}

/// `bucket/key[?versionId=…]`, percent-encoded as `x-amz-copy-source`
/// requires (S3 decodes it; an unencoded `?` or `%` in a key would be
/// misread).
pub(super) fn copy_source(bucket: &str, full_key: &str, version_id: Option<&str>) -> String {
    let mut source = format!("{}/{}", encode(bucket), encode(full_key));
    if let Some(version) = version_id {
        source.push_str("?versionId=");
        source.push_str(&encode(version));
    }
    source
}

/// Percent-encodes everything but RFC 3986's unreserved characters and
/// `/`.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_map_under_the_prefix_and_back() {
        let keys = Keys::new("tier/".into());
        let key = ObjectKey::new("a/b").unwrap();
        assert_eq!(keys.full(&key).unwrap(), "tier/a/b");
        assert_eq!(keys.relative("tier/a/b"), Some("a/b"));
        assert_eq!(keys.relative("other/a"), None);
    }

    #[test]
    fn the_prefix_counts_against_the_key_limit() {
        let keys = Keys::new("tier/".into());
        let longest = ObjectKey::new("k".repeat(MAX_OBJECT_KEY_BYTES - 5)).unwrap();
        assert!(keys.full(&longest).is_ok());
        let over = ObjectKey::new("k".repeat(MAX_OBJECT_KEY_BYTES - 4)).unwrap();
        assert!(matches!(
            keys.full(&over),
            Err(ObjectError::InvalidArgument(_))
        ));
    }

    #[test]
    fn a_copy_source_is_percent_encoded() {
        assert_eq!(
            copy_source("b", "dir/a b?c%é", Some("v+1")),
            "b/dir/a%20b%3Fc%25%C3%A9?versionId=v%2B1"
        );
        assert_eq!(copy_source("b", "k", None), "b/k");
    }
}
