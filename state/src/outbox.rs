//! Outbox indexes: pending rows found and final rows expired without reading every row.
//!
//! A partition's column family holds one outbox row per action idempotency key (tag `o`;
//! encoded by the runtime, this crate never decodes it). Two indexes sit beside the rows
//! and are written in the same batch as the row they describe:
//!
//! - pending (tag `p`): `key` for every row still to be delivered. The runtime's scans
//!   (start, assignment, a lost hand-over) and `--exit-at-end` read only these.
//! - expiry (tag `x`): `created_at (order-preserving) | key` for every final row
//!   (delivered, conflict, failed, shadow). Expiry walks it from the oldest entry and stops
//!   at the first row that is still inside the retention: its cost is the rows it deletes.
//!
//! A store written before the indexes existed gets them built once, by one scan, through
//! [`Store::rebuild_outbox_index`] with the runtime's classification of a row.

use rocksdb::{Direction, IteratorMode, ReadOptions, WriteBatch};

use crate::parts::{self, PartCf, TAG_EXPIRY, TAG_OUTBOX, TAG_PENDING};
use crate::store::Store;
use crate::{KeyValue, PartitionId, StateError};

/// Where a row written to the outbox belongs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutboxIndex {
    /// Still to be delivered.
    Pending,
    /// Final (or never sent, as shadow rows): expires once `created_at_ms` (the event time
    /// of the input that fired it) is more than the retention behind the partition's newest
    /// final row.
    Final { created_at_ms: i64 },
}

const INDEX_RECORD: &[u8] = b"outbox-index-v1";

/// `i64` → 8 bytes whose byte order is the numeric order.
fn ordered(ms: i64) -> [u8; 8] {
    ((ms as u64) ^ (1 << 63)).to_be_bytes()
}

fn unordered(bytes: &[u8]) -> Option<i64> {
    let b: [u8; 8] = bytes.try_into().ok()?;
    Some((u64::from_be_bytes(b) ^ (1 << 63)) as i64)
}

fn expiry_key(created_at_ms: i64, key: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + 8 + key.len());
    k.push(TAG_EXPIRY);
    k.extend_from_slice(&ordered(created_at_ms));
    k.extend_from_slice(key.as_bytes());
    k
}

impl Store {
    /// Adds the index writes of one outbox row to `batch` (the row itself is written by the
    /// caller in the same batch). A final row's pending entry is deleted.
    pub(crate) fn index_outbox(batch: &mut WriteBatch, cf: &PartCf, key: &str, index: OutboxIndex) {
        match index {
            OutboxIndex::Pending => batch.put_cf(cf, parts::tagged(TAG_PENDING, key.as_bytes()), []),
            OutboxIndex::Final { created_at_ms } => {
                batch.delete_cf(cf, parts::tagged(TAG_PENDING, key.as_bytes()));
                batch.put_cf(cf, expiry_key(created_at_ms, key), []);
            }
        }
    }

    fn outbox_row_batch(
        &self,
        p: PartitionId,
        key: &str,
        row: &[u8],
        index: OutboxIndex,
    ) -> Result<WriteBatch, StateError> {
        let cf = self.part_or_create(p)?;
        let mut batch = WriteBatch::default();
        batch.put_cf(&*cf, parts::tagged(TAG_OUTBOX, key.as_bytes()), row);
        Self::index_outbox(&mut batch, &cf, key, index);
        Ok(batch)
    }

    /// Overwrites an outbox row outside a commit batch (the dispatcher recording an outcome,
    /// `tidemark actions resend`), with its index entries, durably.
    pub fn outbox_update(&self, p: PartitionId, key: &str, row: &[u8], index: OutboxIndex) -> Result<(), StateError> {
        self.write(self.outbox_row_batch(p, key, row, index)?)
    }

    /// [`Store::outbox_update`] without waiting for fsync ([`Store::write_unsynced`]): for an
    /// update a host crash may lose without harm (the attempt count written before a POST:
    /// lost, the row is sent again as a first attempt, which a crash there repeats anyway).
    pub fn outbox_update_unsynced(
        &self,
        p: PartitionId,
        key: &str,
        row: &[u8],
        index: OutboxIndex,
    ) -> Result<(), StateError> {
        self.write_unsynced(self.outbox_row_batch(p, key, row, index)?)
    }

