//! Who may call: named principals, their roles and their bearer
//! credentials, in the host-reserved KV partition [`PARTITION`], so every
//! host sharing the KV knows them and no plugin can be granted them.
//!
//! | key | value |
//! |---|---|
//! | `n` name | the principal (JSON [`Record`]): roles, created-ms, its credentials' ids |
//! | `t` id (8 bytes) | a credential (JSON [`CredentialRow`]): its principal, the BLAKE3 hash of its secret, created-ms; an S3 key's row also holds its secret |
//!
//! A credential is a bearer token (`cust_<id>_<secret>`, only its hash
//! stored) or an S3 key pair (access key id `CUST<ID>`, and a secret
//! stored as is, since Signature V4 needs it; see
//! [`CredentialRow::s3_secret`]). Each authenticates only as its own kind.
//!
//! Invariants, kept by writing both rows of a change in one guarded batch
//! (the principal's row guarded on the value it was read with):
//! - every id in a principal's record has a `t` row naming that principal,
//!   and every `t` row is listed by its principal's record;
//! - a principal has at most [`MAX_CREDENTIALS`] credentials;
//! - deleting a principal deletes its credentials in the same batch.
//!
//! Authentication reads one `t` row and one `n` row per credential, cached
//! for [`Principals::cache_ttl`] (real time): a revocation on another host
//! takes effect here within that bound; one made through this process
//! takes effect at once (its cache is cleared).

mod cache;
pub mod credential;

use std::time::Duration;

use custodian_base::clock::Clock;
use custodian_base::error::ErrorKind;
use custodian_contract::name::is_name;
use custodian_kv::{Batch, Kv, KvError, Outcome, Partition, Precondition, Write};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

use crate::decisions::access::{MAX_ROLE_BYTES, MAX_ROLES, Principal};
use cache::Found;
use credential::{CredentialId, Issued, IssuedS3Key, Presented};

/// The partition of principals and credentials.
pub const PARTITION: &str = "custodian.principals";
/// Longest principal name, in bytes.
pub const MAX_NAME_BYTES: usize = 64;
/// Most credentials one principal holds: bounds its record, and one
/// rotation's batch (which deletes them all).
pub const MAX_CREDENTIALS: usize = 16;
/// The principal the bootstrap token belongs to.
pub const BOOTSTRAP_PRINCIPAL: &str = "admin";
/// The role the bootstrap principal is created with.
pub const ADMIN_ROLE: &str = "admin";
/// Guarded read-modify-writes of one principal retried against concurrent
/// writers before giving up as busy.
const MAX_ATTEMPTS: usize = 8;
/// Most principals listed: a listing is one scan page held in memory.
pub const MAX_LISTED: u32 = 1000;

const PRINCIPAL_TAG: u8 = b'n';
const CREDENTIAL_TAG: u8 = b't';

/// A principal's row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// Its roles.
    pub roles: Vec<String>,
    /// When it was created, ms since the epoch.
    pub created_ms: u64,
    /// Its credentials' ids, hex.
    pub credentials: Vec<String>,
}

/// A credential's row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CredentialRow {
    /// Whose it is.
    pub principal: String,
    /// BLAKE3 of its secret, hex.
    pub hash: String,
    /// When it was issued, ms since the epoch.
    pub created_ms: u64,
    /// Whether it is the server's bootstrap token.
    #[serde(default)]
    pub bootstrap: bool,
    /// An S3 key's secret access key, stored as is: Signature V4 is an
    /// HMAC keyed by (a key derived from) the secret, so the server must
    /// have it, as S3 and every S3-compatible server do. The partition is
    /// the host's own (no plugin can be granted it); protect the KV's
    /// files as the secrets they hold. `None` for a bearer token, whose
    /// secret is never stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3_secret: Option<String>,
}

/// A principal as listed: never a secret or a hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct View {
    /// Its name.
    pub name: String,
    /// Its roles.
    pub roles: Vec<String>,
    /// When it was created, ms since the epoch.
    pub created_ms: u64,
    /// Its credentials' ids.
    pub credentials: Vec<String>,
}

