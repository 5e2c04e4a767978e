//! Signed plugins: ed25519 signatures over a plugin's content hash, and
//! the trust a deployer configures (`[plugins] trusted_keys`).
//!
//! # What is signed
//! The text `custodian-plugin-signature-v1 blake3:HEX`, where `HEX` is the
//! plugin's content hash ([`crate::content_hash`]): the hash covers every
//! byte of the `.wasm`, and the prefix keeps a signature made for anything
//! else (another tool using the same key) from passing as a plugin's.
//!
//! # Where signatures live
//! - beside a plugin file, as `PLUGIN.wasm.sig` (JSON, [`Signature`]'s
//!   serialized form), read when a configured plugin is loaded;
//! - with a swap, in the `x-custodian-signature` header (that JSON);
//! - in the shared plugin set, with each world's member, so every host
//!   sharing the KV checks the signature against its own trusted keys
//!   before it runs a plugin another host published, and the set records
//!   who signed what it runs.
//!
//! # The rule
//! With no trusted key configured, nothing is required; a signature that
//! comes with a plugin is still checked, so a bad one is never recorded
//! as a signer. With trusted keys, every plugin must carry a valid
//! signature by one of them, except the plugins bundled with the host:
//! they are part of the binary the deployer already runs.
//!
//! Only public keys and signatures appear in files, logs and audit
//! records; a secret key is read from its file to sign and is never
//! printed.

use std::fmt;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{Signer as _, SigningKey, Verifier as _, VerifyingKey};
use serde::{Deserialize, Serialize};

/// The domain prefix of every signed message.
const CONTEXT: &str = "custodian-plugin-signature-v1";

/// The `format` of a signature file.
pub const SIGNATURE_FORMAT: &str = "custodian-plugin-signature-v1";

/// The `format` of a secret key file.
pub const SECRET_KEY_FORMAT: &str = "custodian-ed25519-secret-key-v1";

/// Why a key, a signature or a plugin's signing is not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// A key or signature that cannot be parsed.
    #[error("{0}")]
    Malformed(String),
    /// Trusted keys are configured and the plugin carries no signature.
    #[error(
        "{source_name} is not signed, and [plugins] trusted_keys requires a signature by one \
         of {trusted} trusted key(s): sign it with `custodian plugin sign`"
    )]
    Unsigned {
        /// The plugin, for people.
        source_name: String,
        /// How many keys are trusted.
        trusted: usize,
    },
    /// Signed, by a key that is not trusted.
    #[error("{source_name} is signed by {key}, which is not among the trusted keys")]
    Untrusted {
        /// The plugin, for people.
        source_name: String,
        /// The signer's public key.
        key: String,
    },
    /// The signature is for other bytes, or forged.
    #[error("the signature of {source_name} does not verify: {reason}")]
    Invalid {
        /// The plugin, for people.
        source_name: String,
        /// What does not match.
        reason: String,
    },
}

/// Where a plugin file's signature is kept: `PLUGIN.sig` beside it, where
/// a host loading the plugin from its configuration, `custodian plugin
/// swap` and `custodian plugin diff` look for it.
pub fn path_beside(plugin: &Path) -> PathBuf {
    let mut name = plugin.as_os_str().to_owned();
    name.push(".sig");
    PathBuf::from(name)
}

/// The signature file at `path`, `None` when there is none.
///
/// # Errors
/// [`SignatureError::Malformed`], naming the file, when it exists and
/// cannot be read or parsed: a plugin is never taken as unsigned because
/// its signature is broken.
pub fn read_file(path: &Path) -> Result<Option<Signature>, SignatureError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Signature::parse(&text)
            .map(Some)
            .map_err(|e| SignatureError::Malformed(format!("{}: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(SignatureError::Malformed(format!(
            "cannot read {}: {e}",
            path.display()
        ))),
    }
}

/// An ed25519 public key, written `ed25519:BASE64`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PublicKey(VerifyingKey);

