//! The S3 backend against real local servers: the shared conformance suite
//! on LocalStack and on moto, each run declaring what it cannot express,
//! and S3-specific behaviour.

use super::local_server::{self, Kind};

/// What LocalStack cannot express: nothing.
fn localstack_gaps(_case: &str) -> Option<&'static str> {
    None
}

/// What moto cannot express.
fn moto_gaps(case: &str) -> Option<&'static str> {
    match case {
        "deleting_an_absent_key_still_leaves_a_delete_marker" => {
            Some("moto creates no delete marker when a key without versions is deleted (S3 does)")
        }
        "an_uploads_parts_are_listed_by_number_until_it_is_aborted" => Some(
            "moto's ListParts answers for an upload id under any key (S3 answers NoSuchUpload \
             unless the key is the upload's)",
        ),
        _ => None,
    }
}

mod localstack {
    use super::*;

    crate::object_conformance_tests!(
        versioned async: || local_server::store(Kind::LocalStack),
        unexpressible: localstack_gaps
    );
}

mod moto {
    use super::*;

    crate::object_conformance_tests!(
        versioned async: || local_server::store(Kind::Moto),
        unexpressible: moto_gaps
    );
}

// ── S3-specific behaviour ───────────────────────────────────────────

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    BucketLifecycleConfiguration, ChecksumAlgorithm, ExpirationStatus, LifecycleExpiration,
    LifecycleRule, LifecycleRuleFilter,
};
use bytes::Bytes;

use super::super::{
    ComposeSpec, Metadata, ObjectAdmin, ObjectError, ObjectKey, ObjectStore, ObjectStoreExt,
    PartSource, PutCondition,
};
use super::publish::Written;
use super::{S3Store, etag};
use custodian_base::checksum::{self, crc64_nvme};

const MIB: u64 = 1 << 20;

/// Every server this machine can run, as `(kind, store)`.
async fn stores() -> Vec<(Kind, S3Store)> {
    let mut found = Vec::new();
    for kind in [Kind::LocalStack, Kind::Moto] {
        if let Some(store) = local_server::store(kind).await {
            found.push((kind, store));
        }
    }
    found
}

/// Deterministic bytes that differ with `salt`.
fn data(len: u64, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| ((i.wrapping_mul(2_654_435_761) >> 13) as u8) ^ salt)
        .collect()
}

fn local_file(bytes: &[u8]) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    std::io::Write::write_all(&mut file, bytes).unwrap();
    file
}

async fn create(store: &S3Store, key: &str, bytes: &[u8]) -> super::super::ObjectMeta {
    store
        .put_whole(
            key,
            Bytes::copy_from_slice(bytes),
            &PutCondition::IfNoneMatchAny,
            &Metadata::new(),
            crc64_nvme(bytes),
        )
        .await
        .unwrap_or_else(|e| panic!("creating {key:?}: {e}"))
}

