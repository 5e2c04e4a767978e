//! [`ObjectKey`]: an object key checked once, where it enters.

use std::fmt;
use std::ops::Deref;

use super::ObjectError;

/// An object key that passed [`ObjectKey::new`]'s rules. Every
/// [`ObjectStore`](super::ObjectStore) operation takes one, so a backend
/// never re-checks a key: the rules are written once, here, and a key that
/// exists is a valid one.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey(String);

/// Shown as the quoted key, as a `&str` is: error messages quote keys with
/// `{key:?}` whichever type holds them.
impl fmt::Debug for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.0.as_str(), f)
    }
}

impl ObjectKey {
    /// Checks `key` by the contract's object-key rule
    /// ([`custodian_contract::object_key::check`]), which the SDK's native
    /// host checks too: 1..=1024 bytes of UTF-8 (S3's limit); no NUL or
    /// other control characters (NUL separates key from version in
    /// cursors; control characters break logs and paths); `/`-separated
    /// segments, none empty and none `.` or `..` (keys are paths on the
    /// filesystem backend, and a key must never name anything outside its
    /// store).
    ///
    /// # Errors
    /// [`ObjectError::InvalidArgument`] naming what is wrong.
    pub fn new(key: impl Into<String>) -> Result<Self, ObjectError> {
        let key = key.into();
        match custodian_contract::object_key::check(&key) {
            Ok(()) => Ok(Self(key)),
            Err(why) => Err(ObjectError::InvalidArgument(
                format!("object key {key:?}: {why}").into(),
            )),
        }
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key's text, owned.
    pub fn into_string(self) -> String {
        self.0
    }
}

impl Deref for ObjectKey {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for ObjectKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<&str> for ObjectKey {
    type Error = ObjectError;

    fn try_from(key: &str) -> Result<Self, ObjectError> {
        Self::new(key)
    }
}

impl TryFrom<String> for ObjectKey {
    type Error = ObjectError;

    fn try_from(key: String) -> Result<Self, ObjectError> {
        Self::new(key)
    }
}

impl From<ObjectKey> for String {
    fn from(key: ObjectKey) -> Self {
        key.0
    }
}

#[cfg(test)]
mod tests {
    use super::ObjectKey;
    use crate::MAX_OBJECT_KEY_BYTES;

    #[test]
    fn a_key_is_checked_once_when_it_is_made() {
        for good in ["a", "a/b/c", "with space/ünïcode", "a.b/..c"] {
            assert_eq!(ObjectKey::new(good).unwrap().as_str(), good);
        }
        let longest = "k".repeat(MAX_OBJECT_KEY_BYTES);
        assert!(ObjectKey::new(longest.clone()).is_ok());
        for bad in [
            String::new(),
            longest + "k",
            "a\0b".into(),
            "a\nb".into(),
            "/a".into(),
            "a/".into(),
            "a//b".into(),
            "a/./b".into(),
            "../a".into(),
        ] {
            assert!(ObjectKey::new(bad.clone()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_refused_key_is_an_invalid_argument_quoting_the_key_and_the_reason() {
        let got = ObjectKey::new("a//b").unwrap_err();
        assert_eq!(
            got,
            crate::ObjectError::InvalidArgument(
                "object key \"a//b\": has an empty segment (a leading, trailing or doubled '/')"
                    .into()
            )
        );
        let got = ObjectKey::new("").unwrap_err().to_string();
        assert_eq!(
            got,
            "invalid argument: object key \"\": must be 1..=1024 bytes, not 0"
        );
    }
}
