//! The behaviour every [`ObjectStore`] backend must show. Each backend's
//! tests instantiate the suite with [`object_conformance_tests!`], handing
//! it a factory that builds an empty store and saying whether that store
//! keeps versions; the common checks run on both kinds, and each kind adds
//! its own group. A store reached through the plugin interface (the SDK's
//! native host) runs the `guest` form: the same checks less the few the
//! WIT `objects` interface cannot express, listed in the macro.
//!
//! Every check starts from an empty store and asserts only what the
//! contract promises: etags and version ids are compared for equality and
//! distinctness, never parsed, so a real backend's identifiers pass too.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::{
    BodySums, CompleteOptions, EpochCells, GetOptions, ListPage, ListedObject, ListedVersion,
    MAX_LIST_PAGE, MAX_METADATA_BYTES, MAX_METADATA_ENTRIES, MAX_OBJECT_KEY_BYTES, Metadata,
    ObjectError, ObjectKey, ObjectMeta, ObjectStore, ObjectStoreExt, PartData, PutCondition,
    StreamedBody, UploadOptions,
};
use custodian_base::checksum::crc64_nvme;

/// Generates one `#[tokio::test]` per conformance check for the backend
/// built by `$factory`: the common checks plus the `versioned` or
/// `unversioned` group.
///
/// - `versioned: f` / `unversioned: f`: `f: Fn() -> impl ObjectStore`.
/// - `versioned async: f, unexpressible: g`:
///   `f: Fn() -> impl Future<Output = Option<impl ObjectStore + 'static>>`,
///   for stores that need I/O to build (a bucket on a server the tests
///   start). `None` means the factory could not build one and has said
///   why; the check then returns without running (the factory decides
///   whether that is allowed, e.g. never under CI). `g: fn(&str) ->
///   Option<&'static str>` names the checks this run's server cannot
///   express, with the reason. Those checks still run and must fail (see
///   [`expect_unexpressible`]): a gap that closes is reported, never
///   silently passed.
/// - `versioned guest: f` / `unversioned guest: f`: as the sync forms, for
///   a store reached through what a plugin can ask: the WIT `objects`
///   interface (an adapter over a guest-facing host, such as the SDK's
///   native host). Runs every check that interface can express, the
///   kind's group included, and skips only the `@backend_only` checks,
///   each listed there with the reason. A backend never uses these forms:
///   it runs everything.
#[macro_export]
#[doc(hidden)]
macro_rules! object_conformance_tests {
    (versioned: $factory:expr) => {
        $crate::object_conformance_tests!(@versioned (sync $factory));
    };
    (versioned async: $factory:expr, unexpressible: $gaps:expr) => {
        $crate::object_conformance_tests!(@versioned (async $factory, $gaps));
    };
    (unversioned: $factory:expr) => {
        $crate::object_conformance_tests!(@unversioned (sync $factory));
    };
    (versioned guest: $factory:expr) => {
        $crate::object_conformance_tests!(@guest_common (sync $factory));
        $crate::object_conformance_tests!(@versioned_group (sync $factory));
    };
    (unversioned guest: $factory:expr) => {
        $crate::object_conformance_tests!(@guest_common (sync $factory));
        $crate::object_conformance_tests!(@unversioned_group (sync $factory));
    };
    (@versioned $how:tt) => {
        $crate::object_conformance_tests!(@common $how);
        $crate::object_conformance_tests!(@versioned_group $how);
    };
    (@versioned_group $how:tt) => {
        $crate::object_conformance_tests!(@each $how;
            the_store_says_it_keeps_versions,
            each_publish_gets_a_distinct_version_id_reported_by_head,
            every_version_stays_readable_by_id_after_it_is_replaced,
            a_delete_marker_hides_the_key_but_older_versions_stay_readable,
            a_key_behind_a_delete_marker_can_be_created_again,
            reading_a_delete_marker_by_id_is_a_failed_precondition,
            an_unknown_version_is_not_found_and_deleting_it_is_fine,
            deleting_the_newest_version_makes_the_previous_one_current,
            deleting_a_delete_marker_brings_the_key_back,
            deleting_every_version_leaves_nothing_behind,
            deleting_an_absent_key_still_leaves_a_delete_marker,
            a_copy_makes_a_new_version_and_the_source_version_survives,
            a_version_range_read_is_truncated_like_a_current_one,
            a_version_read_can_be_guarded_by_its_etag,
            list_versions_orders_keys_ascending_and_versions_newest_first,
            list_versions_pages_cover_every_version_exactly_once,
            list_versions_resumes_after_a_cursor_whose_version_was_deleted,
            list_key_versions_lists_only_that_key_newest_first,
            list_key_versions_pages_cover_every_version_exactly_once,
            a_malformed_version_cursor_is_invalid,
            a_zero_or_oversized_version_listing_limit_is_invalid,
            version_calls_refuse_invalid_keys,
            a_whole_version_reads_back_exactly,
            a_lease_cell_keeps_its_history_as_versions,
        );
    };
    (@unversioned $how:tt) => {
        $crate::object_conformance_tests!(@common $how);
        $crate::object_conformance_tests!(@unversioned_group $how);
    };
    (@unversioned_group $how:tt) => {
        $crate::object_conformance_tests!(@each $how;
            the_store_says_it_keeps_no_versions,
            a_publish_reports_no_version_id,
            every_version_call_is_unsupported_even_for_an_existing_key,
        );
    };
    (@common $how:tt) => {
        $crate::object_conformance_tests!(@guest_common $how);
        $crate::object_conformance_tests!(@backend_only $how);
    };
    // The common checks a plugin can express through the WIT `objects`
    // interface (head, get, get-range, put, copy, delete, list and their
    // version-scoped forms); the epoch cells are written over those.
    (@guest_common $how:tt) => {
        $crate::object_conformance_tests!(@each $how;
            a_missing_key_is_not_found,
            a_published_object_reads_back_with_its_crc_and_metadata,
            a_create_of_an_existing_key_fails_and_the_first_bytes_survive,
            if_match_with_the_current_etag_replaces_the_object,
            if_match_with_a_stale_etag_fails_and_leaves_the_bytes,
            if_match_on_an_absent_key_fails_and_creates_nothing,
            an_unconditional_put_creates_and_overwrites,
            a_wrong_crc_fails_the_publish_and_stores_nothing,
            a_wrong_crc_on_an_existing_key_leaves_the_old_object,
            every_publish_gets_a_distinct_etag_even_for_identical_bytes,
            reads_guarded_by_a_stale_etag_fail,
            a_range_read_returns_exactly_the_bytes_asked_for,
            a_range_past_the_end_is_truncated_and_one_from_the_end_is_empty,
            a_copy_keeps_the_bytes_and_crc_but_takes_only_the_given_metadata,
            a_copy_onto_itself_publishes_a_new_generation,
            a_copy_guarded_by_a_stale_source_etag_fails_and_writes_nothing,
            a_copy_respects_the_destination_condition,
            a_copy_from_a_missing_source_is_not_found,
            deleting_an_absent_key_is_not_an_error,
            a_deleted_key_reads_as_not_found_and_can_be_created_again,
            list_pages_resume_after_the_cursor_and_cover_every_key_once,
            list_respects_the_prefix_and_omits_deleted_keys,
            list_reports_the_current_size_and_etag,
            invalid_keys_are_refused_before_anything_is_stored,
            out_of_bounds_metadata_is_refused_and_nothing_is_stored,
            a_zero_or_oversized_list_limit_is_invalid,
            only_one_of_two_concurrent_creates_succeeds,
            only_one_of_two_writers_guarded_on_the_same_etag_succeeds,
            random_operations_agree_with_a_model_of_current_objects,
            range_segments_reassemble_the_range,
            stamps_round_trip_through_a_publish,
            an_epoch_cell_is_created_once_at_epoch_one,
            a_successor_supersedes_the_observed_holder_and_deposes_it,
            only_one_of_two_successors_racing_for_an_epoch_wins,
            a_released_cell_keeps_its_epoch_number,
            another_holders_identity_cannot_renew_a_lease,
            an_echo_rides_the_renewal_and_none_clears_it,
        );
    };
    // The common checks the WIT `objects` interface cannot express, so the
    // `guest` forms skip them (and only them):
    // - an inverted range: `get-range` takes an offset and a length, which
    //   cannot describe a range that ends before it starts;
    // - compose and the multipart primitives: a plugin publishes whole
    //   bodies of at most `MAX_BODY_BYTES`; there is no upload to start,
    //   fill, complete, list or abort;
    // - bootstrap: an operator-time call (`ObjectStore::admin`), never a
    //   plugin's;
    // - a content MD5: plugins publish with a CRC-64/NVME only (the MD5
    //   is for the S3 endpoint's ETags);
    // - streamed bodies: a plugin hands over whole bodies.
    (@backend_only $how:tt) => {
        $crate::object_conformance_tests!(@each $how;
            a_supplied_md5_is_reported_everywhere_as_given_or_nowhere,
            an_inverted_range_is_invalid,
            a_composed_object_of_local_parts_gets_the_accumulated_crc,
            a_composed_object_copies_clean_ranges_from_its_base,
            a_composed_object_may_copy_from_a_base_under_another_key,
            malformed_compose_specs_are_refused_before_anything_moves,
            a_compose_whose_base_moved_fails_and_leaves_no_upload,
            a_compose_failing_midway_aborts_its_upload,
            a_compose_with_a_wrong_crc_publishes_nothing_and_leaves_no_upload,
            a_compose_respects_its_condition,
            a_pending_upload_is_listed_until_aborted_and_aborting_twice_is_fine,
            an_uploads_parts_are_listed_by_number_until_it_is_aborted,
            metadata_declared_when_an_upload_starts_is_published_when_it_completes,
            an_upload_missing_a_part_cannot_complete,
            a_part_with_a_wrong_crc_is_refused,
            a_streamed_body_publishes_once_it_ends_with_its_crc,
            a_streamed_body_that_fails_ends_early_or_mismatches_publishes_nothing,
            a_streamed_part_completes_like_any_other_part,
            bootstrap_reports_a_usable_store,
        );
    };
    (@each (sync $factory:expr); $($name:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $name() {
                let store = ($factory)();
                $crate::conformance::$name(&store).await;
            }
        )+
    };
    (@each (async $factory:expr, $gaps:expr); $($name:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $name() {
                let Some(store) = ($factory)().await else {
                    return;
                };
                let gaps: fn(&str) -> Option<&'static str> = $gaps;
                match gaps(stringify!($name)) {
                    None => $crate::conformance::$name(&store).await,
                    Some(gap) => {
                        $crate::conformance::expect_unexpressible(
                            stringify!($name),
                            gap,
                            async move { $crate::conformance::$name(&store).await },
                        )
                        .await
                    }
                }
            }
        )+
    };
}

/// Runs a check that this run's server is declared unable to express
/// (`gap` says why) and requires it to fail: the failure is the declared
/// gap, printed; a pass means the gap has closed and the declaration must
/// go.
///
/// # Panics
/// When the check passes.
pub async fn expect_unexpressible(
    name: &str,
    gap: &str,
    check: impl std::future::Future<Output = ()> + Send + 'static,
) {
    match tokio::spawn(check).await {
        Err(failed) if failed.is_panic() => {
            eprintln!("{name}: fails as declared unexpressible on this server: {gap}");
        }
        Err(other) => panic!("{name}: the check did not finish: {other}"),
        Ok(()) => panic!(
            "{name} passed, but this run declares it unexpressible ({gap}): remove the declaration"
        ),
    }
}

// ── helpers ──────────────────────────────────────────────────────────

fn no_metadata() -> Metadata {
    Metadata::new()
}

