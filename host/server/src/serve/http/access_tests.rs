//! Who may do what through the API, attacked as a stranger, as a
//! principal with too few roles and with forged credentials: every route
//! and method, with the bundled access plugin deciding.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use serde_json::{Value, json};

use super::access::classify;
use super::router;
use super::test_client::{Reply, get, respond, send};
use crate::serve::Host;
use crate::serve::test_host::test_host;
use custodian_core::decisions::access::Action;

/// Every route and method of the API but the probes, with a concrete URI.
const ROUTES: &[(Method, &str)] = &[
    (Method::PUT, "/v1/stores/serving/objects/k"),
    (Method::GET, "/v1/stores/serving/objects/k"),
    (Method::HEAD, "/v1/stores/serving/objects/k"),
    (Method::DELETE, "/v1/stores/serving/objects/k"),
    (Method::DELETE, "/v1/stores/serving/objects/k?version_id=v1"),
    (Method::GET, "/v1/stores/serving/objects"),
    (Method::GET, "/v1/stores/serving/versions"),
    (Method::PUT, "/v1/stores/preserved/objects/k"),
    (
        Method::DELETE,
        "/v1/stores/preserved/objects/k?version_id=v1",
    ),
    (Method::PUT, "/v1/repos/ns/repo/files/a.txt"),
    (Method::GET, "/v1/repos/ns/repo/files/a.txt"),
    (Method::GET, "/v1/repos/ns/repo/files"),
    (Method::POST, "/v1/takedowns"),
    (Method::GET, "/v1/takedowns/00"),
    (Method::DELETE, "/v1/takedowns/00"),
    (Method::PUT, "/v1/takedowns/00/hold"),
    (Method::POST, "/v1/jobs/verify"),
    (Method::POST, "/v1/jobs/purge"),
    (Method::GET, "/v1/jobs"),
    (Method::GET, "/v1/jobs/00"),
    (Method::GET, "/v1/audit"),
    (Method::GET, "/v1/timers"),
    (Method::GET, "/v1/timers/quarantine"),
    (Method::DELETE, "/v1/timers/quarantine/takedown"),
    (Method::GET, "/v1/invalidations"),
    (Method::POST, "/v1/invalidations/ack"),
    (Method::GET, "/v1/plugins"),
    (Method::PUT, "/v1/plugins/retention"),
    (Method::GET, "/v1/principals"),
    (Method::POST, "/v1/principals"),
    (Method::GET, "/v1/principals/admin"),
    (Method::DELETE, "/v1/principals/admin"),
    (Method::PUT, "/v1/principals/admin/roles"),
    (Method::POST, "/v1/principals/admin/credentials"),
    (Method::POST, "/v1/principals/admin/rotate"),
    (
        Method::DELETE,
        "/v1/principals/admin/credentials/0000000000000000",
    ),
];

/// Creates principal `name` with `roles` through the API as the admin;
/// its bearer header value.
async fn principal(host: &Arc<Host>, name: &str, roles: &[&str]) -> String {
    let body = json!({"name": name, "roles": roles}).to_string();
    let created = send(host, Method::POST, "/v1/principals", &[], body)
        .await
        .expect(StatusCode::CREATED)
        .json();
    format!(
        "Bearer {}",
        created["credential"]["token"].as_str().unwrap()
    )
}

async fn as_(host: &Arc<Host>, bearer: &str, method: Method, uri: &str, body: &str) -> Reply {
    send(
        host,
        method,
        uri,
        // Object PUTs create: the store has no unguarded publish.
        &[("authorization", bearer), ("if-none-match", "*")],
        body.to_owned(),
    )
    .await
}

/// Sends `method uri` with the raw `authorization` value (any bytes).
async fn raw_auth(host: &Arc<Host>, value: &[u8]) -> Reply {
    let request = Request::builder()
        .method(Method::GET)
        .uri("/v1/stores/serving/objects")
        .header("authorization", value)
        .body(Body::empty())
        .unwrap();
    respond(router(host.clone()), request).await
}

fn denials(audit: &Value) -> Vec<&Value> {
    audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["event"] == "access/denied")
        .collect()
}

#[tokio::test]
async fn a_stranger_gets_401_on_every_route_and_method_and_the_probes_stay_open() {
    let host = test_host().await;
    for (method, uri) in ROUTES {
        let reply = send(&host, method.clone(), uri, &[("authorization", "")], "").await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{method} {uri}");
    }
    for probe in ["/healthz", "/readyz", "/metrics"] {
        let reply = send(&host, Method::GET, probe, &[("authorization", "")], "").await;
        assert_eq!(reply.status, StatusCode::OK, "{probe}");
    }
}

