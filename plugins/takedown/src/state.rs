//! The request's state row and per-object progress rows: versioned JSON,
//! unknown fields refused, impossible combinations reported as `Corrupt`.

use custodian_sdk::retention::{Item, Stage};
use custodian_sdk::takedown::Counts;
use custodian_sdk::{Error, kv, retention_oracle};
use serde::{Deserialize, Serialize};

use crate::codec::{Id, bounded, corrupt, decode, hex};
use crate::content::{self, manifest};
use crate::keys::{self, PARTITION};
use crate::request::Request;

/// The only state version this policy reads and writes.
pub const VERSION: u32 = 1;

/// Where a request is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// Queueing the objects to acquire.
    Seed,
    /// Copying each queued object into the preserved store.
    Acquire,
    /// Verifying manifests' reassembly over the preserved bytes.
    Closure,
    /// Finding every repository that holds the objects.
    Discover,
    /// Removing the serving copies of the objects preserved and verified
    /// ([`crate::remove`]).
    Remove,
    /// Waiting for retention to end.
    Retain,
    /// Deleting preserved pieces.
    Purging,
    /// Purged; re-swept for late writes.
    Purged,
}

impl Phase {
    /// The name `status` reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Seed => "seed",
            Self::Acquire => "acquire",
            Self::Closure => "closure",
            Self::Discover => "discover",
            Self::Remove => "remove",
            Self::Retain => "retain",
            Self::Purging => "purging",
            Self::Purged => "purged",
        }
    }
}

/// How far verification of the preserved copy got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verification {
    /// Objects are still being acquired.
    CanonicalPending,
    /// Every object is preserved; manifests still need their reassembly
    /// verified.
    ManifestClosurePending,
    /// A serving copy was corrupt: acquisition cannot be complete.
    SourceCorrupt,
    /// A manifest's preserved chunks do not reassemble it (recorded by
    /// closure, which went on): the preserved copy is not whole.
    ClosureMismatch,
    /// Every byte is preserved and verified.
    Verified,
}

impl Verification {
    /// The name `status` reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::CanonicalPending => "canonical-pending",
            Self::ManifestClosurePending => "manifest-closure-pending",
            Self::SourceCorrupt => "source-corrupt",
            Self::ClosureMismatch => "closure-mismatch",
            Self::Verified => "verified",
        }
    }
}

/// Running totals; see `counts` in `sdk/wit/takedown.wit`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Totals {
    /// Objects queued for acquisition.
    pub objects: u64,
    /// Objects preserved and verified.
    pub verified: u64,
    /// Objects that could not be preserved whole: a corrupt or missing
    /// serving copy, or a manifest whose preserved chunks do not
    /// reassemble it.
    pub corrupt: u64,
    /// Piece intents recorded.
    pub pieces: u64,
    /// Bytes preserved.
    pub bytes: u64,
    /// Holder repositories discovered.
    pub holders: u64,
    /// Preserved pieces deleted by purge passes.
    pub purged_pieces: u64,
}

impl Totals {
    /// The WIT record.
    pub fn to_wit(&self) -> Counts {
        Counts {
            objects: self.objects,
            verified: self.verified,
            corrupt: self.corrupt,
            pieces: self.pieces,
            bytes: self.bytes,
            holders: self.holders,
            purged_pieces: self.purged_pieces,
        }
    }
}

/// The `state` row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct State {
    /// [`VERSION`].
    pub version: u32,
    /// The current phase.
    pub phase: Phase,
    /// The phase a purge pass interrupted.
    pub resume_phase: Phase,
    /// Verification progress.
    pub verification: Verification,
    /// When retention ends, as the retention policy first answered.
    pub retain_until: u64,
    /// A legal hold is set.
    pub hold: bool,
    /// A purge pass has completed at least once.
    pub purged: bool,
    /// The purge pass's cursor: the last piece row it handled (hex).
    pub purge_after: Option<String>,
    /// When the next re-sweep may start, once purged.
    pub next_purge_at: u64,
    /// Every holder was discovered and acquisition was complete.
    pub discovery_complete: bool,
    /// Seeding progress: actions queued, or 1 once a pack walk started.
    pub seed: u32,
    /// Running totals.
    pub counts: Totals,
    /// The last problem recorded (e.g. a corrupt source).
    pub last_error: Option<String>,
    /// The remove phase's cursor: the last `object` row it handled (hex of
    /// the key). Absent from rows written before the phase existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remove_after: Option<String>,
}

