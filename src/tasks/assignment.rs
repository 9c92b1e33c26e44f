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
    /// the callback, assigned paused until then; their audit read follows their import.
    pub fn position_at_checkpoints(&self, tpl: &mut TopicPartitionList) -> Vec<PartitionId> {
        let elements: Vec<(String, i32)> =
            tpl.elements().iter().map(|e| (e.topic().to_string(), e.partition())).collect();
        // Before any checkpoint is read: the local state of these is not deleted now.
        self.lifecycle.assigning(elements.iter().filter_map(|(t, p)| self.sources.id(t, *p)));
        let mut sku_resumed: Vec<(i32, Option<i64>)> = Vec::new();
        let mut importing = Vec::new();
        for (topic, partition) in elements {
            let Some(id) = self.sources.id(&topic, partition) else { continue };
            if self.snapshots.as_ref().is_some_and(|s| s.is_ahead(&self.store, id)) {
                self.lifecycle.note(id, State::Importing);
                importing.push(id);
            }
            let checkpoint = self.store.checkpoint(id);
            let imported_later = importing.last() == Some(&id);
            if id.source == PartitionId::SKU_REPARTITION && self.recall.is_some() && !imported_later {
                self.lifecycle.note(id, State::Recalling);
                if let Ok(c) = &checkpoint {
                    sku_resumed.push((partition, crate::actions::recall_since(c.as_ref())));
                }
            }
            let offset = match checkpoint {
                Ok(Some(c)) => Offset::Offset(c.next_offset),
                Ok(None) => Offset::Beginning,
                Err(e) => {
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
