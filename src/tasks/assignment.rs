//! What happens, process-wide, when the group moves partitions: the one place the Kafka
//! rebalance callback calls (it only notifies), the counterpart of the stream thread's
//! handling in `stream::rebalance`.
//!
//! On assignment, before librdkafka starts fetching, [`Assignment::on_assigned`] lets the
//! standby tasks of the new partitions go (they commit first), positions every partition at
//! its own RocksDB checkpoint (the group's committed offsets are written for lag tools only),
//! starts the audit read for the SKU partitions among them (on a thread of its own, while the
//! stream thread restores the tasks: their rows are dispatched only once it ended,
//! [`Assignment::recalled`]) and names those whose newest
//! snapshot is ahead of the store: those are assigned paused and imported off the callback
//! (`tasks::imports`), so the partitions already owned keep running. On revocation the
//! partitions are queued for the stream thread, which commits its work on them before they
//! are released: the next owner starts exactly where this one stopped.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rdkafka::{Offset, TopicPartitionList};
use tidemark_state::{PartitionId, Store};
use tracing::{error, warn};

use super::lifecycle::{Lifecycle, State};
use super::sources::Sources;

/// Assignment changes for the stream thread to act on after `poll` returns.
#[derive(Debug, Clone)]
pub enum AssignmentEvent {
    /// Positioned at their checkpoints: restore and run.
    Assigned(Vec<PartitionId>),
    /// Assigned paused: a snapshot ahead of the local state is to be imported first.
    Importing(Vec<PartitionId>),
    /// The group takes these partitions away. The consumer still holds them until the
    /// stream thread has committed its work on them and released them.
    Revoked(Vec<PartitionId>, TopicPartitionList),
}

/// The process-wide side of partitions moving, shared by the consumer's callback and the
/// stream thread.
pub struct Assignment {
    pub store: Arc<Store>,
    /// Source topics; the index is the `PartitionId::source`.
    pub sources: Sources,
    /// Restores a partition from its newest snapshot first, when that is ahead of the store.
    pub snapshots: Option<Arc<crate::snapshot::Restorer>>,
    /// With standbys on: an assigned partition's standby task commits and lets it go before
    /// its checkpoint is read here (see [`crate::standby`]).
    pub standbys: Option<Arc<crate::standby::Standbys>>,
    /// The audit read for assigned SKU partitions, after their state is in place and before
    /// the stream thread lets the dispatcher send for them (see [`crate::actions::Recall`]).
    pub recall: Option<Arc<crate::actions::Recall>>,
    /// The states of this process's tasks, shared with the stream and standby threads.
    pub lifecycle: Arc<Lifecycle>,
    events: Mutex<Vec<AssignmentEvent>>,
    /// Audit reads under way for SKU partitions just assigned ([`Assignment::recalled`]).
    recalls: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// Set once the stream thread stops handling events (the consumer is closing): a
    /// revocation is then released at once in the callback.
    closing: AtomicBool,
}

impl Assignment {
    pub fn new(
        store: Arc<Store>,
        sources: Sources,
        snapshots: Option<Arc<crate::snapshot::Restorer>>,
        standbys: Option<Arc<crate::standby::Standbys>>,
        recall: Option<Arc<crate::actions::Recall>>,
        lifecycle: Arc<Lifecycle>,
    ) -> Self {
        Assignment {
            store,
            sources,
            snapshots,
            standbys,
            recall,
            lifecycle,
            events: Mutex::default(),
            recalls: Mutex::default(),
            closing: AtomicBool::new(false),
        }
    }

    pub fn ids(&self, tpl: &TopicPartitionList) -> Vec<PartitionId> {
        tpl.elements().iter().filter_map(|e| self.sources.id(e.topic(), e.partition())).collect()
    }

    /// The list of `ids`' topic partitions.
    pub fn list_of(&self, ids: &[PartitionId]) -> TopicPartitionList {
        let mut tpl = TopicPartitionList::new();
        for id in ids {
            tpl.add_partition(self.sources.topic_of(*id), id.partition);
        }
        tpl
    }

    /// Partitions just assigned, before the consumer applies `tpl`: their standby tasks let
    /// them go, then each is positioned at its checkpoint ([`Assignment::position_at_checkpoints`]).
    /// Returns those to be imported first (assigned paused).
    pub fn on_assigned(&self, tpl: &mut TopicPartitionList) -> Vec<PartitionId> {
        if let Some(standbys) = &self.standbys {
            standbys.release(&self.ids(tpl));
        }
        self.position_at_checkpoints(tpl)
    }

