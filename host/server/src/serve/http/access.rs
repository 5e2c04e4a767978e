//! May they: every authenticated request is put to the access policy
//! before its handler runs. [`classify`] is the one table from a route to
//! the action and target the policy is asked about; [`gate`] asks and
//! enforces the answer.
//!
//! - The host's own rule comes first, whatever the policy would say: the
//!   `preserved` store holds evidence only the takedown policy writes, so
//!   no principal writes or deletes in it through the object routes.
//! - Fail closed: a policy that traps, runs past a limit or cannot be
//!   called denies (503 `access_unavailable`), counted and audited.
//! - The decision log: every denial is audited (principal, action,
//!   target, plugin hash, reason); every decision is counted in
//!   `custodian_access_decisions_total` by action, principal and outcome.

use std::collections::HashMap;
use std::sync::Arc;

use axum::RequestExt;
use axum::extract::{MatchedPath, RawPathParams, Request};
use axum::http::{HeaderMap, Method, StatusCode, header};

use super::ApiError;
use crate::serve::Host;
use custodian_core::audit::{self, Record};
use custodian_core::decisions::access::{
    AccessJudge, AccessRequest, Action, Decision, MAX_HEADERS, Principal, Target, Unanswered,
};
use custodian_runtime::policy::takedown::PRESERVED_STORE;

/// Headers the policy sees, when the request has them: what a rule about
/// sizes, conditions or clients could need, never a credential.
const PASSED_HEADERS: [&str; 6] = [
    "content-length",
    "content-type",
    "if-match",
    "if-none-match",
    "user-agent",
    "idempotency-key",
];
const _: () = assert!(PASSED_HEADERS.len() <= MAX_HEADERS);

/// Longest header value passed on: the policy's input stays small
/// whatever a client sends.
const MAX_HEADER_VALUE_BYTES: usize = 256;

/// What a request asks to do: `method` on `route` (as matched) with path
/// `params` and `query`, declaring a body of `size` bytes. `None` for a
/// method the route does not have (its answer is a 405 that touches
/// nothing).
pub(super) fn classify(
    method: &Method,
    route: &str,
    params: &HashMap<String, String>,
    query: &HashMap<String, String>,
    size: Option<u64>,
) -> Option<(Action, Target)> {
    let param = |name: &str| params.get(name).cloned();
    let read = matches!(*method, Method::GET | Method::HEAD);
    let mut target = Target::default();
    let action = match route {
        "/v1/stores/{store}/objects/{*key}" => {
            target.store = param("store");
            target.key = param("key");
            target.version = query.get("version_id").cloned();
            match *method {
                Method::GET | Method::HEAD => Action::Read,
                Method::PUT => {
                    target.size = size;
                    Action::Write
                }
                Method::DELETE if target.version.is_some() => Action::DeleteVersion,
                Method::DELETE => Action::Delete,
                _ => return None,
            }
        }
        "/v1/stores/{store}/objects" | "/v1/stores/{store}/versions" if read => {
            target.store = param("store");
            target.key = query.get("prefix").cloned();
            Action::List
        }
        "/v1/repos/{ns}/{name}/files/{*path}" => {
            target.repository = repository(params);
            target.key = param("path");
            match *method {
                Method::GET | Method::HEAD => Action::Read,
                Method::PUT => {
                    target.size = size;
                    Action::Write
                }
                _ => return None,
            }
        }
        "/v1/repos/{ns}/{name}/files" if read => {
            target.repository = repository(params);
            Action::List
        }
        "/v1/takedowns" if method == Method::POST => Action::TakedownFile,
        "/v1/takedowns/{id}" => {
            target.subject = param("id");
            match *method {
                Method::GET | Method::HEAD => Action::TakedownStatus,
                Method::DELETE => Action::Withdraw,
                _ => return None,
            }
        }
        "/v1/takedowns/{id}/hold" if method == Method::PUT => {
            target.subject = param("id");
            Action::Hold
        }
        // Keeping evidence longer is a hold's kind of act: it only ever
        // keeps more.
        "/v1/takedowns/{id}/extend" if method == Method::POST => {
            target.subject = param("id");
            Action::Hold
        }
        "/v1/jobs/verify" | "/v1/jobs/purge" if method == Method::POST => {
            target.subject = route.strip_prefix("/v1/jobs/").map(str::to_owned);
            Action::StartJob
        }
        "/v1/jobs/{id}" if read => {
            target.subject = param("id");
            Action::Inspect
        }
        "/v1/jobs" | "/v1/audit" | "/v1/timers" | "/v1/timers/quarantine" | "/v1/plugins"
            if read =>
        {
            Action::Inspect
        }
        // Letting a quarantined plugin run again is managing plugins.
        "/v1/timers/quarantine/{kind}" if method == Method::DELETE => {
            target.subject = param("kind");
            Action::SwapPlugin
        }
        // The invalidation feed has no action of its own (the access
        // world's action enum, `sdk/wit/access.wit`, is fixed for now): reading
        // it is reading a host record, `inspect`, as the timers and the
        // audit log are; acknowledging deletes entries a takedown planned,
        // so it takes the power to file one, `takedown-file` (the roles
        // that may start a takedown may settle what it owes; `auditor`
        // and readers may not). The subject tells a policy which it is.
        "/v1/invalidations" if read => {
            target.subject = Some("invalidations".into());
            Action::Inspect
        }
        "/v1/invalidations/ack" if method == Method::POST => {
            target.subject = Some("invalidations/ack".into());
            Action::TakedownFile
        }
        "/v1/plugins/{world}" if method == Method::PUT => {
            target.subject = param("world");
            Action::SwapPlugin
        }
        route if route.starts_with("/v1/principals") => {
            target.subject = param("name");
            Action::Admin
        }
        _ => return None,
    };
    Some((action, target))
}

