//! The pull feed of cache invalidations ([`crate::invalidation`]), for
//! consumers that fetch rather than receive a webhook:
//!
//! - `GET /v1/invalidations?cursor=&limit=`: `{"entries": [{"id",
//!   "idempotency_key", "request", "repository", "objects",
//!   "requested_ms", "attempts", "next_attempt_ms", "last_error"}],
//!   "next": CURSOR|null}`, in planning order, `limit` 1..=1000 (default
//!   100); a row that does not decode is listed as `{"id", "corrupt"}`.
//! - `POST /v1/invalidations/ack` with `{"ids": [ID…]}` (1..=1000):
//!   deletes those entries → `{"acknowledged": [ID…], "unknown": [ID…]}`;
//!   an id not in the outbox (already delivered or acknowledged) is
//!   reported as unknown, one that is not an id at all is a 400 and
//!   nothing is deleted. Audited (`invalidation/ack`) under the caller.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

use super::ApiError;
use super::auth::Caller;
use super::extract::{BodyLimit, cursor_from_hex, cursor_to_hex, json_body, query};
use crate::invalidation::outbox::{self, MAX_PAGE, OutboxError, Row};
use crate::serve::Host;

/// Entries per page when the client does not say.
const DEFAULT_PAGE: u32 = 100;

/// Largest acknowledgement body: [`MAX_PAGE`] ids of the longest key's hex
/// (2 KiB each) with JSON around them.
const ACK_BODY: BodyLimit = BodyLimit {
    bytes: 2 << 20,
    per: "acknowledgement",
};

