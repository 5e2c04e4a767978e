//! `custodian principal`: manage who may call the API, on a data
//! directory (or, with `--config` naming etcd, on the cluster every host
//! shares). A server holding the directory's embedded KV keeps this
//! command out (exit 3); use the server's `/v1/principals` routes then.

use std::sync::Arc;

use anyhow::anyhow;
use clap::{Args, Subcommand};
use custodian::clock::{Clock, SystemClock};
use custodian::node::Node;
use custodian::principals::{NewCredential, PrincipalError, Principals, View};

use super::options::{DataArgs, Global};
use super::{Failure, Outcome, config, io_runtime, node_failure};

/// How long this command trusts a credential lookup: it authenticates
/// nobody, so nothing.
const NO_CACHE: std::time::Duration = std::time::Duration::ZERO;

#[derive(Debug, Subcommand)]
pub enum PrincipalCommand {
    /// Create a principal with roles and one token; print the token.
    ///
    /// The token (`cust_<id>_<secret>`) is printed once and stored only
    /// as a hash: keep it. Roles are what the access plugin reads; the
    /// bundled one knows `admin`, `operator`, `auditor`, `reader`,
    /// `writer`, and `reader:store/NAME`, `writer:repo/NS/NAME`, ...
    /// (README, "Who may do what").
    ///
    /// Example:
    ///   custodian principal create ci-bot --role writer:store/serving --data DIR
    #[command(verbatim_doc_comment)]
    Create {
        /// The principal's name: 1 to 64 of [a-z0-9._-].
        name: String,
        /// A role (repeat for several).
        #[arg(long = "role", value_name = "ROLE")]
        roles: Vec<String>,
        #[command(flatten)]
        out: Out,
    },
    /// List the principals: names, roles, credential ids (never secrets).
    List {
        #[command(flatten)]
        out: Out,
    },
    /// Show one principal.
    Show {
        /// The principal.
        name: String,
        #[command(flatten)]
        out: Out,
    },
    /// Replace a principal's roles (takes effect on every host within the
    /// credential cache bound, 1 s by default).
    Roles {
        /// The principal.
        name: String,
        /// A role (repeat for several; none leaves it with no role).
        #[arg(long = "role", value_name = "ROLE")]
        roles: Vec<String>,
        #[command(flatten)]
        out: Out,
    },
    /// Issue a principal one more token (at most 16 each); print it.
    Issue {
        /// The principal.
        name: String,
        #[command(flatten)]
        out: Out,
    },
    /// Issue a principal an S3 key pair for the S3 endpoint (counted among
    /// its 16 credentials); print it.
    ///
    /// Prints `AWS_ACCESS_KEY_ID=…` and `AWS_SECRET_ACCESS_KEY=…` lines,
    /// so `eval "$(custodian principal s3-key NAME)"` sets up the AWS CLI
    /// and SDKs. The secret is shown once; it is stored as is in the KV
    /// (Signature V4 needs it). Revoke it by its id like a token.
    S3Key {
        /// The principal.
        name: String,
        #[command(flatten)]
        out: Out,
    },
    /// Replace every token of a principal with one new one; print it.
    Rotate {
        /// The principal.
        name: String,
        #[command(flatten)]
        out: Out,
    },
    /// Revoke one token of a principal, by its id.
    Revoke {
        /// The principal.
        name: String,
        /// The credential id (16 hex digits, from `list`).
        id: String,
        #[command(flatten)]
        out: Out,
    },
    /// Delete a principal and every token it holds.
    Delete {
        /// The principal.
        name: String,
        #[command(flatten)]
        out: Out,
    },
}

