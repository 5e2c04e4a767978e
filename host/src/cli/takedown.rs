//! `custodian takedown …`, and the policy environment every takedown
//! command (and `tick`) runs in: the plugins, the stores, the grants.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::{Context, anyhow};
use clap::{Args, Subcommand};
use custodian::clock::Clock;
use custodian::content::ObjectId;
use custodian::kv::{Kv, Precondition};
use custodian::node::Node;
use custodian::policy::PolicyError;
use custodian::policy::requests::{self, Action, RequestError};
use custodian::policy::retention::{RetentionPolicy, RetentionRoute, Settings};
use custodian::policy::takedown::{self, Request, TakedownPolicy};
use custodian::runtime::{CallContext, Limits, Plugin, Runtime, Services, World};
use custodian::serve::plugins::shared;
use custodian::timers;
use serde_json::json;

use super::options::{DataArgs, Global, RetentionArgs};
use super::plugin::load;
use super::{Failure, Outcome, io_runtime, node_failure, runtime};

/// The takedown policy and the data directory a takedown command uses.
#[derive(Debug, Args)]
pub struct TakedownPolicyArgs {
    #[command(flatten)]
    pub data: DataArgs,
    /// The takedown plugin: a `.wasm` file or `builtin:takedown`
    /// [default: the plugin the data directory's shared plugin set names
    /// (what a server on it last ran), else builtin:takedown]. A command
    /// that changes state refuses a plugin the set does not name.
    #[arg(long, value_name = "PATH")]
    pub plugin: Option<String>,
    /// Who is acting, for the audit log.
    #[arg(long, env = "USER", default_value = "unknown", value_name = "NAME")]
    pub operator: String,
    #[command(flatten)]
    pub retention: RetentionArgs,
}

#[derive(Debug, Subcommand)]
pub enum TakedownCommand {
    /// File a request against objects of NS/NAME (or a pack's inventory);
    /// print its id.
    ///
    /// The repository must hold every object (see `custodian repo ls`).
    /// The request is recorded with its timer due now, so the next
    /// `custodian tick` starts it. --json prints {"id": ..}.
    #[command(verbatim_doc_comment)]
    Create {
        #[command(flatten)]
        policy: TakedownPolicyArgs,
        /// The repository, `namespace/name`.
        repository: String,
        /// An object id (64 hex digits) to take down (repeatable, at most
        /// 1024).
        #[arg(
            long = "object",
            value_name = "ID",
            required_unless_present = "pack",
            conflicts_with = "pack"
        )]
        objects: Vec<String>,
        /// A pack id: take down everything in its inventory, nested sealed
        /// packs included.
        #[arg(long, value_name = "ID")]
        pack: Option<String>,
        /// Filing time, ms since the epoch [default: now].
        #[arg(long, value_name = "MS")]
        now: Option<u64>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show a request: phase, verification, counts, retain-until, hold,
    /// the next purge pass and the last error.
    ///
    /// Phases in order: seed, acquire, closure, discover, retain,
    /// purging, purged. The last error is the policy's (e.g. a corrupt
    /// source) or the one its last failed step left on the timer.
    /// --json prints one object with the same fields.
    #[command(verbatim_doc_comment)]
    Status {
        #[command(flatten)]
        policy: TakedownPolicyArgs,
        /// The request id.
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Set (`on`) or clear (`off`) a request's legal hold.
    ///
    /// A held request is never purged; a hold cannot be placed once
    /// purging has begun (exit 1, saying so). The request's timer moves
    /// to now so the change takes effect at the next tick.
    #[command(verbatim_doc_comment)]
    Hold {
        #[command(flatten)]
        policy: TakedownPolicyArgs,
        /// The request id.
        id: String,
        /// `on` or `off`.
        #[arg(value_parser = ["on", "off"])]
        state: String,
        /// When, ms since the epoch [default: now].
        #[arg(long, value_name = "MS")]
        now: Option<u64>,
    },
}

/// A data directory opened for policy calls: the KV, the stores, the
/// retention route, and the runtime that must outlive every call.
pub(super) struct Environment {
    pub runtime: Runtime,
    /// The node opened, held (with any lock on the directory) for as long
    /// as the command runs; dropped before `io`, which drives its KV.
    pub node: Node,
    pub io: tokio::runtime::Runtime,
    pub kv: Arc<dyn Kv>,
    pub services: Arc<Services>,
}

