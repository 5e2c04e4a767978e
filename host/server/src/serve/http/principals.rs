//! `/v1/principals`: who may call, managed through the API (action
//! `admin` for the access policy). A new credential's token (or an S3
//! key's secret, `POST /v1/principals/{name}/s3-keys`) is in the answer
//! that creates it and nowhere else; listings show ids only. Every
//! change is audited under the caller.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{delete, get, post, put};
use axum::{Extension, Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

use super::ApiError;
use super::auth::Caller;
use super::extract::{BodyLimit, json_body, path};
use crate::serve::Host;
use custodian_core::audit::{self, Record};
use custodian_core::principals::{NewCredential, NewS3Key, PrincipalError};

/// Largest body: a name and at most 32 roles of 128 bytes.
const BODY: BodyLimit = BodyLimit {
    bytes: 16 << 10,
    per: "principal request",
};

pub(super) fn routes() -> Router<Arc<Host>> {
    Router::new()
        .route("/v1/principals", get(list).post(create))
        .route("/v1/principals/{name}", get(show).delete(remove))
        .route("/v1/principals/{name}/roles", put(set_roles))
        .route("/v1/principals/{name}/credentials", post(issue))
        .route("/v1/principals/{name}/s3-keys", post(issue_s3_key))
        .route("/v1/principals/{name}/rotate", post(rotate))
        .route("/v1/principals/{name}/credentials/{id}", delete(revoke))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NewPrincipal {
    name: String,
    #[serde(default)]
    roles: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Roles {
    roles: Vec<String>,
}

fn failed(error: PrincipalError) -> ApiError {
    ApiError::of_kind(error.kind(), error.to_string())
}

/// The answer carrying a new token: shown once.
fn issued(new: &NewCredential) -> Value {
    json!({
        "principal": new.principal,
        "credential": {"id": new.issued.id, "token": new.issued.token},
    })
}

/// Audits a change by `caller`; the change stands even if its record
/// cannot be written (logged instead), as the KV already committed it.
async fn audited(host: &Host, caller: &Caller, event: &str, targets: Vec<String>) {
    let record = Record {
        at_ms: host.clock.now_ms(),
        actor: caller.actor(),
        event: event.into(),
        targets,
        detail: None,
    };
    if let Err(error) = audit::append(host.kv.as_ref(), &record).await {
        tracing::warn!(%error, event, "cannot audit a principal change");
    }
}

async fn list(State(host): State<Arc<Host>>) -> Result<Json<Value>, ApiError> {
    let principals = host.auth.principals.list().await.map_err(failed)?;
    Ok(Json(json!({"principals": principals})))
}

async fn show(
    State(host): State<Arc<Host>>,
    name: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let name = path(name)?;
    let view = host.auth.principals.get(&name).await.map_err(failed)?;
    Ok(Json(json!(view)))
}

async fn create(
    State(host): State<Arc<Host>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let what = "a principal (`{\"name\": \"...\", \"roles\": [...]}`)";
    let new: NewPrincipal = json_body(&host.bodies, body, &headers, BODY, what).await?;
    let created = host
        .auth
        .principals
        .create(&new.name, new.roles.clone())
        .await
        .map_err(failed)?;
    let mut targets = vec![format!("principal:{}", new.name)];
    targets.extend(new.roles.iter().map(|r| format!("role:{r}")));
    audited(&host, &caller, "principal/create", targets).await;
    Ok((StatusCode::CREATED, Json(issued(&created))))
}

async fn set_roles(
    State(host): State<Arc<Host>>,
    Extension(caller): Extension<Caller>,
    name: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let name = path(name)?;
    let Roles { roles } = json_body(
        &host.bodies,
        body,
        &headers,
        BODY,
        "roles (`{\"roles\": [...]}`)",
    )
    .await?;
    let view = host
        .auth
        .principals
        .set_roles(&name, roles.clone())
        .await
        .map_err(failed)?;
    let mut targets = vec![format!("principal:{name}")];
    targets.extend(roles.iter().map(|r| format!("role:{r}")));
    audited(&host, &caller, "principal/roles", targets).await;
    Ok(Json(json!(view)))
}

async fn issue(
    State(host): State<Arc<Host>>,
    Extension(caller): Extension<Caller>,
    name: Result<Path<String>, PathRejection>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let name = path(name)?;
    let new = host.auth.principals.issue(&name).await.map_err(failed)?;
    let targets = vec![
        format!("principal:{name}"),
        format!("credential:{}", new.issued.id),
    ];
    audited(&host, &caller, "principal/issue", targets).await;
    Ok((StatusCode::CREATED, Json(issued(&new))))
}

/// The answer carrying a new S3 key pair: its secret shown once.
fn issued_s3_key(new: &NewS3Key) -> Value {
    json!({
        "principal": new.principal,
        "credential": {
            "id": new.issued.id,
            "access_key_id": new.issued.access_key_id,
            "secret_access_key": new.issued.secret,
        },
    })
}

async fn issue_s3_key(
    State(host): State<Arc<Host>>,
    Extension(caller): Extension<Caller>,
    name: Result<Path<String>, PathRejection>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let name = path(name)?;
    let new = host
        .auth
        .principals
        .issue_s3_key(&name)
        .await
        .map_err(failed)?;
    let targets = vec![
        format!("principal:{name}"),
        format!("credential:{}", new.issued.id),
    ];
    audited(&host, &caller, "principal/issue-s3-key", targets).await;
    Ok((StatusCode::CREATED, Json(issued_s3_key(&new))))
}

async fn rotate(
    State(host): State<Arc<Host>>,
    Extension(caller): Extension<Caller>,
    name: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let name = path(name)?;
    let new = host.auth.principals.rotate(&name).await.map_err(failed)?;
    let targets = vec![
        format!("principal:{name}"),
        format!("credential:{}", new.issued.id),
    ];
    audited(&host, &caller, "principal/rotate", targets).await;
    Ok(Json(issued(&new)))
}

async fn revoke(
    State(host): State<Arc<Host>>,
    Extension(caller): Extension<Caller>,
    params: Result<Path<(String, String)>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let (name, id) = path(params)?;
    let view = host
        .auth
        .principals
        .revoke(&name, &id)
        .await
        .map_err(failed)?;
    let targets = vec![format!("principal:{name}"), format!("credential:{id}")];
    audited(&host, &caller, "principal/revoke", targets).await;
    Ok(Json(json!(view)))
}

async fn remove(
    State(host): State<Arc<Host>>,
    Extension(caller): Extension<Caller>,
    name: Result<Path<String>, PathRejection>,
) -> Result<StatusCode, ApiError> {
    let name = path(name)?;
    host.auth.principals.delete(&name).await.map_err(failed)?;
    audited(
        &host,
        &caller,
        "principal/delete",
        vec![format!("principal:{name}")],
    )
    .await;
    Ok(StatusCode::NO_CONTENT)
}
