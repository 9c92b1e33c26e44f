//! An in-memory state store with the semantics the engine relies on: staged writes become
//! visible together at commit, reads see only committed writes. Used by the topology test
//! driver and by unit tests that need no disk.
//!
//! It keeps every dedup entry (no retention-driven compaction: the engine re-checks the
//! retention on every lookup, so results are the same) and event ids unhashed.

use std::collections::BTreeMap;
use std::sync::RwLock;

use crate::view::{StateStore, StateView, StateWrite};
use crate::{Checkpoint, KeyValue, Namespace, OutboxIndex, PartitionId, StateError};

#[derive(Clone, Debug, Default)]
struct Tables {
    checkpoints: BTreeMap<PartitionId, Checkpoint>,
    dedup: BTreeMap<(PartitionId, String), i64>,
    aggregates: BTreeMap<(PartitionId, u8, Vec<u8>), Vec<u8>>,
    outbox: BTreeMap<(PartitionId, String), (Vec<u8>, OutboxIndex)>,
}

/// BTreeMap tables behind a lock; `Sync` like the RocksDB store.
#[derive(Debug, Default)]
pub struct MemStore {
    tables: RwLock<Tables>,
}

#[derive(Clone, Debug)]
enum Op {
    Dedup(PartitionId, String, i64),
    PutAggregate(PartitionId, u8, Vec<u8>, Vec<u8>),
    DeleteAggregate(PartitionId, u8, Vec<u8>),
    Outbox(PartitionId, String, Vec<u8>, OutboxIndex),
    Checkpoint(PartitionId, Checkpoint),
}

/// Writes staged for one commit, applied in order by [`MemStore::commit`].
#[derive(Clone, Debug, Default)]
pub struct MemBatch {
    ops: Vec<Op>,
}

impl MemBatch {
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }
}

impl MemStore {
    pub fn new() -> MemStore {
        MemStore::default()
    }

    fn read<T>(&self, f: impl FnOnce(&Tables) -> T) -> T {
        // A panic while holding the lock cannot leave a table half-written: commits apply
        // plain map inserts. Reading through the poison is safe.
        let guard = self.tables.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&guard)
    }

    /// Every outbox row of a partition, in key order.
    pub fn outbox_scan(&self, p: PartitionId) -> Vec<KeyValue> {
        self.read(|t| {
            t.outbox
                .range((p, String::new())..)
                .take_while(|((q, _), _)| *q == p)
                .map(|((_, k), (row, _))| (k.as_bytes().to_vec(), row.clone()))
                .collect()
        })
    }

    /// Every outbox row, in (partition, key) order, with its index.
    pub fn outbox_all(&self) -> Vec<(PartitionId, String, Vec<u8>, OutboxIndex)> {
        self.read(|t| t.outbox.iter().map(|((p, k), (row, idx))| (*p, k.clone(), row.clone(), *idx)).collect())
    }

    /// How many dedup entries a partition holds.
    pub fn dedup_len(&self, p: PartitionId) -> usize {
        self.read(|t| t.dedup.keys().filter(|(q, _)| *q == p).count())
    }
}

impl StateView for MemStore {
    fn checkpoint(&self, p: PartitionId) -> Result<Option<Checkpoint>, StateError> {
        Ok(self.read(|t| t.checkpoints.get(&p).copied()))
    }

    fn load_aggregates(&self, p: PartitionId, ns: Namespace) -> Result<Vec<KeyValue>, StateError> {
        self.scan_aggregates(p, ns, &[])
    }

    fn get_aggregate(&self, p: PartitionId, ns: Namespace, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        Ok(self.read(|t| t.aggregates.get(&(p, ns as u8, key.to_vec())).cloned()))
    }

    fn scan_aggregates(&self, p: PartitionId, ns: Namespace, prefix: &[u8]) -> Result<Vec<KeyValue>, StateError> {
        let ns = ns as u8;
        Ok(self.read(|t| {
            t.aggregates
                .range((p, ns, prefix.to_vec())..)
                .take_while(|((q, n, k), _)| *q == p && *n == ns && k.starts_with(prefix))
                .map(|((_, _, k), v)| (k.clone(), v.clone()))
                .collect()
        }))
    }

    fn dedup_lookup(&self, p: PartitionId, ids: &[&str]) -> Result<Vec<Option<i64>>, StateError> {
        Ok(self.read(|t| ids.iter().map(|id| t.dedup.get(&(p, (*id).to_string())).copied()).collect()))
    }

    fn outbox_get(&self, p: PartitionId, key: &str) -> Result<Option<Vec<u8>>, StateError> {
        Ok(self.read(|t| t.outbox.get(&(p, key.to_string())).map(|(row, _)| row.clone())))
    }
}