impl Environment {
    /// Opens `data` with `clock`; retention questions go to the plugin
    /// `retention` names (loaded before the directory is opened, so a bad
    /// plugin never holds it).
    pub(super) fn open(
        global: &Global,
        data: &DataArgs,
        retention: &RetentionArgs,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, Failure> {
        let runtime = runtime(global)?;
        let retention_policy = Arc::new(
            RetentionPolicy::new(Arc::new(load(&runtime, &retention.retention_plugin)?))
                .map_err(|e| Failure::Usage(e.into()))?,
        );
        let settings = Settings {
            retention_ms: retention.retention_ms,
            noncurrent_retention_ms: retention.noncurrent_retention_ms,
        };
        if settings.retention_ms == 0 {
            return Err(Failure::Usage(anyhow!("--retention-ms must be positive")));
        }
        let mut environment = Self::open_stores(global, runtime, data, clock)?;
        let route = RetentionRoute::new(
            retention_policy,
            settings,
            environment.services.clone(),
            Limits::default(),
        );
        let services = &environment.services;
        environment.services = Arc::new(Services {
            kv: services.kv.clone(),
            stores: services.stores.clone(),
            clock: services.clock.clone(),
            io: services.io.clone(),
            retention: Some(Arc::new(route)),
        });
        Ok(environment)
    }

    /// The KV, the stores and the services without a retention route.
    fn open_stores(
        global: &Global,
        runtime: Runtime,
        data: &DataArgs,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, Failure> {
        let config = super::config(global)?.unwrap_or_default();
        let io = io_runtime()?;
        // The node the server on this directory would open: its KV (the
        // redb file, or the configured etcd cluster) and its stores.
        let node = io
            .block_on(Node::open(&data.data, config, clock.clone()))
            .map_err(node_failure)?;
        let mut stores = BTreeMap::new();
        for name in [takedown::SERVING_STORE, takedown::PRESERVED_STORE] {
            let store = io.block_on(node.store(name)).map_err(node_failure)?;
            stores.insert(name.to_owned(), store);
        }
        let kv = node.kv().clone();
        let services = Arc::new(Services {
            kv: kv.clone(),
            stores,
            clock,
            io: io.handle().clone(),
            retention: None,
        });
        Ok(Self {
            runtime,
            node,
            io,
            kv,
            services,
        })
    }

    /// A call context for `policy` with the takedown grants.
    pub(super) fn call(&self, policy: &TakedownPolicy, limits: &Limits) -> Arc<CallContext> {
        Arc::new(CallContext {
            services: self.services.clone(),
            grants: takedown::grants(),
            limits: limits.clone(),
            actor: policy.plugin().info().actor(),
        })
    }

    /// The takedown policy `spec` names and the guards its commits carry
    /// (see [`Environment::plugin`]).
    pub(super) fn takedown_policy(
        &self,
        spec: Option<&str>,
        changes: bool,
    ) -> Result<(TakedownPolicy, Vec<Precondition>), Failure> {
        let (plugin, guards) = self.plugin(spec, changes)?;
        let policy = TakedownPolicy::new(Arc::new(plugin)).map_err(|e| Failure::Usage(e.into()))?;
        Ok((policy, guards))
    }

    /// The plugin a command runs: `spec` when given, else the takedown
    /// plugin the data directory's shared set names (what a server on it
    /// last ran: swaps outlive it), else the bundled one; and the guards
    /// every commit it plans carries, as a server's do: `Equals` on the
    /// set row that names it ([`shared::guard`]), so a swap published by a
    /// server sharing the KV while the command runs keeps its plans from
    /// committing. A command that `changes` state refuses a takedown
    /// plugin the set does not name, since it would commit a policy a swap
    /// replaced.
    pub(super) fn plugin(
        &self,
        spec: Option<&str>,
        changes: bool,
    ) -> Result<(Plugin, Vec<Precondition>), Failure> {
        let row = self
            .io
            .block_on(shared::read(self.kv.as_ref()))
            .context("cannot read the shared plugin set")
            .map_err(Failure::Failed)?;
        let member = row.and_then(|row| Some((row.set.member(World::Takedown)?.clone(), row)));
        let plugin = match (spec, &member) {
            (Some(spec), _) => load(&self.runtime, spec)?,
            (None, Some((member, _))) => {
                let bytes = self
                    .io
                    .block_on(shared::plugin_bytes(
                        self.kv.as_ref(),
                        World::Takedown,
                        member,
                    ))
                    .context("cannot load the shared set's takedown plugin")
                    .map_err(Failure::Failed)?;
                self.runtime
                    .load_bytes(&bytes, &member.source)
                    .map_err(|e| Failure::Failed(e.into()))?
            }
            (None, None) => load(&self.runtime, "builtin:takedown")?,
        };
        let takedown = plugin.info().worlds.first() == Some(&World::Takedown);
        if let Some((member, row)) = &member
            && changes
            && takedown
            && plugin.info().hash != member.hash
        {
            return Err(Failure::Usage(anyhow!(
                "{} is not the takedown plugin this data directory's shared plugin set names \
                 ({}, hash {}, set by {}): a server swapped it in, and a step of another \
                 plugin would commit a policy the swap replaced; leave --plugin out to run \
                 the set's plugin, or swap this one in through the server",
                spec.unwrap_or("builtin:takedown"),
                member.source,
                &member.hash[..12],
                row.set.by
            )));
        }
        let guards = match &member {
            Some((member, row)) if takedown && plugin.info().hash == member.hash => {
                vec![shared::guard(row)]
            }
            _ => Vec::new(),
        };
        Ok((plugin, guards))
    }
}

/// An id given on the command line: 64 hex digits. Request ids are
/// 32-byte BLAKE3 digests like object ids, and are written the same way.
fn parse_id(text: &str, what: &str) -> Result<[u8; 32], Failure> {
    ObjectId::from_hex(text)
        .map(|id| id.0)
        .map_err(|_| Failure::Usage(anyhow!("{what} {text:?} is not 64 hex digits")))
}

/// An id as it is printed.
fn hex(id: &[u8; 32]) -> String {
    ObjectId(*id).to_hex()
}

/// An operator action that did not take effect fails the command by its
/// kind: the policy refusing the user's input is bad usage; what the host
/// built and passed below never is (see `RequestError::kind`).
fn request_failure(error: RequestError) -> Failure {
    Failure::of_kind(error.kind(), error.into())
}

pub(super) fn run(global: &Global, command: TakedownCommand) -> Outcome {
    let limits = Limits::default();
    match command {
        TakedownCommand::Create {
            policy,
            repository,
            objects,
            pack,
            now,
            json,
        } => {
            let objects = objects
                .iter()
                .map(|o| parse_id(o, "object id"))
                .collect::<Result<Vec<_>, _>>()?;
            let pack = pack
                .as_deref()
                .map(|p| parse_id(p, "pack id"))
                .transpose()?;
            let clock = clock(now);
            let environment =
                Environment::open(global, &policy.data, &policy.retention, clock.clone())?;
            let (plugin, guards) = environment.takedown_policy(policy.plugin.as_deref(), true)?;
            let request = Request::new(repository, clock.now_ms(), objects, pack);
            requests::create(
                &plugin,
                environment.call(&plugin, &limits),
                environment.io.handle(),
                environment.kv.as_ref(),
                &request,
                Action {
                    operator: &policy.operator,
                    now_ms: clock.now_ms(),
                    guard: &guards,
                },
            )
            .map_err(request_failure)?;
            let id = hex(&request.id);
            if json {
                println!("{}", json!({ "id": id }));
            } else {
                println!("{id}");
            }
            Ok(())
        }
        TakedownCommand::Status { policy, id, json } => {
            let id = parse_id(&id, "request id")?;
            let clock = clock(None);
            let environment = Environment::open(global, &policy.data, &policy.retention, clock)?;
            let (plugin, _) = environment.takedown_policy(policy.plugin.as_deref(), false)?;
            let mut status = plugin
                .status(environment.call(&plugin, &limits), &id)
                // The host builds the plugin's input: a refused one is not
                // the user's fault.
                .map_err(|e| Failure::of_kind(e.kind().host_built(), e.into()))?
                .map_err(|e| match e {
                    PolicyError::NotFound(_) => Failure::of_kind(
                        e.kind(),
                        anyhow!("there is no takedown request {}", hex(&id)),
                    ),
                    other => Failure::of_kind(
                        other.kind(),
                        anyhow!(other).context("the takedown policy failed"),
                    ),
                })?;
            let timer = environment
                .io
                .block_on(timers::get(environment.kv.as_ref(), takedown::KIND, &id))
                .context("cannot read the request's timer")
                .map_err(Failure::Failed)?;
            if let Some(error) = timer.as_ref().and_then(|t| t.state.last_error.clone()) {
                status.last_error = Some(error);
            }
            let next_step_ms = timer.map(|t| t.due_ms);
            if json {
                let mut value = serde_json::to_value(&status).expect("a status serializes");
                value["id"] = json!(hex(&id));
                value["next_step_ms"] = json!(next_step_ms);
                println!("{value}");
            } else {
                print_status(&id, &status, next_step_ms);
            }
            Ok(())
        }
        TakedownCommand::Hold {
            policy,
            id,
            state,
            now,
        } => {
            let id = parse_id(&id, "request id")?;
            let clock = clock(now);
            let environment =
                Environment::open(global, &policy.data, &policy.retention, clock.clone())?;
            let (plugin, guards) = environment.takedown_policy(policy.plugin.as_deref(), true)?;
            let enabled = state == "on";
            requests::hold(
                &plugin,
                || environment.call(&plugin, &limits),
                environment.io.handle(),
                environment.kv.as_ref(),
                &id,
                enabled,
                Action {
                    operator: &policy.operator,
                    now_ms: clock.now_ms(),
                    guard: &guards,
                },
            )
            .map_err(request_failure)?;
            eprintln!(
                "legal hold {} for {}",
                if enabled { "set" } else { "cleared" },
                hex(&id)
            );
            Ok(())
        }
    }
}

fn clock(now: Option<u64>) -> Arc<dyn Clock> {
    match now {
        Some(now) => Arc::new(custodian::clock::FixedClock::new(now)),
        None => Arc::new(custodian::clock::SystemClock),
    }
}

fn print_status(id: &[u8; 32], s: &takedown::RequestStatus, next_step_ms: Option<u64>) {
    let c = &s.counts;
    println!("request       {}", hex(id));
    println!("repository    {}", s.repository);
    println!("created       {}", s.created_ms);
    println!("phase         {}", s.phase);
    println!("verification  {}", s.verification);
    println!(
        "objects       {} queued, {} verified, {} corrupt",
        c.objects, c.verified, c.corrupt
    );
    println!("preserved     {} piece(s), {} byte(s)", c.pieces, c.bytes);
    println!("holders       {}", c.holders);
    println!(
        "purged        {} ({} piece(s) deleted)",
        s.purged, c.purged_pieces
    );
    println!("retain until  {}", s.retain_until_ms);
    println!("hold          {}", if s.hold { "on" } else { "off" });
    if let Some(next) = s.next_purge_ms {
        println!("next purge    {next}");
    }
    if let Some(next) = next_step_ms {
        println!("next step     {next}");
    }
    if let Some(error) = &s.last_error {
        println!("last error    {error}");
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use custodian::clock::SystemClock;
    use custodian::serve::plugins::shared::{self, Member, SharedSet};

    use super::*;
    use crate::cli::options::LogFormat;

    fn global() -> Global {
        Global {
            cache_dir: None,
            no_cache: true,
            config: None,
            verbose: 0,
            log_format: LogFormat::Text,
        }
    }

    fn environment(data: &std::path::Path) -> Environment {
        let retention = RetentionArgs {
            retention_plugin: "builtin:retention".into(),
            retention_ms: 1,
            noncurrent_retention_ms: 0,
        };
        let data = DataArgs {
            data: data.to_owned(),
        };
        Environment::open(&global(), &data, &retention, Arc::new(SystemClock))
            .unwrap_or_else(|f| panic!("{}", f.error()))
    }

    /// Publishes a set naming `hash` as the takedown plugin.
    fn publish(environment: &Environment, hash: &str) -> shared::SetRow {
        let set = SharedSet {
            worlds: BTreeMap::from([(
                World::Takedown.name().to_owned(),
                Member {
                    hash: hash.to_owned(),
                    size: 1,
                    source: "test".into(),
                },
            )]),
            by: "test".into(),
            at_ms: 1,
        };
        environment
            .io
            .block_on(shared::publish(environment.kv.as_ref(), None, set))
            .unwrap()
            .expect("the first set is published")
    }

    #[test]
    fn on_a_directory_no_server_ran_on_the_commits_carry_no_set_guard() {
        let data = tempfile::tempdir().unwrap();
        let environment = environment(data.path());
        let (_, guards) = environment.plugin(None, true).unwrap();
        assert!(guards.is_empty(), "{guards:?}");
    }

    #[test]
    fn the_sets_plugin_commits_guarded_on_the_set_row_as_a_servers_steps_do() {
        let data = tempfile::tempdir().unwrap();
        let environment = environment(data.path());
        let bundled = custodian::bundled::plugin(World::Takedown).unwrap();
        let row = publish(&environment, &custodian::runtime::content_hash(bundled));
        let (plugin, guards) = environment.plugin(Some("builtin:takedown"), true).unwrap();
        assert_eq!(plugin.info().worlds, vec![World::Takedown]);
        assert_eq!(guards, vec![shared::guard(&row)]);
    }

    #[test]
    fn a_plugin_the_set_does_not_name_may_read_but_not_change_state() {
        let data = tempfile::tempdir().unwrap();
        let environment = environment(data.path());
        publish(&environment, &"0".repeat(64));
        let refused = environment.plugin(Some("builtin:takedown"), true);
        assert!(matches!(refused, Err(Failure::Usage(_))));
        let (_, guards) = environment.plugin(Some("builtin:takedown"), false).unwrap();
        assert!(guards.is_empty(), "a read commits nothing: {guards:?}");
    }
}
