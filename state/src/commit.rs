//! One commit = one RocksDB `WriteBatch`, written with fsync.
//!
//! A batch holds, for every partition that advanced: its new dedup entries (one run,
//! [`crate::runs`]), the aggregates it changed or expired, and its checkpoint (input
//! offset, watermark). RocksDB applies the batch atomically, so after a crash at any instant
//! a partition's state and offsets are either both before or both after the commit.

use std::sync::Arc;

use rocksdb::WriteBatch;

use crate::codec;
use crate::outbox::OutboxIndex;
use crate::parts::{self, PartCf, TAG_CHECKPOINT, TAG_OUTBOX};
use crate::runs;
use crate::store::{aggregate_key, dedup_hash, run_key};
use crate::{Checkpoint, Namespace, PartitionId, StateError, Store};

pub struct CommitBatch<'a> {
    store: &'a Store,
    batch: WriteBatch,
    /// The column families of the partitions this batch wrote to, looked up (or created)
    /// once per batch, not per record.
    cfs: Vec<Arc<PartCf>>,
    /// A partition's column family that could not be created: the batch fails as a whole
    /// when it is committed or staged.
    failed: Option<StateError>,
    /// Dedup entries, written as one run per partition when the batch is written ([`Dedups`]).
    dedups: Dedups,
}

/// A batch's dedup entries in put order: (column family index, hash of the event id, append time).
type Dedups = Vec<(usize, u128, i64)>;

/// A partition's run in a written batch: its entries go into the partition's in-memory map
/// once the write returns ([`crate::runs`]).
pub(crate) struct RunWrite {
    pub(crate) cf: Arc<PartCf>,
    pub(crate) seq: u64,
    pub(crate) entries: Vec<(u128, i64)>,
}

/// Writes `dedups` into `batch` as one run per partition, on the thread that writes the
/// batch (the commit thread, not the stream thread that built it). A partition's entries
/// keep their put order, so an id put twice keeps its later time.
fn add_runs(batch: &mut WriteBatch, cfs: &[Arc<PartCf>], mut dedups: Dedups) -> Vec<RunWrite> {
    // Stable: the put order within a partition stays.
    dedups.sort_by_key(|d| d.0);
    let mut out = Vec::new();
    let mut value = Vec::new();
    for group in dedups.chunk_by(|a, b| a.0 == b.0) {
        let cf = &cfs[group[0].0];
        let entries: Vec<(u128, i64)> = group.iter().map(|d| (d.1, d.2)).collect();
        let seq = cf.runs.reserve();
        value.clear();
        runs::encode(&entries, &mut value);
        batch.put_cf(&**cf, run_key(seq), &value);
        out.push(RunWrite { cf: Arc::clone(cf), seq, entries });
    }
    out
}

impl<'a> CommitBatch<'a> {
    pub(crate) fn new(store: &'a Store) -> Self {
        CommitBatch { store, batch: WriteBatch::default(), cfs: Vec::new(), failed: None, dedups: Vec::new() }
    }

    /// The index in `cfs` of partition `p`'s column family, created on its first write.
    /// Callers borrow `self.cfs[i]` beside `self.batch`: no reference count per record.
    fn cf(&mut self, p: PartitionId) -> Option<usize> {
        if let Some(i) = self.cfs.iter().position(|c| c.p == p) {
            return Some(i);
        }
        match self.store.part_or_create(p) {
            Ok(cf) => {
                self.cfs.push(cf);
                Some(self.cfs.len() - 1)
            }
            Err(e) => {
                self.failed.get_or_insert(e);
                None
            }
        }
    }

    pub fn put_dedup(&mut self, p: PartitionId, event_id: &str, append_ms: i64) {
        if let Some(i) = self.cf(p) {
            self.dedups.push((i, dedup_hash(event_id), append_ms));
        }
    }

    /// `value` is already encoded with [`codec::encode`].
    pub fn put_aggregate(&mut self, p: PartitionId, ns: Namespace, key: &[u8], value: &[u8]) {
        if let Some(i) = self.cf(p) {
            self.batch.put_cf(&*self.cfs[i], aggregate_key(ns, key), value);
        }
    }

    pub fn delete_aggregate(&mut self, p: PartitionId, ns: Namespace, key: &[u8]) {
        if let Some(i) = self.cf(p) {
            self.batch.delete_cf(&*self.cfs[i], aggregate_key(ns, key));
        }
    }

