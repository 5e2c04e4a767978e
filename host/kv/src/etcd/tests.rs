//! The conformance suite on a single member and on three, and what only
//! the etcd backend has to show: etcd's own transaction limits, reads
//! split over several transactions, prefixes, timeouts, configuration,
//! and auth.

use std::ffi::OsString;
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::local_server::{self, EtcdCluster};
use super::rpc::{Client, ConnectOptions, RangeRequest, RequestOp, TxnRequest};
use super::{EtcdConfig, EtcdKv, MAX_PREFIX_BYTES, Retry};
use crate::{
    Batch, Kv, KvError, MAX_COMMIT_BYTES, MAX_COMMIT_OPS, MAX_KEY_BYTES, MAX_PARTITION_BYTES,
    MAX_VALUE_BYTES, Outcome, Page, Partition, Precondition, Write, validate_batch,
};
use custodian_base::clock::{Clock, FixedClock};

/// A prefix no other store uses, so tests can share a cluster.
pub(super) fn fresh_prefix() -> Vec<u8> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).expect("random bytes");
    format!("test/{}/", hex::encode(bytes)).into_bytes()
}

/// A store on `endpoints` under `prefix`.
pub(super) async fn store(endpoints: &[String], prefix: Vec<u8>, clock: Arc<dyn Clock>) -> EtcdKv {
    EtcdKv::connect(EtcdConfig::new(endpoints.to_vec(), prefix), clock)
        .await
        .expect("connecting to the test cluster")
}

/// An empty store on the shared cluster of `members`; `None` when etcd
/// cannot run here.
async fn fresh(members: usize, clock: Arc<FixedClock>) -> Option<EtcdKv> {
    let endpoints = local_server::shared(members)?;
    Some(store(endpoints, fresh_prefix(), clock).await)
}

mod one_member {
    use super::*;

    crate::kv_conformance_tests!(async |clock: Arc<FixedClock>| fresh(1, clock).await);
}

mod three_members {
    use super::*;

    crate::kv_conformance_tests!(async |clock: Arc<FixedClock>| fresh(3, clock).await);
}

pub(super) fn p(name: &str) -> Partition {
    Partition::new(name).expect("test partition names are valid")
}

pub(super) fn put(partition: &str, key: &[u8], value: &[u8]) -> Write {
    Write::Put {
        partition: p(partition),
        key: key.to_vec(),
        value: value.to_vec(),
    }
}

fn delete(partition: &str, key: &[u8]) -> Write {
    Write::Delete {
        partition: p(partition),
        key: key.to_vec(),
    }
}

fn writes(writes: Vec<Write>) -> Batch {
    Batch {
        preconditions: Vec::new(),
        writes,
    }
}

fn clock() -> Arc<FixedClock> {
    Arc::new(FixedClock::new(1_000_000))
}

/// Every row of `partition` from `start`, paging `limit` at a time.
pub(super) async fn scan_all(
    kv: &impl Kv,
    partition: &str,
    limit: u32,
) -> (Vec<(Vec<u8>, Vec<u8>)>, usize) {
    let mut rows = Vec::new();
    let mut cursor: Option<Vec<u8>> = None;
    let mut pages = 0;
    loop {
        let Page { entries, next } = kv
            .scan(&p(partition), b"", None, cursor.as_deref(), limit)
            .await
            .expect("scanning");
        pages += 1;
        assert!(entries.len() <= limit as usize);
        rows.extend(entries);
        match next {
            Some(next) => cursor = Some(next),
            None => return (rows, pages),
        }
    }
}

/// The single-member shared cluster and a fresh store on it.
async fn single() -> Option<(&'static [String], EtcdKv)> {
    let endpoints = local_server::shared(1)?;
    Some((endpoints, store(endpoints, fresh_prefix(), clock()).await))
}

/// Sends a transaction as is, past the store's own validation, to see
/// what etcd itself answers.
async fn raw_txn(kv: &EtcdKv, txn: TxnRequest) -> Result<(), KvError> {
    kv.call("a raw transaction", Retry::OnlyUnsent, |client| {
        let txn = txn.clone();
        async move { client.txn(txn).await }
    })
    .await
    .map(drop)
}

/// A transaction without compares that runs `ops`.
fn only_then(ops: Vec<RequestOp>) -> TxnRequest {
    TxnRequest {
        success: ops,
        ..TxnRequest::default()
    }
}

