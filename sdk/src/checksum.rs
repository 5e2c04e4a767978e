//! CRC-64/NVME (one-shot, `combine`, and S3's wire form) and BLAKE3.
//! Computed by the host (SIMD) in a component, by the same libraries
//! natively.

#[cfg(target_arch = "wasm32")]
pub use crate::bindings::host::custodian::host::checksum::{
    combine, crc64_nvme, from_wire, to_wire,
};
#[cfg(not(target_arch = "wasm32"))]
pub use crate::native::checksum::{combine, crc64_nvme, from_wire, to_wire};

/// BLAKE3 of `data`, a content object's id; see
/// `wit/deps/host/checksum.wit`. Hashed by the host, whose SIMD is wider
/// than a component's.
pub fn blake3(data: &[u8]) -> [u8; 32] {
    #[cfg(target_arch = "wasm32")]
    {
        let hash = crate::bindings::host::custodian::host::checksum::blake3(data);
        // The contract fixes the length; a host that breaks it cannot be
        // trusted with any hash, so the call traps.
        <[u8; 32]>::try_from(hash)
            .unwrap_or_else(|hash| panic!("the host's BLAKE3 hash is {} bytes, not 32", hash.len()))
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        crate::native::checksum::blake3(data)
    }
}