/// Why a principals operation failed.
#[derive(Debug, thiserror::Error)]
pub enum PrincipalError {
    /// A name, role or credential id is malformed or out of bounds.
    #[error("{0}")]
    Invalid(String),
    /// No such principal or credential.
    #[error("{0}")]
    NotFound(String),
    /// The principal already exists.
    #[error("{0}")]
    Exists(String),
    /// Concurrent writers kept changing the principal.
    #[error("the principal {0:?} kept changing under concurrent writers; try again")]
    Busy(String),
    /// A stored row cannot be decoded.
    #[error("{0}")]
    Corrupt(String),
    /// The OS has no randomness to give.
    #[error("no randomness for a new credential: {0}")]
    Random(String),
    /// The KV failed.
    #[error("the principals store: {0}")]
    Kv(#[from] KvError),
}

impl PrincipalError {
    /// What kind of failure this is (see [`ErrorKind`]).
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Invalid(_) => ErrorKind::InvalidArgument,
            Self::NotFound(_) => ErrorKind::NotFound,
            Self::Exists(_) => ErrorKind::Conflict,
            Self::Busy(_) => ErrorKind::Busy,
            Self::Corrupt(_) => ErrorKind::Corrupt,
            Self::Random(_) => ErrorKind::Internal,
            Self::Kv(e) => e.kind(),
        }
    }
}

/// A new credential and whose it is.
#[derive(Debug)]
pub struct NewCredential {
    /// The principal.
    pub principal: String,
    /// The token, shown once.
    pub issued: Issued,
}

/// A newly issued S3 key pair and whose it is.
#[derive(Debug)]
pub struct NewS3Key {
    /// The principal it was issued to.
    pub principal: String,
    /// The key pair, its secret shown once.
    pub issued: IssuedS3Key,
}

/// A live S3 key: its secret (redacted in `Debug`) and its principal.
#[derive(Clone)]
pub struct S3Key {
    /// The secret access key.
    pub secret: Arc<str>,
    /// Whose it is.
    pub principal: Principal,
}

impl std::fmt::Debug for S3Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "S3Key({}, <redacted>)", self.principal.name)
    }
}

/// The principals of a KV, with a short-lived cache of credential lookups.
pub struct Principals {
    kv: Arc<dyn Kv>,
    clock: Arc<dyn Clock>,
    cache: cache::Cache,
}

impl std::fmt::Debug for Principals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Principals")
            .field("cache_ttl", &self.cache.ttl())
            .finish_non_exhaustive()
    }
}

/// Checks a principal's name.
///
/// # Errors
/// [`PrincipalError::Invalid`] unless it is a name (`[a-z0-9._-]`, 1..=64).
pub fn check_name(name: &str) -> Result<(), PrincipalError> {
    if is_name(name, MAX_NAME_BYTES) {
        Ok(())
    } else {
        Err(PrincipalError::Invalid(format!(
            "a principal's name is 1 to {MAX_NAME_BYTES} characters of [a-z0-9._-], not {name:?}"
        )))
    }
}

/// Checks a principal's roles.
///
/// # Errors
/// [`PrincipalError::Invalid`] for more than [`MAX_ROLES`] roles, or a role
/// that is empty, longer than [`MAX_ROLE_BYTES`] or not of
/// `[A-Za-z0-9._:/@-]`.
pub fn check_roles(roles: &[String]) -> Result<(), PrincipalError> {
    if roles.len() > MAX_ROLES {
        return Err(PrincipalError::Invalid(format!(
            "a principal has at most {MAX_ROLES} roles"
        )));
    }
    for role in roles {
        let fits = (1..=MAX_ROLE_BYTES).contains(&role.len())
            && role
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._:/@-".contains(&b));
        if !fits {
            return Err(PrincipalError::Invalid(format!(
                "a role is 1 to {MAX_ROLE_BYTES} characters of [A-Za-z0-9._:/@-], not {role:?}"
            )));
        }
    }
    Ok(())
}

/// Parses a credential id given as hex.
///
/// # Errors
/// [`PrincipalError::Invalid`] unless it is 16 hex digits.
pub fn parse_credential_id(id: &str) -> Result<CredentialId, PrincipalError> {
    let mut bytes = [0u8; credential::ID_BYTES];
    hex::decode_to_slice(id, &mut bytes).map_err(|_| {
        PrincipalError::Invalid(format!("{id:?} is not a credential id (16 hex digits)"))
    })?;
    Ok(bytes)
}