#[tokio::test]
async fn a_transaction_over_etcds_operation_limit_is_refused_as_invalid_and_writes_nothing() {
    let Some((_, kv)) = single().await else {
        return;
    };
    let puts: Vec<RequestOp> = (0..=128)
        .map(|i| {
            RequestOp::put(
                kv.layout.row(&p("a"), format!("k{i}").as_bytes()),
                b"v".to_vec(),
            )
        })
        .collect();
    let got = raw_txn(&kv, only_then(puts)).await;
    eprintln!("etcd on 129 operations: {got:?}");
    assert!(
        matches!(&got, Err(KvError::InvalidArgument(why)) if why.to_line().contains("too many operations")),
        "{got:?}"
    );
    assert_eq!(scan_all(&kv, "a", 10).await.0, Vec::new());
}

#[tokio::test]
async fn a_transaction_over_etcds_byte_limits_is_refused_as_invalid_and_writes_nothing() {
    let Some((_, kv)) = single().await else {
        return;
    };
    // 1.75 MiB passes gRPC's receive limit (1.5 MiB + 512 KiB) and meets
    // etcd's own; 2.5 MiB meets gRPC's.
    for values in [7, 10] {
        let puts: Vec<RequestOp> = (0..values)
            .map(|i| {
                let row = kv.layout.row(&p("a"), format!("k{i}").as_bytes());
                RequestOp::put(row, vec![b'v'; MAX_VALUE_BYTES])
            })
            .collect();
        let got = raw_txn(&kv, only_then(puts)).await;
        eprintln!("etcd on {values} values of 256 KiB: {got:?}");
        assert!(matches!(got, Err(KvError::InvalidArgument(_))), "{got:?}");
    }
    assert_eq!(scan_all(&kv, "a", 10).await.0, Vec::new());
}

#[tokio::test]
async fn the_largest_valid_batch_fits_one_etcd_transaction() {
    let Some(endpoints) = local_server::shared(1) else {
        return;
    };
    // The longest prefix and partition name, the most operations, and
    // exactly the most key and value bytes.
    let mut prefix = fresh_prefix();
    prefix.resize(MAX_PREFIX_BYTES - 1, b'x');
    prefix.push(b'/');
    let kv = store(endpoints, prefix, clock()).await;
    let partition = "p".repeat(MAX_PARTITION_BYTES);
    let key = |i: usize| {
        let mut key = format!("{i:04}").into_bytes();
        key.resize(MAX_KEY_BYTES, b'k');
        key
    };
    let mut value_bytes = MAX_COMMIT_BYTES - MAX_COMMIT_OPS * MAX_KEY_BYTES;
    let mut batch = Batch::default();
    for i in 0..MAX_COMMIT_OPS {
        let op_key = key(i);
        if i.is_multiple_of(2) {
            let len = value_bytes.min(MAX_VALUE_BYTES);
            value_bytes -= len;
            batch
                .writes
                .push(put(&partition, &op_key, &vec![b'v'; len]));
        } else {
            batch.preconditions.push(Precondition::Absent {
                partition: p(&partition),
                key: op_key,
            });
        }
    }
    assert_eq!(value_bytes, 0);
    assert_eq!(validate_batch(&batch), Ok(()));
    assert_eq!(kv.apply(&batch).await, Ok(Outcome::Committed));
    let got = kv.get(&p(&partition), &key(0)).await.unwrap();
    assert_eq!(got.map(|v| v.len()), Some(MAX_VALUE_BYTES));
}

#[tokio::test]
async fn several_writes_to_one_key_in_one_batch_commit_and_the_last_one_wins() {
    let Some((_, kv)) = single().await else {
        return;
    };
    let batch = writes(vec![
        put("a", b"put-put", b"1"),
        put("a", b"put-put", b"2"),
        put("a", b"put-delete", b"1"),
        delete("a", b"put-delete"),
        delete("a", b"delete-put"),
        put("a", b"delete-put", b"3"),
        put("b", b"put-put", b"other partition"),
    ]);
    assert_eq!(kv.apply(&batch).await, Ok(Outcome::Committed));
    assert_eq!(kv.get(&p("a"), b"put-put").await, Ok(Some(b"2".to_vec())));
    assert_eq!(kv.get(&p("a"), b"put-delete").await, Ok(None));
    assert_eq!(
        kv.get(&p("a"), b"delete-put").await,
        Ok(Some(b"3".to_vec()))
    );
    assert_eq!(
        kv.get(&p("b"), b"put-put").await,
        Ok(Some(b"other partition".to_vec()))
    );
}

