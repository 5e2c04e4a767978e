//! The purge policy's verdicts.

use custodian_plugin_purge::Policy;
use custodian_sdk::Error;
use custodian_sdk::purge::{Candidate, Governance, Mapping, PurgeRules, Verdict};

fn candidate(version: &str, size: u64, etag: &str) -> Candidate {
    Candidate {
        key: "old/task/a.bin".into(),
        version_id: version.into(),
        etag: etag.into(),
        size,
        is_delete_marker: false,
        last_modified_ms: Some(1_700_000_000_000),
    }
}

fn mapping(version: &str, size: u64) -> Mapping {
    Mapping {
        source_key: "old/task/a.bin".into(),
        source_version_id: version.into(),
        source_etag: Some("\"e1\"".into()),
        destination_key: "archive/task/a.bin".into(),
        destination_version_id: "w1".into(),
        destination_etag: "e2".into(),
        size,
    }
}

const NOW: u64 = 1_800_000_000_000;

#[test]
fn a_version_the_registry_maps_is_deleted() {
    let verdict = Policy::judge(
        candidate("v1", 5, "e1"),
        Governance::Mapped(mapping("v1", 5)),
        NOW,
    );
    assert_eq!(verdict.unwrap(), Verdict::Delete);
}

#[test]
fn an_s3_backend_etag_with_its_version_suffix_matches_the_registry_etag() {
    let verdict = Policy::judge(
        candidate("v1", 5, "\"e1:v1\""),
        Governance::Mapped(mapping("v1", 5)),
        NOW,
    );
    assert_eq!(verdict.unwrap(), Verdict::Delete);
}

#[test]
fn a_version_contradicting_its_row_is_kept_with_the_reason() {
    let size = Policy::judge(
        candidate("v1", 6, "e1"),
        Governance::Mapped(mapping("v1", 5)),
        NOW,
    );
    assert!(matches!(size, Ok(Verdict::Retain(r)) if r.contains("bytes")));
    let etag = Policy::judge(
        candidate("v1", 5, "zz"),
        Governance::Mapped(mapping("v1", 5)),
        NOW,
    );
    assert!(matches!(etag, Ok(Verdict::Retain(r)) if r.contains("etag")));
}

#[test]
fn a_mapping_for_another_version_is_an_invalid_question() {
    let verdict = Policy::judge(
        candidate("v2", 5, "e1"),
        Governance::Mapped(mapping("v1", 5)),
        NOW,
    );
    assert!(matches!(verdict, Err(Error::InvalidArgument(_))));
}

#[test]
fn an_unmapped_version_under_a_registry_is_kept() {
    let verdict = Policy::judge(
        candidate("v2", 5, "e1"),
        Governance::Unmapped("old/task".into()),
        NOW,
    );
    assert!(matches!(verdict, Ok(Verdict::Retain(r)) if r.contains("old/task")));
}

#[test]
fn every_version_of_an_unarchived_key_goes() {
    let mut marker = candidate("v3", 0, "");
    marker.is_delete_marker = true;
    for c in [candidate("v1", 5, "e1"), marker] {
        assert_eq!(
            Policy::judge(c, Governance::Unarchived, NOW).unwrap(),
            Verdict::Delete
        );
    }
}
