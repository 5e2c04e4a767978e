//! `custodian plugin test`: a table of cases run against a built plugin.

use std::sync::Arc;

use anyhow::{Context, anyhow};
use clap::Args;
use custodian::clock::{Clock, FixedClock, SystemClock};
use custodian::runtime::cases::{self, Case, Difference};
use custodian::runtime::{CallContext, Grants, Limits, Plugin, Services, World};
use serde_json::{Value, json};

use crate::cli::options::Global;
use crate::cli::plugin_spec::load;
use crate::cli::{Failure, Outcome, io_runtime, runtime};

/// `custodian plugin test`'s arguments.
#[derive(Debug, Args)]
pub struct TestArgs {
    /// A `.wasm` file, or `builtin:WORLD` for a bundled plugin.
    pub plugin: String,
    /// The cases: a JSON array of {"name", "function", "input", "expect"},
    /// in the JSON form `custodian run` takes and prints.
    #[arg(long, value_name = "FILE")]
    pub cases: std::path::PathBuf,
    /// The world whose functions the cases call [default: the plugin's
    /// only world].
    #[arg(long)]
    pub world: Option<World>,
    /// Run only the cases whose name contains this text.
    #[arg(long, value_name = "TEXT")]
    pub filter: Option<String>,
    /// Pin the clock the plugin sees, in ms since the epoch (for policies
    /// that read the clock instead of taking the time as input).
    #[arg(long, value_name = "MS")]
    pub now: Option<u64>,
    /// Print one JSON report instead of a line per case.
    #[arg(long)]
    pub json: bool,
}

/// How one case ended.
enum Verdict {
    Passed,
    /// The answer differs from `expect` at these places.
    Differs(Value, Vec<Difference>),
    /// No answer: the function is missing, the input does not fit it, or
    /// the call trapped or ran out of a limit.
    Failed(String),
}

pub(super) fn run(global: &Global, args: &TestArgs) -> Outcome {
    let text = std::fs::read_to_string(&args.cases)
        .with_context(|| format!("cannot read the cases file {}", args.cases.display()))
        .map_err(Failure::Usage)?;
    let mut table = cases::parse(&text)
        .with_context(|| format!("{} is not a usable cases file", args.cases.display()))
        .map_err(Failure::Usage)?;
    if let Some(filter) = &args.filter {
        table.retain(|case| case.name.contains(filter.as_str()));
        if table.is_empty() {
            return Err(Failure::Usage(anyhow!(
                "no case's name contains {filter:?}"
            )));
        }
    }
    let runtime = runtime(global)?;
    let plugin = load(&runtime, &args.plugin)?;
    let world = world_of(&plugin, args.world)?;
    let io = io_runtime()?;
    let clock: Arc<dyn Clock> = match args.now {
        Some(now) => Arc::new(FixedClock::new(now)),
        None => Arc::new(SystemClock),
    };
    let verdicts: Vec<(&Case, Verdict)> = table
        .iter()
        .map(|case| {
            // A fresh, empty state per case: no case sees what another
            // wrote, so the table's order does not matter.
            let call = Arc::new(CallContext {
                services: Services::isolated(clock.clone(), io.handle().clone()),
                grants: Grants::none(),
                limits: Limits::default(),
                actor: plugin.info().actor(),
            });
            (case, judge(&plugin, world, case, call))
        })
        .collect();
    let failed = verdicts
        .iter()
        .filter(|(_, v)| !matches!(v, Verdict::Passed))
        .count();
    if args.json {
        println!("{}", report_json(&plugin, world, &verdicts, failed));
    } else {
        report_text(&plugin, world, &verdicts, failed);
    }
    if failed > 0 {
        return Err(Failure::Failed(anyhow!(
            "{failed} of {} cases failed",
            verdicts.len()
        )));
    }
    Ok(())
}

/// The world the cases call: `named`, which the plugin must implement, or
/// the plugin's only one.
fn world_of(plugin: &Plugin, named: Option<World>) -> Result<World, Failure> {
    if let Some(world) = named {
        plugin
            .expect_world(world)
            .map_err(|e| Failure::Usage(e.into()))?;
        return Ok(world);
    }
    match plugin.info().worlds.as_slice() {
        [world] => Ok(*world),
        [] => Err(Failure::Usage(anyhow!(
            "{} exports no custodian:policy world",
            plugin.info().source
        ))),
        several => {
            let names: Vec<&str> = several.iter().map(|w| w.name()).collect();
            Err(Failure::Usage(anyhow!(
                "{} implements several worlds ({}); pass --world",
                plugin.info().source,
                names.join(", ")
            )))
        }
    }
}