/// `n` keys, `k000`, `k001`, ...
fn numbered(n: usize) -> Vec<Vec<u8>> {
    (0..n).map(|i| format!("k{i:03}").into_bytes()).collect()
}

#[tokio::test]
async fn get_many_of_a_thousand_keys_over_several_transactions_answers_each_key() {
    let Some((_, kv)) = single().await else {
        return;
    };
    let keys = numbered(1000);
    // Every third key is absent.
    let present: Vec<&Vec<u8>> = keys.iter().filter(|k| !k[3].is_multiple_of(3)).collect();
    for chunk in present.chunks(MAX_COMMIT_OPS) {
        let batch = writes(chunk.iter().map(|k| put("a", k, &k[1..])).collect());
        assert_eq!(kv.apply(&batch).await, Ok(Outcome::Committed));
    }
    let mut asked = keys.clone();
    asked.reverse();
    let got = kv.get_many(&p("a"), &asked).await.unwrap();
    let want: Vec<Option<Vec<u8>>> = asked
        .iter()
        .map(|k| (!k[3].is_multiple_of(3)).then(|| k[1..].to_vec()))
        .collect();
    assert_eq!(got.len(), 1000);
    assert!(got == want, "get_many answered the wrong values");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_many_over_several_transactions_reads_one_snapshot() {
    let Some((_, kv)) = single().await else {
        return;
    };
    let kv = Arc::new(kv);
    let keys = numbered(1000);
    let (first, last) = (keys[0].clone(), keys[999].clone());
    // A writer moves the first and the last key together, so a read that
    // mixed two revisions would see them differ.
    let stop = Arc::new(AtomicBool::new(false));
    let generations = Arc::new(AtomicU64::new(0));
    let writer = tokio::spawn({
        let (kv, stop, generations) = (kv.clone(), stop.clone(), generations.clone());
        let (first, last) = (first.clone(), last.clone());
        async move {
            while !stop.load(Ordering::SeqCst) {
                let n = generations.fetch_add(1, Ordering::SeqCst).to_be_bytes();
                let batch = writes(vec![put("a", &first, &n), put("a", &last, &n)]);
                assert_eq!(kv.apply(&batch).await, Ok(Outcome::Committed));
            }
        }
    });
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..40 {
        let got = kv.get_many(&p("a"), &keys).await.unwrap();
        assert_eq!(
            got[0], got[999],
            "the first and last key come from two revisions"
        );
        seen.insert(got[0].clone());
    }
    stop.store(true, Ordering::SeqCst);
    writer.await.unwrap();
    // Otherwise the reads could not have mixed revisions at all.
    assert!(
        seen.len() > 10,
        "the writer barely ran: {} values",
        seen.len()
    );
}

#[tokio::test]
async fn a_scan_with_a_limit_pages_through_many_keys_of_its_partition_only() {
    let Some((_, kv)) = single().await else {
        return;
    };
    // Keys with the bytes etcd's layout uses as separators.
    let mut keys: Vec<Vec<u8>> = numbered(600);
    keys.extend([
        vec![0],
        vec![0, 0],
        vec![1],
        vec![0xff],
        b"k\0".to_vec(),
        b"k\xff".to_vec(),
    ]);
    keys.sort();
    for chunk in keys.chunks(MAX_COMMIT_OPS) {
        let batch = writes(chunk.iter().map(|k| put("a", k, b"v")).collect());
        assert_eq!(kv.apply(&batch).await, Ok(Outcome::Committed));
    }
    // Partitions whose names extend "a", and one just before it.
    for other in ["a.b", "a0", "a-", "aa", "9"] {
        let batch = writes(vec![put(other, b"k000", b"x"), put(other, &[0], b"x")]);
        assert_eq!(kv.apply(&batch).await, Ok(Outcome::Committed));
    }
    let want: Vec<(Vec<u8>, Vec<u8>)> = keys.iter().map(|k| (k.clone(), b"v".to_vec())).collect();
    for limit in [1, 7, 101, 606, 1000] {
        let (rows, pages) = scan_all(&kv, "a", limit).await;
        assert!(
            rows == want,
            "limit {limit}: the pages differ from the rows"
        );
        assert_eq!(pages, want.len().div_ceil(limit as usize), "limit {limit}");
    }
    let page = kv
        .scan(&p("a"), b"k100", Some(b"k103"), Some(b"k100"), 10)
        .await
        .unwrap();
    let got: Vec<&[u8]> = page.entries.iter().map(|(k, _)| k.as_slice()).collect();
    assert_eq!(got, vec![&b"k101"[..], b"k102"]);
    assert_eq!(page.next, None);
}

#[tokio::test]
async fn prefixes_isolate_two_stores_on_one_cluster_even_when_one_extends_the_other() {
    let Some(endpoints) = local_server::shared(1) else {
        return;
    };
    let outer_prefix = fresh_prefix();
    let mut inner_prefix = outer_prefix.clone();
    inner_prefix.extend_from_slice(b"a/");
    let outer = store(endpoints, outer_prefix, clock()).await;
    let inner = store(endpoints, inner_prefix, clock()).await;
    for (kv, value) in [(&outer, b"outer"), (&inner, b"inner")] {
        let batch = writes(vec![put("a", b"k", value), put("b", b"k", value)]);
        assert_eq!(kv.apply(&batch).await, Ok(Outcome::Committed));
    }
    for (kv, value) in [(&outer, b"outer"), (&inner, b"inner")] {
        for partition in ["a", "b"] {
            let (rows, _) = scan_all(kv, partition, 10).await;
            assert_eq!(rows, vec![(b"k".to_vec(), value.to_vec())]);
        }
        assert_eq!(kv.get(&p("a"), b"k").await, Ok(Some(value.to_vec())));
    }
}

#[test]
fn a_config_is_checked_before_anything_is_sent() {
    let config = |endpoints: &[&str], prefix: &[u8]| {
        EtcdConfig::new(endpoints.iter().map(|e| e.to_string()).collect(), prefix)
    };
    let ok = [
        config(&["http://127.0.0.1:2379"], b""),
        config(
            &["127.0.0.1:2379", "http://[::1]:2379/", "etcd-0.etcd:2379"],
            b"app/",
        ),
    ];
    for config in ok {
        assert_eq!(config.validate(), Ok(()), "{config:?}");
    }
    let mut slow = config(&["127.0.0.1:2379"], b"");
    slow.request_timeout = Duration::ZERO;
    let mut unnamed = config(&["127.0.0.1:2379"], b"");
    unnamed.auth = Some((String::new(), "secret".into()));
    let bad = [
        config(&[], b""),
        config(&["127.0.0.1"], b""),
        config(&["127.0.0.1:0"], b""),
        config(&["127.0.0.1:65536"], b""),
        config(&["ftp://127.0.0.1:2379"], b""),
        config(&["https://127.0.0.1:2379"], b""),
        config(&["http://user@127.0.0.1:2379"], b""),
        config(&["http://127.0.0.1:2379/v3"], b""),
        config(&["127.0.0.1:2379"], b"app"),
        config(&["127.0.0.1:2379"], b"a\0/"),
        config(&["127.0.0.1:2379"], &vec![b'/'; MAX_PREFIX_BYTES + 1]),
        slow,
        unnamed,
    ];
    for config in bad {
        let got = config.validate();
        assert!(
            matches!(got, Err(KvError::InvalidArgument(_))),
            "{config:?}: {got:?}"
        );
    }
}

const PEM_CERT: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
const PEM_KEY: &str = "-----BEGIN EC PRIVATE KEY-----\nMHc\n-----END EC PRIVATE KEY-----\n";

#[test]
fn tls_and_credentials_come_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.into_os_string()
    };
    let (ca, cert, key, junk) = (
        file("ca.pem", PEM_CERT),
        file("cert.pem", PEM_CERT),
        file("key.pem", PEM_KEY),
        file("junk.pem", "not pem"),
    );
    let missing = dir.path().join("missing.pem").into_os_string();
    let from = |vars: &[(&str, &OsString)], endpoint: &str| {
        let vars: Vec<(String, OsString)> = vars
            .iter()
            .map(|(name, value)| (name.to_string(), (*value).clone()))
            .collect();
        EtcdConfig::from_vars(vec![endpoint.to_owned()], b"app/".to_vec(), |name| {
            vars.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone())
        })
    };
    let user = OsString::from("custodian");
    let password = OsString::from("secret");
    let empty = OsString::new();

    let plain = from(&[("CUSTODIAN_ETCD_CA", &empty)], "http://127.0.0.1:2379").unwrap();
    assert!(plain.tls.is_none() && plain.auth.is_none());

    let full = from(
        &[
            ("CUSTODIAN_ETCD_CA", &ca),
            ("CUSTODIAN_ETCD_CERT", &cert),
            ("CUSTODIAN_ETCD_KEY", &key),
            ("CUSTODIAN_ETCD_USER", &user),
            ("CUSTODIAN_ETCD_PASSWORD", &password),
        ],
        "https://127.0.0.1:2379",
    )
    .unwrap();
    let tls = full.tls.as_ref().unwrap();
    assert_eq!(tls.ca_pem, PEM_CERT.as_bytes());
    assert_eq!(tls.client.as_ref().unwrap().key_pem, PEM_KEY.as_bytes());
    assert_eq!(full.auth, Some(("custodian".into(), "secret".into())));
    assert!(!format!("{full:?}").contains("secret"), "{full:?}");

    let refused: [(&[(&str, &OsString)], &str); 7] = [
        (&[("CUSTODIAN_ETCD_CA", &ca)], "http://127.0.0.1:2379"),
        (&[("CUSTODIAN_ETCD_CA", &missing)], "127.0.0.1:2379"),
        (&[("CUSTODIAN_ETCD_CA", &junk)], "127.0.0.1:2379"),
        (
            &[("CUSTODIAN_ETCD_CA", &ca), ("CUSTODIAN_ETCD_CERT", &cert)],
            "127.0.0.1:2379",
        ),
        (
            &[("CUSTODIAN_ETCD_CERT", &cert), ("CUSTODIAN_ETCD_KEY", &key)],
            "127.0.0.1:2379",
        ),
        (&[("CUSTODIAN_ETCD_USER", &user)], "127.0.0.1:2379"),
        (&[("CUSTODIAN_ETCD_PASSWORD", &password)], "127.0.0.1:2379"),
    ];
    for (vars, endpoint) in refused {
        let got = from(vars, endpoint);
        assert!(
            matches!(got, Err(KvError::InvalidArgument(_))),
            "{vars:?}: {got:?}"
        );
    }
}