impl PublicKey {
    /// Parses `ed25519:BASE64` (32 bytes).
    ///
    /// # Errors
    /// [`SignatureError::Malformed`] for any other text, or bytes that are
    /// not a point of the curve.
    pub fn parse(text: &str) -> Result<Self, SignatureError> {
        let malformed = |why: &str| {
            SignatureError::Malformed(format!(
                "{text:?} is not an ed25519 public key ({why}); keys read `ed25519:BASE64`, as \
                 `custodian plugin keygen` prints them"
            ))
        };
        let encoded = text
            .strip_prefix("ed25519:")
            .ok_or_else(|| malformed("no ed25519: prefix"))?;
        let bytes: [u8; 32] = STANDARD
            .decode(encoded)
            .map_err(|_| malformed("not base64"))?
            .try_into()
            .map_err(|_| malformed("not 32 bytes"))?;
        VerifyingKey::from_bytes(&bytes)
            .map(Self)
            .map_err(|_| malformed("not a curve point"))
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ed25519:{}", STANDARD.encode(self.0.as_bytes()))
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A secret signing key. Its `Debug` shows only the public half.
pub struct SecretKey(SigningKey);

/// A secret key file's contents.
#[derive(Serialize, Deserialize)]
struct SecretKeyFile {
    format: String,
    /// The public half, so the file says which key it is.
    key: String,
    /// The 32-byte seed, base64.
    secret: String,
}

impl SecretKey {
    /// A new key from the operating system's randomness.
    ///
    /// # Errors
    /// When no randomness is available.
    pub fn generate() -> Result<Self, SignatureError> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed)
            .map_err(|e| SignatureError::Malformed(format!("no randomness for a key: {e}")))?;
        Ok(Self(SigningKey::from_bytes(&seed)))
    }

    /// The public half.
    pub fn public(&self) -> PublicKey {
        PublicKey(self.0.verifying_key())
    }

    /// The key file's text (JSON).
    pub fn to_file(&self) -> String {
        let file = SecretKeyFile {
            format: SECRET_KEY_FORMAT.to_owned(),
            key: self.public().to_string(),
            secret: STANDARD.encode(self.0.to_bytes()),
        };
        serde_json::to_string_pretty(&file).expect("a key file serializes") + "\n"
    }

    /// Reads a key file's text.
    ///
    /// # Errors
    /// [`SignatureError::Malformed`] for anything but a key file whose
    /// public half matches its secret.
    pub fn from_file(text: &str) -> Result<Self, SignatureError> {
        let malformed = |why: &str| {
            SignatureError::Malformed(format!(
                "not a secret key file ({why}); `custodian plugin keygen` writes one"
            ))
        };
        let file: SecretKeyFile = serde_json::from_str(text).map_err(|_| malformed("not JSON"))?;
        if file.format != SECRET_KEY_FORMAT {
            return Err(malformed("unknown format"));
        }
        let seed: [u8; 32] = STANDARD
            .decode(&file.secret)
            .map_err(|_| malformed("the secret is not base64"))?
            .try_into()
            .map_err(|_| malformed("the secret is not 32 bytes"))?;
        let key = Self(SigningKey::from_bytes(&seed));
        if key.public().to_string() != file.key {
            return Err(malformed("its public key does not match its secret"));
        }
        Ok(key)
    }

    /// Signs the plugin whose content hash is `hash` (hex).
    pub fn sign(&self, hash: &str) -> Signature {
        let signature = self.0.sign(message(hash).as_bytes());
        Signature {
            format: SIGNATURE_FORMAT.to_owned(),
            key: self.public().to_string(),
            plugin: format!("blake3:{hash}"),
            signature: STANDARD.encode(signature.to_bytes()),
        }
    }
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretKey({})", self.public())
    }
}

fn message(hash: &str) -> String {
    format!("{CONTEXT} blake3:{hash}")
}

/// A plugin's signature: who signed which plugin. Serialized, it is the
/// `.sig` file beside a plugin and the `x-custodian-signature` header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signature {
    /// [`SIGNATURE_FORMAT`].
    pub format: String,
    /// The signer's public key, `ed25519:BASE64`.
    pub key: String,
    /// The signed plugin's content hash, `blake3:HEX`.
    pub plugin: String,
    /// The 64-byte ed25519 signature, base64.
    pub signature: String,
}

