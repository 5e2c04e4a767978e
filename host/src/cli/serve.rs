//! `custodian serve` (the long-running host) and `custodian config`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow};
use clap::{Args, Subcommand};
use custodian::clock::{Clock, SystemClock};
use custodian::config::server::DEFAULT_CREDENTIAL_CACHE_MS;
use custodian::config::{Config, DEFAULT_LISTEN};
use custodian::node::{AssemblyError, AssemblyOptions, Entry, Node, PluginPlan};
use custodian::plugin_set::{PluginSet, SwapError};
use custodian::principals::Principals;
use custodian::runtime::{Limits, RuntimeConfig, World};
use custodian::serve::delivery::{Delivery, DeliveryParts};
use custodian::serve::http::listen::ListenLimits;
use custodian::serve::jobs::{Board, JobLimits, Jobs};
use custodian::serve::metrics::Metrics;
use custodian::serve::probation::Probation;
use custodian::serve::workers::{WorkerParts, WorkerSettings, Workers};
use custodian::serve::{Auth, Host, Readiness, RequestLimits, Token, http};
use custodian::timers::governor::Governor;
use tokio::signal::unix::{SignalKind, signal};

use super::options::Global;
use super::{Failure, Outcome, node_failure};

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The data directory [default: `[server] data`, else
    /// $XDG_DATA_HOME/custodian, else ~/.local/share/custodian].
    #[arg(long, env = "CUSTODIAN_DATA", value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// The address to listen on [default: `[server] listen`, else
    /// 127.0.0.1:7420]. Port 0 picks a free port (printed on stdout).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<std::net::SocketAddr>,
    /// Also answer the S3 API on this address [default: `[s3] listen`, else
    /// none]. Port 0 picks a free port (printed on stdout).
    #[arg(long, value_name = "ADDR")]
    pub s3_listen: Option<std::net::SocketAddr>,
    /// Timer worker loops [default: `[server] workers`, else 8].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub workers: Option<u32>,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print a commented configuration file with every setting.
    Example,
    /// Check a configuration file: exit 0 if `custodian serve` would
    /// accept it, 2 with the reason if not.
    Check {
        /// The file.
        file: PathBuf,
    },
}

fn usage(error: impl Into<anyhow::Error>) -> Failure {
    Failure::Usage(error.into())
}

fn failed(error: impl Into<anyhow::Error>) -> Failure {
    Failure::Failed(error.into())
}

pub(super) fn config_command(command: ConfigCommand) -> Outcome {
    match command {
        ConfigCommand::Example => {
            print!("{}", custodian::config::EXAMPLE);
            Ok(())
        }
        ConfigCommand::Check { file } => {
            Config::load(&file).map_err(usage)?;
            eprintln!("{}: valid", file.display());
            Ok(())
        }
    }
}

/// Timer worker loops when neither `--workers` nor `[server] workers`
/// says: a step spends much of its time waiting on fsync, so loops beyond
/// the cores keep requests moving side by side (their commits share
/// fsyncs), and each is one more due-timer scan every idle poll. Measured
/// with `takedown_scale -- serve 1000 10`: 10 concurrent requests took
/// 3.6–4.2× one alone with 2 loops, 2.4× with 8.
const DEFAULT_WORKERS: u32 = 8;

/// `$XDG_DATA_HOME/custodian`, else `~/.local/share/custodian`.
fn default_data_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".local/share")))
        .map(|base| base.join("custodian"))
}

/// Everything `serve` resolved from its flags and the configuration.
struct Plan {
    config: Config,
    config_path: Option<PathBuf>,
    data: PathBuf,
    listen: std::net::SocketAddr,
    s3_listen: Option<std::net::SocketAddr>,
    workers: u32,
    drain: Duration,
    limits: RequestLimits,
    listen_limits: ListenLimits,
}