/// Every call of a store on `endpoint` answers `Unavailable` within its
/// 300 ms budget (and some slack for a loaded machine).
async fn every_call_is_unavailable_in_time(endpoint: String) -> Vec<String> {
    let mut config = EtcdConfig::new(vec![endpoint], fresh_prefix());
    config.request_timeout = Duration::from_millis(300);
    let kv = EtcdKv::connect(config, clock()).await.unwrap();
    let mut messages = Vec::new();
    for call in 0..4 {
        let started = Instant::now();
        let got = match call {
            0 => kv.get(&p("a"), b"k").await.map(drop),
            1 => kv.get_many(&p("a"), &numbered(300)).await.map(drop),
            2 => kv.scan(&p("a"), b"", None, None, 10).await.map(drop),
            _ => kv
                .apply(&writes(vec![put("a", b"k", b"v")]))
                .await
                .map(drop),
        };
        let took = started.elapsed();
        let Err(KvError::Unavailable(message)) = got else {
            panic!("call {call}: {got:?}");
        };
        assert!(
            took < Duration::from_millis(1300),
            "call {call} took {took:?}"
        );
        messages.push(message.to_line());
    }
    messages
}

#[tokio::test]
async fn a_store_whose_endpoint_refuses_connections_is_unavailable_within_its_timeout() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let messages = every_call_is_unavailable_in_time(format!("http://127.0.0.1:{port}")).await;
    // Nothing was ever sent, so even the batch's outcome is known.
    assert!(!messages[3].contains("unknown"), "{}", messages[3]);
}

