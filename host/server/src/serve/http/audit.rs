//! `GET /v1/audit`: the audit log of a running server, whose data
//! directory no other process may open while it runs; `?principal=NAME`
//! keeps what that principal's requests did (and was refused).

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::routing::get;
use serde::Deserialize;
use serde_json::{Value, json};

use super::ApiError;
use super::extract::{cursor_from_hex, cursor_to_hex, query};
use crate::serve::Host;
use custodian_core::audit;

/// Largest page: one page is one KV scan held in memory.
const MAX_PAGE: u32 = 1_000;

pub(super) fn routes() -> Router<Arc<Host>> {
    Router::new().route("/v1/audit", get(read))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Page {
    /// Records at or after this time, ms since the epoch.
    #[serde(default)]
    since_ms: u64,
    /// The `next_cursor` of the previous page.
    cursor: Option<String>,
    /// Records per page, 1..=1000 (default 100).
    limit: Option<u32>,
    /// Only the records this principal's requests made (actor
    /// `principal:NAME`). A page is filtered after it is read, so it may
    /// hold fewer than `limit` records (even none) before the log's end:
    /// follow `next_cursor` until it is `null`.
    principal: Option<String>,
    /// Only records whose event starts with this (`decision/` for the
    /// decision log); filtered as `principal` is.
    event: Option<String>,
    /// Only records by this actor.
    actor: Option<String>,
    /// Only records with this target (`plugin:HASH`, `outcome:deny`).
    target: Option<String>,
}

async fn read(
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
    let (records, next) = audit::read(host.kv.as_ref(), page.since_ms, cursor.as_deref(), limit)
        .await
        .map_err(|e| ApiError::of_kv(&e, "cannot read the audit log"))?;
    let by_principal = page
        .principal
        .as_deref()
        .map(custodian_core::decisions::access::actor);
    if by_principal.is_some() && page.actor.is_some() {
        return Err(ApiError::invalid("give principal or actor, not both"));
    }
    let filter = audit::Filter {
        event_prefix: page.event,
        actor: by_principal.or(page.actor),
        target: page.target,
    };
    let records: Vec<_> = records.into_iter().filter(|r| filter.matches(r)).collect();
    let next = next.as_deref().map(cursor_to_hex);
    Ok(Json(json!({"records": records, "next_cursor": next})))
}