fn metadata(pairs: &[(&str, &str)]) -> Metadata {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Publishes `body` with its true CRC, expecting success.
async fn put(
    store: &impl ObjectStore,
    key: &str,
    body: &[u8],
    condition: &PutCondition,
) -> ObjectMeta {
    let got = try_put(store, key, body, condition).await;
    got.unwrap_or_else(|e| panic!("publishing {key:?} under {condition:?}: {e}"))
}

async fn try_put(
    store: &impl ObjectStore,
    key: &str,
    body: &[u8],
    condition: &PutCondition,
) -> Result<ObjectMeta, ObjectError> {
    let body = Bytes::copy_from_slice(body);
    let crc = crc64_nvme(&body);
    store
        .put_whole(key, body, condition, &no_metadata(), crc)
        .await
}

async fn create(store: &impl ObjectStore, key: &str, body: &[u8]) -> ObjectMeta {
    put(store, key, body, &PutCondition::IfNoneMatchAny).await
}

async fn body(store: &impl ObjectStore, key: &str) -> Bytes {
    let got = store.get_whole(key, None).await;
    got.unwrap_or_else(|e| panic!("reading {key:?}: {e}")).1
}

async fn etag(store: &impl ObjectStore, key: &str) -> String {
    let got = store.head(key).await;
    got.unwrap_or_else(|e| panic!("heading {key:?}: {e}")).etag
}

fn if_match(meta: &ObjectMeta) -> PutCondition {
    PutCondition::IfMatch(meta.etag.clone())
}

fn version_id(meta: &ObjectMeta) -> &str {
    meta.version_id
        .as_deref()
        .expect("a versioned store names the version of every publish")
}

macro_rules! assert_err {
    ($got:expr, $variant:ident) => {{
        let got = $got;
        assert!(matches!(got, Err(ObjectError::$variant(_))), "{got:?}");
    }};
}

async fn all_keys(store: &impl ObjectStore, prefix: &str) -> Vec<String> {
    let page = store.list(prefix, None, MAX_LIST_PAGE).await.unwrap();
    assert_eq!(page.next, None, "test listings fit one page");
    page.items.into_iter().map(|o| o.key).collect()
}

async fn all_versions(store: &impl ObjectStore, prefix: &str) -> Vec<ListedVersion> {
    let page = store
        .list_versions(prefix, None, MAX_LIST_PAGE)
        .await
        .unwrap();
    assert_eq!(page.next, None, "test listings fit one page");
    page.items
}

// ── common: reads and conditional publish ────────────────────────────

/// Conformance check: a missing key is not found.
pub async fn a_missing_key_is_not_found(store: &impl ObjectStore) {
    assert_err!(store.head("nothing").await, NotFound);
    assert_err!(store.get_whole("nothing", None).await, NotFound);
    assert_err!(store.get_whole("nothing", Some("\"any\"")).await, NotFound);
    assert_err!(store.get_range("nothing", 0..1, "\"any\"").await, NotFound);
}

/// Conformance check: a published object reads back with its crc and metadata.
pub async fn a_published_object_reads_back_with_its_crc_and_metadata(store: &impl ObjectStore) {
    let bytes = Bytes::from_static(b"hello, object");
    let crc = crc64_nvme(&bytes);
    let stamps = metadata(&[("gen", "7"), ("flush", "u-1")]);
    let put = store
        .put_whole(
            "dir/k",
            bytes.clone(),
            &PutCondition::IfNoneMatchAny,
            &stamps,
            crc,
        )
        .await
        .unwrap();
    assert_eq!(put.key, "dir/k");
    assert_eq!(put.size, bytes.len() as u64);
    assert_eq!(put.crc64, Some(crc));
    let head = store.head("dir/k").await.unwrap();
    assert_eq!(head.key, "dir/k");
    assert_eq!(head.etag, put.etag);
    assert_eq!(head.version_id, put.version_id);
    assert_eq!(head.size, bytes.len() as u64);
    assert_eq!(head.crc64, Some(crc));
    assert_eq!(head.metadata, stamps);
    let (meta, got) = store.get_whole("dir/k", None).await.unwrap();
    assert_eq!(meta, head);
    assert_eq!(got, bytes);
}

/// Conformance check: a create of an existing key fails and the first bytes survive.
pub async fn a_create_of_an_existing_key_fails_and_the_first_bytes_survive(
    store: &impl ObjectStore,
) {
    let first = create(store, "k", b"first").await;
    let got = try_put(store, "k", b"second", &PutCondition::IfNoneMatchAny).await;
    assert_err!(got, PreconditionFailed);
    assert_eq!(body(store, "k").await, "first");
    assert_eq!(store.head("k").await.unwrap().etag, first.etag);
}

/// Conformance check: if match with the current etag replaces the object.
pub async fn if_match_with_the_current_etag_replaces_the_object(store: &impl ObjectStore) {
    let first = create(store, "k", b"one").await;
    let second = put(store, "k", b"two", &if_match(&first)).await;
    assert_ne!(second.etag, first.etag);
    assert_eq!(body(store, "k").await, "two");
    let third = put(store, "k", b"three", &if_match(&second)).await;
    assert_eq!(store.head("k").await.unwrap().etag, third.etag);
    assert_eq!(body(store, "k").await, "three");
}

/// Conformance check: if match with a stale etag fails and leaves the bytes.
pub async fn if_match_with_a_stale_etag_fails_and_leaves_the_bytes(store: &impl ObjectStore) {
    let first = create(store, "k", b"one").await;
    let second = put(store, "k", b"two", &if_match(&first)).await;
    for stale in [
        first.etag.clone(),
        "\"not-an-etag\"".to_owned(),
        String::new(),
    ] {
        let got = try_put(store, "k", b"three", &PutCondition::IfMatch(stale)).await;
        assert_err!(got, PreconditionFailed);
    }
    assert_eq!(body(store, "k").await, "two");
    assert_eq!(store.head("k").await.unwrap().etag, second.etag);
}

/// Conformance check: if match on an absent key fails and creates nothing.
pub async fn if_match_on_an_absent_key_fails_and_creates_nothing(store: &impl ObjectStore) {
    let elsewhere = create(store, "other", b"x").await;
    let got = try_put(store, "k", b"v", &if_match(&elsewhere)).await;
    assert_err!(got, PreconditionFailed);
    assert_err!(store.head("k").await, NotFound);
}

/// Conformance check: an unconditional put creates and overwrites.
pub async fn an_unconditional_put_creates_and_overwrites(store: &impl ObjectStore) {
    let first = put(store, "k", b"one", &PutCondition::Unconditional).await;
    assert_eq!(body(store, "k").await, "one");
    let second = put(store, "k", b"two", &PutCondition::Unconditional).await;
    assert_ne!(second.etag, first.etag);
    assert_eq!(body(store, "k").await, "two");
}

/// Conformance check: a wrong crc fails the publish and stores nothing.
pub async fn a_wrong_crc_fails_the_publish_and_stores_nothing(store: &impl ObjectStore) {
    let bytes = Bytes::from_static(b"payload");
    let wrong = crc64_nvme(&bytes) ^ 1;
    for condition in [PutCondition::IfNoneMatchAny, PutCondition::Unconditional] {
        let got = store
            .put_whole("k", bytes.clone(), &condition, &no_metadata(), wrong)
            .await;
        assert_err!(got, ChecksumMismatch);
    }
    assert_err!(store.head("k").await, NotFound);
    assert!(all_keys(store, "").await.is_empty());
}

/// Conformance check: a wrong crc on an existing key leaves the old object.
pub async fn a_wrong_crc_on_an_existing_key_leaves_the_old_object(store: &impl ObjectStore) {
    let old = create(store, "k", b"old").await;
    let bytes = Bytes::from_static(b"new");
    // The CRC of different bytes: a publish that claims the old content.
    let wrong = crc64_nvme(b"old");
    for condition in [if_match(&old), PutCondition::Unconditional] {
        let got = store
            .put_whole("k", bytes.clone(), &condition, &no_metadata(), wrong)
            .await;
        assert_err!(got, ChecksumMismatch);
    }
    assert_eq!(body(store, "k").await, "old");
    assert_eq!(store.head("k").await.unwrap().etag, old.etag);
}

/// Conformance check: every publish gets a distinct etag even for identical bytes.
pub async fn every_publish_gets_a_distinct_etag_even_for_identical_bytes(store: &impl ObjectStore) {
    let mut etags = vec![create(store, "k", b"same").await.etag];
    for _ in 0..3 {
        etags.push(
            put(store, "k", b"same", &PutCondition::Unconditional)
                .await
                .etag,
        );
    }
    etags.push(create(store, "other", b"same").await.etag);
    let distinct: std::collections::BTreeSet<_> = etags.iter().collect();
    assert_eq!(distinct.len(), etags.len(), "{etags:?}");
    // The newest etag is the one that guards.
    let stale = PutCondition::IfMatch(etags[0].clone());
    assert_err!(
        try_put(store, "k", b"same", &stale).await,
        PreconditionFailed
    );
}

/// Conformance check: reads guarded by a stale etag fail.
pub async fn reads_guarded_by_a_stale_etag_fail(store: &impl ObjectStore) {
    let first = create(store, "k", b"one").await;
    let second = put(store, "k", b"two", &if_match(&first)).await;
    let (meta, got) = store.get_whole("k", Some(&second.etag)).await.unwrap();
    assert_eq!(
        (meta.etag.as_str(), &got[..]),
        (second.etag.as_str(), &b"two"[..])
    );
    assert_eq!(
        store.get_range("k", 0..2, &second.etag).await.unwrap(),
        "tw"
    );
    assert_err!(
        store.get_whole("k", Some(&first.etag)).await,
        PreconditionFailed
    );
    assert_err!(
        store.get_range("k", 0..2, &first.etag).await,
        PreconditionFailed
    );
}

/// Conformance check: a range read returns exactly the bytes asked for.
pub async fn a_range_read_returns_exactly_the_bytes_asked_for(store: &impl ObjectStore) {
    create(store, "k", b"0123456789").await;
    assert_eq!(
        store
            .get_range("k", 3..7, &etag(store, "k").await)
            .await
            .unwrap(),
        "3456"
    );
    assert_eq!(
        store
            .get_range("k", 0..10, &etag(store, "k").await)
            .await
            .unwrap(),
        "0123456789"
    );
    assert_eq!(
        store
            .get_range("k", 9..10, &etag(store, "k").await)
            .await
            .unwrap(),
        "9"
    );
    assert_eq!(
        store
            .get_range("k", 4..4, &etag(store, "k").await)
            .await
            .unwrap(),
        ""
    );
}

/// Conformance check: a range past the end is truncated and one from the end is empty.
pub async fn a_range_past_the_end_is_truncated_and_one_from_the_end_is_empty(
    store: &impl ObjectStore,
) {
    create(store, "k", b"0123456789").await;
    assert_eq!(
        store
            .get_range("k", 7..100, &etag(store, "k").await)
            .await
            .unwrap(),
        "789"
    );
    assert_eq!(
        store
            .get_range("k", 0..u64::MAX, &etag(store, "k").await)
            .await
            .unwrap(),
        "0123456789"
    );
    assert_eq!(
        store
            .get_range("k", 10..20, &etag(store, "k").await)
            .await
            .unwrap(),
        ""
    );
    assert_eq!(
        store
            .get_range("k", 50..60, &etag(store, "k").await)
            .await
            .unwrap(),
        ""
    );
    create(store, "empty", b"").await;
    assert_eq!(
        store
            .get_range("empty", 0..5, &etag(store, "empty").await)
            .await
            .unwrap(),
        ""
    );
}

/// Conformance check: an inverted range is invalid.
pub async fn an_inverted_range_is_invalid(store: &impl ObjectStore) {
    create(store, "k", b"0123456789").await;
    #[allow(clippy::reversed_empty_ranges)]
    let inverted = 5..2;
    assert_err!(
        store
            .get_range("k", inverted.clone(), &etag(store, "k").await)
            .await,
        InvalidArgument
    );
    // Checked before the key is looked up, so the answer cannot leak
    // whether a key exists.
    assert_err!(
        store.get_range("absent", inverted, "\"any\"").await,
        InvalidArgument
    );
}

// ── common: copy ─────────────────────────────────────────────────────

/// Conformance check: a copy keeps the bytes and crc but takes only the given metadata.
pub async fn a_copy_keeps_the_bytes_and_crc_but_takes_only_the_given_metadata(
    store: &impl ObjectStore,
) {
    let bytes = Bytes::from_static(b"copied bytes");
    let crc = crc64_nvme(&bytes);
    let source_stamps = metadata(&[("gen", "3"), ("epoch", "1")]);
    let source = store
        .put_whole(
            "src",
            bytes.clone(),
            &PutCondition::IfNoneMatchAny,
            &source_stamps,
            crc,
        )
        .await
        .unwrap();
    let new_stamps = metadata(&[("gen", "1")]);
    let copied = store
        .copy_object(
            "src",
            Some(&source.etag),
            "dst",
            &PutCondition::IfNoneMatchAny,
            &new_stamps,
        )
        .await
        .unwrap();
    assert_eq!(copied.key, "dst");
    assert_ne!(copied.etag, source.etag);
    let head = store.head("dst").await.unwrap();
    assert_eq!(head.etag, copied.etag);
    assert_eq!(head.crc64, Some(crc));
    assert_eq!(head.size, bytes.len() as u64);
    assert_eq!(head.metadata, new_stamps);
    assert_eq!(body(store, "dst").await, bytes);
    // Empty metadata means none at all, not "the source's".
    store
        .copy_object(
            "src",
            None,
            "bare",
            &PutCondition::IfNoneMatchAny,
            &no_metadata(),
        )
        .await
        .unwrap();
    assert_eq!(store.head("bare").await.unwrap().metadata, no_metadata());
    // The source is untouched.
    assert_eq!(store.head("src").await.unwrap().metadata, source_stamps);
    assert_eq!(store.head("src").await.unwrap().etag, source.etag);
}

/// Conformance check: a copy onto itself publishes a new generation.
pub async fn a_copy_onto_itself_publishes_a_new_generation(store: &impl ObjectStore) {
    let first = create(store, "k", b"self").await;
    let copied = store
        .copy_object(
            "k",
            Some(&first.etag),
            "k",
            &if_match(&first),
            &metadata(&[("gen", "2")]),
        )
        .await
        .unwrap();
    assert_ne!(copied.etag, first.etag);
    let head = store.head("k").await.unwrap();
    assert_eq!(head.etag, copied.etag);
    assert_eq!(head.crc64, Some(crc64_nvme(b"self")));
    assert_eq!(head.metadata, metadata(&[("gen", "2")]));
    assert_eq!(body(store, "k").await, "self");
}

/// Conformance check: a copy guarded by a stale source etag fails and writes nothing.
pub async fn a_copy_guarded_by_a_stale_source_etag_fails_and_writes_nothing(
    store: &impl ObjectStore,
) {
    let first = create(store, "src", b"one").await;
    put(store, "src", b"two", &if_match(&first)).await;
    let got = store
        .copy_object(
            "src",
            Some(&first.etag),
            "dst",
            &PutCondition::IfNoneMatchAny,
            &no_metadata(),
        )
        .await;
    assert_err!(got, PreconditionFailed);
    assert_err!(store.head("dst").await, NotFound);
}

/// Conformance check: a copy respects the destination condition.
pub async fn a_copy_respects_the_destination_condition(store: &impl ObjectStore) {
    create(store, "src", b"source").await;
    let existing = create(store, "dst", b"existing").await;
    let refused = [
        PutCondition::IfNoneMatchAny,
        PutCondition::IfMatch("\"stale\"".to_owned()),
    ];
    for condition in &refused {
        let got = store
            .copy_object("src", None, "dst", condition, &no_metadata())
            .await;
        assert_err!(got, PreconditionFailed);
        assert_eq!(body(store, "dst").await, "existing");
    }
    let got = store
        .copy_object("src", None, "absent", &if_match(&existing), &no_metadata())
        .await;
    assert_err!(got, PreconditionFailed);
    assert_err!(store.head("absent").await, NotFound);
    store
        .copy_object("src", None, "dst", &if_match(&existing), &no_metadata())
        .await
        .unwrap();
    assert_eq!(body(store, "dst").await, "source");
    store
        .copy_object(
            "dst",
            None,
            "src",
            &PutCondition::Unconditional,
            &no_metadata(),
        )
        .await
        .unwrap();
    assert_eq!(body(store, "src").await, "source");
}

/// Conformance check: a copy from a missing source is not found.
pub async fn a_copy_from_a_missing_source_is_not_found(store: &impl ObjectStore) {
    let got = store
        .copy_object(
            "absent",
            None,
            "dst",
            &PutCondition::Unconditional,
            &no_metadata(),
        )
        .await;
    assert_err!(got, NotFound);
    create(store, "gone", b"x").await;
    store.delete("gone").await.unwrap();
    let got = store
        .copy_object(
            "gone",
            None,
            "dst",
            &PutCondition::Unconditional,
            &no_metadata(),
        )
        .await;
    assert_err!(got, NotFound);
    assert_err!(store.head("dst").await, NotFound);
}

// ── common: delete and list ──────────────────────────────────────────

/// Conformance check: deleting an absent key is not an error.
pub async fn deleting_an_absent_key_is_not_an_error(store: &impl ObjectStore) {
    store.delete("ghost").await.unwrap();
    store.delete("ghost").await.unwrap();
    assert_err!(store.head("ghost").await, NotFound);
}

/// Conformance check: a deleted key reads as not found and can be created again.
pub async fn a_deleted_key_reads_as_not_found_and_can_be_created_again(store: &impl ObjectStore) {
    let old = create(store, "k", b"old").await;
    store.delete("k").await.unwrap();
    assert_err!(store.head("k").await, NotFound);
    assert_err!(store.get_whole("k", None).await, NotFound);
    assert_err!(store.get_range("k", 0..1, "\"any\"").await, NotFound);
    assert_err!(
        try_put(store, "k", b"x", &if_match(&old)).await,
        PreconditionFailed
    );
    let new = create(store, "k", b"new").await;
    assert_ne!(new.etag, old.etag);
    assert_eq!(body(store, "k").await, "new");
}

/// Conformance check: list pages resume after the cursor and cover every key once.
pub async fn list_pages_resume_after_the_cursor_and_cover_every_key_once(store: &impl ObjectStore) {
    let mut keys: Vec<String> = (0..11).map(|i| format!("k/{i:02}")).collect();
    // Written out of order: the listing's order is the keys', not the
    // publishes'.
    for key in keys.iter().rev() {
        create(store, key, key.as_bytes()).await;
    }
    keys.sort();
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let page: ListPage<ListedObject> = store.list("k/", cursor.as_deref(), 4).await.unwrap();
        pages += 1;
        assert!(page.items.len() <= 4);
        seen.extend(page.items.into_iter().map(|o| o.key));
        // A cursor that does not advance would page forever.
        assert!(seen.len() <= keys.len(), "the listing repeats: {seen:?}");
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(seen, keys);
    assert_eq!(pages, 3);
    // A page that ends exactly at the last key says so.
    let page = store.list("k/", Some("k/06"), 4).await.unwrap();
    assert_eq!(page.items.len(), 4);
    assert_eq!(page.next, None);
}

/// Conformance check: list respects the prefix and omits deleted keys.
pub async fn list_respects_the_prefix_and_omits_deleted_keys(store: &impl ObjectStore) {
    for key in ["a", "a/1", "a/2", "a/3", "ab", "b/1", "`"] {
        create(store, key, b"v").await;
    }
    store.delete("a/2").await.unwrap();
    store.delete("never-existed").await.unwrap();
    assert_eq!(all_keys(store, "a/").await, ["a/1", "a/3"]);
    assert_eq!(all_keys(store, "a").await, ["a", "a/1", "a/3", "ab"]);
    assert_eq!(
        all_keys(store, "").await,
        ["`", "a", "a/1", "a/3", "ab", "b/1"]
    );
    assert!(all_keys(store, "c").await.is_empty());
    // A cursor before the prefix starts at the prefix; one past it ends.
    let page = store.list("a/", Some("A"), 10).await.unwrap();
    assert_eq!(page.items.len(), 2);
    let page = store.list("a/", Some("a/3"), 10).await.unwrap();
    assert!(page.items.is_empty() && page.next.is_none());
    // Deleting the last key of a page leaves the cursor usable.
    let page = store.list("", None, 2).await.unwrap();
    let cursor = page.next.expect("more keys remain");
    store.delete(&cursor).await.unwrap();
    let rest = store.list("", Some(&cursor), 10).await.unwrap();
    let rest: Vec<_> = rest.items.into_iter().map(|o| o.key).collect();
    assert_eq!(rest, ["a/1", "a/3", "ab", "b/1"]);
}

/// Conformance check: list reports the current size and etag.
pub async fn list_reports_the_current_size_and_etag(store: &impl ObjectStore) {
    let first = create(store, "k", b"short").await;
    let second = put(store, "k", b"much longer", &if_match(&first)).await;
    let page = store.list("", None, 10).await.unwrap();
    assert_eq!(page.items.len(), 1);
    let listed = &page.items[0];
    assert_eq!(listed.key, "k");
    assert_eq!(listed.size, 11);
    assert_eq!(listed.etag, second.etag);
}

/// Conformance check: an MD5 supplied with a publish is reported by the
/// publish, a head, a read, the listing and (on a versioned store) the
/// version listing, and kept by a copy, exactly as given; or, by a backend
/// that does not record it, by none of them. A publish without one never
/// reports one.
pub async fn a_supplied_md5_is_reported_everywhere_as_given_or_nowhere(store: &impl ObjectStore) {
    // Any 16 bytes: the store records the writer's MD5, it does not
    // compute one.
    let md5 = *b"sixteen md5 byte";
    let bytes = Bytes::from_static(b"hashed by its writer");
    let options = super::PutOptions {
        condition: &PutCondition::IfNoneMatchAny,
        metadata: &no_metadata(),
        crc64: crc64_nvme(&bytes),
        content_md5: Some(md5),
    };
    let key = ObjectKey::new("md5").unwrap();
    let written = store.put_opts(&key, bytes, options).await.unwrap();
    let recorded = written.content_md5;
    assert!(
        recorded.is_none() || recorded == Some(md5),
        "the publish reported {recorded:?}, not the MD5 given"
    );
    assert_eq!(store.head("md5").await.unwrap().content_md5, recorded);
    let read = store.get_whole("md5", None).await.unwrap().0;
    assert_eq!(read.content_md5, recorded);
    let page = store.list("md5", None, 10).await.unwrap();
    assert_eq!(page.items[0].content_md5, recorded);
    if store.versioned() {
        let versions = store.list_versions("md5", None, 10).await.unwrap();
        assert_eq!(versions.items[0].content_md5, recorded);
    }
    let copied = store
        .copy_object(
            "md5",
            None,
            "copy",
            &PutCondition::IfNoneMatchAny,
            &no_metadata(),
        )
        .await
        .unwrap();
    assert_eq!(copied.content_md5, recorded);
    assert_eq!(store.head("copy").await.unwrap().content_md5, recorded);
    let plain = create(store, "plain", b"no md5").await;
    assert_eq!(plain.content_md5, None);
    assert_eq!(store.head("plain").await.unwrap().content_md5, None);
}

// ── common: argument bounds ──────────────────────────────────────────

/// Conformance check: invalid keys are refused before anything is stored.
pub async fn invalid_keys_are_refused_before_anything_is_stored(store: &impl ObjectStore) {
    create(store, "good", b"v").await;
    let too_long = "k".repeat(MAX_OBJECT_KEY_BYTES + 1);
    // Multi-byte characters: the bound is on bytes, not characters.
    let too_long_utf8 = "é".repeat(MAX_OBJECT_KEY_BYTES / 2 + 1);
    for bad in ["", too_long.as_str(), too_long_utf8.as_str(), "a\0b"] {
        let body = Bytes::from_static(b"v");
        let crc = crc64_nvme(&body);
        let any = PutCondition::Unconditional;
        assert_err!(
            store.put_whole(bad, body, &any, &no_metadata(), crc).await,
            InvalidArgument
        );
        assert_err!(store.head(bad).await, InvalidArgument);
        assert_err!(store.get_whole(bad, None).await, InvalidArgument);
        assert_err!(store.get_range(bad, 0..1, "\"any\"").await, InvalidArgument);
        assert_err!(store.delete(bad).await, InvalidArgument);
        let got = store
            .copy_object(bad, None, "dst", &any, &no_metadata())
            .await;
        assert_err!(got, InvalidArgument);
        let got = store
            .copy_object("good", None, bad, &any, &no_metadata())
            .await;
        assert_err!(got, InvalidArgument);
    }
    assert_eq!(all_keys(store, "").await, ["good"]);
    // The longest legal key is legal.
    create(store, &"k".repeat(MAX_OBJECT_KEY_BYTES), b"v").await;
}

/// Conformance check: out of bounds metadata is refused and nothing is stored.
pub async fn out_of_bounds_metadata_is_refused_and_nothing_is_stored(store: &impl ObjectStore) {
    create(store, "src", b"v").await;
    let too_big = metadata(&[("k", "v".repeat(MAX_METADATA_BYTES).as_str())]);
    let too_many: Metadata = (0..=MAX_METADATA_ENTRIES)
        .map(|i| (format!("m{i:02}"), "v".into()))
        .collect();
    let bad = [
        too_big,
        too_many,
        metadata(&[("", "v")]),
        metadata(&[("k", "line\nbreak")]),
        metadata(&[("k", "caf\u{e9}")]),
        metadata(&[("k\0", "v")]),
        metadata(&[("Upper", "v")]),
        metadata(&[("has space", "v")]),
    ];
    for metadata in &bad {
        let body = Bytes::from_static(b"v");
        let crc = crc64_nvme(&body);
        let any = PutCondition::Unconditional;
        assert_err!(
            store.put_whole("k", body, &any, metadata, crc).await,
            InvalidArgument
        );
        let got = store.copy_object("src", None, "dst", &any, metadata).await;
        assert_err!(got, InvalidArgument);
    }
    assert_eq!(all_keys(store, "").await, ["src"]);
    // The bounds themselves are allowed.
    let most: Metadata = (0..MAX_METADATA_ENTRIES)
        .map(|i| (format!("m{i:02}"), "v".repeat(17)))
        .collect();
    let biggest = metadata(&[("k", "v".repeat(MAX_METADATA_BYTES - 1).as_str())]);
    for metadata in [most, biggest] {
        let body = Bytes::from_static(b"v");
        let crc = crc64_nvme(&body);
        let put = store
            .put_whole("k", body, &PutCondition::Unconditional, &metadata, crc)
            .await
            .unwrap();
        assert_eq!(put.metadata, metadata);
        assert_eq!(store.head("k").await.unwrap().metadata, metadata);
    }
}

/// Conformance check: a zero or oversized list limit is invalid.
pub async fn a_zero_or_oversized_list_limit_is_invalid(store: &impl ObjectStore) {
    create(store, "k", b"v").await;
    for limit in [0, MAX_LIST_PAGE + 1, u32::MAX] {
        assert_err!(store.list("", None, limit).await, InvalidArgument);
    }
    assert_eq!(store.list("", None, 1).await.unwrap().items.len(), 1);
    assert_eq!(
        store
            .list("", None, MAX_LIST_PAGE)
            .await
            .unwrap()
            .items
            .len(),
        1
    );
}

// ── common: races ────────────────────────────────────────────────────

/// Conformance check: only one of two concurrent creates succeeds.
pub async fn only_one_of_two_concurrent_creates_succeeds(store: &impl ObjectStore) {
    let (one, two) = tokio::join!(
        try_put(store, "k", b"one", &PutCondition::IfNoneMatchAny),
        try_put(store, "k", b"two", &PutCondition::IfNoneMatchAny),
    );
    let winner = match (one, two) {
        (Ok(meta), Err(ObjectError::PreconditionFailed(_) | ObjectError::Conflict(_))) => {
            (meta, "one")
        }
        (Err(ObjectError::PreconditionFailed(_) | ObjectError::Conflict(_)), Ok(meta)) => {
            (meta, "two")
        }
        other => panic!("exactly one create must win: {other:?}"),
    };
    assert_eq!(body(store, "k").await, winner.1);
    assert_eq!(store.head("k").await.unwrap().etag, winner.0.etag);
}

/// Conformance check: only one of two writers guarded on the same etag succeeds.
pub async fn only_one_of_two_writers_guarded_on_the_same_etag_succeeds(store: &impl ObjectStore) {
    let base = create(store, "k", b"base").await;
    let guard = if_match(&base);
    let (one, two) = tokio::join!(
        try_put(store, "k", b"one", &guard),
        try_put(store, "k", b"two", &guard),
    );
    let results = [one, two];
    let won = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(won, 1, "{results:?}");
    for result in &results {
        if let Err(e) = result {
            assert!(
                matches!(
                    e,
                    ObjectError::PreconditionFailed(_) | ObjectError::Conflict(_)
                ),
                "{e:?}"
            );
        }
    }
}

/// A small deterministic generator, so a failure replays exactly.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The current view (what `head`, `get` and `list` show) is the same on
/// versioned and unversioned stores, so one model checks both: key to
/// (bytes, etag).
pub async fn random_operations_agree_with_a_model_of_current_objects(store: &impl ObjectStore) {
    #[derive(Debug, PartialEq)]
    enum Expect {
        Ok,
        Precondition,
        NotFound,
    }
    let mut model: BTreeMap<String, (Vec<u8>, String)> = BTreeMap::new();
    // Every etag ever handed out, for stale guards.
    let mut seen_etags: Vec<String> = vec!["\"never\"".to_owned()];
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let key = |rng: &mut XorShift| format!("k{}", rng.below(6));
    for round in 0..400 {
        let k = key(&mut rng);
        let value = vec![b'a' + rng.below(3) as u8; rng.below(4) as usize];
        let current = model.get(&k).map(|(_, etag)| etag.clone());
        let condition = match rng.below(4) {
            0 => PutCondition::Unconditional,
            1 => PutCondition::IfNoneMatchAny,
            2 => PutCondition::IfMatch(current.clone().unwrap_or_else(|| "\"none\"".into())),
            _ => {
                let stale = &seen_etags[rng.below(seen_etags.len() as u64) as usize];
                PutCondition::IfMatch(stale.clone())
            }
        };
        let guard_holds = match &condition {
            PutCondition::Unconditional => true,
            PutCondition::IfNoneMatchAny => current.is_none(),
            PutCondition::IfMatch(etag) => current.as_ref() == Some(etag),
        };
        match rng.below(5) {
            0 => {
                store.delete(&k).await.unwrap();
                model.remove(&k);
            }
            1 => {
                let source = key(&mut rng);
                let expect = match model.get(&source) {
                    None => Expect::NotFound,
                    Some(_) if !guard_holds => Expect::Precondition,
                    Some(_) => Expect::Ok,
                };
                let got = store
                    .copy_object(&source, None, &k, &condition, &no_metadata())
                    .await;
                match (&expect, got) {
                    (Expect::Ok, Ok(meta)) => {
                        let bytes = model[&source].0.clone();
                        seen_etags.push(meta.etag.clone());
                        model.insert(k.clone(), (bytes, meta.etag));
                    }
                    (Expect::NotFound, Err(ObjectError::NotFound(_)))
                    | (Expect::Precondition, Err(ObjectError::PreconditionFailed(_))) => {}
                    (expect, got) => panic!(
                        "round {round}: copy {source}->{k} {condition:?}: expected {expect:?}, got {got:?}"
                    ),
                }
            }
            _ => {
                let got = try_put(store, &k, &value, &condition).await;
                match (guard_holds, got) {
                    (true, Ok(meta)) => {
                        seen_etags.push(meta.etag.clone());
                        model.insert(k.clone(), (value, meta.etag));
                    }
                    (false, Err(ObjectError::PreconditionFailed(_))) => {}
                    (holds, got) => panic!(
                        "round {round}: put {k} {condition:?} (guard holds: {holds}): {got:?}"
                    ),
                }
            }
        }
        let page = store.list("", None, 100).await.unwrap();
        let listed: Vec<_> = page
            .items
            .iter()
            .map(|o| (o.key.clone(), o.etag.clone()))
            .collect();
        let want: Vec<_> = model
            .iter()
            .map(|(k, (_, etag))| (k.clone(), etag.clone()))
            .collect();
        assert_eq!(listed, want, "round {round}");
        match model.get(&k) {
            Some((bytes, etag)) => {
                let (meta, got) = store.get_whole(&k, Some(etag)).await.unwrap();
                assert_eq!(
                    (&got[..], meta.crc64),
                    (&bytes[..], Some(crc64_nvme(bytes))),
                    "round {round}"
                );
            }
            None => assert_err!(store.head(&k).await, NotFound),
        }
    }
}

// ── versioned ────────────────────────────────────────────────────────

/// Conformance check: the store says it keeps versions.
pub async fn the_store_says_it_keeps_versions(store: &impl ObjectStore) {
    assert!(store.versioned());
}

/// Conformance check: each publish gets a distinct version id reported by head.
pub async fn each_publish_gets_a_distinct_version_id_reported_by_head(store: &impl ObjectStore) {
    let mut ids = Vec::new();
    let first = create(store, "k", b"same").await;
    ids.push(version_id(&first).to_owned());
    assert_eq!(store.head("k").await.unwrap().version_id, first.version_id);
    for _ in 0..3 {
        let meta = put(store, "k", b"same", &PutCondition::Unconditional).await;
        assert_eq!(store.head("k").await.unwrap().version_id, meta.version_id);
        ids.push(version_id(&meta).to_owned());
    }
    ids.push(version_id(&create(store, "other", b"same").await).to_owned());
    let distinct: std::collections::BTreeSet<_> = ids.iter().collect();
    assert_eq!(distinct.len(), ids.len(), "{ids:?}");
}

/// Conformance check: every version stays readable by id after it is replaced.
pub async fn every_version_stays_readable_by_id_after_it_is_replaced(store: &impl ObjectStore) {
    let one = Bytes::from_static(b"version one");
    let crc = crc64_nvme(&one);
    let stamps = metadata(&[("gen", "1")]);
    let first = store
        .put_whole(
            "k",
            one.clone(),
            &PutCondition::IfNoneMatchAny,
            &stamps,
            crc,
        )
        .await
        .unwrap();
    let second = put(store, "k", b"two", &if_match(&first)).await;
    let head = store.head_version("k", version_id(&first)).await.unwrap();
    assert_eq!(head.version_id, first.version_id);
    assert_eq!(head.etag, first.etag);
    assert_eq!(head.size, one.len() as u64);
    assert_eq!(head.crc64, Some(crc));
    assert_eq!(head.metadata, stamps);
    let got = store
        .get_version_range("k", version_id(&first), 0..u64::MAX)
        .await
        .unwrap();
    assert_eq!(got, one);
    let got = store
        .get_version_range("k", version_id(&second), 0..u64::MAX)
        .await
        .unwrap();
    assert_eq!(got, "two");
    assert_eq!(
        store.head_version("k", version_id(&second)).await.unwrap(),
        store.head("k").await.unwrap()
    );
}

/// Conformance check: a delete marker hides the key but older versions stay readable.
pub async fn a_delete_marker_hides_the_key_but_older_versions_stay_readable(
    store: &impl ObjectStore,
) {
    let first = create(store, "k", b"one").await;
    let second = put(store, "k", b"two", &if_match(&first)).await;
    store.delete("k").await.unwrap();
    assert_err!(store.head("k").await, NotFound);
    assert_err!(store.get_whole("k", None).await, NotFound);
    assert_err!(store.get_range("k", 0..3, "\"any\"").await, NotFound);
    assert!(all_keys(store, "").await.is_empty());
    // The marker is not an object to guard on, and neither is what it hides.
    assert_err!(
        try_put(store, "k", b"x", &if_match(&second)).await,
        PreconditionFailed
    );
    let got = store
        .copy_object(
            "k",
            None,
            "dst",
            &PutCondition::Unconditional,
            &no_metadata(),
        )
        .await;
    assert_err!(got, NotFound);
    for (meta, bytes) in [(&first, "one"), (&second, "two")] {
        let got = store.get_version_range("k", version_id(meta), 0..10).await;
        assert_eq!(got.unwrap(), bytes);
        assert_eq!(
            store
                .head_version("k", version_id(meta))
                .await
                .unwrap()
                .etag,
            meta.etag
        );
    }
}

/// Conformance check: a key behind a delete marker can be created again.
pub async fn a_key_behind_a_delete_marker_can_be_created_again(store: &impl ObjectStore) {
    let old = create(store, "k", b"old").await;
    store.delete("k").await.unwrap();
    let new = create(store, "k", b"new").await;
    assert_ne!(new.version_id, old.version_id);
    assert_eq!(body(store, "k").await, "new");
    let versions = all_versions(store, "k").await;
    let shape: Vec<_> = versions
        .iter()
        .map(|v| (v.is_current, v.is_delete_marker))
        .collect();
    assert_eq!(shape, [(true, false), (false, true), (false, false)]);
}

/// Conformance check: reading a delete marker by id is a failed precondition.
pub async fn reading_a_delete_marker_by_id_is_a_failed_precondition(store: &impl ObjectStore) {
    create(store, "k", b"v").await;
    store.delete("k").await.unwrap();
    let marker = all_versions(store, "k").await.remove(0);
    assert!(marker.is_delete_marker && marker.is_current);
    assert_err!(
        store.head_version("k", &marker.version_id).await,
        PreconditionFailed
    );
    let got = store.get_version_range("k", &marker.version_id, 0..1).await;
    assert_err!(got, PreconditionFailed);
}

/// Conformance check: an unknown version is not found and deleting it is fine.
pub async fn an_unknown_version_is_not_found_and_deleting_it_is_fine(store: &impl ObjectStore) {
    let meta = create(store, "k", b"v").await;
    let other = create(store, "other", b"v").await;
    // A real id, but of another key.
    assert_err!(store.head_version("k", version_id(&other)).await, NotFound);
    assert_err!(
        store.get_version_range("k", version_id(&other), 0..1).await,
        NotFound
    );
    assert_err!(
        store.head_version("absent", version_id(&meta)).await,
        NotFound
    );
    store.delete_version("k", version_id(&other)).await.unwrap();
    store
        .delete_version("absent", version_id(&meta))
        .await
        .unwrap();
    assert_eq!(body(store, "k").await, "v");
    assert_eq!(body(store, "other").await, "v");
}

/// Conformance check: deleting the newest version makes the previous one current.
pub async fn deleting_the_newest_version_makes_the_previous_one_current(store: &impl ObjectStore) {
    let first = create(store, "k", b"one").await;
    let second = put(store, "k", b"two", &if_match(&first)).await;
    store
        .delete_version("k", version_id(&second))
        .await
        .unwrap();
    let head = store.head("k").await.unwrap();
    assert_eq!(
        (head.etag.as_str(), head.version_id.as_deref()),
        (first.etag.as_str(), first.version_id.as_deref())
    );
    assert_eq!(body(store, "k").await, "one");
    assert_err!(store.head_version("k", version_id(&second)).await, NotFound);
    // The old etag guards again; the deleted one never will.
    assert_err!(
        try_put(store, "k", b"x", &if_match(&second)).await,
        PreconditionFailed
    );
    put(store, "k", b"three", &if_match(&first)).await;
    let versions = all_versions(store, "k").await;
    let current: Vec<_> = versions.iter().map(|v| v.is_current).collect();
    assert_eq!(current, [true, false]);
}

/// Conformance check: deleting a delete marker brings the key back.
pub async fn deleting_a_delete_marker_brings_the_key_back(store: &impl ObjectStore) {
    let meta = create(store, "k", b"v").await;
    store.delete("k").await.unwrap();
    let marker = all_versions(store, "k").await.remove(0);
    store.delete_version("k", &marker.version_id).await.unwrap();
    assert_eq!(store.head("k").await.unwrap().etag, meta.etag);
    assert_eq!(all_keys(store, "").await, ["k"]);
}

/// Conformance check: deleting every version leaves nothing behind.
pub async fn deleting_every_version_leaves_nothing_behind(store: &impl ObjectStore) {
    let first = create(store, "k", b"one").await;
    put(store, "k", b"two", &if_match(&first)).await;
    store.delete("k").await.unwrap();
    for version in all_versions(store, "k").await {
        store
            .delete_version("k", &version.version_id)
            .await
            .unwrap();
    }
    assert!(all_versions(store, "").await.is_empty());
    assert_err!(store.head("k").await, NotFound);
    create(store, "k", b"fresh").await;
}

/// Conformance check: deleting an absent key still leaves a delete marker.
pub async fn deleting_an_absent_key_still_leaves_a_delete_marker(store: &impl ObjectStore) {
    store.delete("ghost").await.unwrap();
    store.delete("ghost").await.unwrap();
    let versions = all_versions(store, "").await;
    let shape: Vec<_> = versions
        .iter()
        .map(|v| (v.key.as_str(), v.is_current, v.is_delete_marker))
        .collect();
    assert_eq!(shape, [("ghost", true, true), ("ghost", false, true)]);
    assert_ne!(versions[0].version_id, versions[1].version_id);
    assert!(all_keys(store, "").await.is_empty());
}

/// Conformance check: a copy makes a new version and the source version survives.
pub async fn a_copy_makes_a_new_version_and_the_source_version_survives(store: &impl ObjectStore) {
    let first = create(store, "k", b"payload").await;
    let copied = store
        .copy_object(
            "k",
            Some(&first.etag),
            "k",
            &if_match(&first),
            &no_metadata(),
        )
        .await
        .unwrap();
    assert_ne!(copied.version_id, first.version_id);
    assert_eq!(store.head("k").await.unwrap().version_id, copied.version_id);
    let old = store.head_version("k", version_id(&first)).await.unwrap();
    assert_eq!(old.etag, first.etag);
    assert_eq!(all_versions(store, "k").await.len(), 2);
}

/// Conformance check: a version range read is truncated like a current one.
pub async fn a_version_range_read_is_truncated_like_a_current_one(store: &impl ObjectStore) {
    let meta = create(store, "k", b"0123456789").await;
    let id = version_id(&meta);
    assert_eq!(
        store.get_version_range("k", id, 3..7).await.unwrap(),
        "3456"
    );
    assert_eq!(
        store.get_version_range("k", id, 7..100).await.unwrap(),
        "789"
    );
    assert_eq!(store.get_version_range("k", id, 10..20).await.unwrap(), "");
    assert_eq!(store.get_version_range("k", id, 4..4).await.unwrap(), "");
    #[allow(clippy::reversed_empty_ranges)]
    let inverted = 5..2;
    assert_err!(
        store.get_version_range("k", id, inverted).await,
        InvalidArgument
    );
}

/// Conformance check: list versions orders keys ascending and versions newest first.
pub async fn list_versions_orders_keys_ascending_and_versions_newest_first(
    store: &impl ObjectStore,
) {
    let b1 = create(store, "b", b"b-one").await;
    let a1 = create(store, "a", b"a1").await;
    let b2 = put(store, "b", b"b2", &if_match(&b1)).await;
    store.delete("a").await.unwrap();
    create(store, "c/x", b"c").await;
    let versions = all_versions(store, "").await;
    let shape: Vec<_> = versions
        .iter()
        .map(|v| (v.key.as_str(), v.is_current, v.is_delete_marker, v.size))
        .collect();
    assert_eq!(
        shape,
        [
            ("a", true, true, 0),
            ("a", false, false, 2),
            ("b", true, false, 2),
            ("b", false, false, 5),
            ("c/x", true, false, 1),
        ]
    );
    assert_eq!(versions[0].etag, "");
    assert_eq!(versions[1].version_id, version_id(&a1));
    assert_eq!(versions[1].etag, a1.etag);
    assert_eq!(versions[2].version_id, version_id(&b2));
    assert_eq!(versions[2].etag, b2.etag);
    assert_eq!(versions[3].version_id, version_id(&b1));
    let under_b: Vec<_> = all_versions(store, "b")
        .await
        .into_iter()
        .map(|v| v.version_id)
        .collect();
    assert_eq!(under_b, [version_id(&b2), version_id(&b1)]);
    assert!(all_versions(store, "d").await.is_empty());
}

/// Conformance check: list versions pages cover every version exactly once.
pub async fn list_versions_pages_cover_every_version_exactly_once(store: &impl ObjectStore) {
    let mut expected = Vec::new();
    for key in ["v/a", "v/b", "v/c"] {
        let mut ids = Vec::new();
        let mut meta = create(store, key, b"0").await;
        ids.push(version_id(&meta).to_owned());
        for i in 1..3 {
            meta = put(store, key, format!("{i}").as_bytes(), &if_match(&meta)).await;
            ids.push(version_id(&meta).to_owned());
        }
        expected.extend(ids.into_iter().rev().map(|id| (key.to_owned(), id)));
    }
    create(store, "w", b"outside the prefix").await;
    for limit in [1, 2, 4, 9] {
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = store
                .list_versions("v/", cursor.as_deref(), limit)
                .await
                .unwrap();
            assert!(page.items.len() <= limit as usize);
            seen.extend(page.items.into_iter().map(|v| (v.key, v.version_id)));
            // A cursor that does not advance would page forever.
            assert!(
                seen.len() <= expected.len(),
                "the listing repeats: {seen:?}"
            );
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        assert_eq!(seen, expected, "limit {limit}");
    }
}

/// Conformance check: list versions resumes after a cursor whose version was deleted.
pub async fn list_versions_resumes_after_a_cursor_whose_version_was_deleted(
    store: &impl ObjectStore,
) {
    let first = create(store, "k", b"1").await;
    let second = put(store, "k", b"2", &if_match(&first)).await;
    let third = put(store, "k", b"3", &if_match(&second)).await;
    create(store, "l", b"4").await;
    let page = store.list_versions("", None, 2).await.unwrap();
    let ids: Vec<_> = page.items.iter().map(|v| v.version_id.as_str()).collect();
    assert_eq!(ids, [version_id(&third), version_id(&second)]);
    let cursor = page.next.expect("more versions remain");
    store
        .delete_version("k", version_id(&second))
        .await
        .unwrap();
    let rest = store.list_versions("", Some(&cursor), 10).await.unwrap();
    let rest: Vec<_> = rest.items.iter().map(|v| v.key.as_str()).collect();
    assert_eq!(rest, ["k", "l"]);
}

/// Conformance check: list_key_versions lists only that key, newest first.
pub async fn list_key_versions_lists_only_that_key_newest_first(store: &impl ObjectStore) {
    // Neighbours that share the key as a prefix, in every position a
    // directory walk could meet them: before (`k-`, `k.`), inside (`k/x`)
    // and after (`kk`, `k2`) the key.
    for other in ["j", "k-", "k.a", "k/x", "k2", "kk"] {
        create(store, other, b"neighbour").await;
    }
    let first = create(store, "k", b"1").await;
    let second = put(store, "k", b"22", &if_match(&first)).await;
    store.delete("k").await.unwrap();
    let page = store.list_key_versions(&key("k"), None, 10).await.unwrap();
    assert_eq!(page.next, None);
    let shape: Vec<_> = page
        .items
        .iter()
        .map(|v| (v.key.as_str(), v.is_current, v.is_delete_marker, v.size))
        .collect();
    assert_eq!(
        shape,
        [
            ("k", true, true, 0),
            ("k", false, false, 2),
            ("k", false, false, 1)
        ]
    );
    assert_eq!(page.items[1].version_id, version_id(&second));
    assert_eq!(page.items[2].version_id, version_id(&first));
    let absent = store.list_key_versions(&key("k0"), None, 10).await.unwrap();
    assert!(absent.items.is_empty() && absent.next.is_none());
}

/// Conformance check: list_key_versions pages cover every version exactly once.
pub async fn list_key_versions_pages_cover_every_version_exactly_once(store: &impl ObjectStore) {
    let mut meta = create(store, "p", b"0").await;
    let mut expected = vec![version_id(&meta).to_owned()];
    for i in 1..5 {
        meta = put(store, "p", format!("{i}").as_bytes(), &if_match(&meta)).await;
        expected.push(version_id(&meta).to_owned());
    }
    expected.reverse();
    create(store, "p/q", b"below the key").await;
    create(store, "pq", b"beside the key").await;
    for limit in [1, 2, 3, 5] {
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = store
                .list_key_versions(&key("p"), cursor.as_deref(), limit)
                .await
                .unwrap();
            assert!(page.items.len() <= limit as usize);
            assert!(page.items.iter().all(|v| v.key == "p"));
            seen.extend(page.items.into_iter().map(|v| v.version_id));
            // A cursor that does not advance would page forever.
            assert!(seen.len() <= expected.len(), "limit {limit}: {seen:?}");
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        assert_eq!(seen, expected, "limit {limit}");
    }
}

/// Conformance check: a malformed version cursor is invalid.
pub async fn a_malformed_version_cursor_is_invalid(store: &impl ObjectStore) {
    create(store, "k", b"v").await;
    for cursor in ["k", "", "\0"] {
        let got = store.list_versions("", Some(cursor), 10).await;
        assert_err!(got, InvalidArgument);
    }
}

/// Conformance check: a zero or oversized version listing limit is invalid.
pub async fn a_zero_or_oversized_version_listing_limit_is_invalid(store: &impl ObjectStore) {
    create(store, "k", b"v").await;
    for limit in [0, MAX_LIST_PAGE + 1, u32::MAX] {
        assert_err!(store.list_versions("", None, limit).await, InvalidArgument);
    }
    assert_eq!(
        store.list_versions("", None, 1).await.unwrap().items.len(),
        1
    );
}

/// Conformance check: version calls refuse invalid keys.
pub async fn version_calls_refuse_invalid_keys(store: &impl ObjectStore) {
    let meta = create(store, "k", b"v").await;
    let id = version_id(&meta);
    let too_long = "k".repeat(MAX_OBJECT_KEY_BYTES + 1);
    for bad in ["", too_long.as_str(), "k\0"] {
        assert_err!(store.head_version(bad, id).await, InvalidArgument);
        assert_err!(
            store.get_version_range(bad, id, 0..1).await,
            InvalidArgument
        );
        assert_err!(store.delete_version(bad, id).await, InvalidArgument);
    }
    assert_eq!(body(store, "k").await, "v");
}

// ── unversioned ──────────────────────────────────────────────────────

/// Conformance check: the store says it keeps no versions.
pub async fn the_store_says_it_keeps_no_versions(store: &impl ObjectStore) {
    assert!(!store.versioned());
}

/// Conformance check: a publish reports no version id.
pub async fn a_publish_reports_no_version_id(store: &impl ObjectStore) {
    let created = create(store, "k", b"v").await;
    assert_eq!(created.version_id, None);
    assert_eq!(store.head("k").await.unwrap().version_id, None);
    let copied = store
        .copy_object(
            "k",
            None,
            "dst",
            &PutCondition::IfNoneMatchAny,
            &no_metadata(),
        )
        .await
        .unwrap();
    assert_eq!(copied.version_id, None);
}

/// Conformance check: every version call is unsupported even for an existing key.
pub async fn every_version_call_is_unsupported_even_for_an_existing_key(store: &impl ObjectStore) {
    let first = create(store, "k", b"one").await;
    put(store, "k", b"two", &if_match(&first)).await;
    // There is no version id to name, so use the etag: whatever is passed,
    // the answer must be "cannot", never "nothing there".
    let id = first.etag.as_str();
    assert_err!(store.head_version("k", id).await, Unsupported);
    assert_err!(store.get_version("k", id).await, Unsupported);
    assert_err!(store.get_version_range("k", id, 0..1).await, Unsupported);
    assert_err!(store.delete_version("k", id).await, Unsupported);
    assert_err!(store.list_versions("", None, 10).await, Unsupported);
    assert_err!(store.list_versions("k", None, 10).await, Unsupported);
    assert_err!(
        store.list_key_versions(&key("k"), None, 10).await,
        Unsupported
    );
    assert_eq!(body(store, "k").await, "two");
}

// ── whole versions, segments, stamps ────────────────────────────────

/// Conformance check: a whole version reads back exactly.
pub async fn a_whole_version_reads_back_exactly(store: &impl ObjectStore) {
    let first = create(store, "k", b"first").await;
    put(store, "k", b"second!", &if_match(&first)).await;
    let (meta, bytes) = store.get_version("k", version_id(&first)).await.unwrap();
    assert_eq!(bytes, "first");
    assert_eq!(meta.etag, first.etag);
    assert_eq!(meta.crc64, Some(crc64_nvme(b"first")));
    store.delete("k").await.unwrap();
    assert_eq!(
        store.get_version("k", version_id(&first)).await.unwrap().1,
        "first"
    );
    assert_err!(store.get_version("k", "no-such-version").await, NotFound);
}

/// Conformance check: a version read can be guarded by its etag, whole or
/// a range.
pub async fn a_version_read_can_be_guarded_by_its_etag(store: &impl ObjectStore) {
    let old = create(store, "k", b"old bytes").await;
    put(store, "k", b"new", &if_match(&old)).await;
    let version = version_id(&old);
    let k = key("k");
    let read = |range, if_match| GetOptions {
        version_id: Some(version),
        range,
        if_match,
    };
    let whole = store
        .get_opts(&k, read(None, Some(&old.etag)))
        .await
        .unwrap();
    assert_eq!(whole.bytes().1, b"old bytes"[..]);
    let part = store.get_opts(&k, read(Some(4..9), Some(&old.etag))).await;
    let part = part.unwrap();
    assert_eq!(
        (part.meta.size, part.meta.etag.as_str()),
        (9, old.etag.as_str())
    );
    assert_eq!(part.bytes().1, b"bytes"[..]);
    for range in [None, Some(0..3)] {
        assert_err!(
            store.get_opts(&k, read(range, Some("\"stale\""))).await,
            PreconditionFailed
        );
    }
}

/// Conformance check: range segments reassemble the range.
pub async fn range_segments_reassemble_the_range(store: &impl ObjectStore) {
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let meta = create(store, "k", &data).await;
    let k = ObjectKey::new("k").unwrap();
    let read = |range, if_match| GetOptions {
        range: Some(range),
        if_match,
        ..GetOptions::default()
    };
    let got = store
        .get_opts(&k, read(1000..90_000, Some(&meta.etag)))
        .await
        .unwrap();
    let joined: Vec<u8> = got.body.iter().flat_map(|s| s.iter().copied()).collect();
    assert_eq!(joined, data[1000..90_000]);
    assert_eq!(got.len(), 89_000);
    // A range answer describes the whole object, not the range.
    assert_eq!(
        (got.meta.size, &got.meta.etag),
        (data.len() as u64, &meta.etag)
    );
    assert_err!(
        store.get_opts(&k, read(0..10, Some("\"stale\""))).await,
        PreconditionFailed
    );
    // Unguarded, a range reads whatever is current.
    let unguarded = store.get_opts(&k, read(5..7, None)).await.unwrap();
    assert_eq!(unguarded.bytes().1, data[5..7]);
}

/// Conformance check: stamps round trip through a publish.
pub async fn stamps_round_trip_through_a_publish(store: &impl ObjectStore) {
    use super::stamps::{GenerationStamps, PosixStamps};
    let stamps = GenerationStamps {
        generation: 12,
        epoch: 4,
        flush_id: "flush-9".into(),
        boundary: None,
        posix: Some(PosixStamps {
            mode: 0o100_600,
            uid: 1000,
            gid: 1000,
            mtime_unix: 1_700_000_000,
        }),
    };
    let body = Bytes::from_static(b"stamped");
    let crc = crc64_nvme(&body);
    store
        .put_whole(
            "k",
            body,
            &PutCondition::IfNoneMatchAny,
            &stamps.to_metadata(),
            crc,
        )
        .await
        .unwrap();
    let head = store.head("k").await.unwrap();
    assert_eq!(
        GenerationStamps::from_metadata(&head.metadata),
        Some(stamps)
    );
}

// ── compose ──────────────────────────────────────────────────────────

/// A local file of `len` deterministic bytes, kept alive with its path.
fn local_file(len: usize, salt: u8) -> (tempfile::NamedTempFile, Vec<u8>) {
    let data: Vec<u8> = (0..len)
        .map(|i| (i.wrapping_mul(31) as u8) ^ salt)
        .collect();
    let mut file = tempfile::NamedTempFile::new().unwrap();
    std::io::Write::write_all(&mut file, &data).unwrap();
    (file, data)
}

/// A part size this store accepts for every part but the last.
fn part_size(store: &impl ObjectStore) -> u64 {
    store.min_part_size().max(4096)
}

/// `key` as an [`ObjectKey`] that outlives the check. Leaked: a spec
/// borrows its key, and a few bytes per check keep every call site one
/// line.
fn leaked_key(key: &str) -> &'static ObjectKey {
    Box::leak(Box::new(ObjectKey::new(key).unwrap()))
}