#[tokio::test]
async fn a_store_whose_endpoint_never_answers_is_unavailable_within_its_timeout() {
    // The kernel completes the TCP handshake into the backlog; nothing
    // ever reads, so the request hangs.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", silent.local_addr().unwrap());
    let messages = every_call_is_unavailable_in_time(endpoint).await;
    drop(silent);
    assert!(messages[3].contains("unknown"), "{}", messages[3]);
}

#[tokio::test]
async fn a_store_with_credentials_works_on_a_cluster_with_auth_and_renews_its_token() {
    let Some(cluster) = EtcdCluster::start_or_skip(1) else {
        return;
    };
    let endpoints = cluster.endpoints();
    let setup = Client::connect(&endpoints, &ConnectOptions::default())
        .await
        .unwrap();
    setup.user_add("root", "root-secret").await.unwrap();
    setup.user_grant_role("root", "root").await.unwrap();
    setup.auth_enable().await.unwrap();

    let with = |password: &str| {
        let mut config = EtcdConfig::new(endpoints.clone(), b"app/".to_vec());
        config.auth = Some(("root".into(), password.into()));
        config
    };
    let kv = EtcdKv::connect(with("root-secret"), clock()).await.unwrap();
    let batch = writes(vec![put("a", b"k", b"v")]);
    assert_eq!(kv.apply(&batch).await, Ok(Outcome::Committed));
    assert_eq!(kv.get(&p("a"), b"k").await, Ok(Some(b"v".to_vec())));

    let wrong = EtcdKv::connect(with("wrong"), clock()).await;
    assert!(
        matches!(&wrong, Err(KvError::Unavailable(why)) if why.contains("denied")),
        "{wrong:?}"
    );
    let anonymous = store(&endpoints, b"app/".to_vec(), clock()).await;
    let got = anonymous.get(&p("a"), b"k").await;
    assert!(
        matches!(&got, Err(KvError::Unavailable(why)) if why.contains("denied")),
        "{got:?}"
    );

    // Turning auth off and on again drops every token etcd issued.
    let admin = Client::connect(
        &endpoints,
        &ConnectOptions {
            credentials: Some(("root".into(), "root-secret".into())),
            ..ConnectOptions::default()
        },
    )
    .await
    .unwrap();
    admin.auth_disable().await.unwrap();
    // Any token, even a stale one, is refused once auth is off and
    // tokens are gone: enable it again without one.
    setup.auth_enable().await.unwrap();
    let stale = admin
        .range(RangeRequest {
            key: b"anything".to_vec(),
            ..RangeRequest::default()
        })
        .await;
    assert!(
        matches!(&stale, Err(s) if s.message().contains("invalid auth token")),
        "{stale:?}"
    );
    // The store's token is as stale as the admin's: it renews it.
    assert_eq!(kv.get(&p("a"), b"k").await, Ok(Some(b"v".to_vec())));
    assert_eq!(kv.apply(&batch).await, Ok(Outcome::Committed));
}

