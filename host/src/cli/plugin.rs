//! `custodian plugin …`: inspect, check, list and export plugins.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, anyhow};
use clap::Subcommand;
use custodian::bundled;
use custodian::clock::SystemClock;
use custodian::plugin_set::smoke_test;
use custodian::runtime::World;
use serde_json::json;

use super::options::Global;
use super::plugin_spec::{self, load};
use super::{Failure, Outcome, runtime};

mod cases;
mod diff;
mod scaffold;
mod signing;

#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Show a plugin's world, contract version, imports, exports, size,
    /// content hash and load time.
    Inspect {
        /// A `.wasm` file, or `builtin:WORLD` for a bundled plugin.
        plugin: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Check that a plugin loads (and, with --world, implements that world);
    /// exit 0 if so, 2 with the reason if not. With --smoke, also make the
    /// smoke call a start or a swap makes (one harmless call in isolation),
    /// so a plugin that traps on every call is refused here, not by the
    /// server.
    Check {
        /// A `.wasm` file, or `builtin:WORLD` for a bundled plugin.
        plugin: String,
        /// The world it must implement.
        #[arg(long)]
        world: Option<World>,
        /// Prove it as a swap does: load, world, and a smoke call.
        #[arg(long)]
        smoke: bool,
    },
    /// Run a table of cases against a plugin, in any language: each case
    /// calls one function with JSON input and gives the answer it must
    /// give; every case is reported pass or fail with the differences.
    ///
    /// The file is a JSON array of cases:
    ///
    ///   [{"name": "a fresh item is retained", "function": "assess",
    ///     "input": {"settings": {..}, "item": {..}, "now-ms": 1700000001000},
    ///     "expect": {"ok": {"retain-until-ms": 1700086400000, ..}}}]
    ///
    /// Input and answers are JSON as `custodian run` takes and prints
    /// them. "function" may be left out when the world exports one. Each
    /// case runs in a fresh instance with empty in-memory state and
    /// nothing granted.
    ///
    /// Exit 0 when every case passes, 1 when any fails, 2 when the plugin
    /// or the file cannot be used.
    #[command(verbatim_doc_comment)]
    Test(cases::TestArgs),
    /// Start a plugin project in a new directory, in Rust, Python or
    /// JavaScript: a starting policy, its table of cases, and a README;
    /// prints the commands that build it and run its table.
    New(scaffold::NewArgs),
    /// What swapping a plugin in would change, offline on a data
    /// directory: the candidate is proven as a swap proves it, then the
    /// state is replayed read-only through the serving plugin and the
    /// candidate, and each decision that differs is listed. Takedown: the
    /// next step of each due timer. Retention: when each request in
    /// retain may be purged, with the configured settings (or
    /// --retention-ms). Access: the recent requests the decision log kept.
    /// Nothing is written; a server does the same for `PUT
    /// /v1/plugins/WORLD?dry_run=true`.
    ///
    /// Exit 0 with the report (changes or none), 1 when the candidate
    /// would be refused, with the reason.
    Diff(diff::DiffArgs),
    /// Make an ed25519 key pair for signing plugins: the secret key goes
    /// to a file, the public key (to list in `[plugins] trusted_keys`) is
    /// printed.
    Keygen(signing::KeygenArgs),
    /// Sign a plugin with a secret key: writes PLUGIN.sig beside it, where
    /// a host loading the plugin from its configuration, and `custodian
    /// plugin swap`, find it.
    Sign(signing::SignArgs),
    /// Check a plugin's signature (exit 0 if it verifies and, with
    /// --trusted-key, is by a trusted key; 1 if not).
    Verify(signing::VerifyArgs),
    /// List the bundled plugins.
    List {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Write a bundled plugin's `.wasm` to a file (a starting point, or to
    /// inspect it with other tools).
    Export {
        /// The world whose bundled plugin to write.
        world: World,
        /// Where to write it.
        #[arg(long, short)]
        output: PathBuf,
    },
    /// Replace a running server's plugin of a world, without a restart.
    ///
    /// The server checks the plugin (a component of that world, built
    /// against a compatible contract, answering a smoke call), then swaps
    /// it: calls already running finish on the old plugin, and once the
    /// command reports success no step of the old plugin can commit. A
    /// refused plugin leaves the old one serving; the reason is printed
    /// and the exit code is 2, as `plugin check` exits for a plugin that
    /// cannot serve (1 when the server fails).
    ///
    /// The plugin's signature (PLUGIN.sig, or --signature) goes with it;
    /// a server with `[plugins] trusted_keys` refuses a plugin without a
    /// valid signature by one of them.
    ///
    /// The token comes from $CUSTODIAN_TOKEN or --token-file; the audit
    /// names the token's principal, who needs the `admin` role.
    #[command(verbatim_doc_comment)]
    Swap {
        /// The world to swap.
        #[arg(long)]
        world: World,
        /// The new `.wasm` file, or `builtin:WORLD` to swap the bundled
        /// plugin back in.
        plugin: String,
        /// Its signature [default: PLUGIN.sig, when it exists].
        #[arg(long, value_name = "FILE")]
        signature: Option<PathBuf>,
        /// Swap nothing: print the server's report of what the swap would
        /// change (see `custodian plugin diff`), as JSON.
        #[arg(long)]
        dry_run: bool,
        /// The server's base URL.
        #[arg(
            long,
            env = "CUSTODIAN_SERVER",
            default_value = "http://127.0.0.1:7420"
        )]
        server: String,
        /// A file holding the API token (when $CUSTODIAN_TOKEN is unset).
        #[arg(long, value_name = "FILE")]
        token_file: Option<PathBuf>,
        /// Print the server's JSON report.
        #[arg(long)]
        json: bool,
    },
}

