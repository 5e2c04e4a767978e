//! Bearer credentials as text: how a token is made, how a presented one is
//! parsed into the id that finds its row and the hash its row must hold.
//!
//! An issued token reads `cust_<id>_<secret>`: 8 random bytes of id and 32
//! of secret, as lower-case hex. The id is not secret (like an S3 access
//! key id): it only finds the row. The secret is never stored; its row
//! holds its BLAKE3 hash, and a presented secret's hash is compared in
//! constant time. 256 random bits make guessing hopeless, so a fast hash
//! is the right one (a slow password hash would only make every request
//! slower).
//!
//! The bootstrap token (the server's token file, any text of
//! [`MIN_BOOTSTRAP_BYTES`]..=[`MAX_PRESENTED_BYTES`] bytes) is a credential
//! too: its id is derived from its text, so it is looked up the same way.

use subtle::ConstantTimeEq;

/// Bytes of a credential id.
pub const ID_BYTES: usize = 8;
/// Bytes of an issued token's secret: 256 bits, beyond guessing.
pub const SECRET_BYTES: usize = 32;
/// Prefix of every issued token: tells a reader (and secret scanners) what
/// the string is.
pub const TOKEN_PREFIX: &str = "cust_";
/// Longest credential looked at: a presented value longer than any
/// credential can be is refused before it is hashed or copied, so a huge
/// header costs nothing.
pub const MAX_PRESENTED_BYTES: usize = 256;
/// Shortest bootstrap token: a guessable token is no protection.
pub const MIN_BOOTSTRAP_BYTES: usize = 16;

/// Context string of the bootstrap id derivation (BLAKE3 `derive_key`).
const BOOTSTRAP_ID_CONTEXT: &str = "custodian 2026-12 bootstrap credential id";

/// A credential id.
pub type CredentialId = [u8; ID_BYTES];

/// What a presented credential claims: the row to read and the hash the
/// row must hold.
#[derive(Clone, PartialEq, Eq)]
pub struct Presented {
    /// The id of the row it names.
    pub id: CredentialId,
    /// The BLAKE3 hash of its secret.
    pub hash: [u8; 32],
}

impl std::fmt::Debug for Presented {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Presented({})", hex::encode(self.id))
    }
}

impl Presented {
    /// Parses `text` (a bearer value): an issued token, else a bootstrap
    /// token. `None` when it can be neither: too long, too short, not
    /// printable ASCII. Never allocates more than its fixed-size result.
    pub fn parse(text: &[u8]) -> Option<Self> {
        if text.len() > MAX_PRESENTED_BYTES || !text.iter().all(u8::is_ascii_graphic) {
            return None;
        }
        if let Some(rest) = text.strip_prefix(TOKEN_PREFIX.as_bytes())
            && rest.len() == 2 * ID_BYTES + 1 + 2 * SECRET_BYTES
            && rest[2 * ID_BYTES] == b'_'
        {
            let mut id = [0u8; ID_BYTES];
            let mut secret = [0u8; SECRET_BYTES];
            if hex::decode_to_slice(&rest[..2 * ID_BYTES], &mut id).is_ok()
                && hex::decode_to_slice(&rest[2 * ID_BYTES + 1..], &mut secret).is_ok()
            {
                return Some(Self {
                    id,
                    hash: *blake3::hash(&secret).as_bytes(),
                });
            }
        }
        (text.len() >= MIN_BOOTSTRAP_BYTES).then(|| Self::bootstrap(text))
    }

    /// A bootstrap token's id and hash.
    fn bootstrap(text: &[u8]) -> Self {
        let derived = blake3::derive_key(BOOTSTRAP_ID_CONTEXT, text);
        let mut id = [0u8; ID_BYTES];
        id.copy_from_slice(&derived[..ID_BYTES]);
        Self {
            id,
            hash: *blake3::hash(text).as_bytes(),
        }
    }

    /// Whether `stored` is this credential's hash, in time independent of
    /// where they differ.
    pub fn matches(&self, stored: &[u8; 32]) -> bool {
        bool::from(self.hash.ct_eq(stored))
    }
}

/// A freshly issued token: shown once, never stored.
pub struct Issued {
    /// Its id (hex), which names it in listings and revocations.
    pub id: String,
    /// The whole token, `cust_<id>_<secret>`.
    pub token: String,
    /// What its row holds.
    pub presented: Presented,
}

impl std::fmt::Debug for Issued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Issued({}, <redacted>)", self.id)
    }
}

/// Issues a new token from the OS's randomness.
///
/// # Errors
/// The OS has no randomness to give.
pub fn issue() -> Result<Issued, getrandom::Error> {
    let mut id = [0u8; ID_BYTES];
    let mut secret = [0u8; SECRET_BYTES];
    getrandom::fill(&mut id)?;
    getrandom::fill(&mut secret)?;
    let token = format!("{TOKEN_PREFIX}{}_{}", hex::encode(id), hex::encode(secret));
    Ok(Issued {
        id: hex::encode(id),
        token,
        presented: Presented {
            id,
            hash: *blake3::hash(&secret).as_bytes(),
        },
    })
}

/// The bootstrap credential of token `text` (already checked by the
/// server to be long enough and printable).
pub fn bootstrap(text: &str) -> Presented {
    Presented::bootstrap(text.as_bytes())
}

