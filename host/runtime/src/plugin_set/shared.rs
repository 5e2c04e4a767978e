//! The plugin set every host sharing a KV runs, kept in that KV.
//!
//! # Layout (partition [`PARTITION`])
//! - `set`: the [`SharedSet`], JSON: each world's plugin hash, size and
//!   source. A swap on any host is a compare-and-set of this row, so two
//!   hosts' swaps are ordered and neither is lost.
//! - `blob/<hash>/<index>`: the plugin's bytes in chunks of at most
//!   [`CHUNK_BYTES`], written before the set names the hash and again
//!   after (see "Collecting"), so a host that reads the set can load what
//!   it names (BLAKE3 checked).
//! - `stored/<hash>`: the size of a stored plugin, an index of the blobs
//!   for [`collect_garbage`] (a scan of the chunks would read every byte).
//! - `configured/<node>`: the hashes of the plugins this node's own
//!   configuration named at its last start, so a restart tells a
//!   deliberate change of its configuration (a swap) from an old
//!   configuration (follow the set).
//!
//! # Collecting
//! After a swap, the plugins the set no longer names are deleted, in
//! batches guarded on the set row: a swap published meanwhile fails the
//! guard. A publisher stores its plugin, publishes, then stores it again,
//! so a collection that ran between its first store and its publish
//! (under the older set, which did not name it) is undone before any host
//! needs the bytes for longer than one poll.
//!
//! # Invariant
//! Every step commit and operator action carries an `Equals` guard on the
//! `set` row as its host installed it ([`guard`]), taken before the
//! plugin it runs: once a swap has written a new set, nothing planned by a
//! plugin of the old set commits, on any host. A command on a KV where no
//! host published a set guards on its absence instead, so a set published
//! meanwhile stops its commits too.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::signature::Signature;
use crate::{World, content_hash};
use custodian_kv::{Batch, Kv, KvError, Outcome, Partition, Precondition, Write};

/// The partition the shared plugin set lives in.
pub const PARTITION: &str = "custodian.plugins";

/// Bytes per stored chunk of a plugin: under the KV's largest value
/// ([`custodian_kv::MAX_VALUE_BYTES`]) with room to spare.
pub const CHUNK_BYTES: usize = 192 * 1024;

/// Chunks read per request: about 768 KiB, well under etcd's default
/// message limits, however large the plugin.
const CHUNKS_PER_READ: usize = 4;

const SET_KEY: &[u8] = b"set";

/// One world's member of the shared set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// BLAKE3 of the `.wasm`, hex.
    pub hash: String,
    /// Size of the `.wasm`.
    pub size: u64,
    /// Where it came from, for people.
    pub source: String,
    /// Its signature, when it was signed: every host checks it against
    /// its own trusted keys before running the plugin, and it records who
    /// signed what the set runs. Absent in sets written before signing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<Signature>,
}

/// The plugin set the hosts sharing a KV run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedSet {
    /// Each world's plugin, by world name.
    pub worlds: BTreeMap<String, Member>,
    /// Who wrote this set last (`operator:NAME` or `host:NODE`).
    pub by: String,
    /// When, ms since the epoch.
    pub at_ms: u64,
}

impl SharedSet {
    /// The member of `world`, if the set names one.
    pub fn member(&self, world: World) -> Option<&Member> {
        self.worlds.get(world.name())
    }
}

/// The set row as read: its exact bytes (what a guard compares) and its
/// meaning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetRow {
    /// The row's bytes.
    pub bytes: Vec<u8>,
    /// The decoded set.
    pub set: SharedSet,
}

/// Why the shared set could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SharedError {
    /// The KV failed.
    #[error(transparent)]
    Kv(#[from] KvError),
    /// A row does not decode, or a plugin's stored bytes are missing or
    /// do not match their hash.
    #[error("the shared plugin set is damaged: {0}")]
    Corrupt(String),
}

fn partition() -> Partition {
    Partition::new(PARTITION).expect("a valid partition name")
}

fn chunk_key(hash: &str, index: usize) -> Vec<u8> {
    format!("blob/{hash}/{index:05}").into_bytes()
}

fn stored_key(hash: &str) -> Vec<u8> {
    format!("stored/{hash}").into_bytes()
}

fn configured_key(node: &str) -> Vec<u8> {
    format!("configured/{node}").into_bytes()
}