fn spec<'a>(
    key: &str,
    path: &'a std::path::Path,
    parts: Vec<super::PartSource>,
    condition: PutCondition,
) -> super::ComposeSpec<'a> {
    super::ComposeSpec {
        key: leaked_key(key),
        local_path: path,
        parts,
        base_key: None,
        base_etag: None,
        condition,
        metadata: no_metadata(),
        crc64: None,
        progress: None,
    }
}

async fn no_uploads(store: &impl ObjectStore) {
    let pending = store.list_uploads("").await.unwrap();
    assert!(pending.is_empty(), "uploads left behind: {pending:?}");
}

/// Conformance check: a composed object of local parts gets the accumulated crc.
pub async fn a_composed_object_of_local_parts_gets_the_accumulated_crc(store: &impl ObjectStore) {
    use super::PartSource::Local;
    let part = part_size(store);
    let len = usize::try_from(2 * part + 123).unwrap();
    let (file, data) = local_file(len, 7);
    let progress = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut order = spec(
        "composed",
        file.path(),
        vec![
            Local {
                offset: 0,
                len: part,
            },
            Local {
                offset: part,
                len: part,
            },
            Local {
                offset: 2 * part,
                len: 123,
            },
        ],
        PutCondition::IfNoneMatchAny,
    );
    order.progress = Some(progress.clone());
    order.metadata = metadata(&[("custodian-gen", "1")]);
    let meta = store.compose(&order).await.unwrap();
    assert_eq!(meta.crc64, Some(crc64_nvme(&data)));
    assert_eq!(meta.size, data.len() as u64);
    assert_eq!(body(store, "composed").await, data);
    assert_eq!(
        store.head("composed").await.unwrap().metadata,
        order.metadata
    );
    assert_eq!(
        progress.load(std::sync::atomic::Ordering::Relaxed),
        data.len() as u64
    );
    no_uploads(store).await;
}