impl State {
    /// A request's first state.
    pub fn initial(retain_until: u64) -> Self {
        Self {
            version: VERSION,
            phase: Phase::Seed,
            resume_phase: Phase::Seed,
            verification: Verification::CanonicalPending,
            retain_until,
            hold: false,
            purged: false,
            purge_after: None,
            next_purge_at: 0,
            discovery_complete: false,
            seed: 0,
            counts: Totals::default(),
            last_error: None,
            remove_after: None,
        }
    }

    /// Whether purging has begun (a pass is under way or one completed):
    /// the request can then no longer be held or withdrawn, and its lock
    /// is purging.
    pub fn purge_begun(&self) -> bool {
        self.purged || self.phase == Phase::Purging
    }

    /// Records `message` as the last error, bounded.
    pub fn set_error(&mut self, message: &str) {
        self.last_error = Some(bounded(message));
    }

    /// Checks combinations no sequence of steps can produce.
    pub fn check(&self, request: &Request) -> Result<(), Error> {
        let problem = if self.version != VERSION {
            Some(format!("unknown state version {}", self.version))
        } else if self.hold && (self.purged || matches!(self.phase, Phase::Purging | Phase::Purged))
        {
            Some("a legal hold while purging or purged".into())
        } else if self.phase == Phase::Purged && !self.purged {
            Some("phase purged before any purge completed".into())
        } else if self.resume_phase == Phase::Purging {
            Some("a purge pass resuming into itself".into())
        } else if self.phase != Phase::Purging && self.purge_after.is_some() {
            Some("a purge cursor outside a purge pass".into())
        } else if self.phase != Phase::Remove && self.remove_after.is_some() {
            Some("a removal cursor outside the remove phase".into())
        } else if self.seed > request.seed_steps() {
            Some(format!(
                "seed index {} past the request's actions",
                self.seed
            ))
        } else if self.retain_until < request.created_ms {
            Some("retention ending before the request was created".into())
        } else if self.last_error.as_ref().is_some_and(|e| e.len() > 4096) {
            Some("an oversized last error".into())
        } else {
            None
        };
        match problem {
            Some(problem) => Err(corrupt(format!("takedown state: {problem}"))),
            None => Ok(()),
        }
    }

    /// The retention stage the next step is scheduled for.
    pub fn schedule_stage(&self) -> Stage {
        match self.phase {
            Phase::Purging => Stage::Purging,
            Phase::Purged => Stage::Purged,
            Phase::Retain => Stage::Retaining,
            _ => Stage::Active,
        }
    }

    /// What the retention policy is told about this request at `stage`.
    pub fn item(&self, request: &Request, stage: Stage) -> Item {
        Item {
            created_ms: request.created_ms,
            noncurrent_since_ms: None,
            hold: self.hold,
            stage,
        }
    }
}

/// A state as read: the decoded state and the raw row it came from
/// (`None` when there was none yet), for the commit's guard.
#[derive(Debug)]
pub struct Loaded {
    /// The state.
    pub state: State,
    /// The stored row.
    pub raw: Option<Vec<u8>>,
}

/// The first state of `request`, retain-until from the retention policy
/// asked at `now`; checked.
pub fn first(request: &Request, now: u64) -> Result<State, Error> {
    let item = Item {
        created_ms: request.created_ms,
        noncurrent_since_ms: None,
        hold: false,
        stage: Stage::Active,
    };
    let state = State::initial(retention_oracle::assess(item, now)?.retain_until_ms);
    state.check(request)?;
    Ok(state)
}

/// The state of request `id`, or its first state ([`first`]) when none is
/// stored (a request filed before its filing wrote one).
pub fn load(id: &Id, request: &Request, now: u64) -> Result<Loaded, Error> {
    loaded(kv::get(PARTITION, &key(id))?, request, now)
}

/// The `state` row's key of request `id`.
pub fn key(id: &Id) -> Vec<u8> {
    keys::key(keys::STATE, id, &[])
}