    /// A new outbox row: written with the state and offsets that produced the action.
    /// An outbox row and its index entries (see [`crate::outbox`]).
    pub fn put_outbox(&mut self, p: PartitionId, key: &str, row: &[u8], index: OutboxIndex) {
        if let Some(i) = self.cf(p) {
            let cf = &*self.cfs[i];
            self.batch.put_cf(cf, parts::tagged(TAG_OUTBOX, key.as_bytes()), row);
            Store::index_outbox(&mut self.batch, cf, key, index);
        }
    }

    pub fn put_checkpoint(&mut self, p: PartitionId, c: &Checkpoint) -> Result<(), StateError> {
        let value = codec::encode(c)?;
        match self.cf(p) {
            Some(i) => {
                self.batch.put_cf(&*self.cfs[i], [TAG_CHECKPOINT], value);
                Ok(())
            }
            // The column family could not be created: the error the batch kept.
            None => Err(self.failed.take().unwrap_or_else(|| StateError::Decode {
                what: "checkpoint",
                detail: format!("no column family for {p}"),
            })),
        }
    }

    /// A named bookkeeping record (read back with [`Store::record`]); `value` is already
    /// encoded with [`codec::encode`].
    pub fn put_record(&mut self, name: &str, value: &[u8]) {
        self.batch.put_cf(self.store.meta(), Store::record_key(name), value);
    }

    pub fn is_empty(&self) -> bool {
        self.batch.is_empty() && self.dedups.is_empty()
    }

    pub fn len(&self) -> usize {
        self.batch.len() + self.dedups.len()
    }

    /// Makes the whole batch durable at once.
    pub fn commit(mut self) -> Result<(), StateError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        let runs = add_runs(&mut self.batch, &self.cfs, self.dedups);
        self.store.write_commit(self.batch, runs)
    }

    /// Detaches the batch from its borrow of the store, to commit it on another thread
    /// with [`Store::commit_staged`].
    pub fn stage(self) -> StagedBatch {
        StagedBatch { batch: self.batch, failed: self.failed, cfs: self.cfs, dedups: self.dedups }
    }
}

/// A finished [`CommitBatch`] that owns its writes and may cross threads.
pub struct StagedBatch {
    batch: WriteBatch,
    failed: Option<StateError>,
    cfs: Vec<Arc<PartCf>>,
    dedups: Dedups,
}

impl StagedBatch {
    pub fn is_empty(&self) -> bool {
        self.batch.is_empty() && self.dedups.is_empty() && self.failed.is_none()
    }

    /// The batch to write with its dedup runs (built on the calling thread).
    pub(crate) fn into_inner(self) -> Result<(WriteBatch, Vec<RunWrite>), StateError> {
        let StagedBatch { mut batch, failed, cfs, dedups } = self;
        match failed {
            Some(e) => Err(e),
            None => {
                let runs = add_runs(&mut batch, &cfs, dedups);
                Ok((batch, runs))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{Checkpoint, Namespace, PartitionId, Store, StoreOptions};

    fn open(dir: &std::path::Path) -> Store {
        Store::open(dir, &StoreOptions { owner: "test".into(), ..StoreOptions::default() }).expect("open")
    }

    #[test]
    fn a_named_record_commits_with_the_batch_and_reads_back_after_reopen() {
        let dir = tempfile::tempdir().expect("tmp");
        {
            let store = open(dir.path());
            assert_eq!(store.record("slices").expect("read"), None);
            let mut b = store.batch();
            b.put_record("slices", b"plan");
            assert_eq!(store.record("slices").expect("read"), None, "invisible before the commit");
            b.commit().expect("commit");
        }
        assert_eq!(open(dir.path()).record("slices").expect("read"), Some(b"plan".to_vec()));
    }

    #[test]
    fn a_staged_batch_commits_from_another_thread_and_is_invisible_until_then() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = std::sync::Arc::new(open(dir.path()));
        let p = PartitionId { source: 0, partition: 1 };
        let mut b = store.batch();
        b.put_dedup(p, "e-1", 7);
        let staged = b.stage();
        assert_eq!(store.dedup_lookup(p, &["e-1"]).expect("lookup"), vec![None]);
        let writer = std::sync::Arc::clone(&store);
        std::thread::spawn(move || writer.commit_staged(staged)).join().expect("thread").expect("commit");
        assert_eq!(store.dedup_lookup(p, &["e-1"]).expect("lookup"), vec![Some(7)]);
    }

    #[test]
    fn dedup_entries_of_two_partitions_in_one_batch_keep_an_id_put_twice_at_its_later_time() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = open(dir.path());
        let (a, b) = (PartitionId::orders(0), PartitionId::orders(1));
        let ids: Vec<String> = (0..500).map(|i| format!("e-{i}")).collect();
        let mut batch = store.batch();
        batch.put_dedup(a, "twice", 1);
        for (k, id) in ids.iter().enumerate() {
            batch.put_dedup(if k % 2 == 0 { a } else { b }, id, k as i64);
        }
        batch.put_dedup(a, "twice", 2);
        store.commit_staged(batch.stage()).expect("commit");
        assert_eq!(store.dedup_lookup(a, &["twice"]).expect("lookup"), vec![Some(2)]);
        let (on_a, on_b) = (store.dedup_lookup(a, &ids).expect("a"), store.dedup_lookup(b, &ids).expect("b"));
        for k in 0..ids.len() {
            let (mine, other) = if k % 2 == 0 { (&on_a, &on_b) } else { (&on_b, &on_a) };
            assert_eq!((mine[k], other[k]), (Some(k as i64), None), "{}", ids[k]);
        }
    }

    #[test]
    fn a_dedup_lookup_answers_in_the_order_asked_with_repeats_and_misses_in_place() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = open(dir.path());
        let p = PartitionId::orders(3);
        // Half in table files (compacted), half in the memtable.
        for half in [0, 1] {
            let mut batch = store.batch();
            for k in (0..30_000).step_by(3).filter(|k| k % 2 == half) {
                batch.put_dedup(p, &format!("e-{k}"), 10_000 + k);
            }
            batch.commit().expect("commit");
            if half == 0 {
                store.compact_dedup();
            }
        }
        // Asked in a scrambled order, some twice, most never stored.
        let asked: Vec<String> = (0..6_000).map(|j| format!("e-{}", (j * 7919) % 30_000)).collect();
        let found = store.dedup_lookup(p, &asked).expect("lookup");
        for (id, got) in asked.iter().zip(&found) {
            let k: i64 = id[2..].parse().expect("number");
            assert_eq!(*got, (k % 3 == 0).then_some(10_000 + k), "{id}");
        }
    }

