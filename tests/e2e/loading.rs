//! Loading plugins: every way a file can fail to be one, told apart.

use custodian::runtime::{LoadError, Runtime, RuntimeConfig, World};

use crate::support::{self, runtime};

#[test]
fn a_missing_file_is_reported_as_missing() {
    let error = runtime()
        .load_file("/nonexistent/policy.wasm".as_ref())
        .err()
        .unwrap();
    assert!(matches!(error, LoadError::NotFound(_)), "{error}");
    assert!(error.to_string().contains("does not exist"), "{error}");
}

#[test]
fn a_text_file_is_not_webassembly() {
    let error = runtime()
        .load_bytes(b"this is a README, not a plugin\n", "README.md")
        .err()
        .unwrap();
    assert!(matches!(error, LoadError::NotWasm(_)), "{error}");
    assert!(error.to_string().contains("is not WebAssembly"), "{error}");
}

#[test]
fn a_core_module_is_told_apart_from_a_component() {
    let module =
        wat::parse_str("(module (func (export \"run\") (result i32) i32.const 1))").unwrap();
    let error = runtime().load_bytes(&module, "core.wasm").err().unwrap();
    assert!(matches!(error, LoadError::CoreModule(_)), "{error}");
    assert!(error.to_string().contains("wasm32-wasip2"), "{error}");
}

#[test]
fn a_malformed_component_is_refused_as_invalid() {
    let mut bytes = b"\0asm\x0d\0\x01\0".to_vec();
    bytes.extend_from_slice(&[0xff; 16]);
    let error = runtime().load_bytes(&bytes, "broken.wasm").err().unwrap();
    assert!(matches!(error, LoadError::Invalid { .. }), "{error}");
}

#[test]
fn a_component_of_another_world_is_refused_naming_both_worlds() {
    let plugin = runtime().load_file(support::retention()).unwrap();
    let error = plugin.expect_world(World::Takedown).err().unwrap();
    let message = error.to_string();
    assert!(matches!(error, LoadError::WrongWorld { .. }), "{message}");
    assert!(
        message.contains("custodian:policy/takedown-steps@0.2.0"),
        "{message}"
    );
    assert!(message.contains("retention"), "{message}");
}

#[test]
fn a_component_built_against_an_incompatible_contract_names_the_import() {
    let error = runtime()
        .load_file(support::future_contract())
        .err()
        .unwrap();
    let message = error.to_string();
    assert!(
        matches!(error, LoadError::IncompatibleVersion { .. }),
        "{message}"
    );
    assert!(
        message.contains("import custodian:host/clock@0.3.0"),
        "{message}"
    );
    assert!(message.contains("0.2.0"), "{message}");
}

#[test]
fn the_bundled_retention_plugin_declares_its_world_and_contract() {
    let plugin = runtime().load_file(support::retention()).unwrap();
    let info = plugin.info();
    assert_eq!(info.worlds, vec![World::Retention]);
    assert_eq!(info.policy_version.as_deref(), Some("0.2.0"));
    assert_eq!(info.hash.len(), 64);
    let export = info
        .exports
        .iter()
        .find(|e| e.name == "custodian:policy/retention-rules@0.2.0")
        .expect("the retention export");
    assert!(
        export
            .functions
            .iter()
            .any(|f| f.starts_with("assess(settings: record")),
        "{export:?}"
    );
    assert!(
        export
            .functions
            .iter()
            .any(|f| f.starts_with("set-hold(item: record")),
        "{export:?}"
    );
}

#[test]
fn a_second_load_reads_the_compiled_code_from_the_disk_cache() {
    let dir = tempfile::tempdir().unwrap();
    let config = RuntimeConfig {
        cache_dir: Some(dir.path().to_owned()),
        concurrent_calls: 4,
    };
    let first = Runtime::new(&config)
        .unwrap()
        .load_file(support::retention())
        .unwrap();
    let second = Runtime::new(&config)
        .unwrap()
        .load_file(support::retention())
        .unwrap();
    assert!(!first.info().from_cache);
    assert!(second.info().from_cache);
    assert!(
        second.info().load_time < first.info().load_time,
        "cached {:?} vs compiled {:?}",
        second.info().load_time,
        first.info().load_time
    );
}

#[test]
fn a_corrupted_cache_entry_is_recompiled_not_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let config = RuntimeConfig {
        cache_dir: Some(dir.path().to_owned()),
        concurrent_calls: 4,
    };
    Runtime::new(&config)
        .unwrap()
        .load_file(support::retention())
        .unwrap();
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        let mut bytes = std::fs::read(&path).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0xff;
        std::fs::write(&path, bytes).unwrap();
    }
    let reloaded = Runtime::new(&config)
        .unwrap()
        .load_file(support::retention())
        .unwrap();
    assert!(!reloaded.info().from_cache);
}
