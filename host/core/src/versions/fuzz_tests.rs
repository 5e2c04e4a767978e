//! Fuzz targets of the untrusted inputs of version checks: pin manifests
//! (Custodian's JSON and DVC pointer files), archive registries and
//! archive receipts. Each is a `#[test]` that bolero runs for a bounded
//! time (see the README's "Fuzzing").

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::aliases::Aliases;
use super::digest::Digest;
use super::dvc::{listing_bytes, parse_dvc, parse_listing};
use super::pins::{Pin, parse_json};
use super::prefixes;
use super::registry::{self, Registry};
use super::target::Target;
use custodian_base::fuzz_input::{mutate, name, path};
use custodian_object::ObjectKey;

/// What every accepted pin guarantees, whatever the manifest said.
fn assert_exact(pins: &[Pin], manifest: &str) {
    for pin in pins {
        assert!(ObjectKey::new(pin.key.as_str()).is_ok(), "{pin:?}");
        assert!(
            !pin.version_id.is_empty() && pin.version_id != "null",
            "{pin:?}"
        );
        assert_ne!(pin.etag.as_deref(), Some(""), "{pin:?}");
        assert_eq!(pin.manifest, manifest);
        assert_eq!(
            Digest::parse(pin.digest.algorithm(), pin.digest.value()).as_ref(),
            Ok(&pin.digest)
        );
    }
}

/// Runs every manifest parser over `text`, checking what each accepts.
fn parse_every_way(text: &str) {
    if let Ok(pins) = parse_json(text, "m.json") {
        assert_exact(&pins, "m.json");
    }
    if let Ok(pointers) = parse_dvc(text, "m.dvc", "", None) {
        assert_exact(&pointers.pins, "m.dvc");
        for output in &pointers.addressed {
            assert!(ObjectKey::new(output.key.as_str()).is_ok(), "{output:?}");
        }
        for listing in &pointers.listings {
            assert_eq!(listing.digest.of(&listing.bytes), listing.digest.value());
            assert!(parse_listing(&listing.bytes).is_ok(), "{listing:?}");
        }
    }
    if let Ok(pointers) = parse_dvc(text, "d/m.dvc", "d/", Some("r")) {
        assert_exact(&pointers.pins, "d/m.dvc");
        assert!(pointers.pins.iter().all(|pin| pin.key.starts_with("d/")));
    }
}

#[test]
fn arbitrary_text_never_panics_the_pin_manifest_parsers() {
    bolero::check!().for_each(|bytes: &[u8]| parse_every_way(&String::from_utf8_lossy(bytes)));
}

const VALID_JSON: &str = r#"{"pins": [
  {"key": "a/b.csv", "version_id": "v1", "etag": "\"e1\"", "size": 3,
   "md5": "900150983cd24fb0d6963f7d28e17f72", "hash": "md5"},
  {"key": "a/c.bin", "version_id": "v2", "crc64nvme": "ae8b14860a799888"}]}"#;

const VALID_DVC: &str = "outs:
- md5: 900150983cd24fb0d6963f7d28e17f72
  size: 3
  hash: md5
  path: b.csv
  cloud:
    r:
      version_id: v1
      etag: e1
";

#[test]
fn near_misses_of_valid_pin_manifests_never_panic_the_parsers() {
    assert_eq!(
        parse_json(VALID_JSON, "m.json").map(|p| p.len()).ok(),
        Some(2)
    );
    assert_eq!(
        parse_dvc(VALID_DVC, "m.dvc", "", None)
            .map(|p| p.pins.len())
            .ok(),
        Some(1)
    );
    bolero::check!()
        .with_type::<(bool, Vec<(u16, u8, u8)>)>()
        .for_each(|(dvc, edits)| {
            let valid = if *dvc { VALID_DVC } else { VALID_JSON };
            parse_every_way(&String::from_utf8_lossy(&mutate(valid.as_bytes(), edits)));
        });
}

const VALID_DIRECTORY: &str = "outs:
- hash: md5
  path: data
  files:
  - relpath: a.txt
    md5: 5bbf5a52328e7439ae6e719dfe712200
    size: 4
    cloud:
      r:
        etag: 5bbf5a52328e7439ae6e719dfe712200
        version_id: v1
  - relpath: sub/b.txt
    md5: c193497a1a06b2c72230e6146ff47080
    size: 4
    cloud:
      r:
        version_id: v2
- md5: 20ad46588e5628537eb822c2583dd63d.dir
  hash: md5
  path: cas
";

