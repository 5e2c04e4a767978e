//! CRC-64/NVME: the single content identity of Custodian objects.
//!
//! Reflected polynomial `0xAD93D23594C935A9`, init and xorout all ones;
//! catalog check value `crc64_nvme(b"123456789") == 0xAE8B14860A799888`.
//! Computed with `crc-fast` (SIMD carry-less multiply), not tables.
//!
//! The wire form is S3's: base64 of the 8 big-endian bytes.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use crc_fast::{CrcAlgorithm, Digest};

/// The CRC-64/NVME of `data` in one pass.
pub fn crc64_nvme(data: &[u8]) -> u64 {
    crc_fast::checksum(CrcAlgorithm::Crc64Nvme, data)
}

/// The CRC of `a ++ b` from `crc(a)`, `crc(b)` and `b.len()`, reading no
/// bytes. This is what lets parts be checksummed independently (and
/// concurrently) and folded in order afterwards; folding out of order
/// gives the checksum of a different object.
pub fn combine(crc_a: u64, crc_b: u64, len_b: u64) -> u64 {
    crc_fast::checksum_combine(CrcAlgorithm::Crc64Nvme, crc_a, crc_b, len_b)
}

/// A streaming CRC-64/NVME: any split of the input into `update` calls
/// gives the one-pass value.
#[derive(Clone)]
pub struct Crc64Nvme(Digest);

impl Default for Crc64Nvme {
    fn default() -> Self {
        Self(Digest::new(CrcAlgorithm::Crc64Nvme))
    }
}

impl Crc64Nvme {
    /// The CRC of the empty input so far.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds the next bytes.
    pub fn update(&mut self, data: &[u8]) {
        self.0.update(data);
    }

    /// The CRC of everything fed.
    pub fn finalize(&self) -> u64 {
        self.0.finalize()
    }
}

/// S3's wire form of a CRC-64: base64 of its 8 big-endian bytes, 12
/// characters.
pub fn to_wire(crc: u64) -> String {
    STANDARD.encode(crc.to_be_bytes())
}

/// A string that is not the wire form of a CRC-64.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a CRC-64 wire form (12 characters of base64 encoding 8 bytes)")]
pub struct WireFormError(pub String);

/// The inverse of [`to_wire`], strict: anything but a 12-character
/// canonical base64 encoding of exactly 8 bytes is refused. A caller handed
/// something else must not validate a publish against a number nobody
/// computed.
pub fn from_wire(wire: &str) -> Result<u64, WireFormError> {
    let refuse = || WireFormError(wire.to_owned());
    if wire.len() != 12 {
        return Err(refuse());
    }
    let bytes: [u8; 8] = STANDARD
        .decode(wire)
        .map_err(|_| refuse())?
        .try_into()
        .map_err(|_| refuse())?;
    Ok(u64::from_be_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Non-uniform bytes: a run of one value would hide an operator that
    /// shifted by the wrong number of positions.
    fn sample(len: usize) -> Vec<u8> {
        (0..len as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect()
    }

    #[test]
    fn the_catalog_check_value_is_reproduced() {
        assert_eq!(crc64_nvme(b"123456789"), 0xAE8B_1486_0A79_9888);
        assert_eq!(crc64_nvme(b""), 0);
    }

    #[test]
    fn every_split_point_of_a_streaming_update_equals_one_pass() {
        let data = sample(1000);
        let whole = crc64_nvme(&data);
        for cut in 0..=data.len() {
            let mut crc = Crc64Nvme::new();
            crc.update(&data[..cut]);
            crc.update(&data[cut..]);
            assert_eq!(crc.finalize(), whole, "split at {cut}");
        }
    }

    #[test]
    fn combining_parts_in_order_equals_hashing_the_whole() {
        let data = sample(10_000);
        for sizes in [
            &[1usize, 999, 4096, 1, 4903][..],
            &[0, 10_000],
            &[10_000, 0],
        ] {
            let mut offset = 0;
            let mut acc = crc64_nvme(b"");
            for &size in sizes {
                let part = &data[offset..offset + size];
                acc = combine(acc, crc64_nvme(part), size as u64);
                offset += size;
            }
            assert_eq!(acc, crc64_nvme(&data), "parts {sizes:?}");
        }
    }

    #[test]
    fn folding_parts_out_of_order_gives_a_different_checksum() {
        let (a, b, c) = (
            &b"first-part-bytes"[..],
            &b"second"[..],
            &b"third-part!"[..],
        );
        let fold = |parts: &[&[u8]]| {
            parts
                .iter()
                .fold(0, |acc, p| combine(acc, crc64_nvme(p), p.len() as u64))
        };
        let whole = crc64_nvme(&[a, b, c].concat());
        assert_eq!(fold(&[a, b, c]), whole);
        assert_ne!(fold(&[b, a, c]), whole);
    }

    #[test]
    fn the_wire_form_is_base64_of_the_big_endian_bytes() {
        assert_eq!(to_wire(0xAE8B_1486_0A79_9888), "rosUhgp5mIg=");
        assert_eq!(to_wire(0), "AAAAAAAAAAA=");
        assert_eq!(from_wire("rosUhgp5mIg="), Ok(0xAE8B_1486_0A79_9888));
    }

    #[test]
    fn anything_but_a_canonical_eight_byte_encoding_is_refused() {
        for bad in [
            "",
            "rosUhgp5mIg",
            "rosUhgp5mIg==",
            " rosUhgp5mIg=",
            "rosUhgp5mI!=",
            "AAAAAAAAAAAA",
            "AAAAAAAAAAB=",
        ] {
            assert!(from_wire(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