/// Conformance check: a composed object copies clean ranges from its base.
pub async fn a_composed_object_copies_clean_ranges_from_its_base(store: &impl ObjectStore) {
    use super::PartSource::{BaseCopy, Local};
    let part = part_size(store);
    let len = usize::try_from(3 * part).unwrap();
    let (_, base_data) = local_file(len, 1);
    let base = create(store, "k", &base_data).await;
    // The middle third changed locally; the rest is clean.
    let mut next = base_data.clone();
    let middle = usize::try_from(part).unwrap()..usize::try_from(2 * part).unwrap();
    next[middle].iter_mut().for_each(|b| *b = b.wrapping_add(1));
    let mut file = tempfile::NamedTempFile::new().unwrap();
    std::io::Write::write_all(&mut file, &next).unwrap();
    let mut order = spec(
        "k",
        file.path(),
        vec![
            BaseCopy {
                offset: 0,
                len: part,
            },
            Local {
                offset: part,
                len: part,
            },
            BaseCopy {
                offset: 2 * part,
                len: part,
            },
        ],
        if_match(&base),
    );
    order.base_etag = Some(&base.etag);
    order.crc64 = Some(crc64_nvme(&next));
    let meta = store.compose(&order).await.unwrap();
    assert_ne!(meta.etag, base.etag);
    assert_eq!(meta.crc64, Some(crc64_nvme(&next)));
    assert_eq!(body(store, "k").await, next);
    no_uploads(store).await;
}

