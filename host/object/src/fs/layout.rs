//! Where things live under the store's root, and how an object key
//! becomes a path.
//!
//! ```text
//! <root>/
//!   format          {"format":3,"versioned":true}: written once, at creation
//!   lock            the arbiter (see `lock`)
//!   staging.lock    the staging gate, taken by recovery (see `lock`)
//!   staging/        files being written, each locked by its writer
//!   journal/        segments of the journal of small publishes (format 3;
//!                   see `journal`)
//!   uploads/<id>/   one multipart assembly: `meta` and `part-NNNNN`
//!   objects/        keys: one directory per key segment but the last;
//!     a%v/<id>        the versions of key `a`
//!     a/b%v/<id>      the versions of key `a/b`
//! ```
//!
//! **Two spellings of a key's version directory**, fixed by the store's
//! format record ([`Spelling`]). Format 2, which new stores are created
//! with, appends `%v` to the key's last name: `a/b%v/`. Format 1, which
//! stores created before it keep, gave the last segment a directory of
//! its own and the versions a `%v` child: `a/b/%v/`. So a key's first
//! publish creates one directory in format 2 where it created two in
//! format 1, and syncs one parent instead of two under the arbiter; keys
//! of a common prefix (`logs/1`, `logs/2`, …) share that parent, so a
//! group of first publishes syncs it once.
//!
//! A key is `/`-separated segments (already checked by
//! [`ObjectKey::new`]: none empty, `.` or `..`, no control characters).
//! Each segment becomes one directory name: bytes outside
//! `[A-Za-z0-9._-]` are percent-encoded as `%XX` (upper-case hex), and so
//! are `%` itself and a segment's leading `.` (so no name is hidden or
//! special). Because `%` is always followed by two hex digits in an
//! encoded name, `%v` (a key's version directory, or the end of its name)
//! and `%+` (below) can never be produced by the encoding: key `a` and key
//! `a/b` live in `a%v` and `a/b%v` (format 1: `a/%v` and `a/b/%v`) and
//! never collide, and no prefix directory's name ends in `%v`.
//!
//! **Deviation from the brief, and why.** The brief said to refuse a
//! segment whose encoding exceeds 255 bytes (`NAME_MAX`). The conformance
//! suite, though, requires the longest legal key (1024 bytes, one segment)
//! to be storable, and a 1024-byte key must not be legal on S3 and memory
//! but refused here. So a segment whose encoding is longer than
//! [`MAX_CHUNK`] bytes is split into chunks: the first is a plain name,
//! each following chunk is a child directory named `%+<chunk>` (again a
//! name the encoding cannot produce, so `abc/%+def` is segment `abcdef`
//! while `abc/def` is two segments; in format 2 the versions of key
//! `abcdef` are in `abc/%+def%v`). Chunks are cut only between encoded
//! units, never inside a `%XX`. The encoding is canonical (greedy chunks,
//! exactly one spelling per byte), and listings re-encode every key they
//! find and skip any path that is not that key's canonical spelling, so
//! stray files never surface as keys.
//!
//! Names are compared byte-for-byte: the store must live on a
//! case-sensitive filesystem (not the macOS or Windows defaults), where
//! `A` and `a` are different names.
//!
//! The longest relative path a key can produce is [`MAX_KEY_PATH_BYTES`];
//! [`Layout::new`] refuses a root so long that root + that path would
//! exceed `PATH_MAX`, so every legal key is storable under every accepted
//! root.

use custodian_base::detail::Detail;
use std::path::{Path, PathBuf};

use crate::{MAX_OBJECT_KEY_BYTES, ObjectError, ObjectKey};

use super::ids::VERSION_ID_LEN;

/// The directory of every key.
pub(super) const OBJECTS: &str = "objects";
/// Where files are written before they are published.
pub(super) const STAGING: &str = "staging";
/// Multipart assemblies.
pub(super) const UPLOADS: &str = "uploads";
/// The journal's segments (format 3).
pub(super) const JOURNAL: &str = "journal";
/// The arbiter's lock file.
pub(super) const LOCK_FILE: &str = "lock";
/// The staging gate's lock file.
pub(super) const GATE_FILE: &str = "staging.lock";
/// The format and versioning record.
pub(super) const FORMAT_FILE: &str = "format";
/// What marks a key's version directory: its whole name in format 1, the
/// end of its name in format 2.
pub(super) const VERSIONS_DIR: &str = "%v";
/// The name prefix of a long segment's continuation chunk.
pub(super) const CONTINUATION: &str = "%+";
/// Longest encoded chunk of one segment, in bytes. With the `%+` prefix and
/// the `%v` suffix a name stays well under `NAME_MAX` (255).
pub(super) const MAX_CHUNK: usize = 240;

