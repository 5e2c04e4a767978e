//! CRC-64/NVME: one-shot, `combine`, and S3's wire form. Computed by the
//! host (SIMD) in a component, by the same library natively.

#[cfg(target_arch = "wasm32")]
pub use crate::bindings::host::custodian::host::checksum::{
    combine, crc64_nvme, from_wire, to_wire,
};
#[cfg(not(target_arch = "wasm32"))]
pub use crate::native::checksum::{combine, crc64_nvme, from_wire, to_wire};
