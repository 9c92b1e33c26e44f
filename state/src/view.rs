//! What the engine needs from a state store, as traits: the reads it makes ([`StateView`]),
//! the writes it stages into one commit ([`StateWrite`]), and how a staged commit becomes
//! visible ([`StateStore`]).
//!
//! The RocksDB [`Store`] implements them for the runtime; [`crate::memory::MemStore`]
//! implements them in memory for the topology test driver and unit tests. Engine tasks are
//! generic over these traits (monomorphised, so the stream's hot path calls RocksDB
//! directly). The reads stay coarse on purpose: checkpoints and aggregates once on restore,
//! dedup lookups batched per finish, outbox lookups only when a rule fires, a SKU's rows
//! once, on its first touch.

use std::sync::Arc;

use crate::{Checkpoint, CommitBatch, KeyValue, Namespace, OutboxIndex, PartitionId, StateError, Store};

/// The reads engine tasks make.
pub trait StateView {
    /// The last committed checkpoint of a partition, `None` if it never committed here.
    fn checkpoint(&self, p: PartitionId) -> Result<Option<Checkpoint>, StateError>;
    /// Every aggregate of one namespace in one partition, in key order.
    fn load_aggregates(&self, p: PartitionId, ns: Namespace) -> Result<Vec<KeyValue>, StateError>;
    /// One aggregate by its exact key (a SKU's state, read on the SKU's first touch).
    fn get_aggregate(&self, p: PartitionId, ns: Namespace, key: &[u8]) -> Result<Option<Vec<u8>>, StateError>;
    /// The aggregates of one namespace whose key starts with `prefix`, in key order (a SKU's
    /// line rows, read on the SKU's first touch). Keys are returned whole.
    fn scan_aggregates(&self, p: PartitionId, ns: Namespace, prefix: &[u8]) -> Result<Vec<KeyValue>, StateError>;
    /// The append time each event id was first seen at, if stored; one call per finish.
    fn dedup_lookup(&self, p: PartitionId, ids: &[&str]) -> Result<Vec<Option<i64>>, StateError>;
    /// One encoded outbox row, if the idempotency key was ever produced in this partition.
    fn outbox_get(&self, p: PartitionId, key: &str) -> Result<Option<Vec<u8>>, StateError>;
}

/// The writes engine tasks stage into one atomic commit. Values are already encoded with
/// [`crate::codec::encode`].
pub trait StateWrite {
    fn put_dedup(&mut self, p: PartitionId, event_id: &str, append_ms: i64);
    fn put_aggregate(&mut self, p: PartitionId, ns: Namespace, key: &[u8], value: &[u8]);
    fn delete_aggregate(&mut self, p: PartitionId, ns: Namespace, key: &[u8]);
    fn put_outbox(&mut self, p: PartitionId, key: &str, row: &[u8], index: OutboxIndex);
    fn put_checkpoint(&mut self, p: PartitionId, c: &Checkpoint) -> Result<(), StateError>;
}

/// A store whose staged writes become visible together, at [`StateStore::commit`].
pub trait StateStore: StateView {
    type Batch<'a>: StateWrite
    where
        Self: 'a;
    fn batch(&self) -> Self::Batch<'_>;
    fn commit(&self, batch: Self::Batch<'_>) -> Result<(), StateError>;
}

impl StateView for Store {
    fn checkpoint(&self, p: PartitionId) -> Result<Option<Checkpoint>, StateError> {
        Store::checkpoint(self, p)
    }

    fn load_aggregates(&self, p: PartitionId, ns: Namespace) -> Result<Vec<KeyValue>, StateError> {
        Store::load_aggregates(self, p, ns)
    }

    fn get_aggregate(&self, p: PartitionId, ns: Namespace, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        Store::get_aggregate(self, p, ns, key)
    }

    fn scan_aggregates(&self, p: PartitionId, ns: Namespace, prefix: &[u8]) -> Result<Vec<KeyValue>, StateError> {
        Store::scan_aggregates(self, p, ns, prefix)
    }

    fn dedup_lookup(&self, p: PartitionId, ids: &[&str]) -> Result<Vec<Option<i64>>, StateError> {
        Store::dedup_lookup(self, p, ids)
    }

    fn outbox_get(&self, p: PartitionId, key: &str) -> Result<Option<Vec<u8>>, StateError> {
        Store::outbox_get(self, p, key)
    }
}

impl StateStore for Store {
    type Batch<'a> = CommitBatch<'a>;

    fn batch(&self) -> CommitBatch<'_> {
        Store::batch(self)
    }

    fn commit(&self, batch: CommitBatch<'_>) -> Result<(), StateError> {
        batch.commit()
    }
}

impl StateWrite for CommitBatch<'_> {
    fn put_dedup(&mut self, p: PartitionId, event_id: &str, append_ms: i64) {
        CommitBatch::put_dedup(self, p, event_id, append_ms);
    }

    fn put_aggregate(&mut self, p: PartitionId, ns: Namespace, key: &[u8], value: &[u8]) {
        CommitBatch::put_aggregate(self, p, ns, key, value);
    }

    fn delete_aggregate(&mut self, p: PartitionId, ns: Namespace, key: &[u8]) {
        CommitBatch::delete_aggregate(self, p, ns, key);
    }

    fn put_outbox(&mut self, p: PartitionId, key: &str, row: &[u8], index: OutboxIndex) {
        CommitBatch::put_outbox(self, p, key, row, index);
    }

    fn put_checkpoint(&mut self, p: PartitionId, c: &Checkpoint) -> Result<(), StateError> {
        CommitBatch::put_checkpoint(self, p, c)
    }
}

/// The stream shares its store behind an `Arc`.
impl<T: StateView + ?Sized> StateView for Arc<T> {
    fn checkpoint(&self, p: PartitionId) -> Result<Option<Checkpoint>, StateError> {
        (**self).checkpoint(p)
    }

    fn load_aggregates(&self, p: PartitionId, ns: Namespace) -> Result<Vec<KeyValue>, StateError> {
        (**self).load_aggregates(p, ns)
    }

    fn get_aggregate(&self, p: PartitionId, ns: Namespace, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        (**self).get_aggregate(p, ns, key)
    }

    fn scan_aggregates(&self, p: PartitionId, ns: Namespace, prefix: &[u8]) -> Result<Vec<KeyValue>, StateError> {
        (**self).scan_aggregates(p, ns, prefix)
    }

    fn dedup_lookup(&self, p: PartitionId, ids: &[&str]) -> Result<Vec<Option<i64>>, StateError> {
        (**self).dedup_lookup(p, ids)
    }

    fn outbox_get(&self, p: PartitionId, key: &str) -> Result<Option<Vec<u8>>, StateError> {
        (**self).outbox_get(p, key)
    }
}
