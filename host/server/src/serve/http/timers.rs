//! `GET /v1/timers`: the durable timers of a running server (what
//! `custodian timer list` shows, which cannot open the data directory
//! while the server holds it); `GET /v1/timers/quarantine`: the plugins
//! quarantined for passing a step ceiling, and `DELETE
//! /v1/timers/quarantine/{kind}` to let one run again.

use std::sync::Arc;

use axum::Extension;
use axum::Json;
use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{delete, get};
use serde::Deserialize;
use serde_json::{Value, json};

use super::ApiError;
use super::auth::Caller;
use super::extract::{cursor_from_hex, cursor_to_hex, query};
use crate::serve::Host;
use custodian_core::timers::{self, TimerSummary, governor};

/// Largest page: one page is one KV scan held in memory.
const MAX_PAGE: u32 = 1_000;

pub(super) fn routes() -> Router<Arc<Host>> {
    Router::new()
        .route("/v1/timers", get(list))
        .route("/v1/timers/quarantine", get(quarantined))
        .route("/v1/timers/quarantine/{kind}", delete(release))
}

fn timer_failure(doing: &str, e: &timers::TimerError) -> ApiError {
    ApiError::of_server_call(e.kind(), format!("cannot {doing}: {e}"))
}

async fn quarantined(State(host): State<Arc<Host>>) -> Result<Json<Value>, ApiError> {
    let rows = governor::quarantined(host.kv.as_ref())
        .await
        .map_err(|e| timer_failure("read the quarantines", &e))?;
    Ok(Json(json!({"quarantined": rows})))
}

/// Lifts a quarantine: the plugin's timers run again (and, if it still
/// runs away, it is quarantined again at the next window's ceiling).
async fn release(
    State(host): State<Arc<Host>>,
    Extension(caller): Extension<Caller>,
    Path(kind): Path<String>,
) -> Result<StatusCode, ApiError> {
    let now = host.clock.now_ms();
    let released = governor::release(host.kv.as_ref(), &kind, &caller.actor(), now)
        .await
        .map_err(|e| timer_failure("release the quarantine", &e))?;
    if released {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found(format!(
            "no plugin of timer kind {kind:?} is quarantined"
        )))
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Page {
    /// The `next_cursor` of the previous page.
    cursor: Option<String>,
    /// Timers per page, 1..=1000 (default 100).
    limit: Option<u32>,
}

async fn list(
    State(host): State<Arc<Host>>,
    page: Result<Query<Page>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let page = query(page)?;
    let limit = page.limit.unwrap_or(100);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::invalid(format!(
            "limit must be between 1 and {MAX_PAGE}"
        )));
    }
    let cursor = page
        .cursor
        .as_deref()
        .map(|c| cursor_from_hex(c).ok_or_else(|| ApiError::invalid("the cursor is not a cursor")))
        .transpose()?;
    let (timers, next) = timers::list(host.kv.as_ref(), cursor.as_deref(), limit)
        .await
        .map_err(|e| ApiError::of_server_call(e.kind(), format!("cannot read the timers: {e}")))?;
    let timers: Vec<TimerSummary> = timers.iter().map(TimerSummary::from).collect();
    Ok(Json(
        json!({"timers": timers, "next_cursor": next.as_deref().map(cursor_to_hex)}),
    ))
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use crate::serve::http::test_client::get;
    use crate::serve::test_host::test_host;
    use custodian_core::timers;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn scheduled_timers_are_listed_in_due_order_page_by_page() {
        let host = test_host().await;
        for (reference, due) in [(b"b", 20u64), (b"a", 10)] {
            timers::schedule(host.kv.as_ref(), "takedown", reference, due)
                .await
                .unwrap();
        }
        let page = get(&host, "/v1/timers?limit=1")
            .await
            .expect(StatusCode::OK)
            .json();
        assert_eq!(page["timers"][0]["reference"], "a");
        assert_eq!(page["timers"][0]["due_ms"], 10);
        let cursor = page["next_cursor"].as_str().unwrap().to_owned();
        let page = get(&host, &format!("/v1/timers?limit=1&cursor={cursor}"))
            .await
            .expect(StatusCode::OK)
            .json();
        assert_eq!(page["timers"][0]["reference"], "b");
        assert_eq!(page["next_cursor"], serde_json::Value::Null);
        let refused = get(&host, "/v1/timers?limit=0").await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST);
        assert_eq!(refused.code(), "invalid_argument");
    }
}