pub(super) fn run(global: &Global, command: PluginCommand) -> Outcome {
    match command {
        PluginCommand::Inspect { plugin, json } => inspect(global, &plugin, json),
        PluginCommand::Check {
            plugin,
            world,
            smoke,
        } => check(global, &plugin, world, smoke),
        PluginCommand::Test(args) => cases::run(global, &args),
        PluginCommand::New(args) => scaffold::run(&args),
        PluginCommand::Diff(args) => diff::run(global, &args),
        PluginCommand::Keygen(args) => signing::keygen(&args),
        PluginCommand::Sign(args) => signing::sign(&args),
        PluginCommand::Verify(args) => signing::verify(&args),
        PluginCommand::List { json } => list(json),
        PluginCommand::Export { world, output } => export(world, &output),
        PluginCommand::Swap {
            world,
            plugin,
            signature,
            dry_run,
            server,
            token_file,
            json,
        } => swap(
            world,
            &plugin,
            signature.as_deref(),
            dry_run,
            &server,
            token_file.as_deref(),
            json,
        ),
    }
}

fn inspect(global: &Global, spec: &str, as_json: bool) -> Outcome {
    let runtime = runtime(global)?;
    let plugin = load(&runtime, spec)?;
    let info = plugin.info();
    if as_json {
        println!(
            "{}",
            serde_json::to_string_pretty(info).expect("plugin info serializes")
        );
        return Ok(());
    }
    let worlds: Vec<&str> = info.worlds.iter().map(|w| w.name()).collect();
    println!("plugin   {}", info.source);
    println!(
        "world    {} (custodian:policy@{})",
        if worlds.is_empty() {
            "none".to_owned()
        } else {
            worlds.join(", ")
        },
        info.policy_version.as_deref().unwrap_or("-")
    );
    println!("size     {} bytes", info.size);
    println!("hash     blake3:{}", info.hash);
    println!(
        "load     {:.2} ms ({})",
        info.load_time.as_secs_f64() * 1e3,
        if info.from_cache {
            "compiled code read from the disk cache"
        } else {
            "compiled now"
        }
    );
    println!("imports");
    for import in &info.imports {
        println!("  {import}");
    }
    println!("exports");
    for export in &info.exports {
        println!("  {}", export.name);
        for function in &export.functions {
            println!("    {function}");
        }
    }
    Ok(())
}

fn check(global: &Global, spec: &str, world: Option<World>, smoke: bool) -> Outcome {
    let runtime = runtime(global)?;
    let plugin = load(&runtime, spec)?;
    if let Some(world) = world {
        plugin
            .expect_world(world)
            .map_err(|e| Failure::Usage(e.into()))?;
    }
    let info = plugin.info();
    if info.worlds.is_empty() && world.is_none() {
        return Err(Failure::Usage(anyhow!(
            "{} loads, but exports no custodian:policy world",
            info.source
        )));
    }
    if smoke {
        let (bytes, _) = plugin_spec::bytes(spec)?;
        let runtime = Arc::new(runtime);
        let io = super::io_runtime()?;
        for world in world.map_or_else(|| info.worlds.clone(), |w| vec![w]) {
            io.block_on(smoke_test(
                &runtime,
                Arc::new(SystemClock),
                world,
                bytes.clone(),
                info.source.clone(),
            ))
            .map_err(|e| Failure::Usage(anyhow!(e)))?;
        }
    }
    let worlds: Vec<&str> = info.worlds.iter().map(|w| w.name()).collect();
    println!(
        "ok: {} is a {} plugin (custodian:policy@{}){}",
        info.source,
        worlds.join(", "),
        info.policy_version.as_deref().unwrap_or("-"),
        if smoke {
            ", and answers its smoke call"
        } else {
            ""
        }
    );
    Ok(())
}

