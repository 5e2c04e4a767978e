//! `custodian plugin …`: inspect, check, list and export plugins.

use std::path::Path;

use anyhow::{Context, anyhow};
use custodian::bundled;
use custodian::runtime::{Plugin, Runtime, World};
use serde_json::json;

use super::args::{Global, PluginCommand};
use super::{Failure, Outcome, runtime};

/// Loads `spec`: a `.wasm` path, or `builtin:WORLD`.
pub(super) fn load(runtime: &Runtime, spec: &str) -> Result<Plugin, Failure> {
    let loaded = match spec.strip_prefix("builtin:") {
        Some(world) => {
            let world: World = world
                .parse()
                .map_err(|e: String| Failure::Usage(anyhow!(e)))?;
            let bytes = bundled::plugin(world).ok_or_else(|| {
                Failure::Usage(anyhow!("no plugin is bundled for the {world} world"))
            })?;
            runtime.load_bytes(bytes, &bundled::name(world))
        }
        None => runtime.load_file(Path::new(spec)),
    };
    loaded.map_err(|e| Failure::Usage(e.into()))
}

/// Services for a plugin granted nothing (an archive or purge plugin, a
/// retention route): a clock and the I/O runtime, and an empty KV that
/// nothing can reach.
pub(super) fn isolated_services(
    io: &tokio::runtime::Runtime,
) -> std::sync::Arc<custodian::runtime::Services> {
    use std::sync::Arc;
    let clock: Arc<dyn custodian::clock::Clock> = Arc::new(custodian::clock::SystemClock);
    Arc::new(custodian::runtime::Services {
        kv: Arc::new(custodian::kv::memory::MemoryKv::new(clock.clone())),
        stores: Default::default(),
        clock,
        io: io.handle().clone(),
        retention: None,
    })
}

pub(super) fn run(global: &Global, command: PluginCommand) -> Outcome {
    match command {
        PluginCommand::Inspect { plugin, json } => inspect(global, &plugin, json),
        PluginCommand::Check { plugin, world } => check(global, &plugin, world),
        PluginCommand::List { json } => list(json),
        PluginCommand::Export { world, output } => export(world, &output),
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

fn check(global: &Global, spec: &str, world: Option<World>) -> Outcome {
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
    let worlds: Vec<&str> = info.worlds.iter().map(|w| w.name()).collect();
    println!(
        "ok: {} is a {} plugin (custodian:policy@{})",
        info.source,
        worlds.join(", "),
        info.policy_version.as_deref().unwrap_or("-")
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
                    "hash": blake3::hash(bytes).to_hex().to_string(),
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
