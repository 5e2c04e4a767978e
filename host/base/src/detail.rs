//! [`Detail`]: what each variant of a library error (the KV's, the object
//! store's) carries — a message for a person and, when a backend raised
//! it, the backend's own error as the source, so a caller can print or
//! inspect the cause without the message having to repeat it.

use std::error::Error;
use std::fmt;
use std::sync::Arc;

/// An error's message and the underlying error, if any (a redb error, an
/// etcd status, an S3 SDK error, an I/O or decoding error).
///
/// Two details are equal when their messages are: the source says how the
/// failure came about, not which failure it is, and most sources cannot be
/// compared at all. It dereferences to its message, so matching code can
/// read it as a `&str`.
#[derive(Clone)]
pub struct Detail {
    message: String,
    source: Option<Arc<dyn Error + Send + Sync + 'static>>,
}

impl Detail {
    /// A detail with `message` and no underlying error.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            source: None,
        }
    }

    /// A detail with `message` (what was being done) caused by `source`
    /// (which says why it failed; the message need not repeat it).
    pub fn caused_by(
        message: impl Into<String>,
        source: impl Error + Send + Sync + 'static,
    ) -> Self {
        Self {
            message: message.into(),
            source: Some(Arc::new(source)),
        }
    }

    /// The message, without the source.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The underlying error, if a backend raised one.
    pub fn source(&self) -> Option<&(dyn Error + Send + Sync + 'static)> {
        self.source.as_deref()
    }

    /// The message followed by each cause (`message: cause: cause…`), for
    /// a reader that sees only one line (an API answer, a guest).
    pub fn to_line(&self) -> String {
        let mut line = self.message.clone();
        let mut cause: Option<&(dyn Error + 'static)> = self.source.as_deref().map(|e| e as _);
        while let Some(error) = cause {
            line = format!("{line}: {error}");
            cause = error.source();
        }
        line
    }
}

impl From<String> for Detail {
    fn from(message: String) -> Self {
        Self::new(message)
    }
}

impl From<&str> for Detail {
    fn from(message: &str) -> Self {
        Self::new(message)
    }
}

impl From<Detail> for String {
    fn from(detail: Detail) -> Self {
        detail.message
    }
}

impl std::ops::Deref for Detail {
    type Target = str;

    fn deref(&self) -> &str {
        &self.message
    }
}

impl PartialEq for Detail {
    fn eq(&self, other: &Self) -> bool {
        self.message == other.message
    }
}

impl Eq for Detail {}

impl PartialEq<str> for Detail {
    fn eq(&self, other: &str) -> bool {
        self.message == other
    }
}

impl PartialEq<&str> for Detail {
    fn eq(&self, other: &&str) -> bool {
        self.message == *other
    }
}

impl PartialEq<String> for Detail {
    fn eq(&self, other: &String) -> bool {
        &self.message == other
    }
}

/// The message only: the source is the next link of the error's chain,
/// printed by whoever walks it.
impl fmt::Display for Detail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for Detail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.source {
            None => fmt::Debug::fmt(&self.message, f),
            Some(source) => f
                .debug_struct("Detail")
                .field("message", &self.message)
                .field("source", source)
                .finish(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Detail;

    #[test]
    fn details_with_the_same_message_are_equal_whatever_their_sources() {
        let io = std::io::Error::other("disk on fire");
        assert_eq!(Detail::caused_by("reading", io), Detail::new("reading"));
        assert_eq!(Detail::from("reading"), "reading");
    }

    #[test]
    fn a_detail_displays_its_message_and_lines_up_its_causes_on_request() {
        let detail = Detail::caused_by("reading kv.redb", std::io::Error::other("disk on fire"));
        assert_eq!(detail.to_string(), "reading kv.redb");
        assert_eq!(detail.to_line(), "reading kv.redb: disk on fire");
        assert_eq!(
            detail.source().map(ToString::to_string).as_deref(),
            Some("disk on fire")
        );
    }
}
