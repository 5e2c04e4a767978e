//! `GET /v1/plugins` and `PUT /v1/plugins/{world}`: the loaded plugins,
//! and their hot swap.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, put};
use axum::{Extension, Json, Router};
use serde_json::{Value, json};

use super::ApiError;
use super::auth::Caller;
use super::error::one_line;
use super::extract::{BodyLimit, Received, path, read_body};
use crate::serve::Host;
use custodian_runtime::World;
use custodian_runtime::plugin_set::{MAX_DRY_RUN_ITEMS, Replay, SwapError};
use custodian_runtime::signature::Signature;

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

/// `?dry_run=true[&limit=N]`: report what the swap would change, change
/// nothing.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SwapQuery {
    #[serde(default)]
    dry_run: bool,
    /// Items a dry run replays at most.
    limit: Option<u32>,
}

/// Items a dry run replays when the request does not say.
const DEFAULT_DRY_RUN_ITEMS: u32 = 1_000;

async fn swap(
    State(host): State<Arc<Host>>,
    Extension(caller): Extension<Caller>,
    world: Result<Path<String>, PathRejection>,
    query: Result<Query<SwapQuery>, QueryRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let world: World = path(world)?.parse().map_err(ApiError::not_found)?;
    let query = super::extract::query(query)?;
    if query.limit.is_some() && !query.dry_run {
        return Err(ApiError::invalid(
            "limit applies to a dry run (dry_run=true) only",
        ));
    }
    let items = query.limit.unwrap_or(DEFAULT_DRY_RUN_ITEMS);
    if items == 0 || items > MAX_DRY_RUN_ITEMS {
        return Err(ApiError::invalid(format!(
            "limit must be 1 to {MAX_DRY_RUN_ITEMS}"
        )));
    }
    let actor = caller.actor();
    let source = headers
        .get("x-custodian-source")
        .and_then(|v| v.to_str().ok())
        .filter(|s| !s.is_empty() && s.len() <= 256)
        .map_or_else(|| format!("upload by {}", caller.0.name), str::to_owned);
    let signature = signature(&headers)?;
    // Read last, so a swap the headers refuse costs no upload.
    let limit = BodyLimit {
        bytes: host.limits.max_plugin_bytes,
        per: "plugin",
    };
    // Held until the swap is done with the plugin.
    let Received { bytes, held: _held } = read_body(&host.bodies, body, &headers, limit).await?;
    if query.dry_run {
        return match host
            .plugins
            .dry_run(
                world,
                Vec::from(bytes),
                source,
                signature,
                Replay::quietly(items),
            )
            .await
        {
            Ok(report) => Ok(Json(json!(report))),
            Err(error) => Err(swap_error(error)),
        };
    }
    match host
        .plugins
        .swap(world, Vec::from(bytes), source, signature, &actor)
        .await
    {
        Ok(report) => Ok(Json(json!(report))),
        Err(error) => Err(swap_error(error)),
    }
}

/// The plugin's signature, from `x-custodian-signature`: the `.sig`
/// file's JSON (as `custodian plugin sign` writes it) on one line.
fn signature(headers: &HeaderMap) -> Result<Option<Signature>, ApiError> {
    let Some(value) = headers.get(SIGNATURE_HEADER) else {
        return Ok(None);
    };
    let text = value
        .to_str()
        .map_err(|_| ApiError::invalid(format!("{SIGNATURE_HEADER} is not visible ASCII")))?;
    Signature::parse(text)
        .map(Some)
        .map_err(|e| ApiError::invalid(format!("{SIGNATURE_HEADER}: {e}")))
}

/// The header a swap's signature travels in.
pub const SIGNATURE_HEADER: &str = "x-custodian-signature";

/// A swap that did not complete, by its kind.
fn swap_error(error: SwapError) -> ApiError {
    match error {
        // Deliberately not the table's 400 `invalid_argument`: the upload
        // is well-formed, but the plugin in it cannot serve this world, and
        // scripts tell "send another plugin" apart from a bad request by
        // this code.
        SwapError::Refused(reason) => {
            ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "plugin_refused", reason)
        }
        error => ApiError::of_kind(error.kind(), one_line(&error)),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_failed_swap_answers_what_it_answered_before_the_kinds() {
        use custodian_core::fence::FenceError;
        use custodian_kv::KvError;
        let cases = [
            (
                swap_error(SwapError::Refused("wrong world".into())),
                422,
                "plugin_refused",
                "wrong world".to_owned(),
            ),
            (
                swap_error(SwapError::Contended(3)),
                503,
                "unavailable",
                SwapError::Contended(3).to_string(),
            ),
            (
                swap_error(SwapError::Fence(FenceError::Corrupt("x".into()))),
                503,
                "unavailable",
                "the new plugin serves, but the authority generation could not be raised \
                 yet: fence data corrupt: x"
                    .to_owned(),
            ),
            (
                swap_error(SwapError::Audit(KvError::Unavailable("down".into()))),
                500,
                "internal",
                "the swap took effect but could not be audited: kv unavailable: down".to_owned(),
            ),
        ];
        for (error, status, code, message) in cases {
            assert_eq!(
                (error.status.as_u16(), error.code, error.message),
                (status, code, message)
            );
        }
    }

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
