use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use crc_fast::CrcAlgorithm;

use crate::Error;

/// The native host's `checksum.crc64-nvme`; see `wit/deps/host/checksum.wit`.
pub fn crc64_nvme(data: &[u8]) -> u64 {
    crc_fast::checksum(CrcAlgorithm::Crc64Nvme, data)
}

/// The native host's `checksum.combine`; see `wit/deps/host/checksum.wit`.
pub fn combine(crc_a: u64, crc_b: u64, len_b: u64) -> u64 {
    crc_fast::checksum_combine(CrcAlgorithm::Crc64Nvme, crc_a, crc_b, len_b)
}

/// The native host's `checksum.blake3`; see `wit/deps/host/checksum.wit`.
pub fn blake3(data: &[u8]) -> [u8; 32] {
    *blake3::hash(data).as_bytes()
}

/// The native host's `checksum.to-wire`; see `wit/deps/host/checksum.wit`.
pub fn to_wire(crc: u64) -> String {
    STANDARD.encode(crc.to_be_bytes())
}

/// The native host's `checksum.from-wire`; see `wit/deps/host/checksum.wit`.
pub fn from_wire(wire: &str) -> Result<u64, Error> {
    let refuse = || Error::InvalidArgument(format!("{wire:?} is not a CRC-64 wire form"));
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
