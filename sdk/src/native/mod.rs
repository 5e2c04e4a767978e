//! The in-memory host a native build runs against.
//!
//! It keeps the host's semantics where policies depend on them — guarded
//! batches are really guarded, scans page with cursors, publishes check
//! conditions and CRCs, bounds are the host's — and grants every partition
//! and store, since a unit test is its own deployer (but not the host's
//! reserved `custodian.` partitions, which no deployer can grant). The KV
//! and the object stores run the host's conformance suites
//! (`tests/kv_conformance.rs`, `tests/object_conformance.rs`), so their
//! semantics are the host backends'. One host per thread,
//! so parallel tests do not see each other; [`crate::testing`] resets and
//! inspects it.
//!
//! This module sits below the capability modules (`kv`, `objects`, `audit`,
//! `log`, ...) and [`crate::testing`], which re-export its functions and
//! types; so it takes the WIT types straight from [`crate::bindings`] and
//! the bounds from [`custodian_contract::limits`], never from those
//! modules, to keep the imports one-way.

pub(crate) mod audit;
pub(crate) mod checksum;
pub(crate) mod clock;
pub(crate) mod guard;
pub(crate) mod kv;
pub(crate) mod log;
pub(crate) mod objects;
pub(crate) mod retention_oracle;

use std::cell::RefCell;
use std::collections::BTreeMap;

use crate::bindings::host::custodian::host::audit::Entry;
use crate::bindings::host::custodian::host::log::Level;
use retention_oracle::RetentionOracle;

/// One stored object of the native host.
#[derive(Debug, Clone)]
pub(crate) struct StoredObject {
    pub body: Vec<u8>,
    pub crc64: u64,
    pub etag: String,
    pub modified_ms: u64,
    pub metadata: Vec<(String, String)>,
}

/// How many host calls of the KV a native build made, by kind, as the
/// host's metrics count them (`custodian_kv_calls_total`): each call
/// once, however many rows it reads or writes. An installed
/// [`crate::testing::Guard`]'s own calls (the host's enforcement, not the
/// plugin's) are not counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KvCalls {
    /// `get`s.
    pub gets: u64,
    /// `get-many`s.
    pub get_manys: u64,
    /// `scan`s.
    pub scans: u64,
    /// Snapshot `read`s.
    pub snapshots: u64,
    /// `apply`s, an `audit.apply-with` included.
    pub applies: u64,
}

impl KvCalls {
    /// Every call that reads: on a networked KV, a round trip each.
    pub fn reads(&self) -> u64 {
        self.gets + self.get_manys + self.scans + self.snapshots
    }
}

#[derive(Debug, Default)]
pub(crate) struct State {
    pub now_ms: u64,
    pub kv: BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>,
    pub stores: BTreeMap<String, BTreeMap<String, StoredObject>>,
    pub audit: Vec<Entry>,
    pub logs: Vec<(Level, String)>,
    /// Makes every publish's etag distinct, as a real store's are.
    pub publishes: u64,
    /// What `retention-oracle` answers with, when a test installed one.
    pub retention: Option<RetentionOracle>,
    /// What checks writes before they are made, when a test installed it.
    pub guard: Option<guard::Guard>,
    /// The KV calls made since the last reset.
    pub kv_calls: KvCalls,
}

thread_local! {
    static HOST: RefCell<State> = RefCell::new(State::default());
}

pub(crate) fn with<R>(f: impl FnOnce(&mut State) -> R) -> R {
    HOST.with(|host| f(&mut host.borrow_mut()))
}