fn partition() -> Partition {
    Partition::new(PARTITION).expect("the principals partition name is valid")
}

fn principal_key(name: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + name.len());
    key.push(PRINCIPAL_TAG);
    key.extend_from_slice(name.as_bytes());
    key
}

fn credential_key(id: &CredentialId) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + id.len());
    key.push(CREDENTIAL_TAG);
    key.extend_from_slice(id);
    key
}

fn decode<T: for<'de> Deserialize<'de>>(what: &str, value: &[u8]) -> Result<T, PrincipalError> {
    serde_json::from_slice(value).map_err(|e| PrincipalError::Corrupt(format!("{what}: {e}")))
}

fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("principal rows serialize")
}

fn put(key: Vec<u8>, value: Vec<u8>) -> Write {
    Write::Put {
        partition: partition(),
        key,
        value,
    }
}

fn delete(key: Vec<u8>) -> Write {
    Write::Delete {
        partition: partition(),
        key,
    }
}

impl Principals {
    /// The principals in `kv`, credential lookups cached for `cache_ttl`.
    pub fn new(kv: Arc<dyn Kv>, clock: Arc<dyn Clock>, cache_ttl: Duration) -> Self {
        Self {
            kv,
            clock,
            cache: cache::Cache::new(cache_ttl),
        }
    }

    /// How long a credential lookup is trusted: the bound on how late a
    /// revocation made on another host takes effect here.
    pub fn cache_ttl(&self) -> Duration {
        self.cache.ttl()
    }

    /// The principal `presented` (a bearer value) authenticates, `None`
    /// for anything that is not a live credential. The secret's hash is
    /// compared in constant time; a value that cannot be a credential is
    /// refused before any lookup.
    ///
    /// # Errors
    /// The KV failed, or a row is corrupt.
    pub async fn authenticate(
        &self,
        presented: &[u8],
    ) -> Result<Option<Principal>, PrincipalError> {
        let Some(presented) = Presented::parse(presented) else {
            return Ok(None);
        };
        let entry = match self.cache.get(&presented.id) {
            Some(entry) => entry,
            None => {
                let entry = self.lookup(&presented.id).await?;
                self.cache.put(presented.id, entry.clone());
                entry
            }
        };
        // An S3 key is not a bearer token, whatever its hash would say.
        Ok(entry.and_then(|found| {
            (found.s3_secret.is_none() && presented.matches(&found.hash)).then_some(found.principal)
        }))
    }

    /// The secret and principal of S3 access key `access_key_id`, `None`
    /// for anything that is not a live S3 key (a bearer token's id
    /// included): the caller checks the request's signature with the
    /// secret.
    ///
    /// # Errors
    /// The KV failed, or a row is corrupt.
    pub async fn s3_key(&self, access_key_id: &str) -> Result<Option<S3Key>, PrincipalError> {
        let Some(id) = credential::parse_access_key_id(access_key_id) else {
            return Ok(None);
        };
        let entry = match self.cache.get(&id) {
            Some(entry) => entry,
            None => {
                let entry = self.lookup(&id).await?;
                self.cache.put(id, entry.clone());
                entry
            }
        };
        Ok(entry.and_then(|found| {
            Some(S3Key {
                secret: found.s3_secret?,
                principal: found.principal,
            })
        }))
    }

    /// The credential row `id` names and its principal, `None` when either
    /// is gone.
    async fn lookup(&self, id: &CredentialId) -> Result<Option<Found>, PrincipalError> {
        let Some(value) = self.kv.get(&partition(), &credential_key(id)).await? else {
            return Ok(None);
        };
        let row: CredentialRow = decode("a credential row", &value)?;
        let mut hash = [0u8; 32];
        hex::decode_to_slice(&row.hash, &mut hash)
            .map_err(|_| PrincipalError::Corrupt("a credential row's hash".into()))?;
        let Some(record) = self.record(&row.principal).await? else {
            return Ok(None);
        };
        Ok(Some(Found {
            hash,
            s3_secret: row.s3_secret.map(std::sync::Arc::from),
            principal: Principal {
                name: row.principal,
                roles: record.roles,
            },
        }))
    }