fn repository(params: &HashMap<String, String>) -> Option<String> {
    Some(format!("{}/{}", params.get("ns")?, params.get("name")?))
}

/// The headers of a request the policy sees.
pub(crate) fn passed_headers(headers: &HeaderMap) -> Vec<(String, String)> {
    PASSED_HEADERS
        .iter()
        .filter_map(|name| {
            let value = headers.get(*name)?.to_str().ok()?;
            let value = value.get(..MAX_HEADER_VALUE_BYTES).unwrap_or(value);
            Some(((*name).to_owned(), value.to_owned()))
        })
        .collect()
}

/// Puts `request`, made by `principal`, to the host's rule and the access
/// policy; what it asked, `None` for a request no route takes.
///
/// # Errors
/// 403 `forbidden` with the reason when either denies; 503
/// `access_unavailable` when the policy could not answer.
pub(super) async fn gate(
    host: &Arc<Host>,
    principal: &Principal,
    request: &mut Request,
) -> Result<Option<(Action, Target)>, ApiError> {
    // No route matched: the fallback's 404 touches nothing.
    let Some(route) = request.extensions().get::<MatchedPath>().cloned() else {
        return Ok(None);
    };
    let params: HashMap<String, String> = request
        .extract_parts::<RawPathParams>()
        .await
        .map(|params| {
            params
                .iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect()
        })
        .unwrap_or_default();
    // A query that does not parse is the handler's 400 to give; the
    // policy is asked as if it had none.
    let query: HashMap<String, String> = request
        .uri()
        .query()
        .and_then(|q| serde_urlencoded::from_str(q).ok())
        .unwrap_or_default();
    let size = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse().ok());
    let Some((action, target)) = classify(request.method(), route.as_str(), &params, &query, size)
    else {
        return Ok(None);
    };
    judge(
        host,
        principal,
        action,
        target,
        passed_headers(request.headers()),
    )
    .await
    .map(|target| Some((action, target)))
}

