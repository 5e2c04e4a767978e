//! `custodian plugin new`: a policy project outside this repository, in
//! Rust (on the SDK), Python (componentize-py) or JavaScript (jco), that
//! builds to a `.wasm` and passes its own table of cases out of the box.

use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow};
use clap::{Args, ValueEnum};
use custodian::runtime::World;
use serde_json::json;

use crate::cli::{Failure, Outcome};

/// The tool versions a new project pins: the ones `plugins/examples/`
/// is built and tested with.
const COMPONENTIZE_PY: &str = "0.25.1";
const JCO: &str = "1.34.0";
const COMPONENTIZE_JS: &str = "0.23.0";

/// The contract, for projects whose tools read WIT files (Python, JS); a
/// Rust project gets it from the SDK, which carries it.
const WIT: &[(&str, &str)] = &[
    ("access.wit", include_str!("../../../../sdk/wit/access.wit")),
    (
        "archive.wit",
        include_str!("../../../../sdk/wit/archive.wit"),
    ),
    ("purge.wit", include_str!("../../../../sdk/wit/purge.wit")),
    (
        "retention.wit",
        include_str!("../../../../sdk/wit/retention.wit"),
    ),
    ("steps.wit", include_str!("../../../../sdk/wit/steps.wit")),
    (
        "takedown.wit",
        include_str!("../../../../sdk/wit/takedown.wit"),
    ),
    (
        "deps/host/audit.wit",
        include_str!("../../../../sdk/wit/deps/host/audit.wit"),
    ),
    (
        "deps/host/checksum.wit",
        include_str!("../../../../sdk/wit/deps/host/checksum.wit"),
    ),
    (
        "deps/host/clock.wit",
        include_str!("../../../../sdk/wit/deps/host/clock.wit"),
    ),
    (
        "deps/host/kv.wit",
        include_str!("../../../../sdk/wit/deps/host/kv.wit"),
    ),
    (
        "deps/host/log.wit",
        include_str!("../../../../sdk/wit/deps/host/log.wit"),
    ),
    (
        "deps/host/objects.wit",
        include_str!("../../../../sdk/wit/deps/host/objects.wit"),
    ),
    (
        "deps/host/types.wit",
        include_str!("../../../../sdk/wit/deps/host/types.wit"),
    ),
    (
        "deps/host/world.wit",
        include_str!("../../../../sdk/wit/deps/host/world.wit"),
    ),
];

/// A plugin's language.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Lang {
    /// Rust, on the custodian SDK, built by cargo for wasm32-wasip2.
    Rust,
    /// Python, built by componentize-py.
    Python,
    /// JavaScript, built by jco (ComponentizeJS).
    Js,
}

/// `custodian plugin new`'s arguments.
#[derive(Debug, Args)]
pub struct NewArgs {
    /// The world the plugin implements: retention, access, purge or
    /// archive (takedown has no starting policy: start from its bundled
    /// source).
    pub world: World,
    /// The directory to create (it must not exist, or be empty).
    pub dir: PathBuf,
    /// The language.
    #[arg(long, value_enum, default_value = "rust")]
    pub lang: Lang,
    /// The project's name [default: the directory's name].
    #[arg(long)]
    pub name: Option<String>,
    /// Where the custodian SDK's source is, for a Rust project [default:
    /// this build's own SDK when its source is on this machine, else
    /// crates.io's custodian-sdk].
    #[arg(long, value_name = "DIR")]
    pub sdk: Option<PathBuf>,
    /// Print JSON (the files written and the commands) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// One file of the project: its path in the project and its text.
type File = (String, String);

pub(super) fn run(args: &NewArgs) -> Outcome {
    let (policy, cases) = starting_policy(args.world, args.lang)?;
    let name = match &args.name {
        Some(name) => name.clone(),
        None => args
            .dir
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| Failure::Usage(anyhow!("{} names no directory", args.dir.display())))?
            .to_owned(),
    };
    if name.is_empty()
        || !name.starts_with(|c: char| c.is_ascii_lowercase())
        || !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
    {
        return Err(Failure::Usage(anyhow!(
            "{name:?} is not a usable project name: lower-case letters, digits, - and _, \
             starting with a letter (pass --name)"
        )));
    }
    if std::fs::read_dir(&args.dir).is_ok_and(|mut entries| entries.next().is_some()) {
        return Err(Failure::Usage(anyhow!(
            "{} exists and is not empty; a new project needs a new directory",
            args.dir.display()
        )));
    }
    let world = args.world.name();
    let (mut files, build, output) = match args.lang {
        Lang::Rust => rust(&name, policy, sdk(args.sdk.as_deref())?),
        Lang::Python => python(world, policy),
        Lang::Js => js(&name, world, policy),
    };
    files.push(("cases.json".to_owned(), cases.to_owned()));
    let test = format!("custodian plugin test {output} --cases cases.json");
    files.push((
        "README.md".to_owned(),
        readme(&name, world, args.lang, &build, &test),
    ));
    for (path, text) in &files {
        let path = args.dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))
                .map_err(Failure::Failed)?;
        }
        std::fs::write(&path, text)
            .with_context(|| format!("cannot write {}", path.display()))
            .map_err(Failure::Failed)?;
    }
    let dir = args.dir.display().to_string();
    if args.json {
        let written: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
        println!(
            "{}",
            json!({"dir": dir, "world": world, "files": written, "build": build, "test": test, "plugin": output})
        );
    } else {
        println!("created a {world} plugin in {dir}; build and test it with:\n");
        println!("  cd {dir}");
        for line in build.lines() {
            println!("  {line}");
        }
        println!("  {test}");
    }
    Ok(())
}