/// Runs `openssl` with `args` in `dir`.
fn openssl(dir: &std::path::Path, args: &[&str]) -> Result<(), String> {
    let output = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .map_err(|e| format!("running openssl: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate,
/// as `ca.pem`, `server.pem`/`server.key`, `client.pem`/`client.key`.
fn certificates(dir: &std::path::Path) -> Result<(), String> {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let ca = [
        &["req", "-x509"][..],
        &ec,
        &["-keyout", "ca.key", "-out", "ca.pem"],
    ];
    openssl(
        dir,
        &[
            ca.concat(),
            vec!["-days", "2", "-subj", "/CN=custodian test CA"],
        ]
        .concat(),
    )?;
    for (name, usage) in [("server", "serverAuth"), ("client", "clientAuth")] {
        let (key, csr, pem, ext) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.pem"),
            format!("{name}.ext"),
        );
        let extensions = format!("subjectAltName=IP:127.0.0.1\nextendedKeyUsage={usage}\n");
        std::fs::write(dir.join(&ext), extensions).map_err(|e| e.to_string())?;
        let request = [&["req"][..], &ec, &["-keyout", &key, "-out", &csr]].concat();
        openssl(
            dir,
            &[request, vec!["-subj", &format!("/CN={name}")]].concat(),
        )?;
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-out",
                &pem,
                "-extfile",
                &ext,
            ],
        )?;
    }
    Ok(())
}

/// A single etcd member serving clients over TLS that requires a client
/// certificate; stopped (SIGKILL) when dropped or when this process ends.
struct TlsMember {
    wrapper: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    endpoint: String,
}