/// Puts `action` on `target` by `principal` (who sent `headers`, the
/// [`PASSED_HEADERS`] of its request) to the host's rule and the access
/// policy, counting and auditing the decision; the target as asked. The
/// one gate of every front end: the `/v1` routes and the S3 endpoint.
///
/// # Errors
/// 403 `forbidden` with the reason when either denies; 503
/// `access_unavailable` when the policy could not answer; 400
/// `invalid_argument` for a target past the policy's bounds.
pub(crate) async fn judge(
    host: &Arc<Host>,
    principal: &Principal,
    action: Action,
    target: Target,
    headers: Vec<(String, String)>,
) -> Result<Target, ApiError> {
    let writes = matches!(
        action,
        Action::Write | Action::Delete | Action::DeleteVersion
    );
    if writes && target.store.as_deref() == Some(PRESERVED_STORE) {
        let reason = "the preserved store holds takedown evidence, written only by the \
                      takedown policy: no principal writes or deletes in it through the API";
        host.metrics
            .access_decision(action.name(), &principal.name, "denied");
        refuse(host, principal, action, &target, reason, "host").await;
        return Err(ApiError::forbidden(reason));
    }
    let Some(judge) = host.auth.access.clone() else {
        return Ok(target);
    };
    let asked = AccessRequest {
        principal: principal.clone(),
        action,
        target,
        headers,
    };
    // A target past the policy's promised bounds (an 8 KiB key) names
    // nothing any route accepts: the caller's error, not the policy's.
    asked
        .check_bounds()
        .map_err(|e| ApiError::invalid(format!("the request is out of bounds: {e}")))?;
    let (answer, asked, hash) = decide(judge, asked).await?;
    log_decision(host, &asked, &answer, &hash).await;
    match answer {
        Ok(Decision::Allow) => {
            host.metrics
                .access_decision(action.name(), &principal.name, "allowed");
            Ok(asked.target)
        }
        Ok(Decision::Deny(reason)) => {
            host.metrics
                .access_decision(action.name(), &principal.name, "denied");
            refuse(host, principal, action, &asked.target, &reason, &hash).await;
            Err(ApiError::forbidden(reason))
        }
        Err(unanswered) => {
            host.metrics
                .access_decision(action.name(), &principal.name, "unanswered");
            let reason = unanswered.to_string();
            refuse(host, principal, action, &asked.target, &reason, &hash).await;
            Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "access_unavailable",
                format!("{reason}; the request is denied (access fails closed)"),
            ))
        }
    }
}

/// What one access decision needs, and where its answer goes.
type Job = Box<dyn FnOnce() + Send>;

/// The threads access decisions run on when the plugin cannot answer on
/// the request's own worker (it waited, or has been slow: see
/// `AccessPolicy::decide_now`): outside any async runtime, so a plugin's
/// host calls and WASI calls may block as they need, and no executor
/// worker is handed off per request. Measured under load (`serve_http --
/// 10 access`): wrapping each decide in `block_in_place` ran GETs at 0.56×
/// of checks off (a worker handed on per request), `spawn_blocking` costs
/// ~25 µs a call; a queue to these threads cost ~1.2 more context
/// switches a GET than deciding on the worker (`perf stat` under
/// `serve_http`), which is why they are the fallback, not the rule.
fn decision_threads() -> &'static std::sync::mpsc::SyncSender<Job> {
    static THREADS: std::sync::OnceLock<std::sync::mpsc::SyncSender<Job>> =
        std::sync::OnceLock::new();
    THREADS.get_or_init(|| {
        // Bounded: a burst waits for a free slot instead of queueing
        // without limit; each decide is ~1 µs, so 1024 is ~1 ms of work.
        let (send, receive) = std::sync::mpsc::sync_channel::<Job>(1024);
        let receive = Arc::new(std::sync::Mutex::new(receive));
        let threads = std::thread::available_parallelism().map_or(2, usize::from);
        for i in 0..threads {
            let receive = receive.clone();
            std::thread::Builder::new()
                .name(format!("custodian-access-{i}"))
                .spawn(move || {
                    loop {
                        // A poisoned lock only means another thread
                        // panicked holding it; the receiver is intact.
                        let job = receive
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .recv();
                        match job {
                            Ok(job) => job(),
                            Err(_) => return,
                        }
                    }
                })
                .expect("the OS starts an access decision thread");
        }
        send
    })
}