/// The starting policy's source and its table, by world and language.
fn starting_policy(world: World, lang: Lang) -> Result<(&'static str, &'static str), Failure> {
    macro_rules! by_lang {
        ($world:literal) => {
            (
                match lang {
                    Lang::Rust => include_str!(concat!("templates/", $world, ".rs")),
                    Lang::Python => include_str!(concat!("templates/", $world, ".py")),
                    Lang::Js => include_str!(concat!("templates/", $world, ".js")),
                },
                include_str!(concat!("templates/", $world, ".cases.json")),
            )
        };
    }
    Ok(match world {
        World::Retention => by_lang!("retention"),
        World::Access => by_lang!("access"),
        World::Purge => by_lang!("purge"),
        World::Archive => by_lang!("archive"),
        World::Takedown => {
            return Err(Failure::Usage(anyhow!(
                "there is no starting policy for the takedown world: its policy is the whole \
                 takedown workflow (every other world has one); `custodian plugin export \
                 takedown` writes the bundled plugin, and plugins/takedown/ in the repository \
                 holds its Rust source"
            )));
        }
    })
}

/// How a Rust project names the SDK in its `Cargo.toml`.
fn sdk(named: Option<&Path>) -> Result<String, Failure> {
    let path = match named {
        Some(dir) => {
            let dir = std::fs::canonicalize(dir)
                .with_context(|| format!("--sdk {}", dir.display()))
                .map_err(Failure::Usage)?;
            if !dir.join("Cargo.toml").exists() {
                return Err(Failure::Usage(anyhow!(
                    "--sdk {}: no Cargo.toml there",
                    dir.display()
                )));
            }
            Some(dir)
        }
        // This build's own SDK, when its source is still where it was
        // built from (a checkout); a released binary uses the registry.
        None => std::fs::canonicalize(concat!(env!("CARGO_MANIFEST_DIR"), "/../sdk")).ok(),
    };
    Ok(match path {
        // TOML basic strings: `\` and `"` escaped.
        Some(dir) => format!(
            "{{ path = \"{}\" }}",
            dir.display()
                .to_string()
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
        ),
        None => format!("\"{}\"", env!("CARGO_PKG_VERSION")),
    })
}

fn rust(name: &str, policy: &str, sdk: String) -> (Vec<File>, String, String) {
    let manifest = format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"
publish = false

# A policy plugin is a component: `cargo build --release --target
# wasm32-wasip2` writes target/wasm32-wasip2/release/{crate_name}.wasm.
[lib]
crate-type = ["cdylib"]

[dependencies]
custodian-sdk = {sdk}

[profile.release]
opt-level = "s"
lto = true
codegen-units = 1
strip = true

# A workspace of its own, wherever the project is put.
[workspace]
"#,
        crate_name = name.replace('-', "_"),
    );
    let files = vec![
        ("Cargo.toml".to_owned(), manifest),
        ("src/lib.rs".to_owned(), policy.to_owned()),
        (".gitignore".to_owned(), "/target/\n".to_owned()),
    ];
    let build =
        "rustup target add wasm32-wasip2\ncargo build --release --target wasm32-wasip2".to_owned();
    let output = format!(
        "target/wasm32-wasip2/release/{}.wasm",
        name.replace('-', "_")
    );
    (files, build, output)
}