#[tokio::test]
async fn a_principal_without_roles_is_refused_everywhere_and_every_refusal_is_audited() {
    let host = test_host().await;
    let nobody = principal(&host, "nobody", &[]).await;
    for (method, uri) in ROUTES {
        let reply = as_(&host, &nobody, method.clone(), uri, "").await;
        assert_eq!(reply.status, StatusCode::FORBIDDEN, "{method} {uri}");
        if *method != Method::HEAD {
            assert_eq!(reply.code(), "forbidden", "{method} {uri}");
        }
    }
    let audit = get(&host, "/v1/audit?principal=nobody&limit=1000")
        .await
        .json();
    let denied = denials(&audit);
    assert_eq!(denied.len(), ROUTES.len(), "{audit}");
    assert!(denied.iter().all(|r| r["actor"] == "principal:nobody"));
    let metrics = get(&host, "/metrics").await;
    let text = String::from_utf8_lossy(&metrics.body);
    // A swap and a quarantine's release: both manage plugins.
    assert!(
        text.contains(r#"custodian_access_decisions_total{action="swap-plugin",principal="nobody",outcome="denied"} 2"#),
        "{text}"
    );
}

#[tokio::test]
async fn a_reader_reads_but_cannot_write_and_a_writer_of_serving_cannot_touch_preserved() {
    let host = test_host().await;
    send(
        &host,
        Method::PUT,
        "/v1/stores/serving/objects/k",
        &[("if-none-match", "*")],
        "v1",
    )
    .await
    .expect(StatusCode::CREATED);
    let reader = principal(&host, "reader", &["reader:store/serving"]).await;
    as_(
        &host,
        &reader,
        Method::GET,
        "/v1/stores/serving/objects/k",
        "",
    )
    .await
    .expect(StatusCode::OK);
    let refused = as_(
        &host,
        &reader,
        Method::PUT,
        "/v1/stores/serving/objects/k",
        "v2",
    )
    .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert!(
        refused.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("reader")
    );
    let writer = principal(&host, "writer", &["writer:store/serving"]).await;
    as_(
        &host,
        &writer,
        Method::PUT,
        "/v1/stores/serving/objects/k2",
        "v2",
    )
    .await
    .expect(StatusCode::CREATED);
    for (method, uri) in [
        (Method::GET, "/v1/stores/preserved/objects/k"),
        (Method::PUT, "/v1/stores/preserved/objects/k"),
        (Method::DELETE, "/v1/stores/preserved/objects/k"),
        (
            Method::DELETE,
            "/v1/stores/preserved/objects/k?version_id=x",
        ),
    ] {
        let reply = as_(&host, &writer, method.clone(), uri, "x").await;
        assert_eq!(reply.status, StatusCode::FORBIDDEN, "{method} {uri}");
    }
}

#[tokio::test]
async fn no_principal_not_even_the_admin_writes_or_deletes_in_preserved_through_the_api() {
    let host = test_host().await;
    for (method, uri) in [
        (Method::PUT, "/v1/stores/preserved/objects/piece"),
        (Method::DELETE, "/v1/stores/preserved/objects/piece"),
        (
            Method::DELETE,
            "/v1/stores/preserved/objects/piece?version_id=v",
        ),
    ] {
        let reply = send(&host, method.clone(), uri, &[], "x").await;
        assert_eq!(reply.status, StatusCode::FORBIDDEN, "{method} {uri}");
        assert!(
            reply.json()["error"]["message"]
                .as_str()
                .unwrap()
                .contains("evidence")
        );
    }
    let audit = get(&host, "/v1/audit?principal=admin").await.json();
    assert_eq!(denials(&audit).len(), 3, "{audit}");
}

#[tokio::test]
async fn a_revoked_token_is_refused_at_once_and_a_rotated_one_replaces_it() {
    let host = test_host().await;
    let bob = principal(&host, "bob", &["reader"]).await;
    let listed = get(&host, "/v1/principals/bob").await.json();
    let id = listed["credentials"][0].as_str().unwrap().to_owned();
    as_(&host, &bob, Method::GET, "/v1/stores/serving/objects", "")
        .await
        .expect(StatusCode::OK);
    let uri = format!("/v1/principals/bob/credentials/{id}");
    send(&host, Method::DELETE, &uri, &[], "")
        .await
        .expect(StatusCode::OK);
    as_(&host, &bob, Method::GET, "/v1/stores/serving/objects", "")
        .await
        .expect(StatusCode::UNAUTHORIZED);
    let rotated = send(&host, Method::POST, "/v1/principals/bob/rotate", &[], "")
        .await
        .expect(StatusCode::OK)
        .json();
    let fresh = format!(
        "Bearer {}",
        rotated["credential"]["token"].as_str().unwrap()
    );
    as_(&host, &fresh, Method::GET, "/v1/stores/serving/objects", "")
        .await
        .expect(StatusCode::OK);
    let audit = get(&host, "/v1/audit?principal=admin").await.json();
    let events: Vec<&str> = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        events,
        ["principal/create", "principal/revoke", "principal/rotate"]
    );
}

