//! Fuzz targets of the configuration file's parser: whatever the text,
//! [`Config::parse`] returns a configuration that keeps every documented
//! rule, or says what is wrong; it never panics. Each is a `#[test]` that
//! bolero runs for a bounded time (see the README's "Fuzzing").

use super::server::{MAX_CREDENTIAL_CACHE_MS, validate_node};
use super::{Config, EXAMPLE, StoreUrl};
use custodian_base::fuzz_input::{mutate, name};

/// Parses `text`, checking the rules of whatever is accepted.
fn parse_and_check(text: &str) {
    let Ok(config) = Config::parse(text) else {
        return;
    };
    assert!(config.retention.retention_ms > 0);
    assert_ne!(config.server.workers, Some(0));
    assert!(
        config
            .server
            .credential_cache_ms
            .is_none_or(|ms| ms <= MAX_CREDENTIAL_CACHE_MS)
    );
    if let Some(node) = &config.server.node {
        assert_eq!(validate_node(node), Ok(()));
    }
    for name in config.stores.keys() {
        assert!(config.store(name).is_ok(), "store {name:?} of {text:?}");
    }
}

#[test]
fn arbitrary_text_never_panics_the_config_parser() {
    bolero::check!().for_each(|bytes: &[u8]| parse_and_check(&String::from_utf8_lossy(bytes)));
}

#[test]
fn near_misses_of_the_example_config_never_panic_the_parser() {
    assert!(Config::parse(EXAMPLE).is_ok());
    bolero::check!()
        .with_type::<Vec<(u16, u8, u8)>>()
        .for_each(|edits: &Vec<(u16, u8, u8)>| {
            parse_and_check(&String::from_utf8_lossy(&mutate(EXAMPLE.as_bytes(), edits)));
        });
}

/// One generated configuration: workers, credential cache, retention,
/// node, a store's name, which URL scheme and its rest.
type Settings = (
    Option<u32>,
    Option<u64>,
    u64,
    Option<Vec<u8>>,
    Vec<u8>,
    u8,
    Vec<u8>,
);

#[test]
fn generated_configs_are_accepted_exactly_when_every_rule_holds() {
    bolero::check!().with_type::<Settings>().for_each(
        |(workers, cache_ms, retention_ms, node, store, scheme, rest)| {
            // Small numbers often enough to land on both sides of a bound.
            let cache_ms = cache_ms.map(|ms| ms % (2 * MAX_CREDENTIAL_CACHE_MS));
            let retention_ms = retention_ms % 3;
            let node = node.as_deref().map(name);
            let url = format!(
                "{}{}",
                ["file:///", "mem://", "s3://", "ftp://", ""][usize::from(*scheme % 5)],
                name(rest)
            );
            let mut text = String::from("[server]\n");
            if let Some(workers) = workers {
                text += &format!("workers = {workers}\n");
            }
            if let Some(ms) = cache_ms {
                text += &format!("credential_cache_ms = {ms}\n");
            }
            if let Some(node) = &node {
                text += &format!("node = {node:?}\n");
            }
            text += &format!("[retention]\nretention_ms = {retention_ms}\n");
            let store = format!("s{}", name(store));
            text += &format!("[stores.{store:?}]\nurl = {url:?}\n");
            let valid = *workers != Some(0)
                && cache_ms.is_none_or(|ms| ms <= MAX_CREDENTIAL_CACHE_MS)
                && retention_ms > 0
                && node
                    .as_deref()
                    .is_none_or(|node| validate_node(node).is_ok())
                && url.parse::<StoreUrl>().is_ok();
            match Config::parse(&text) {
                Ok(config) => {
                    assert!(valid, "accepted:\n{text}");
                    assert_eq!(config.server.workers, *workers);
                    assert_eq!(config.server.node, node);
                    assert_eq!(config.retention.retention_ms, retention_ms);
                    assert_eq!(config.store(&store).ok(), url.parse().ok());
                    parse_and_check(&text);
                }
                Err(error) => assert!(!valid, "refused ({error}):\n{text}"),
            }
        },
    );
}

#[test]
fn a_deeply_nested_config_is_refused_not_a_crash() {
    // Past any parser's recursion: a parser that recursed per level would
    // overflow the stack, which aborts the process rather than panics.
    for (open, close) in [("[", "]"), ("{a=", "}")] {
        let depth = 100_000;
        let text = format!("a = {}{}", open.repeat(depth), close.repeat(depth));
        assert!(Config::parse(&text).is_err());
    }
}