/// Where and how a principal command runs.
#[derive(Debug, Args)]
pub struct Out {
    #[command(flatten)]
    data: DataArgs,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub(super) fn run(global: &Global, command: PrincipalCommand) -> Outcome {
    let out = match &command {
        PrincipalCommand::Create { out, .. }
        | PrincipalCommand::List { out }
        | PrincipalCommand::Show { out, .. }
        | PrincipalCommand::Roles { out, .. }
        | PrincipalCommand::Issue { out, .. }
        | PrincipalCommand::S3Key { out, .. }
        | PrincipalCommand::Rotate { out, .. }
        | PrincipalCommand::Revoke { out, .. }
        | PrincipalCommand::Delete { out, .. } => out,
    };
    let io = io_runtime()?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let configured = config(global)?;
    io.block_on(async {
        let node = match configured {
            Some(config) => Node::open(&out.data.data, config, clock.clone()).await,
            None => Node::open_local(&out.data.data, clock.clone()),
        }
        .map_err(node_failure)?;
        let principals = Principals::new(node.kv().clone(), clock, NO_CACHE);
        match &command {
            PrincipalCommand::Create { name, roles, .. } => {
                let new = principals.create(name, roles.clone()).await;
                print_new(out.json, new.map_err(failed)?);
            }
            PrincipalCommand::List { .. } => {
                let all = principals.list().await.map_err(failed)?;
                if out.json {
                    println!("{}", serde_json::json!({"principals": all}));
                } else {
                    all.iter().for_each(print_view);
                }
            }
            PrincipalCommand::Show { name, .. } => {
                print_one(out.json, &principals.get(name).await.map_err(failed)?);
            }
            PrincipalCommand::Roles { name, roles, .. } => {
                let view = principals.set_roles(name, roles.clone()).await;
                print_one(out.json, &view.map_err(failed)?);
            }
            PrincipalCommand::Issue { name, .. } => {
                print_new(out.json, principals.issue(name).await.map_err(failed)?);
            }
            PrincipalCommand::S3Key { name, .. } => {
                let new = principals.issue_s3_key(name).await.map_err(failed)?;
                if out.json {
                    let credential = serde_json::json!({
                        "id": new.issued.id,
                        "access_key_id": new.issued.access_key_id,
                        "secret_access_key": new.issued.secret,
                    });
                    println!(
                        "{}",
                        serde_json::json!({"principal": new.principal, "credential": credential})
                    );
                } else {
                    eprintln!(
                        "S3 key {} of principal {} (shown once; keep it):",
                        new.issued.id, new.principal
                    );
                    println!("AWS_ACCESS_KEY_ID={}", new.issued.access_key_id);
                    println!("AWS_SECRET_ACCESS_KEY={}", new.issued.secret);
                }
            }
            PrincipalCommand::Rotate { name, .. } => {
                print_new(out.json, principals.rotate(name).await.map_err(failed)?);
            }
            PrincipalCommand::Revoke { name, id, .. } => {
                let view = principals.revoke(name, id).await;
                print_one(out.json, &view.map_err(failed)?);
            }
            PrincipalCommand::Delete { name, .. } => {
                principals.delete(name).await.map_err(failed)?;
                if out.json {
                    println!("{}", serde_json::json!({"deleted": name}));
                } else {
                    println!("deleted {name}");
                }
            }
        }
        Ok(())
    })
}

fn failed(error: PrincipalError) -> Failure {
    Failure::of_kind(error.kind(), anyhow!(error))
}

fn print_new(json: bool, new: NewCredential) {
    if json {
        let credential = serde_json::json!({"id": new.issued.id, "token": new.issued.token});
        println!(
            "{}",
            serde_json::json!({"principal": new.principal, "credential": credential})
        );
    } else {
        // The token alone on stdout, so `TOKEN=$(custodian principal …)`
        // works; what it is goes to stderr.
        eprintln!(
            "token {} of principal {} (shown once; keep it):",
            new.issued.id, new.principal
        );
        println!("{}", new.issued.token);
    }
}

fn print_one(json: bool, view: &View) {
    if json {
        println!("{}", serde_json::json!(view));
    } else {
        print_view(view);
    }
}

fn print_view(view: &View) {
    println!(
        "{}  roles: {}  credentials: {}",
        view.name,
        if view.roles.is_empty() {
            "-".to_owned()
        } else {
            view.roles.join(",")
        },
        if view.credentials.is_empty() {
            "-".to_owned()
        } else {
            view.credentials.join(",")
        }
    );
}