pub(super) fn routes() -> Router<Arc<Host>> {
    Router::new()
        .route("/v1/invalidations", get(list))
        .route("/v1/invalidations/ack", post(ack))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Page {
    /// The `next` of the previous page.
    cursor: Option<String>,
    /// Entries per page, 1..=1000 (default 100).
    limit: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Ack {
    /// The ids (hex keys) of the entries acknowledged.
    ids: Vec<String>,
}

fn failed(error: OutboxError, what: &str) -> ApiError {
    match error {
        OutboxError::InvalidArgument(message) => ApiError::invalid(message),
        OutboxError::Kv(kv) => ApiError::of_kv(&kv, what),
    }
}

async fn list(
    State(host): State<Arc<Host>>,
    page: Result<Query<Page>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let page = query(page)?;
    let cursor = page
        .cursor
        .as_deref()
        .map(|c| cursor_from_hex(c).ok_or_else(|| ApiError::invalid("the cursor is not a cursor")))
        .transpose()?;
    let limit = page.limit.unwrap_or(DEFAULT_PAGE);
    let page = outbox::page(host.kv.as_ref(), cursor.as_deref(), limit)
        .await
        .map_err(|e| failed(e, "cannot read the invalidation outbox"))?;
    let entries: Vec<Value> = page.rows.iter().map(Row::to_json).collect();
    Ok(Json(json!({
        "entries": entries,
        "next": page.next.as_deref().map(cursor_to_hex),
    })))
}

async fn ack(
    State(host): State<Arc<Host>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let ack: Ack = json_body(
        &host.bodies,
        body,
        &headers,
        ACK_BODY,
        "an acknowledgement {\"ids\": [...]}",
    )
    .await?;
    if ack.ids.is_empty() || ack.ids.len() > MAX_PAGE as usize {
        return Err(ApiError::invalid(format!(
            "an acknowledgement names 1..={MAX_PAGE} ids, not {}",
            ack.ids.len()
        )));
    }
    let keys = ack
        .ids
        .iter()
        .map(|id| outbox::parse_id(id))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| failed(e, "the ids"))?;
    let acked = outbox::ack(
        host.kv.as_ref(),
        &keys,
        &caller.actor(),
        host.clock.now_ms(),
    )
    .await
    .map_err(|e| failed(e, "cannot acknowledge the invalidations"))?;
    host.metrics
        .invalidations_acknowledged(acked.acknowledged.len() as u64);
    let hex = |keys: &[Vec<u8>]| keys.iter().map(hex::encode).collect::<Vec<_>>();
    Ok(Json(json!({
        "acknowledged": hex(&acked.acknowledged),
        "unknown": hex(&acked.unknown),
    })))
}

#[cfg(test)]
mod tests {
    use axum::http::{Method, StatusCode};
    use serde_json::{Value, json};

    use crate::invalidation::{Entry, PARTITION};
    use crate::serve::http::test_client::{get, send};
    use crate::serve::test_host::test_host;
    use custodian_kv::{Batch, Partition, Write};

    fn entry(ms: u64, repository: &str) -> Entry {
        Entry {
            requested_ms: ms,
            request: [3; 32],
            repository: repository.into(),
            objects: vec![[8; 32]],
        }
    }

    async fn plan(host: &crate::serve::Host, entries: &[Entry]) {
        let batch = Batch {
            preconditions: vec![],
            writes: entries
                .iter()
                .map(|e| Write::Put {
                    partition: Partition::new(PARTITION).unwrap(),
                    key: e.key(),
                    value: e.value(),
                })
                .collect(),
        };
        host.kv.apply(&batch).await.unwrap();
    }

    fn keys(page: &Value) -> Vec<String> {
        page["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["idempotency_key"].as_str().unwrap().to_owned())
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_feed_pages_in_planning_order_and_an_acknowledgement_removes_entries() {
        let host = test_host().await;
        let planned = [entry(30, "c/c"), entry(10, "a/a"), entry(20, "b/b")];
        plan(&host, &planned).await;
        let first = get(&host, "/v1/invalidations?limit=2")
            .await
            .expect(StatusCode::OK)
            .json();
        assert_eq!(
            keys(&first),
            [planned[1].idempotency_key(), planned[2].idempotency_key()]
        );
        let entry = &first["entries"][0];
        assert_eq!(entry["id"], hex::encode(planned[1].key()));
        assert_eq!(entry["request"], "03".repeat(32));
        assert_eq!(entry["repository"], "a/a");
        assert_eq!(entry["objects"], json!(["08".repeat(32)]));
        assert_eq!(entry["requested_ms"], 10);
        assert_eq!(entry["attempts"], 0);
        assert_eq!(entry["last_error"], Value::Null);
        let cursor = first["next"].as_str().unwrap();
        let second = get(&host, &format!("/v1/invalidations?limit=2&cursor={cursor}"))
            .await
            .expect(StatusCode::OK)
            .json();
        assert_eq!(keys(&second), [planned[0].idempotency_key()]);
        assert_eq!(second["next"], Value::Null);

        let ghost = hex::encode(entry_key("g/g"));
        let body = json!({"ids": [first["entries"][0]["id"], first["entries"][1]["id"], ghost]});
        let acked = send(
            &host,
            Method::POST,
            "/v1/invalidations/ack",
            &[],
            body.to_string(),
        )
        .await
        .expect(StatusCode::OK)
        .json();
        assert_eq!(acked["acknowledged"].as_array().unwrap().len(), 2);
        assert_eq!(acked["unknown"], json!([ghost]));
        let left = get(&host, "/v1/invalidations").await.json();
        assert_eq!(keys(&left), [planned[0].idempotency_key()]);
        let audit = get(&host, "/v1/audit?principal=admin").await.json();
        let events: Vec<&str> = audit["records"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["event"].as_str().unwrap())
            .collect();
        assert_eq!(events, ["invalidation/ack"]);
    }

    fn entry_key(repository: &str) -> Vec<u8> {
        entry(99, repository).key()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bad_pages_and_malformed_acknowledgements_are_400_and_delete_nothing() {
        let host = test_host().await;
        plan(&host, &[entry(10, "a/a")]).await;
        for uri in [
            "/v1/invalidations?limit=0",
            "/v1/invalidations?limit=1001",
            "/v1/invalidations?cursor=zz",
            "/v1/invalidations?cursor=00",
            "/v1/invalidations?limt=5",
        ] {
            let reply = get(&host, uri).await;
            assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{uri}");
            assert_eq!(reply.code(), "invalid_argument", "{uri}");
        }
        let id = hex::encode(entry_key("a/a"));
        let too_many: Vec<String> = vec![id.clone(); 1001];
        for body in [
            json!({"ids": [id, "not-hex"]}).to_string(),
            json!({"ids": [id, "65"]}).to_string(),
            json!({"ids": []}).to_string(),
            json!({"ids": too_many}).to_string(),
            json!({"id": [id]}).to_string(),
            "{".to_owned(),
        ] {
            let reply = send(
                &host,
                Method::POST,
                "/v1/invalidations/ack",
                &[],
                body.clone(),
            )
            .await;
            assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{body:.80}");
            assert_eq!(reply.code(), "invalid_argument");
        }
        let left = get(&host, "/v1/invalidations").await.json();
        assert_eq!(left["entries"].as_array().unwrap().len(), 1);
    }
}