    async fn record(&self, name: &str) -> Result<Option<Record>, PrincipalError> {
        let value = self.kv.get(&partition(), &principal_key(name)).await?;
        value
            .map(|v| decode(&format!("principal {name:?}"), &v))
            .transpose()
    }

    /// The principal `name`.
    ///
    /// # Errors
    /// [`PrincipalError::NotFound`] when there is none.
    pub async fn get(&self, name: &str) -> Result<View, PrincipalError> {
        check_name(name)?;
        let record = self.record(name).await?.ok_or_else(|| not_found(name))?;
        Ok(view(name.to_owned(), record))
    }

    /// Every principal, by name (at most [`MAX_LISTED`]).
    ///
    /// # Errors
    /// The KV failed, or a row is corrupt.
    pub async fn list(&self) -> Result<Vec<View>, PrincipalError> {
        let page = self
            .kv
            .scan(
                &partition(),
                &[PRINCIPAL_TAG],
                Some(&[PRINCIPAL_TAG + 1]),
                None,
                MAX_LISTED,
            )
            .await?;
        page.entries
            .into_iter()
            .map(|(key, value)| {
                let name = String::from_utf8_lossy(&key[1..]).into_owned();
                let record = decode(&format!("principal {name:?}"), &value)?;
                Ok(view(name, record))
            })
            .collect()
    }

    /// Creates principal `name` with `roles` and one credential.
    ///
    /// # Errors
    /// [`PrincipalError::Exists`] when there is one of that name;
    /// [`PrincipalError::Invalid`] for a bad name or role.
    pub async fn create(
        &self,
        name: &str,
        roles: Vec<String>,
    ) -> Result<NewCredential, PrincipalError> {
        check_name(name)?;
        check_roles(&roles)?;
        let issued = credential::issue().map_err(|e| PrincipalError::Random(e.to_string()))?;
        let record = Record {
            roles,
            created_ms: self.clock.now_ms(),
            credentials: vec![issued.id.clone()],
        };
        let batch = Batch {
            preconditions: vec![Precondition::Absent {
                partition: partition(),
                key: principal_key(name),
            }],
            writes: vec![
                put(principal_key(name), encode(&record)),
                put(
                    credential_key(&issued.presented.id),
                    encode(&self.credential_row(name, &issued.presented, false)),
                ),
            ],
        };
        match self.kv.apply(&batch).await? {
            Outcome::Committed => Ok(NewCredential {
                principal: name.to_owned(),
                issued,
            }),
            _ => Err(PrincipalError::Exists(format!(
                "there is already a principal named {name:?}"
            ))),
        }
    }

    fn credential_row(&self, name: &str, presented: &Presented, bootstrap: bool) -> CredentialRow {
        CredentialRow {
            principal: name.to_owned(),
            hash: hex::encode(presented.hash),
            created_ms: self.clock.now_ms(),
            bootstrap,
            s3_secret: None,
        }
    }

    /// Replaces principal `name`'s roles; takes effect on every host
    /// within the cache bound.
    ///
    /// # Errors
    /// [`PrincipalError::NotFound`], [`PrincipalError::Invalid`].
    pub async fn set_roles(&self, name: &str, roles: Vec<String>) -> Result<View, PrincipalError> {
        check_roles(&roles)?;
        self.change(name, |record| {
            record.roles.clone_from(&roles);
            Ok(Vec::new())
        })
        .await
    }

    /// Issues principal `name` one more credential.
    ///
    /// # Errors
    /// [`PrincipalError::NotFound`]; [`PrincipalError::Invalid`] when it
    /// already holds [`MAX_CREDENTIALS`].
    pub async fn issue(&self, name: &str) -> Result<NewCredential, PrincipalError> {
        let issued = credential::issue().map_err(|e| PrincipalError::Random(e.to_string()))?;
        let row = encode(&self.credential_row(name, &issued.presented, false));
        let id = issued.presented.id;
        self.change(name, |record| {
            add_credential(record, &hex::encode(id))?;
            Ok(vec![put(credential_key(&id), row.clone())])
        })
        .await?;
        Ok(NewCredential {
            principal: name.to_owned(),
            issued,
        })
    }

