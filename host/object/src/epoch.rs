//! Epoch leases: a holder claims a numbered epoch by compare-and-swap on
//! one small object (the cell), renews it with the same CAS, and releases
//! it cleanly. Every backend gets these from its conditional publish.
//!
//! The cell is JSON `{"holder", "epoch", "echo", "released"}`; its etag is
//! the token guarding the next transition, and its last-modified time is
//! the store's clock for the last renewal (takeover is judged on the
//! store's clock, not the holder's).
//!
//! Rules:
//! - acquire without `supersede` creates the cell at epoch 1 and fails if
//!   any cell exists; with `supersede` it replaces exactly that observed
//!   state (its token) at epoch + 1: the caller has judged that holder dead;
//! - renew and release are guarded on the lease's token *and* check that
//!   the cell is still this holder's epoch, so a token paired with another
//!   holder's identity cannot rewrite the cell;
//! - release keeps the epoch number (deleting the cell would restart the
//!   numbering every stamp depends on).

use bytes::Bytes;
use custodian_base::detail::Detail;
use serde::{Deserialize, Serialize};

use async_trait::async_trait;

use super::{Metadata, ObjectError, ObjectStore, ObjectStoreExt, PutCondition};
use custodian_base::checksum;

/// Longest holder id or echo, in bytes: the cell stays one small object.
const MAX_FIELD_BYTES: usize = 1024;

/// The observed state of an epoch cell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpochState {
    /// Who holds (or last held) the epoch.
    pub holder_id: String,
    /// The epoch number, from 1.
    pub epoch: u64,
    /// Guards the next transition (the cell's etag).
    pub token: String,
    /// The store's time of the last write, ms since the epoch.
    pub last_renew_ms: Option<u64>,
    /// What the holder last echoed with its heartbeat.
    pub echo: Option<String>,
    /// The holder released it cleanly; a successor may take over at once.
    pub released: bool,
}

/// A held lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpochLease {
    /// The holder.
    pub holder_id: String,
    /// Its epoch.
    pub epoch: u64,
    /// Guards its next transition.
    pub token: String,
}

/// Epoch cells over any [`ObjectStore`]: written once over its conditional
/// publish, so no backend or wrapper implements them.
#[async_trait]
pub trait EpochCells: ObjectStore {
    /// The epoch cell at `key`, if any.
    ///
    /// # Errors
    /// The store's errors; `Corrupt` for a cell that does not decode.
    async fn epoch_read(&self, key: &str) -> Result<Option<EpochState>, ObjectError> {
        read(self, key).await
    }

    /// Claims the epoch cell: creates it at epoch 1 (`supersede: None`), or
    /// replaces the observed state at epoch + 1 by compare-and-swap.
    ///
    /// # Errors
    /// `PreconditionFailed` when the cell is not in the state the caller
    /// observed (someone else acquired first).
    async fn epoch_acquire(
        &self,
        key: &str,
        holder_id: &str,
        supersede: Option<&EpochState>,
    ) -> Result<EpochLease, ObjectError> {
        acquire(self, key, holder_id, supersede).await
    }

    /// Heartbeat. `echo: None` clears any previous echo.
    ///
    /// # Errors
    /// `PreconditionFailed` means deposed.
    async fn epoch_renew(
        &self,
        key: &str,
        lease: &EpochLease,
        echo: Option<&str>,
    ) -> Result<EpochLease, ObjectError> {
        renew(self, key, lease, echo).await
    }

    /// Marks the cell released, keeping the epoch number.
    ///
    /// # Errors
    /// `PreconditionFailed` means deposed.
    async fn epoch_release(&self, key: &str, lease: &EpochLease) -> Result<(), ObjectError> {
        release(self, key, lease).await
    }
}

impl<S: ObjectStore + ?Sized> EpochCells for S {}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Cell {
    holder: String,
    epoch: u64,
    echo: Option<String>,
    released: bool,
}

fn check_field(what: &str, value: &str) -> Result<(), ObjectError> {
    if value.is_empty() || value.len() > MAX_FIELD_BYTES {
        return Err(ObjectError::InvalidArgument(
            format!("a lease {what} is 1..={MAX_FIELD_BYTES} bytes").into(),
        ));
    }
    Ok(())
}

async fn write<S: ObjectStore + ?Sized>(
    store: &S,
    key: &str,
    cell: &Cell,
    condition: PutCondition,
) -> Result<String, ObjectError> {
    let body = Bytes::from(serde_json::to_vec(cell).expect("a cell serializes"));
    let crc = checksum::crc64_nvme(&body);
    let meta = store
        .put_whole(key, body, &condition, &Metadata::new(), crc)
        .await?;
    Ok(meta.etag)
}

