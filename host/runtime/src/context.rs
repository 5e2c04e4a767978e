//! What one call runs with: the host's mechanisms ([`Services`]), what the
//! plugin may reach ([`Grants`]) and the call's bounds, together a
//! [`CallContext`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use custodian_base::clock::Clock;
use custodian_core::decisions::retention::RetentionOracle;
use custodian_kv::memory::MemoryKv;
use custodian_kv::{Kv, KvError, Partition};
use custodian_object::ObjectStore;

use crate::limits::Limits;

/// The host's mechanisms, shared by every call.
pub struct Services {
    /// The KV backend.
    pub kv: Arc<dyn Kv>,
    /// Object stores by name.
    pub stores: BTreeMap<String, Arc<dyn ObjectStore>>,
    /// "Now" for plugins and for `NotAfter` guards.
    pub clock: Arc<dyn Clock>,
    /// Where mechanism futures that must wait (network I/O) are driven.
    pub io: tokio::runtime::Handle,
    /// Where a plugin's `retention-oracle` questions go; `None` answers
    /// them `unavailable`.
    pub retention: Option<Arc<dyn RetentionOracle>>,
}

impl Services {
    /// Services for plugins granted nothing (policies that decide from
    /// what the host hands them, and proofs of a new plugin): an empty
    /// in-memory KV, no stores, `clock`, and `io` to drive them.
    pub fn isolated(clock: Arc<dyn Clock>, io: tokio::runtime::Handle) -> Arc<Self> {
        Arc::new(Self {
            kv: Arc::new(MemoryKv::new(clock.clone())),
            stores: BTreeMap::new(),
            clock,
            io,
            retention: None,
        })
    }
}

/// What one plugin may reach. Everything not listed is denied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    /// KV partitions the plugin may read and write.
    pub partitions: BTreeSet<Partition>,
    /// KV partitions the plugin may only read (`apply` refuses them).
    pub read_partitions: BTreeSet<Partition>,
    /// Object stores the plugin may read and write, by name.
    pub stores: BTreeSet<String>,
    /// Object stores the plugin may only read (publishes, copies and
    /// deletes are refused).
    pub read_stores: BTreeSet<String>,
}

impl Grants {
    /// Nothing granted.
    pub fn none() -> Self {
        Self::default()
    }

    /// Grants the KV partition `name`.
    ///
    /// # Errors
    /// An invalid name, or one the host reserves for itself.
    pub fn partition(mut self, name: &str) -> Result<Self, KvError> {
        self.partitions.insert(grantable(name)?);
        Ok(self)
    }

    /// Grants reading (not writing) the KV partition `name`.
    ///
    /// # Errors
    /// As for [`Grants::partition`].
    pub fn read_partition(mut self, name: &str) -> Result<Self, KvError> {
        self.read_partitions.insert(grantable(name)?);
        Ok(self)
    }

    /// Grants the object store `name`.
    pub fn store(mut self, name: &str) -> Self {
        self.stores.insert(name.to_owned());
        self
    }

    /// Grants reading (not writing) the object store `name`.
    pub fn read_store(mut self, name: &str) -> Self {
        self.read_stores.insert(name.to_owned());
        self
    }

    /// The partition `name` if the plugin may read it.
    pub fn readable_partition(&self, name: &str) -> Option<&Partition> {
        self.partitions
            .get(name)
            .or_else(|| self.read_partitions.get(name))
    }

    /// Whether the plugin may read the store `name`.
    pub fn may_read_store(&self, name: &str) -> bool {
        self.stores.contains(name) || self.read_stores.contains(name)
    }

    /// The same reach, for reading only: every write a plugin tries is
    /// refused, so a call under these grants changes nothing.
    #[must_use]
    pub fn read_only(&self) -> Self {
        Self {
            partitions: std::collections::BTreeSet::new(),
            read_partitions: self
                .partitions
                .union(&self.read_partitions)
                .cloned()
                .collect(),
            stores: std::collections::BTreeSet::new(),
            read_stores: self.stores.union(&self.read_stores).cloned().collect(),
        }
    }
}

fn grantable(name: &str) -> Result<Partition, KvError> {
    let partition = Partition::new(name)?;
    if partition.is_host_reserved() {
        return Err(KvError::InvalidArgument(
            format!("partition {name:?} is reserved for the host and cannot be granted").into(),
        ));
    }
    Ok(partition)
}

/// Everything one call runs with.
pub struct CallContext {
    /// The host's mechanisms.
    pub services: Arc<Services>,
    /// What the plugin may reach.
    pub grants: Grants,
    /// The call's bounds.
    pub limits: Limits,
    /// Who the plugin is, for audit records and logs.
    pub actor: String,
}