/// Longest relative path below the root that any legal key produces, to
/// one of its version files: `objects/`, every key byte encoded as `%XX`,
/// a `/%+` per extra chunk, `/%v/` and a version id. (Format 1's spelling;
/// format 2's is one byte shorter.)
pub(super) const MAX_KEY_PATH_BYTES: usize = OBJECTS.len()
    + 1
    + 3 * MAX_OBJECT_KEY_BYTES
    + 3 * (3 * MAX_OBJECT_KEY_BYTES).div_ceil(MAX_CHUNK)
    + 1
    + VERSIONS_DIR.len()
    + 1
    + VERSION_ID_LEN;

/// Linux's `PATH_MAX`, the terminating NUL included.
const PATH_MAX: usize = 4096;

/// Longest root path this store accepts (see the module documentation).
pub(super) const MAX_ROOT_BYTES: usize = PATH_MAX - 1 - 1 - MAX_KEY_PATH_BYTES;

/// How a key's version directory is spelled (see the module
/// documentation); a store's format record fixes it for life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Spelling {
    /// Format 1: `a/b/%v/`, a directory for the last segment and a `%v`
    /// child in it.
    Nested,
    /// Format 2: `a/b%v/`, the last name with `%v` appended.
    Suffixed,
}

impl Spelling {
    /// Whether a directory named `name` below `objects/` is a key's
    /// version directory in this spelling (the encoding never ends a name
    /// in `%v`).
    pub fn is_versions_name(self, name: &[u8]) -> bool {
        let marker = VERSIONS_DIR.as_bytes();
        match self {
            Self::Nested => name == marker,
            Self::Suffixed => name.len() > marker.len() && name.ends_with(marker),
        }
    }
}

/// What a store's format record fixes for its life: how keys are spelled,
/// and whether small publishes go through the journal (`journal`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Format {
    pub spelling: Spelling,
    pub journaled: bool,
}

impl Format {
    /// What this build creates: format 3.
    pub const NEW: Self = Self {
        spelling: Spelling::Suffixed,
        journaled: true,
    };

    /// The format numbered `number`, if this build reads it. A format 1
    /// or 2 store is opened as it was made, without a journal: turning
    /// one on would leave the store unreadable by the builds that made it
    /// (they would ignore the journal), so only new stores get one.
    pub fn of_number(number: u32) -> Option<Self> {
        let (spelling, journaled) = match number {
            1 => (Spelling::Nested, false),
            2 => (Spelling::Suffixed, false),
            3 => (Spelling::Suffixed, true),
            _ => return None,
        };
        Some(Self {
            spelling,
            journaled,
        })
    }

    /// The number its record holds.
    pub fn number(self) -> u32 {
        match (self.spelling, self.journaled) {
            (Spelling::Nested, _) => 1,
            (Spelling::Suffixed, false) => 2,
            (Spelling::Suffixed, true) => 3,
        }
    }
}

/// The fixed paths under one root, and how keys are spelled below
/// `objects/`.
#[derive(Debug, Clone)]
pub(super) struct Layout {
    /// Set from the format record when the store is opened; new stores
    /// are [`Format::NEW`].
    pub spelling: Spelling,
    /// Whether the store has a journal (format 3).
    pub journaled: bool,
    pub root: PathBuf,
    pub objects: PathBuf,
    pub staging: PathBuf,
    pub uploads: PathBuf,
    pub journal: PathBuf,
    pub lock: PathBuf,
    pub gate: PathBuf,
    pub format: PathBuf,
}

