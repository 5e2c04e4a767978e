//! The bundled purge plugin through the host's driver.

use std::sync::Arc;

use custodian::decisions::purge::{Candidate, Governance, Mapping, Verdict};
use custodian::policy::PolicyError;
use custodian::policy::purge::PurgePolicy;
use custodian::runtime::{Limits, World};

fn candidate(version: &str) -> Candidate {
    Candidate {
        key: "old/task/a.bin".into(),
        version_id: version.into(),
        etag: "\"e1\"".into(),
        size: 5,
        is_delete_marker: false,
        last_modified_ms: None,
    }
}

#[test]
fn the_bundled_purge_plugin_deletes_mapped_versions_and_keeps_unmapped_ones() {
    let world = crate::support::World::new();
    let runtime = crate::support::runtime();
    let bytes = custodian::bundled::plugin(World::Purge).expect("the purge plugin is bundled");
    let plugin = Arc::new(runtime.load_bytes(bytes, "builtin:purge").unwrap());
    let policy = PurgePolicy::new(plugin, world.services.clone(), Limits::default()).unwrap();
    let mapping = Mapping {
        source_key: "old/task/a.bin".into(),
        source_version_id: "v1".into(),
        source_etag: Some("e1".into()),
        destination_key: "new/task/a.bin".into(),
        destination_version_id: "w1".into(),
        destination_etag: "e2".into(),
        size: 5,
    };
    let now = 1_700_000_000_000;
    let mapped = Governance::Mapped(mapping);
    assert_eq!(
        policy.verdict(&candidate("v1"), &mapped, now).unwrap(),
        Ok(Verdict::Delete)
    );
    let kept = policy
        .verdict(
            &candidate("v2"),
            &Governance::Unmapped("old/task".into()),
            now,
        )
        .unwrap();
    assert!(matches!(kept, Ok(Verdict::Retain(_))), "{kept:?}");
    let asked_wrongly = policy.verdict(&candidate("v2"), &mapped, now).unwrap();
    assert!(
        matches!(asked_wrongly, Err(PolicyError::InvalidArgument(_))),
        "{asked_wrongly:?}"
    );
}
