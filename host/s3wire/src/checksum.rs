//! The `x-amz-checksum-*` family and `Content-MD5`: a client claims a
//! checksum of the body (in a header, or in an `aws-chunked` trailer), the
//! endpoint computes it as the body arrives and refuses the request with
//! `BadDigest` when the two differ, before anything is stored.
//!
//! CRC-64/NVME is the store's own content checksum; CRC-32 (what boto3
//! and the AWS CLI send by default), CRC-32C and SHA-256 are computed only
//! when claimed. SHA-1 is refused (`InvalidRequest`): no current client
//! sends it by default and the endpoint does not carry a SHA-1.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use crc_fast::{CrcAlgorithm, Digest};
use sha2::Digest as _;

use crate::error::{Code, S3Error};

/// A checksum algorithm a claim can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// CRC-64/NVME.
    Crc64Nvme,
    /// CRC-32 (ISO-HDLC, zlib's).
    Crc32,
    /// CRC-32C (Castagnoli).
    Crc32c,
    /// SHA-256.
    Sha256,
}

impl Algorithm {
    /// Every algorithm, in the order a response names them.
    pub const ALL: [Algorithm; 4] = [Self::Crc64Nvme, Self::Crc32, Self::Crc32c, Self::Sha256];

    /// The header that carries it (`x-amz-checksum-crc32`).
    pub fn header(self) -> &'static str {
        match self {
            Self::Crc64Nvme => "x-amz-checksum-crc64nvme",
            Self::Crc32 => "x-amz-checksum-crc32",
            Self::Crc32c => "x-amz-checksum-crc32c",
            Self::Sha256 => "x-amz-checksum-sha256",
        }
    }

    /// The name S3 gives it in `x-amz-checksum-algorithm` and XML
    /// (`CRC64NVME`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Crc64Nvme => "CRC64NVME",
            Self::Crc32 => "CRC32",
            Self::Crc32c => "CRC32C",
            Self::Sha256 => "SHA256",
        }
    }

    /// The algorithm a header name (any case) names; `None` for a header
    /// outside the family.
    ///
    /// # Errors
    /// `InvalidRequest` for a member of the family this endpoint does not
    /// compute (SHA-1, or one it does not know).
    pub fn of_header(name: &str) -> Result<Option<Self>, S3Error> {
        let name = name.to_ascii_lowercase();
        let Some(suffix) = name.strip_prefix("x-amz-checksum-") else {
            return Ok(None);
        };
        match suffix {
            "crc64nvme" => Ok(Some(Self::Crc64Nvme)),
            "crc32" => Ok(Some(Self::Crc32)),
            "crc32c" => Ok(Some(Self::Crc32c)),
            "sha256" => Ok(Some(Self::Sha256)),
            // Not a checksum: how to read a checksum back, or the type.
            "mode" | "type" | "algorithm" => Ok(None),
            other => Err(S3Error::new(
                Code::InvalidRequest,
                format!(
                    "the checksum algorithm `{other}` is not supported here; use CRC64NVME, CRC32, CRC32C or SHA256"
                ),
            )),
        }
    }

    /// The algorithm an `x-amz-checksum-algorithm` or
    /// `x-amz-sdk-checksum-algorithm` value names.
    ///
    /// # Errors
    /// `InvalidRequest` for one this endpoint does not compute.
    pub fn of_name(name: &str) -> Result<Self, S3Error> {
        Self::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(name))
            .ok_or_else(|| {
                S3Error::new(
                    Code::InvalidRequest,
                    format!("the checksum algorithm `{name}` is not supported here; use CRC64NVME, CRC32, CRC32C or SHA256"),
                )
            })
    }

    /// Bytes of the raw checksum.
    fn len(self) -> usize {
        match self {
            Self::Crc64Nvme => 8,
            Self::Crc32 | Self::Crc32c => 4,
            Self::Sha256 => 32,
        }
    }
}

/// A running checksum of one algorithm.
#[derive(Clone)]
pub enum Hasher {
    /// One of the CRCs.
    Crc(Algorithm, Digest),
    /// SHA-256.
    Sha256(sha2::Sha256),
}

impl std::fmt::Debug for Hasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Hasher({})", self.algorithm().name())
    }
}

impl Hasher {
    /// A fresh checksum of `algorithm`.
    pub fn new(algorithm: Algorithm) -> Self {
        match algorithm {
            Algorithm::Crc64Nvme => Self::Crc(algorithm, Digest::new(CrcAlgorithm::Crc64Nvme)),
            Algorithm::Crc32 => Self::Crc(algorithm, Digest::new(CrcAlgorithm::Crc32IsoHdlc)),
            Algorithm::Crc32c => Self::Crc(algorithm, Digest::new(CrcAlgorithm::Crc32Iscsi)),
            Algorithm::Sha256 => Self::Sha256(sha2::Sha256::new()),
        }
    }

    /// Its algorithm.
    pub fn algorithm(&self) -> Algorithm {
        match self {
            Self::Crc(algorithm, _) => *algorithm,
            Self::Sha256(_) => Algorithm::Sha256,
        }
    }

    /// Adds `data`.
    pub fn update(&mut self, data: &[u8]) {
        match self {
            Self::Crc(_, digest) => digest.update(data),
            Self::Sha256(hash) => hash.update(data),
        }
    }