/// Conformance check: a composed object may copy from a base under another key.
pub async fn a_composed_object_may_copy_from_a_base_under_another_key(store: &impl ObjectStore) {
    use super::PartSource::{BaseCopy, Local};
    let part = part_size(store);
    let (file, data) = local_file(usize::try_from(part + 10).unwrap(), 3);
    let base = create(store, "old-name", &data).await;
    let mut order = spec(
        "new-name",
        file.path(),
        vec![
            BaseCopy {
                offset: 0,
                len: part,
            },
            Local {
                offset: part,
                len: 10,
            },
        ],
        PutCondition::IfNoneMatchAny,
    );
    order.base_key = Some(leaked_key("old-name"));
    order.base_etag = Some(&base.etag);
    order.crc64 = Some(crc64_nvme(&data));
    store.compose(&order).await.unwrap();
    assert_eq!(body(store, "new-name").await, data);
    assert_eq!(body(store, "old-name").await, data);
}

/// Conformance check: malformed compose specs are refused before anything moves.
pub async fn malformed_compose_specs_are_refused_before_anything_moves(store: &impl ObjectStore) {
    use super::PartSource::{BaseCopy, Local};
    let part = part_size(store);
    let (file, data) = local_file(usize::try_from(2 * part).unwrap(), 5);
    let base = create(store, "k", &data).await;
    let cases: Vec<(&str, super::ComposeSpec<'_>)> = vec![
        (
            "no parts",
            spec("k", file.path(), vec![], PutCondition::Unconditional),
        ),
        (
            "a gap",
            spec(
                "k",
                file.path(),
                vec![
                    Local {
                        offset: 0,
                        len: part,
                    },
                    Local {
                        offset: part + 1,
                        len: 1,
                    },
                ],
                PutCondition::Unconditional,
            ),
        ),
        (
            "not from zero",
            spec(
                "k",
                file.path(),
                vec![Local { offset: 1, len: 1 }],
                PutCondition::Unconditional,
            ),
        ),
        (
            "an empty part",
            spec(
                "k",
                file.path(),
                vec![Local { offset: 0, len: 0 }],
                PutCondition::Unconditional,
            ),
        ),
        ("a base copy without the base etag", {
            let mut s = spec(
                "k",
                file.path(),
                vec![BaseCopy {
                    offset: 0,
                    len: part,
                }],
                if_match(&base),
            );
            s.crc64 = Some(1);
            s
        }),
        ("a base copy without a CRC", {
            let mut s = spec(
                "k",
                file.path(),
                vec![BaseCopy {
                    offset: 0,
                    len: part,
                }],
                if_match(&base),
            );
            s.base_etag = Some(&base.etag);
            s
        }),
        ("a base etag without a base copy", {
            let mut s = spec(
                "k",
                file.path(),
                vec![Local {
                    offset: 0,
                    len: part,
                }],
                if_match(&base),
            );
            s.base_etag = Some(&base.etag);
            s
        }),
        // A bad key cannot be in a spec: it holds an `ObjectKey`.
    ];
    for (what, order) in &cases {
        let got = store.compose(order).await;
        assert!(
            matches!(got, Err(ObjectError::InvalidArgument(_))),
            "{what}: {got:?}"
        );
    }
    if store.min_part_size() > 1 {
        let small = spec(
            "k",
            file.path(),
            vec![Local { offset: 0, len: 1 }, Local { offset: 1, len: 1 }],
            PutCondition::Unconditional,
        );
        assert_err!(store.compose(&small).await, InvalidArgument);
    }
    no_uploads(store).await;
    assert_eq!(store.head("k").await.unwrap().etag, base.etag);
}

