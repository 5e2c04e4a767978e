//! `custodian run`: one generic call into a plugin, JSON in and out.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow};
use clap::Args;
use custodian::bundled;
use custodian::clock::{Clock, FixedClock, SystemClock};
use custodian::kv::Kv;
use custodian::kv::memory::MemoryKv;
use custodian::object::ObjectStore;
use custodian::object::memory::MemoryStore;
use custodian::runtime::{CallContext, CallError, Grants, Limits, Services, World};
use serde_json::Value;

use super::options::{DataArgs, Global};
use super::plugin_spec::load;
use super::{Failure, Outcome, open_data, runtime};

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The plugin's world (takedown, retention, purge, archive, access), or
    /// a full exported interface name such as `ns:pkg/iface@1.0.0`.
    pub world: String,
    /// The function to call, as the WIT spells it (e.g. `assess`).
    pub function: String,
    /// The plugin: a `.wasm` file or `builtin:WORLD` [default: the bundled
    /// plugin of WORLD].
    #[arg(long, value_name = "PATH")]
    pub plugin: Option<String>,
    /// The input: JSON text, `@FILE` to read a file, or `-` for stdin.
    #[arg(long, default_value = "{}", value_name = "JSON")]
    pub input: String,
    /// Grant the plugin this KV partition (repeatable).
    #[arg(long = "grant-partition", value_name = "NAME")]
    pub partitions: Vec<String>,
    /// Grant the plugin an object store of this name (repeatable).
    #[arg(long = "grant-store", value_name = "NAME")]
    pub stores: Vec<String>,
    /// Wall-clock limit of the call.
    #[arg(long, default_value_t = 2000, value_name = "MS")]
    pub timeout_ms: u64,
    /// Memory limit of the call.
    #[arg(long, default_value_t = 64, value_name = "MIB")]
    pub memory_mib: usize,
    /// Budget of host calls (kv, objects, audit) for the call.
    #[arg(long, default_value_t = 1000, value_name = "N")]
    pub host_calls: u32,
    /// Pin the clock the plugin sees, in ms since the epoch.
    #[arg(long, value_name = "MS")]
    pub now: Option<u64>,
    /// Serve the plugin's KV partitions from this data directory's
    /// durable KV instead of memory.
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// Print the JSON on one line instead of indented.
    #[arg(long)]
    pub compact: bool,
}

fn usage(error: impl Into<anyhow::Error>) -> Failure {
    Failure::Usage(error.into())
}

fn read_input(input: &str) -> Result<Value, Failure> {
    let text = if input == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("cannot read the input from stdin")
            .map_err(usage)?;
        text
    } else if let Some(path) = input.strip_prefix('@') {
        std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the input file {path}"))
            .map_err(usage)?
    } else {
        input.to_owned()
    };
    serde_json::from_str(&text)
        .context("the input is not JSON")
        .map_err(usage)
}

pub(super) fn run(global: &Global, args: &RunArgs) -> Outcome {
    let world = args.world.parse::<World>().ok();
    let spec = match (&args.plugin, world) {
        (Some(spec), _) => spec.clone(),
        (None, Some(world)) => bundled::name(world),
        (None, None) => {
            return Err(usage(anyhow!(
                "{} is not a world; pass --plugin PATH",
                args.world
            )));
        }
    };
    let input = read_input(&args.input)?;
    let limits = Limits {
        timeout: Duration::from_millis(args.timeout_ms),
        memory_bytes: args.memory_mib.saturating_mul(1 << 20),
        host_calls: args.host_calls,
    };
    limits.validate().map_err(|e| usage(anyhow!(e)))?;
    let mut grants = Grants::none();
    for partition in &args.partitions {
        grants = grants.partition(partition).map_err(usage)?;
    }
    let clock: Arc<dyn Clock> = match args.now {
        Some(now) => Arc::new(FixedClock::new(now)),
        None => Arc::new(SystemClock),
    };
    let mut stores: BTreeMap<String, Arc<dyn ObjectStore>> = BTreeMap::new();
    for store in &args.stores {
        grants = grants.store(store);
        stores.insert(
            store.clone(),
            Arc::new(MemoryStore::versioned(clock.clone())),
        );
    }

    let runtime = runtime(global)?;
    let plugin = load(&runtime, &spec)?;
    if let Some(world) = world {
        plugin.expect_world(world).map_err(usage)?;
    }
    let function = plugin
        .function(&args.world, &args.function)
        .map_err(usage)?;
    // Mechanism futures that have to wait are driven here; the in-memory
    // and embedded ones used by `run` rarely do, so one worker is plenty.
    let io = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("cannot start the I/O runtime")
        .map_err(Failure::Failed)?;
    let kv: Arc<dyn Kv> = match &args.data {
        Some(data) => open_data(&DataArgs { data: data.clone() }, clock.clone())?,
        None => Arc::new(MemoryKv::new(clock.clone())),
    };
    let call = Arc::new(CallContext {
        services: Arc::new(Services {
            kv,
            stores,
            clock,
            io: io.handle().clone(),
            retention: None,
        }),
        grants,
        limits,
        actor: plugin.info().actor(),
    });
    // The user names the function and gives its input: a function that
    // does not exist or input that does not fit it is bad usage (the
    // kind's table), every slot in use is busy.
    let output = function
        .call_json(call, &input)
        .map_err(|e: CallError| Failure::of_kind(e.kind(), e.into()))?;
    let text = if args.compact {
        serde_json::to_string(&output)
    } else {
        serde_json::to_string_pretty(&output)
    };
    println!("{}", text.expect("JSON values serialize"));
    if let Some(error) = output.get("err") {
        return Err(Failure::Failed(anyhow!(
            "the policy answered with an error: {error}"
        )));
    }
    Ok(())
}
