//! Policies in other languages: the retention policy written in Python
//! (componentize-py) and JavaScript (jco + ComponentizeJS), in
//! `plugins/examples/`, built by `plugins/examples/build.sh` into the
//! directory `CUSTODIAN_EXAMPLE_PLUGINS` names (`.ci/run` builds them).
//! Each passes the table the Rust plugin passes and is loaded, inspected
//! and swapped into a running server like any plugin. Under `CI=true` a
//! missing build fails these tests; elsewhere they say so and pass.

use std::path::PathBuf;

use serde_json::Value;

use crate::server::Server;
use crate::support::{outcome, run};

/// The built example plugins: (language, path), or `None` (after saying
/// why) when this is not CI and they were not built.
fn examples() -> Option<Vec<(&'static str, PathBuf)>> {
    let dir = std::env::var_os("CUSTODIAN_EXAMPLE_PLUGINS").map(PathBuf::from);
    let plugins = dir.map(|dir| {
        vec![
            ("python", dir.join("retention-python.wasm")),
            ("js", dir.join("retention-js.wasm")),
        ]
    });
    if let Some(plugins) = plugins.filter(|p| p.iter().all(|(_, path)| path.exists())) {
        return Some(plugins);
    }
    let how = "run `plugins/examples/build.sh DIR` and set CUSTODIAN_EXAMPLE_PLUGINS=DIR \
               (.ci/run does both)";
    if std::env::var("CI").is_ok_and(|ci| ci == "true") {
        panic!("the Python and JavaScript example plugins are not built: {how}");
    }
    eprintln!("notice: skipping the example plugins' tests: {how}");
    None
}

fn table() -> String {
    format!(
        "{}/../plugins/retention/cases.json",
        env!("CARGO_MANIFEST_DIR")
    )
}

#[test]
fn the_python_and_javascript_retention_plugins_pass_the_rust_plugins_table() {
    let Some(plugins) = examples() else { return };
    for (language, plugin) in plugins {
        let plugin = plugin.to_str().unwrap();
        let (code, _, stderr) = outcome(&run(&["plugin", "check", plugin, "--world", "retention"]));
        assert_eq!(code, 0, "{language}: {stderr}");
        let (code, stdout, stderr) = outcome(&run(&["plugin", "inspect", plugin, "--json"]));
        assert_eq!(code, 0, "{language}: {stderr}");
        let info: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(
            info["worlds"],
            serde_json::json!(["retention"]),
            "{language}"
        );
        assert_eq!(info["policy_version"], "0.2.0", "{language}");

        let (code, stdout, stderr) = outcome(&run(&[
            "plugin",
            "test",
            plugin,
            "--cases",
            &table(),
            "--json",
        ]));
        assert_eq!(code, 0, "{language}: {stdout}{stderr}");
        let report: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(report["failed"], 0, "{language}: {report}");
        assert!(
            report["passed"].as_u64().unwrap() >= 17,
            "{language}: {report}"
        );
    }
}

#[test]
fn a_running_server_swaps_in_each_language_s_plugin_and_lists_it() {
    let Some(plugins) = examples() else { return };
    let server = Server::start_with("", &[]);
    for (language, plugin) in plugins {
        let swapped = crate::serve::swap_with_cli(&server, "retention", &plugin, &["--json"]);
        assert!(
            swapped.status.success(),
            "{language}: {}",
            String::from_utf8_lossy(&swapped.stderr)
        );
        let report: Value = serde_json::from_slice(&swapped.stdout).unwrap();
        assert_eq!(report["changed"], true, "{language}: {report}");
        let hash = report["current"]["hash"].as_str().unwrap().to_owned();
        assert_eq!(
            crate::serve::plugin_hash(&server, "retention"),
            hash,
            "{language} serves"
        );
    }
}