/// Conformance check: a compose whose base moved fails and leaves no upload.
pub async fn a_compose_whose_base_moved_fails_and_leaves_no_upload(store: &impl ObjectStore) {
    use super::PartSource::{BaseCopy, Local};
    let part = part_size(store);
    let (file, data) = local_file(usize::try_from(part + 1).unwrap(), 9);
    let stale = create(store, "k", &data).await;
    let moved = put(store, "k", &data, &if_match(&stale)).await;
    let mut order = spec(
        "k",
        file.path(),
        vec![
            BaseCopy {
                offset: 0,
                len: part,
            },
            Local {
                offset: part,
                len: 1,
            },
        ],
        if_match(&stale),
    );
    order.base_etag = Some(&stale.etag);
    order.crc64 = Some(crc64_nvme(&data));
    assert_err!(store.compose(&order).await, PreconditionFailed);
    no_uploads(store).await;
    assert_eq!(store.head("k").await.unwrap().etag, moved.etag);
}

/// Conformance check: a compose failing midway aborts its upload.
pub async fn a_compose_failing_midway_aborts_its_upload(store: &impl ObjectStore) {
    use super::PartSource::Local;
    let part = part_size(store);
    // The file ends halfway through the second part: the first part lands,
    // then reading the second fails.
    let (file, _) = local_file(usize::try_from(part + part / 2).unwrap(), 2);
    let order = spec(
        "k",
        file.path(),
        vec![
            Local {
                offset: 0,
                len: part,
            },
            Local {
                offset: part,
                len: part,
            },
        ],
        PutCondition::IfNoneMatchAny,
    );
    assert_err!(store.compose(&order).await, Io);
    no_uploads(store).await;
    assert_err!(store.head("k").await, NotFound);
}