/// The state in `raw`, request `id`'s state row as read at `now` (see
/// [`load`]).
pub fn loaded(raw: Option<Vec<u8>>, request: &Request, now: u64) -> Result<Loaded, Error> {
    let state = match &raw {
        Some(raw) => decode(raw, "the takedown state")?,
        None => first(request, now)?,
    };
    state.check(request)?;
    Ok(Loaded { state, raw })
}

/// Progress of one object (the `object` row).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectInfo {
    /// The selected source's kind; 0 before selection.
    pub kind: u8,
    /// The selected source's size.
    pub size: u64,
    /// Bytes preserved so far (a prefix of the object).
    pub copied: u64,
    /// CRC-64/NVME of the preserved prefix.
    pub crc64: u64,
    /// Manifest chunks enqueued so far.
    pub chunks: u32,
    /// Every byte is preserved and verified.
    pub verified: bool,
    /// The serving copy was corrupt or missing.
    pub source_failed: bool,
    /// The holder scan's cursor (hex of a content key).
    pub holders: Option<String>,
    /// Every holder was discovered.
    pub holders_done: bool,
}

impl ObjectInfo {
    fn check(&self, object: &Id) -> Result<(), Error> {
        let chunk_bound = if self.kind == content::MANIFEST {
            manifest::count_for_size(self.size)
        } else {
            Some(0)
        };
        let consistent = (self.kind == 0 || content::is_kind(self.kind))
            && (self.kind != 0 || (self.size == 0 && self.copied == 0 && !self.verified))
            && self.copied <= self.size
            && chunk_bound.is_some_and(|bound| self.chunks <= bound)
            && !(self.verified && self.source_failed)
            && (self.holders.is_none() || !self.holders_done);
        if consistent {
            Ok(())
        } else {
            Err(corrupt(format!(
                "the progress row of object {} is inconsistent",
                hex(object)
            )))
        }
    }

    /// The holder cursor as bytes.
    pub fn holders_cursor(&self) -> Result<Option<Vec<u8>>, Error> {
        self.holders
            .as_deref()
            .map(|text| {
                crate::codec::unhex(text).ok_or_else(|| corrupt("a holder cursor is not hex"))
            })
            .transpose()
    }
}

/// Decodes and checks an `object` row of `object`; absent is the default.
pub fn decode_info(object: &Id, raw: Option<&[u8]>) -> Result<ObjectInfo, Error> {
    let info = match raw {
        Some(raw) => decode(raw, "an object progress row")?,
        None => ObjectInfo::default(),
    };
    info.check(object)?;
    Ok(info)
}

/// The progress of `object` in request `id`.
pub fn load_info(id: &Id, object: &Id) -> Result<ObjectInfo, Error> {
    let raw = kv::get(PARTITION, &keys::object_key(keys::OBJECT, id, object))?;
    decode_info(object, raw.as_deref())
}

/// Fuzz targets of the takedown state's row codecs: the `state` and
/// `object` rows are JSON any writer of the partition can leave behind,
/// so a row decodes to a consistent record or is `Corrupt`, never a
/// panic (see the README's "Fuzzing").
#[cfg(test)]
mod fuzz {
    use super::*;
    use crate::codec::encode;
    use crate::content::Repository;

    /// Phases by index.
    const PHASES: [Phase; 8] = [
        Phase::Seed,
        Phase::Acquire,
        Phase::Closure,
        Phase::Discover,
        Phase::Remove,
        Phase::Retain,
        Phase::Purging,
        Phase::Purged,
    ];

    /// Verification progress by index.
    const VERIFICATIONS: [Verification; 5] = [
        Verification::CanonicalPending,
        Verification::ManifestClosurePending,
        Verification::SourceCorrupt,
        Verification::ClosureMismatch,
        Verification::Verified,
    ];

    fn request() -> Request {
        Request {
            repository: Repository {
                namespace: "ns".into(),
                name: "repo".into(),
            },
            created_ms: 1_000,
            objects: 3,
            pack: None,
        }
    }

