//! Object stores and the KV counted in the server's metrics: every call by
//! store and operation, the failed ones beside them, and the size of every
//! KV batch (against the backend's limits, which etcd makes real).
//!
//! The counting lives here, not in `object` or `kv`, because those crates
//! know nothing about the server; each offers its one decorator
//! ([`Observed`], [`Intercepted`]) to hang a counting hook on.

use std::sync::Arc;

use async_trait::async_trait;

use super::metrics::Metrics;
use custodian_kv::intercept::{Call as KvCall, Hook, Intercepted};
use custodian_kv::{Batch, Kv, KvError, Partition, Precondition, Write};
use custodian_object::ObjectStore;
use custodian_object::observed::{Call, Observed, Observer};

/// `kv`, with every call counted in `metrics`, and every batch's
/// operations and bytes: a counting hook on the KV's one decorator.
pub fn metered_kv(kv: Arc<dyn Kv>, metrics: Arc<Metrics>) -> Arc<dyn Kv> {
    Arc::new(Intercepted {
        inner: kv,
        hook: KvMetrics(metrics),
    })
}

/// Counts the KV's calls and batches.
struct KvMetrics(Arc<Metrics>);

#[async_trait]
impl Hook for KvMetrics {
    async fn before(&self, _inner: &dyn Kv, call: KvCall<'_>) -> Result<(), KvError> {
        if let KvCall::Apply(batch) = call {
            let (ops, bytes) = batch_size(batch);
            self.0.kv_batch(ops, bytes);
        }
        Ok(())
    }

    fn after(&self, operation: &'static str, failed: bool) {
        self.0.kv_call(operation, failed);
    }
}

/// A batch's operations, and its bytes as a backend sees them: each key
/// with its partition name (etcd prefixes every key with it) and each
/// value.
fn batch_size(batch: &Batch) -> (u64, u64) {
    let row = |partition: &Partition, key: &[u8], value: &[u8]| {
        (partition.as_str().len() + 1 + key.len() + value.len()) as u64
    };
    let guards = batch.preconditions.iter().map(|p| match p {
        Precondition::Absent { partition, key } => row(partition, key, &[]),
        Precondition::Equals {
            partition,
            key,
            value,
        } => row(partition, key, value),
        Precondition::NotAfter(_) => 0,
    });
    let writes = batch.writes.iter().map(|w| match w {
        Write::Put {
            partition,
            key,
            value,
        } => row(partition, key, value),
        Write::Delete { partition, key } => row(partition, key, &[]),
    });
    let ops = (batch.preconditions.len() + batch.writes.len()) as u64;
    (ops, guards.chain(writes).sum())
}

/// `store`, with every call counted in `metrics` under the store's `name`.
/// A call is counted when it returns (a streaming read when its segments
/// are returned), so a failure is counted with its call.
pub fn metered(
    name: &str,
    store: Arc<dyn ObjectStore>,
    metrics: Arc<Metrics>,
) -> Arc<dyn ObjectStore> {
    let observer = StoreMetrics {
        name: name.to_owned(),
        metrics,
    };
    Arc::new(Observed::new(store, Arc::new(observer)))
}

/// Counts one store's calls.
struct StoreMetrics {
    /// The store's configured name: a label value chosen by the deployer,
    /// not by a request, so the series stay bounded.
    name: String,
    metrics: Arc<Metrics>,
}

impl Observer for StoreMetrics {
    fn after(&self, call: &Call<'_>, failed: bool) {
        self.metrics
            .store_call(&self.name, call.operation(), failed);
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use custodian_kv::Outcome;
    use custodian_kv::memory::MemoryKv;
    use custodian_object::ObjectStoreExt;

    use super::*;
    use custodian_base::checksum::crc64_nvme;
    use custodian_base::clock::SystemClock;
    use custodian_object::memory::MemoryStore;
    use custodian_object::{Metadata, PutCondition};

    #[tokio::test]
    async fn store_calls_are_counted_by_store_and_operation_with_failures() {
        let metrics = Arc::new(Metrics::new());
        let inner: Arc<dyn ObjectStore> = Arc::new(MemoryStore::versioned(Arc::new(SystemClock)));
        let store = metered("serving", inner, metrics.clone());
        let meta = store
            .put_whole(
                "k",
                Bytes::from_static(b"abc"),
                &PutCondition::IfNoneMatchAny,
                &Metadata::new(),
                crc64_nvme(b"abc"),
            )
            .await
            .unwrap();
        store.get_range("k", 0..2, &meta.etag).await.unwrap();
        store.head("k").await.unwrap();
        store.head("absent").await.unwrap_err();
        let text = metrics.render();
        for line in [
            "custodian_store_calls_total{store=\"serving\",operation=\"put_whole\"} 1",
            "custodian_store_calls_total{store=\"serving\",operation=\"get_range\"} 1",
            "custodian_store_calls_total{store=\"serving\",operation=\"head\"} 2",
            "custodian_store_errors_total{store=\"serving\",operation=\"head\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
        assert!(
            !text.contains(
                "custodian_store_errors_total{store=\"serving\",operation=\"put_whole\"}"
            )
        );
    }

    #[tokio::test]
    async fn kv_calls_are_counted_and_batches_weighed() {
        let metrics = Arc::new(Metrics::new());
        let kv = metered_kv(
            Arc::new(MemoryKv::new(Arc::new(SystemClock))),
            metrics.clone(),
        );
        let partition = Partition::new("work").unwrap();
        let batch = Batch {
            preconditions: vec![Precondition::Absent {
                partition: partition.clone(),
                key: b"k".to_vec(),
            }],
            writes: vec![Write::Put {
                partition: partition.clone(),
                key: b"k".to_vec(),
                value: b"value".to_vec(),
            }],
        };
        assert_eq!(kv.apply(&batch).await.unwrap(), Outcome::Committed);
        kv.get(&partition, b"k").await.unwrap();
        kv.get(&partition, b"").await.unwrap_err();
        let text = metrics.render();
        for line in [
            "custodian_kv_calls_total{operation=\"apply\"} 1",
            "custodian_kv_calls_total{operation=\"get\"} 2",
            "custodian_kv_errors_total{operation=\"get\"} 1",
            "custodian_kv_batch_ops_total 2",
            // "work" + separator + "k" twice, and "value" once.
            "custodian_kv_batch_bytes_total 17",
            "custodian_kv_batch_ops_max 2",
            "custodian_kv_batch_bytes_max 17",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }
}
