//! A node's KV and stores are behind the locks, whichever way they are
//! opened, and its stores ask the retention plugin the assembly loaded.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use custodian_base::checksum::crc64_nvme;
use custodian_base::clock::{Clock, SystemClock};
use custodian_core::locks::rows::{self, RequestLock};
use custodian_kv::{Batch, Kv, KvError, Outcome, Write};
use custodian_object::{Metadata, ObjectError, ObjectStore, ObjectStoreExt, PutCondition};
use custodian_runtime::{RuntimeConfig, World};

use super::{AssemblyOptions, Entry, Node, PluginPlan, open_named_store};
use crate::config::Config;

const REQUEST: [u8; 32] = [9; 32];
const PIECE: &str = "req/piece/0";

/// Locks `PIECE` in `preserved` under a request retained for a day.
async fn lock_piece(kv: &dyn Kv, now: u64) {
    let partition = custodian_core::locks::partition();
    let lock = RequestLock {
        created_ms: now,
        retain_until_ms: now + 86_400_000,
        hold: false,
        purging: false,
    };
    let batch = Batch {
        preconditions: Vec::new(),
        writes: vec![
            Write::Put {
                partition: partition.clone(),
                key: rows::request_key(&REQUEST),
                value: lock.encode().to_vec(),
            },
            Write::Put {
                partition,
                key: rows::piece_key("preserved", PIECE),
                value: REQUEST.to_vec(),
            },
        ],
    };
    assert_eq!(kv.apply(&batch).await, Ok(Outcome::Committed));
}

async fn put(store: &dyn ObjectStore, key: &str, body: &'static [u8]) -> Result<(), ObjectError> {
    let body = Bytes::from_static(body);
    let crc = crc64_nvme(&body);
    let condition = PutCondition::Unconditional;
    store
        .put_whole(key, body, &condition, &Metadata::new(), crc)
        .await
        .map(drop)
}

fn config(root: &std::path::Path) -> Config {
    Config::parse(&format!(
        "[stores.docs]\nurl = \"file://{}/docs\"\nlocked = true\n",
        root.display()
    ))
    .unwrap()
}

#[tokio::test]
async fn a_nodes_kv_refuses_a_forbidden_lock_write_and_its_stores_keep_a_locked_piece() {
    let root = tempfile::tempdir().unwrap();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let node = Node::open(root.path(), Config::default(), clock.clone())
        .await
        .unwrap();
    lock_piece(node.kv().as_ref(), clock.now_ms()).await;
    let erase = Batch {
        preconditions: Vec::new(),
        writes: vec![Write::Delete {
            partition: custodian_core::locks::partition(),
            key: rows::request_key(&REQUEST),
        }],
    };
    assert!(matches!(
        node.kv().apply(&erase).await,
        Err(KvError::Retained(_))
    ));
    let preserved = node.store("preserved").await.unwrap();
    put(preserved.as_ref(), PIECE, b"piece").await.unwrap();
    for result in [
        preserved.delete(PIECE).await,
        put(preserved.as_ref(), PIECE, b"other").await,
    ] {
        assert!(
            matches!(result, Err(ObjectError::Retained(_))),
            "{result:?}"
        );
    }
    // A command's store, opened without the node, reads the same locks.
    drop(preserved);
    let named = open_named_store(
        None,
        root.path(),
        "preserved",
        node.kv().clone(),
        clock.clone(),
    )
    .await
    .unwrap();
    let result = named.delete(PIECE).await;
    assert!(
        matches!(result, Err(ObjectError::Retained(_))),
        "{result:?}"
    );
    assert_eq!(
        named.get_whole(PIECE, None).await.unwrap().1,
        Bytes::from_static(b"piece")
    );
}

#[tokio::test]
async fn a_locked_store_refuses_to_destroy_until_a_retention_plugin_is_bound() {
    let root = tempfile::tempdir().unwrap();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let node = Node::open(root.path(), config(root.path()), clock.clone())
        .await
        .unwrap();
    let docs = node.store("docs").await.unwrap();
    put(docs.as_ref(), "a", b"one").await.unwrap();
    let refused = put(docs.as_ref(), "a", b"two").await;
    assert!(
        matches!(refused, Err(ObjectError::Unavailable(_))),
        "{refused:?}"
    );
    // An unlocked store is not asked.
    let serving = node.store("serving").await.unwrap();
    put(serving.as_ref(), "a", b"one").await.unwrap();
    put(serving.as_ref(), "a", b"two").await.unwrap();
    serving.delete("a").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_assembled_nodes_stores_ask_the_loaded_retention_plugin() {
    let root = tempfile::tempdir().unwrap();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let config = config(root.path());
    let plan = PluginPlan::configured(&config).unwrap();
    let node = Node::open(root.path(), config, clock.clone())
        .await
        .unwrap();
    let assembly = node
        .assemble(AssemblyOptions {
            runtime: RuntimeConfig {
                // Beside the test binary, as the server's test hosts keep it.
                cache_dir: std::env::current_exe().ok().and_then(|exe| {
                    Some(exe.parent()?.parent()?.join("custodian-test-components"))
                }),
                concurrent_calls: 8,
            },
            plan,
            entry: Entry::Join,
            metrics: None,
        })
        .await
        .unwrap();
    let stores: &BTreeMap<String, Arc<dyn ObjectStore>> = &assembly.stores;
    let docs = &stores["docs"];
    put(docs.as_ref(), "a", b"one").await.unwrap();
    // The bundled retention plugin keeps a version written just now.
    let refused = put(docs.as_ref(), "a", b"two").await;
    match refused {
        Err(ObjectError::Retained(detail)) => {
            assert!(detail.message().contains("retained until"), "{detail}");
        }
        other => panic!("{other:?}"),
    }
    // The answer is in the decision log, naming the plugin that gave it.
    let (records, _) = custodian_core::audit::read(assembly.kv.as_ref(), 0, None, 100)
        .await
        .unwrap();
    let retention = assembly.plugins.current(World::Retention);
    let hash = &retention.plugin().info().hash;
    let filter = custodian_core::audit::Filter {
        event_prefix: Some("decision/retention/".into()),
        actor: None,
        target: Some("outcome:deny".into()),
    };
    let logged: Vec<_> = records.iter().filter(|r| filter.matches(r)).collect();
    assert_eq!(logged.len(), 1, "{records:?}");
    let targets = &logged[0].targets;
    assert!(targets.contains(&format!("plugin:{hash}")), "{targets:?}");
    assert!(targets.contains(&"store:docs".to_owned()), "{targets:?}");
    assert!(targets.contains(&"key:a".to_owned()), "{targets:?}");
    assert!(
        logged[0]
            .detail
            .as_deref()
            .unwrap()
            .contains("retained until")
    );
    // The stores plugins are given are the locked ones too.
    lock_piece(assembly.kv.as_ref(), clock.now_ms()).await;
    let preserved = &stores["preserved"];
    put(preserved.as_ref(), PIECE, b"piece").await.unwrap();
    let result = preserved.delete(PIECE).await;
    assert!(
        matches!(result, Err(ObjectError::Retained(_))),
        "{result:?}"
    );
}
