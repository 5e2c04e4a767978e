//! `/healthz`, `/readyz` and `/metrics`.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::serve::Host;

pub(super) fn routes() -> Router<Arc<Host>> {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .route("/metrics", get(metrics))
}

async fn ready(State(host): State<Arc<Host>>) -> impl IntoResponse {
    if host.readiness.is_ready() {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n")
    }
}

async fn metrics(State(host): State<Arc<Host>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        host.metrics.render(),
    )
}