impl Layout {
    /// The layout under `root`, made absolute (a store's identity must not
    /// depend on the working directory).
    ///
    /// # Errors
    /// `InvalidArgument` for a root too long to hold every legal key.
    pub fn new(root: &Path) -> Result<Self, ObjectError> {
        let root = std::path::absolute(root).map_err(|e| {
            ObjectError::Io(Detail::caused_by(
                format!("resolving {}", root.display()),
                e,
            ))
        })?;
        let length = root.as_os_str().len();
        if length > MAX_ROOT_BYTES {
            return Err(ObjectError::InvalidArgument(
                format!(
                    "store root {} is {length} bytes; at most {MAX_ROOT_BYTES} leave room for the \
                 longest key's path within PATH_MAX",
                    root.display()
                )
                .into(),
            ));
        }
        Ok(Self {
            spelling: Format::NEW.spelling,
            journaled: Format::NEW.journaled,
            objects: root.join(OBJECTS),
            journal: root.join(JOURNAL),
            staging: root.join(STAGING),
            uploads: root.join(UPLOADS),
            lock: root.join(LOCK_FILE),
            gate: root.join(GATE_FILE),
            format: root.join(FORMAT_FILE),
            root,
        })
    }

    /// The directory holding `key`'s versions. (On every read, so built
    /// in place rather than from [`Layout::versions_names`].)
    pub fn versions_dir(&self, key: &KeyPath) -> PathBuf {
        let mut path = self.objects.clone();
        path.extend(key.components());
        match self.spelling {
            Spelling::Nested => path.push(VERSIONS_DIR),
            Spelling::Suffixed => path.as_mut_os_string().push(VERSIONS_DIR),
        }
        path
    }

    /// The names leading from `objects/` to `key`'s version directory,
    /// that directory's included.
    pub fn versions_names(&self, key: &KeyPath) -> Vec<String> {
        let mut names = key.components().to_vec();
        match self.spelling {
            Spelling::Nested => names.push(VERSIONS_DIR.to_owned()),
            Spelling::Suffixed => names
                .last_mut()
                .expect("a key has at least one name")
                .push_str(VERSIONS_DIR),
        }
        names
    }

    /// The directory of one upload.
    pub fn upload_dir(&self, upload_id: &str) -> PathBuf {
        self.uploads.join(upload_id)
    }
}

/// A checked key and its encoded directory names below `objects/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct KeyPath {
    key: String,
    components: Vec<String>,
}

impl KeyPath {
    /// Encodes `key` (checked when it was made).
    pub fn new(key: &ObjectKey) -> Self {
        let mut components = Vec::new();
        for segment in key.split('/') {
            encode_segment(segment.as_bytes(), &mut components);
        }
        Self {
            key: key.as_str().to_owned(),
            components,
        }
    }

    /// The key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Its directory names below `objects/`, outermost first.
    pub fn components(&self) -> &[String] {
        &self.components
    }
}

/// Whether `byte` stands for itself in a name (a leading `.` aside).
fn is_literal(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-')
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// Appends the names of one segment: one name, or a first name plus `%+`
/// continuation names when the encoding is longer than [`MAX_CHUNK`].
fn encode_segment(segment: &[u8], out: &mut Vec<String>) {
    let mut chunk = String::new();
    let mut first = true;
    for (index, &byte) in segment.iter().enumerate() {
        let literal = is_literal(byte) && !(index == 0 && byte == b'.');
        let unit = if literal { 1 } else { 3 };
        if chunk.len() + unit > MAX_CHUNK {
            out.push(name_of(&chunk, first));
            chunk.clear();
            first = false;
        }
        if literal {
            chunk.push(char::from(byte));
        } else {
            chunk.push('%');
            chunk.push(char::from(HEX[usize::from(byte >> 4)]));
            chunk.push(char::from(HEX[usize::from(byte & 0xF)]));
        }
    }
    out.push(name_of(&chunk, first));
}

fn name_of(chunk: &str, first: bool) -> String {
    if first {
        chunk.to_owned()
    } else {
        format!("{CONTINUATION}{chunk}")
    }
}

/// What a directory entry below `objects/` is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Entry {
    /// Format 1: the version directory of the key spelled by the path so
    /// far.
    Versions,
    /// A new segment, decoded; `versions` when the name ends in `%v`
    /// (format 2: the version directory of the key ending there).
    Segment { bytes: Vec<u8>, versions: bool },
    /// More of the current segment, decoded; `versions` as above.
    Continuation { bytes: Vec<u8>, versions: bool },
}