impl TlsMember {
    fn start(dir: &std::path::Path) -> Result<Self, String> {
        let etcd = local_server::etcd_binary()?;
        let ports = local_server::free_ports(2)?;
        let client = format!("https://127.0.0.1:{}", ports[0]);
        let peer = format!("http://127.0.0.1:{}", ports[1]);
        let mut wrapper = std::process::Command::new("sh")
            .arg("-c")
            .arg(r#""$@" >etcd.log 2>&1 </dev/null & pid=$!; read _; kill -9 $pid; wait $pid"#)
            .arg("sh")
            .arg(etcd)
            .args(["--name", "tls", "--data-dir", "data", "--logger", "zap"])
            .args(["--log-outputs", "stderr"])
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &format!("tls={peer}")])
            .args(["--cert-file", "server.pem", "--key-file", "server.key"])
            .args(["--trusted-ca-file", "ca.pem", "--client-cert-auth"])
            .current_dir(dir)
            .stdin(std::process::Stdio::piped())
            // sh reports the SIGKILL of its job ("Killed") on stderr.
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| format!("starting etcd: {e}"))?;
        let stdin = wrapper.stdin.take();
        Ok(Self {
            wrapper,
            stdin,
            endpoint: client,
        })
    }
}

impl Drop for TlsMember {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.wrapper.wait();
    }
}

#[tokio::test]
async fn a_store_speaks_tls_with_a_client_certificate_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let started = certificates(dir.path()).and_then(|()| TlsMember::start(dir.path()));
    let member = match started {
        Ok(member) => member,
        Err(why) if std::env::var("CI").as_deref() != Ok("true") => {
            eprintln!("skipping: etcd over TLS unavailable: {why}");
            return;
        }
        Err(why) => panic!("etcd over TLS is required under CI=true: {why}"),
    };
    let path = |name: &str| dir.path().join(name).into_os_string();
    let (ca, cert, key) = (path("ca.pem"), path("client.pem"), path("client.key"));
    let config = |with_client: bool| {
        let (ca, cert, key) = (ca.clone(), cert.clone(), key.clone());
        EtcdConfig::from_vars(
            vec![member.endpoint.clone()],
            b"app/".to_vec(),
            move |name| match name {
                "CUSTODIAN_ETCD_CA" => Some(ca.clone()),
                "CUSTODIAN_ETCD_CERT" if with_client => Some(cert.clone()),
                "CUSTODIAN_ETCD_KEY" if with_client => Some(key.clone()),
                _ => None,
            },
        )
        .unwrap()
    };
    let kv = EtcdKv::connect(config(true), clock()).await.unwrap();
    // The member needs a moment to start and elect itself.
    let batch = writes(vec![put("a", b"k", b"over tls")]);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match kv.apply(&batch).await {
            Ok(outcome) => {
                assert_eq!(outcome, Outcome::Committed);
                break;
            }
            Err(KvError::Unavailable(why)) if Instant::now() < deadline => {
                eprintln!("waiting for etcd over TLS: {why}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    assert_eq!(kv.get(&p("a"), b"k").await, Ok(Some(b"over tls".to_vec())));
    // The member requires a client certificate.
    let mut anonymous = config(false);
    anonymous.request_timeout = Duration::from_secs(1);
    let kv = EtcdKv::connect(anonymous, clock()).await.unwrap();
    let got = kv.get(&p("a"), b"k").await;
    eprintln!("without a client certificate: {got:?}");
    assert!(matches!(got, Err(KvError::Unavailable(_))), "{got:?}");
    drop(member);
}

#[test]
fn a_batch_of_guards_alone_reads_a_guarded_key_so_etcd_answers_it_linearizably() {
    use super::keys::Layout;
    use super::rpc::request_op::Request;
    use super::transaction;

    let layout = Layout::new(b"t/".to_vec());
    let guards = vec![
        Precondition::Absent {
            partition: Partition::new("p0").unwrap(),
            key: b"a".to_vec(),
        },
        Precondition::Equals {
            partition: Partition::new("p1").unwrap(),
            key: b"b".to_vec(),
            value: b"v".to_vec(),
        },
    ];
    let txn = transaction(
        &layout,
        &Batch {
            preconditions: guards.clone(),
            writes: vec![],
        },
    );
    // An empty branch would make etcd serve the compares from the
    // answering member's own, possibly stale, state.
    match txn.success.as_slice() {
        [
            RequestOp {
                request: Some(Request::Range(read)),
            },
        ] => assert_eq!(read.key, txn.compare[0].key, "the first guarded key"),
        other => panic!("expected one read, got {other:?}"),
    }
    assert!(txn.failure.is_empty());

    let with_a_write = transaction(
        &layout,
        &Batch {
            preconditions: guards,
            writes: vec![put("p0", b"c", b"w")],
        },
    );
    assert!(
        with_a_write
            .success
            .iter()
            .all(|op| !matches!(op.request, Some(Request::Range(_)))),
        "a write already makes the transaction go through the log"
    );
}
