//! The archive policy's choice of the next hop.

use custodian_plugin_archive::Policy;
use custodian_sdk::Error;
use custodian_sdk::archive::{ArchiveMap, Hop, RegistryRow, VersionRef};

fn version(key: &str, id: &str) -> VersionRef {
    VersionRef {
        key: key.into(),
        version_id: id.into(),
    }
}

fn row(from: (&str, &str), to: (&str, &str), size: u64) -> RegistryRow {
    RegistryRow {
        source: version(from.0, from.1),
        source_etag: Some("\"aaa\"".into()),
        destination: version(to.0, to.1),
        destination_etag: "bbb".into(),
        size,
    }
}

#[test]
fn the_row_moving_the_wanted_version_is_followed() {
    let rows = vec![
        row(("old/a", "v0"), ("new/a", "w0"), 5),
        row(("old/a", "v1"), ("new/a", "w1"), 7),
    ];
    let hop = Policy::next_hop(version("old/a", "v1"), Some(7), Some("aaa".into()), rows).unwrap();
    assert_eq!(hop, Hop::Follow(row(("old/a", "v1"), ("new/a", "w1"), 7)));
}

#[test]
fn a_version_no_row_moves_is_missing() {
    let rows = vec![row(("old/a", "v0"), ("new/a", "w0"), 5)];
    let hop = Policy::next_hop(version("old/a", "v9"), None, None, rows).unwrap();
    assert!(matches!(hop, Hop::Missing(reason) if reason.contains("old/a@v9")));
}

#[test]
fn two_rows_moving_one_version_to_different_places_are_corrupt() {
    let rows = vec![
        row(("old/a", "v1"), ("new/a", "w1"), 7),
        row(("old/a", "v1"), ("other/a", "x1"), 7),
    ];
    assert!(matches!(
        Policy::next_hop(version("old/a", "v1"), Some(7), None, rows),
        Err(Error::Corrupt(_))
    ));
}

#[test]
fn a_repeated_identical_row_is_not_a_contradiction() {
    let rows = vec![
        row(("old/a", "v1"), ("new/a", "w1"), 7),
        row(("old/a", "v1"), ("new/a", "w1"), 7),
    ];
    assert!(matches!(
        Policy::next_hop(version("old/a", "v1"), Some(7), None, rows),
        Ok(Hop::Follow(_))
    ));
}

#[test]
fn a_row_disagreeing_with_the_pins_size_or_etag_is_never_followed() {
    let rows = vec![row(("old/a", "v1"), ("new/a", "w1"), 7)];
    assert!(matches!(
        Policy::next_hop(version("old/a", "v1"), Some(8), None, rows.clone()),
        Err(Error::Corrupt(m)) if m.contains("bytes")
    ));
    assert!(matches!(
        Policy::next_hop(version("old/a", "v1"), Some(7), Some("zzz".into()), rows),
        Err(Error::Corrupt(m)) if m.contains("etag")
    ));
}

#[test]
fn a_row_without_a_complete_destination_is_corrupt() {
    let mut incomplete = row(("old/a", "v1"), ("new/a", ""), 7);
    incomplete.destination_etag = String::new();
    assert!(matches!(
        Policy::next_hop(version("old/a", "v1"), None, None, vec![incomplete]),
        Err(Error::Corrupt(_))
    ));
}