fn chunk_count(size: u64) -> usize {
    usize::try_from(size)
        .unwrap_or(usize::MAX)
        .div_ceil(CHUNK_BYTES)
        .max(1)
}

/// The guard a commit carries to hold only while `row` is the set, or,
/// for `None`, only while no host has published one.
pub fn guard(row: Option<&SetRow>) -> Precondition {
    match row {
        Some(row) => Precondition::Equals {
            partition: partition(),
            key: SET_KEY.to_vec(),
            value: row.bytes.clone(),
        },
        None => Precondition::Absent {
            partition: partition(),
            key: SET_KEY.to_vec(),
        },
    }
}

/// The shared set, if any host wrote one.
///
/// # Errors
/// The KV failed, or the row does not decode.
pub async fn read(kv: &dyn Kv) -> Result<Option<SetRow>, SharedError> {
    let Some(bytes) = kv.get(&partition(), SET_KEY).await? else {
        return Ok(None);
    };
    let set = serde_json::from_slice(&bytes)
        .map_err(|e| SharedError::Corrupt(format!("the set row: {e}")))?;
    Ok(Some(SetRow { bytes, set }))
}

/// Writes `set` if the row is still `expected` (absent for `None`).
/// Returns the row written, or `None` when another host changed the set
/// first.
///
/// # Errors
/// The KV failed (the outcome may be unknown: read the set again).
pub async fn publish(
    kv: &dyn Kv,
    expected: Option<&SetRow>,
    set: SharedSet,
) -> Result<Option<SetRow>, SharedError> {
    let bytes = serde_json::to_vec(&set).expect("a set serializes");
    let batch = Batch {
        preconditions: vec![guard(expected)],
        writes: vec![Write::Put {
            partition: partition(),
            key: SET_KEY.to_vec(),
            value: bytes.clone(),
        }],
    };
    match kv.apply(&batch).await? {
        Outcome::Committed => Ok(Some(SetRow { bytes, set })),
        Outcome::PreconditionFailed { .. } | Outcome::DeadlinePassed => Ok(None),
    }
}

/// Stores a plugin's bytes under their hash, one chunk per write (each
/// write is idempotent: the same hash always has the same chunks).
///
/// # Errors
/// The KV failed; a later store of the same bytes finishes the job.
pub async fn store_blob(kv: &dyn Kv, hash: &str, bytes: &[u8]) -> Result<(), SharedError> {
    let chunks: Vec<&[u8]> = if bytes.is_empty() {
        vec![&[]]
    } else {
        bytes.chunks(CHUNK_BYTES).collect()
    };
    for (index, chunk) in chunks.into_iter().enumerate() {
        let batch = Batch {
            preconditions: Vec::new(),
            writes: vec![Write::Put {
                partition: partition(),
                key: chunk_key(hash, index),
                value: chunk.to_vec(),
            }],
        };
        kv.apply(&batch).await?;
    }
    let batch = Batch {
        preconditions: Vec::new(),
        writes: vec![Write::Put {
            partition: partition(),
            key: stored_key(hash),
            value: bytes.len().to_string().into_bytes(),
        }],
    };
    kv.apply(&batch).await?;
    Ok(())
}

