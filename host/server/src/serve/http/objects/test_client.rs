//! A client of the object routes for their tests: the routes alone (no
//! token) over a test host, and the requests the tests send.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::header::ETAG;
use axum::http::{Method, Request, StatusCode};

use super::routes;
use crate::serve::RequestLimits;
use crate::serve::http::test_client::{Reply, respond};
use crate::serve::test_host::test_host_with;
use custodian_base::clock::SystemClock;

/// The limit on bodies in these tests.
pub(super) const LIMIT: u64 = 1024;

/// The routes over the shared test host, whose `serving` store is a
/// versioned memory store.
pub(super) async fn app() -> Router {
    let limits = RequestLimits {
        max_object_bytes: LIMIT,
        ..RequestLimits::default()
    };
    routes().with_state(test_host_with(Arc::new(SystemClock), limits).await)
}

pub(super) async fn send(app: &Router, request: Request<Body>) -> Reply {
    respond(app.clone(), request).await
}

pub(super) fn request(
    method: Method,
    uri: &str,
    headers: &[(&str, &str)],
    body: Body,
) -> Request<Body> {
    let mut builder = Request::builder().method(method).uri(uri);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder.body(body).unwrap()
}

pub(super) async fn put(app: &Router, key: &str, headers: &[(&str, &str)], body: &[u8]) -> Reply {
    let uri = format!("/v1/stores/serving/objects/{key}");
    let body = Body::from(body.to_vec());
    send(app, request(Method::PUT, &uri, headers, body)).await
}

pub(super) async fn get(app: &Router, uri: &str, headers: &[(&str, &str)]) -> Reply {
    send(app, request(Method::GET, uri, headers, Body::empty())).await
}

/// Creates `key` with `body`, returning its etag.
pub(super) async fn create(app: &Router, key: &str, body: &[u8]) -> String {
    let reply = put(app, key, &[("if-none-match", "*")], body).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:?}", reply.body);
    reply.header(ETAG).to_owned()
}