/// Asks `judge` about `asked` on the decision threads.
async fn decide(
    judge: Arc<dyn AccessJudge>,
    asked: AccessRequest,
) -> Result<(Result<Decision, Unanswered>, AccessRequest, String), ApiError> {
    // On this worker when the plugin can answer without blocking it (the
    // usual case: a decide is ~1 µs, less than handing it to a decision
    // thread and back); otherwise on the decision threads.
    if let Some(answer) = judge.decide_now(&asked) {
        return Ok((answer, asked, judge.plugin_hash()));
    }
    let (reply, answer) = tokio::sync::oneshot::channel();
    let job: Job = Box::new(move || {
        let answer = judge.decide(&asked);
        let _ = reply.send((answer, asked, judge.plugin_hash()));
    });
    let queue = decision_threads().clone();
    // A full queue is waited for off the executor.
    match queue.try_send(job) {
        Ok(()) => {}
        Err(std::sync::mpsc::TrySendError::Full(job)) => {
            tokio::task::spawn_blocking(move || queue.send(job))
                .await
                .map_err(|e| {
                    ApiError::unavailable(format!("the access policy did not answer: {e}"))
                })?
                .map_err(|_| ApiError::unavailable("the access decision threads are gone"))?;
        }
        Err(std::sync::mpsc::TrySendError::Disconnected(_)) => {
            return Err(ApiError::unavailable(
                "the access decision threads are gone",
            ));
        }
    }
    answer
        .await
        .map_err(|_| ApiError::unavailable("the access policy did not answer (its thread failed)"))
}

/// Logs an access decision (see `custodian_core::decisions::log`): every
/// denial and unanswered request, a sample of the allows. An allow's
/// record is written off the request's path, so a sampled request waits
/// for nothing; a denial's is written before the answer, like its
/// refusal record.
async fn log_decision(
    host: &Host,
    asked: &AccessRequest,
    answer: &Result<Decision, Unanswered>,
    hash: &str,
) {
    use custodian_core::decisions::log::{self, Weight};
    let (weight, outcome, output) = match answer {
        Ok(Decision::Allow) => (Weight::Routine, "allow", serde_json::json!("allow")),
        Ok(Decision::Deny(reason)) => (
            Weight::Always,
            "deny",
            serde_json::json!({ "deny": reason }),
        ),
        Err(unanswered) => (
            Weight::Always,
            "unanswered",
            serde_json::json!({ "error": unanswered.to_string() }),
        ),
    };
    if !host.plugins.sampling().draw(weight) {
        return;
    }
    let mut about = vec![format!("principal:{}", asked.principal.name)];
    about.extend(target_labels(asked.action, &asked.target));
    let record = log::Decision {
        world: "access",
        function: "decide",
        plugin: Some(hash),
        // Kept whole where it fits: a dry run asks a candidate plugin it.
        input: serde_json::to_value(asked).unwrap_or_default(),
        outcome,
        output,
        about,
    }
    .record(host.clock.now_ms());
    let kv = host.kv.clone();
    let write = async move {
        if let Err(error) = audit::append(kv.as_ref(), &record).await {
            tracing::warn!(%error, "cannot log an access decision");
        }
    };
    match weight {
        Weight::Routine => {
            tokio::spawn(write);
        }
        Weight::Always => write.await,
    }
}

/// Audits a refusal. A refusal stands even when its record cannot be
/// written (it is logged instead): failing open because the audit log is
/// unavailable would defeat the point.
async fn refuse(
    host: &Host,
    principal: &Principal,
    action: Action,
    target: &Target,
    reason: &str,
    decided_by: &str,
) {
    let reason = format!("{reason} (decided by {decided_by})");
    let record = refusal_record(host, principal, action, target, "access/denied", &reason);
    if let Err(error) = audit::append(host.kv.as_ref(), &record).await {
        tracing::warn!(%error, principal = %principal.name, %action, "cannot audit a refusal");
    }
}

/// The audit record of `event`, a refusal of `action` on `target` by
/// `principal` for `reason`.
pub(crate) fn refusal_record(
    host: &Host,
    principal: &Principal,
    action: Action,
    target: &Target,
    event: &str,
    reason: &str,
) -> Record {
    Record {
        at_ms: host.clock.now_ms(),
        actor: principal.actor(),
        event: event.into(),
        targets: target_labels(action, target),
        detail: Some(truncated(reason, audit::MAX_DETAIL_BYTES)),
    }
}

/// `action:A` and each part of `target` (`store:`, `repo:`, `key:`,
/// `version:`, `subject:`), as audit targets.
fn target_labels(action: Action, target: &Target) -> Vec<String> {
    let mut targets = vec![format!("action:{action}")];
    targets.extend(
        target
            .labels()
            .iter()
            .map(|label| truncated(label, audit::MAX_TARGET_BYTES)),
    );
    targets
}

pub(crate) use custodian_core::audit::truncated;
