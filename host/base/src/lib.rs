//! The base every Custodian crate stands on: CRC-64/NVME content identity
//! ([`checksum`]), the buffers reads fill ([`buffer`]), the clock every
//! deadline reads ([`clock`]), the one vocabulary of failure every
//! layer's errors speak ([`error`]) and the message-plus-cause their
//! variants carry ([`detail`]). Nothing here knows about storage, plugins
//! or the network.

pub mod buffer;
pub mod checksum;
#[cfg(feature = "testing")]
pub mod child_process;
pub mod clock;
pub mod detail;
pub mod error;
#[cfg(feature = "testing")]
pub mod fuzz_input;