fn list(as_json: bool) -> Outcome {
    let bundled: Vec<_> = World::ALL
        .into_iter()
        .filter_map(|world| bundled::plugin(world).map(|bytes| (world, bytes)))
        .collect();
    if as_json {
        let rows: Vec<_> = bundled
            .iter()
            .map(|(world, bytes)| {
                json!({
                    "world": world.name(),
                    "name": bundled::name(*world),
                    "size": bytes.len(),
                    "hash": custodian::runtime::content_hash(bytes),
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).expect("rows serialize")
        );
    } else {
        for (world, bytes) in bundled {
            println!(
                "{:<20} {:>8} bytes  blake3:{}",
                bundled::name(world),
                bytes.len(),
                &blake3::hash(bytes).to_hex()[..16]
            );
        }
    }
    Ok(())
}

fn export(world: World, output: &Path) -> Outcome {
    let bytes = bundled::plugin(world)
        .ok_or_else(|| Failure::Usage(anyhow!("no plugin is bundled for the {world} world")))?;
    std::fs::write(output, bytes)
        .with_context(|| format!("cannot write {}", output.display()))
        .map_err(Failure::Failed)?;
    println!("wrote {} ({} bytes)", output.display(), bytes.len());
    Ok(())
}

/// The API token: `$CUSTODIAN_TOKEN`, else the file given.
fn client_token(token_file: Option<&Path>) -> Result<String, Failure> {
    if let Ok(token) = std::env::var("CUSTODIAN_TOKEN") {
        return Ok(token.trim().to_owned());
    }
    let path = token_file.ok_or_else(|| {
        Failure::Usage(anyhow!(
            "no API token: set $CUSTODIAN_TOKEN or pass --token-file (the server writes \
             DATA/token when it has none configured)"
        ))
    })?;
    std::fs::read_to_string(path)
        .map(|text| text.trim().to_owned())
        .with_context(|| format!("cannot read the token file {}", path.display()))
        .map_err(Failure::Usage)
}

fn swap(
    world: World,
    plugin: &str,
    signature: Option<&Path>,
    dry_run: bool,
    server: &str,
    token_file: Option<&Path>,
    as_json: bool,
) -> Outcome {
    let token = client_token(token_file)?;
    let (bytes, bundled_world) = plugin_spec::bytes(plugin)?;
    let (signature, source) = match bundled_world {
        Some(named) if named != world => {
            return Err(Failure::Usage(anyhow!("{plugin} is not a {world} plugin")));
        }
        // The bundled plugins need no signature: they are the binary's.
        Some(_) => (None, bundled::name(world)),
        None => (
            signing::signature_for(Path::new(plugin), signature)?,
            plugin.to_owned(),
        ),
    };
    let mut url = format!("{}/v1/plugins/{world}", server.trim_end_matches('/'));
    if dry_run {
        url.push_str("?dry_run=true");
    }
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        // Compiling and smoke-testing a large plugin takes a while.
        .timeout_global(Some(std::time::Duration::from_secs(300)))
        .build()
        .into();
    let mut request = agent.put(&url);
    if let Some(signature) = &signature {
        request = request.header("x-custodian-signature", &signature.to_json());
    }
    let mut response = request
        .header("authorization", &format!("Bearer {token}"))
        .header("x-custodian-source", &source)
        .header("content-type", "application/wasm")
        // The server answers a refusal (a bad token, a bad world) before
        // reading the body; waiting for its go-ahead means the refusal
        // arrives as an answer, not as a broken pipe mid-upload.
        .header("expect", "100-continue")
        .send(&bytes[..])
        .with_context(|| format!("cannot reach the server at {server}"))
        .map_err(Failure::Failed)?;
    let status = response.status();
    let body: serde_json::Value = response
        .body_mut()
        .read_to_string()
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .ok_or_else(|| {
            Failure::Failed(anyhow!(
                "the server at {server} did not answer with JSON ({status})"
            ))
        })?;
    if !status.is_success() {
        let code = body["error"]["code"].as_str().unwrap_or("unknown");
        let message = body["error"]["message"].as_str().unwrap_or("");
        let error = anyhow!("the swap was not done ({status}, {code}): {message}");
        // A deliberate exception to `Failure::of_kind`: this is the
        // server's answer, known only by its API code, and the codes that
        // mean the user's own input (their token, the world they named,
        // the plugin they sent) is wrong are bad usage; `unauthorized`
        // has no kind.
        return Err(match code {
            "unauthorized" | "not_found" | "plugin_refused" => Failure::Usage(error),
            _ => Failure::Failed(error),
        });
    }
    if dry_run {
        println!(
            "{}",
            serde_json::to_string_pretty(&body).expect("JSON serializes")
        );
    } else if as_json {
        println!("{body}");
    } else if body["changed"] == serde_json::Value::Bool(false) {
        println!(
            "{world}: already serving {}",
            body["current"]["hash"].as_str().unwrap_or("?")
        );
    } else {
        println!(
            "{world}: swapped {} -> {} (authority generation {}, {:.0} ms)",
            body["previous"]["hash"].as_str().unwrap_or("?"),
            body["current"]["hash"].as_str().unwrap_or("?"),
            body["authority_generation"],
            body["elapsed_ms"].as_f64().unwrap_or(0.0),
        );
    }
    Ok(())
}
