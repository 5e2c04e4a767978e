//! The etcd key of a row, and the etcd ranges of a partition and of a
//! scan (see the module documentation's "Key layout").

use crate::{KvError, Partition, scan_range};

/// Ends a partition's name inside an etcd key. Partition names are
/// `[a-z0-9._-]`, so this byte never occurs inside one.
const NAME_END: u8 = 0;
/// The byte after [`NAME_END`]: `<prefix><partition>\x01` is the least
/// key greater than every row of the partition.
const PARTITION_END: u8 = 1;

/// Builds and takes apart the etcd keys of one store.
#[derive(Debug, Clone)]
pub(super) struct Layout {
    prefix: Vec<u8>,
}

/// An etcd range `[from, to)`; `to` is never empty (an empty end would
/// mean a single key to etcd).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct EtcdRange {
    pub from: Vec<u8>,
    pub to: Vec<u8>,
}

impl Layout {
    /// The layout of a store whose keys start with `prefix`.
    pub fn new(prefix: Vec<u8>) -> Self {
        Self { prefix }
    }

    /// `<prefix><partition>` followed by `last`.
    fn partition_with(&self, partition: &Partition, last: u8, extra: usize) -> Vec<u8> {
        let name = partition.as_str().as_bytes();
        let mut key = Vec::with_capacity(self.prefix.len() + name.len() + 1 + extra);
        key.extend_from_slice(&self.prefix);
        key.extend_from_slice(name);
        key.push(last);
        key
    }

    /// `<prefix><partition>\0<key>`: where the row lives.
    pub fn row(&self, partition: &Partition, key: &[u8]) -> Vec<u8> {
        let mut row = self.partition_with(partition, NAME_END, key.len());
        row.extend_from_slice(key);
        row
    }

    /// The etcd range of a scan whose arguments `validate_scan` accepted:
    /// from `<start>` (or from `<cursor>\0`, the least key after the
    /// cursor) to `<end>` or the end of the partition. `None` when the
    /// range holds no key.
    pub fn scan(
        &self,
        partition: &Partition,
        start: &[u8],
        end: Option<&[u8]>,
        cursor: Option<&[u8]>,
    ) -> Option<EtcdRange> {
        // scan_range settles the empty cases the same way on every backend.
        scan_range(start, end, cursor)?;
        let from = match cursor {
            Some(cursor) => {
                let mut from = self.row(partition, cursor);
                from.push(0);
                from
            }
            None => self.row(partition, start),
        };
        let to = match end {
            Some(end) => self.row(partition, end),
            None => self.partition_with(partition, PARTITION_END, 0),
        };
        (from < to).then_some(EtcdRange { from, to })
    }

    /// The key of `partition`'s row `etcd_key`, with the prefix and the
    /// partition taken off.
    ///
    /// # Errors
    /// [`KvError::Corrupt`] when etcd answered a key outside the partition
    /// (it cannot, for a range inside it).
    pub fn key_of<'a>(
        &self,
        partition: &Partition,
        etcd_key: &'a [u8],
    ) -> Result<&'a [u8], KvError> {
        let name = partition.as_str().as_bytes();
        etcd_key
            .strip_prefix(self.prefix.as_slice())
            .and_then(|rest| rest.strip_prefix(name))
            .and_then(|rest| rest.strip_prefix(&[NAME_END]))
            .ok_or_else(|| {
                KvError::Corrupt(
                    format!(
                        "etcd answered the key {:?} for partition {partition}",
                        String::from_utf8_lossy(etcd_key)
                    )
                    .into(),
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(name: &str) -> Partition {
        Partition::new(name).unwrap()
    }

    #[test]
    fn a_row_key_is_prefix_partition_nul_key() {
        let layout = Layout::new(b"app/".to_vec());
        assert_eq!(layout.row(&p("a.b"), b"k\0\xff"), b"app/a.b\0k\0\xff");
        assert_eq!(
            layout.key_of(&p("a.b"), b"app/a.b\0k\0\xff"),
            Ok(&b"k\0\xff"[..])
        );
    }

    #[test]
    fn a_partition_range_excludes_partitions_whose_names_extend_it() {
        let layout = Layout::new(b"x/".to_vec());
        let range = layout.scan(&p("a"), b"", None, None).unwrap();
        assert_eq!(range.from, b"x/a\0");
        assert_eq!(range.to, b"x/a\x01");
        for other in ["a.b", "a0", "a-", "ab"] {
            let row = layout.row(&p(other), b"k");
            assert!(row >= range.to || row < range.from, "{other}");
        }
        assert!(layout.key_of(&p("a"), b"x/a.b\0k").is_err());
    }

    #[test]
    fn a_cursor_resumes_at_the_least_key_after_it() {
        let layout = Layout::new(Vec::new());
        let range = layout.scan(&p("a"), b"b", Some(b"y"), Some(b"c")).unwrap();
        assert_eq!(range.from, b"a\0c\0");
        assert_eq!(range.to, b"a\0y");
    }

    #[test]
    fn empty_scans_have_no_etcd_range() {
        let layout = Layout::new(Vec::new());
        assert_eq!(layout.scan(&p("a"), b"m", Some(b"m"), None), None);
        assert_eq!(layout.scan(&p("a"), b"n", Some(b"a"), None), None);
        // The least key after "c" is "c\0", the end itself.
        assert_eq!(layout.scan(&p("a"), b"b", Some(b"c\0"), Some(b"c")), None);
    }
}
