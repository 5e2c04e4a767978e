//! Routes: repositories' content, and takedown requests against it.
//!
//! | route | body | answer |
//! |---|---|---|
//! | `PUT /v1/repos/{ns}/{name}/files/{path…}` | the file's bytes | 200 `<entry>` |
//! | `GET /v1/repos/{ns}/{name}/files?cursor=&limit=` | | 200 `{"entries": [<entry>…], "next_cursor"}` |
//! | `GET`/`HEAD /v1/repos/{ns}/{name}/files/{path…}` | | 200 the file's bytes (see [`files`](super::files)) |
//! | `POST /v1/takedowns` | `{"repository", "objects": [hex…]}` or `{"repository", "pack": hex}` | 201 `{"id", "href", "replayed", "denial_settled"}` |
//! | `GET /v1/takedowns/{id}` | | 200 `<status>` |
//! | `PUT /v1/takedowns/{id}/hold` | `{"enabled": bool}` | 200 `<status>` |
//! | `POST /v1/takedowns/{id}/extend` | `{"until_ms": u64}` | 200 `<status>` |
//! | `DELETE /v1/takedowns/{id}` | | 200 `<status>`: withdrawn |
//!
//! An `<entry>` is what `custodian repo push --json` prints: `{"path",
//! "id" (64 hex digits), "kind": "blob"|"manifest"|"pack", "size"}` (a
//! manifest's size is its file's length); a listed entry a takedown
//! withholds also has `"taken_down": {"request", "since_ms"}`. A
//! `<status>` is what `custodian takedown status --json` prints:
//! `{"repository", "created_ms", "phase", "verification", "counts":
//! {"objects", "verified", "corrupt", "pieces", "bytes", "holders",
//! "purged_pieces"}, "retain_until_ms", "hold", "purged",
//! "next_purge_ms", "last_error", "denial": {"since_ms", "settled",
//! "denied", "withdrawn_ms"}, "id", "next_step_ms"}` (`denial` is `null`
//! from a plugin built against contract 0.1).
//!
//! # Pushing
//!
//! A `PUT` body is one file, held in memory up to the host's
//! `max_object_bytes` (413 `payload_too_large` beyond) and pushed as
//! `custodian repo push` pushes a file: content-addressed in the
//! `serving` store, a file over 4 MiB as 4 MiB chunks and a manifest. The
//! path is the rest of the route, slashes included (no pack is made for
//! its directories); a path ending in `/` or with an empty, `.` or `..`
//! segment is 400. Pushing the same path again replaces its entry.
//!
//! Listing pages through the entries in path order: `limit` defaults to
//! (and is clamped at) 1000; pass `next_cursor` back as `cursor` until it
//! is `null`. An unknown repository has no entries.
//!
//! # Takedowns
//!
//! Filing, holding, extending and withdrawing are operator actions,
//! audited under
//! the caller's principal (`principal:NAME`). The takedown plugin current when the
//! request arrives plans the action; its plan, the audit records and the
//! request's timer commit together, and the timer workers are woken to
//! run the first step. A request's id derives from its contents and the
//! millisecond it was filed.
//!
//! A filing answers once its denial holds: every object the request
//! names (a pack's members at every depth, a manifest's chunks) answers
//! 451 from then on, on every host sharing the KV. The plugin's plan
//! denies what fits in the filing's own commit, and the server commits
//! the plugin's further parts until none is left (`denial_settled`
//! true); past 20 s it answers anyway with `denial_settled` false, and
//! the request's steps finish the denial before any other work. A
//! withdrawal (`DELETE`) lifts the request's denials the same way, and is
//! refused (409 `precondition_failed`) once purging has begun; a legal
//! hold does not block it (the hold keeps the preserved copy, not the
//! denial).
//!
//! A filing may carry an `Idempotency-Key` header (1..=128 visible ASCII
//! characters): its id then derives from the key and its contents
//! instead of the time, so a client that retries after an answer it never
//! got (a timeout, a host that died) reaches the same request: 201 when
//! this call filed it, 200 with `"replayed": true` when an earlier call
//! did. The key names one filing: the same key with other contents is
//! another request.
//!
//! # Errors
//!
//! | cause | status | code |
//! |---|---|---|
//! | a takedown withholds the content read or pushed | 451 | `taken_down` (with `request`, `since_ms`) |
//! | malformed input (body, id, repository, path, limit); the policy's `invalid-argument` | 400 | `invalid_argument` |
//! | no such request; objects the repository does not hold; the policy's `not-found` | 404 | `not_found` |
//! | the request exists already; the policy's `conflict`; concurrent writers of the same index rows | 409 | `conflict` |
//! | the policy's `precondition-failed`: the request's state forbids it (a hold once purging began) | 409 | `precondition_failed` |
//! | a body over the limit | 413 | `payload_too_large` |
//! | corrupt content, index rows or timer rows; the policy's `corrupt` or `checksum-mismatch` | 500 | `corrupt` |
//! | the plugin trapped, hit a limit or broke the contract; the policy's `access-denied` (its grants do not fit it) | 500 | `plugin_failed` |
//! | every plugin instance is in use | 503 | `busy` |
//! | the KV or a store cannot serve now; the request kept changing under a hold; the policy's `unavailable` | 503 | `unavailable` |
//! | a budget is spent; the policy's `budget-exhausted` | 503 | `budget_exhausted` |
//!
//! Store errors map as for the object routes ([`ApiError`]'s
//! `From<ObjectError>`).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::header::LOCATION;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post, put};
use axum::{Extension, Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

use super::ApiError;
use super::auth::Caller;
use super::extract::{BodyLimit, Received, json_body, path, query, read_body};
use super::withheld::TakenDown;
use crate::serve::Host;
use crate::serve::metrics::Refusal;
use custodian_base::error::ErrorKind;
use custodian_core::content::push::push_bytes;
use custodian_core::content::{self, Entry, ObjectId, RepoName, denial};
use custodian_core::timers::{self, TimerError};
use custodian_kv::{Kv, MAX_PAGE_ENTRIES};
use custodian_runtime::policy::PolicyError;
use custodian_runtime::policy::requests::{self, Action, RequestError, Settled};
use custodian_runtime::policy::takedown::{self, Request, TakedownPolicy};
use custodian_runtime::{CallContext, CallError};

/// The content and takedown routes (a file's own route, `PUT` here and
/// `GET` in [`files`](super::files), is registered there).
pub(super) fn routes() -> Router<Arc<Host>> {
    Router::new()
        // Bodies are bounded in the handlers: a PUT's by the host's
        // `max_object_bytes`, a JSON body's by `REQUEST_LIMIT`.
        .route("/v1/repos/{ns}/{name}/files", get(list_files))
        .route("/v1/takedowns", post(create_takedown))
        .route(
            "/v1/takedowns/{id}",
            get(show_takedown).delete(withdraw_takedown),
        )
        .route("/v1/takedowns/{id}/hold", put(set_hold))
        .route("/v1/takedowns/{id}/extend", post(extend_retention))
}

// ---------------------------------------------------------------------------
// Error mapping (the table in the module documentation)

/// The policy's own answer, by its kind, with two deliberate exceptions
/// to the table (pinned by `refusals_map_to_stable_statuses_and_codes`).
fn policy_error(error: PolicyError) -> ApiError {
    let message = format!("the takedown policy refused: {error}");
    match error.kind() {
        // The request's state forbids the action (a hold once purging
        // began): a conflict with the resource's state, not an HTTP
        // precondition the client sent (the table's 412), so 409 with the
        // policy's own code (as the CLI, which reports it as a failure,
        // not as bad usage).
        ErrorKind::PreconditionFailed => {
            ApiError::new(StatusCode::CONFLICT, "precondition_failed", message)
        }
        // The plugin reached for what its grants deny: a deployment
        // fault, not the store refusing the host's credentials (the
        // table's 502).
        ErrorKind::AccessDenied => ApiError::plugin_failed(message),
        // A takedown sends no bytes: a mismatch the policy finds is in
        // stored data, not a checksum the client claimed (the table's 400).
        ErrorKind::ChecksumMismatch => ApiError::of_kind(ErrorKind::Corrupt, message),
        kind => ApiError::of_kind(kind, message),
    }
}

/// The plugin could not be called to completion: busy (nothing ran) by
/// the table; anything else is the plugin's failure, whatever its kind.
fn call_error(error: CallError) -> ApiError {
    let message = format!("the takedown plugin failed: {error}");
    match error.kind() {
        ErrorKind::Busy => ApiError::of_kind(ErrorKind::Busy, message),
        _ => ApiError::plugin_failed(message),
    }
}

/// The request's timer failed: the server's own call (its kinds and
/// references are the host's, a 32-byte id).
fn timer_error(error: TimerError) -> ApiError {
    match error {
        TimerError::Kv(kv) => ApiError::of_kv(&kv, "the request's timer"),
        other => ApiError::of_server_call(other.kind(), format!("the request's timer: {other}")),
    }
}

/// An operator action that did not take effect, by its kind; the policy,
/// the plugin, the KV and the timer each report as above.
fn request_error(error: RequestError) -> ApiError {
    match error {
        RequestError::Refused(refused) => policy_error(refused),
        RequestError::Call(call) => call_error(call),
        RequestError::Kv(kv) => ApiError::of_kv(&kv, "committing the request"),
        RequestError::Timer(timer) => timer_error(timer),
        // Exists is a conflict; contention or a swap mid-action is a
        // retry away (unavailable).
        other => ApiError::of_kind(other.kind(), other.to_string()),
    }
}

/// The swap guard could not be read.
fn fence_error(error: custodian_core::fence::FenceError) -> ApiError {
    ApiError::of_server_call(
        error.kind(),
        format!("cannot read the plugin-swap fence: {error}"),
    )
}

// ---------------------------------------------------------------------------
// Inputs

/// A takedown or hold body: 2 MiB, axum's default for JSON bodies, is
/// ~30,000 object ids, and a body is parsed into memory whole.
const REQUEST_LIMIT: BodyLimit = BodyLimit {
    bytes: 2 << 20,
    per: "request",
};

/// An id in a path or body: 64 hex digits. Request ids are 32-byte
/// BLAKE3 digests like object ids, and are written the same way.
fn parse_id(text: &str, what: &str) -> Result<[u8; 32], ApiError> {
    ObjectId::from_hex(text)
        .map(|id| id.0)
        .map_err(|_| ApiError::invalid(format!("{what} {text:?} is not 64 hex digits")))
}

/// Runs a synchronous policy action off the async threads: plugin calls
/// run on the calling thread and block on the I/O runtime for the KV.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ApiError::internal(format!("the policy call did not finish: {e}")))
}

