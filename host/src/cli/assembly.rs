//! A data directory opened for a command that runs configured plugins
//! (`takedown`, `tick`): the node and its plugins, assembled exactly as
//! `serve` assembles them ([`Node::assemble`]), entering the shared plugin
//! set as a command does (without writing it), so every commit carries the
//! set's guard as a server's would.

use std::sync::Arc;

use anyhow::anyhow;
use custodian::clock::Clock;
use custodian::node::{Assembly, AssemblyOptions, Entry, Node, PluginPlan};
use custodian::plugin_set::{Attach, Source};
use custodian::policy::retention::Settings;
use custodian::runtime::World;

use super::options::{DataArgs, Global, RetentionArgs};
use super::plugin_spec::source;
use super::{Failure, io_runtime, node_failure, runtime_config};

/// A node opened and assembled for one command.
pub(super) struct Assembled {
    /// The plugins and what they run on.
    pub assembly: Assembly,
    /// The node, held (with any lock on the directory) for as long as the
    /// command runs; dropped after the assembly and before `io`, which
    /// drives its KV.
    pub node: Node,
    /// Where the plugins' and the mechanisms' I/O runs.
    pub io: tokio::runtime::Runtime,
}

/// What a command asks of the plugins on top of the configuration.
pub(super) struct Request<'a> {
    /// The retention plugin and settings from the command line; `None`
    /// keeps the configured ones.
    pub retention: Option<&'a RetentionArgs>,
    /// The takedown plugin the command line names, if any.
    pub takedown: Option<Source>,
    /// Whether the command changes state.
    pub changes: bool,
}

/// Opens `data` with `clock` and assembles its plugins from the
/// configuration, the command line's plugins and retention settings
/// overriding it, after `adjust` changed the plan (a command's limits).
pub(super) fn open(
    global: &Global,
    data: &DataArgs,
    clock: Arc<dyn Clock>,
    request: Request<'_>,
    adjust: impl FnOnce(&mut PluginPlan),
) -> Result<Assembled, Failure> {
    let mut named = std::collections::BTreeMap::new();
    if let Some(retention) = request.retention {
        if retention.retention_ms == 0 {
            return Err(Failure::Usage(anyhow!("--retention-ms must be positive")));
        }
        if let Some(spec) = &retention.retention_plugin {
            named.insert(World::Retention, source(spec, World::Retention)?);
        }
    }
    if let Some(takedown) = request.takedown {
        named.insert(World::Takedown, takedown);
    }
    let config = super::config(global)?.unwrap_or_default();
    let mut plan = PluginPlan::configured(&config).map_err(node_failure)?;
    if let Some(retention) = request.retention {
        plan.retention = Settings {
            retention_ms: retention.retention_ms,
            noncurrent_retention_ms: retention.noncurrent_retention_ms,
        };
    }
    adjust(&mut plan);
    let io = io_runtime()?;
    let node = io
        .block_on(Node::open(&data.data, config, clock))
        .map_err(node_failure)?;
    let assembly = io
        .block_on(node.assemble(AssemblyOptions {
            runtime: runtime_config(global),
            plan,
            entry: Entry::Attach(Attach {
                named,
                changes: request.changes,
            }),
            metrics: None,
        }))
        .map_err(|e| Failure::of_kind(e.kind(), e.into()))?;
    Ok(Assembled { assembly, node, io })
}