    /// Decodes `raw` as a state row and checks it as [`load`] does: a
    /// state that passes keeps every rule of [`State::check`], and
    /// re-encodes to a row that decodes to itself.
    fn load_row(raw: &[u8]) {
        let request = request();
        let state = match decode::<State>(raw, "the takedown state") {
            Ok(state) => state,
            Err(error) => return assert!(matches!(error, Error::Corrupt(_)), "{error:?}"),
        };
        let again = encode(&state).expect("states encode");
        assert_eq!(decode::<State>(&again, "again").ok().as_ref(), Some(&state));
        match state.check(&request) {
            Ok(()) => {
                assert_eq!(state.version, VERSION);
                assert!(!(state.hold && state.purge_begun()), "{state:?}");
                assert!(state.phase != Phase::Purged || state.purged);
                assert!(state.seed <= request.seed_steps());
                assert!(state.retain_until >= request.created_ms);
                assert!(state.last_error.as_ref().is_none_or(|e| e.len() <= 4096));
            }
            Err(error) => assert!(matches!(error, Error::Corrupt(_)), "{error:?}"),
        }
    }

    /// A state's fields: phase, resume phase and verification indices,
    /// retain-until and next purge, hold, purged and discovery flags, seed,
    /// counts, purge cursor, last error, remove cursor.
    type StateFields = (
        (u8, u8, u8),
        (u64, u64),
        (bool, bool, bool),
        u32,
        [u64; 7],
        Option<String>,
        Option<String>,
        Option<String>,
    );

    #[test]
    fn state_rows_round_trip_and_their_near_misses_decode_consistently_or_are_corrupt() {
        bolero::check!()
            .with_type::<(StateFields, Vec<(u16, u8)>)>()
            .cloned()
            .for_each(|(fields, edits)| {
                let ((phase, resume, verification), (retain_until, next_purge_at), flags, ..) =
                    fields;
                let (seed, counts, purge_after, last_error, remove_after) =
                    (fields.3, fields.4, fields.5, fields.6, fields.7);
                let state = State {
                    version: VERSION,
                    phase: PHASES[usize::from(phase) % PHASES.len()],
                    resume_phase: PHASES[usize::from(resume) % PHASES.len()],
                    verification: VERIFICATIONS[usize::from(verification) % VERIFICATIONS.len()],
                    retain_until,
                    hold: flags.0,
                    purged: flags.1,
                    purge_after,
                    next_purge_at,
                    discovery_complete: flags.2,
                    seed: seed % 8,
                    counts: Totals {
                        objects: counts[0],
                        verified: counts[1],
                        corrupt: counts[2],
                        pieces: counts[3],
                        bytes: counts[4],
                        holders: counts[5],
                        purged_pieces: counts[6],
                    },
                    last_error,
                    remove_after,
                };
                let mut raw = encode(&state).expect("states encode");
                assert_eq!(decode::<State>(&raw, "state").ok(), Some(state));
                load_row(&raw);
                for (at, byte) in edits {
                    let at = usize::from(at) % raw.len();
                    raw[at] = byte;
                }
                load_row(&raw);
            });
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_state_row_decoder() {
        bolero::check!().for_each(load_row);
    }

    /// An object row's fields: kind, size, copied, CRC, chunks, verified,
    /// source failed, holder cursor, holders done.
    type InfoFields = (u8, u64, u64, u64, u32, bool, bool, Option<String>, bool);

    #[test]
    fn object_rows_decode_to_themselves_when_consistent_and_are_corrupt_otherwise() {
        bolero::check!()
            .with_type::<(InfoFields, Vec<u8>)>()
            .cloned()
            .for_each(|(fields, junk)| {
                let (kind, size, copied, crc64, chunks, verified, failed, holders, done) = fields;
                let info = ObjectInfo {
                    kind: kind % 5,
                    // Small sizes and counts often enough to be consistent.
                    size: size % 4096,
                    copied: copied % 4096,
                    crc64,
                    chunks: chunks % 128,
                    verified,
                    source_failed: failed,
                    holders,
                    holders_done: done,
                };
                let raw = encode(&info).expect("rows encode");
                match decode_info(&[7; 32], Some(&raw)) {
                    Ok(decoded) => {
                        assert_eq!(decoded, info);
                        assert!(info.copied <= info.size && !(info.verified && failed));
                    }
                    Err(error) => assert!(matches!(error, Error::Corrupt(_)), "{error:?}"),
                }
                for raw in [&junk[..], &[&raw[..raw.len() / 2], &junk[..]].concat()] {
                    if let Err(error) = decode_info(&[7; 32], Some(raw)) {
                        assert!(matches!(error, Error::Corrupt(_)), "{error:?}");
                    }
                }
            });
    }
}