fn judge(plugin: &Plugin, world: World, case: &Case, call: Arc<CallContext>) -> Verdict {
    let function = match &case.function {
        Some(function) => function.clone(),
        None => match only_function(plugin, world) {
            Ok(function) => function,
            Err(problem) => return Verdict::Failed(problem),
        },
    };
    let answer = plugin
        .function(world.name(), &function)
        .and_then(|f| f.call_json(call, &case.input));
    match answer {
        Err(error) => Verdict::Failed(format!("{function}: {error}")),
        Ok(got) => {
            let found = cases::differences(&case.expect, &got);
            if found.is_empty() {
                Verdict::Passed
            } else {
                Verdict::Differs(got, found)
            }
        }
    }
}

/// The world's function, for a case that names none: there must be one.
fn only_function(plugin: &Plugin, world: World) -> Result<String, String> {
    let interface = format!("custodian:policy/{}@", world.interface());
    // Signatures read `name(params) -> result`.
    let functions: Vec<&str> = plugin
        .info()
        .exports
        .iter()
        .filter(|export| export.name.starts_with(&interface))
        .flat_map(|export| &export.functions)
        .map(|signature| signature.split('(').next().unwrap_or(signature))
        .collect();
    match functions.as_slice() {
        [only] => Ok((*only).to_owned()),
        _ => Err(format!(
            "the case names no function, and the {world} world exports {}: add \"function\"",
            functions.len()
        )),
    }
}

fn report_text(plugin: &Plugin, world: World, verdicts: &[(&Case, Verdict)], failed: usize) {
    let info = plugin.info();
    println!(
        "plugin {} (blake3:{}), {world} world",
        info.source,
        &info.hash[..16]
    );
    for (case, verdict) in verdicts {
        match verdict {
            Verdict::Passed => println!("ok    {}", case.name),
            Verdict::Differs(_, found) => {
                println!("FAIL  {}", case.name);
                for difference in found {
                    println!("      {}", describe(difference));
                }
            }
            Verdict::Failed(problem) => {
                println!("FAIL  {}", case.name);
                println!("      no answer: {problem}");
            }
        }
    }
    println!(
        "{} cases: {} passed, {failed} failed",
        verdicts.len(),
        verdicts.len() - failed
    );
}

/// One difference on a line: where, what was expected, what came.
fn describe(difference: &Difference) -> String {
    let path = if difference.path.is_empty() {
        "the answer"
    } else {
        difference.path.as_str()
    };
    match (&difference.expected, &difference.got) {
        (Some(expected), Some(got)) => format!("{path}: expected {expected}, got {got}"),
        (Some(expected), None) => format!("{path}: expected {expected}, got nothing"),
        (None, Some(got)) => format!("{path}: not expected, got {got}"),
        (None, None) => format!("{path}: differs"),
    }
}

fn report_json(
    plugin: &Plugin,
    world: World,
    verdicts: &[(&Case, Verdict)],
    failed: usize,
) -> Value {
    let info = plugin.info();
    let rows: Vec<Value> = verdicts
        .iter()
        .map(|(case, verdict)| {
            let mut row = json!({"name": case.name, "passed": matches!(verdict, Verdict::Passed)});
            match verdict {
                Verdict::Passed => {}
                Verdict::Differs(got, found) => {
                    row["expect"] = case.expect.clone();
                    row["got"] = got.clone();
                    row["differences"] = json!(found);
                }
                Verdict::Failed(problem) => {
                    row["expect"] = case.expect.clone();
                    row["error"] = json!(problem);
                }
            }
            row
        })
        .collect();
    json!({
        "plugin": info.source,
        "hash": format!("blake3:{}", info.hash),
        "world": world.name(),
        "cases": verdicts.len(),
        "passed": verdicts.len() - failed,
        "failed": failed,
        "results": rows,
    })
}