async fn no_uploads(store: &S3Store) {
    let pending = store.list_uploads("").await.unwrap();
    assert!(pending.is_empty(), "uploads left behind: {pending:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_64_mib_object_is_composed_from_local_and_copied_parts() {
    for (kind, store) in stores().await {
        let quarter = 16 * MIB;
        let base_data = data(4 * quarter, 1);
        let base = create(&store, "big", &base_data).await;
        // Quarters two and four changed locally; one and three are clean.
        let mut next = base_data.clone();
        for range in [quarter..2 * quarter, 3 * quarter..4 * quarter] {
            let range = usize::try_from(range.start).unwrap()..usize::try_from(range.end).unwrap();
            next[range].iter_mut().for_each(|b| *b = b.wrapping_add(7));
        }
        let file = local_file(&next);
        let progress = Arc::new(AtomicU64::new(0));
        let stamps: Metadata = [("custodian-gen".to_owned(), "2".to_owned())].into();
        let spec = ComposeSpec {
            key: &ObjectKey::new("big").unwrap(),
            local_path: file.path(),
            parts: vec![
                PartSource::BaseCopy {
                    offset: 0,
                    len: quarter,
                },
                PartSource::Local {
                    offset: quarter,
                    len: quarter,
                },
                PartSource::BaseCopy {
                    offset: 2 * quarter,
                    len: quarter,
                },
                PartSource::Local {
                    offset: 3 * quarter,
                    len: quarter,
                },
            ],
            base_key: None,
            base_etag: Some(&base.etag),
            condition: PutCondition::IfMatch(base.etag.clone()),
            metadata: stamps.clone(),
            crc64: Some(crc64_nvme(&next)),
            progress: Some(progress.clone()),
        };
        let composed = store.compose(&spec).await.unwrap();
        assert_eq!(composed.size, 4 * quarter, "{kind:?}");
        assert_eq!(composed.crc64, Some(crc64_nvme(&next)), "{kind:?}");
        assert_eq!(progress.load(Ordering::Relaxed), 4 * quarter, "{kind:?}");
        let head = store.head("big").await.unwrap();
        assert_eq!(head.etag, composed.etag, "{kind:?}");
        assert_eq!(head.crc64, Some(crc64_nvme(&next)), "{kind:?}");
        assert_eq!(head.metadata, stamps, "{kind:?}");
        let (_, bytes) = store.get_whole("big", Some(&composed.etag)).await.unwrap();
        assert!(bytes == next, "{kind:?}: the composed bytes differ");
        // The base generation survives as a version.
        let old = store
            .get_version_range("big", base.version_id.as_deref().unwrap(), 0..quarter)
            .await
            .unwrap();
        assert!(
            old == base_data[..usize::try_from(quarter).unwrap()],
            "{kind:?}"
        );
        no_uploads(&store).await;
    }
}

#[tokio::test]
async fn a_compose_failing_midway_leaves_no_pending_upload() {
    for (kind, store) in stores().await {
        let part = store.min_part_size();
        // Six parts are planned; the file ends inside the fifth, so the
        // first parts land (concurrently) before a read fails.
        let file = local_file(&data(4 * part + part / 2, 3));
        let parts = (0..6)
            .map(|i| PartSource::Local {
                offset: i * part,
                len: part,
            })
            .collect();
        let spec = ComposeSpec {
            key: &ObjectKey::new("k").unwrap(),
            local_path: file.path(),
            parts,
            base_key: None,
            base_etag: None,
            condition: PutCondition::IfNoneMatchAny,
            metadata: Metadata::new(),
            crc64: None,
            progress: None,
        };
        let got = store.compose(&spec).await;
        assert!(matches!(got, Err(ObjectError::Io(_))), "{kind:?}: {got:?}");
        no_uploads(&store).await;
        assert!(matches!(
            store.head("k").await,
            Err(ObjectError::NotFound(_))
        ));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compose_dropped_midway_aborts_its_upload() {
    for (kind, store) in stores().await {
        let part = store.min_part_size();
        let file = local_file(&data(12 * part, 4));
        let progress = Arc::new(AtomicU64::new(0));
        let parts = (0..12)
            .map(|i| PartSource::Local {
                offset: i * part,
                len: part,
            })
            .collect();
        let spec = ComposeSpec {
            key: &ObjectKey::new("k").unwrap(),
            local_path: file.path(),
            parts,
            base_key: None,
            base_etag: None,
            condition: PutCondition::IfNoneMatchAny,
            metadata: Metadata::new(),
            crc64: None,
            progress: Some(progress.clone()),
        };
        // Dropped as soon as the first part has landed: the upload exists.
        tokio::select! {
            got = store.compose(&spec) => panic!("{kind:?}: finished first: {got:?}"),
            () = async {
                while progress.load(Ordering::Relaxed) == 0 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            } => {}
        }
        // The abort was spawned; give it a moment.
        let mut pending = store.list_uploads("").await.unwrap();
        for _ in 0..100 {
            if pending.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            pending = store.list_uploads("").await.unwrap();
        }
        assert!(pending.is_empty(), "{kind:?}: {pending:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_eight_concurrent_creators_of_one_key_exactly_one_wins() {
    for (kind, store) in stores().await {
        let store = Arc::new(store);
        let mut writers = tokio::task::JoinSet::new();
        for writer in 0..8u8 {
            let store = store.clone();
            writers.spawn(async move {
                let body = Bytes::from(vec![writer; 1000]);
                let crc = crc64_nvme(&body);
                let got = store
                    .put_whole(
                        "contended",
                        body,
                        &PutCondition::IfNoneMatchAny,
                        &Metadata::new(),
                        crc,
                    )
                    .await;
                (writer, got)
            });
        }
        let mut winners = Vec::new();
        while let Some(joined) = writers.join_next().await {
            let (writer, got) = joined.unwrap();
            match got {
                Ok(meta) => winners.push((writer, meta)),
                Err(ObjectError::PreconditionFailed(_) | ObjectError::Conflict(_)) => {}
                Err(other) => panic!("{kind:?}: writer {writer}: {other}"),
            }
        }
        assert_eq!(winners.len(), 1, "{kind:?}: {winners:?}");
        let (writer, meta) = &winners[0];
        let (head, bytes) = store.get_whole("contended", None).await.unwrap();
        assert_eq!(head.etag, meta.etag, "{kind:?}");
        assert_eq!(bytes, vec![*writer; 1000], "{kind:?}");
        assert_eq!(
            store
                .list_versions("contended", None, 100)
                .await
                .unwrap()
                .items
                .len(),
            1,
            "{kind:?}: only the winner wrote a version"
        );
    }
}

#[tokio::test]
async fn a_presigned_get_url_serves_the_bytes_to_a_plain_http_client() {
    for (kind, store) in stores().await {
        create(&store, "shared/file", b"presigned bytes").await;
        let url = store
            .presign_get(&ObjectKey::new("shared/file").unwrap(), 300)
            .await
            .unwrap();
        let (status, body) =
            tokio::task::spawn_blocking(move || local_server::http("GET", &url, &[]))
                .await
                .unwrap()
                .unwrap();
        assert_eq!(
            (status, &body[..]),
            (200, &b"presigned bytes"[..]),
            "{kind:?}"
        );
    }
}

#[tokio::test]
async fn a_presigned_put_url_takes_bytes_from_a_plain_http_client() {
    for (kind, store) in stores().await {
        let url = store
            .presign_put(&ObjectKey::new("uploaded/blob").unwrap(), 300)
            .await
            .unwrap();
        let (status, _) = tokio::task::spawn_blocking(move || {
            local_server::http("PUT", &url, b"content-addressed bytes")
        })
        .await
        .unwrap()
        .unwrap();
        assert_eq!(status, 200, "{kind:?}");
        let (_, bytes) = store.get_whole("uploaded/blob", None).await.unwrap();
        assert_eq!(&bytes[..], b"content-addressed bytes", "{kind:?}");
    }
}

#[tokio::test]
async fn a_presigned_url_lives_at_most_seven_days() {
    for (kind, store) in stores().await {
        for ttl in [0, super::MAX_PRESIGN_TTL_SECS + 1] {
            let got = store.presign_get(&ObjectKey::new("k").unwrap(), ttl).await;
            assert!(
                matches!(got, Err(ObjectError::InvalidArgument(_))),
                "{kind:?} {ttl}: {got:?}"
            );
        }
        assert!(
            store
                .presign_put(&ObjectKey::new("k").unwrap(), super::MAX_PRESIGN_TTL_SECS)
                .await
                .is_ok()
        );
    }
}

/// A store that was never bootstrapped, or `None` when `kind` cannot run.
async fn raw_store(kind: Kind) -> Option<S3Store> {
    Some(local_server::server(kind)?.raw_store().await)
}

#[tokio::test]
async fn bootstrap_finds_that_moto_does_not_validate_checksums_and_verifies_by_reading() {
    let Some(store) = raw_store(Kind::Moto).await else {
        return;
    };
    assert!(store.verifies_by_reading(), "unproven servers are verified");
    let report = store.bootstrap("").await.unwrap();
    assert!(report.ok(), "{report:?}");
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("DOES NOT VALIDATE CHECKSUMS")),
        "{report:?}"
    );
    assert!(store.verifies_by_reading());
    // The probes left nothing behind.
    assert!(
        store
            .list_versions("", None, 100)
            .await
            .unwrap()
            .items
            .is_empty()
    );
    no_uploads(&store).await;
}

#[tokio::test]
async fn bootstrap_finds_that_localstack_validates_checksums_and_trusts_it() {
    let Some(store) = raw_store(Kind::LocalStack).await else {
        return;
    };
    let report = store.bootstrap("").await.unwrap();
    assert!(report.ok(), "{report:?}");
    assert!(
        report
            .notes
            .iter()
            .any(|n| n.contains("validates CRC-64/NVME")),
        "{report:?}"
    );
    assert!(
        !report.warnings.iter().any(|w| w.contains("VALIDATE")),
        "{report:?}"
    );
    assert!(!store.verifies_by_reading());
    assert!(
        store
            .list_versions("", None, 100)
            .await
            .unwrap()
            .items
            .is_empty()
    );
    no_uploads(&store).await;
}

#[tokio::test]
async fn a_publish_whose_bytes_read_back_wrong_is_removed_and_refused() {
    // moto stores whatever CRC it is told, so a publish can land with
    // bytes that do not match: the read-back must catch and remove it.
    let Some(store) = local_server::store(Kind::Moto).await else {
        return;
    };
    let old = create(&store, "k", b"old").await;
    let full = store.keys.full(&ObjectKey::new("k").unwrap()).unwrap();
    let claimed = crc64_nvme(b"what the caller meant");
    let out = store
        .client
        .put_object()
        .bucket(&store.bucket)
        .key(&full)
        .body(ByteStream::from_static(b"what arrived"))
        .checksum_algorithm(ChecksumAlgorithm::Crc64Nvme)
        .checksum_crc64_nvme(checksum::to_wire(claimed))
        .send()
        .await
        .unwrap();
    let version = etag::real_version(out.version_id()).map(str::to_owned);
    let got = store
        .settle(&Written {
            key: &ObjectKey::new("k").unwrap(),
            full: &full,
            version_id: version.as_deref(),
            crc64: claimed,
            returned: None,
        })
        .await;
    assert!(
        matches!(got, Err(ObjectError::ChecksumMismatch(_))),
        "{got:?}"
    );
    assert_eq!(store.head("k").await.unwrap().etag, old.etag);
    assert_eq!(
        store
            .list_versions("k", None, 10)
            .await
            .unwrap()
            .items
            .len(),
        1,
        "the bad version was removed"
    );
}

#[tokio::test]
async fn a_store_on_a_missing_bucket_is_not_found() {
    for kind in [Kind::LocalStack, Kind::Moto] {
        let Some(server) = local_server::server(kind) else {
            continue;
        };
        let got = S3Store::connect_with_credentials(
            server.config("no-such-bucket-here"),
            Arc::new(custodian_base::clock::SystemClock),
            local_server::credentials(),
        )
        .await;
        assert!(
            matches!(got, Err(ObjectError::NotFound(_))),
            "{kind:?}: {got:?}"
        );
    }
}

#[tokio::test]
async fn keys_live_under_the_store_prefix() {
    for kind in [Kind::LocalStack, Kind::Moto] {
        let Some(server) = local_server::server(kind) else {
            continue;
        };
        let bucket = server.fresh_bucket().await;
        let mut config = server.config(&bucket);
        config.prefix = "tier/".into();
        let store = S3Store::connect_with_credentials(
            config,
            Arc::new(custodian_base::clock::SystemClock),
            local_server::credentials(),
        )
        .await
        .unwrap();
        create(&store, "a/b", b"v").await;
        let listed = store
            .client
            .list_objects_v2()
            .bucket(&bucket)
            .send()
            .await
            .unwrap();
        let keys: Vec<_> = listed.contents().iter().filter_map(|o| o.key()).collect();
        assert_eq!(keys, ["tier/a/b"], "{kind:?}");
        let page = store.list("", None, 10).await.unwrap();
        assert_eq!(page.items[0].key, "a/b", "{kind:?}");
        assert_eq!(
            store.list_versions("a", None, 10).await.unwrap().items[0].key,
            "a/b"
        );
        let too_long = "k".repeat(super::super::MAX_OBJECT_KEY_BYTES);
        let got = store
            .put_whole(
                &too_long,
                Bytes::from_static(b"v"),
                &PutCondition::Unconditional,
                &Metadata::new(),
                crc64_nvme(b"v"),
            )
            .await;
        assert!(
            matches!(got, Err(ObjectError::InvalidArgument(_))),
            "{kind:?}: the prefix counts against S3's key limit: {got:?}"
        );
    }
}

#[tokio::test]
async fn a_bucket_without_lifecycle_rules_reads_as_no_rules() {
    for kind in [Kind::LocalStack, Kind::Moto] {
        let Some(store) = raw_store(kind).await else {
            continue;
        };
        assert_eq!(store.lifecycle_rules().await.unwrap(), [], "{kind:?}");
    }
}

#[tokio::test]
async fn retention_is_appended_without_dropping_a_rule_this_host_did_not_write() {
    for (kind, store) in stores().await {
        let foreign = LifecycleRule::builder()
            .id("owners-rule")
            .status(ExpirationStatus::Enabled)
            .filter(LifecycleRuleFilter::builder().prefix("logs/").build())
            .expiration(LifecycleExpiration::builder().days(1).build())
            .build()
            .unwrap();
        // Replaces bootstrap's abort rule: the bucket's owner rewrote it.
        store
            .client
            .put_bucket_lifecycle_configuration()
            .bucket(&store.bucket)
            .lifecycle_configuration(
                BucketLifecycleConfiguration::builder()
                    .rules(foreign)
                    .build()
                    .unwrap(),
            )
            .send()
            .await
            .unwrap();
        let outcome = store
            .ensure_noncurrent_retention("data/", 30)
            .await
            .unwrap();
        assert!(outcome.created, "{kind:?}");
        let again = store.ensure_noncurrent_retention("data/", 7).await.unwrap();
        assert!(!again.created, "{kind:?}: a longer retention covers 7 days");
        assert_eq!(again.rule_id, outcome.rule_id);
        assert_eq!(again.noncurrent_days, 30);
        let rules = store.lifecycle_rules().await.unwrap();
        let ids: Vec<_> = rules.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["owners-rule", outcome.rule_id.as_str()], "{kind:?}");
        assert_eq!(rules[0].prefix, "logs/");
        assert_eq!(rules[1].noncurrent_days, Some(30));
        assert!(matches!(
            store.ensure_noncurrent_retention("data/", 0).await,
            Err(ObjectError::InvalidArgument(_))
        ));
    }
}