/// What starts every S3 access key id, like AWS's `AKIA`: tells a reader
/// (and secret scanners) what the string is.
pub const ACCESS_KEY_PREFIX: &str = "CUST";
/// Bytes of an S3 secret access key: 160 bits, beyond guessing, written as
/// 40 hex digits (the length of AWS's secrets, and nothing a config file
/// or an environment variable needs to quote).
pub const S3_SECRET_BYTES: usize = 20;

/// A freshly issued S3 key pair: the secret is shown once. Unlike a
/// bearer token's, the secret is also stored (see [`super::CredentialRow`]):
/// Signature V4 is an HMAC the server must compute with it.
pub struct IssuedS3Key {
    /// Its credential id (hex), which names it in listings and
    /// revocations.
    pub id: String,
    /// The raw id.
    pub raw_id: CredentialId,
    /// The access key id clients send: [`ACCESS_KEY_PREFIX`] and the id
    /// as upper-case hex.
    pub access_key_id: String,
    /// The secret access key.
    pub secret: String,
}

impl std::fmt::Debug for IssuedS3Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IssuedS3Key({}, <redacted>)", self.access_key_id)
    }
}

/// Issues a new S3 key pair from the OS's randomness.
///
/// # Errors
/// The OS has no randomness to give.
pub fn issue_s3_key() -> Result<IssuedS3Key, getrandom::Error> {
    let mut id = [0u8; ID_BYTES];
    let mut secret = [0u8; S3_SECRET_BYTES];
    getrandom::fill(&mut id)?;
    getrandom::fill(&mut secret)?;
    Ok(IssuedS3Key {
        id: hex::encode(id),
        raw_id: id,
        access_key_id: access_key_id(&id),
        secret: hex::encode(secret),
    })
}

/// The access key id of credential `id`.
pub fn access_key_id(id: &CredentialId) -> String {
    format!("{ACCESS_KEY_PREFIX}{}", hex::encode_upper(id))
}

/// The credential id an access key id names; `None` when it cannot be one
/// (so a stranger's random value costs no lookup).
pub fn parse_access_key_id(text: &str) -> Option<CredentialId> {
    let hex_part = text.strip_prefix(ACCESS_KEY_PREFIX)?;
    if hex_part.len() != 2 * ID_BYTES || !hex_part.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut id = [0u8; ID_BYTES];
    hex::decode_to_slice(hex_part, &mut id).ok()?;
    Some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_issued_token_parses_back_to_its_id_and_hash() {
        let issued = issue().unwrap();
        assert!(issued.token.starts_with("cust_"));
        assert_eq!(issued.token.len(), 5 + 16 + 1 + 64);
        let presented = Presented::parse(issued.token.as_bytes()).unwrap();
        assert_eq!(presented, issued.presented);
        assert!(presented.matches(&issued.presented.hash));
        assert_eq!(
            format!("{issued:?}"),
            format!("Issued({}, <redacted>)", issued.id)
        );
    }

    #[test]
    fn a_token_with_one_changed_secret_digit_has_the_same_id_and_another_hash() {
        let issued = issue().unwrap();
        let mut bytes = issued.token.clone().into_bytes();
        let last = bytes.len() - 1;
        bytes[last] = if bytes[last] == b'0' { b'1' } else { b'0' };
        let forged = Presented::parse(&bytes).unwrap();
        assert_eq!(forged.id, issued.presented.id);
        assert!(!forged.matches(&issued.presented.hash));
    }

    #[test]
    fn bootstrap_tokens_derive_a_stable_id_and_short_or_odd_values_are_nothing() {
        let a = Presented::parse(b"0123456789abcdef0123").unwrap();
        assert_eq!(a, bootstrap("0123456789abcdef0123"));
        assert_ne!(a.id, Presented::parse(b"0123456789abcdef0124").unwrap().id);
        assert_eq!(Presented::parse(b"short"), None);
        assert_eq!(Presented::parse(b"has space inside it!"), None);
        assert_eq!(
            Presented::parse("\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}".as_bytes()),
            None
        );
        assert_eq!(Presented::parse(&[0xff; 40]), None);
        assert_eq!(Presented::parse(&[b'a'; MAX_PRESENTED_BYTES + 1]), None);
        assert!(Presented::parse(&[b'a'; MAX_PRESENTED_BYTES]).is_some());
    }

    #[test]
    fn a_malformed_cust_token_is_taken_as_a_bootstrap_token_and_matches_nothing_issued() {
        let issued = issue().unwrap();
        let broken = issued.token.replacen('_', "-", 2);
        let presented = Presented::parse(broken.as_bytes()).unwrap();
        assert_ne!(presented.id, issued.presented.id);
    }

    #[test]
    fn an_issued_s3_key_names_its_credential_and_hides_its_secret_in_debug_output() {
        let key = issue_s3_key().unwrap();
        assert_eq!(key.access_key_id.len(), 20);
        assert_eq!(parse_access_key_id(&key.access_key_id), Some(key.raw_id));
        assert_eq!(key.secret.len(), 2 * S3_SECRET_BYTES);
        assert!(!format!("{key:?}").contains(&key.secret));
        assert_eq!(parse_access_key_id("AKIAIOSFODNN7EXAMPLE"), None);
        assert_eq!(parse_access_key_id("CUST0123"), None);
        assert_eq!(parse_access_key_id("CUST0123456789ABCDEG"), None);
    }
}