    /// The rows of a partition still to be delivered, in key order, read through the pending
    /// index: final rows are never read.
    pub fn outbox_pending(&self, p: PartitionId) -> Result<Vec<KeyValue>, StateError> {
        self.outbox_pending_page(p, None, usize::MAX)
    }

    /// At most `limit` of [`Store::outbox_pending`]'s rows, those whose key comes after
    /// `after` (all when `None`): a scan of a large pending backlog reads it a page at a
    /// time, never whole.
    pub fn outbox_pending_page(
        &self,
        p: PartitionId,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<KeyValue>, StateError> {
        let Some(cf) = self.part(p) else { return Ok(Vec::new()) };
        let mut keys = Vec::new();
        let mut read = ReadOptions::default();
        read.set_iterate_upper_bound(parts::tag_end(TAG_PENDING));
        let start = parts::tagged(TAG_PENDING, after.unwrap_or_default());
        for item in self.db.iterator_cf_opt(&*cf, read, IteratorMode::From(&start, Direction::Forward)) {
            let (k, _) = item.map_err(|e| self.rocks(e))?;
            if k.first() != Some(&TAG_PENDING) || keys.len() >= limit {
                break;
            }
            if after.is_some() && k[..] == start[..] {
                continue;
            }
            keys.push(parts::tagged(TAG_OUTBOX, &k[1..]));
        }
        let rows = self.db.batched_multi_get_cf(&*cf, &keys, false);
        let mut out = Vec::with_capacity(keys.len());
        for (k, row) in keys.iter().zip(rows) {
            if let Some(v) = row.map_err(|e| self.rocks(e))? {
                out.push((k[1..].to_vec(), v.to_vec()));
            }
        }
        Ok(out)
    }

    /// How many rows of a partition are still to be delivered (index entries only).
    pub fn outbox_pending_count(&self, p: PartitionId) -> Result<usize, StateError> {
        let Some(cf) = self.part(p) else { return Ok(0) };
        let mut read = ReadOptions::default();
        read.set_iterate_upper_bound(parts::tag_end(TAG_PENDING));
        let from = [TAG_PENDING];
        let mut n = 0;
        for item in self.db.iterator_cf_opt(&*cf, read, IteratorMode::From(&from, Direction::Forward)) {
            item.map_err(|e| self.rocks(e))?;
            n += 1;
        }
        Ok(n)
    }

    /// Deletes, durably, at most `max` final rows whose event time is more than
    /// `retention_ms` behind the partition's newest final row, oldest first; returns how
    /// many. Reads only the expiry index entries it deletes, plus one.
    pub fn outbox_expire(&self, p: PartitionId, retention_ms: i64, max: usize) -> Result<usize, StateError> {
        let Some(cf) = self.part(p) else { return Ok(0) };
        let end = parts::tag_end(TAG_EXPIRY);
        let newest = {
            let mut it = self.db.iterator_cf(&*cf, IteratorMode::From(&end, Direction::Reverse));
            match it.next() {
                Some(item) => {
                    let (k, _) = item.map_err(|e| self.rocks(e))?;
                    if k.first() != Some(&TAG_EXPIRY) {
                        return Ok(0);
                    }
                    k.get(1..9).and_then(unordered).unwrap_or(i64::MIN)
                }
                None => return Ok(0),
            }
        };
        let horizon = newest.saturating_sub(retention_ms);
        let mut batch = WriteBatch::default();
        let mut n = 0;
        let mut read = ReadOptions::default();
        read.set_iterate_upper_bound(end);
        let from = [TAG_EXPIRY];
        for item in self.db.iterator_cf_opt(&*cf, read, IteratorMode::From(&from, Direction::Forward)) {
            let (k, _) = item.map_err(|e| self.rocks(e))?;
            if n >= max {
                break;
            }
            let Some(created) = k.get(1..9).and_then(unordered) else { continue };
            if created >= horizon {
                break;
            }
            batch.delete_cf(&*cf, &k);
            batch.delete_cf(&*cf, parts::tagged(TAG_OUTBOX, &k[9..]));
            n += 1;
        }
        if n > 0 {
            self.write(batch)?;
        }
        Ok(n)
    }

    /// Whether the indexes were built for this store (always, for a store created with them).
    pub fn outbox_indexed(&self) -> Result<bool, StateError> {
        Ok(self.db.get_cf(self.meta(), INDEX_RECORD).map_err(|e| self.rocks(e))?.is_some())
    }

    /// Builds the indexes of a store written before they existed: one scan of every row,
    /// classified by `classify` (the runtime decodes the row). Unreadable rows get no index
    /// entry. Idempotent; records that it ran.
    pub fn rebuild_outbox_index(&self, classify: impl Fn(&[u8]) -> Option<OutboxIndex>) -> Result<usize, StateError> {
        let mut batch = WriteBatch::default();
        let mut n = 0;
        for cf in self.parts.all() {
            for (key, v) in self.scan_tag(&cf, TAG_OUTBOX, &[])? {
                let Ok(key) = std::str::from_utf8(&key) else { continue };
                if let Some(index) = classify(&v) {
                    Self::index_outbox(&mut batch, &cf, key, index);
                    n += 1;
                }
            }
        }
        batch.put_cf(self.meta(), INDEX_RECORD, []);
        self.write(batch)?;
        Ok(n)
    }

    /// Marks a new, empty store as indexed (nothing to rebuild).
    pub(crate) fn mark_outbox_indexed_if_empty(&self) -> Result<(), StateError> {
        if self.outbox_indexed()? {
            return Ok(());
        }
        let mut empty = true;
        for cf in self.parts.all() {
            if !self.scan_tag(&cf, TAG_OUTBOX, &[])?.is_empty() {
                empty = false;
                break;
            }
        }
        if empty {
            let mut batch = WriteBatch::default();
            batch.put_cf(self.meta(), INDEX_RECORD, []);
            self.write(batch)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StoreOptions;

    fn open(dir: &std::path::Path) -> Store {
        Store::open(dir, &StoreOptions::default()).expect("open")
    }

    #[test]
    fn order_preserving_times_sort_like_the_numbers() {
        let mut v = [-5i64, 3, i64::MIN, 0, i64::MAX, -1].map(ordered);
        v.sort();
        assert_eq!(v.map(|b| unordered(&b)), [i64::MIN, -5, -1, 0, 3, i64::MAX].map(Some));
    }

    #[test]
    fn pending_rows_are_read_through_the_index_and_leave_it_once_final() -> Result<(), StateError> {
        let dir = tempfile::tempdir().expect("tmp");
        let store = open(dir.path());
        assert!(store.outbox_indexed()?, "a new store is indexed from the start");
        let p = PartitionId::sku(1);
        let mut b = store.batch();
        b.put_outbox(p, "a", b"row-a", OutboxIndex::Pending);
        b.put_outbox(p, "b", b"row-b", OutboxIndex::Final { created_at_ms: 10 });
        b.put_outbox(PartitionId::sku(2), "c", b"row-c", OutboxIndex::Pending);
        b.commit()?;
        assert_eq!(store.outbox_pending(p)?, vec![(b"a".to_vec(), b"row-a".to_vec())]);
        assert_eq!(store.outbox_pending_count(p)?, 1);
        store.outbox_update(p, "a", b"row-a-done", OutboxIndex::Final { created_at_ms: 20 })?;
        assert!(store.outbox_pending(p)?.is_empty());
        assert_eq!(store.outbox_get(p, "a")?, Some(b"row-a-done".to_vec()));
        Ok(())
    }

    #[test]
    fn an_unsynced_update_is_read_back_and_found_after_the_store_is_reopened() -> Result<(), StateError> {
        let dir = tempfile::tempdir().expect("tmp");
        let p = PartitionId::sku(1);
        {
            let store = open(dir.path());
            let mut b = store.batch();
            b.put_outbox(p, "a", b"row-a", OutboxIndex::Pending);
            b.commit()?;
            store.outbox_update_unsynced(p, "a", b"row-a-attempt-1", OutboxIndex::Pending)?;
            assert_eq!(store.outbox_get(p, "a")?, Some(b"row-a-attempt-1".to_vec()));
        }
        let store = open(dir.path());
        assert_eq!(store.outbox_pending(p)?, vec![(b"a".to_vec(), b"row-a-attempt-1".to_vec())]);
        Ok(())
    }

    #[test]
    fn expiry_deletes_final_rows_behind_the_newest_by_more_than_the_retention_oldest_first() -> Result<(), StateError> {
        let dir = tempfile::tempdir().expect("tmp");
        let store = open(dir.path());
        let p = PartitionId::sku(0);
        let mut b = store.batch();
        for (key, t) in [("old-1", 0), ("old-2", 500), ("edge", 1_000), ("new", 11_000)] {
            b.put_outbox(p, key, key.as_bytes(), OutboxIndex::Final { created_at_ms: t });
        }
        b.put_outbox(p, "pending-old", b"p", OutboxIndex::Pending);
        b.put_outbox(PartitionId::sku(1), "other", b"o", OutboxIndex::Final { created_at_ms: 0 });
        b.commit()?;
        assert_eq!(store.outbox_expire(p, 10_000, 1)?, 1, "at most max per call");
        assert_eq!(store.outbox_expire(p, 10_000, 100)?, 1);
        assert_eq!(store.outbox_expire(p, 10_000, 100)?, 0);
        let left: Vec<String> =
            store.outbox_scan(p)?.into_iter().map(|(k, _)| String::from_utf8_lossy(&k).into_owned()).collect();
        assert_eq!(left, ["edge", "new", "pending-old"]);
        assert!(store.outbox_get(PartitionId::sku(1), "other")?.is_some(), "other partitions untouched");
        Ok(())
    }

    #[test]
    fn a_store_written_before_the_indexes_gets_them_built_once() -> Result<(), StateError> {
        let dir = tempfile::tempdir().expect("tmp");
        let store = open(dir.path());
        let p = PartitionId::sku(3);
        // What an older store holds: rows without index entries or index record.
        let cf = store.part_or_create(p)?;
        store.db.put_cf(&*cf, parts::tagged(TAG_OUTBOX, b"x"), b"P").map_err(|e| store.rocks(e))?;
        store.db.put_cf(&*cf, parts::tagged(TAG_OUTBOX, b"y"), b"F").map_err(|e| store.rocks(e))?;
        store.db.delete_cf(store.meta(), INDEX_RECORD).map_err(|e| store.rocks(e))?;
        assert!(!store.outbox_indexed()?);
        let classify = |v: &[u8]| match v {
            b"P" => Some(OutboxIndex::Pending),
            b"F" => Some(OutboxIndex::Final { created_at_ms: 1 }),
            _ => None,
        };
        assert_eq!(store.rebuild_outbox_index(classify)?, 2);
        assert!(store.outbox_indexed()?);
        assert_eq!(store.outbox_pending(p)?, vec![(b"x".to_vec(), b"P".to_vec())]);
        Ok(())
    }
}

#[cfg(test)]
mod page_tests {
    use crate::{OutboxIndex, PartitionId, Store, StoreOptions};

    #[test]
    fn pending_rows_are_read_a_page_at_a_time_after_the_last_key_of_the_previous_page() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = Store::open(dir.path(), &StoreOptions { owner: "t/g".into(), ..StoreOptions::default() }).unwrap();
        let (p, other) = (PartitionId::sku(1), PartitionId::sku(2));
        let mut b = store.batch();
        for i in 0..5 {
            b.put_outbox(p, &format!("k{i}"), b"row", OutboxIndex::Pending);
        }
        b.put_outbox(p, "done", b"row", OutboxIndex::Final { created_at_ms: 1 });
        b.put_outbox(other, "k9", b"row", OutboxIndex::Pending);
        store.commit_staged(b.stage()).unwrap();
        let keys = |page: Vec<crate::KeyValue>| -> Vec<String> {
            page.into_iter().map(|(k, _)| String::from_utf8(k).unwrap()).collect()
        };
        assert_eq!(keys(store.outbox_pending_page(p, None, 2).unwrap()), ["k0", "k1"]);
        assert_eq!(keys(store.outbox_pending_page(p, Some(b"k1"), 2).unwrap()), ["k2", "k3"]);
        assert_eq!(keys(store.outbox_pending_page(p, Some(b"k3"), 2).unwrap()), ["k4"], "the partition's last page");
        assert!(store.outbox_pending_page(p, Some(b"k4"), 2).unwrap().is_empty());
        assert_eq!(store.outbox_pending(p).unwrap().len(), 5);
    }
}
