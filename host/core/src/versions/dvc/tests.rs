//! DVC pointer files: single files, version-aware directories,
//! content-addressed outputs, and what is refused.

use super::*;

const MD5: &str = "900150983cd24fb0d6963f7d28e17f72";

const DVC: &str = "outs:
- md5: 900150983cd24fb0d6963f7d28e17f72
  size: 3
  hash: md5
  path: train.csv
  cloud:
    store:
      etag: 900150983cd24fb0d6963f7d28e17f72
      version_id: CxBqqlHnOmHSG09sYlP36Mytf.48xmaJ
";

/// What DVC 3.67 wrote for `dvc add data` + `dvc push` to a
/// version-aware remote (three files, two of them nested).
const DIRECTORY: &str = "outs:
- hash: md5
  path: data
  files:
  - relpath: a.txt
    md5: 5bbf5a52328e7439ae6e719dfe712200
    size: 4
    cloud:
      va:
        etag: 5bbf5a52328e7439ae6e719dfe712200
        version_id: f6cc1a32-1753-4a90-b121-4470349d71b8
  - relpath: sub/b.txt
    md5: c193497a1a06b2c72230e6146ff47080
    size: 4
    cloud:
      va:
        etag: c193497a1a06b2c72230e6146ff47080
        version_id: 69379ba8-b172-457f-9bcb-6772686f2e4e
  - relpath: sub/c.bin
    md5: febe6995bad457991331348f7b9c85fa
    size: 6
    cloud:
      va:
        etag: febe6995bad457991331348f7b9c85fa
        version_id: 6a918c4d-77a7-44b4-b2bb-6e92af453f98
";

/// The `.dir` DVC kept in its cache for that directory, byte for byte.
const LISTING: &str = r#"[{"md5": "5bbf5a52328e7439ae6e719dfe712200", "relpath": "a.txt"}, {"md5": "c193497a1a06b2c72230e6146ff47080", "relpath": "sub/b.txt"}, {"md5": "febe6995bad457991331348f7b9c85fa", "relpath": "sub/c.bin"}]"#;
const LISTING_MD5: &str = "99d3b12bb47346f85210b5ffbc29432f";

/// Found by fuzzing: the YAML scanner is quadratic in the nesting, so a
/// deep file is refused before it parses.
#[test]
fn a_dvc_file_nesting_past_the_bound_is_refused_before_yaml_parses_it() {
    let nested = |depth: usize| format!("outs: {}{}", "[".repeat(depth), "]".repeat(depth));
    let refusal = |depth| parse_dvc(&nested(depth), "m.dvc", "", None).unwrap_err();
    assert!(refusal(MAX_DVC_NESTING + 1).to_string().contains("nests"));
    // At the bound, YAML parses it and finds no outputs in it.
    assert!(!refusal(MAX_DVC_NESTING).to_string().contains("nests"));
    // Closed brackets do not add up.
    let flat = format!("outs: [{}]", "[], ".repeat(10 * MAX_DVC_NESTING));
    assert!(
        !parse_dvc(&flat, "m.dvc", "", None)
            .unwrap_err()
            .to_string()
            .contains("nests")
    );
}

#[test]
fn a_dvc_pointer_file_pins_its_path_with_the_remotes_version_and_etag() {
    let pins = parse_dvc(DVC, "train.csv.dvc", "data/", None).unwrap().pins;
    assert_eq!(pins.len(), 1);
    let pin = &pins[0];
    assert_eq!(pin.key, "data/train.csv");
    assert_eq!(pin.version_id, "CxBqqlHnOmHSG09sYlP36Mytf.48xmaJ");
    assert_eq!(pin.etag.as_deref(), Some(MD5));
    assert_eq!(pin.size, Some(3));
    assert_eq!(pin.digest, Digest::Md5(MD5.into()));
}

#[test]
fn a_dvc_row_without_a_hash_field_is_dvc_2s_md5_dos2unix() {
    let text = DVC.replace("  hash: md5\n", "");
    let pins = parse_dvc(&text, "x.dvc", "", None).unwrap().pins;
    assert_eq!(pins[0].digest, Digest::Md5Dos2Unix(MD5.into()));
}

