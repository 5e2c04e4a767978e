//! The base every Custodian crate stands on: CRC-64/NVME content identity
//! ([`checksum`]), the clock every deadline reads ([`clock`]) and the one
//! vocabulary of failure every layer's errors speak ([`error`]). Nothing
//! here knows about storage, plugins or the network.

pub mod checksum;
#[cfg(feature = "testing")]
pub mod child_process;
pub mod clock;
pub mod error;