    /// Sets every partition's fetch position to its local checkpoint (the log start without
    /// one) and reads the audit topic for the SKU partitions among them. Returns those whose
    /// newest snapshot is ahead of the local state (with snapshots on): they are imported off
    /// the callback, assigned paused until then at the snapshot's offset (the stream thread
    /// moves them to the imported checkpoint, at or after it); their audit read follows
    /// their import.
    pub fn position_at_checkpoints(&self, tpl: &mut TopicPartitionList) -> Vec<PartitionId> {
        let elements: Vec<(String, i32)> =
            tpl.elements().iter().map(|e| (e.topic().to_string(), e.partition())).collect();
        // Before any checkpoint is read: the local state of these is not deleted now.
        self.lifecycle.assigning(elements.iter().filter_map(|(t, p)| self.sources.id(t, *p)));
        let mut sku_resumed: Vec<(i32, Option<i64>)> = Vec::new();
        let mut importing = Vec::new();
        for (topic, partition) in elements {
            let Some(id) = self.sources.id(&topic, partition) else { continue };
            let snapshot_at = self.snapshots.as_ref().and_then(|s| s.ahead_at(&self.store, id));
            if snapshot_at.is_some() {
                self.lifecycle.note(id, State::Importing);
                importing.push(id);
            }
            let checkpoint = self.store.checkpoint(id);
            // An imported partition's audit read follows its import.
            if id.source == PartitionId::SKU_REPARTITION && self.recall.is_some() && snapshot_at.is_none() {
                self.lifecycle.note(id, State::Recalling);
                if let Ok(c) = &checkpoint {
                    sku_resumed.push((partition, crate::actions::recall_since(c.as_ref())));
                }
            }
            // An imported partition waits where its import will resume, never at a logical
            // offset: librdkafka resolves one with a lookup that, answered after the seek
            // that follows the import, starts over and overrides the seek (the partition is
            // then read from its log start and every record dropped below the checkpoint:
            // seconds per 100k records, seen as a SKU partition's actions ~10 s late).
            let offset = match (snapshot_at, checkpoint) {
                (Some(next), _) => Offset::Offset(next),
                (None, Ok(Some(c))) => Offset::Offset(c.next_offset),
                (None, Ok(None)) => Offset::Beginning,
                (None, Err(e)) => {
                    // Without a readable checkpoint the partition cannot be processed safely;
                    // the stream thread sees the task fail to restore and stops the process.
                    error!(partition = %id, error = %e, "cannot read checkpoint");
                    Offset::Beginning
                }
            };
            if let Err(e) = tpl.set_partition_offset(&topic, partition, offset) {
                warn!(partition = %id, error = %e, "cannot set start offset");
            }
        }
        if let Some(recall) = self.recall.as_ref().filter(|_| !sku_resumed.is_empty()) {
            // Off the callback: the read (a consumer of its own, ~20–200 ms) goes on while
            // the stream thread restores the tasks, which takes as long.
            let reading = Arc::clone(recall);
            let resumed = sku_resumed.clone();
            match std::thread::Builder::new().name("tidemark-recall".into()).spawn(move || {
                reading.before_dispatch(&resumed);
            }) {
                Ok(handle) => {
                    if let Ok(mut r) = self.recalls.lock() {
                        r.push(handle);
                    }
                }
                Err(e) => {
                    warn!(error = %e, "cannot start a thread for the audit read; reading it here");
                    recall.before_dispatch(&sku_resumed);
                }
            }
        }
        importing
    }

    /// Waits for the audit reads started for assigned SKU partitions: the stream thread
    /// calls it before the dispatcher may send for one of them, so an action completed
    /// elsewhere is known as such before its row can be dispatched here.
    pub fn recalled(&self) {
        let under_way = self.recalls.lock().map(|mut r| std::mem::take(&mut *r)).unwrap_or_default();
        for handle in under_way {
            if handle.join().is_err() {
                error!("the audit read before dispatching panicked: completed actions may be sent again");
            }
        }
    }

    /// Queues what the stream thread does with a new assignment.
    pub fn assigned(&self, ids: Vec<PartitionId>, importing: Vec<PartitionId>) {
        let ready: Vec<PartitionId> = ids.into_iter().filter(|id| !importing.contains(id)).collect();
        self.push(AssignmentEvent::Assigned(ready));
        if !importing.is_empty() {
            self.push(AssignmentEvent::Importing(importing));
        }
    }