    #[test]
    fn state_and_checkpoint_become_visible_together_and_survive_reopen() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = PartitionId { source: 0, partition: 2 };
        {
            let store = open(dir.path());
            let mut b = store.batch();
            b.put_dedup(p, "e-1", 1_000);
            b.put_aggregate(p, Namespace::Dashboard, b"k", b"v");
            b.put_checkpoint(
                p,
                &Checkpoint { next_offset: 10, max_event_ms: Some(5), max_append_ms: 1_000, records: 10 },
            )
            .expect("encode");
            assert_eq!(store.checkpoint(p).expect("read"), None, "nothing visible before commit");
            b.commit().expect("commit");
        }
        let store = open(dir.path());
        assert_eq!(store.checkpoint(p).expect("read").map(|c| c.next_offset), Some(10));
        assert_eq!(store.dedup_lookup(p, &["e-1", "e-2"]).expect("lookup"), vec![Some(1_000), None]);
        assert_eq!(store.load_aggregates(p, Namespace::Dashboard).expect("load"), vec![(b"k".to_vec(), b"v".to_vec())]);
    }

    #[test]
    fn partitions_do_not_see_each_others_state() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = open(dir.path());
        let (a, b) = (PartitionId { source: 0, partition: 0 }, PartitionId { source: 0, partition: 1 });
        let mut batch = store.batch();
        batch.put_dedup(a, "e-1", 1);
        batch.put_aggregate(a, Namespace::Dashboard, b"k", b"v");
        batch.commit().expect("commit");
        assert_eq!(store.dedup_lookup(b, &["e-1"]).expect("lookup"), vec![None]);
        assert!(store.load_aggregates(b, Namespace::Dashboard).expect("load").is_empty());
        store.drop_partition(a).expect("drop");
        assert_eq!(store.dedup_lookup(a, &["e-1"]).expect("lookup"), vec![None]);
    }

    #[test]
    fn a_store_refuses_a_different_owner() {
        let dir = tempfile::tempdir().expect("tmp");
        drop(open(dir.path()));
        let other = Store::open(dir.path(), &StoreOptions { owner: "other".into(), ..StoreOptions::default() });
        assert!(matches!(other, Err(crate::StateError::Owner { .. })));
    }

    #[test]
    fn compaction_drops_dedup_entries_older_than_the_horizon() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = open(dir.path());
        let p = PartitionId { source: 0, partition: 0 };
        let mut b = store.batch();
        b.put_dedup(p, "old", 100);
        b.put_dedup(p, "new", 900);
        b.commit().expect("commit");
        store.set_dedup_horizon(p, 500);
        store.compact_dedup();
        assert_eq!(store.dedup_lookup(p, &["old", "new"]).expect("lookup"), vec![None, Some(900)]);
    }
}
