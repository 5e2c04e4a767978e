//! Per-step budgets of store calls, and the hooks that enforce them on the
//! KV's and the object store's one decorator around what a plugin reaches.
//!
//! A timer step is one bounded checkpoint: whatever the policy does, it
//! makes at most a fixed number of store calls, so one step cannot hold a
//! worker (or a shared backend) for long. A [`SliceBudget`] counts those
//! calls; a budget may have a parent (a tick's budget over all its steps)
//! and a call is granted only if every budget up the chain has room.
//!
//! Exhaustion is sticky: once a budget refused a call it stays exhausted,
//! and the step driver refuses to commit the step's batch even if the
//! policy ignored the `budget-exhausted` answer and returned a result
//! anyway (see [`SliceBudget::exhausted`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use async_trait::async_trait;

use custodian_kv::intercept::{Call as KvCall, Hook, Intercepted};
use custodian_kv::{Kv, KvError};
use custodian_object::observed::{Call, Observed, Observer};
use custodian_object::{ObjectError, ObjectStore};

/// A bounded number of store calls, optionally inside a parent budget.
/// Clones share the same count.
#[derive(Debug, Clone)]
pub struct SliceBudget {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    limit: u32,
    left: AtomicU32,
    exhausted: AtomicBool,
    parent: Option<SliceBudget>,
}

/// A store call was refused because a budget is spent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the step's budget of {limit} store calls is spent")]
pub struct BudgetExhausted {
    /// The limit of the budget that ran out.
    pub limit: u32,
}

impl SliceBudget {
    /// A budget of `calls` store calls.
    pub fn new(calls: u32) -> Self {
        Self::build(calls, None)
    }

    /// A budget of `calls` store calls that also draws on `parent`.
    pub fn with_parent(calls: u32, parent: Self) -> Self {
        Self::build(calls, Some(parent))
    }

    fn build(calls: u32, parent: Option<Self>) -> Self {
        Self {
            inner: Arc::new(Inner {
                limit: calls,
                left: AtomicU32::new(calls),
                exhausted: AtomicBool::new(false),
                parent,
            }),
        }
    }

    /// Takes one call from this budget and every parent.
    ///
    /// # Errors
    /// [`BudgetExhausted`] naming the first budget (innermost first) that
    /// has no call left; the budgets below it keep the call they gave, which
    /// is harmless because exhaustion ends the step.
    pub fn charge(&self) -> Result<(), BudgetExhausted> {
        let mut budget = Some(self);
        while let Some(current) = budget {
            let inner = &current.inner;
            let taken = inner
                .left
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                    left.checked_sub(1)
                });
            if taken.is_err() {
                // Mark the whole chain below too, so the step that was
                // refused sees `exhausted()` on its own budget.
                let mut marked = Some(self);
                while let Some(m) = marked {
                    m.inner.exhausted.store(true, Ordering::Release);
                    if std::ptr::eq(m, current) {
                        break;
                    }
                    marked = m.inner.parent.as_ref();
                }
                return Err(BudgetExhausted { limit: inner.limit });
            }
            budget = inner.parent.as_ref();
        }
        Ok(())
    }

    /// Whether a call was ever refused by this budget (or by a parent on
    /// its behalf). A step whose budget is exhausted commits nothing.
    pub fn exhausted(&self) -> bool {
        self.inner.exhausted.load(Ordering::Acquire)
    }

    /// Calls left in this budget alone.
    pub fn remaining(&self) -> u32 {
        self.inner.left.load(Ordering::Acquire)
    }

    /// Calls this budget started with.
    pub fn limit(&self) -> u32 {
        self.inner.limit
    }
}

/// `inner`, with every call charged to `budget` before it is made: the
/// KV's one decorator ([`Intercepted`]) with a charging hook. A refused
/// call never reaches the store.
pub fn budgeted_kv(inner: Arc<dyn Kv>, budget: SliceBudget) -> Arc<dyn Kv> {
    Arc::new(Intercepted {
        inner,
        hook: KvCharge(budget),
    })
}

/// Charges a budget for each KV call.
struct KvCharge(SliceBudget);

#[async_trait]
impl Hook for KvCharge {
    async fn before(&self, _inner: &dyn Kv, _call: KvCall<'_>) -> Result<(), KvError> {
        self.0
            .charge()
            .map_err(|e| KvError::BudgetExhausted(e.to_string().into()))
    }
}