#[test]
fn near_misses_of_directory_outputs_never_panic_the_parsers() {
    let valid = parse_dvc(VALID_DIRECTORY, "m.dvc", "", None).unwrap();
    assert_eq!((valid.pins.len(), valid.addressed.len()), (2, 1));
    bolero::check!()
        .with_type::<Vec<(u16, u8, u8)>>()
        .for_each(|edits| {
            let edited = mutate(VALID_DIRECTORY.as_bytes(), edits);
            parse_every_way(&String::from_utf8_lossy(&edited));
        });
}

#[test]
fn any_listing_survives_dvcs_json_form_sorted_by_relpath() {
    bolero::check!()
        .with_type::<Vec<(String, String)>>()
        .for_each(|files| {
            let bytes = listing_bytes(files);
            // CPython's `ensure_ascii` output is ASCII whatever the input.
            assert!(bytes.is_ascii());
            let mut sorted = files.clone();
            sorted.sort_by(|a, b| a.0.cmp(&b.0));
            assert_eq!(parse_listing(&bytes), Ok(sorted));
        });
}

/// Up to 8 generated rows: enough for every rule between rows (a
/// conflict, a flaw in one of several), and a document small enough for
/// thousands of runs a second.
fn rows<T: bolero::TypeGenerator>() -> impl bolero::ValueGenerator<Output = Vec<T>> {
    bolero::produce::<Vec<T>>().with().len(0usize..=8)
}

/// One generated pin row: key, version, etag, size, whether the digest is
/// a CRC (else an MD5), the digest's bytes.
type PinRow = (
    Vec<u8>,
    Vec<u8>,
    Option<Vec<u8>>,
    Option<u64>,
    bool,
    [u8; 16],
);

#[test]
fn generated_json_manifests_parse_to_exactly_their_rows() {
    bolero::check!()
        .with_generator(rows::<PinRow>())
        .for_each(|rows: &Vec<PinRow>| {
            let mut json_rows = Vec::new();
            let mut expected = Vec::new();
            for (key, version, etag, size, crc, digest) in rows {
                let (key, version_id) = (path(key), name(version));
                let etag = etag.as_deref().map(name);
                let (field, hash, value) = if *crc {
                    ("crc64nvme", "crc64nvme", hex::encode(&digest[..8]))
                } else {
                    ("md5", "md5", hex::encode(digest))
                };
                let mut row = json!({"key": key, "version_id": version_id, field: value});
                if let Some(etag) = &etag {
                    row["etag"] = json!(etag);
                }
                if let Some(size) = size {
                    row["size"] = json!(size);
                }
                json_rows.push(row);
                expected.push(Pin {
                    digest: Digest::parse(hash, &value).expect("hex of the right length"),
                    key,
                    version_id,
                    etag: etag.filter(|e| !e.is_empty()),
                    size: *size,
                    manifest: "m.json".into(),
                });
            }
            let text = json!({ "pins": json_rows }).to_string();
            let valid = expected
                .iter()
                .all(|pin| ObjectKey::new(pin.key.as_str()).is_ok() && !pin.version_id.is_empty());
            match parse_json(&text, "m.json") {
                Ok(pins) => {
                    assert!(valid, "accepted an invalid row: {text}");
                    assert_eq!(pins, expected);
                }
                Err(error) => assert!(!valid, "refused a valid manifest: {error} {text}"),
            }
        });
}

/// One generated DVC output: path, MD5 bytes, size, whether it says
/// `hash: md5` (else DVC 2's default), version, etag.
type DvcRow = (
    Vec<u8>,
    [u8; 16],
    Option<u64>,
    bool,
    Vec<u8>,
    Option<Vec<u8>>,
);

#[test]
fn generated_dvc_files_parse_to_exactly_their_outputs() {
    bolero::check!()
        .with_generator((bolero::produce::<bool>(), rows::<DvcRow>()))
        .for_each(|(nested, rows)| {
            let key_dir = if *nested { "d/" } else { "" };
            let mut outs = Vec::new();
            let mut expected = Vec::new();
            for (out_path, md5, size, hash_md5, version, etag) in rows {
                let (out_path, md5) = (path(out_path), hex::encode(md5));
                let (version_id, etag) = (name(version), etag.as_deref().map(name));
                let mut cloud = json!({ "version_id": version_id });
                if let Some(etag) = &etag {
                    cloud["etag"] = json!(etag);
                }
                let mut out = json!({"path": out_path, "md5": md5, "cloud": {"r": cloud}});
                if *hash_md5 {
                    out["hash"] = json!("md5");
                }
                if let Some(size) = size {
                    out["size"] = json!(size);
                }
                outs.push(out);
                let algorithm = if *hash_md5 { "md5" } else { "md5-dos2unix" };
                expected.push(Pin {
                    key: format!("{key_dir}{out_path}"),
                    version_id,
                    etag: etag.filter(|e| !e.is_empty()),
                    size: *size,
                    digest: Digest::parse(algorithm, &md5).expect("32 hex digits"),
                    manifest: "m.dvc".into(),
                });
            }
            let text = serde_yaml_ng::to_string(&json!({ "outs": outs })).expect("YAML of JSON");
            let valid = !expected.is_empty()
                && expected.iter().all(|pin| {
                    ObjectKey::new(pin.key.as_str()).is_ok() && !pin.version_id.is_empty()
                });
            for remote in [None, Some("r")] {
                match parse_dvc(&text, "m.dvc", key_dir, remote) {
                    Ok(pointers) => {
                        assert!(valid, "accepted an invalid output: {text}");
                        assert_eq!(pointers.pins, expected);
                    }
                    Err(error) => assert!(!valid, "refused a valid file: {error}\n{text}"),
                }
            }
        });
}