// ---------------------------------------------------------------------------
// Repositories

/// An entry as `repo push --json` and `repo ls --json` print it.
fn entry_json(entry: &Entry) -> Value {
    json!({
        "path": entry.path,
        "id": entry.id.to_hex(),
        "kind": entry.kind.name(),
        "size": entry.size,
    })
}

/// `PUT /v1/repos/{ns}/{name}/files/{path…}`: push one file.
pub(super) async fn push_file(
    State(host): State<Arc<Host>>,
    params: Result<Path<(String, String, String)>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let (namespace, name, file) = path(params)?;
    let repo = RepoName::new(&namespace, &name).map_err(ApiError::from)?;
    // Checked before the body is read, so a bad path costs no upload.
    if file.ends_with('/') {
        return Err(ApiError::invalid(format!(
            "path {file:?}: a file's path cannot end with '/'"
        )));
    }
    content::index::validate_path(&file).map_err(ApiError::from)?;
    let serving = host.store(content::SERVING_STORE)?.clone();
    let limit = BodyLimit {
        bytes: host.limits.max_object_bytes,
        per: "upload",
    };
    // Held until the push is done with the bytes.
    let Received { bytes, held: _held } = read_body(&host.bodies, body, &headers, limit).await?;
    let entry = push_bytes(host.kv.as_ref(), serving.as_ref(), &repo, &file, bytes)
        .await
        .map_err(ApiError::from)?;
    Ok(Json(entry_json(&entry)))
}

