//! Routes: jobs (see [`crate::serve::jobs`]).
//!
//! | route | body | answer |
//! |---|---|---|
//! | `POST /v1/jobs/verify` | `{"store", "pins": [{"name", "text", "format"?, "key_dir"?}], "dvc_remote"?, "receipts"?}` | 202 `{"id", "state": "running", "href"}` |
//! | `POST /v1/jobs/purge` | `{"store", "plan"}` (the plan document, or its text) | 202, as above |
//! | `GET /v1/jobs` | | `{"jobs": [<job without result>]}`, newest first |
//! | `GET /v1/jobs/{id}` | | the job with its `result` |
//!
//! A job is `{"id", "kind": "verify"|"purge", "state":
//! "running"|"succeeded"|"failed", "store", "started_ms", "finished_ms",
//! "progress": {"done", "total"}, "error", "href", "result"}`.
//!
//! Every input is checked before a job starts: a malformed body, an
//! unknown store, a bad manifest, receipt or plan, or a store without
//! versions is 400 `invalid_argument`; a start while the most jobs run is
//! 503 `busy`; while the server shuts down, 503 `unavailable`.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};

use super::ApiError;
use super::extract::{BodyLimit, json_body, path};
use crate::serve::Host;
use crate::serve::jobs::{
    JobError, JobId, PurgeDeps, PurgeInputs, PurgeRequest, VerifyDeps, VerifyInputs, VerifyRequest,
};
use custodian_core::decisions::log::LoggedJudge;
use custodian_object::ObjectStore;

/// Largest job request, 16 MiB: its manifests or plan are parsed into
/// memory (several times their size) before the job starts; a larger run
/// is split into several jobs.
const REQUEST_LIMIT: BodyLimit = BodyLimit {
    bytes: 16 << 20,
    per: "job request: split the run into several jobs",
};

/// The jobs routes.
pub(super) fn routes() -> Router<Arc<Host>> {
    Router::new()
        // Bodies are bounded in the handlers, by `REQUEST_LIMIT`.
        .route("/v1/jobs/verify", post(start_verify))
        .route("/v1/jobs/purge", post(start_purge))
        .route("/v1/jobs", get(list))
        .route("/v1/jobs/{id}", get(show))
}

async fn start_verify(
    State(host): State<Arc<Host>>,
    headers: HeaderMap,
    body: Body,
) -> Result<impl IntoResponse, ApiError> {
    let request: VerifyRequest = json_body(
        &host.bodies,
        body,
        &headers,
        REQUEST_LIMIT,
        "a verify request",
    )
    .await?;
    let inputs = VerifyInputs::parse(request)?;
    let store = named_store(&host, inputs.store())?;
    accepting(&host)?;
    let deps = VerifyDeps {
        store,
        archive: host.plugins.archive(),
        clock: host.clock.clone(),
    };
    let id = host.jobs.start_verify(inputs, deps)?;
    Ok(accepted(&id))
}

async fn start_purge(
    State(host): State<Arc<Host>>,
    headers: HeaderMap,
    body: Body,
) -> Result<impl IntoResponse, ApiError> {
    let request: PurgeRequest = json_body(
        &host.bodies,
        body,
        &headers,
        REQUEST_LIMIT,
        "a purge request",
    )
    .await?;
    let inputs = PurgeInputs::parse(request)?;
    let store = named_store(&host, inputs.store())?;
    accepting(&host)?;
    let deps = PurgeDeps {
        store,
        // Every judgement in the decision log (a deletion or a refusal).
        purge: Arc::new(LoggedJudge::new(
            host.plugins.purge(),
            host.kv.clone(),
            host.clock.clone(),
        )),
        retention: host.plugins.retention(),
        clock: host.clock.clone(),
    };
    let id = host.jobs.start_purge(inputs, deps)?;
    Ok(accepted(&id))
}

async fn list(State(host): State<Arc<Host>>) -> Result<Json<Value>, ApiError> {
    let jobs: Vec<Value> = host
        .jobs
        .list_everywhere()
        .await?
        .iter()
        .map(|j| j.summary_json())
        .collect();
    Ok(Json(json!({ "jobs": jobs })))
}

async fn show(
    State(host): State<Arc<Host>>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(host.jobs.find(&path(id)?).await?.to_json()))
}

/// The store a body names: an unknown one is the body's fault (400), not
/// a missing resource of the route.
fn named_store(host: &Host, name: &str) -> Result<Arc<dyn ObjectStore>, ApiError> {
    host.store(name)
        .cloned()
        .map_err(|e| ApiError::invalid(e.message))
}