#[test]
fn a_version_aware_directory_pins_each_file_under_its_relpath_and_rebuilds_dvcs_listing() {
    let pointers = parse_dvc(DIRECTORY, "data.dvc", "proj/", None).unwrap();
    let keys: Vec<&str> = pointers.pins.iter().map(|p| p.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "proj/data/a.txt",
            "proj/data/sub/b.txt",
            "proj/data/sub/c.bin"
        ]
    );
    let b = &pointers.pins[1];
    assert_eq!(b.version_id, "69379ba8-b172-457f-9bcb-6772686f2e4e");
    assert_eq!(b.size, Some(4));
    assert_eq!(
        b.digest,
        Digest::Md5("c193497a1a06b2c72230e6146ff47080".into())
    );
    assert!(pointers.addressed.is_empty());
    let [listing] = pointers.listings.as_slice() else {
        panic!("one listing: {:?}", pointers.listings)
    };
    assert_eq!(String::from_utf8_lossy(&listing.bytes), LISTING);
    assert_eq!(listing.digest, Digest::Md5(LISTING_MD5.into()));
    assert_eq!(listing.path, "data");
}

#[test]
fn a_directory_whose_files_do_not_hash_to_its_recorded_listing_is_refused() {
    let good = DIRECTORY.replace(
        "- hash: md5\n",
        &format!("- md5: {LISTING_MD5}.dir\n  hash: md5\n"),
    );
    assert_eq!(parse_dvc(&good, "d.dvc", "", None).unwrap().pins.len(), 3);
    let bad = good.replace(LISTING_MD5, MD5);
    let error = parse_dvc(&bad, "d.dvc", "", None).unwrap_err();
    assert!(error.to_string().contains("hash to the listing"), "{error}");
}

#[test]
fn a_directory_file_without_a_version_or_with_a_hostile_relpath_is_refused_naming_it() {
    let nulled = DIRECTORY.replace(
        "version_id: 69379ba8-b172-457f-9bcb-6772686f2e4e",
        "version_id: 'null'",
    );
    let error = parse_dvc(&nulled, "d.dvc", "", None).unwrap_err();
    assert!(
        matches!(&error, VersionsError::NoExactVersion { key, .. } if key == "data/sub/b.txt"),
        "{error}"
    );
    let uncloud = "outs:\n- hash: md5\n  path: data\n  files:\n  - relpath: a\n    md5: 900150983cd24fb0d6963f7d28e17f72\n";
    let error = parse_dvc(uncloud, "d.dvc", "", None).unwrap_err();
    assert!(
        matches!(error, VersionsError::NoExactVersion { .. }),
        "{error}"
    );
    for relpath in ["../../etc/passwd", "/abs", "a//b", ""] {
        let hostile = DIRECTORY.replace("relpath: a.txt", &format!("relpath: '{relpath}'"));
        let error = parse_dvc(&hostile, "d.dvc", "", None).unwrap_err();
        assert!(
            matches!(error, VersionsError::Manifest { .. }),
            "{relpath}: {error}"
        );
    }
    let empty = "outs:\n- hash: md5\n  path: data\n  files: []\n";
    let error = parse_dvc(empty, "d.dvc", "", None).unwrap_err();
    assert!(error.to_string().contains("lists no files"), "{error}");
}

#[test]
fn outputs_without_a_cloud_entry_are_content_addressed_at_the_remotes_cache_layout() {
    let text = format!(
        "outs:\n- md5: 20ad46588e5628537eb822c2583dd63d.dir\n  size: 8\n  nfiles: 2\n  hash: md5\n  path: data\n\
         - md5: {MD5}\n  size: 2\n  hash: md5\n  path: f.txt\n- md5: {MD5}\n  path: old.txt\n"
    );
    let pointers = parse_dvc(&text, "x.dvc", "sub/", None).unwrap();
    assert!(pointers.pins.is_empty());
    let found: Vec<(&str, bool, &str)> = pointers
        .addressed
        .iter()
        .map(|a| (a.key.as_str(), a.directory, a.path.as_str()))
        .collect();
    assert_eq!(
        found,
        [
            (
                "files/md5/20/ad46588e5628537eb822c2583dd63d.dir",
                true,
                "data"
            ),
            (
                "files/md5/90/0150983cd24fb0d6963f7d28e17f72",
                false,
                "f.txt"
            ),
            // DVC 2 (no `hash:`) keeps its cache at the remote's root.
            ("90/0150983cd24fb0d6963f7d28e17f72", false, "old.txt"),
        ]
    );
    assert_eq!(
        pointers.addressed[0].digest,
        Digest::Md5("20ad46588e5628537eb822c2583dd63d".into())
    );
}