/// See [`EpochCells::epoch_read`].
///
/// # Errors
/// The store's errors; `Corrupt` for a cell that does not decode.
async fn read<S: ObjectStore + ?Sized>(
    store: &S,
    key: &str,
) -> Result<Option<EpochState>, ObjectError> {
    let (meta, body) = match store.get_whole(key, None).await {
        Ok(found) => found,
        Err(ObjectError::NotFound(_)) => return Ok(None),
        Err(e) => return Err(e),
    };
    let cell: Cell = serde_json::from_slice(&body)
        .map_err(|e| ObjectError::Corrupt(Detail::caused_by(format!("epoch cell {key:?}"), e)))?;
    Ok(Some(EpochState {
        holder_id: cell.holder,
        epoch: cell.epoch,
        token: meta.etag,
        last_renew_ms: meta.last_modified_ms,
        echo: cell.echo,
        released: cell.released,
    }))
}

/// See [`EpochCells::epoch_acquire`].
///
/// # Errors
/// `PreconditionFailed` when the cell is not in the state the caller
/// observed (someone else acquired first).
async fn acquire<S: ObjectStore + ?Sized>(
    store: &S,
    key: &str,
    holder_id: &str,
    supersede: Option<&EpochState>,
) -> Result<EpochLease, ObjectError> {
    check_field("holder id", holder_id)?;
    let (epoch, condition) = match supersede {
        None => (1, PutCondition::IfNoneMatchAny),
        Some(observed) => (
            observed
                .epoch
                .checked_add(1)
                .ok_or_else(|| ObjectError::InvalidArgument("the epoch cannot advance".into()))?,
            PutCondition::IfMatch(observed.token.clone()),
        ),
    };
    let cell = Cell {
        holder: holder_id.to_owned(),
        epoch,
        echo: None,
        released: false,
    };
    let token = write(store, key, &cell, condition).await?;
    Ok(EpochLease {
        holder_id: holder_id.to_owned(),
        epoch,
        token,
    })
}

/// Checks that the cell still belongs to `lease` before a guarded write.
async fn held<S: ObjectStore + ?Sized>(
    store: &S,
    key: &str,
    lease: &EpochLease,
) -> Result<(), ObjectError> {
    let current = read(store, key).await?.ok_or_else(|| {
        ObjectError::PreconditionFailed(format!("no epoch cell at {key:?}").into())
    })?;
    if current.holder_id != lease.holder_id || current.epoch != lease.epoch {
        return Err(ObjectError::PreconditionFailed(
            format!(
                "the cell is epoch {} of {:?}; this lease is epoch {} of {:?}",
                current.epoch, current.holder_id, lease.epoch, lease.holder_id
            )
            .into(),
        ));
    }
    if current.released {
        return Err(ObjectError::PreconditionFailed(
            "the lease was already released".into(),
        ));
    }
    Ok(())
}

/// See [`EpochCells::epoch_renew`].
///
/// # Errors
/// `PreconditionFailed` when deposed.
async fn renew<S: ObjectStore + ?Sized>(
    store: &S,
    key: &str,
    lease: &EpochLease,
    echo: Option<&str>,
) -> Result<EpochLease, ObjectError> {
    if let Some(echo) = echo {
        check_field("echo", echo)?;
    }
    held(store, key, lease).await?;
    let cell = Cell {
        holder: lease.holder_id.clone(),
        epoch: lease.epoch,
        echo: echo.map(str::to_owned),
        released: false,
    };
    let token = write(
        store,
        key,
        &cell,
        PutCondition::IfMatch(lease.token.clone()),
    )
    .await?;
    Ok(EpochLease {
        token,
        ..lease.clone()
    })
}

/// See [`EpochCells::epoch_release`].
///
/// # Errors
/// `PreconditionFailed` when deposed.
async fn release<S: ObjectStore + ?Sized>(
    store: &S,
    key: &str,
    lease: &EpochLease,
) -> Result<(), ObjectError> {
    held(store, key, lease).await?;
    let cell = Cell {
        holder: lease.holder_id.clone(),
        epoch: lease.epoch,
        echo: None,
        released: true,
    };
    write(
        store,
        key,
        &cell,
        PutCondition::IfMatch(lease.token.clone()),
    )
    .await?;
    Ok(())
}