/// Refuses new jobs while the server drains: one started now would be
/// abandoned at exit.
fn accepting(host: &Host) -> Result<(), ApiError> {
    if host.readiness.is_ready() {
        Ok(())
    } else {
        Err(ApiError::unavailable(
            "the server is shutting down and starts no new jobs",
        ))
    }
}

fn accepted(id: &JobId) -> impl IntoResponse + use<> {
    let href = id.href();
    (
        StatusCode::ACCEPTED,
        [(header::LOCATION, href.clone())],
        Json(json!({"id": id, "state": "running", "href": href})),
    )
}

impl From<JobError> for ApiError {
    fn from(error: JobError) -> Self {
        let kind = error.kind();
        ApiError::of_kind(kind, error.into_message())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use custodian_object::ObjectStoreExt;

    use axum::http::Method;
    use bytes::Bytes;

    use super::*;
    use crate::serve::http::test_client::{Reply, get, send};
    use crate::serve::test_host::test_host;
    use custodian_core::versions::digest::Digest;
    use custodian_object::{Metadata, ObjectMeta, PutCondition};

    #[test]
    fn each_job_error_answers_its_own_status_and_code() {
        for (error, status, code) in [
            (
                JobError::InvalidArgument("x".into()),
                StatusCode::BAD_REQUEST,
                "invalid_argument",
            ),
            (
                JobError::NotFound("x".into()),
                StatusCode::NOT_FOUND,
                "not_found",
            ),
            (
                JobError::Busy("x".into()),
                StatusCode::SERVICE_UNAVAILABLE,
                "busy",
            ),
            (
                JobError::Unavailable("x".into()),
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
            ),
            (
                JobError::Internal("x".into()),
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
            ),
        ] {
            let api = ApiError::from(error);
            assert_eq!(
                (api.status, api.code, api.message.as_str()),
                (status, code, "x")
            );
        }
    }

    /// Publishes `bytes` at `key` in the host's `serving` store.
    async fn put(host: &Host, key: &str, bytes: &[u8]) -> ObjectMeta {
        host.stores["serving"]
            .put_whole(
                key,
                Bytes::copy_from_slice(bytes),
                &PutCondition::Unconditional,
                &Metadata::new(),
                custodian_base::checksum::crc64_nvme(bytes),
            )
            .await
            .unwrap_or_else(|e| panic!("publishing {key}: {e}"))
    }

    /// A JSON pin of `meta`'s version, expecting `bytes`.
    fn pin(meta: &ObjectMeta, bytes: &[u8]) -> Value {
        json!({"key": meta.key, "version_id": meta.version_id,
               "md5": Digest::Md5(String::new()).of(bytes)})
    }

    async fn start(host: &Arc<Host>, kind: &str, body: impl Into<axum::body::Body>) -> Reply {
        let uri = format!("/v1/jobs/{kind}");
        send(host, Method::POST, &uri, &[], body).await
    }

    /// `GET /v1/jobs/{id}` until the job is no longer running.
    async fn finished(host: &Arc<Host>, id: &str) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        loop {
            let job = get(host, &format!("/v1/jobs/{id}"))
                .await
                .expect(StatusCode::OK)
                .json();
            if job["state"] != "running" {
                return job;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "still running: {job}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    async fn listed(host: &Arc<Host>) -> Vec<Value> {
        let list = get(host, "/v1/jobs").await.expect(StatusCode::OK).json();
        list["jobs"].as_array().unwrap().clone()
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_verify_job_is_accepted_polled_to_its_report_and_listed_without_it() {
        let host = test_host().await;
        let good = put(&host, "data/a.csv", b"a,b\n").await;
        let changed = put(&host, "data/b.csv", b"c,d\n").await;
        // Pinned at a size the version does not have.
        let mut wrong = pin(&changed, b"c,d\n");
        wrong["size"] = json!(changed.size + 1);
        let pins = json!({"pins": [pin(&good, b"a,b\n"), wrong]});
        let body = json!({"store": "serving",
                          "pins": [{"name": "pins.json", "text": pins.to_string()}]});

        let accepted = start(&host, "verify", body.to_string())
            .await
            .expect(StatusCode::ACCEPTED);
        let started = accepted.json();
        let id = started["id"].as_str().unwrap().to_owned();
        let href = format!("/v1/jobs/{id}");
        assert_eq!(started, json!({"id": id, "state": "running", "href": href}));
        assert_eq!(accepted.header(header::LOCATION), href);

        let job = finished(&host, &id).await;
        // A pin failed: the CLI would exit 1, so the job failed, with the
        // report as its result.
        assert_eq!(job["state"], "failed", "{job}");
        assert_eq!(job["error"], "1 of 2 pins failed");
        assert_eq!(
            (&job["kind"], &job["store"], &job["href"]),
            (&json!("verify"), &json!("serving"), &json!(href))
        );
        assert_eq!(job["progress"], json!({"done": 2, "total": 2}));
        let result = &job["result"];
        assert_eq!(result["ok"], false);
        let version = |meta: &ObjectMeta| meta.version_id.clone().unwrap();
        assert_eq!(
            result["checked"][0]["pin"],
            format!("data/a.csv@{}", version(&good))
        );
        assert_eq!(result["checked"].as_array().unwrap().len(), 1);
        assert_eq!(
            result["problems"][0]["pin"],
            format!("data/b.csv@{}", version(&changed))
        );

        let jobs = listed(&host).await;
        assert_eq!(jobs.len(), 1);
        assert_eq!(jobs[0]["id"], json!(id));
        assert_eq!(jobs[0]["state"], "failed");
        assert!(jobs[0].get("result").is_none(), "{}", jobs[0]);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn an_unknown_job_is_404_not_found_in_json() {
        let host = test_host().await;
        let reply = get(&host, "/v1/jobs/0000000000000000")
            .await
            .expect(StatusCode::NOT_FOUND);
        assert_eq!(reply.header(header::CONTENT_TYPE), "application/json");
        assert_eq!(reply.code(), "not_found");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_bad_body_is_400_invalid_argument_naming_the_problem_and_starts_nothing() {
        let host = test_host().await;
        let meta = put(&host, "data/a.csv", b"a,b\n").await;
        let manifest = json!({"name": "pins.json",
                              "text": json!({"pins": [pin(&meta, b"a,b\n")]}).to_string()});
        for (kind, body, says) in [
            (
                "verify",
                json!({"store": 1, "pins": []}),
                "the body is not a verify request: ",
            ),
            (
                "verify",
                json!({"store": "serving", "pins": [manifest], "recepits": []}),
                "recepits",
            ),
            (
                "verify",
                json!({"store": "nowhere", "pins": [manifest]}),
                "nowhere",
            ),
            (
                "verify",
                json!({"store": "serving", "pins": []}),
                "at least one manifest",
            ),
            (
                "purge",
                json!({"store": "serving", "plan": "not json"}),
                "not JSON",
            ),
            (
                "purge",
                json!({"store": "serving"}),
                "the body is not a purge request: ",
            ),
        ] {
            let reply = start(&host, kind, body.to_string())
                .await
                .expect(StatusCode::BAD_REQUEST);
            assert_eq!(reply.code(), "invalid_argument", "{body}");
            let message = reply.json()["error"]["message"].clone();
            assert!(
                message.as_str().unwrap().contains(says),
                "{body}: {message}"
            );
        }
        let reply = start(&host, "verify", "{").await;
        assert_eq!(
            reply.expect(StatusCode::BAD_REQUEST).code(),
            "invalid_argument"
        );
        assert!(listed(&host).await.is_empty());
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_body_declared_over_the_limit_is_413_before_it_is_read() {
        let host = test_host().await;
        let declared = (REQUEST_LIMIT.bytes + 1).to_string();
        let reply = send(
            &host,
            Method::POST,
            "/v1/jobs/verify",
            &[("content-length", &declared)],
            "{}",
        )
        .await
        .expect(StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(reply.code(), "payload_too_large");
        assert!(listed(&host).await.is_empty());
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_start_without_the_token_is_401_and_starts_nothing() {
        let host = test_host().await;
        let meta = put(&host, "data/a.csv", b"a,b\n").await;
        let pins = json!({"pins": [pin(&meta, b"a,b\n")]});
        let body = json!({"store": "serving",
                          "pins": [{"name": "pins.json", "text": pins.to_string()}]});
        for authorization in ["", "Bearer wrong-token-wrong-token"] {
            let reply = send(
                &host,
                Method::POST,
                "/v1/jobs/verify",
                &[("authorization", authorization)],
                body.to_string(),
            )
            .await
            .expect(StatusCode::UNAUTHORIZED);
            assert_eq!(reply.code(), "unauthorized");
        }
        assert!(listed(&host).await.is_empty());
        assert_eq!(host.jobs.running(), 0);
    }
}