/// A page request of a repository's entries.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    cursor: Option<String>,
    limit: Option<u32>,
}

/// `GET /v1/repos/{ns}/{name}/files`: a page of entries.
async fn list_files(
    State(host): State<Arc<Host>>,
    params: Result<Path<(String, String)>, PathRejection>,
    list: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let (namespace, name) = path(params)?;
    let repo = RepoName::new(&namespace, &name).map_err(ApiError::from)?;
    let list = query(list)?;
    // A page is held and serialized whole: clamped like the store
    // listings (0 is still refused, by the index).
    let limit = list.limit.unwrap_or(MAX_PAGE_ENTRIES).min(MAX_PAGE_ENTRIES);
    let page = content::entries(host.kv.as_ref(), &repo, list.cursor.as_deref(), limit)
        .await
        .map_err(ApiError::from)?;
    let ids: Vec<ObjectId> = page.entries.iter().map(|e| e.id).collect();
    let withheld = denial::check_many(host.kv.as_ref(), &ids)
        .await
        .map_err(ApiError::from)?;
    let entries: Vec<Value> = page
        .entries
        .iter()
        .zip(withheld)
        .map(|(entry, withheld)| {
            let mut json = entry_json(entry);
            if let Some(withheld) = withheld {
                json["taken_down"] = json!(TakenDown::from(withheld));
            }
            json
        })
        .collect();
    Ok(Json(json!({
        "entries": entries,
        "next_cursor": page.next,
    })))
}

// ---------------------------------------------------------------------------
// Takedowns

/// A takedown request as filed: exactly one of `objects` and `pack` (the
/// policy decides what it accepts).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTakedown {
    repository: String,
    #[serde(default)]
    objects: Vec<String>,
    pack: Option<String>,
}

/// `{"enabled": bool}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Hold {
    enabled: bool,
}

/// `{"until_ms": u64}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Extend {
    until_ms: u64,
}

fn href(id: &str) -> String {
    format!("/v1/takedowns/{id}")
}

/// `POST /v1/takedowns`: file a request.
async fn create_takedown(
    State(host): State<Arc<Host>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Body,
) -> Result<impl IntoResponse, ApiError> {
    let actor = caller.actor();
    let filed: FileTakedown = json_body(
        &host.bodies,
        body,
        &headers,
        REQUEST_LIMIT,
        "a takedown request",
    )
    .await?;
    let repo = RepoName::parse(&filed.repository).map_err(ApiError::from)?;
    let objects = filed
        .objects
        .iter()
        .map(|o| parse_id(o, "object id"))
        .collect::<Result<Vec<_>, _>>()?;
    let pack = filed
        .pack
        .as_deref()
        .map(|p| parse_id(p, "pack id"))
        .transpose()?;
    let now_ms = host.clock.now_ms();
    let key = idempotency_key(&headers)?;
    let request = match &key {
        Some(key) => Request::keyed(key, repo.to_string(), now_ms, objects, pack),
        None => Request::new(repo.to_string(), now_ms, objects, pack),
    };
    let id = ObjectId(request.id).to_hex();
    // Once per request, with the swap guard: a swap completing between
    // here and the commit makes the commit fail rather than land a plan
    // of the plugin it replaced.
    let (policy, guard) = host
        .plugins
        .takedown_for_action()
        .await
        .map_err(fence_error)?;
    let plugins = host.plugins.clone();
    let io = plugins.services().io.clone();
    let kv = host.kv.clone();
    let keyed = key.is_some();
    // Held from this host's workers until the denial work below is over,
    // then theirs at once (see `FirstSteps`).
    let held = host
        .first_steps
        .as_ref()
        .and_then(|first| first.hold(&request.id));
    let clock = host.clock.clone();
    let (status, settled) = blocking(move || {
        let action = Action {
            actor: &actor,
            now_ms,
            guard: &guard,
        };
        let call = || plugins.takedown_call(&policy);
        let created = requests::create(
            &policy,
            call,
            &io,
            kv.as_ref(),
            &request,
            action,
            held.as_ref(),
        );
        let status = match created {
            Ok(()) => StatusCode::CREATED,
            // A retry of a keyed filing that committed: the same request,
            // whose denial this retry finishes if the first could not.
            Err(RequestError::Exists(_)) if keyed => StatusCode::OK,
            Err(error) => return Err(error),
        };
        let settled = requests::settle(&policy, call, &io, kv.as_ref(), &request.id, action)?;
        let committed = status == StatusCode::CREATED;
        let id = &request.id;
        requests::begin_steps(
            &io,
            kv.as_ref(),
            id,
            now_ms,
            held,
            committed,
            clock.now_ms(),
        )?;
        Ok((status, settled))
    })
    .await?
    .map_err(request_error)?;
    host.wake_workers.timer_due();
    let href = href(&id);
    Ok((
        status,
        [(LOCATION, href.clone())],
        Json(json!({
            "id": id,
            "href": href,
            "replayed": status == StatusCode::OK,
            "denial_settled": settled == Settled::Done,
        })),
    ))
}