#[tokio::test]
async fn malformed_oversized_non_utf8_and_forged_credentials_get_401() {
    let host = test_host().await;
    let bob = principal(&host, "bob", &["reader"]).await;
    let token = bob.strip_prefix("Bearer ").unwrap().to_owned();
    let mut near_miss = token.clone().into_bytes();
    let last = near_miss.len() - 1;
    near_miss[last] = if near_miss[last] == b'0' { b'1' } else { b'0' };
    let mut values: Vec<Vec<u8>> = vec![
        b"Bearer".to_vec(),
        b"Bearer ".to_vec(),
        b"bearer 0123456789abcdef0123".to_vec(),
        b"Basic YWRtaW46YWRtaW4=".to_vec(),
        [b"Bearer ".as_slice(), &near_miss].concat(),
        [b"Bearer ".as_slice(), token.as_bytes(), b"x"].concat(),
        format!("Bearer {}", &token[..token.len() - 1]).into_bytes(),
        format!("Bearer cust_{}_{}", "0".repeat(16), "0".repeat(64)).into_bytes(),
        [
            b"Bearer ".as_slice(),
            &[0xc3, 0x28, 0xa0, 0xa1, 0xff, 0xfe, 0x80, 0x81][..],
        ]
        .concat()
        .repeat(4),
        [b"Bearer ".as_slice(), &vec![b'a'; 64 << 10]].concat(),
    ];
    values.push([b"Bearer ".as_slice(), &vec![b'z'; 1 << 20]].concat());
    for value in values {
        let reply = raw_auth(&host, &value).await;
        assert_eq!(
            reply.status,
            StatusCode::UNAUTHORIZED,
            "{:?}",
            String::from_utf8_lossy(&value[..value.len().min(40)])
        );
        assert_eq!(reply.code(), "unauthorized");
    }
    raw_auth(&host, bob.as_bytes()).await.expect(StatusCode::OK);
}

#[tokio::test]
async fn only_an_admin_manages_principals_and_bad_input_is_400_or_409() {
    let host = test_host().await;
    let operator = principal(&host, "op", &["operator"]).await;
    let body = json!({"name": "eve", "roles": ["admin"]}).to_string();
    as_(&host, &operator, Method::POST, "/v1/principals", &body)
        .await
        .expect(StatusCode::FORBIDDEN);
    as_(
        &host,
        &operator,
        Method::PUT,
        "/v1/principals/op/roles",
        r#"{"roles":["admin"]}"#,
    )
    .await
    .expect(StatusCode::FORBIDDEN);
    for bad in [
        json!({"name": "Eve"}),
        json!({"name": "eve", "roles": ["has space"]}),
        json!({"name": "eve", "extra": 1}),
    ] {
        let reply = send(&host, Method::POST, "/v1/principals", &[], bad.to_string()).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{bad}");
    }
    send(
        &host,
        Method::POST,
        "/v1/principals",
        &[],
        json!({"name": "op"}).to_string(),
    )
    .await
    .expect(StatusCode::CONFLICT);
    send(&host, Method::GET, "/v1/principals/ghost", &[], "")
        .await
        .expect(StatusCode::NOT_FOUND);
    let listed = get(&host, "/v1/principals").await.json();
    let names: Vec<&str> = listed["principals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["admin", "op"]);
    assert!(!listed.to_string().contains("cust_"), "{listed}");
}

#[tokio::test]
async fn auditors_read_the_invalidation_feed_operators_also_acknowledge_and_readers_do_neither() {
    let host = test_host().await;
    let auditor = principal(&host, "aud", &["auditor"]).await;
    let operator = principal(&host, "op", &["operator"]).await;
    let reader = principal(&host, "rd", &["reader"]).await;
    let ack = r#"{"ids": ["65"]}"#;
    as_(&host, &auditor, Method::GET, "/v1/invalidations", "")
        .await
        .expect(StatusCode::OK);
    as_(&host, &auditor, Method::POST, "/v1/invalidations/ack", ack)
        .await
        .expect(StatusCode::FORBIDDEN);
    as_(&host, &operator, Method::GET, "/v1/invalidations", "")
        .await
        .expect(StatusCode::OK);
    // Past the gate: the id is malformed, the handler's 400.
    as_(&host, &operator, Method::POST, "/v1/invalidations/ack", ack)
        .await
        .expect(StatusCode::BAD_REQUEST);
    as_(&host, &reader, Method::GET, "/v1/invalidations", "")
        .await
        .expect(StatusCode::FORBIDDEN);
}

/// A route as classified: method, matched route, path parameters, query,
/// and the action it must be.
type Case<'a> = (
    Method,
    &'a str,
    &'a HashMap<String, String>,
    &'a HashMap<String, String>,
    Action,
);