#[test]
fn a_null_version_on_a_version_aware_row_is_no_exact_version() {
    let text = DVC.replace(
        "version_id: CxBqqlHnOmHSG09sYlP36Mytf.48xmaJ",
        "version_id: 'null'",
    );
    let error = parse_dvc(&text, "x.dvc", "", None).unwrap_err();
    assert!(
        matches!(error, VersionsError::NoExactVersion { .. }),
        "{error}"
    );
}

#[test]
fn a_dvc_row_with_several_remotes_needs_one_chosen() {
    let text = format!("{DVC}    other:\n      etag: x\n      version_id: v9\n");
    let error = parse_dvc(&text, "x.dvc", "", None).unwrap_err();
    assert!(error.to_string().contains("several remotes"), "{error}");
    let pins = parse_dvc(&text, "x.dvc", "", Some("other")).unwrap().pins;
    assert_eq!(pins[0].version_id, "v9");
    let error = parse_dvc(&text, "x.dvc", "", Some("absent")).unwrap_err();
    assert!(error.to_string().contains("\"absent\""), "{error}");
}

#[test]
fn malformed_yaml_is_a_manifest_error_not_a_panic() {
    let error = parse_dvc("outs: [ {", "x.dvc", "", None).unwrap_err();
    assert!(matches!(error, VersionsError::Manifest { .. }), "{error}");
}

#[test]
fn listings_are_written_as_pythons_json_dumps_writes_them() {
    let files = [
        ("z".to_owned(), "m1".to_owned()),
        ("a-b".to_owned(), "m2".to_owned()),
        ("a/b".to_owned(), "m3".to_owned()),
        ("é \"q\"\\\t😀".to_owned(), "m4".to_owned()),
    ];
    // json.dumps(sorted(..., key=relpath), sort_keys=True), by CPython.
    let python = r#"[{"md5": "m2", "relpath": "a-b"}, {"md5": "m3", "relpath": "a/b"}, {"md5": "m1", "relpath": "z"}, {"md5": "m4", "relpath": "\u00e9 \"q\"\\\t\ud83d\ude00"}]"#;
    assert_eq!(String::from_utf8(listing_bytes(&files)).unwrap(), python);
    let parsed = parse_listing(python.as_bytes()).unwrap();
    assert_eq!(parsed[3].0, "é \"q\"\\\t😀");
    assert!(parse_listing(b"{}").is_err());
    assert!(parse_listing(br#"[{"md5": "m"}]"#).is_err());
}

/// What DVC 3.67 wrote in `dvc.lock` for a stage producing a directory
/// and a file, pushed to a version-aware remote.
const LOCK: &str = "schema: '2.0'
stages:
  train:
    cmd: cp data/a.txt model.pkl && mkdir -p metrics && cp data/sub/b.txt
      metrics/m.txt
    deps:
    - path: data
      hash: md5
      files:
      - relpath: a.txt
        md5: 5bbf5a52328e7439ae6e719dfe712200
    outs:
    - path: metrics
      hash: md5
      files:
      - relpath: m.txt
        md5: c193497a1a06b2c72230e6146ff47080
        size: 4
        cloud:
          va:
            etag: c193497a1a06b2c72230e6146ff47080
            version_id: 7803c811-a3a7-4ddc-8cf5-1a16f276e520
    - path: model.pkl
      hash: md5
      md5: 5bbf5a52328e7439ae6e719dfe712200
      size: 4
      cloud:
        va:
          etag: 5bbf5a52328e7439ae6e719dfe712200
          version_id: 918a3ca7-7f20-4182-9244-b3a8f8d88f92
";

#[test]
fn a_pipeline_lock_file_pins_every_stages_outputs_but_not_its_inputs() {
    assert!(is_dvc_name("dvc.lock") && is_dvc_name("sub/dvc.lock") && is_dvc_name("x.dvc"));
    assert!(!is_dvc_name("notdvc.lock") && !is_dvc_name("dvc.yaml"));
    let pointers = parse_dvc(LOCK, "dvc.lock", "", None).unwrap();
    let pinned: Vec<(&str, &str)> = pointers
        .pins
        .iter()
        .map(|p| (p.key.as_str(), p.version_id.as_str()))
        .collect();
    assert_eq!(
        pinned,
        [
            ("metrics/m.txt", "7803c811-a3a7-4ddc-8cf5-1a16f276e520"),
            ("model.pkl", "918a3ca7-7f20-4182-9244-b3a8f8d88f92"),
        ]
    );
    assert_eq!(pointers.listings.len(), 1);
}