/// The `Idempotency-Key` header, if sent: 1..=128 visible ASCII
/// characters (enough for a UUID or a client's own request name, short
/// enough to hash on every filing).
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .filter(|key| (1..=128).contains(&key.len()) && key.bytes().all(|b| b.is_ascii_graphic()))
        .map(|key| Some(key.to_owned()))
        .ok_or_else(|| {
            ApiError::invalid("an Idempotency-Key must be 1..=128 visible ASCII characters")
        })
}

/// `GET /v1/takedowns/{id}`: the request's status.
async fn show_takedown(
    State(host): State<Arc<Host>>,
    params: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let id = parse_id(&path(params)?, "request id")?;
    Ok(Json(status(&host, id).await?))
}

/// `PUT /v1/takedowns/{id}/hold`: set or clear the legal hold; answers
/// the status after it.
async fn set_hold(
    State(host): State<Arc<Host>>,
    Extension(caller): Extension<Caller>,
    params: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let id = parse_id(&path(params)?, "request id")?;
    let actor = caller.actor();
    let what = "a hold (`{\"enabled\": true|false}`)";
    let Hold { enabled } = json_body(&host.bodies, body, &headers, REQUEST_LIMIT, what).await?;
    act_on_request(&host, id, actor, move |policy, call, io, kv, action| {
        requests::hold(policy, call, io, kv, &id, enabled, action)
    })
    .await?;
    // The hold moved the request's timer to now: its next step sees it.
    host.wake_workers.timer_due();
    Ok(Json(status(&host, id).await?))
}

/// `POST /v1/takedowns/{id}/extend`: keep the request's evidence until
/// `until_ms` (later than the retain-until in force, before purging has
/// begun; 409 `precondition_failed` otherwise); answers the status after
/// it.
async fn extend_retention(
    State(host): State<Arc<Host>>,
    Extension(caller): Extension<Caller>,
    params: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let id = parse_id(&path(params)?, "request id")?;
    let actor = caller.actor();
    let what = "an extension (`{\"until_ms\": MS}`)";
    let Extend { until_ms } = json_body(&host.bodies, body, &headers, REQUEST_LIMIT, what).await?;
    act_on_request(&host, id, actor, move |_, _, io, kv, action| {
        requests::extend(io, kv, &id, until_ms, action)
    })
    .await?;
    host.wake_workers.timer_due();
    Ok(Json(status(&host, id).await?))
}

/// `DELETE /v1/takedowns/{id}`: withdraw the request; answers the status
/// once its denials are lifted (or, past the bound, with
/// `denial.settled` false: its steps finish the lifting).
async fn withdraw_takedown(
    State(host): State<Arc<Host>>,
    Extension(caller): Extension<Caller>,
    params: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let id = parse_id(&path(params)?, "request id")?;
    let actor = caller.actor();
    act_on_request(&host, id, actor, move |policy, call, io, kv, action| {
        requests::withdraw(policy, call, io, kv, &id, action)?;
        requests::settle(policy, call, io, kv, &id, action)
    })
    .await?;
    host.wake_workers.timer_due();
    Ok(Json(status(&host, id).await?))
}

/// Runs operator action `act` on request `id` on a blocking thread: the
/// current takedown plugin with its swap guard, `actor` and now; an
/// unknown request is 404.
async fn act_on_request<T: Send + 'static>(
    host: &Arc<Host>,
    id: [u8; 32],
    actor: String,
    act: impl FnOnce(
        &TakedownPolicy,
        &dyn Fn() -> Arc<CallContext>,
        &tokio::runtime::Handle,
        &dyn Kv,
        Action<'_>,
    ) -> Result<T, RequestError>
    + Send
    + 'static,
) -> Result<T, ApiError> {
    let now_ms = host.clock.now_ms();
    let plugins = host.plugins.clone();
    let (policy, guard) = plugins.takedown_for_action().await.map_err(fence_error)?;
    let io = plugins.services().io.clone();
    let kv = host.kv.clone();
    blocking(move || {
        let action = Action {
            actor: &actor,
            now_ms,
            guard: &guard,
        };
        act(
            &policy,
            &|| plugins.takedown_call(&policy),
            &io,
            kv.as_ref(),
            action,
        )
    })
    .await?
    .map_err(|e| match e {
        RequestError::Refused(PolicyError::NotFound(_)) | RequestError::NoLock(_) => {
            ApiError::not_found(format!(
                "there is no takedown request {}",
                ObjectId(id).to_hex()
            ))
        }
        other => request_error(other),
    })
}

