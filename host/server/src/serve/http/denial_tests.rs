//! Takedown denial through the API, attacked from every read and write
//! path: a filed request answers 451 everywhere its content is served or
//! accepted, at once; a withdrawal serves it again.

use std::sync::Arc;

use axum::http::header::LINK;
use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

use super::test_client::{Reply, get, push, send};
use crate::serve::Host;
use crate::serve::test_host::test_host;
use custodian_core::content::{CHUNK_BYTES, ObjectId};

/// Files a takedown of `objects` against `repo`; the filing's answer.
async fn take_down(host: &Arc<Host>, repo: &str, objects: &[&str]) -> Value {
    let body = json!({"repository": repo, "objects": objects});
    send(host, Method::POST, "/v1/takedowns", &[], body.to_string())
        .await
        .expect(StatusCode::CREATED)
        .json()
}

async fn withdraw(host: &Arc<Host>, id: &str) -> Reply {
    let uri = format!("/v1/takedowns/{id}");
    send(host, Method::DELETE, &uri, &[], "").await
}

/// Asserts `reply` is 451 `taken_down` naming request `id`, with the RFC
/// 7725 link to it.
fn assert_taken_down(reply: Reply, id: &str, what: &str) {
    assert_eq!(
        reply.status,
        StatusCode::UNAVAILABLE_FOR_LEGAL_REASONS,
        "{what}: {}",
        String::from_utf8_lossy(&reply.body)
    );
    assert_eq!(
        reply.header(LINK),
        format!("</v1/takedowns/{id}>; rel=\"blocked-by\""),
        "{what}"
    );
    if !reply.body.is_empty() {
        let error = &reply.json()["error"];
        assert_eq!(error["code"], "taken_down", "{what}");
        assert_eq!(error["request"], id, "{what}");
        assert!(error["since_ms"].as_u64().is_some(), "{what}");
    }
}

/// Deterministic bytes that differ per `seed`.
fn bytes(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 11) as u8)
        .collect()
}

