//! The request record: validating a new request, its `request` row and
//! loading it, and the objects it names (its `actions` row). Filing one is
//! [`crate::create`]'s.

use custodian_sdk::takedown::Request as WitRequest;
use custodian_sdk::{Error, kv};
use serde::{Deserialize, Serialize};

use crate::codec::{Id, corrupt, decode, encode, hex, id_from_hex};
use crate::content::Repository;
use crate::keys::{self, PARTITION};

/// Most objects one request may name: its record stays well inside the
/// host's 256 KiB value bound, and seeding it takes a bounded number of
/// steps.
pub const MAX_OBJECTS: usize = 1024;
/// How long after a plan or step's `now` its commit may still land: a
/// commit that waited longer acts on state that may have moved on.
pub const APPLY_WINDOW_MS: u64 = 30_000;

/// A request as this policy uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The repository the request is against.
    pub repository: Repository,
    /// When it was filed.
    pub created_ms: u64,
    /// How many objects it names (0 with a pack); the objects themselves
    /// are read with [`actions`] by the steps that seed them.
    pub objects: u32,
    /// The pack whose inventory is taken down.
    pub pack: Option<Id>,
}

impl Request {
    /// How many objects the request names: its actions, or its pack.
    pub fn named_count(&self) -> u32 {
        if self.pack.is_some() {
            1
        } else {
            // Bounded by MAX_OBJECTS.
            self.objects
        }
    }

    /// The objects the request names, in the order filed: its actions
    /// (read from the `actions` row), or its pack.
    pub fn named(&self, id: &Id) -> Result<Vec<Id>, Error> {
        match self.pack {
            Some(pack) => Ok(vec![pack]),
            None => actions(id, self),
        }
    }

    /// How many seed steps record progress in `state.seed`: one per action,
    /// or one for starting a pack walk.
    pub fn seed_steps(&self) -> u32 {
        self.named_count()
    }
}

/// The `request` row.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Stored {
    version: u32,
    repository: String,
    created_ms: u64,
    objects: u32,
    pack: Option<String>,
}

fn id_of(bytes: &[u8], what: &str) -> Result<Id, Error> {
    Id::try_from(bytes).map_err(|_| Error::InvalidArgument(format!("{what} is not 32 bytes")))
}

/// Checks a request as filed: `invalid-argument` naming the problem.
pub fn validate(request: &WitRequest) -> Result<(Id, Request, Vec<Id>), Error> {
    let id = id_of(&request.id, "the request id")?;
    let repository = Repository::parse(&request.repository).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "{:?} is not a repository (namespace/name)",
            request.repository
        ))
    })?;
    let objects = request
        .objects
        .iter()
        .map(|o| id_of(o, "an object id"))
        .collect::<Result<Vec<_>, _>>()?;
    let pack = request
        .pack
        .as_deref()
        .map(|p| id_of(p, "the pack id"))
        .transpose()?;
    match (objects.len(), pack) {
        (0, None) => {
            return Err(Error::InvalidArgument(
                "a request names objects or a pack".into(),
            ));
        }
        (1.., Some(_)) => {
            return Err(Error::InvalidArgument(
                "a request names objects or a pack, not both".into(),
            ));
        }
        (n, None) if n > MAX_OBJECTS => {
            return Err(Error::InvalidArgument(format!(
                "{n} objects exceed {MAX_OBJECTS} per request"
            )));
        }
        _ => {}
    }
    let mut sorted = objects.clone();
    sorted.sort_unstable();
    if sorted.windows(2).any(|w| w[0] == w[1]) {
        return Err(Error::InvalidArgument(
            "a request names an object twice".into(),
        ));
    }
    Ok((
        id,
        Request {
            repository,
            created_ms: request.created_ms,
            // Bounded by MAX_OBJECTS above.
            objects: objects.len() as u32,
            pack,
        },
        objects,
    ))
}

/// The `request` row's key of request `id`.
pub fn key(id: &Id) -> Vec<u8> {
    keys::key(keys::REQUEST, id, &[])
}

/// The `request` row's value for `request`.
pub fn encode_record(request: &Request) -> Result<Vec<u8>, Error> {
    encode(&Stored {
        version: 1,
        repository: request.repository.to_string(),
        created_ms: request.created_ms,
        objects: request.objects,
        pack: request.pack.map(|p| hex(&p)),
    })
}

/// Request `id`, `None` if it does not exist.
pub fn load(id: &Id) -> Result<Option<Request>, Error> {
    kv::get(PARTITION, &key(id))?
        .map(|raw| decode_record(&raw))
        .transpose()
}

/// The request a `request` row holds.
pub fn decode_record(raw: &[u8]) -> Result<Request, Error> {
    let stored: Stored = decode(raw, "the request record")?;
    let bad = |what: &str| corrupt(format!("the request record: {what}"));
    if stored.version != 1 {
        return Err(bad("unknown version"));
    }
    let repository =
        Repository::parse(&stored.repository).ok_or_else(|| bad("not a repository"))?;
    if stored.objects as usize > MAX_OBJECTS || (stored.objects == 0) == stored.pack.is_none() {
        return Err(bad("not exactly one of objects and pack"));
    }
    let pack = stored
        .pack
        .as_deref()
        .map(|p| id_from_hex(p, "the request's pack"))
        .transpose()?;
    Ok(Request {
        repository,
        created_ms: stored.created_ms,
        objects: stored.objects,
        pack,
    })
}

/// The objects request `id` names, in the order filed.
pub fn actions(id: &Id, request: &Request) -> Result<Vec<Id>, Error> {
    let raw = kv::get(PARTITION, &keys::key(keys::ACTIONS, id, &[]))?
        .ok_or_else(|| corrupt("the request's objects are missing"))?;
    if raw.len() != request.objects as usize * 32 {
        return Err(corrupt("the request's objects do not match its record"));
    }
    Ok(raw
        .chunks_exact(32)
        .map(|c| Id::try_from(c).expect("chunks of 32 bytes"))
        .collect())
}

/// Request `id`, or `not-found`.
pub fn require(id: &Id) -> Result<Request, Error> {
    load(id)?.ok_or_else(|| not_found(id))
}

/// `not-found`, naming request `id`.
pub fn not_found(id: &Id) -> Error {
    Error::NotFound(format!("takedown request {}", hex(id)))
}

/// A request id from bytes a caller passed: `invalid-argument` unless 32
/// bytes.
pub fn id_arg(bytes: &[u8]) -> Result<Id, Error> {
    id_of(bytes, "the request id")
}