/// Request `id`'s status as `takedown status --json` prints it: the
/// policy's view, the last step error the timer recorded, and when the
/// next step is due.
async fn status(host: &Host, id: [u8; 32]) -> Result<Value, ApiError> {
    let policy = host.plugins.takedown();
    let call = host.plugins.takedown_call(&policy);
    let mut status = blocking(move || policy.status(call, &id))
        .await?
        .map_err(call_error)?
        .map_err(|e| match e {
            PolicyError::NotFound(_) => ApiError::not_found(format!(
                "there is no takedown request {}",
                ObjectId(id).to_hex()
            )),
            other => policy_error(other),
        })?;
    let timer = timers::get(host.kv.as_ref(), takedown::KIND, &id)
        .await
        .map_err(timer_error)?;
    if let Some(error) = timer.as_ref().and_then(|t| t.state.last_error.clone()) {
        status.last_error = Some(error);
    }
    // The answer is copied into every response for it: a plugin must not
    // make each status request cost megabytes.
    let limit = host.limits.max_plugin_answer_bytes;
    if !fits_json(&status, limit) {
        host.metrics.refused(Refusal::PluginAnswer);
        return Err(ApiError::plugin_failed(format!(
            "the takedown plugin's status answer is larger than this server's limit of \
             {limit} bytes ([server] max_plugin_answer_kib); none of it is sent"
        )));
    }
    let mut value = serde_json::to_value(&status)
        .map_err(|e| ApiError::internal(format!("serializing the status: {e}")))?;
    value["id"] = json!(ObjectId(id).to_hex());
    value["next_step_ms"] = json!(timer.map(|t| t.due_ms));
    Ok(value)
}

