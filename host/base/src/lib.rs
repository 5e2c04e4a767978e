//! The base every Custodian crate stands on: CRC-64/NVME content identity
//! ([`checksum`]) and the clock every deadline reads ([`clock`]). Nothing
//! here knows about storage, plugins or the network.

pub mod checksum;
#[cfg(feature = "testing")]
pub mod child_process;
pub mod clock;