fn plan(global: &Global, args: &ServeArgs) -> Result<Plan, Failure> {
    let config = super::config(global)?.unwrap_or_default();
    let data = args
        .data
        .clone()
        .or_else(|| config.server.data.clone())
        .or_else(default_data_dir)
        .ok_or_else(|| usage(anyhow!("no data directory: pass --data DIR")))?;
    let listen = args.listen.or(config.server.listen).unwrap_or_else(|| {
        DEFAULT_LISTEN
            .parse()
            .expect("the default listen address parses")
    });
    // Checked when the file was read; checked again here so a bad value
    // can never pass as a default.
    let limits = config
        .server
        .request_limits()
        .map_err(|e| usage(anyhow!(e)))?;
    let listen_limits = config
        .server
        .listen_limits()
        .map_err(|e| usage(anyhow!(e)))?;
    if let Some(domain) = &config.s3.domain
        && (domain.is_empty()
            || !domain
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-'))
    {
        return Err(usage(anyhow!(
            "[s3] domain {domain:?} is not a host name (letters, digits, '.' and '-'; no \
             scheme or port)"
        )));
    }
    Ok(Plan {
        workers: args
            .workers
            .or(config.server.workers)
            .unwrap_or(DEFAULT_WORKERS),
        drain: Duration::from_millis(config.server.drain_ms.unwrap_or(10_000)),
        s3_listen: args.s3_listen.or(config.s3.listen),
        limits,
        listen_limits,
        config_path: global.config.clone(),
        config,
        data,
        listen,
    })
}

/// The token: `$CUSTODIAN_TOKEN`, else the configured file, else
/// `DATA/token` (created with a fresh token, owner read-only).
fn token(config: &Config, data: &Path) -> Result<Token, Failure> {
    if let Ok(text) = std::env::var("CUSTODIAN_TOKEN") {
        return Token::new(&text)
            .map_err(|e| usage(anyhow!("$CUSTODIAN_TOKEN is not a usable token: {e}")));
    }
    let configured = config.server.token_file.is_some();
    let path = config
        .server
        .token_file
        .clone()
        .unwrap_or_else(|| data.join("token"));
    match std::fs::read_to_string(&path) {
        Ok(text) => Token::new(&text).map_err(|e| {
            usage(anyhow!(
                "the token in {} is not usable: {e}",
                path.display()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !configured => {
            let token = Token::generate().map_err(|e| failed(anyhow!("no randomness: {e}")))?;
            write_secret(&path, token.expose())
                .with_context(|| format!("cannot write the token to {}", path.display()))
                .map_err(failed)?;
            tracing::info!(path = %path.display(), "wrote a new API token");
            Ok(token)
        }
        Err(e) => Err(usage(
            anyhow!(e).context(format!("cannot read the token file {}", path.display())),
        )),
    }
}

/// Writes `text` to a new file only its owner can read.
fn write_secret(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(text.as_bytes())?;
    file.write_all(b"\n")?;
    file.sync_all()
}

pub(super) fn run(global: &Global, args: &ServeArgs) -> Outcome {
    let plan = plan(global, args)?;
    let io = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(
            std::thread::available_parallelism()
                .map_or(2, usize::from)
                .max(2),
        )
        .enable_all()
        .thread_name("custodian-serve")
        .build()
        .context("cannot start the server's runtime")
        .map_err(failed)?;
    let outcome = io.block_on(serve(global, plan));
    // A plugin call abandoned at the drain deadline may still be running
    // on a blocking thread (until its own time limit); its result is
    // dropped unseen, so nothing of it can commit, and waiting for it
    // would only delay the exit.
    io.shutdown_timeout(Duration::from_millis(100));
    outcome
}

/// How much longer than its plugin's time limit a step claim lasts: the
/// step's commit and a loaded machine's scheduling delays.
const STEP_CLAIM_MARGIN: Duration = Duration::from_secs(10);

/// How often a host reads the shared plugin set for other hosts' swaps: a
/// host behind it commits nothing, so this bounds how long it idles after
/// a swap elsewhere, at the cost of one small KV read a second.
const SHARED_SET_POLL: Duration = Duration::from_secs(1);

async fn serve(global: &Global, plan: Plan) -> Outcome {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let metrics = Arc::new(Metrics::new());
    let node = Node::open(&plan.data, plan.config.clone(), clock.clone())
        .await
        .map_err(node_failure)?;
    let node_name = node.name().map_err(node_failure)?;
    let token = token(&plan.config, &plan.data)?;
    let mut runtime = RuntimeConfig::default();
    if global.no_cache {
        runtime.cache_dir = None;
    } else if let Some(dir) = &global.cache_dir {
        runtime.cache_dir = Some(dir.clone());
    }
    let plugin_plan = PluginPlan::configured(&plan.config).map_err(node_failure)?;
    // A step may run as long as its plugin's time limit; a claim outlives
    // that by a margin for the step's commit.
    let step_claim = plugin_plan
        .settings
        .get(&World::Takedown)
        .map_or(Limits::default().timeout, |s| s.limits.timeout)
        + STEP_CLAIM_MARGIN;
    let timer_limits = plan.config.timers.limits().map_err(|e| usage(anyhow!(e)))?;
    let probation = plan
        .config
        .probation
        .settings()
        .map_err(|e| usage(anyhow!(e)))?;
    let step_store_calls = plan
        .config
        .plugins
        .worlds
        .get(World::Takedown.name())
        .and_then(|p| p.step_store_calls)
        .unwrap_or(256);
    let assembly = node
        .assemble(AssemblyOptions {
            runtime,
            plan: plugin_plan,
            entry: Entry::Join,
            metrics: Some(metrics.clone()),
        })
        .await
        .map_err(|e| match e {
            // The configured plugin was refused: the message is the reason.
            AssemblyError::Plugins(SwapError::Refused(_)) | AssemblyError::Node(_) => {
                Failure::of_kind(e.kind(), e.into())
            }
            AssemblyError::Plugins(_) => Failure::of_kind(
                e.kind(),
                anyhow!(e).context("cannot join the shared plugin set"),
            ),
        })?;
    let (kv, stores, plugins) = (assembly.kv, assembly.stores, assembly.plugins);
    plugins.replay_before_swap(probation.replay_timers);
    tokio::spawn(follow_shared_set(plugins.clone()));

    let workers = Workers::start(
        WorkerParts {
            kv: kv.clone(),
            clock: clock.clone(),
            handlers: assembly.handlers,
            coordinator: assembly.coordinator,
            metrics: metrics.clone(),
            governor: Arc::new(Governor::new(timer_limits.governor)),
            probation: Arc::new(Probation::new(
                probation,
                plugins.clone(),
                kv.clone(),
                metrics.clone(),
            )),
        },
        &WorkerSettings {
            count: plan.workers,
            step_store_calls,
            drain: plan.drain,
            node: node_name.clone(),
            // Only hosts sharing a KV can run the same step; one alone on
            // its redb file has nobody to keep away.
            claim: node.shares_kv().then_some(step_claim),
            min_step_interval_ms: timer_limits.min_step_interval_ms,
        },
    );
    let deliveries = plan
        .config
        .invalidation
        .settings()
        .map_err(|e| usage(anyhow!(e)))?;
    match &deliveries.webhook {
        Some(webhook) => tracing::info!(%webhook, "delivering cache invalidations"),
        None => tracing::info!(
            "no [invalidation] webhook: cache invalidations wait for a pull consumer \
             (GET /v1/invalidations)"
        ),
    }
    let delivery = Delivery::start(
        DeliveryParts {
            kv: kv.clone(),
            clock: clock.clone(),
            metrics: metrics.clone(),
            node: node_name.clone(),
            shares_kv: node.shares_kv(),
        },
        deliveries,
        plan.drain,
    );
    let jobs = Arc::new(Jobs::shared(
        JobLimits::default(),
        Board::new(kv.clone(), node_name.clone(), clock.clone()),
    ));
    let cache_ms = plan
        .config
        .server
        .credential_cache_ms
        .unwrap_or(DEFAULT_CREDENTIAL_CACHE_MS);
    let principals = Arc::new(Principals::new(
        kv.clone(),
        clock.clone(),
        Duration::from_millis(cache_ms),
    ));
    principals
        .register_bootstrap(token.expose())
        .await
        .map_err(|e| {
            Failure::of_kind(
                e.kind(),
                anyhow!(e).context("cannot register the bootstrap token"),
            )
        })?;
    let access = plan
        .config
        .server
        .access_checks
        .unwrap_or(true)
        .then(|| plugins.access());
    let host = Arc::new(Host {
        kv,
        clock,
        stores,
        plugins,
        metrics: metrics.clone(),
        jobs,
        auth: Auth {
            principals,
            read_access: plan.config.server.read_access,
            access,
        },
        bodies: plan.limits.bodies(metrics),
        limits: plan.limits,
        readiness: Readiness::default(),
        wake_workers: workers.waker(),
        first_steps: Some(workers.first_steps()),
    });

    let listener = listen(plan.listen)
        .with_context(|| format!("cannot listen on {}", plan.listen))
        .map_err(usage)?;
    let address = listener.local_addr().map_err(failed)?;
    let s3_listener = match plan.s3_listen {
        Some(s3) => Some(
            listen(s3)
                .with_context(|| format!("cannot listen on {s3} for the S3 endpoint"))
                .map_err(usage)?,
        ),
        None => None,
    };
    // The lines on stdout: scripts and tests read the addresses from them
    // (the API's first, always; the S3 endpoint's after it, when served).
    println!("listening on http://{address}");
    if let Some(s3) = &s3_listener {
        println!("s3 endpoint on http://{}", s3.local_addr().map_err(failed)?);
    }
    let _ = std::io::stdout().flush();
    tracing::info!(%address, data = %plan.data.display(), node = %node_name, "serving");

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(signals(host.clone(), plan.config_path.clone(), stop_tx));
    let mut stopped = stop_rx.clone();
    let server = http::listen::serve(
        listener,
        http::router(host.clone()),
        plan.listen_limits,
        host.metrics.clone(),
        async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        },
    );
    let s3_serving = s3_listener.map(|listener| {
        let mut stopped = stop_rx.clone();
        tokio::spawn(http::listen::serve(
            listener,
            custodian::serve::s3::router(host.clone(), plan.config.s3.domain.clone()),
            plan.listen_limits,
            host.metrics.clone(),
            async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            },
        ))
    });
    // The servers drain requests while the workers drain steps and the
    // delivery worker its delivery in flight.
    let drain = plan.drain;
    let serving = tokio::spawn(async move {
        server.await;
        if let Some(s3) = s3_serving {
            // A panic in the S3 server is logged by the runtime; the API
            // server's outcome is what `serve` reports.
            let _ = s3.await;
        }
    });
    let mut stopped = stop_rx;
    let _ = stopped.wait_for(|stop| *stop).await;
    let (_, _, served) = tokio::join!(workers.stop(), delivery.stop(), async {
        tokio::time::timeout(drain, serving).await
    });
    match served {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(failed(anyhow!(e).context("the HTTP server panicked"))),
        Err(_) => tracing::warn!("requests were still in flight after the drain period"),
    }
    tracing::info!("shut down");
    Ok(())
}

/// Connections the kernel completes and queues for the accept loop: a
/// burst (a flood of strangers, or many clients at once) waits there for
/// the loop instead of having its handshakes dropped, which costs every
/// client caught in it a second's retry, `/healthz` probes included (seen
/// with the default of 128 under a 300-connection slowloris). The kernel
/// caps it at `net.core.somaxconn`.
const LISTEN_BACKLOG: u32 = 4096;

/// A listening socket on `address` with [`LISTEN_BACKLOG`].
fn listen(address: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if address.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    // As `TcpListener::bind` does: a restarted server can take its port
    // back while the old connections linger in TIME_WAIT.
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Follows the shared plugin set (swaps made on other hosts) for as long
/// as the server runs; a failure is logged and retried at the next poll.
async fn follow_shared_set(plugins: Arc<PluginSet>) {
    let mut failing = false;
    loop {
        tokio::time::sleep(SHARED_SET_POLL).await;
        match plugins.follow().await {
            Ok(_) if failing => {
                failing = false;
                tracing::info!("this host follows the shared plugin set again");
            }
            Ok(_) => {}
            // Once per failure spell: the poll repeats every second.
            Err(e) if !failing => {
                failing = true;
                tracing::error!(
                    "cannot follow the shared plugin set; this host's steps and actions \
                     fail their set guard until it can: {:#}",
                    anyhow!(e)
                );
            }
            Err(_) => {}
        }
    }
}

/// Waits for signals: SIGTERM/SIGINT stop the server; SIGHUP reloads.
async fn signals(
    host: Arc<Host>,
    config_path: Option<PathBuf>,
    stop: tokio::sync::watch::Sender<bool>,
) {
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) else {
        tracing::error!("cannot install signal handlers; stop the server with SIGKILL");
        return;
    };
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = hup.recv() => reload(&host, config_path.as_deref()).await,
        }
    }
    tracing::info!("shutting down");
    host.readiness.begin_shutdown();
    let _ = stop.send(true);
}

/// SIGHUP: re-reads the configuration and swaps every plugin whose file
/// changed, each as `PUT /v1/plugins/WORLD` would. Limits, grants,
/// stores and the listen address are fixed at start (a restart applies
/// them).
async fn reload(host: &Host, config_path: Option<&Path>) {
    let config = match config_path.map(Config::load).transpose() {
        Ok(config) => config.unwrap_or_default(),
        Err(e) => {
            tracing::error!("SIGHUP: the configuration is not valid; nothing changed: {e}");
            return;
        }
    };
    let sources = match PluginPlan::configured(&config) {
        Ok(plan) => plan.sources,
        Err(e) => {
            tracing::error!(
                "SIGHUP: the plugin settings are not valid; nothing changed: {:#}",
                anyhow!(e)
            );
            return;
        }
    };
    for (world, swapped) in host.plugins.reconfigure(&sources, "operator:sighup").await {
        match swapped {
            Ok(report) if report.changed => tracing::info!(
                %world,
                to = %report.current.hash,
                "SIGHUP: plugin swapped"
            ),
            Ok(_) => {}
            Err(SwapError::Refused(reason)) => {
                tracing::error!(%world, "SIGHUP: the new plugin was refused; the old one serves: {reason}");
            }
            Err(e) => tracing::error!(%world, "SIGHUP: the swap did not finish: {e}"),
        }
    }
}