/// Whether `value` is at most `limit` bytes of JSON, found without
/// holding the text: the count stops at the limit.
fn fits_json(value: &impl serde::Serialize, limit: u64) -> bool {
    /// A writer with room for `.0` more bytes, failing past them.
    struct Room(u64);
    impl std::io::Write for Room {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 = u64::try_from(bytes.len())
                .ok()
                .and_then(|len| self.0.checked_sub(len))
                .ok_or_else(|| std::io::Error::other("over the limit"))?;
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    serde_json::to_writer(Room(limit), value).is_ok()
}

#[cfg(test)]
mod tests {
    use axum::http::Method;

    use super::*;
    use crate::serve::RequestLimits;
    use crate::serve::http::test_client::{Reply, get, push, send};
    use crate::serve::test_host::{test_host, test_host_with};
    use custodian_base::clock::FixedClock;
    use custodian_core::audit;
    use custodian_core::content::ContentError;
    use custodian_kv::{KvError, Partition};

    const NOW: u64 = 1_700_000_000_000;

    async fn file(host: &Arc<Host>, body: Value, headers: &[(&str, &str)]) -> Reply {
        send(
            host,
            Method::POST,
            "/v1/takedowns",
            headers,
            body.to_string(),
        )
        .await
    }

    async fn hold(host: &Arc<Host>, id: &str, enabled: bool) -> Reply {
        let uri = format!("/v1/takedowns/{id}/hold");
        let body = json!({ "enabled": enabled }).to_string();
        send(host, Method::PUT, &uri, &[], body).await
    }

    /// Every row of the takedown plugin's partition.
    async fn takedown_rows(host: &Host) -> usize {
        let partition = Partition::new(takedown::PARTITION).unwrap();
        let page = host
            .kv
            .scan(&partition, b"", None, None, 1000)
            .await
            .unwrap();
        page.entries.len()
    }

    /// A host whose clock stands still at [`NOW`].
    async fn still_host() -> Arc<Host> {
        test_host_with(Arc::new(FixedClock::new(NOW)), RequestLimits::default()).await
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_pushed_file_is_answered_as_its_entry_and_listed_in_path_order_page_by_page() {
        let host = test_host().await;
        let small = push(&host, "acme/site", "docs/a.txt", b"hello".to_vec()).await;
        assert_eq!(
            small,
            json!({
                "path": "docs/a.txt",
                "id": ObjectId::of(b"hello").to_hex(),
                "kind": "blob",
                "size": 5,
            })
        );
        let big_len = content::CHUNK_BYTES as usize + 1;
        let big = push(&host, "acme/site", "big.bin", vec![7; big_len]).await;
        assert_eq!(
            (&big["kind"], &big["size"]),
            (&json!("manifest"), &json!(big_len))
        );

        let all = get(&host, "/v1/repos/acme/site/files")
            .await
            .expect(StatusCode::OK)
            .json();
        assert_eq!(all, json!({"entries": [big, small], "next_cursor": null}));

        let first = get(&host, "/v1/repos/acme/site/files?limit=1")
            .await
            .expect(StatusCode::OK)
            .json();
        assert_eq!(first, json!({"entries": [big], "next_cursor": "big.bin"}));
        let rest = get(&host, "/v1/repos/acme/site/files?limit=1&cursor=big.bin")
            .await
            .expect(StatusCode::OK)
            .json();
        assert_eq!(rest["entries"], json!([small]));

        let unknown = get(&host, "/v1/repos/acme/none/files").await;
        assert_eq!(
            unknown.expect(StatusCode::OK).json(),
            json!({"entries": [], "next_cursor": null})
        );
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_file_over_the_limit_is_413_and_nothing_is_entered() {
        let limits = RequestLimits {
            max_object_bytes: 1024,
            ..RequestLimits::default()
        };
        let host = test_host_with(Arc::new(FixedClock::new(NOW)), limits).await;
        let reply = send(
            &host,
            Method::PUT,
            "/v1/repos/acme/site/files/big",
            &[],
            vec![0; 1025],
        )
        .await
        .expect(StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(reply.code(), "payload_too_large");
        let listed = get(&host, "/v1/repos/acme/site/files").await.json();
        assert_eq!(listed["entries"], json!([]));
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_status_answer_over_the_plugin_answer_limit_is_500_plugin_failed_naming_the_limit() {
        let limits = RequestLimits {
            max_plugin_answer_bytes: 64,
            ..RequestLimits::default()
        };
        let host = test_host_with(Arc::new(FixedClock::new(NOW)), limits).await;
        let entry = push(&host, "acme/site", "a.txt", b"take me down".to_vec()).await;
        let body = json!({"repository": "acme/site", "objects": [entry["id"]]});
        let filed = file(&host, body, &[]).await.expect(StatusCode::CREATED);
        let id = filed.json()["id"].as_str().unwrap().to_owned();
        let status = get(&host, &format!("/v1/takedowns/{id}"))
            .await
            .expect(StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(status.code(), "plugin_failed");
        assert!(
            status.json()["error"]["message"]
                .as_str()
                .unwrap()
                .contains("limit of 64 bytes ([server] max_plugin_answer_kib)"),
            "{}",
            status.json()
        );
        assert!(
            host.metrics
                .render()
                .contains("reason=\"plugin_answer\"} 1")
        );
    }

    #[test]
    fn json_fits_its_limit_exactly_and_not_a_byte_less() {
        let value = json!({"phase": "seed"});
        let len = serde_json::to_vec(&value).unwrap().len() as u64;
        assert!(fits_json(&value, len));
        assert!(!fits_json(&value, len - 1));
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_bad_repository_path_or_listing_query_is_400_invalid_argument() {
        let host = still_host().await;
        for uri in [
            "/v1/repos/Acme/site/files/a.txt",
            "/v1/repos/acme/.site/files/a.txt",
            "/v1/repos/acme/site/files/dir/",
            "/v1/repos/acme/site/files/a//b",
            "/v1/repos/acme/site/files/a/%2E%2E/b",
            "/v1/repos/acme/site/files/bad%0Aname",
        ] {
            let reply = send(&host, Method::PUT, uri, &[], "x").await;
            assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{uri}");
            assert_eq!(reply.code(), "invalid_argument", "{uri}");
        }
        for uri in [
            "/v1/repos/acme/site/files?limit=0",
            "/v1/repos/acme/site/files?limit=x",
            "/v1/repos/acme/site/files?prefix=a",
        ] {
            let reply = get(&host, uri).await.expect(StatusCode::BAD_REQUEST);
            assert_eq!(reply.code(), "invalid_argument", "{uri}");
        }
        let listed = get(&host, "/v1/repos/acme/site/files").await.json();
        assert_eq!(listed["entries"], json!([]));
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_takedown_of_a_pushed_object_is_filed_audited_under_the_principal_and_seeded() {
        let host = still_host().await;
        let entry = push(&host, "acme/site", "a.txt", b"take me down".to_vec()).await;
        let wake = host.wake_workers.clone();
        let woken = wake.armed();

        let reply = file(
            &host,
            json!({"repository": "acme/site", "objects": [entry["id"]]}),
            &[],
        )
        .await
        .expect(StatusCode::CREATED);
        let body = reply.json();
        let id = body["id"].as_str().unwrap().to_owned();
        assert_eq!(id.len(), 64);
        assert_eq!(body["href"], json!(format!("/v1/takedowns/{id}")));
        assert_eq!(reply.headers[LOCATION], format!("/v1/takedowns/{id}"));
        tokio::time::timeout(std::time::Duration::from_secs(1), woken)
            .await
            .expect("the workers were woken");

        let status = get(&host, &format!("/v1/takedowns/{id}"))
            .await
            .expect(StatusCode::OK)
            .json();
        assert_eq!(status["id"], json!(id));
        assert_eq!(status["phase"], json!("seed"));
        assert_eq!(status["repository"], json!("acme/site"));
        assert_eq!(status["created_ms"], json!(NOW));
        assert_eq!(status["hold"], json!(false));
        assert_eq!(
            status["next_step_ms"],
            json!(NOW),
            "the first step is due now"
        );

        let (records, _) = audit::read(host.kv.as_ref(), 0, None, 100).await.unwrap();
        let created = records
            .iter()
            .find(|r| r.event == "takedown/create")
            .expect("the filing is audited");
        assert_eq!(created.actor, "principal:admin");
        assert!(created.targets.contains(&format!("takedown:{id}")));
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_takedown_naming_an_object_the_repository_does_not_hold_is_404_and_files_nothing() {
        let host = still_host().await;
        push(&host, "acme/site", "a.txt", b"held".to_vec()).await;
        let elsewhere = push(&host, "other/site", "b.txt", b"held elsewhere".to_vec()).await;
        for objects in [
            json!([ObjectId::of(b"never pushed").to_hex()]),
            json!([elsewhere["id"]]),
        ] {
            let reply = file(
                &host,
                json!({"repository": "acme/site", "objects": objects}),
                &[],
            )
            .await
            .expect(StatusCode::NOT_FOUND);
            assert_eq!(reply.code(), "not_found");
            assert!(
                reply.json()["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("does not hold"),
                "the policy's reason: {:?}",
                reply.json()
            );
        }
        assert_eq!(takedown_rows(&host).await, 0);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_malformed_takedown_is_400_whether_the_host_or_the_policy_refuses_it() {
        let host = still_host().await;
        let entry = push(&host, "acme/site", "a.txt", b"x".to_vec()).await;
        let id = entry["id"].clone();
        for body in [
            json!({"repository": "acme/site", "objects": ["not hex"]}),
            json!({"repository": "Acme", "objects": [id]}),
            json!({"repository": "acme/site", "objects": [id], "extra": 1}),
            // Refused by the policy: neither objects nor a pack, both, twice.
            json!({"repository": "acme/site"}),
            json!({"repository": "acme/site", "objects": [id], "pack": id}),
            json!({"repository": "acme/site", "objects": [id, id]}),
        ] {
            let reply = file(&host, body.clone(), &[]).await;
            assert_eq!(
                reply.status,
                StatusCode::BAD_REQUEST,
                "{body}: {:?}",
                reply.json()
            );
            assert_eq!(reply.code(), "invalid_argument", "{body}");
        }
        let reply = send(&host, Method::POST, "/v1/takedowns", &[], "{").await;
        assert_eq!(
            reply.expect(StatusCode::BAD_REQUEST).code(),
            "invalid_argument"
        );
        assert_eq!(takedown_rows(&host).await, 0);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn filing_the_same_takedown_twice_in_one_millisecond_is_409_conflict() {
        let host = still_host().await;
        let entry = push(&host, "acme/site", "a.txt", b"x".to_vec()).await;
        let body = json!({"repository": "acme/site", "objects": [entry["id"]]});
        file(&host, body.clone(), &[])
            .await
            .expect(StatusCode::CREATED);
        let again = file(&host, body, &[]).await.expect(StatusCode::CONFLICT);
        assert_eq!(again.code(), "conflict");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_keyed_filing_retried_later_answers_the_same_request_and_files_it_once() {
        let host = test_host().await;
        let entry = push(&host, "acme/site", "a.txt", b"x".to_vec()).await;
        let body = json!({"repository": "acme/site", "objects": [entry["id"]]});
        let key = [("idempotency-key", "client-7f3a/request-1")];
        let first = file(&host, body.clone(), &key)
            .await
            .expect(StatusCode::CREATED)
            .json();
        assert_eq!(first["replayed"], json!(false));
        let rows = takedown_rows(&host).await;
        // Later (another millisecond), as after a lost answer.
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let retry = file(&host, body.clone(), &key)
            .await
            .expect(StatusCode::OK)
            .json();
        assert_eq!(retry["id"], first["id"]);
        assert_eq!(retry["replayed"], json!(true));
        assert_eq!(takedown_rows(&host).await, rows, "nothing filed twice");
        let (records, _) = audit::read(host.kv.as_ref(), 0, None, 100).await.unwrap();
        let filed = records
            .iter()
            .filter(|r| r.event == "takedown/create")
            .count();
        assert_eq!(filed, 1);

        // Without a key, a filing in another millisecond is a new request.
        let unkeyed = file(&host, body.clone(), &[])
            .await
            .expect(StatusCode::CREATED)
            .json();
        assert_ne!(unkeyed["id"], first["id"]);
        // Another key is another request.
        let other = file(&host, body, &[("idempotency-key", "client-7f3a/request-2")])
            .await
            .expect(StatusCode::CREATED)
            .json();
        assert_ne!(other["id"], first["id"]);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_malformed_idempotency_key_is_400_and_files_nothing() {
        let host = still_host().await;
        let entry = push(&host, "acme/site", "a.txt", b"x".to_vec()).await;
        let body = json!({"repository": "acme/site", "objects": [entry["id"]]});
        let long = "k".repeat(129);
        for key in ["has space", "tab\there", long.as_str()] {
            let reply = file(&host, body.clone(), &[("idempotency-key", key)]).await;
            assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{key:?}");
            assert_eq!(reply.code(), "invalid_argument");
        }
        assert_eq!(takedown_rows(&host).await, 0);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_hold_set_then_cleared_shows_in_the_status_each_time() {
        let host = still_host().await;
        let entry = push(&host, "acme/site", "a.txt", b"x".to_vec()).await;
        let filed = file(
            &host,
            json!({"repository": "acme/site", "objects": [entry["id"]]}),
            &[],
        )
        .await
        .expect(StatusCode::CREATED)
        .json();
        let id = filed["id"].as_str().unwrap();
        let uri = format!("/v1/takedowns/{id}");

        let on = hold(&host, id, true).await.expect(StatusCode::OK).json();
        assert_eq!((&on["id"], &on["hold"]), (&json!(id), &json!(true)));
        assert_eq!(get(&host, &uri).await.json()["hold"], json!(true));

        let off = hold(&host, id, false).await.expect(StatusCode::OK).json();
        assert_eq!(off["hold"], json!(false));
        assert_eq!(get(&host, &uri).await.json()["hold"], json!(false));

        let (records, _) = audit::read(host.kv.as_ref(), 0, None, 100).await.unwrap();
        // Records of one millisecond are ordered by key, not by time: the
        // clock stands still here.
        let mut events: Vec<_> = records
            .iter()
            .filter(|r| r.actor == "principal:admin")
            .map(|r| r.event.as_str())
            .collect();
        events.sort_unstable();
        assert_eq!(
            events,
            ["takedown/create", "takedown/hold", "takedown/release"]
        );

        let bad = send(
            &host,
            Method::PUT,
            &format!("{uri}/hold"),
            &[],
            "{\"on\": true}",
        )
        .await;
        assert_eq!(
            bad.expect(StatusCode::BAD_REQUEST).code(),
            "invalid_argument"
        );
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn an_unknown_takedown_is_404_json_for_status_and_hold_and_a_malformed_id_is_400() {
        let host = still_host().await;
        let unknown = ObjectId::of(b"no such request").to_hex();
        let reply = get(&host, &format!("/v1/takedowns/{unknown}"))
            .await
            .expect(StatusCode::NOT_FOUND);
        assert_eq!(reply.code(), "not_found");
        assert!(
            reply.json()["error"]["message"]
                .as_str()
                .unwrap()
                .contains(&unknown)
        );
        let held = hold(&host, &unknown, true)
            .await
            .expect(StatusCode::NOT_FOUND);
        assert_eq!(held.code(), "not_found");
        let malformed = get(&host, "/v1/takedowns/xyz")
            .await
            .expect(StatusCode::BAD_REQUEST);
        assert_eq!(malformed.code(), "invalid_argument");
        assert_eq!(takedown_rows(&host).await, 0);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_takedown_without_the_token_is_401_and_files_nothing() {
        let host = still_host().await;
        let entry = push(&host, "acme/site", "a.txt", b"x".to_vec()).await;
        let body = json!({"repository": "acme/site", "objects": [entry["id"]]});
        for authorization in ["", "Bearer wrong-token-wrong-token"] {
            let reply = send(
                &host,
                Method::POST,
                "/v1/takedowns",
                &[("authorization", authorization)],
                body.to_string(),
            )
            .await
            .expect(StatusCode::UNAUTHORIZED);
            assert_eq!(reply.code(), "unauthorized");
        }
        assert_eq!(takedown_rows(&host).await, 0);
    }

    #[test]
    fn refusals_map_to_stable_statuses_and_codes() {
        let cases = [
            (
                request_error(RequestError::Refused(PolicyError::PreconditionFailed(
                    "purging began".into(),
                ))),
                StatusCode::CONFLICT,
                "precondition_failed",
            ),
            (
                request_error(RequestError::Refused(PolicyError::InvalidArgument(
                    "x".into(),
                ))),
                StatusCode::BAD_REQUEST,
                "invalid_argument",
            ),
            (
                request_error(RequestError::Refused(PolicyError::NotFound("x".into()))),
                StatusCode::NOT_FOUND,
                "not_found",
            ),
            (
                request_error(RequestError::Exists("x".into())),
                StatusCode::CONFLICT,
                "conflict",
            ),
            (
                request_error(RequestError::Contention),
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
            ),
            (
                request_error(RequestError::Call(CallError::Busy)),
                StatusCode::SERVICE_UNAVAILABLE,
                "busy",
            ),
            (
                request_error(RequestError::Call(CallError::Trap("boom".into()))),
                StatusCode::INTERNAL_SERVER_ERROR,
                "plugin_failed",
            ),
            (
                request_error(RequestError::Kv(KvError::Unavailable("down".into()))),
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
            ),
            (
                ApiError::from(ContentError::Corrupt("bad row".into())),
                StatusCode::INTERNAL_SERVER_ERROR,
                "corrupt",
            ),
            (
                ApiError::from(ContentError::Conflict("busy rows".into())),
                StatusCode::CONFLICT,
                "conflict",
            ),
            (
                request_error(RequestError::Refused(PolicyError::AccessDenied("x".into()))),
                StatusCode::INTERNAL_SERVER_ERROR,
                "plugin_failed",
            ),
            (
                request_error(RequestError::Refused(PolicyError::ChecksumMismatch(
                    "x".into(),
                ))),
                StatusCode::INTERNAL_SERVER_ERROR,
                "corrupt",
            ),
            (
                request_error(RequestError::Refused(PolicyError::BudgetExhausted(
                    "x".into(),
                ))),
                StatusCode::SERVICE_UNAVAILABLE,
                "budget_exhausted",
            ),
            (
                request_error(RequestError::Swapped),
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
            ),
            (
                request_error(RequestError::Kv(KvError::InvalidArgument("x".into()))),
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
            ),
            (
                request_error(RequestError::Kv(KvError::InUse("x".into()))),
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
            ),
            (
                request_error(RequestError::Timer(TimerError::InvalidArgument("x".into()))),
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
            ),
            (
                request_error(RequestError::Timer(TimerError::Contention)),
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
            ),
            (
                request_error(RequestError::Timer(TimerError::Corrupt("x".into()))),
                StatusCode::INTERNAL_SERVER_ERROR,
                "corrupt",
            ),
            (
                ApiError::from(ContentError::InvalidArgument("bad path".into())),
                StatusCode::BAD_REQUEST,
                "invalid_argument",
            ),
            (
                ApiError::from(ContentError::Index(KvError::Unavailable("down".into()))),
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
            ),
        ];
        for (error, status, code) in cases {
            assert_eq!((error.status, error.code), (status, code), "{error}");
        }
    }

    #[test]
    fn messages_keep_the_texts_the_hand_mappers_gave_them() {
        let cases = [
            (
                request_error(RequestError::Kv(KvError::Unavailable("down".into()))),
                "committing the request: kv unavailable: down",
            ),
            (
                request_error(RequestError::Timer(TimerError::Contention)),
                "the request's timer: the timer kept changing under contention; retry",
            ),
            (
                request_error(RequestError::Refused(PolicyError::NotFound("x".into()))),
                "the takedown policy refused: not found: x",
            ),
            (
                request_error(RequestError::Call(CallError::Busy)),
                "the takedown plugin failed: every plugin instance slot is in use; retry when \
                 calls finish",
            ),
            (
                ApiError::from(ContentError::InvalidArgument("bad path".into())),
                "bad path",
            ),
            (
                ApiError::from(ContentError::Index(KvError::Unavailable("down".into()))),
                "the content index: kv unavailable: down",
            ),
        ];
        for (error, message) in cases {
            assert_eq!(error.message, message);
        }
    }
}
