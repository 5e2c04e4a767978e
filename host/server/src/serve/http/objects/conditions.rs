//! The guards of the object routes: `If-None-Match: *`, `If-Match` and
//! `x-custodian-unconditional` on a `PUT`, `If-Match` on a read. See the
//! [objects](super) documentation for what each means and why a weak tag
//! or a list of tags is refused.

use axum::http::header::{IF_MATCH, IF_NONE_MATCH};
use axum::http::{HeaderMap, HeaderName, StatusCode};

use super::headers::header_text;
use crate::serve::http::ApiError;
use custodian_object::{ObjectError, ObjectMeta, PutCondition};

/// The caller's explicit request for the store's unguarded publish.
const UNCONDITIONAL: HeaderName = HeaderName::from_static("x-custodian-unconditional");

/// One strong entity-tag as the store spells it (quoted).
fn entity_tag(name: &HeaderName, value: &str) -> Result<String, ApiError> {
    if value.starts_with("W/") {
        return Err(ApiError::invalid(format!(
            "{name}: a weak entity-tag cannot guard bytes; send the strong etag"
        )));
    }
    let inner = match value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
        Some(inner) => inner,
        None => value,
    };
    if inner.is_empty() || inner.contains(['"', ',']) || inner.contains(char::is_whitespace) {
        return Err(ApiError::invalid(format!(
            "{name}: expected one entity-tag, as in {name}: \"<etag>\", not {value:?}"
        )));
    }
    Ok(format!("\"{inner}\""))
}

/// The guard a `PUT` names.
pub(super) fn put_condition(headers: &HeaderMap) -> Result<PutCondition, ApiError> {
    let if_none_match = header_text(headers, &IF_NONE_MATCH)?;
    let if_match = header_text(headers, &IF_MATCH)?;
    let unconditional = match header_text(headers, &UNCONDITIONAL)? {
        None => false,
        Some(v) if v.eq_ignore_ascii_case("true") => true,
        Some(v) if v.eq_ignore_ascii_case("false") => false,
        Some(v) => {
            return Err(ApiError::invalid(format!(
                "{UNCONDITIONAL} must be `true` or `false`, not {v:?}"
            )));
        }
    };
    let named = usize::from(if_none_match.is_some())
        + usize::from(if_match.is_some())
        + usize::from(unconditional);
    if named > 1 {
        return Err(ApiError::invalid(format!(
            "a PUT names one guard: {IF_NONE_MATCH}: *, {IF_MATCH}: \"<etag>\" or \
             {UNCONDITIONAL}: true, not several"
        )));
    }
    match (if_none_match, if_match) {
        (Some("*"), _) => Ok(PutCondition::IfNoneMatchAny),
        (Some(other), _) => Err(ApiError::invalid(format!(
            "a PUT supports only {IF_NONE_MATCH}: * (create), not {other:?}"
        ))),
        (_, Some("*")) => Err(ApiError::invalid(format!(
            "{IF_MATCH}: * would replace whatever is there, which guards nothing; \
             name the etag being replaced"
        ))),
        (_, Some(etag)) => Ok(PutCondition::IfMatch(entity_tag(&IF_MATCH, etag)?)),
        (None, None) if unconditional => Ok(PutCondition::Unconditional),
        (None, None) => Err(ApiError::new(
            StatusCode::PRECONDITION_REQUIRED,
            "precondition_required",
            format!(
                "a PUT must name {IF_NONE_MATCH}: * (create the key) or {IF_MATCH}: \"<etag>\" \
                 (replace that generation): the store has no unguarded publish except for \
                 content-addressed keys, which say {UNCONDITIONAL}: true"
            ),
        )),
    }
}

/// The etag a read is guarded by, if any. `If-Match: *` asks only that a
/// current object exist, which every read of one already requires.
pub(super) fn read_guard(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    match header_text(headers, &IF_MATCH)? {
        None | Some("*") => Ok(None),
        Some(etag) => entity_tag(&IF_MATCH, etag).map(Some),
    }
}