impl Signature {
    /// Parses a signature file's (or header's) JSON.
    ///
    /// # Errors
    /// [`SignatureError::Malformed`].
    pub fn parse(text: &str) -> Result<Self, SignatureError> {
        let signature: Self = serde_json::from_str(text).map_err(|e| {
            SignatureError::Malformed(format!(
                "not a plugin signature ({e}); `custodian plugin sign` writes one"
            ))
        })?;
        if signature.format != SIGNATURE_FORMAT {
            return Err(SignatureError::Malformed(format!(
                "unknown signature format {:?}",
                signature.format
            )));
        }
        Ok(signature)
    }

    /// The one-line JSON form.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a signature serializes")
    }

    /// Checks that this signs the plugin whose content hash is `hash`.
    fn verify(&self, hash: &str, source_name: &str) -> Result<PublicKey, SignatureError> {
        let invalid = |reason: String| SignatureError::Invalid {
            source_name: source_name.to_owned(),
            reason,
        };
        let key = PublicKey::parse(&self.key)?;
        let expected = format!("blake3:{hash}");
        if self.plugin != expected {
            return Err(invalid(format!(
                "it signs {}, and this plugin is {expected}",
                self.plugin
            )));
        }
        let bytes: [u8; 64] = STANDARD
            .decode(&self.signature)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| invalid("the signature is not 64 bytes of base64".to_owned()))?;
        key.0
            .verify(
                message(hash).as_bytes(),
                &ed25519_dalek::Signature::from_bytes(&bytes),
            )
            .map_err(|_| invalid(format!("it is not {key}'s signature of this plugin")))?;
        Ok(key)
    }
}

/// The keys a deployer trusts to sign plugins; empty, signatures are
/// optional.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trust {
    keys: Vec<PublicKey>,
}

impl Trust {
    /// Trusts `keys` (`ed25519:BASE64` each).
    ///
    /// # Errors
    /// [`SignatureError::Malformed`] naming the first key that is not one.
    pub fn new<S: AsRef<str>>(keys: &[S]) -> Result<Self, SignatureError> {
        let keys = keys
            .iter()
            .map(|k| PublicKey::parse(k.as_ref()))
            .collect::<Result<_, _>>()?;
        Ok(Self { keys })
    }

    /// Whether any key is trusted (and so signatures are required).
    pub fn requires_signatures(&self) -> bool {
        !self.keys.is_empty()
    }

