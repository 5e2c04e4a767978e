//! The key layout documented in the module root, built and parsed in one
//! place so the two directions cannot drift apart.

use super::{FenceError, FenceKind, Namespace, ShardId, is_name};

/// The separator between key segments. Names never contain it.
const SEP: u8 = b'/';
/// The byte after [`SEP`]: `<prefix>/` .. `<prefix>0` spans every key that
/// extends `<prefix>/`.
const SEP_END: u8 = SEP + 1;

fn join(segments: &[&str]) -> Vec<u8> {
    segments.join("/").into_bytes()
}

/// `epoch/<ns>/<kind>`: the coordinator epoch of one kind.
pub(super) fn epoch(ns: &Namespace, kind: FenceKind) -> Vec<u8> {
    join(&["epoch", ns.as_str(), kind.segment()])
}

/// `config/<ns>`: the namespace record.
pub(super) fn config(ns: &Namespace) -> Vec<u8> {
    join(&["config", ns.as_str()])
}

/// `recovery/<ns>`: the lease-table recovery marker.
pub(super) fn recovery(ns: &Namespace) -> Vec<u8> {
    join(&["recovery", ns.as_str()])
}

/// `checkpoint/<ns>/<kind>`: where revocation of `kind` resumes.
pub(super) fn checkpoint(ns: &Namespace, kind: FenceKind) -> Vec<u8> {
    join(&["checkpoint", ns.as_str(), kind.segment()])
}

/// `lease/<ns>/<shard>`: a leased-shard row.
pub(super) fn leased_shard(ns: &Namespace, shard: &ShardId) -> Vec<u8> {
    join(&["lease", ns.as_str(), shard.as_str()])
}

/// `[lease/<ns>/, lease/<ns>0)`: every leased-shard row of `ns` and
/// nothing else.
pub(super) fn leased_shard_range(ns: &Namespace) -> (Vec<u8>, Vec<u8>) {
    let mut start = join(&["lease", ns.as_str()]);
    let mut end = start.clone();
    start.push(SEP);
    end.push(SEP_END);
    (start, end)
}

/// The shard named by a leased-shard key of `ns`.
///
/// # Errors
/// [`FenceError::Corrupt`] if `key` is not such a key: a scan of the class
/// range should only ever return them.
pub(super) fn parse_leased_shard(ns: &Namespace, key: &[u8]) -> Result<ShardId, FenceError> {
    let (start, _) = leased_shard_range(ns);
    key.strip_prefix(start.as_slice())
        .and_then(|rest| std::str::from_utf8(rest).ok())
        .filter(|shard| is_name(shard))
        .map(|shard| ShardId(shard.to_owned()))
        .ok_or_else(|| {
            FenceError::Corrupt(format!(
                "{:?} is not a leased-shard key of namespace {ns}",
                String::from_utf8_lossy(key)
            ))
        })
}

/// `el/<ns>/<shard>`: a shard's epoch lease, in the shards partition.
pub(super) fn epoch_lease(ns: &Namespace, shard: &ShardId) -> Vec<u8> {
    join(&["el", ns.as_str(), shard.as_str()])
}
