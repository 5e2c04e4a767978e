//! The HTTP API: JSON in and out, errors as [`ApiError`] bodies with a
//! stable code. Every request but the probes names its principal by a
//! bearer credential ([`auth`]) and is put to the access policy
//! (`access.rs`) before its handler runs. Content
//! a takedown withholds is 451 `taken_down` on every route that would
//! serve or accept it.
//!
//! | route | what |
//! |---|---|
//! | `GET /healthz` | the process is up |
//! | `GET /readyz` | it takes work (503 while shutting down) |
//! | `GET /metrics` | Prometheus text |
//! | `PUT/GET/HEAD/DELETE /v1/stores/{store}/objects/{key…}` | one object (`objects/`) |
//! | `GET /v1/stores/{store}/objects?prefix=` | current objects |
//! | `GET /v1/stores/{store}/versions?prefix=` | every version |
//! | `PUT /v1/repos/{ns}/{name}/files/{path…}` | push one file into a repository |
//! | `GET/HEAD /v1/repos/{ns}/{name}/files/{path…}` | read one file back (`files.rs`) |
//! | `GET /v1/repos/{ns}/{name}/files` | a repository's entries |
//! | `POST /v1/takedowns` | file a takedown request |
//! | `GET /v1/takedowns/{id}` | its status |
//! | `PUT /v1/takedowns/{id}/hold` | set or clear its legal hold |
//! | `POST /v1/takedowns/{id}/extend` | keep its evidence longer |
//! | `DELETE /v1/takedowns/{id}` | withdraw it: its content is served again |
//! | `POST /v1/jobs/verify`, `POST /v1/jobs/purge` | start a job |
//! | `GET /v1/jobs`, `GET /v1/jobs/{id}` | jobs and their progress |
//! | `GET /v1/audit?since_ms=&cursor=&limit=` | the audit log, paged |
//! | `GET /v1/timers?cursor=&limit=` | the durable timers, in due order |
//! | `GET /v1/timers/quarantine` | the plugins quarantined for passing a step ceiling (their timers are paused) |
//! | `DELETE /v1/timers/quarantine/{kind}` | let a quarantined plugin's timers run again |
//! | `GET /v1/invalidations?cursor=&limit=` | the cache invalidations not yet delivered, in planning order (`invalidations.rs`) |
//! | `POST /v1/invalidations/ack` | acknowledge (delete) invalidations a pull consumer has handled |
//! | `GET /v1/plugins` | the loaded plugins, with hashes and versions |
//! | `PUT /v1/plugins/{world}` | hot-swap a world's plugin (body: the `.wasm`) |
//! | `GET/POST /v1/principals` | the principals; create one (answers its token) |
//! | `GET/DELETE /v1/principals/{name}` | one principal; delete it and its credentials |
//! | `PUT /v1/principals/{name}/roles` | replace its roles |
//! | `POST /v1/principals/{name}/credentials` | issue it one more token |
//! | `POST /v1/principals/{name}/rotate` | replace all its tokens with one new one |
//! | `DELETE /v1/principals/{name}/credentials/{id}` | revoke one token |
//!
//! [`listen::serve`] serves the router on a socket, within the listener's
//! bounds (header timeout, unauthenticated connections); [`Bodies`] bounds
//! the request bodies held across all requests.

pub(crate) mod access;
#[cfg(test)]
mod access_tests;
mod audit;
pub mod auth;
pub(crate) mod byte_range;
mod content;
#[cfg(test)]
mod denial_tests;
mod error;
pub(crate) mod extract;
mod files;
mod health;
mod invalidations;
mod jobs;
pub mod listen;
pub(crate) mod objects;
mod plugins;
mod principals;
#[cfg(test)]
mod test_client;
mod timers;
mod withheld;

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;

pub use error::{ApiError, RETRY_AFTER_SECS, RetainedRefusal};
pub use extract::Bodies;

use super::Host;

/// The whole API over `host`.
pub fn router(host: Arc<Host>) -> Router {
    Router::new()
        .merge(health::routes())
        .merge(objects::routes())
        .merge(content::routes())
        .merge(files::routes())
        .merge(jobs::routes())
        .merge(plugins::routes())
        .merge(audit::routes())
        .merge(timers::routes())
        .merge(invalidations::routes())
        .merge(principals::routes())
        .fallback(|| async { ApiError::not_found("no such route") })
        .layer(middleware::from_fn_with_state(
            host.clone(),
            auth::authorize,
        ))
        .layer(middleware::from_fn_with_state(host.clone(), observe))
        .with_state(host)
}

/// Counts every request by route and status, and times it.
async fn observe(State(host): State<Arc<Host>>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str)
        .to_owned();
    let response = next.run(request).await;
    host.metrics
        .http_request(&method, &route, response.status(), started.elapsed());
    response
}
