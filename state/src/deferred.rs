//! [`DeferredWrites`]: state writes recorded now and applied later, in the same order, to
//! another [`StateWrite`]. Tasks that finish on several threads each stage into their own, and
//! the commit applies them one after the other, in partition order, into the one `WriteBatch`
//! that makes state, outbox rows and offsets durable together.
//!
//! Keys and values go into two buffers that keep their capacity across [`DeferredWrites::clear`]:
//! no allocation per write once they have grown.

use std::ops::Range;

use crate::{Checkpoint, Namespace, OutboxIndex, PartitionId, StateError, StateWrite};

enum Op {
    Dedup { p: PartitionId, event_id: Range<usize>, append_ms: i64 },
    PutAggregate { p: PartitionId, ns: Namespace, key: Range<usize>, value: Range<usize> },
    DeleteAggregate { p: PartitionId, ns: Namespace, key: Range<usize> },
    Outbox { p: PartitionId, key: Range<usize>, row: Range<usize>, index: OutboxIndex },
    Checkpoint { p: PartitionId, c: Checkpoint },
}

/// Writes kept in order until [`DeferredWrites::apply_to`].
#[derive(Default)]
pub struct DeferredWrites {
    ops: Vec<Op>,
    /// Event ids and outbox keys.
    text: String,
    /// Aggregate keys and values, outbox rows.
    bytes: Vec<u8>,
}

impl DeferredWrites {
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Forgets every write, keeping the buffers' capacity.
    pub fn clear(&mut self) {
        self.ops.clear();
        self.text.clear();
        self.bytes.clear();
    }

    /// Applies every write, in the order it was made, to `w`.
    pub fn apply_to<W: StateWrite + ?Sized>(&self, w: &mut W) -> Result<(), StateError> {
        for op in &self.ops {
            match op {
                Op::Dedup { p, event_id, append_ms } => w.put_dedup(*p, &self.text[event_id.clone()], *append_ms),
                Op::PutAggregate { p, ns, key, value } => {
                    w.put_aggregate(*p, *ns, &self.bytes[key.clone()], &self.bytes[value.clone()]);
                }
                Op::DeleteAggregate { p, ns, key } => w.delete_aggregate(*p, *ns, &self.bytes[key.clone()]),
                Op::Outbox { p, key, row, index } => {
                    w.put_outbox(*p, &self.text[key.clone()], &self.bytes[row.clone()], *index);
                }
                Op::Checkpoint { p, c } => w.put_checkpoint(*p, c)?,
            }
        }
        Ok(())
    }

    fn text(&mut self, s: &str) -> Range<usize> {
        let start = self.text.len();
        self.text.push_str(s);
        start..self.text.len()
    }

    fn bytes(&mut self, b: &[u8]) -> Range<usize> {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(b);
        start..self.bytes.len()
    }
}

impl StateWrite for DeferredWrites {
    fn put_dedup(&mut self, p: PartitionId, event_id: &str, append_ms: i64) {
        let event_id = self.text(event_id);
        self.ops.push(Op::Dedup { p, event_id, append_ms });
    }

    fn put_aggregate(&mut self, p: PartitionId, ns: Namespace, key: &[u8], value: &[u8]) {
        let (key, value) = (self.bytes(key), self.bytes(value));
        self.ops.push(Op::PutAggregate { p, ns, key, value });
    }

    fn delete_aggregate(&mut self, p: PartitionId, ns: Namespace, key: &[u8]) {
        let key = self.bytes(key);
        self.ops.push(Op::DeleteAggregate { p, ns, key });
    }

    fn put_outbox(&mut self, p: PartitionId, key: &str, row: &[u8], index: OutboxIndex) {
        let (key, row) = (self.text(key), self.bytes(row));
        self.ops.push(Op::Outbox { p, key, row, index });
    }

    fn put_checkpoint(&mut self, p: PartitionId, c: &Checkpoint) -> Result<(), StateError> {
        self.ops.push(Op::Checkpoint { p, c: *c });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::DeferredWrites;
    use crate::{Checkpoint, MemStore, Namespace, OutboxIndex, PartitionId, StateStore, StateView, StateWrite};

    /// Every kind of write, as a task's finish makes them.
    fn stage<W: StateWrite>(w: &mut W, p: PartitionId) {
        w.put_dedup(p, "e-1", 10);
        w.put_aggregate(p, Namespace::Dashboard, b"k1", b"v1");
        w.put_aggregate(p, Namespace::Dashboard, b"k2", b"v2");
        w.delete_aggregate(p, Namespace::Dashboard, b"k1");
        w.put_outbox(p, "rule:v1:SKU-1:7", b"row", OutboxIndex::Pending);
        w.put_checkpoint(p, &Checkpoint { next_offset: 42, ..Checkpoint::default() }).expect("checkpoint");
    }

    /// A partition's checkpoint, dashboard aggregates and two dedup lookups.
    type Contents = (Option<Checkpoint>, Vec<crate::KeyValue>, Vec<Option<i64>>);

    fn contents(s: &MemStore, p: PartitionId) -> Contents {
        let aggs = s.load_aggregates(p, Namespace::Dashboard).expect("aggregates");
        (s.checkpoint(p).expect("checkpoint"), aggs, s.dedup_lookup(p, &["e-1", "e-2"]).expect("dedup"))
    }

    #[test]
    fn writes_applied_later_leave_the_store_as_the_same_writes_made_at_once() {
        let p = PartitionId::orders(3);
        let direct = MemStore::new();
        let mut batch = direct.batch();
        stage(&mut batch, p);
        direct.commit(batch).expect("commit");

        let deferred_store = MemStore::new();
        let mut deferred = DeferredWrites::default();
        stage(&mut deferred, p);
        assert_eq!(deferred.len(), 6);
        let mut batch = deferred_store.batch();
        deferred.apply_to(&mut batch).expect("apply");
        deferred_store.commit(batch).expect("commit");

        assert_eq!(contents(&deferred_store, p), contents(&direct, p));
        assert_eq!(contents(&direct, p).1, vec![(b"k2".to_vec(), b"v2".to_vec())], "the delete came after the put");
        assert_eq!(deferred_store.outbox_all(), direct.outbox_all(), "the same outbox row and index");
        assert_eq!(direct.outbox_all().len(), 1);
    }

    #[test]
    fn a_cleared_set_of_writes_applies_nothing() {
        let mut deferred = DeferredWrites::default();
        stage(&mut deferred, PartitionId::orders(0));
        deferred.clear();
        assert!(deferred.is_empty());
        let store = MemStore::new();
        let mut batch = store.batch();
        deferred.apply_to(&mut batch).expect("apply");
        store.commit(batch).expect("commit");
        assert_eq!(store.checkpoint(PartitionId::orders(0)).expect("checkpoint"), None);
    }
}