/// What every accepted registry guarantees, whatever its bytes said.
fn assert_registry_holds(registry: &Registry, prefix: &str) {
    assert_eq!(registry.source, prefix);
    assert_eq!(
        prefixes::validate_pair(&registry.source, &registry.destination),
        Ok(())
    );
    for row in &registry.rows {
        assert_eq!(
            prefixes::check_moved(
                &registry.source,
                &registry.destination,
                &row.source.key,
                &row.destination.key
            ),
            Ok(())
        );
        for text in [
            &row.source.version_id,
            &row.destination.version_id,
            &row.destination_etag,
        ] {
            assert!(!text.is_empty(), "{row:?}");
        }
    }
}

/// Runs the registry and receipt parsers over `bytes`.
fn parse_archive_documents(bytes: &[u8]) {
    for prefix in ["a/data", "data"] {
        if let Ok(registry) = registry::parse("k", prefix, bytes) {
            assert_registry_holds(&registry, prefix);
        }
    }
    if let Ok(Value::Array(receipts)) = serde_json::from_slice::<Value>(bytes) {
        // Either outcome is fine; what it must not do is panic.
        let _ = Aliases::from_receipts(&receipts, "s3://b", "r.json");
    }
}

#[test]
fn arbitrary_bytes_never_panic_the_registry_and_receipt_parsers() {
    bolero::check!().for_each(parse_archive_documents);
}

/// One generated archive row: the object's suffix, its version, whether
/// it is a delete marker, its size, its destination version.
type ArchiveRow = (Vec<u8>, Vec<u8>, bool, u64, Vec<u8>);

/// A task moving `a/data` to `archive/data` with `rows`, as a registry
/// (`store` None) or a planned receipt for `store`.
fn archive_document(rows: &[ArchiveRow], store: Option<&str>) -> Value {
    let versions: Vec<Value> = rows
        .iter()
        .map(|(suffix, version, marker, size, destination_version)| {
            let suffix = format!("s{}", path(suffix));
            json!({
                "source_object": format!("a/data/{suffix}"),
                "source_version_id": format!("v{}", name(version)),
                "source_etag": format!("\"e{size}\""),
                "destination_object": format!("archive/data/{suffix}"),
                "destination_version_id": format!("w{}", name(destination_version)),
                "destination_etag": "\"f\"",
                "size": size,
                "delete_marker": marker,
            })
        })
        .collect();
    let mut document = json!({"schema_version": 1, "source": "a/data",
        "destination": "archive/data", "versions": versions});
    match store {
        Some(store) => {
            document["status"] = json!("planned");
            document["store"] = json!(store);
        }
        None => document["status"] = json!("copied"),
    }
    document
}

/// The fields every row needs, delete marker or not.
const REQUIRED_ROW_FIELDS: [&str; 4] = [
    "source_object",
    "destination_object",
    "source_version_id",
    "delete_marker",
];