    /// Issues principal `name` an S3 key pair (an access key id and its
    /// secret), counted among its credentials: revoked, rotated away and
    /// deleted with it as a token is.
    ///
    /// # Errors
    /// [`PrincipalError::NotFound`]; [`PrincipalError::Invalid`] when it
    /// already holds [`MAX_CREDENTIALS`].
    pub async fn issue_s3_key(&self, name: &str) -> Result<NewS3Key, PrincipalError> {
        let issued =
            credential::issue_s3_key().map_err(|e| PrincipalError::Random(e.to_string()))?;
        let row = encode(&CredentialRow {
            principal: name.to_owned(),
            hash: blake3::hash(issued.secret.as_bytes()).to_hex().to_string(),
            created_ms: self.clock.now_ms(),
            bootstrap: false,
            s3_secret: Some(issued.secret.clone()),
        });
        let id = issued.raw_id;
        self.change(name, |record| {
            add_credential(record, &hex::encode(id))?;
            Ok(vec![put(credential_key(&id), row.clone())])
        })
        .await?;
        Ok(NewS3Key {
            principal: name.to_owned(),
            issued,
        })
    }

    /// Replaces every credential of principal `name` with one new one, in
    /// one batch: the old ones stop working as the new one starts.
    ///
    /// # Errors
    /// [`PrincipalError::NotFound`].
    pub async fn rotate(&self, name: &str) -> Result<NewCredential, PrincipalError> {
        let issued = credential::issue().map_err(|e| PrincipalError::Random(e.to_string()))?;
        let row = encode(&self.credential_row(name, &issued.presented, false));
        let id = issued.presented.id;
        self.change(name, |record| {
            let mut writes = revoke_all(record)?;
            record.credentials = vec![hex::encode(id)];
            writes.push(put(credential_key(&id), row.clone()));
            Ok(writes)
        })
        .await?;
        Ok(NewCredential {
            principal: name.to_owned(),
            issued,
        })
    }

    /// Revokes principal `name`'s credential `id` (hex).
    ///
    /// # Errors
    /// [`PrincipalError::NotFound`] when the principal has no such
    /// credential.
    pub async fn revoke(&self, name: &str, id: &str) -> Result<View, PrincipalError> {
        let raw = parse_credential_id(id)?;
        self.change(name, |record| {
            let before = record.credentials.len();
            record.credentials.retain(|c| c != id);
            if record.credentials.len() == before {
                return Err(PrincipalError::NotFound(format!(
                    "principal {name:?} has no credential {id}"
                )));
            }
            Ok(vec![delete(credential_key(&raw))])
        })
        .await
    }

    /// Deletes principal `name` and every credential it holds.
    ///
    /// # Errors
    /// [`PrincipalError::NotFound`].
    pub async fn delete(&self, name: &str) -> Result<(), PrincipalError> {
        check_name(name)?;
        for _ in 0..MAX_ATTEMPTS {
            let (record, value) = self.read_for_change(name).await?;
            let mut writes = revoke_all(&record)?;
            writes.push(delete(principal_key(name)));
            if self.commit_change(name, value, writes).await? {
                return Ok(());
            }
        }
        Err(PrincipalError::Busy(name.to_owned()))
    }