/// Deletes every stored plugin `row` does not name, while `row` is the
/// set; the number of plugins deleted. Stops without error when the set
/// moves on (the next swap collects).
///
/// # Errors
/// The KV failed, or an index row does not decode; what was deleted
/// stays deleted.
pub async fn collect_garbage(kv: &dyn Kv, row: &SetRow) -> Result<usize, SharedError> {
    let named: std::collections::BTreeSet<&str> =
        row.set.worlds.values().map(|m| m.hash.as_str()).collect();
    let mut unnamed = Vec::new();
    let mut cursor: Option<Vec<u8>> = None;
    loop {
        let page = kv
            .scan(
                &partition(),
                b"stored/",
                Some(b"stored0"),
                cursor.as_deref(),
                custodian_kv::MAX_PAGE_ENTRIES,
            )
            .await?;
        for (key, value) in page.entries {
            let hash = String::from_utf8_lossy(&key["stored/".len()..]).into_owned();
            let size: u64 = std::str::from_utf8(&value)
                .ok()
                .and_then(|text| text.parse().ok())
                .ok_or_else(|| SharedError::Corrupt(format!("the index row of plugin {hash}")))?;
            if !named.contains(hash.as_str()) {
                unnamed.push((hash, size));
            }
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let mut deleted = 0;
    for (hash, size) in unnamed {
        // The index row goes last: a collection cut short finds the rest
        // of the plugin again next time.
        let keys: Vec<Vec<u8>> = (0..chunk_count(size))
            .map(|index| chunk_key(&hash, index))
            .chain([stored_key(&hash)])
            .collect();
        // Bounded batches: a large plugin has hundreds of chunks.
        for group in keys.chunks(64) {
            let batch = Batch {
                preconditions: vec![guard(Some(row))],
                writes: group
                    .iter()
                    .map(|key| Write::Delete {
                        partition: partition(),
                        key: key.clone(),
                    })
                    .collect(),
            };
            if kv.apply(&batch).await? != Outcome::Committed {
                return Ok(deleted);
            }
        }
        deleted += 1;
    }
    Ok(deleted)
}

/// The bytes of `world`'s plugin `member`: the bundled plugin's when the
/// hashes match (nothing to read), else the stored ones.
///
/// # Errors
/// As [`load_blob`].
pub async fn plugin_bytes(
    kv: &dyn Kv,
    world: World,
    member: &Member,
) -> Result<Vec<u8>, SharedError> {
    match crate::bundled::plugin(world).filter(|bytes| content_hash(bytes) == member.hash) {
        Some(bytes) => Ok(bytes.to_vec()),
        None => load_blob(kv, member).await,
    }
}

/// The bytes of `member`, checked against its size and hash.
///
/// # Errors
/// The KV failed, or the bytes are missing or not the member's.
pub async fn load_blob(kv: &dyn Kv, member: &Member) -> Result<Vec<u8>, SharedError> {
    let keys: Vec<Vec<u8>> = (0..chunk_count(member.size))
        .map(|index| chunk_key(&member.hash, index))
        .collect();
    let mut bytes = Vec::with_capacity(usize::try_from(member.size).unwrap_or(0));
    for group in keys.chunks(CHUNKS_PER_READ) {
        for (key, value) in group.iter().zip(kv.get_many(&partition(), group).await?) {
            let value = value.ok_or_else(|| {
                SharedError::Corrupt(format!(
                    "chunk {} of plugin {} is missing",
                    String::from_utf8_lossy(key),
                    member.hash
                ))
            })?;
            bytes.extend_from_slice(&value);
        }
    }
    let hash = content_hash(&bytes);
    if bytes.len() as u64 != member.size || hash != member.hash {
        return Err(SharedError::Corrupt(format!(
            "the stored bytes of plugin {} ({} bytes) hash to {hash} ({} bytes)",
            member.hash,
            member.size,
            bytes.len()
        )));
    }
    Ok(bytes)
}

/// The hashes `node`'s configuration named at its last start, by world
/// name (empty before its first start).
///
/// # Errors
/// The KV failed, or the row does not decode.
pub async fn configured(kv: &dyn Kv, node: &str) -> Result<BTreeMap<String, String>, SharedError> {
    match kv.get(&partition(), &configured_key(node)).await? {
        None => Ok(BTreeMap::new()),
        Some(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            SharedError::Corrupt(format!("the configured plugins of node {node}: {e}"))
        }),
    }
}

/// Records the hashes `node`'s configuration names now.
///
/// # Errors
/// The KV failed.
pub async fn remember_configured(
    kv: &dyn Kv,
    node: &str,
    hashes: &BTreeMap<String, String>,
) -> Result<(), SharedError> {
    let batch = Batch {
        preconditions: Vec::new(),
        writes: vec![Write::Put {
            partition: partition(),
            key: configured_key(node),
            value: serde_json::to_vec(hashes).expect("a map serializes"),
        }],
    };
    kv.apply(&batch).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use custodian_base::clock::SystemClock;
    use custodian_kv::memory::MemoryKv;

    fn member(bytes: &[u8]) -> Member {
        Member {
            hash: content_hash(bytes),
            size: bytes.len() as u64,
            source: "test".into(),
            signature: None,
        }
    }

    fn set(by: &str) -> SharedSet {
        SharedSet {
            worlds: BTreeMap::from([("takedown".to_owned(), member(b"wasm"))]),
            by: by.into(),
            at_ms: 1,
        }
    }

    #[tokio::test]
    async fn a_plugin_of_several_chunks_reads_back_exactly() {
        let kv = MemoryKv::new(Arc::new(SystemClock));
        let bytes: Vec<u8> = (0..CHUNK_BYTES * 2 + 17).map(|i| (i % 251) as u8).collect();
        let plugin = member(&bytes);
        store_blob(&kv, &plugin.hash, &bytes).await.unwrap();
        assert_eq!(load_blob(&kv, &plugin).await.unwrap(), bytes);
        let missing = member(b"never stored");
        assert!(matches!(
            load_blob(&kv, &missing).await,
            Err(SharedError::Corrupt(_))
        ));
    }

    #[tokio::test]
    async fn stored_bytes_that_do_not_match_their_hash_are_refused() {
        let kv = MemoryKv::new(Arc::new(SystemClock));
        let plugin = member(b"the real plugin");
        store_blob(&kv, &plugin.hash, b"the real plugin")
            .await
            .unwrap();
        store_blob(&kv, &plugin.hash, b"the fake plugin")
            .await
            .unwrap();
        let error = load_blob(&kv, &plugin).await.unwrap_err();
        assert!(error.to_string().contains("hash to"), "{error}");
    }

    #[tokio::test]
    async fn a_set_is_published_only_over_the_row_its_writer_read() {
        let kv = MemoryKv::new(Arc::new(SystemClock));
        assert!(read(&kv).await.unwrap().is_none());
        let first = publish(&kv, None, set("host:a")).await.unwrap().unwrap();
        assert!(
            publish(&kv, None, set("host:b")).await.unwrap().is_none(),
            "a second first set loses"
        );
        let second = publish(&kv, Some(&first), set("host:b"))
            .await
            .unwrap()
            .unwrap();
        assert!(
            publish(&kv, Some(&first), set("host:c"))
                .await
                .unwrap()
                .is_none(),
            "a set read before another host's swap loses"
        );
        assert_eq!(read(&kv).await.unwrap(), Some(second));
    }

    #[tokio::test]
    async fn plugins_the_set_no_longer_names_are_collected_while_it_stays_the_set() {
        let kv = MemoryKv::new(Arc::new(SystemClock));
        let old: Vec<u8> = vec![1; CHUNK_BYTES + 5];
        let new: Vec<u8> = vec![2; 10];
        let (old_member, new_member) = (member(&old), member(&new));
        store_blob(&kv, &old_member.hash, &old).await.unwrap();
        store_blob(&kv, &new_member.hash, &new).await.unwrap();
        let named = |m: &Member| SharedSet {
            worlds: BTreeMap::from([("takedown".to_owned(), m.clone())]),
            by: "test".into(),
            at_ms: 1,
        };
        let first = publish(&kv, None, named(&old_member))
            .await
            .unwrap()
            .unwrap();
        let second = publish(&kv, Some(&first), named(&new_member))
            .await
            .unwrap()
            .unwrap();

        // Under a set that has moved on, nothing is collected.
        assert_eq!(collect_garbage(&kv, &first).await.unwrap(), 0);
        assert!(load_blob(&kv, &old_member).await.is_ok());

        assert_eq!(collect_garbage(&kv, &second).await.unwrap(), 1);
        assert!(load_blob(&kv, &old_member).await.is_err());
        assert_eq!(load_blob(&kv, &new_member).await.unwrap(), new);
        assert_eq!(
            collect_garbage(&kv, &second).await.unwrap(),
            0,
            "nothing left"
        );
        let rest = kv
            .scan(&partition(), b"blob/", Some(b"blob0"), None, 1000)
            .await
            .unwrap();
        assert_eq!(rest.entries.len(), 1, "only the named plugin's chunk");
    }

    #[tokio::test]
    async fn a_node_remembers_what_its_configuration_named() {
        let kv = MemoryKv::new(Arc::new(SystemClock));
        assert!(configured(&kv, "alpha").await.unwrap().is_empty());
        let hashes = BTreeMap::from([("takedown".to_owned(), "ab".to_owned())]);
        remember_configured(&kv, "alpha", &hashes).await.unwrap();
        assert_eq!(configured(&kv, "alpha").await.unwrap(), hashes);
        assert!(configured(&kv, "beta").await.unwrap().is_empty());
    }
}