#[test]
fn generated_registries_parse_to_their_rows_and_a_missing_field_is_refused() {
    bolero::check!()
        .with_generator((rows::<ArchiveRow>(), bolero::produce::<Option<(u16, u8)>>()))
        .for_each(|(rows, flaw)| {
            let mut document = archive_document(rows, None);
            let flawed = match (flaw, rows.len()) {
                (Some((row, field)), 1..) => {
                    let field = REQUIRED_ROW_FIELDS[usize::from(*field) % 4];
                    document["versions"][usize::from(*row) % rows.len()]
                        .as_object_mut()
                        .expect("rows are objects")
                        .remove(field);
                    true
                }
                _ => false,
            };
            let bytes = serde_json::to_vec(&document).expect("JSON");
            let parsed = registry::parse("k", "a/data", &bytes);
            if flawed {
                assert!(
                    parsed.is_err(),
                    "accepted a row missing a field: {document}"
                );
                return;
            }
            let registry = parsed.expect("a valid registry");
            assert_registry_holds(&registry, "a/data");
            assert!(registry.copied);
            let moved: Vec<_> = rows.iter().filter(|row| !row.2).collect();
            assert_eq!(registry.rows.len(), moved.len());
            for (row, (_, _, _, size, _)) in registry.rows.iter().zip(moved) {
                assert_eq!(row.size, *size);
                assert_eq!(row.source_etag, Some(format!("\"e{size}\"")));
            }
            assert!(registry::parse("k", "a", &bytes).is_err(), "wrong prefix");
        });
}

#[test]
fn generated_receipts_alias_every_moved_version_unless_two_disagree() {
    bolero::check!()
        .with_generator(rows::<ArchiveRow>())
        .for_each(|rows: &Vec<ArchiveRow>| {
            let receipt = archive_document(rows, Some("s3://b"));
            let receipts = [receipt.clone(), archive_document(rows, None)];
            // Where each pinned destination version must be looked for, or
            // `None` once two rows disagree about it.
            let mut model: BTreeMap<(String, String), Target> = BTreeMap::new();
            let mut conflict = false;
            for row in receipt["versions"].as_array().expect("rows") {
                if row["delete_marker"] == true {
                    continue;
                }
                let at = |field: &str| row[field].as_str().expect("text").to_owned();
                let target = Target {
                    key: at("source_object"),
                    version_id: at("source_version_id"),
                    etag: Some(at("source_etag").trim_matches('"').to_owned()),
                    size: row["size"].as_u64(),
                };
                let pinned = (at("destination_object"), at("source_version_id"));
                conflict |= model
                    .insert(pinned, target.clone())
                    .is_some_and(|t| t != target);
            }
            match Aliases::from_receipts(&receipts, "s3://b", "r.json") {
                Ok(aliases) => {
                    assert!(!conflict, "accepted disagreeing rows: {receipt}");
                    assert_eq!(aliases.len(), model.len());
                    for ((key, version_id), target) in model {
                        let pin = Pin {
                            key,
                            version_id,
                            etag: None,
                            size: None,
                            digest: Digest::Md5("0".repeat(32)),
                            manifest: "m.json".into(),
                        };
                        assert_eq!(
                            aliases.target(&pin).expect("no size or etag to contradict"),
                            target
                        );
                    }
                }
                Err(error) => assert!(conflict, "refused valid receipts: {error}"),
            }
            assert!(Aliases::from_receipts(&receipts, "s3://other", "r.json").is_err());
        });
}

#[test]
fn near_misses_of_a_valid_registry_never_panic_its_parsers() {
    let rows = [(vec![1], vec![2], false, 3, vec![4])];
    let registry = serde_json::to_vec(&archive_document(&rows, None)).expect("JSON");
    let receipts =
        serde_json::to_vec(&json!([archive_document(&rows, Some("s3://b"))])).expect("JSON");
    assert!(registry::parse("k", "a/data", &registry).is_ok());
    bolero::check!()
        .with_type::<(bool, Vec<(u16, u8, u8)>)>()
        .for_each(|(receipt, edits)| {
            let valid = if *receipt { &receipts } else { &registry };
            parse_archive_documents(&mutate(valid, edits));
        });
}

#[test]
fn deeply_nested_or_self_multiplying_documents_are_refused_not_a_crash() {
    // Past any parser's recursion: a parser that recursed per level would
    // overflow the stack, which aborts the process rather than panics.
    let depth = 100_000;
    let json = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    assert!(parse_json(&json, "m.json").is_err());
    assert!(registry::parse("k", "a/data", json.as_bytes()).is_err());
    let yaml = format!("outs: {}{}", "[".repeat(depth), "]".repeat(depth));
    assert!(parse_dvc(&yaml, "m.dvc", "", None).is_err());
    // Aliases of aliases under a key the parser skips: nine levels of
    // nine make 9^9 strings if expanded.
    let mut laughs = String::from("l0: &l0 [x, x, x, x, x, x, x, x, x]\n");
    for level in 1..9 {
        let previous = format!("*l{}", level - 1);
        laughs += &format!("l{level}: &l{level} [{}]\n", vec![previous; 9].join(", "));
    }
    laughs += "expanded: *l8\nouts: []\n";
    assert!(parse_dvc(&laughs, "m.dvc", "", None).is_err());
}