/// 412 unless `meta` has the etag `guard` names.
pub(super) fn check_guard(meta: &ObjectMeta, guard: Option<&str>) -> Result<(), ApiError> {
    match guard {
        Some(want) if want != meta.etag => Err(ObjectError::PreconditionFailed(
            format!("{:?} has etag {}, not {want}", meta.key, meta.etag).into(),
        )
        .into()),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;
    use axum::http::header::ETAG;

    use super::super::test_client::{app, create, get, put};

    #[tokio::test]
    async fn if_match_with_the_returned_etag_replaces_and_a_stale_etag_is_412() {
        let app = app().await;
        let first = create(&app, "k", b"one").await;
        let replaced = put(&app, "k", &[("if-match", &first)], b"two").await;
        assert_eq!(replaced.status, StatusCode::OK);
        let second = replaced.header(ETAG).to_owned();
        assert_ne!(first, second);

        let stale = put(&app, "k", &[("if-match", &first)], b"three").await;
        assert_eq!(stale.status, StatusCode::PRECONDITION_FAILED);
        assert_eq!(stale.code(), "precondition_failed");
        let read = get(&app, "/v1/stores/serving/objects/k", &[]).await;
        assert_eq!(read.body, "two");
        assert_eq!(read.header(ETAG), second);
    }

    #[tokio::test]
    async fn an_unquoted_if_match_is_taken_as_the_quoted_etag() {
        let app = app().await;
        let etag = create(&app, "k", b"one").await;
        let bare = etag.trim_matches('"');
        let replaced = put(&app, "k", &[("if-match", bare)], b"two").await;
        assert_eq!(replaced.status, StatusCode::OK);
    }

    #[tokio::test]
    async fn a_weak_or_listed_if_match_is_refused_as_invalid() {
        let app = app().await;
        let etag = create(&app, "k", b"one").await;
        for guard in [format!("W/{etag}"), format!("{etag}, \"x\"")] {
            let reply = put(&app, "k", &[("if-match", &guard)], b"two").await;
            assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{guard}");
            assert_eq!(reply.code(), "invalid_argument");
        }
    }

    #[tokio::test]
    async fn a_put_without_a_condition_is_428_unless_explicitly_unconditional() {
        let app = app().await;
        let reply = put(&app, "k", &[], b"bytes").await;
        assert_eq!(reply.status, StatusCode::PRECONDITION_REQUIRED);
        assert_eq!(reply.code(), "precondition_required");
        let message = reply.json()["error"]["message"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(
            message.contains("if-none-match") && message.contains("if-match"),
            "{message}"
        );

        let explicit = put(
            &app,
            "k",
            &[("x-custodian-unconditional", "true")],
            b"bytes",
        )
        .await;
        assert_eq!(explicit.status, StatusCode::OK);
        let twice = put(
            &app,
            "k",
            &[("x-custodian-unconditional", "true")],
            b"bytes",
        )
        .await;
        assert_eq!(twice.status, StatusCode::OK);
    }

    #[tokio::test]
    async fn two_guards_on_one_put_are_refused_as_contradictory() {
        let app = app().await;
        let reply = put(
            &app,
            "k",
            &[
                ("if-none-match", "*"),
                ("x-custodian-unconditional", "true"),
            ],
            b"bytes",
        )
        .await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST);
        assert_eq!(reply.code(), "invalid_argument");
    }

    #[tokio::test]
    async fn a_get_with_a_stale_if_match_is_412_and_a_current_one_reads() {
        let app = app().await;
        let first = create(&app, "k", b"one").await;
        put(&app, "k", &[("if-match", &first)], b"two").await;
        let uri = "/v1/stores/serving/objects/k";
        for range in [None, Some("bytes=0-0")] {
            let mut headers = vec![("if-match", first.as_str())];
            headers.extend(range.map(|r| ("range", r)));
            let read = get(&app, uri, &headers).await;
            assert_eq!(read.status, StatusCode::PRECONDITION_FAILED, "{range:?}");
            assert_eq!(read.code(), "precondition_failed");
        }
        let current = get(&app, uri, &[]).await.header(ETAG).to_owned();
        let read = get(&app, uri, &[("if-match", &current), ("range", "bytes=1-")]).await;
        assert_eq!(read.status, StatusCode::PARTIAL_CONTENT);
        assert_eq!(read.body, "wo");
    }
}

/// Fuzz targets of the guard and checksum headers (see the README's
/// "Fuzzing").
#[cfg(test)]
mod fuzz {
    use axum::http::header::{IF_MATCH, IF_NONE_MATCH};
    use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
    use custodian_base::checksum;
    use custodian_object::PutCondition;

    use super::super::headers::{CHECKSUM, claimed_crc};
    use super::{UNCONDITIONAL, put_condition, read_guard};

    /// Whether `tag` is one quoted strong entity-tag.
    fn is_strong_tag(tag: &str) -> bool {
        tag.strip_prefix('"')
            .and_then(|t| t.strip_suffix('"'))
            .is_some_and(|inner| {
                !inner.is_empty()
                    && !inner.contains(['"', ','])
                    && !inner.contains(char::is_whitespace)
            })
    }

    /// A header value of the characters guards are made of (or raw
    /// bytes, when `raw`), if it can be a header value at all.
    fn value(raw: bool, bytes: &[u8]) -> Option<HeaderValue> {
        const GUARD: &[u8] = b"\"*W/ ,etag\tTRUEfalse=+9";
        let bytes: Vec<u8> = if raw {
            bytes.to_vec()
        } else {
            bytes
                .iter()
                .map(|&b| GUARD[usize::from(b) % GUARD.len()])
                .collect()
        };
        HeaderValue::from_bytes(&bytes).ok()
    }

    #[test]
    fn arbitrary_guard_headers_give_one_guard_or_a_client_error() {
        type Headers = (bool, Option<Vec<u8>>, Option<Vec<u8>>, Option<Vec<u8>>);
        bolero::check!().with_type::<Headers>().for_each(
            |(raw, if_match, if_none_match, unconditional)| {
                let mut headers = HeaderMap::new();
                for (name, bytes) in [
                    (IF_MATCH, if_match),
                    (IF_NONE_MATCH, if_none_match),
                    (UNCONDITIONAL, unconditional),
                ] {
                    if let Some(value) = bytes.as_deref().and_then(|b| value(*raw, b)) {
                        headers.insert(name, value);
                    }
                }
                let text = |name: HeaderName| headers.get(name)?.to_str().ok().map(str::trim);
                match put_condition(&headers) {
                    Ok(PutCondition::IfMatch(tag)) => {
                        assert!(is_strong_tag(&tag), "{tag:?}");
                        assert!(text(IF_NONE_MATCH).is_none());
                    }
                    Ok(PutCondition::IfNoneMatchAny) => {
                        assert_eq!(text(IF_NONE_MATCH), Some("*"));
                        assert!(text(IF_MATCH).is_none());
                    }
                    Ok(PutCondition::Unconditional) => {
                        assert!(text(IF_MATCH).is_none() && text(IF_NONE_MATCH).is_none());
                        assert!(
                            text(UNCONDITIONAL).is_some_and(|v| v.eq_ignore_ascii_case("true"))
                        );
                    }
                    Err(error) => assert!(
                        matches!(
                            error.status,
                            StatusCode::BAD_REQUEST | StatusCode::PRECONDITION_REQUIRED
                        ),
                        "{error:?}"
                    ),
                }
                match read_guard(&headers) {
                    Ok(Some(tag)) => assert!(is_strong_tag(&tag), "{tag:?}"),
                    Ok(None) => assert!(matches!(text(IF_MATCH), None | Some("*"))),
                    Err(error) => assert_eq!(error.status, StatusCode::BAD_REQUEST),
                }
            },
        );
    }

    #[test]
    fn arbitrary_checksum_headers_give_the_crc_they_spell_or_a_client_error() {
        bolero::check!()
            .with_type::<(bool, Vec<u8>, u64)>()
            .for_each(|(raw, bytes, crc)| {
                let mut headers = HeaderMap::new();
                // Not raw: a valid wire form with the fuzzer's edits.
                let bytes = if *raw {
                    bytes.clone()
                } else {
                    let mut wire = checksum::to_wire(*crc).into_bytes();
                    for (at, &b) in bytes.iter().enumerate().take(2) {
                        let at = (usize::from(b) + at) % wire.len();
                        wire[at] = b"AQg+/=A "[usize::from(b) % 8];
                    }
                    wire
                };
                let Ok(value) = HeaderValue::from_bytes(&bytes) else {
                    return;
                };
                headers.insert(CHECKSUM, value);
                match claimed_crc(&headers) {
                    Ok(Some(crc)) => {
                        let sent = headers[CHECKSUM].to_str().expect("parsed as text");
                        assert_eq!(checksum::to_wire(crc), sent.trim());
                    }
                    Ok(None) => panic!("a present header read as absent"),
                    Err(error) => assert_eq!(error.status, StatusCode::BAD_REQUEST),
                }
            });
    }
}
