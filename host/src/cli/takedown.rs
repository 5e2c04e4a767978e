//! `custodian takedown …`: file a takedown, read its status, set its
//! hold, with the node's plugins assembled as `serve` assembles them
//! ([`super::assembly`]).

use std::sync::Arc;

use anyhow::{Context, anyhow};
use clap::{Args, Subcommand};
use custodian::clock::Clock;
use custodian::content::ObjectId;
use custodian::kv::{Kv, Precondition};
use custodian::policy::PolicyError;
use custodian::policy::requests::{self, Action, RequestError, Settled};
use custodian::policy::takedown::{self, Request, TakedownPolicy};
use custodian::runtime::{CallContext, World};
use custodian::timers;
use serde_json::json;

use super::assembly::{self, Assembled};
use super::options::{DataArgs, Global, RetentionArgs};
use super::plugin_spec::source;
use super::{Failure, Outcome};

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
    /// The command returns once every object the request names is denied
    /// (pack members at every depth, a large file's chunks): from then
    /// on, reading or pushing any of them is refused (HTTP 451, `repo
    /// get` and `repo push` exit 4). Past 20 s it returns anyway, saying
    /// the denial is pending; the request's steps finish it first thing.
    /// The request is recorded with its timer due now, so the next
    /// `custodian tick` starts preserving. --json prints {"id": ..,
    /// "denial_settled": true|false}.
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
    /// Phases in order: seed, acquire, closure, discover, remove (the
    /// serving copies, once preserved), retain, purging, purged. The last error is the policy's (e.g. a corrupt
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
    /// Withdraw a request: lift its denials, so its content is served
    /// again.
    ///
    /// Refused (exit 1) once purging has begun, or when withdrawn
    /// already. A legal hold does not block it: the hold keeps the
    /// preserved copy, which then follows retention as any other. Returns
    /// once every denial is lifted (past 20 s, saying the lifting is
    /// pending: the request's steps finish it).
    #[command(verbatim_doc_comment)]
    Withdraw {
        #[command(flatten)]
        policy: TakedownPolicyArgs,
        /// The request id.
        id: String,
        /// When, ms since the epoch [default: now].
        #[arg(long, value_name = "MS")]
        now: Option<u64>,
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
    /// Keep a request's preserved evidence longer: its lock's retain-until
    /// moves to `--until`.
    ///
    /// A request keeps its evidence until the retain-until the retention
    /// policy answered when it was filed; changing the retention settings
    /// later governs new requests only. This is how an existing one is
    /// kept longer: explicitly, audited as `takedown/extend`. Refused
    /// (exit 1) once purging has begun, and when `--until` is not later
    /// than the retain-until in force (a retain-until never shrinks).
    #[command(verbatim_doc_comment)]
    Extend {
        #[command(flatten)]
        policy: TakedownPolicyArgs,
        /// The request id.
        id: String,
        /// The new retain-until, ms since the epoch.
        #[arg(long, value_name = "MS")]
        until: u64,
        /// When, ms since the epoch [default: now].
        #[arg(long, value_name = "MS")]
        now: Option<u64>,
    },
}

impl TakedownPolicyArgs {
    /// Opens the data directory with `clock` and assembles its plugins
    /// for a command that `changes` state or only reads.
    fn open(
        &self,
        global: &Global,
        clock: Arc<dyn Clock>,
        changes: bool,
    ) -> Result<Assembled, Failure> {
        let takedown = self
            .plugin
            .as_deref()
            .map(|spec| source(spec, World::Takedown))
            .transpose()?;
        let request = assembly::Request {
            retention: Some(&self.retention),
            takedown,
            changes,
        };
        assembly::open(global, &self.data, clock, request, |_| {})
    }
}

