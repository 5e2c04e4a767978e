//! Object stores counted in the server's metrics: every call by store and
//! operation, and the failed ones beside them.
//!
//! The counting lives here, not in `object`, because the object module
//! knows nothing about the server; it only offers [`Observed`] to hang an
//! observer on.

use std::sync::Arc;

use super::metrics::Metrics;
use crate::object::ObjectStore;
use crate::object::observed::{Call, Observed, Observer};

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

    use super::*;
    use crate::checksum::crc64_nvme;
    use crate::clock::SystemClock;
    use crate::object::memory::MemoryStore;
    use crate::object::{Metadata, PutCondition};

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
        store
            .get_range_segments("k", 0..2, &meta.etag)
            .await
            .unwrap();
        store.head("k").await.unwrap();
        store.head("absent").await.unwrap_err();
        let text = metrics.render();
        for line in [
            "custodian_store_calls_total{store=\"serving\",operation=\"put_whole\"} 1",
            "custodian_store_calls_total{store=\"serving\",operation=\"get_range_segments\"} 1",
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
}
