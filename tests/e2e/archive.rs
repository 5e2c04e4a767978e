//! The bundled archive plugin through the host's driver.

use std::sync::Arc;

use custodian::policy::PolicyError;
use custodian::policy::archive::ArchivePolicy;
use custodian::runtime::{Limits, World};
use custodian::versions::hops::{Hop, RegistryRow, VersionRef};

fn version(key: &str, id: &str) -> VersionRef {
    VersionRef {
        key: key.into(),
        version_id: id.into(),
    }
}

fn policy(world: &crate::support::World) -> ArchivePolicy {
    let runtime = crate::support::runtime();
    let bytes = custodian::bundled::plugin(World::Archive).expect("the archive plugin is bundled");
    let plugin = Arc::new(runtime.load_bytes(bytes, "builtin:archive").unwrap());
    ArchivePolicy::new(plugin, world.services.clone(), Limits::default()).unwrap()
}

#[test]
fn the_bundled_archive_plugin_follows_the_row_that_moves_a_version_and_refuses_a_contradiction() {
    let world = crate::support::World::new();
    let policy = policy(&world);
    let row = RegistryRow {
        source: version("old/a", "v1"),
        source_etag: Some("e1".into()),
        destination: version("new/a", "w1"),
        destination_etag: "e2".into(),
        size: 3,
    };
    let hop = policy
        .choose(
            &version("old/a", "v1"),
            Some(3),
            Some("\"e1\""),
            std::slice::from_ref(&row),
        )
        .unwrap()
        .unwrap();
    assert_eq!(hop, Hop::Follow(row.clone()));
    let missing = policy
        .choose(
            &version("old/a", "v2"),
            None,
            None,
            std::slice::from_ref(&row),
        )
        .unwrap()
        .unwrap();
    assert!(matches!(missing, Hop::Missing(_)));
    let mut elsewhere = row.clone();
    elsewhere.destination = version("other/a", "x1");
    let refused = policy
        .choose(&version("old/a", "v1"), None, None, &[row, elsewhere])
        .unwrap();
    assert!(
        matches!(refused, Err(PolicyError::Corrupt(_))),
        "{refused:?}"
    );
}