    /// Makes the server's bootstrap token `token` a credential of
    /// [`BOOTSTRAP_PRINCIPAL`], creating that principal (role
    /// [`ADMIN_ROLE`]) if it is missing. Idempotent; a principal of that
    /// name that already exists keeps its roles.
    ///
    /// # Errors
    /// [`PrincipalError::Invalid`] when the principal already holds
    /// [`MAX_CREDENTIALS`] other credentials; the KV failed.
    pub async fn register_bootstrap(&self, token: &str) -> Result<(), PrincipalError> {
        let presented = credential::bootstrap(token);
        let id = hex::encode(presented.id);
        let row = encode(&self.credential_row(BOOTSTRAP_PRINCIPAL, &presented, true));
        for _ in 0..MAX_ATTEMPTS {
            let current = self
                .kv
                .get(&partition(), &principal_key(BOOTSTRAP_PRINCIPAL))
                .await?;
            let (mut record, guard) = match &current {
                Some(value) => (
                    decode::<Record>("the bootstrap principal", value)?,
                    Precondition::Equals {
                        partition: partition(),
                        key: principal_key(BOOTSTRAP_PRINCIPAL),
                        value: value.clone(),
                    },
                ),
                None => (
                    Record {
                        roles: vec![ADMIN_ROLE.to_owned()],
                        created_ms: self.clock.now_ms(),
                        credentials: Vec::new(),
                    },
                    Precondition::Absent {
                        partition: partition(),
                        key: principal_key(BOOTSTRAP_PRINCIPAL),
                    },
                ),
            };
            let stored = self
                .kv
                .get(&partition(), &credential_key(&presented.id))
                .await?;
            if record.credentials.contains(&id) && stored.is_some() {
                return Ok(());
            }
            if !record.credentials.contains(&id) {
                add_credential(&mut record, &id)?;
            }
            let batch = Batch {
                preconditions: vec![guard],
                writes: vec![
                    put(principal_key(BOOTSTRAP_PRINCIPAL), encode(&record)),
                    put(credential_key(&presented.id), row.clone()),
                ],
            };
            if self.kv.apply(&batch).await? == Outcome::Committed {
                self.cache.clear();
                return Ok(());
            }
        }
        Err(PrincipalError::Busy(BOOTSTRAP_PRINCIPAL.to_owned()))
    }

    /// Applies `change` to principal `name`'s record, with the extra
    /// writes it returns, guarded on the record as read; retried on a
    /// concurrent change.
    async fn change(
        &self,
        name: &str,
        change: impl Fn(&mut Record) -> Result<Vec<Write>, PrincipalError>,
    ) -> Result<View, PrincipalError> {
        check_name(name)?;
        for _ in 0..MAX_ATTEMPTS {
            let (mut record, value) = self.read_for_change(name).await?;
            let mut writes = change(&mut record)?;
            writes.push(put(principal_key(name), encode(&record)));
            if self.commit_change(name, value, writes).await? {
                return Ok(view(name.to_owned(), record));
            }
        }
        Err(PrincipalError::Busy(name.to_owned()))
    }

    async fn read_for_change(&self, name: &str) -> Result<(Record, Vec<u8>), PrincipalError> {
        let value = self
            .kv
            .get(&partition(), &principal_key(name))
            .await?
            .ok_or_else(|| not_found(name))?;
        Ok((decode(&format!("principal {name:?}"), &value)?, value))
    }

    /// Commits `writes` if principal `name`'s row still holds `value`;
    /// `false` when it changed meanwhile.
    async fn commit_change(
        &self,
        name: &str,
        value: Vec<u8>,
        writes: Vec<Write>,
    ) -> Result<bool, PrincipalError> {
        let batch = Batch {
            preconditions: vec![Precondition::Equals {
                partition: partition(),
                key: principal_key(name),
                value,
            }],
            writes,
        };
        let committed = self.kv.apply(&batch).await? == Outcome::Committed;
        if committed {
            // Whatever changed, this process stops trusting what it cached.
            self.cache.clear();
        }
        Ok(committed)
    }
}

fn not_found(name: &str) -> PrincipalError {
    PrincipalError::NotFound(format!("no principal named {name:?}"))
}

fn view(name: String, record: Record) -> View {
    View {
        name,
        roles: record.roles,
        created_ms: record.created_ms,
        credentials: record.credentials,
    }
}

fn add_credential(record: &mut Record, id: &str) -> Result<(), PrincipalError> {
    if record.credentials.len() >= MAX_CREDENTIALS {
        return Err(PrincipalError::Invalid(format!(
            "a principal holds at most {MAX_CREDENTIALS} credentials; revoke one first"
        )));
    }
    record.credentials.push(id.to_owned());
    Ok(())
}

/// The deletes of every credential `record` lists.
fn revoke_all(record: &Record) -> Result<Vec<Write>, PrincipalError> {
    record
        .credentials
        .iter()
        .map(|id| {
            parse_credential_id(id)
                .map_err(|_| {
                    PrincipalError::Corrupt(format!("a principal lists credential {id:?}"))
                })
                .map(|raw| delete(credential_key(&raw)))
        })
        .collect()
}

#[cfg(test)]
mod tests;