impl TakedownPolicyArgs {
    /// Runs operator action `act` on the data directory, on `clock` (now,
    /// or the `--now` a command was given): the node assembled to change
    /// state, the current takedown plugin, the guards its plans commit
    /// under, and the operator. An action that did not take effect fails
    /// the command by its kind.
    fn act<T>(
        &self,
        global: &Global,
        clock: Arc<dyn Clock>,
        act: impl FnOnce(
            &TakedownPolicy,
            &dyn Fn() -> Arc<CallContext>,
            &tokio::runtime::Handle,
            &dyn Kv,
            Action<'_>,
        ) -> Result<T, RequestError>,
    ) -> Result<T, Failure> {
        let opened = self.open(global, clock.clone(), true)?;
        let (plugin, guards) = for_action(&opened)?;
        // A command on the data directory has no principal: whoever can
        // open the directory acts, under the name they give.
        let actor = format!("operator:{}", self.operator);
        let action = Action {
            actor: &actor,
            now_ms: clock.now_ms(),
            guard: &guards,
        };
        act(
            &plugin,
            &|| opened.assembly.plugins.takedown_call(&plugin),
            opened.io.handle(),
            opened.assembly.kv.as_ref(),
            action,
        )
        .map_err(request_failure)
    }
}

/// The current takedown policy and the guards an action it plans must
/// commit under (the authority epoch and the shared plugin set).
fn for_action(opened: &Assembled) -> Result<(Arc<TakedownPolicy>, Vec<Precondition>), Failure> {
    opened
        .io
        .block_on(opened.assembly.plugins.takedown_for_action())
        .map_err(|e| {
            Failure::of_kind(
                e.kind(),
                anyhow!(e).context("cannot read the authority epoch"),
            )
        })
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
            let request = Request::new(repository, clock.now_ms(), objects, pack);
            let settled = policy.act(global, clock, |plugin, call, io, kv, action| {
                // The CLI runs no workers: the first step is deferred
                // until `start`, for any serving host to take.
                requests::create(plugin, call, io, kv, &request, action, None)?;
                let settled = requests::settle(plugin, call, io, kv, &request.id, action)?;
                requests::start(io, kv, &request.id, action.now_ms)?;
                Ok(settled)
            })?;
            let id = hex(&request.id);
            if json {
                println!(
                    "{}",
                    json!({ "id": id, "denial_settled": settled == Settled::Done })
                );
            } else {
                println!("{id}");
            }
            if settled == Settled::Pending {
                eprintln!("the denial of {id} is still being activated; its next step finishes it");
            }
            Ok(())
        }
        TakedownCommand::Status { policy, id, json } => {
            let id = parse_id(&id, "request id")?;
            let opened = policy.open(global, clock(None), false)?;
            let plugins = &opened.assembly.plugins;
            let plugin = plugins.takedown();
            let mut status = plugin
                .status(plugins.takedown_call(&plugin), &id)
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
            let timer = opened
                .io
                .block_on(timers::get(
                    opened.assembly.kv.as_ref(),
                    takedown::KIND,
                    &id,
                ))
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
        TakedownCommand::Withdraw { policy, id, now } => {
            let id = parse_id(&id, "request id")?;
            let settled = policy.act(global, clock(now), |plugin, call, io, kv, action| {
                requests::withdraw(plugin, call, io, kv, &id, action)?;
                requests::settle(plugin, call, io, kv, &id, action)
            })?;
            match settled {
                Settled::Done => eprintln!("withdrew {}: its denials are lifted", hex(&id)),
                Settled::Pending => eprintln!(
                    "withdrew {}: its denials are still being lifted; its next step finishes it",
                    hex(&id)
                ),
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
            let enabled = state == "on";
            policy.act(global, clock(now), |plugin, call, io, kv, action| {
                requests::hold(plugin, call, io, kv, &id, enabled, action)
            })?;
            eprintln!(
                "legal hold {} for {}",
                if enabled { "set" } else { "cleared" },
                hex(&id)
            );
            Ok(())
        }
        TakedownCommand::Extend {
            policy,
            id,
            until,
            now,
        } => {
            let id = parse_id(&id, "request id")?;
            policy.act(global, clock(now), |_, _, io, kv, action| {
                requests::extend(io, kv, &id, until, action)
            })?;
            eprintln!("{} is retained until {until}", hex(&id));
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
    match &s.denial {
        None => println!("denial        none (the plugin predates denial)"),
        Some(d) => {
            let state = match (d.withdrawn_ms, d.settled) {
                (None, true) => format!("active since {}", d.since_ms),
                (None, false) => format!("activating since {}", d.since_ms),
                (Some(at), true) => format!("lifted (withdrawn at {at})"),
                (Some(at), false) => format!("lifting (withdrawn at {at})"),
            };
            println!("denial        {state}, {} object(s) denied", d.denied);
            println!(
                "serving       {} cop(ies) removed, {} restored",
                d.removed, d.restored
            );
        }
    }
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
    use custodian::node::Node;
    use custodian::plugin_set::shared::{self, Member, SharedSet};

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

    /// The arguments of a takedown command on `data` naming `plugin`.
    fn args(data: &std::path::Path, plugin: Option<&str>) -> TakedownPolicyArgs {
        TakedownPolicyArgs {
            data: DataArgs {
                data: data.to_owned(),
            },
            plugin: plugin.map(str::to_owned),
            operator: "test".into(),
            retention: RetentionArgs {
                retention_plugin: None,
                retention_ms: 1,
                noncurrent_retention_ms: 0,
            },
        }
    }

    fn open(data: &std::path::Path, plugin: Option<&str>, changes: bool) -> Assembled {
        args(data, plugin)
            .open(&global(), Arc::new(SystemClock), changes)
            .unwrap_or_else(|f| panic!("{}", f.error()))
    }

    /// Publishes, as a server would have, a set naming `hash` as the
    /// takedown plugin.
    fn publish(data: &std::path::Path, hash: &str) -> shared::SetRow {
        let set = SharedSet {
            worlds: BTreeMap::from([(
                World::Takedown.name().to_owned(),
                Member {
                    hash: hash.to_owned(),
                    size: 1,
                    source: "test".into(),
                    signature: None,
                },
            )]),
            by: "test".into(),
            at_ms: 1,
        };
        let io = crate::cli::io_runtime().unwrap();
        let node = Node::open_local(data, Arc::new(SystemClock)).unwrap();
        io.block_on(shared::publish(node.kv().as_ref(), None, set))
            .unwrap()
            .expect("the first set is published")
    }

    fn takedown_hash(opened: &Assembled) -> String {
        let current = opened.assembly.plugins.current(World::Takedown);
        current.plugin().info().hash.clone()
    }

    #[test]
    fn on_a_directory_no_server_ran_on_the_commits_are_guarded_on_there_being_no_set() {
        let data = tempfile::tempdir().unwrap();
        let opened = open(data.path(), None, true);
        let (_, guards) = for_action(&opened).unwrap();
        assert!(guards.contains(&shared::guard(None)), "{guards:?}");
        let handler = opened.assembly.handlers.get(takedown::KIND).unwrap();
        assert_eq!(handler.guards().to_vec(), vec![shared::guard(None)]);
    }

    #[test]
    fn the_sets_plugin_commits_guarded_on_the_set_row_as_a_servers_steps_do() {
        let data = tempfile::tempdir().unwrap();
        let bundled = custodian::bundled::plugin(World::Takedown).unwrap();
        let hash = custodian::runtime::content_hash(bundled);
        let row = publish(data.path(), &hash);
        let opened = open(data.path(), Some("builtin:takedown"), true);
        assert_eq!(takedown_hash(&opened), hash);
        let (_, guards) = for_action(&opened).unwrap();
        assert!(guards.contains(&shared::guard(Some(&row))), "{guards:?}");
        let handler = opened.assembly.handlers.get(takedown::KIND).unwrap();
        assert_eq!(handler.guards().to_vec(), vec![shared::guard(Some(&row))]);
    }

    #[test]
    fn a_plugin_the_set_does_not_name_may_read_but_not_change_state() {
        let data = tempfile::tempdir().unwrap();
        publish(data.path(), &"0".repeat(64));
        let refused = args(data.path(), Some("builtin:takedown")).open(
            &global(),
            Arc::new(SystemClock),
            true,
        );
        assert!(matches!(refused, Err(Failure::Usage(_))));
        let opened = open(data.path(), Some("builtin:takedown"), false);
        let bundled = custodian::bundled::plugin(World::Takedown).unwrap();
        assert_eq!(
            takedown_hash(&opened),
            custodian::runtime::content_hash(bundled),
            "a read runs the plugin it names"
        );
    }
}
