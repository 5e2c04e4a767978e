//! `GET /v1/plugins` and `PUT /v1/plugins/{world}`: the loaded plugins,
//! and their hot swap.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, put};
use serde_json::{Value, json};

use super::ApiError;
use super::extract::{BodyLimit, operator, path, read_body};
use crate::serve::Host;
use crate::serve::plugins::SwapError;
use custodian_runtime::World;

pub(super) fn routes() -> Router<Arc<Host>> {
    Router::new()
        .route("/v1/plugins", get(list))
        // A swap's body is bounded in the handler by the host's
        // `max_plugin_bytes` (a raw `Body` has no default limit).
        .route("/v1/plugins/{world}", put(swap))
}

async fn list(State(host): State<Arc<Host>>) -> Json<Value> {
    Json(json!({
        "plugins": host.plugins.list(),
        "shared": host.plugins.shared_view(),
    }))
}

async fn swap(
    State(host): State<Arc<Host>>,
    world: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let world: World = path(world)?.parse().map_err(ApiError::not_found)?;
    let operator = operator(&headers)?;
    let source = headers
        .get("x-custodian-source")
        .and_then(|v| v.to_str().ok())
        .filter(|s| !s.is_empty() && s.len() <= 256)
        .map_or_else(|| format!("upload by {operator}"), str::to_owned);
    // Read last, so a swap the headers refuse costs no upload.
    let limit = BodyLimit {
        bytes: host.limits.max_plugin_bytes,
        per: "plugin",
    };
    let wasm = read_body(body, &headers, limit).await?;
    match host
        .plugins
        .swap(world, Vec::from(wasm), source, &operator)
        .await
    {
        Ok(report) => Ok(Json(json!(report))),
        Err(SwapError::Refused(reason)) => Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "plugin_refused",
            reason,
        )),
        Err(error @ (SwapError::Fence(_) | SwapError::Shared(_) | SwapError::Contended(_))) => {
            Err(ApiError::unavailable(error.to_string()))
        }
        Err(error @ SwapError::Audit(_)) => Err(ApiError::internal(format!(
            "{error}: {}",
            std::error::Error::source(&error).map_or(String::new(), ToString::to_string)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::time::Duration;

    use axum::http::Method;
    use bytes::Bytes;
    use futures::StreamExt;

    use super::*;
    use crate::serve::RequestLimits;
    use crate::serve::http::test_client::{get, send};
    use crate::serve::test_host::test_host_with;
    use custodian_base::clock::SystemClock;

    #[tokio::test(flavor = "multi_thread")]
    async fn an_upload_over_the_limit_is_413_as_it_streams_and_swaps_nothing() {
        let limits = RequestLimits {
            max_plugin_bytes: 1024,
            ..RequestLimits::default()
        };
        let host = test_host_with(Arc::new(SystemClock), limits).await;
        let before = get(&host, "/v1/plugins")
            .await
            .expect(StatusCode::OK)
            .json();

        // Past the limit, then a body that never ends: only a reader that
        // stops at the limit answers at all.
        let chunks: Vec<Result<Bytes, Infallible>> = vec![Ok(Bytes::from(vec![0; 1000])); 2];
        let endless = futures::stream::iter(chunks).chain(futures::stream::pending());
        let streamed = send(
            &host,
            Method::PUT,
            "/v1/plugins/takedown",
            &[],
            Body::from_stream(endless),
        );
        let reply = tokio::time::timeout(Duration::from_secs(30), streamed)
            .await
            .expect("refused without reading the whole body")
            .expect(StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(reply.code(), "payload_too_large");

        let declared = send(
            &host,
            Method::PUT,
            "/v1/plugins/takedown",
            &[("content-length", "1025")],
            vec![0; 1025],
        )
        .await
        .expect(StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(declared.code(), "payload_too_large");

        let after = get(&host, "/v1/plugins")
            .await
            .expect(StatusCode::OK)
            .json();
        assert_eq!(before, after);
    }
}