fn chunk() -> usize {
    usize::try_from(CHUNK_BYTES).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_filed_takedown_answers_451_on_every_read_path_of_both_repositories_at_once() {
    let host = test_host().await;
    let file = bytes(1, 3000);
    let entry = push(&host, "alpha/one", "doc/report.pdf", file.clone()).await;
    push(&host, "beta/two", "copy.pdf", file.clone()).await;
    let object = entry["id"].as_str().unwrap().to_owned();
    let filed = take_down(&host, "alpha/one", &[&object]).await;
    let id = filed["id"].as_str().unwrap();
    assert_eq!(filed["denial_settled"], true, "{filed}");

    let content = format!("/v1/stores/serving/objects/content/{object}");
    for (method, uri, headers) in [
        (
            Method::GET,
            "/v1/repos/alpha/one/files/doc/report.pdf",
            vec![],
        ),
        (
            Method::HEAD,
            "/v1/repos/alpha/one/files/doc/report.pdf",
            vec![],
        ),
        (Method::GET, "/v1/repos/beta/two/files/copy.pdf", vec![]),
        (
            Method::GET,
            "/v1/repos/beta/two/files/copy.pdf",
            vec![("range", "bytes=0-9")],
        ),
        (
            Method::GET,
            "/v1/repos/beta/two/files/copy.pdf",
            vec![("if-none-match", "*")],
        ),
        (Method::GET, content.as_str(), vec![]),
        (Method::HEAD, content.as_str(), vec![]),
        (Method::GET, content.as_str(), vec![("range", "bytes=-5")]),
    ] {
        let what = format!("{method} {uri} {headers:?}");
        let reply = send(&host, method, uri, &headers, "").await;
        assert_taken_down(reply, id, &what);
    }
    let version = format!("{content}?version_id=anything");
    assert_taken_down(get(&host, &version).await, id, "an exact version");

    // Listed, marked, so owners see what happened.
    for uri in ["/v1/repos/alpha/one/files", "/v1/repos/beta/two/files"] {
        let listed = get(&host, uri).await.expect(StatusCode::OK).json();
        let entry = &listed["entries"][0];
        assert_eq!(entry["id"], object.as_str(), "{uri}");
        assert_eq!(entry["taken_down"]["request"], id, "{uri}");
    }
    let store = get(&host, "/v1/stores/serving/objects?prefix=content/")
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(store["objects"][0]["taken_down"]["request"], id);
    let versions = get(&host, "/v1/stores/serving/versions?prefix=content/")
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(versions["versions"][0]["taken_down"]["request"], id);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_same_bytes_cannot_be_pushed_again_anywhere_and_nothing_is_entered() {
    let host = test_host().await;
    let file = bytes(2, 1000);
    let entry = push(&host, "alpha/one", "a.bin", file.clone()).await;
    let object = entry["id"].as_str().unwrap().to_owned();
    let id = take_down(&host, "alpha/one", &[&object]).await["id"]
        .as_str()
        .unwrap()
        .to_owned();

    let again = send(
        &host,
        Method::PUT,
        "/v1/repos/gamma/three/files/b.bin",
        &[],
        file.clone(),
    )
    .await;
    assert_taken_down(again, &id, "a push into a third repository");
    let listed = get(&host, "/v1/repos/gamma/three/files").await.json();
    assert_eq!(listed["entries"], json!([]), "nothing entered");

    let raw = format!("/v1/stores/serving/objects/content/{object}");
    for guard in [
        ("if-none-match", "*"),
        ("x-custodian-unconditional", "true"),
    ] {
        let put = send(&host, Method::PUT, &raw, &[guard], file.clone()).await;
        assert_taken_down(put, &id, &format!("a raw publish with {guard:?}"));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_large_files_chunks_are_denied_by_id_but_another_file_sharing_one_keeps_serving() {
    let host = test_host().await;
    let (shared, own, other) = (bytes(3, chunk()), bytes(4, chunk()), bytes(5, 100));
    let taken = [shared.clone(), own.clone()].concat();
    let kept = [shared.clone(), other.clone()].concat();
    let entry = push(&host, "alpha/one", "taken.bin", taken.clone()).await;
    push(&host, "beta/two", "kept.bin", kept.clone()).await;
    assert_eq!(entry["kind"], "manifest");
    let manifest = entry["id"].as_str().unwrap().to_owned();
    let filed = take_down(&host, "alpha/one", &[&manifest]).await;
    let id = filed["id"].as_str().unwrap();
    assert_eq!(filed["denial_settled"], true, "{filed}");

    let file = get(&host, "/v1/repos/alpha/one/files/taken.bin").await;
    assert_taken_down(file, id, "the taken-down file by path");
    for piece in [&shared, &own] {
        let uri = format!(
            "/v1/stores/serving/objects/content/{}",
            ObjectId::of(piece).to_hex()
        );
        assert_taken_down(get(&host, &uri).await, id, "a chunk by id");
    }
    // The other file is checked as itself: its shared chunk is read.
    let kept_read = get(&host, "/v1/repos/beta/two/files/kept.bin")
        .await
        .expect(StatusCode::OK);
    assert_eq!(kept_read.body.as_ref(), kept.as_slice());

    // The taken-down bytes cannot come back inside another file either.
    let smuggled = [shared, bytes(6, 10)].concat();
    let put = send(
        &host,
        Method::PUT,
        "/v1/repos/gamma/three/files/s",
        &[],
        smuggled,
    )
    .await;
    assert_taken_down(put, id, "a new file holding a taken-down chunk");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_withdrawal_lifts_the_denial_and_the_file_reads_back_byte_identical() {
    let host = test_host().await;
    let file = bytes(7, 5000);
    let entry = push(&host, "alpha/one", "f", file.clone()).await;
    let object = entry["id"].as_str().unwrap().to_owned();
    let id = take_down(&host, "alpha/one", &[&object]).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let before = get(&host, &format!("/v1/takedowns/{id}")).await.json();
    assert_eq!(before["denial"]["denied"], 1, "{before}");
    assert_eq!(before["denial"]["withdrawn_ms"], Value::Null);

    let status = withdraw(&host, &id).await.expect(StatusCode::OK).json();
    assert_eq!(status["denial"]["settled"], true, "{status}");
    assert_eq!(status["denial"]["denied"], 0, "{status}");
    assert!(status["denial"]["withdrawn_ms"].as_u64().is_some());
    let read = get(&host, "/v1/repos/alpha/one/files/f")
        .await
        .expect(StatusCode::OK);
    assert_eq!(read.body.as_ref(), file.as_slice());
    let listed = get(&host, "/v1/repos/alpha/one/files").await.json();
    assert_eq!(listed["entries"][0].get("taken_down"), None);
    push(&host, "gamma/three", "again", file).await;

    let twice = withdraw(&host, &id).await.expect(StatusCode::CONFLICT);
    assert_eq!(twice.code(), "precondition_failed");
}

#[tokio::test(flavor = "multi_thread")]
async fn withdrawing_one_of_two_requests_keeps_the_others_denial() {
    let host = test_host().await;
    let entry = push(&host, "alpha/one", "f", bytes(8, 100)).await;
    push(&host, "beta/two", "f", bytes(8, 100)).await;
    let object = entry["id"].as_str().unwrap().to_owned();
    let first = take_down(&host, "alpha/one", &[&object]).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let second = take_down(&host, "beta/two", &[&object]).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    withdraw(&host, &first).await.expect(StatusCode::OK);
    let read = get(&host, "/v1/repos/alpha/one/files/f").await;
    assert_taken_down(read, &second, "still denied by the second request");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_legal_hold_does_not_block_a_withdrawal() {
    let host = test_host().await;
    let entry = push(&host, "alpha/one", "f", bytes(9, 100)).await;
    let object = entry["id"].as_str().unwrap().to_owned();
    let id = take_down(&host, "alpha/one", &[&object]).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let uri = format!("/v1/takedowns/{id}/hold");
    let body = json!({"enabled": true}).to_string();
    send(&host, Method::PUT, &uri, &[], body)
        .await
        .expect(StatusCode::OK);
    let status = withdraw(&host, &id).await.expect(StatusCode::OK).json();
    assert_eq!(status["hold"], true, "{status}");
    assert_eq!(status["denial"]["denied"], 0, "{status}");
    get(&host, "/v1/repos/alpha/one/files/f")
        .await
        .expect(StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread")]
async fn withdrawal_refuses_an_unknown_or_malformed_id_and_a_caller_without_the_token() {
    let host = test_host().await;
    let unknown = withdraw(&host, &"ab".repeat(32)).await;
    assert_eq!(unknown.expect(StatusCode::NOT_FOUND).code(), "not_found");
    let malformed = withdraw(&host, "xyz").await;
    assert_eq!(
        malformed.expect(StatusCode::BAD_REQUEST).code(),
        "invalid_argument"
    );
    let entry = push(&host, "alpha/one", "f", bytes(10, 100)).await;
    let object = entry["id"].as_str().unwrap().to_owned();
    let id = take_down(&host, "alpha/one", &[&object]).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let uri = format!("/v1/takedowns/{id}");
    let anonymous = send(&host, Method::DELETE, &uri, &[("authorization", "")], "").await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
    let read = get(&host, "/v1/repos/alpha/one/files/f").await;
    assert_taken_down(read, &id, "still denied after the refused withdrawal");
}

#[tokio::test(flavor = "multi_thread")]
async fn other_spellings_of_a_denied_key_never_serve_its_bytes() {
    let host = test_host().await;
    let entry = push(&host, "alpha/one", "f", bytes(11, 100)).await;
    let object = entry["id"].as_str().unwrap().to_owned();
    let id = take_down(&host, "alpha/one", &[&object]).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let encoded = format!("/v1/stores/serving/objects/content%2F{object}");
    assert_taken_down(get(&host, &encoded).await, &id, "an encoded slash");
    for other in [
        format!(
            "/v1/stores/serving/objects/content/{}",
            object.to_uppercase()
        ),
        format!("/v1/stores/serving/objects/content/{object}/"),
        format!("/v1/stores/serving/objects/content//{object}"),
    ] {
        let reply = get(&host, &other).await;
        assert!(
            reply.status == StatusCode::NOT_FOUND || reply.status == StatusCode::BAD_REQUEST,
            "{other}: {} {}",
            reply.status,
            String::from_utf8_lossy(&reply.body)
        );
    }
}