    /// Decides whether the plugin with content hash `hash`, named
    /// `source_name`, may be loaded with `signature`: see the module
    /// documentation, "The rule". `bundled` says the bytes are the host's
    /// own bundled plugin of the world. Answers the signature to record
    /// (`None` for an unsigned plugin that needs none, or a bundled one).
    ///
    /// # Errors
    /// [`SignatureError`] with the reason the plugin is refused.
    pub fn admit(
        &self,
        hash: &str,
        source_name: &str,
        signature: Option<&Signature>,
        bundled: bool,
    ) -> Result<Option<Signature>, SignatureError> {
        if bundled && signature.is_none() {
            return Ok(None);
        }
        let Some(signature) = signature else {
            if self.requires_signatures() {
                return Err(SignatureError::Unsigned {
                    source_name: source_name.to_owned(),
                    trusted: self.keys.len(),
                });
            }
            return Ok(None);
        };
        let key = signature.verify(hash, source_name)?;
        if self.requires_signatures() && !bundled && !self.keys.contains(&key) {
            return Err(SignatureError::Untrusted {
                source_name: source_name.to_owned(),
                key: key.to_string(),
            });
        }
        Ok(Some(signature.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str = "ab12";

    fn trusting(key: &SecretKey) -> Trust {
        Trust::new(&[key.public().to_string()]).unwrap()
    }

    #[test]
    fn a_key_file_round_trips_and_its_debug_shows_only_the_public_key() {
        let key = SecretKey::generate().unwrap();
        let file = key.to_file();
        let read = SecretKey::from_file(&file).unwrap();
        assert_eq!(read.public(), key.public());
        let secret = serde_json::from_str::<serde_json::Value>(&file).unwrap()["secret"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(!format!("{key:?}").contains(&secret));
        assert_eq!(
            PublicKey::parse(&key.public().to_string()).unwrap(),
            key.public()
        );
    }

    #[test]
    fn a_tampered_key_file_is_refused() {
        let key = SecretKey::generate().unwrap();
        let other = SecretKey::generate().unwrap();
        let mut file: serde_json::Value = serde_json::from_str(&key.to_file()).unwrap();
        file["key"] = other.public().to_string().into();
        let refused = SecretKey::from_file(&file.to_string()).unwrap_err();
        assert!(refused.to_string().contains("does not match"), "{refused}");
        assert!(SecretKey::from_file("{}").is_err());
    }

    #[test]
    fn a_plugin_signed_by_a_trusted_key_is_admitted_and_its_signature_recorded() {
        let key = SecretKey::generate().unwrap();
        let signature = key.sign(HASH);
        let parsed = Signature::parse(&signature.to_json()).unwrap();
        let admitted = trusting(&key)
            .admit(HASH, "p.wasm", Some(&parsed), false)
            .unwrap();
        assert_eq!(admitted, Some(signature));
    }

    #[test]
    fn with_trusted_keys_an_unsigned_an_untrusted_or_a_mismatched_plugin_is_refused() {
        let key = SecretKey::generate().unwrap();
        let stranger = SecretKey::generate().unwrap();
        let trust = trusting(&key);
        assert!(matches!(
            trust.admit(HASH, "p.wasm", None, false),
            Err(SignatureError::Unsigned { trusted: 1, .. })
        ));
        assert!(matches!(
            trust.admit(HASH, "p.wasm", Some(&stranger.sign(HASH)), false),
            Err(SignatureError::Untrusted { .. })
        ));
        let other_plugin = key.sign("cd34");
        let refused = trust
            .admit(HASH, "p.wasm", Some(&other_plugin), false)
            .unwrap_err();
        assert!(
            refused.to_string().contains("it signs blake3:cd34"),
            "{refused}"
        );
        // The hash rewritten to match, the signature no longer verifies.
        let mut forged = key.sign("cd34");
        forged.plugin = format!("blake3:{HASH}");
        let refused = trust
            .admit(HASH, "p.wasm", Some(&forged), false)
            .unwrap_err();
        assert!(refused.to_string().contains("is not"), "{refused}");
        let mut garbled = key.sign(HASH);
        garbled.signature = "AAAA".into();
        assert!(matches!(
            trust.admit(HASH, "p.wasm", Some(&garbled), false),
            Err(SignatureError::Invalid { .. })
        ));
    }

    #[test]
    fn a_bundled_plugin_needs_no_signature_and_without_trusted_keys_none_is_needed() {
        let key = SecretKey::generate().unwrap();
        assert_eq!(trusting(&key).admit(HASH, "builtin", None, true), Ok(None));
        assert_eq!(
            Trust::default().admit(HASH, "p.wasm", None, false),
            Ok(None)
        );
        // Still checked when it comes: a bad one is never recorded.
        let stranger = SecretKey::generate().unwrap();
        assert!(
            Trust::default()
                .admit("cd34", "p.wasm", Some(&stranger.sign(HASH)), false)
                .is_err()
        );
        assert!(
            Trust::default()
                .admit(HASH, "p.wasm", Some(&stranger.sign(HASH)), false)
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn a_malformed_key_or_signature_is_refused_with_the_form_it_should_have() {
        for text in ["", "ed25519:", "ed25519:!!", "rsa:AAAA", "ed25519:AAAA"] {
            let refused = PublicKey::parse(text).unwrap_err().to_string();
            assert!(refused.contains("ed25519:BASE64"), "{text}: {refused}");
        }
        assert!(Trust::new(&["nope"]).is_err());
        assert!(Signature::parse("{}").is_err());
        let key = SecretKey::generate().unwrap();
        let mut signature = key.sign(HASH);
        signature.format = "v0".into();
        assert!(Signature::parse(&signature.to_json()).is_err());
    }
}
