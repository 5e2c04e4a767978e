//! A client of the API for its tests: requests through the whole router,
//! token and all, and their responses taken apart.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use bytes::Bytes;
use serde_json::Value;
use tower::ServiceExt;

use super::router;
use crate::serve::Host;
use crate::serve::test_host::BEARER;

/// A response, taken apart.
pub(super) struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Reply {
    /// The body as JSON; panics, showing it, if it is not.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {:?}", String::from_utf8_lossy(&self.body)))
    }

    /// The error body's code.
    pub fn code(&self) -> String {
        self.json()["error"]["code"].as_str().unwrap().to_owned()
    }

    /// The header `name`; panics if it is missing.
    pub fn header(&self, name: impl axum::http::header::AsHeaderName) -> &str {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap())
            .unwrap_or_else(|| panic!("missing header in {:?}", self.headers))
    }

    /// Panics, showing the body, unless the status is `status`.
    pub fn expect(self, status: StatusCode) -> Self {
        assert_eq!(
            self.status,
            status,
            "{}",
            String::from_utf8_lossy(&self.body)
        );
        self
    }
}

/// `app`'s answer to `request`.
pub(super) async fn respond(app: Router, request: Request<Body>) -> Reply {
    let response = app.oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    Reply {
        status,
        headers,
        body,
    }
}

/// Sends a request through the whole router over `host`, with the token
/// unless `headers` names an `authorization` (an empty value sends none).
pub(super) async fn send(
    host: &Arc<Host>,
    method: Method,
    uri: &str,
    headers: &[(&str, &str)],
    body: impl Into<Body>,
) -> Reply {
    let mut builder = Request::builder().method(method).uri(uri);
    if !headers.iter().any(|(name, _)| *name == "authorization") {
        builder = builder.header("authorization", BEARER);
    }
    for (name, value) in headers.iter().filter(|(_, value)| !value.is_empty()) {
        builder = builder.header(*name, *value);
    }
    respond(router(host.clone()), builder.body(body.into()).unwrap()).await
}

/// `GET uri` with the token.
pub(super) async fn get(host: &Arc<Host>, uri: &str) -> Reply {
    send(host, Method::GET, uri, &[], Body::empty()).await
}

/// Pushes `bytes` to `repo`'s file `path` through the API, expecting 200;
/// the entry.
pub(super) async fn push(host: &Arc<Host>, repo: &str, path: &str, bytes: Vec<u8>) -> Value {
    let uri = format!("/v1/repos/{repo}/files/{path}");
    send(host, Method::PUT, &uri, &[], bytes)
        .await
        .expect(StatusCode::OK)
        .json()
}