#[test]
fn every_route_is_classified_as_the_action_it_performs() {
    let none = HashMap::new();
    let params = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    let object = params(&[("store", "serving"), ("key", "a/b")]);
    let version = [("version_id".to_owned(), "v1".to_owned())].into();
    let cases: Vec<Case<'_>> = vec![
        (
            Method::GET,
            "/v1/stores/{store}/objects/{*key}",
            &object,
            &none,
            Action::Read,
        ),
        (
            Method::HEAD,
            "/v1/stores/{store}/objects/{*key}",
            &object,
            &none,
            Action::Read,
        ),
        (
            Method::PUT,
            "/v1/stores/{store}/objects/{*key}",
            &object,
            &none,
            Action::Write,
        ),
        (
            Method::DELETE,
            "/v1/stores/{store}/objects/{*key}",
            &object,
            &none,
            Action::Delete,
        ),
        (
            Method::DELETE,
            "/v1/stores/{store}/objects/{*key}",
            &object,
            &version,
            Action::DeleteVersion,
        ),
        (
            Method::GET,
            "/v1/stores/{store}/versions",
            &object,
            &none,
            Action::List,
        ),
        (
            Method::POST,
            "/v1/takedowns",
            &none,
            &none,
            Action::TakedownFile,
        ),
        (
            Method::PUT,
            "/v1/takedowns/{id}/hold",
            &none,
            &none,
            Action::Hold,
        ),
        (
            Method::POST,
            "/v1/takedowns/{id}/extend",
            &none,
            &none,
            Action::Hold,
        ),
        (
            Method::DELETE,
            "/v1/takedowns/{id}",
            &none,
            &none,
            Action::Withdraw,
        ),
        (
            Method::POST,
            "/v1/jobs/purge",
            &none,
            &none,
            Action::StartJob,
        ),
        (Method::GET, "/v1/timers", &none, &none, Action::Inspect),
        (
            Method::GET,
            "/v1/timers/quarantine",
            &none,
            &none,
            Action::Inspect,
        ),
        (
            Method::DELETE,
            "/v1/timers/quarantine/{kind}",
            &none,
            &none,
            Action::SwapPlugin,
        ),
        (
            Method::GET,
            "/v1/invalidations",
            &none,
            &none,
            Action::Inspect,
        ),
        (
            Method::POST,
            "/v1/invalidations/ack",
            &none,
            &none,
            Action::TakedownFile,
        ),
        (
            Method::PUT,
            "/v1/plugins/{world}",
            &none,
            &none,
            Action::SwapPlugin,
        ),
        (Method::POST, "/v1/principals", &none, &none, Action::Admin),
    ];
    for (method, route, params, query, want) in cases {
        let (action, _) = classify(&method, route, params, query, Some(3)).unwrap();
        assert_eq!(action, want, "{method} {route}");
    }
    let (_, target) = classify(
        &Method::DELETE,
        "/v1/stores/{store}/objects/{*key}",
        &object,
        &version,
        None,
    )
    .unwrap();
    assert_eq!(target.store.as_deref(), Some("serving"));
    assert_eq!(target.key.as_deref(), Some("a/b"));
    assert_eq!(target.version.as_deref(), Some("v1"));
    assert!(
        classify(
            &Method::PATCH,
            "/v1/stores/{store}/objects/{*key}",
            &object,
            &none,
            None
        )
        .is_none()
    );
    assert!(classify(&Method::POST, "/v1/audit", &none, &none, None).is_none());
}