/// Conformance check: a compose with a wrong crc publishes nothing and leaves no upload.
pub async fn a_compose_with_a_wrong_crc_publishes_nothing_and_leaves_no_upload(
    store: &impl ObjectStore,
) {
    use super::PartSource::Local;
    let (file, data) = local_file(1000, 4);
    let mut order = spec(
        "k",
        file.path(),
        vec![Local {
            offset: 0,
            len: 1000,
        }],
        PutCondition::IfNoneMatchAny,
    );
    order.crc64 = Some(crc64_nvme(&data) ^ 1);
    assert_err!(store.compose(&order).await, ChecksumMismatch);
    no_uploads(store).await;
    assert_err!(store.head("k").await, NotFound);
}

/// Conformance check: a compose respects its condition.
pub async fn a_compose_respects_its_condition(store: &impl ObjectStore) {
    use super::PartSource::Local;
    let existing = create(store, "k", b"already here").await;
    let (file, _) = local_file(100, 6);
    let order = spec(
        "k",
        file.path(),
        vec![Local {
            offset: 0,
            len: 100,
        }],
        PutCondition::IfNoneMatchAny,
    );
    assert_err!(store.compose(&order).await, PreconditionFailed);
    no_uploads(store).await;
    assert_eq!(store.head("k").await.unwrap().etag, existing.etag);
}

// ── multipart primitives ─────────────────────────────────────────────

fn key(key: &str) -> ObjectKey {
    ObjectKey::new(key).unwrap()
}

fn bytes_part(body: Bytes, crc64: u64) -> PartData<'static> {
    PartData::Bytes { body, crc64 }
}

async fn create_upload(store: &impl ObjectStore, at: &str, metadata: &Metadata) -> String {
    let options = UploadOptions { metadata };
    store.create_upload(&key(at), options).await.unwrap()
}

async fn upload_part(store: &impl ObjectStore, at: &str, id: &str, part: u32, body: &[u8]) {
    let body = Bytes::copy_from_slice(body);
    let crc = crc64_nvme(&body);
    let data = bytes_part(body, crc);
    store.upload_part(&key(at), id, part, data).await.unwrap();
}

/// Conformance check: metadata declared when an upload starts is published
/// when it completes.
pub async fn metadata_declared_when_an_upload_starts_is_published_when_it_completes(
    store: &impl ObjectStore,
) {
    let stamps = metadata(&[("custodian-gen", "7")]);
    let id = create_upload(store, "k", &stamps).await;
    upload_part(store, "k", &id, 1, b"whole").await;
    let options = CompleteOptions {
        parts: 1,
        condition: &PutCondition::IfNoneMatchAny,
        crc64: crc64_nvme(b"whole"),
    };
    let meta = store
        .complete_upload(&key("k"), &id, options)
        .await
        .unwrap();
    assert_eq!(meta.metadata, stamps);
    assert_eq!(store.head("k").await.unwrap().metadata, stamps);
    assert_eq!(body(store, "k").await, b"whole"[..]);
    no_uploads(store).await;
}

/// Conformance check: a pending upload is listed until aborted and aborting twice is fine.
pub async fn a_pending_upload_is_listed_until_aborted_and_aborting_twice_is_fine(
    store: &impl ObjectStore,
) {
    let id = create_upload(store, "dir/k", &no_metadata()).await;
    upload_part(store, "dir/k", &id, 1, b"part one").await;
    let pending = store.list_uploads("dir/").await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(
        (pending[0].key.as_str(), pending[0].upload_id.as_str()),
        ("dir/k", id.as_str())
    );
    assert!(store.list_uploads("other/").await.unwrap().is_empty());
    store.abort_upload(&key("dir/k"), &id).await.unwrap();
    store.abort_upload(&key("dir/k"), &id).await.unwrap();
    no_uploads(store).await;
    let body = Bytes::from_static(b"late");
    let crc = crc64_nvme(&body);
    assert_err!(
        store
            .upload_part(&key("dir/k"), &id, 2, bytes_part(body, crc))
            .await,
        NoSuchUpload
    );
    assert_err!(store.head("dir/k").await, NotFound);
}

/// Conformance check: an upload's parts are listed by number, with their
/// sizes (and CRCs, where the backend reports them), a part uploaded
/// again replaced; another key's upload, an unknown one and an aborted
/// one are `NoSuchUpload`.
pub async fn an_uploads_parts_are_listed_by_number_until_it_is_aborted(store: &impl ObjectStore) {
    let id = create_upload(store, "k", &no_metadata()).await;
    assert_eq!(store.list_parts(&key("k"), &id).await.unwrap(), []);
    upload_part(store, "k", &id, 3, b"third").await;
    upload_part(store, "k", &id, 1, b"first, first try").await;
    upload_part(store, "k", &id, 1, b"first").await;
    let parts = store.list_parts(&key("k"), &id).await.unwrap();
    let shape: Vec<_> = parts.iter().map(|p| (p.number, p.size)).collect();
    assert_eq!(shape, [(1, 5), (3, 5)]);
    for (part, body) in parts.iter().zip([&b"first"[..], b"third"]) {
        assert!(
            part.crc64.is_none_or(|crc| crc == crc64_nvme(body)),
            "part {} reports CRC {:?}",
            part.number,
            part.crc64
        );
    }
    assert_err!(store.list_parts(&key("other"), &id).await, NoSuchUpload);
    assert_err!(
        store.list_parts(&key("k"), "no-such-upload").await,
        NoSuchUpload
    );
    store.abort_upload(&key("k"), &id).await.unwrap();
    assert_err!(store.list_parts(&key("k"), &id).await, NoSuchUpload);
}

/// Conformance check: an upload missing a part cannot complete.
pub async fn an_upload_missing_a_part_cannot_complete(store: &impl ObjectStore) {
    let id = create_upload(store, "k", &no_metadata()).await;
    upload_part(store, "k", &id, 2, b"only the second").await;
    let options = CompleteOptions {
        parts: 2,
        condition: &PutCondition::IfNoneMatchAny,
        crc64: 0,
    };
    let got = store.complete_upload(&key("k"), &id, options).await;
    assert_err!(got, InvalidArgument);
    assert_err!(store.head("k").await, NotFound);
    store.abort_upload(&key("k"), &id).await.unwrap();
    no_uploads(store).await;
}

/// Conformance check: a part with a wrong crc is refused.
pub async fn a_part_with_a_wrong_crc_is_refused(store: &impl ObjectStore) {
    let id = create_upload(store, "k", &no_metadata()).await;
    let body = Bytes::from_static(b"bytes");
    let wrong = crc64_nvme(&body) ^ 1;
    assert_err!(
        store
            .upload_part(&key("k"), &id, 1, bytes_part(body, wrong))
            .await,
        ChecksumMismatch
    );
    assert_err!(
        store
            .upload_part(&key("k"), &id, 0, bytes_part(Bytes::new(), crc64_nvme(b"")))
            .await,
        InvalidArgument
    );
    store.abort_upload(&key("k"), &id).await.unwrap();
}