fn with_wit(mut files: Vec<File>) -> Vec<File> {
    files.extend(
        WIT.iter()
            .map(|(path, text)| (format!("wit/{path}"), (*text).to_owned())),
    );
    files
}

fn python(world: &str, policy: &str) -> (Vec<File>, String, String) {
    let files = with_wit(vec![
        ("app.py".to_owned(), policy.to_owned()),
        (
            "requirements.txt".to_owned(),
            format!("componentize-py=={COMPONENTIZE_PY}\n"),
        ),
        (
            ".gitignore".to_owned(),
            "/.venv/\n__pycache__/\n*.wasm\n".to_owned(),
        ),
    ]);
    let output = format!("{world}.wasm");
    let build = format!(
        "python3 -m venv .venv && .venv/bin/pip install -r requirements.txt\n\
         .venv/bin/componentize-py -d wit -w {world} componentize app -o {output}"
    );
    (files, build, output)
}

fn js(name: &str, world: &str, policy: &str) -> (Vec<File>, String, String) {
    let output = format!("{world}.wasm");
    let package = json!({
        "name": name,
        "version": "0.1.0",
        "private": true,
        "type": "module",
        "scripts": {
            // --disable all: no WASI at all; the policy imports only its
            // world.
            "build": format!("jco componentize {world}.js --wit wit --world-name {world} --disable all -o {output}"),
        },
        "devDependencies": {
            "@bytecodealliance/componentize-js": COMPONENTIZE_JS,
            "@bytecodealliance/jco": JCO,
        },
        // jco asks for an older ComponentizeJS; the pinned one builds.
        "overrides": {
            "@bytecodealliance/jco": {
                "@bytecodealliance/componentize-js": "$@bytecodealliance/componentize-js",
            },
        },
    });
    let files = with_wit(vec![
        (format!("{world}.js"), policy.to_owned()),
        (
            "package.json".to_owned(),
            serde_json::to_string_pretty(&package).expect("JSON serializes") + "\n",
        ),
        (
            ".gitignore".to_owned(),
            "/node_modules/\n*.wasm\n".to_owned(),
        ),
    ]);
    let build = "npm install --no-audit --no-fund\nnpm run build".to_owned();
    (files, build, output)
}

fn readme(name: &str, world: &str, lang: Lang, build: &str, test: &str) -> String {
    let language = match lang {
        Lang::Rust => "Rust, on the custodian SDK",
        Lang::Python => "Python, built with componentize-py",
        Lang::Js => "JavaScript, built with jco (ComponentizeJS)",
    };
    format!(
        "# {name}\n\n\
         A Custodian `{world}` policy plugin in {language}, made by `custodian plugin new`.\n\n\
         ## Build and test\n\n```sh\n{build}\n{test}\n```\n\n\
         `cases.json` holds the table the policy must pass: each case calls one function with\n\
         JSON input (as `custodian run` takes it) and gives the answer it must give. Add a case\n\
         for every rule you write.\n\n\
         ## Use it\n\n\
         - `custodian plugin check PLUGIN --world {world}`, `custodian plugin inspect PLUGIN`\n\
         - in a server's configuration: `[plugins.{world}]` `path = \"PLUGIN\"`\n\
         - swapped into a running server: `custodian plugin swap --world {world} PLUGIN`\n\
         - signed, for servers with `[plugins] trusted_keys`: `custodian plugin sign PLUGIN --key KEY`\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `.wit` file under `dir`, relative to `root`, `/`-separated.
    fn wit_files(root: &Path, dir: &Path, found: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                wit_files(root, &path, found);
            } else if path.extension().is_some_and(|e| e == "wit") {
                let relative = path.strip_prefix(root).unwrap();
                found.push(relative.to_str().unwrap().replace('\\', "/"));
            }
        }
    }

    #[test]
    fn a_new_project_gets_every_file_of_the_contract() {
        let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../sdk/wit"));
        let mut on_disk = Vec::new();
        wit_files(root, root, &mut on_disk);
        on_disk.sort();
        let mut embedded: Vec<String> = WIT.iter().map(|(p, _)| (*p).to_owned()).collect();
        embedded.sort();
        assert_eq!(embedded, on_disk, "scaffold.rs's WIT list is out of date");
    }
}
