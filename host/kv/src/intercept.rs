//! The KV's one decorator: a store that shows each call to a [`Hook`]
//! before the real store answers it, and its outcome after. The core's
//! per-step budgets charge with it, the server's metrics count with it,
//! and tests count calls, move a clock, let other writers commit in
//! between, or fail as a dying process would; nothing else forwards the
//! trait by hand.

use std::ops::Deref;
use std::sync::Arc;

use async_trait::async_trait;

use super::{Answer, Batch, Kv, KvError, Outcome, Page, Partition, Read};

/// A call as a hook sees it, before it reaches the store.
pub enum Call<'a> {
    /// `get` of `key`.
    Get {
        /// The key read.
        key: &'a [u8],
    },
    /// `get_many`.
    GetMany,
    /// `scan`, resuming after `cursor`.
    Scan {
        /// The cursor it resumes after.
        cursor: Option<&'a [u8]>,
    },
    /// `read` of several rows and ranges in one snapshot.
    Read(&'a [Read]),
    /// `apply` of the batch.
    Apply(&'a Batch),
}

impl Call<'_> {
    /// The [`Kv`] method's name (`"get"`, `"get_many"`, `"scan"`,
    /// `"read"`, `"apply"`): a fixed set, so it is safe as a metric label.
    pub fn operation(&self) -> &'static str {
        match self {
            Call::Get { .. } => "get",
            Call::GetMany => "get_many",
            Call::Scan { .. } => "scan",
            Call::Read(_) => "read",
            Call::Apply(_) => "apply",
        }
    }
}

/// What is done around the calls of an [`Intercepted`] store.
#[async_trait]
pub trait Hook: Send + Sync {
    /// Runs before `call` reaches `inner` (and may use `inner` itself, as
    /// another writer would); an error is the call's answer, and `inner`
    /// never sees the call.
    async fn before(&self, inner: &dyn Kv, call: Call<'_>) -> Result<(), KvError>;

    /// Sees the outcome of each batch `inner` applied.
    fn applied(&self, _batch: &Batch, _outcome: &Outcome) {}

    /// Runs when a call that [`Hook::before`] let through has returned,
    /// with whether it failed.
    fn after(&self, _operation: &'static str, _failed: bool) {}
}

/// `inner`, with every call shown to `hook` first.
pub struct Intercepted<H> {
    /// The store that answers.
    pub inner: Arc<dyn Kv>,
    /// What is done around each call.
    pub hook: H,
}

impl<H> Deref for Intercepted<H> {
    type Target = H;

    fn deref(&self) -> &H {
        &self.hook
    }
}

#[async_trait]
impl<H: Hook> Kv for Intercepted<H> {
    async fn get(&self, partition: &Partition, key: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        let call = Call::Get { key };
        self.hook.before(self.inner.as_ref(), call).await?;
        let result = self.inner.get(partition, key).await;
        self.hook.after("get", result.is_err());
        result
    }

    async fn get_many(
        &self,
        partition: &Partition,
        keys: &[Vec<u8>],
    ) -> Result<Vec<Option<Vec<u8>>>, KvError> {
        self.hook.before(self.inner.as_ref(), Call::GetMany).await?;
        let result = self.inner.get_many(partition, keys).await;
        self.hook.after("get_many", result.is_err());
        result
    }

    async fn scan(
        &self,
        partition: &Partition,
        start: &[u8],
        end: Option<&[u8]>,
        cursor: Option<&[u8]>,
        limit: u32,
    ) -> Result<Page, KvError> {
        let call = Call::Scan { cursor };
        self.hook.before(self.inner.as_ref(), call).await?;
        let result = self.inner.scan(partition, start, end, cursor, limit).await;
        self.hook.after("scan", result.is_err());
        result
    }

    async fn read(&self, reads: &[Read]) -> Result<Vec<Answer>, KvError> {
        self.hook
            .before(self.inner.as_ref(), Call::Read(reads))
            .await?;
        let result = self.inner.read(reads).await;
        self.hook.after("read", result.is_err());
        result
    }

    async fn apply(&self, batch: &Batch) -> Result<Outcome, KvError> {
        self.hook
            .before(self.inner.as_ref(), Call::Apply(batch))
            .await?;
        let result = self.inner.apply(batch).await;
        self.hook.after("apply", result.is_err());
        let outcome = result?;
        self.hook.applied(batch, &outcome);
        Ok(outcome)
    }
}