    /// The checksum as S3 writes it: base64 of the big-endian bytes.
    pub fn finish(&self) -> String {
        match self {
            Self::Crc(algorithm, digest) => {
                let value = digest.finalize();
                let bytes = value.to_be_bytes();
                STANDARD.encode(&bytes[8 - algorithm.len()..])
            }
            Self::Sha256(hash) => STANDARD.encode(hash.clone().finalize()),
        }
    }
}

/// A checksum a client claims for a body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// Its algorithm.
    pub algorithm: Algorithm,
    /// Its value, base64 as sent.
    pub value: String,
}

impl Claim {
    /// A claim of `algorithm` with `value`.
    ///
    /// # Errors
    /// `InvalidRequest` when the value is not base64 of the algorithm's
    /// length (S3's answer to a malformed checksum header).
    pub fn new(algorithm: Algorithm, value: &str) -> Result<Self, S3Error> {
        let value = value.trim();
        let decoded = STANDARD.decode(value).map_err(|_| {
            S3Error::new(
                Code::InvalidRequest,
                format!("the value of {} is not base64", algorithm.header()),
            )
        })?;
        if decoded.len() != algorithm.len() {
            return Err(S3Error::new(
                Code::InvalidRequest,
                format!(
                    "the value of {} is {} bytes; {} are expected",
                    algorithm.header(),
                    decoded.len(),
                    algorithm.len()
                ),
            ));
        }
        Ok(Self {
            algorithm,
            value: STANDARD.encode(decoded),
        })
    }

    /// Checks the claim against what was computed.
    ///
    /// # Errors
    /// `BadDigest` when they differ.
    pub fn check(&self, computed: &Hasher) -> Result<(), S3Error> {
        self.check_wire(&computed.finish())
    }

    /// Checks the claim against a checksum computed elsewhere, in S3's
    /// wire form (the store's CRC-64/NVME, computed on the body pass
    /// anyway, need not be computed twice).
    ///
    /// # Errors
    /// `BadDigest` when they differ.
    pub fn check_wire(&self, actual: &str) -> Result<(), S3Error> {
        if actual == self.value {
            Ok(())
        } else {
            Err(S3Error::new(
                Code::BadDigest,
                format!(
                    "The {} you specified did not match the calculated checksum.",
                    self.algorithm.header()
                ),
            ))
        }
    }
}

/// A `Content-MD5` claim: the 16 raw bytes.
///
/// # Errors
/// `InvalidDigest` when the value is not base64 of 16 bytes.
pub fn content_md5(value: &str) -> Result<[u8; 16], S3Error> {
    STANDARD
        .decode(value.trim())
        .ok()
        .and_then(|b| <[u8; 16]>::try_from(b.as_slice()).ok())
        .ok_or_else(|| {
            S3Error::new(
                Code::InvalidDigest,
                "The Content-MD5 you specified was invalid.",
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(algorithm: Algorithm, data: &[u8]) -> String {
        let mut h = Hasher::new(algorithm);
        h.update(data);
        h.finish()
    }

    #[test]
    fn the_checksums_of_123456789_are_the_catalogued_check_values() {
        // The CRC catalogue's check values, as S3 writes them (base64 of
        // the big-endian bytes).
        let check = |v: &[u8]| STANDARD.encode(v);
        assert_eq!(
            of(Algorithm::Crc32, b"123456789"),
            check(&0xCBF4_3926u32.to_be_bytes())
        );
        assert_eq!(
            of(Algorithm::Crc32c, b"123456789"),
            check(&0xE306_9283u32.to_be_bytes())
        );
        assert_eq!(
            of(Algorithm::Crc64Nvme, b"123456789"),
            check(&0xAE8B_1486_0A79_9888u64.to_be_bytes())
        );
        assert_eq!(
            of(Algorithm::Sha256, b""),
            "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="
        );
    }

    #[test]
    fn a_claim_that_differs_is_bad_digest_and_a_malformed_one_invalid_request() {
        let claim = Claim::new(Algorithm::Crc32, &of(Algorithm::Crc32, b"abc")).unwrap();
        let mut h = Hasher::new(Algorithm::Crc32);
        h.update(b"abc");
        assert!(claim.check(&h).is_ok());
        h.update(b"d");
        assert_eq!(claim.check(&h).unwrap_err().code, Code::BadDigest);
        assert_eq!(
            Claim::new(Algorithm::Crc32, "AAAAAAAAAAA=")
                .unwrap_err()
                .code,
            Code::InvalidRequest
        );
        assert_eq!(
            Claim::new(Algorithm::Crc32, "not base64!")
                .unwrap_err()
                .code,
            Code::InvalidRequest
        );
    }

    #[test]
    fn header_names_map_to_algorithms_and_sha1_is_refused() {
        assert_eq!(
            Algorithm::of_header("X-Amz-Checksum-CRC32C").unwrap(),
            Some(Algorithm::Crc32c)
        );
        assert_eq!(Algorithm::of_header("x-amz-checksum-mode").unwrap(), None);
        assert_eq!(Algorithm::of_header("content-type").unwrap(), None);
        assert_eq!(
            Algorithm::of_header("x-amz-checksum-sha1")
                .unwrap_err()
                .code,
            Code::InvalidRequest
        );
        assert_eq!(
            Algorithm::of_name("crc64nvme").unwrap(),
            Algorithm::Crc64Nvme
        );
    }

    #[test]
    fn a_content_md5_must_be_sixteen_bytes_of_base64() {
        assert!(content_md5("1B2M2Y8AsgTpgAmY7PhCfg==").is_ok());
        assert_eq!(content_md5("AAAA").unwrap_err().code, Code::InvalidDigest);
    }
}
