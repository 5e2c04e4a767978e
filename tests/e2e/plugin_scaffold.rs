//! `custodian plugin new`: a project made outside the repository, in each
//! language, builds with its own tools to a `.wasm` that passes its own
//! table. The Python and JavaScript tools come from the caches
//! `plugins/examples/build.sh` fills (`.ci/run` names them in
//! `CUSTODIAN_COMPONENTIZE_PY` and `CUSTODIAN_JCO`); under `CI=true` a
//! missing tool fails these tests, elsewhere they say so and pass.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::support::{outcome, run};

/// Every world with a starting policy, and the cases of its table.
const WORLDS: [(&str, u64); 4] = [
    ("retention", 6),
    ("access", 5),
    ("purge", 6),
    ("archive", 5),
];

/// The tool `var` names, or `None` (after saying why) outside CI.
fn tool(var: &str) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(var)
        .map(PathBuf::from)
        .filter(|p| p.exists())
    {
        return Some(path);
    }
    let how = format!("set {var} (.ci/run sets it after plugins/examples/build.sh)");
    if std::env::var("CI").is_ok_and(|ci| ci == "true") {
        panic!("{how}");
    }
    eprintln!("notice: skipping a scaffold test: {how}");
    None
}

/// `custodian plugin new WORLD DIR --lang LANG --json`: its report.
fn new(world: &str, dir: &Path, lang: &str) -> Value {
    let (code, stdout, stderr) = outcome(&run(&[
        "plugin",
        "new",
        world,
        dir.to_str().unwrap(),
        "--lang",
        lang,
        "--json",
    ]));
    assert_eq!(code, 0, "{stderr}");
    serde_json::from_str(&stdout).unwrap()
}

fn succeeds(command: &mut Command, what: &str) {
    let output = command.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        output.status.success(),
        "{what}:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Runs the project's own table against its build.
fn passes_its_table(dir: &Path, plugin: &Path, at_least: u64) {
    let (code, stdout, stderr) = outcome(&run(&[
        "plugin",
        "test",
        plugin.to_str().unwrap(),
        "--cases",
        dir.join("cases.json").to_str().unwrap(),
        "--json",
    ]));
    assert_eq!(code, 0, "{stdout}{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert!(report["passed"].as_u64().unwrap() >= at_least, "{report}");
}

#[test]
fn new_rust_projects_build_outside_the_repository_and_pass_their_tables() {
    let dir = tempfile::tempdir().unwrap();
    for (world, cases) in [("retention", 6), ("purge", 6), ("archive", 5)] {
        let name = format!("my-{world}");
        let project = dir.path().join(&name);
        let report = new(world, &project, "rust");
        assert!(
            std::fs::read_to_string(project.join("Cargo.toml"))
                .unwrap()
                .contains("custodian-sdk"),
        );
        // A target directory kept between runs: the SDK and wit-bindgen
        // compile once.
        let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("scaffold-target");
        succeeds(
            Command::new(env!("CARGO"))
                .args(["build", "--release", "--target", "wasm32-wasip2"])
                .current_dir(&project)
                .env("CARGO_TARGET_DIR", &target)
                .env_remove("RUSTFLAGS"),
            "cargo build of the new project",
        );
        let file = format!("{}.wasm", name.replace('-', "_"));
        let built = target.join("wasm32-wasip2/release").join(&file);
        assert!(
            report["plugin"].as_str().unwrap().ends_with(&file),
            "{report}"
        );
        passes_its_table(&project, &built, cases);
    }
}

#[test]
fn new_python_projects_build_with_componentize_py_and_pass_their_tables() {
    let Some(componentize_py) = tool("CUSTODIAN_COMPONENTIZE_PY") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for (world, cases) in WORLDS {
        let project = dir.path().join(format!("{world}-py"));
        let report = new(world, &project, "python");
        assert!(
            project.join("wit/deps/host/kv.wit").exists(),
            "the WIT comes along"
        );
        let output = report["plugin"].as_str().unwrap();
        succeeds(
            Command::new(&componentize_py)
                .args([
                    "-d",
                    "wit",
                    "-w",
                    world,
                    "componentize",
                    "app",
                    "-o",
                    output,
                ])
                .current_dir(&project)
                .env_remove("VIRTUAL_ENV"),
            "componentize-py",
        );
        passes_its_table(&project, &project.join(output), cases);
    }
}

#[test]
fn new_javascript_projects_build_with_jco_and_pass_their_tables() {
    let Some(jco) = tool("CUSTODIAN_JCO") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for (world, cases) in WORLDS {
        let project = dir.path().join(format!("{world}-js"));
        let report = new(world, &project, "js");
        let package: Value =
            serde_json::from_str(&std::fs::read_to_string(project.join("package.json")).unwrap())
                .unwrap();
        assert!(package["devDependencies"]["@bytecodealliance/jco"].is_string());
        let output = report["plugin"].as_str().unwrap();
        // What `npm run build` runs, with the cached jco.
        succeeds(
            Command::new(&jco)
                .args(["componentize", &format!("{world}.js"), "--wit", "wit"])
                .args(["--world-name", world, "--disable", "all", "-o", output])
                .current_dir(&project),
            "jco componentize",
        );
        passes_its_table(&project, &project.join(output), cases);
    }
}

#[test]
fn plugin_new_refuses_what_it_cannot_make_and_touches_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let taken = dir.path().join("taken");
    std::fs::create_dir(&taken).unwrap();
    std::fs::write(taken.join("keep.txt"), "mine").unwrap();
    for (args, said) in [
        (vec!["retention", taken.to_str().unwrap()], "not empty"),
        (
            vec!["takedown", dir.path().join("t").to_str().unwrap()],
            "no starting policy",
        ),
        (
            vec!["retention", dir.path().join("Bad Name").to_str().unwrap()],
            "not a usable project name",
        ),
        (vec!["nope", dir.path().join("n").to_str().unwrap()], "nope"),
    ] {
        let mut full = vec!["plugin", "new"];
        full.extend(args.iter());
        let (code, _, stderr) = outcome(&run(&full));
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains(said), "{args:?}: {stderr}");
    }
    assert_eq!(std::fs::read_dir(&taken).unwrap().count(), 1);
    assert!(!dir.path().join("t").exists());
}