/// `inner`, with every primitive call charged to `budget` before it is
/// made: the object store's one decorator ([`Observed`]) with a charging
/// hook. A refused call never reaches the store. Epoch cells and the
/// shorthands are charged for each primitive they make; a compose, which
/// the backend runs as one call (S3 must send the metadata when the upload
/// is created), is charged up front for the calls it makes: create, one
/// per part, complete.
pub fn budgeted_store(inner: Arc<dyn ObjectStore>, budget: SliceBudget) -> Arc<dyn ObjectStore> {
    Arc::new(Observed::new(inner, Arc::new(StoreCharge(budget))))
}

/// Charges a budget for each store call.
struct StoreCharge(SliceBudget);

impl Observer for StoreCharge {
    fn before(&self, call: &Call<'_>) -> Result<(), ObjectError> {
        let calls = match call {
            Call::Compose { parts, .. } => parts.saturating_add(2),
            _ => 1,
        };
        for _ in 0..calls {
            self.0
                .charge()
                .map_err(|e| ObjectError::BudgetExhausted(e.to_string().into()))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use custodian_base::clock::FixedClock;
    use custodian_kv::memory::MemoryKv;
    use custodian_kv::{Batch, Partition};
    use custodian_object::memory::MemoryStore;
    use custodian_object::{Metadata, ObjectStoreExt, PutCondition};

    fn partition() -> Partition {
        Partition::new("p").expect("valid")
    }

    #[test]
    fn a_budget_grants_exactly_its_calls_then_stays_exhausted() {
        let budget = SliceBudget::new(2);
        assert!(budget.charge().is_ok());
        assert!(budget.charge().is_ok());
        assert!(!budget.exhausted());
        assert_eq!(budget.charge(), Err(BudgetExhausted { limit: 2 }));
        assert!(budget.exhausted());
        assert_eq!(budget.remaining(), 0);
    }

    #[test]
    fn a_child_budget_is_refused_when_its_parent_runs_out() {
        let parent = SliceBudget::new(3);
        let first = SliceBudget::with_parent(2, parent.clone());
        let second = SliceBudget::with_parent(2, parent.clone());
        assert!(first.charge().is_ok());
        assert!(first.charge().is_ok());
        assert!(first.charge().is_err(), "the child's own limit holds");
        assert!(second.charge().is_ok());
        assert_eq!(second.charge(), Err(BudgetExhausted { limit: 3 }));
        assert!(second.exhausted(), "the refused child knows it is spent");
        assert!(parent.exhausted());
    }

    #[tokio::test]
    async fn a_budgeted_kv_refuses_calls_past_the_budget_without_touching_the_store() {
        let kv: Arc<dyn Kv> = Arc::new(MemoryKv::new(Arc::new(FixedClock::new(0))));
        let budgeted = budgeted_kv(kv.clone(), SliceBudget::new(1));
        let put = Batch {
            preconditions: vec![],
            writes: vec![custodian_kv::Write::Put {
                partition: partition(),
                key: b"k".to_vec(),
                value: b"v".to_vec(),
            }],
        };
        assert_eq!(budgeted.get(&partition(), b"k").await, Ok(None));
        assert!(matches!(
            budgeted.apply(&put).await,
            Err(KvError::BudgetExhausted(_))
        ));
        assert_eq!(kv.get(&partition(), b"k").await, Ok(None));
    }

    #[tokio::test]
    async fn a_budgeted_store_charges_each_primitive_call() {
        let store: Arc<dyn ObjectStore> =
            Arc::new(MemoryStore::versioned(Arc::new(FixedClock::new(0))));
        let budget = SliceBudget::new(2);
        let budgeted = budgeted_store(store.clone(), budget.clone());
        let body = Bytes::from_static(b"hello");
        let crc = custodian_base::checksum::crc64_nvme(&body);
        budgeted
            .put_whole(
                "a",
                body,
                &PutCondition::IfNoneMatchAny,
                &Metadata::new(),
                crc,
            )
            .await
            .expect("within budget");
        budgeted.head("a").await.expect("within budget");
        assert!(matches!(
            budgeted.delete("a").await,
            Err(ObjectError::BudgetExhausted(_))
        ));
        assert!(
            store.head("a").await.is_ok(),
            "the refused delete never ran"
        );
    }
}