// ── streamed bodies ──────────────────────────────────────────────────

/// A streamed body of `pieces`, sent by a task of its own through a
/// channel narrower than the body (so the store must keep reading for the
/// sender to finish), ending with `end` (`None`: the sender just stops).
fn streamed(pieces: Vec<Bytes>, end: Option<Result<BodySums, ObjectError>>) -> StreamedBody {
    let (sender, body) = StreamedBody::channel(2);
    tokio::spawn(async move {
        for piece in pieces {
            if sender.data(piece).await.is_err() {
                return;
            }
        }
        match end {
            Some(Ok(sums)) => {
                let _ = sender.end(sums).await;
            }
            Some(Err(error)) => sender.fail(error).await,
            None => drop(sender),
        }
    });
    body
}

/// Many small pieces of a recognisable body, and the body.
fn pieces_of(len: usize) -> (Vec<Bytes>, Bytes) {
    let whole: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
    let pieces = whole.chunks(1000).map(Bytes::copy_from_slice).collect();
    (pieces, Bytes::from(whole))
}

/// Conformance check: a body streamed in pieces is published whole once
/// it ends with its CRC, under its condition, with the MD5 its sender
/// computed (or none, as for a whole body).
pub async fn a_streamed_body_publishes_once_it_ends_with_its_crc(store: &impl ObjectStore) {
    let (pieces, whole) = pieces_of(70_000);
    let sums = BodySums {
        crc64: crc64_nvme(&whole),
        content_md5: Some(*b"sixteen md5 byte"),
    };
    let options = super::PutOptions {
        condition: &PutCondition::IfNoneMatchAny,
        metadata: &metadata(&[("streamed", "yes")]),
        crc64: 0,
        content_md5: None,
    };
    let body = streamed(pieces.clone(), Some(Ok(sums)));
    let meta = store
        .put_stream(&key("s"), body, 1 << 20, options)
        .await
        .unwrap();
    assert_eq!((meta.size, meta.crc64), (70_000, Some(sums.crc64)));
    assert!(meta.content_md5.is_none() || meta.content_md5 == sums.content_md5);
    let (read, body) = store.get_whole("s", None).await.unwrap();
    assert_eq!(body, whole);
    assert_eq!(read.etag, meta.etag);
    assert_eq!(read.metadata, metadata(&[("streamed", "yes")]));
    // The condition still holds the door: the key exists now.
    let again = store
        .put_stream(
            &key("s"),
            streamed(pieces, Some(Ok(sums))),
            1 << 20,
            options,
        )
        .await;
    assert_err!(again, PreconditionFailed);
    assert_eq!(store.head("s").await.unwrap().etag, meta.etag);
}

/// Conformance check: a streamed body that its sender fails, that stops
/// before its end, whose CRC is not the bytes', or that runs past its
/// limit publishes nothing.
pub async fn a_streamed_body_that_fails_ends_early_or_mismatches_publishes_nothing(
    store: &impl ObjectStore,
) {
    let (pieces, whole) = pieces_of(20_000);
    let crc64 = crc64_nvme(&whole);
    let sums = |crc64| {
        Some(Ok(BodySums {
            crc64,
            content_md5: None,
        }))
    };
    let options = super::PutOptions {
        condition: &PutCondition::IfNoneMatchAny,
        metadata: &no_metadata(),
        crc64: 0,
        content_md5: None,
    };
    let failed = Some(Err(ObjectError::Unavailable("the client went away".into())));
    let body = streamed(pieces.clone(), failed);
    let got = store.put_stream(&key("s"), body, 1 << 20, options).await;
    assert_err!(got, Unavailable);
    assert_err!(store.head("s").await, NotFound);
    let body = streamed(pieces.clone(), None);
    let got = store.put_stream(&key("s"), body, 1 << 20, options).await;
    assert_err!(got, InvalidArgument);
    assert_err!(store.head("s").await, NotFound);
    let body = streamed(pieces.clone(), sums(crc64 ^ 1));
    let got = store.put_stream(&key("s"), body, 1 << 20, options).await;
    assert_err!(got, ChecksumMismatch);
    assert_err!(store.head("s").await, NotFound);
    let body = streamed(pieces.clone(), sums(crc64));
    let got = store.put_stream(&key("s"), body, 19_999, options).await;
    assert_err!(got, InvalidArgument);
    assert_err!(store.head("s").await, NotFound);
    // The same body, whole and ending well, goes through.
    let body = streamed(pieces, sums(crc64));
    store
        .put_stream(&key("s"), body, 1 << 20, options)
        .await
        .unwrap();
}

/// Conformance check: a streamed part is stored like a part given whole:
/// its CRC is checked, and the upload completes with it.
pub async fn a_streamed_part_completes_like_any_other_part(store: &impl ObjectStore) {
    let (pieces, first) = pieces_of(store.min_part_size().max(10_000) as usize);
    let id = create_upload(store, "k", &no_metadata()).await;
    let wrong = Some(Ok(BodySums {
        crc64: crc64_nvme(&first) ^ 1,
        content_md5: None,
    }));
    let got = store
        .upload_part_stream(&key("k"), &id, 1, streamed(pieces.clone(), wrong), u64::MAX)
        .await;
    assert_err!(got, ChecksumMismatch);
    let right = Some(Ok(BodySums {
        crc64: crc64_nvme(&first),
        content_md5: None,
    }));
    let crc = store
        .upload_part_stream(&key("k"), &id, 1, streamed(pieces, right), u64::MAX)
        .await
        .unwrap();
    assert_eq!(crc, crc64_nvme(&first));
    upload_part(store, "k", &id, 2, b"the last part").await;
    let whole = [&first[..], b"the last part"].concat();
    let options = CompleteOptions {
        parts: 2,
        condition: &PutCondition::IfNoneMatchAny,
        crc64: crc64_nvme(&whole),
    };
    store
        .complete_upload(&key("k"), &id, options)
        .await
        .unwrap();
    assert_eq!(store.get_whole("k", None).await.unwrap().1, whole);
    no_uploads(store).await;
}

// ── epoch leases ─────────────────────────────────────────────────────

/// Conformance check: an epoch cell is created once at epoch one.
pub async fn an_epoch_cell_is_created_once_at_epoch_one(store: &impl ObjectStore) {
    assert_eq!(store.epoch_read("epoch").await.unwrap(), None);
    let lease = store.epoch_acquire("epoch", "host-a", None).await.unwrap();
    assert_eq!((lease.holder_id.as_str(), lease.epoch), ("host-a", 1));
    assert_err!(
        store.epoch_acquire("epoch", "host-b", None).await,
        PreconditionFailed
    );
    let state = store.epoch_read("epoch").await.unwrap().unwrap();
    assert_eq!(
        (state.holder_id.as_str(), state.epoch, state.released),
        ("host-a", 1, false)
    );
    assert_eq!(state.token, lease.token);
    assert!(state.last_renew_ms.is_some());
}

/// Conformance check: a successor supersedes the observed holder and deposes it.
pub async fn a_successor_supersedes_the_observed_holder_and_deposes_it(store: &impl ObjectStore) {
    let old = store.epoch_acquire("epoch", "host-a", None).await.unwrap();
    let observed = store.epoch_read("epoch").await.unwrap().unwrap();
    let new = store
        .epoch_acquire("epoch", "host-b", Some(&observed))
        .await
        .unwrap();
    assert_eq!((new.holder_id.as_str(), new.epoch), ("host-b", 2));
    assert_err!(
        store.epoch_renew("epoch", &old, None).await,
        PreconditionFailed
    );
    assert_err!(store.epoch_release("epoch", &old).await, PreconditionFailed);
    let renewed = store.epoch_renew("epoch", &new, None).await.unwrap();
    assert_eq!(renewed.epoch, 2);
    assert_ne!(renewed.token, new.token, "a renewal moves the token");
    assert_err!(
        store.epoch_renew("epoch", &new, None).await,
        PreconditionFailed
    );
}

/// Conformance check: only one of two successors racing for an epoch wins.
pub async fn only_one_of_two_successors_racing_for_an_epoch_wins(store: &impl ObjectStore) {
    store.epoch_acquire("epoch", "host-a", None).await.unwrap();
    let observed = store.epoch_read("epoch").await.unwrap().unwrap();
    let (one, two) = tokio::join!(
        store.epoch_acquire("epoch", "host-b", Some(&observed)),
        store.epoch_acquire("epoch", "host-c", Some(&observed)),
    );
    let winners = [&one, &two].iter().filter(|r| r.is_ok()).count();
    assert_eq!(winners, 1, "{one:?} / {two:?}");
    let loser = if one.is_ok() { two } else { one };
    assert!(
        matches!(
            loser,
            Err(ObjectError::PreconditionFailed(_) | ObjectError::Conflict(_))
        ),
        "{loser:?}"
    );
    assert_eq!(store.epoch_read("epoch").await.unwrap().unwrap().epoch, 2);
}

/// Conformance check: a released cell keeps its epoch number.
pub async fn a_released_cell_keeps_its_epoch_number(store: &impl ObjectStore) {
    let first = store.epoch_acquire("epoch", "host-a", None).await.unwrap();
    let observed = store.epoch_read("epoch").await.unwrap().unwrap();
    let second = store
        .epoch_acquire("epoch", "host-b", Some(&observed))
        .await
        .unwrap();
    store.epoch_release("epoch", &second).await.unwrap();
    let released = store.epoch_read("epoch").await.unwrap().unwrap();
    assert!(released.released);
    assert_eq!(released.epoch, 2);
    assert_err!(
        store.epoch_renew("epoch", &second, None).await,
        PreconditionFailed
    );
    let third = store
        .epoch_acquire("epoch", "host-c", Some(&released))
        .await
        .unwrap();
    assert_eq!(third.epoch, 3, "numbering continues after a release");
    assert_err!(
        store.epoch_renew("epoch", &first, None).await,
        PreconditionFailed
    );
}

/// Conformance check: another holders identity cannot renew a lease.
pub async fn another_holders_identity_cannot_renew_a_lease(store: &impl ObjectStore) {
    let lease = store.epoch_acquire("epoch", "host-a", None).await.unwrap();
    let forged = super::EpochLease {
        holder_id: "host-b".into(),
        ..lease.clone()
    };
    assert_err!(
        store.epoch_renew("epoch", &forged, None).await,
        PreconditionFailed
    );
    assert_err!(
        store.epoch_release("epoch", &forged).await,
        PreconditionFailed
    );
    let state = store.epoch_read("epoch").await.unwrap().unwrap();
    assert_eq!(state.holder_id, "host-a");
    assert_eq!(state.token, lease.token, "nothing was written");
}

/// Conformance check: an echo rides the renewal and none clears it.
pub async fn an_echo_rides_the_renewal_and_none_clears_it(store: &impl ObjectStore) {
    let lease = store.epoch_acquire("epoch", "host-a", None).await.unwrap();
    let lease = store
        .epoch_renew("epoch", &lease, Some("syncing 3 files"))
        .await
        .unwrap();
    let state = store.epoch_read("epoch").await.unwrap().unwrap();
    assert_eq!(state.echo.as_deref(), Some("syncing 3 files"));
    store.epoch_renew("epoch", &lease, None).await.unwrap();
    assert_eq!(store.epoch_read("epoch").await.unwrap().unwrap().echo, None);
}

/// Conformance check: a lease cell keeps its history as versions.
pub async fn a_lease_cell_keeps_its_history_as_versions(store: &impl ObjectStore) {
    let lease = store.epoch_acquire("epoch", "host-a", None).await.unwrap();
    store.epoch_renew("epoch", &lease, None).await.unwrap();
    let page = store.list_versions("epoch", None, 10).await.unwrap();
    assert_eq!(page.items.len(), 2);
}

/// Conformance check: bootstrap reports a usable store.
pub async fn bootstrap_reports_a_usable_store(store: &impl ObjectStore) {
    let report = store.admin().bootstrap("").await.unwrap();
    assert!(report.ok(), "{report:?}");
    assert!(!report.notes.is_empty());
}