/// Decodes one directory name below `objects/`; `None` for anything the
/// encoding cannot have produced (stray files, foreign names). Which
/// spelling a store uses is not checked here: the listing re-spells every
/// key it finds and keeps only its store's spelling.
pub(super) fn decode_entry(name: &str) -> Option<Entry> {
    if name == VERSIONS_DIR {
        return Some(Entry::Versions);
    }
    // The encoding never ends a name in `%v` (`v` is not a hex digit),
    // so a name that does is a version directory's.
    let (name, versions) = match name.strip_suffix(VERSIONS_DIR) {
        Some(stem) => (stem, true),
        None => (name, false),
    };
    match name.strip_prefix(CONTINUATION) {
        Some(chunk) => decode_chunk(chunk.as_bytes(), false)
            .map(|bytes| Entry::Continuation { bytes, versions }),
        None => decode_chunk(name.as_bytes(), true).map(|bytes| Entry::Segment { bytes, versions }),
    }
}

/// Decodes an encoded chunk, refusing any spelling but the canonical one.
fn decode_chunk(chunk: &[u8], segment_start: bool) -> Option<Vec<u8>> {
    if chunk.is_empty() || chunk.len() > MAX_CHUNK {
        return None;
    }
    let hex = |b: u8| {
        HEX.iter()
            .position(|&h| h == b)
            .and_then(|v| u8::try_from(v).ok())
    };
    let mut out = Vec::with_capacity(chunk.len());
    let mut index = 0;
    while index < chunk.len() {
        let at_start = segment_start && out.is_empty();
        let byte = chunk[index];
        if byte == b'%' {
            let high = hex(*chunk.get(index + 1)?)?;
            let low = hex(*chunk.get(index + 2)?)?;
            let decoded = (high << 4) | low;
            // Canonical: only what must be encoded is encoded.
            if is_literal(decoded) && !(at_start && decoded == b'.') {
                return None;
            }
            out.push(decoded);
            index += 3;
        } else {
            if !is_literal(byte) || (at_start && byte == b'.') {
                return None;
            }
            out.push(byte);
            index += 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn components(key: &str) -> Vec<String> {
        KeyPath::new(&ObjectKey::new(key).unwrap())
            .components()
            .to_vec()
    }

    /// Decodes the names of a key's version directory, in either
    /// spelling, back into the key's bytes.
    fn decode(names: &[String]) -> Vec<u8> {
        let mut key = Vec::new();
        for (index, name) in names.iter().enumerate() {
            let last = index + 1 == names.len();
            match decode_entry(name).unwrap() {
                Entry::Segment { bytes, versions } => {
                    assert_eq!(versions, last, "{name}");
                    if index > 0 {
                        key.push(b'/');
                    }
                    key.extend(bytes);
                }
                Entry::Continuation { bytes, versions } => {
                    assert_eq!(versions, last, "{name}");
                    key.extend(bytes);
                }
                Entry::Versions => assert!(last, "a key component decoded as %v"),
            }
        }
        key
    }

    fn layout(spelling: Spelling) -> Layout {
        Layout {
            spelling,
            ..Layout::new(Path::new("/")).unwrap()
        }
    }

    #[test]
    fn safe_bytes_stay_and_everything_else_is_percent_encoded() {
        assert_eq!(components("a/b.c/D_e-9"), ["a", "b.c", "D_e-9"]);
        assert_eq!(components(".hidden/x.y."), ["%2Ehidden", "x.y."]);
        assert_eq!(components("100%/a b/é"), ["100%25", "a%20b", "%C3%A9"]);
        assert_eq!(components("%v/%+"), ["%25v", "%25%2B"]);
    }

    #[test]
    fn keys_round_trip_through_their_paths() {
        let long = "é".repeat(MAX_OBJECT_KEY_BYTES / 2);
        let long_ascii = "x".repeat(MAX_OBJECT_KEY_BYTES);
        for key in [
            "a",
            "a/b",
            ".a/..b/...",
            "sp ace/per%cent/q?u=e&r#y",
            "é/ü/日本",
            long.as_str(),
            long_ascii.as_str(),
        ] {
            let path = KeyPath::new(&ObjectKey::new(key).unwrap());
            for spelling in [Spelling::Nested, Spelling::Suffixed] {
                let names = layout(spelling).versions_names(&path);
                assert_eq!(decode(&names), key.as_bytes(), "{key:?} {spelling:?}");
                let joined: PathBuf = ["/", OBJECTS]
                    .into_iter()
                    .chain(names.iter().map(String::as_str))
                    .collect();
                assert_eq!(layout(spelling).versions_dir(&path), joined, "{key:?}");
                for name in &names {
                    let longest = CONTINUATION.len() + MAX_CHUNK + VERSIONS_DIR.len();
                    assert!(name.len() <= longest, "{name}");
                }
            }
            for name in path.components() {
                assert!(!name.ends_with(VERSIONS_DIR), "{name}");
            }
        }
    }

    #[test]
    fn the_two_spellings_put_a_keys_versions_where_the_format_says() {
        let key = KeyPath::new(&ObjectKey::new("a/b").unwrap());
        assert_eq!(
            layout(Spelling::Nested).versions_names(&key),
            ["a", "b", "%v"]
        );
        assert_eq!(
            layout(Spelling::Suffixed).versions_names(&key),
            ["a", "b%v"]
        );
        assert_eq!(
            layout(Spelling::Suffixed).versions_dir(&key),
            Path::new("/objects/a/b%v")
        );
        for number in 1..=3 {
            assert_eq!(Format::of_number(number).unwrap().number(), number);
        }
        assert_eq!(Format::of_number(4), None);
        assert_eq!(Format::of_number(3), Some(Format::NEW));
        assert_eq!(
            Layout::new(Path::new("/")).unwrap().spelling,
            Spelling::Suffixed
        );
    }

    #[test]
    fn a_long_segment_is_chunked_without_splitting_an_escape() {
        // 239 literal bytes, then 600 encoded ones: a `%C3` does not fit
        // in the first chunk's last byte, and 80 escapes fill each next.
        let key = format!("{}{}", "a".repeat(239), "é".repeat(100));
        let names = components(&key);
        assert_eq!(names.len(), 4, "{names:?}");
        assert_eq!(names[0], "a".repeat(239));
        assert!(names[1].starts_with("%+%C3%A9"));
        assert!(names[1..].iter().all(|n| n.starts_with(CONTINUATION)));
        let path = KeyPath::new(&ObjectKey::new(key.as_str()).unwrap());
        let versions = layout(Spelling::Suffixed).versions_names(&path);
        assert_eq!(versions[3], format!("{}%v", names[3]));
        assert_eq!(decode(&versions), key.as_bytes());
    }

    #[test]
    fn the_longest_key_path_fits_the_bound() {
        // Every byte needs escaping and the key is one segment.
        let worst = "é".repeat(MAX_OBJECT_KEY_BYTES / 2);
        for spelling in [Spelling::Nested, Spelling::Suffixed] {
            let key = KeyPath::new(&ObjectKey::new(worst.as_str()).unwrap());
            let path = layout(spelling).versions_dir(&key);
            let relative = path.strip_prefix("/").unwrap().as_os_str().len() + 1 + VERSION_ID_LEN;
            assert!(
                relative <= MAX_KEY_PATH_BYTES,
                "{relative} > {MAX_KEY_PATH_BYTES}"
            );
        }
        const {
            assert!(
                MAX_ROOT_BYTES >= 512,
                "roots of ordinary length are accepted"
            )
        };
    }

    #[test]
    fn non_canonical_names_do_not_decode() {
        for name in [
            "", ".x", "%2e", "%41", "a%2E", "a%4", "a%zz", "a b", "%+", "%+%2Ex", "%w", "%+%v",
            ".x%v", "a%4%v", "a%v%v", "%v%v",
        ] {
            assert_eq!(decode_entry(name), None, "{name:?}");
        }
        let segment = |bytes: &[u8], versions| Entry::Segment {
            bytes: bytes.to_vec(),
            versions,
        };
        let continuation = |bytes: &[u8], versions| Entry::Continuation {
            bytes: bytes.to_vec(),
            versions,
        };
        assert_eq!(decode_entry("%+.x"), Some(continuation(b".x", false)));
        assert_eq!(decode_entry("%+.x%v"), Some(continuation(b".x", true)));
        assert_eq!(decode_entry("%2Ex"), Some(segment(b".x", false)));
        assert_eq!(decode_entry("%2Ex%v"), Some(segment(b".x", true)));
        assert_eq!(decode_entry("%25v"), Some(segment(b"%v", false)));
        assert_eq!(decode_entry("%v"), Some(Entry::Versions));
    }

    #[test]
    fn an_over_long_root_is_refused() {
        let root = format!("/{}", "r".repeat(MAX_ROOT_BYTES));
        assert!(matches!(
            Layout::new(Path::new(&root)),
            Err(ObjectError::InvalidArgument(_))
        ));
    }
}