    /// Queues a revocation for the stream thread; `false` when the stream thread no longer
    /// handles events (the caller releases the partitions at once).
    pub fn revoked(&self, ids: Vec<PartitionId>, tpl: &TopicPartitionList) -> bool {
        if self.closing.load(Ordering::SeqCst) {
            return false;
        }
        self.push(AssignmentEvent::Revoked(ids, tpl.clone()));
        true
    }

    fn push(&self, event: AssignmentEvent) {
        if let Ok(mut q) = self.events.lock() {
            q.push(event);
        }
    }

    /// Whether the callback queued an event the stream thread has not taken yet (records it
    /// polled before the event are handed to their tasks first).
    pub fn has_events(&self) -> bool {
        self.events.lock().map(|q| !q.is_empty()).unwrap_or(true)
    }

    /// Drained by the stream thread after each poll.
    pub fn take_events(&self) -> Vec<AssignmentEvent> {
        self.events.lock().map(|mut q| std::mem::take(&mut *q)).unwrap_or_default()
    }

    /// The stream thread stops handling events: from now on a revocation is released in the
    /// callback. Returns the revocations still queued, for the caller to release (a consumer
    /// that is closing waits for them).
    pub fn close(&self) -> Vec<TopicPartitionList> {
        self.closing.store(true, Ordering::SeqCst);
        self.take_events()
            .into_iter()
            .filter_map(|e| match e {
                AssignmentEvent::Revoked(_, tpl) => Some(tpl),
                _ => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::export::Exporter;
    use crate::snapshot::{Bucket, Restorer, SnapshotConfig};
    use tidemark_state::{Checkpoint, StoreOptions};

    fn store(dir: &std::path::Path) -> Store {
        Store::open(dir, &StoreOptions { owner: "t/g".into(), ..StoreOptions::default() }).expect("store")
    }

    fn checkpointed(store: &Store, id: PartitionId, next_offset: i64) {
        let mut batch = store.batch();
        batch.put_checkpoint(id, &Checkpoint { next_offset, ..Checkpoint::default() }).expect("checkpoint");
        store.commit_staged(batch.stage()).expect("commit");
    }

    #[test]
    fn a_partition_to_import_is_assigned_at_its_snapshots_offset_and_never_at_the_log_start() {
        let (snapshots, old_owner, here) =
            (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let topics = ["shop.orders", "inventory", "sku", "combine"].map(String::from).to_vec();
        let cfg = SnapshotConfig {
            bucket: Arc::new(Bucket::open(&snapshots.path().display().to_string()).unwrap()),
            interval: std::time::Duration::from_secs(60),
            keep: 2,
            topology: "t".into(),
            group: "g".into(),
            topics: Sources::from_topics(topics.clone()),
        };
        let (moved, local, fresh) = (PartitionId::orders(2), PartitionId::orders(1), PartitionId::orders(0));
        let old = store(old_owner.path());
        checkpointed(&old, moved, 4_200);
        let exporter = Exporter { cfg: cfg.clone(), taken_by: "tm-0".into() };
        assert!(exporter.export_one(&old, &old.consistent_point(), moved, None).unwrap().is_some());
        let store = Arc::new(store(here.path()));
        checkpointed(&store, local, 17);

        let assignment = Assignment::new(
            Arc::clone(&store),
            Sources::from_topics(topics),
            Some(Arc::new(Restorer::new(&cfg))),
            None,
            None,
            Arc::new(Lifecycle::default()),
        );
        let mut tpl = TopicPartitionList::new();
        for p in [0, 1, 2] {
            tpl.add_partition("shop.orders", p);
        }
        let importing = assignment.position_at_checkpoints(&mut tpl);

        assert_eq!(importing, vec![moved]);
        let at = |p: i32| tpl.find_partition("shop.orders", p).map(|e| e.offset());
        assert_eq!(at(moved.partition), Some(Offset::Offset(4_200)), "where the import resumes");
        assert_eq!(at(local.partition), Some(Offset::Offset(17)), "its local checkpoint");
        assert_eq!(at(fresh.partition), Some(Offset::Beginning), "no state anywhere: the log start");
        assert_eq!(assignment.lifecycle.state(moved), State::Importing);
    }
}