impl StateWrite for MemBatch {
    fn put_dedup(&mut self, p: PartitionId, event_id: &str, append_ms: i64) {
        self.ops.push(Op::Dedup(p, event_id.to_string(), append_ms));
    }

    fn put_aggregate(&mut self, p: PartitionId, ns: Namespace, key: &[u8], value: &[u8]) {
        self.ops.push(Op::PutAggregate(p, ns as u8, key.to_vec(), value.to_vec()));
    }

    fn delete_aggregate(&mut self, p: PartitionId, ns: Namespace, key: &[u8]) {
        self.ops.push(Op::DeleteAggregate(p, ns as u8, key.to_vec()));
    }

    fn put_outbox(&mut self, p: PartitionId, key: &str, row: &[u8], index: OutboxIndex) {
        self.ops.push(Op::Outbox(p, key.to_string(), row.to_vec(), index));
    }

    fn put_checkpoint(&mut self, p: PartitionId, c: &Checkpoint) -> Result<(), StateError> {
        self.ops.push(Op::Checkpoint(p, *c));
        Ok(())
    }
}

impl StateStore for MemStore {
    type Batch<'a> = MemBatch;

    fn batch(&self) -> MemBatch {
        MemBatch::default()
    }

    /// Applies every staged write at once: readers see all of them or none.
    fn commit(&self, batch: MemBatch) -> Result<(), StateError> {
        let mut t = self.tables.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        for op in batch.ops {
            match op {
                Op::Dedup(p, id, ms) => {
                    t.dedup.insert((p, id), ms);
                }
                Op::PutAggregate(p, ns, k, v) => {
                    t.aggregates.insert((p, ns, k), v);
                }
                Op::DeleteAggregate(p, ns, k) => {
                    t.aggregates.remove(&(p, ns, k));
                }
                Op::Outbox(p, k, row, idx) => {
                    t.outbox.insert((p, k), (row, idx));
                }
                Op::Checkpoint(p, c) => {
                    t.checkpoints.insert(p, c);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staged_writes_are_invisible_until_the_commit_and_partitions_and_namespaces_stay_apart() -> Result<(), StateError>
    {
        let store = MemStore::new();
        let (a, b) = (PartitionId::orders(0), PartitionId::orders(1));
        let mut batch = store.batch();
        batch.put_dedup(a, "e-1", 7);
        batch.put_aggregate(a, Namespace::Dashboard, b"k1", b"v1");
        batch.put_aggregate(a, Namespace::Dashboard, b"k0", b"v0");
        batch.put_aggregate(a, Namespace::Finance, b"f", b"x");
        batch.put_aggregate(b, Namespace::Dashboard, b"k", b"other");
        batch.put_outbox(a, "key", b"row", OutboxIndex::Pending);
        batch.put_checkpoint(a, &Checkpoint { next_offset: 3, ..Checkpoint::default() })?;
        assert_eq!(store.dedup_lookup(a, &["e-1"])?, vec![None]);
        assert_eq!(store.checkpoint(a)?, None);
        store.commit(batch)?;
        assert_eq!(store.dedup_lookup(a, &["e-1", "e-2"])?, vec![Some(7), None]);
        assert_eq!(store.dedup_lookup(b, &["e-1"])?, vec![None]);
        assert_eq!(
            store.load_aggregates(a, Namespace::Dashboard)?,
            vec![(b"k0".to_vec(), b"v0".to_vec()), (b"k1".to_vec(), b"v1".to_vec())]
        );
        assert_eq!(store.outbox_get(a, "key")?, Some(b"row".to_vec()));
        assert_eq!(store.checkpoint(a)?.map(|c| c.next_offset), Some(3));
        let mut batch = store.batch();
        batch.delete_aggregate(a, Namespace::Dashboard, b"k0");
        store.commit(batch)?;
        assert_eq!(store.load_aggregates(a, Namespace::Dashboard)?.len(), 1);
        assert_eq!(store.load_aggregates(a, Namespace::Finance)?.len(), 1);
        assert_eq!(store.get_aggregate(a, Namespace::Dashboard, b"k1")?, Some(b"v1".to_vec()));
        assert_eq!(store.get_aggregate(a, Namespace::Dashboard, b"k")?, None);
        assert_eq!(store.scan_aggregates(a, Namespace::Dashboard, b"k")?, vec![(b"k1".to_vec(), b"v1".to_vec())]);
        assert!(store.scan_aggregates(a, Namespace::Dashboard, b"k2")?.is_empty());
        Ok(())
    }
}
