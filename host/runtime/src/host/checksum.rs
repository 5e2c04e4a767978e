//! `custodian:host/checksum`: pure functions, not charged against the
//! budget (their cost is bounded by the guest's own memory).

use super::HostView;
use crate::bindings::HostError;
use crate::bindings::host::custodian::host::checksum as wit;
use crate::bindings::host::custodian::host::types::Error;
use custodian_base::checksum;

impl wit::Host for HostView<'_> {
    fn crc64_nvme(&mut self, data: Vec<u8>) -> wasmtime::Result<u64> {
        Ok(checksum::crc64_nvme(&data))
    }

    fn combine(&mut self, crc_a: u64, crc_b: u64, len_b: u64) -> wasmtime::Result<u64> {
        Ok(checksum::combine(crc_a, crc_b, len_b))
    }

    fn blake3(&mut self, data: Vec<u8>) -> wasmtime::Result<Vec<u8>> {
        Ok(blake3::hash(&data).as_bytes().to_vec())
    }

    fn to_wire(&mut self, crc: u64) -> wasmtime::Result<String> {
        Ok(checksum::to_wire(crc))
    }

    fn from_wire(&mut self, wire: String) -> Result<u64, HostError> {
        checksum::from_wire(&wire)
            .map_err(|e| HostError::Guest(Error::InvalidArgument(e.to_string())))
    }
}
