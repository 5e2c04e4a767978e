//! Publish stamps carried as object metadata: which generation, epoch and
//! flush wrote an object (identity, strict), and optionally the file's
//! POSIX attributes (lenient).
//!
//! An object without every identity stamp is foreign by definition, so
//! [`GenerationStamps::from_metadata`] refuses a partial set. POSIX stamps
//! are optional both ways: a missing or malformed one never makes an object
//! foreign, it only means the attributes are unknown.

use super::Metadata;

/// The prefix of every stamp's name: metadata the host writes itself,
/// which the front ends refuse from callers.
pub const RESERVED_PREFIX: &str = "custodian-";

const GENERATION: &str = "custodian-gen";
const EPOCH: &str = "custodian-epoch";
const FLUSH: &str = "custodian-flush";
const BOUNDARY: &str = "custodian-boundary";
const MODE: &str = "custodian-mode";
const UID: &str = "custodian-uid";
const GID: &str = "custodian-gid";
const MTIME: &str = "custodian-mtime";

/// POSIX attributes of the file an object was published from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PosixStamps {
    /// `st_mode`, type bits included (written in octal).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Modification time, Unix seconds.
    pub mtime_unix: i64,
}

/// What identifies one publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenerationStamps {
    /// The generation number of the key.
    pub generation: u64,
    /// The writer's epoch (see [`super::epoch`]).
    pub epoch: u64,
    /// The flush that published it; printable ASCII.
    pub flush_id: String,
    /// Why this generation was cut, when it matters to readers.
    pub boundary: Option<String>,
    /// The source file's attributes, if known.
    pub posix: Option<PosixStamps>,
}

impl PosixStamps {
    /// Reads the stamps of `metadata`, `None` if any is absent or malformed.
    pub fn from_metadata(metadata: &Metadata) -> Option<Self> {
        Some(Self {
            mode: u32::from_str_radix(metadata.get(MODE)?, 8).ok()?,
            uid: metadata.get(UID)?.parse().ok()?,
            gid: metadata.get(GID)?.parse().ok()?,
            mtime_unix: metadata.get(MTIME)?.parse().ok()?,
        })
    }

    fn write(self, metadata: &mut Metadata) {
        metadata.insert(MODE.into(), format!("{:o}", self.mode));
        metadata.insert(UID.into(), self.uid.to_string());
        metadata.insert(GID.into(), self.gid.to_string());
        metadata.insert(MTIME.into(), self.mtime_unix.to_string());
    }
}

impl GenerationStamps {
    /// The stamps as metadata.
    pub fn to_metadata(&self) -> Metadata {
        let mut metadata = Metadata::new();
        metadata.insert(GENERATION.into(), self.generation.to_string());
        metadata.insert(EPOCH.into(), self.epoch.to_string());
        metadata.insert(FLUSH.into(), self.flush_id.clone());
        if let Some(boundary) = &self.boundary {
            metadata.insert(BOUNDARY.into(), boundary.clone());
        }
        if let Some(posix) = self.posix {
            posix.write(&mut metadata);
        }
        metadata
    }

    /// Reads the stamps of `metadata`: `None` unless every identity stamp
    /// is present and well-formed (an unstamped object is foreign).
    pub fn from_metadata(metadata: &Metadata) -> Option<Self> {
        Some(Self {
            generation: metadata.get(GENERATION)?.parse().ok()?,
            epoch: metadata.get(EPOCH)?.parse().ok()?,
            flush_id: metadata.get(FLUSH).filter(|f| !f.is_empty())?.clone(),
            boundary: metadata.get(BOUNDARY).cloned(),
            posix: PosixStamps::from_metadata(metadata),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamps() -> GenerationStamps {
        GenerationStamps {
            generation: 7,
            epoch: 3,
            flush_id: "f-1".into(),
            boundary: Some("drain".into()),
            posix: Some(PosixStamps {
                mode: 0o100_644,
                uid: 501,
                gid: 20,
                mtime_unix: 1_723_000_000,
            }),
        }
    }

    #[test]
    fn stamps_round_trip_through_metadata() {
        let metadata = stamps().to_metadata();
        assert_eq!(metadata.get(MODE).map(String::as_str), Some("100644"));
        assert_eq!(GenerationStamps::from_metadata(&metadata), Some(stamps()));
        assert!(super::super::validate_metadata(&metadata).is_ok());
    }

    #[test]
    fn a_partial_identity_makes_an_object_foreign() {
        for missing in [GENERATION, EPOCH, FLUSH] {
            let mut metadata = stamps().to_metadata();
            metadata.remove(missing);
            assert_eq!(
                GenerationStamps::from_metadata(&metadata),
                None,
                "without {missing}"
            );
        }
        let mut metadata = stamps().to_metadata();
        metadata.insert(EPOCH.into(), "three".into());
        assert_eq!(GenerationStamps::from_metadata(&metadata), None);
    }

    #[test]
    fn broken_posix_stamps_never_make_an_object_foreign() {
        let mut metadata = stamps().to_metadata();
        metadata.remove(UID);
        metadata.insert(MODE.into(), "not octal".into());
        let parsed = GenerationStamps::from_metadata(&metadata).expect("identity intact");
        assert_eq!(parsed.posix, None);
        assert_eq!(parsed.generation, 7);
    }
}
