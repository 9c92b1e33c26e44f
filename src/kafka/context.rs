//! The consumer context: positions every newly assigned partition at its own checkpoint.
//!
//! The group's committed offsets are written for lag tools only. What a partition has
//! processed is what its RocksDB checkpoint says, so on assignment the context overrides the
//! fetch position with `checkpoint.next_offset` (or the log start when the partition has no
//! state here), before librdkafka starts fetching. With snapshots on, a partition whose
//! newest snapshot is ahead of the store is assigned paused and imported off the callback
//! (`tasks::imports`), so the partitions already owned keep running meanwhile.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::statistics::Statistics;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{Offset, TopicPartitionList};
use tidemark_state::{PartitionId, Store};
use tracing::{error, info, warn};

use crate::engine::Stats;
use crate::kafka::log_ends::LogEnds;
use crate::telemetry::events;

/// Assignment changes for the stream thread to act on after `poll` returns.
#[derive(Debug, Clone)]
pub enum AssignmentEvent {
    /// Positioned at their checkpoints: restore and run.
    Assigned(Vec<PartitionId>),
    /// Assigned paused: a snapshot ahead of the local state is to be imported first.
    Importing(Vec<PartitionId>),
    /// The group takes these partitions away. The consumer still holds them until the
    /// stream thread has committed its work on them and calls [`TaskContext::release`]:
    /// the next owner starts exactly where this one stopped.
    Revoked(Vec<PartitionId>, TopicPartitionList),
}

pub struct TaskContext {
    pub store: Arc<Store>,
    /// Source topics; the index is the `PartitionId::source`.
    pub sources: crate::tasks::Sources,
    pub events: Mutex<Vec<AssignmentEvent>>,
    pub stats: Arc<Stats>,
    /// Log end offsets from the client's statistics, while they are fresh.
    pub log_ends: Mutex<LogEnds>,
    /// Restores a partition from its newest snapshot first, when that is ahead of the store.
    pub snapshots: Option<Arc<crate::snapshot::Restorer>>,
    /// Set once the stream thread stops handling events (the consumer is closing): a
    /// revocation is then released at once in the callback.
    pub closing: AtomicBool,
    /// With standbys on: an assigned partition's standby task commits and lets it go before
    /// its checkpoint is read here (see [`crate::standby`]).
    pub standbys: Option<Arc<crate::standby::Standbys>>,
    /// The audit read for assigned SKU partitions, after their state is in place and before
    /// the stream thread lets the dispatcher send for them (see [`crate::actions::Recall`]).
    pub recall: Option<Arc<crate::actions::Recall>>,
    /// The states of this process's tasks, shared with the stream and standby threads.
    pub lifecycle: Arc<crate::tasks::Lifecycle>,
}

impl TaskContext {
    pub fn ids(&self, tpl: &TopicPartitionList) -> Vec<PartitionId> {
        tpl.elements().iter().filter_map(|e| self.sources.id(e.topic(), e.partition())).collect()
    }

    /// The `PartitionId::source` of an input topic, if it is one.
    pub fn source_of(&self, topic: &str) -> Option<u16> {
        self.sources.source_of(topic)
    }

    pub fn push(&self, event: AssignmentEvent) {
        if let Ok(mut q) = self.events.lock() {
            q.push(event);
        }
    }

    /// When the partition's log end was last reported at or below `next`, if that report is
    /// at most `fresh` old: every record the broker held then has been consumed.
    pub fn caught_up_at(&self, id: PartitionId, next: i64, fresh: Duration) -> Option<Instant> {
        self.log_ends.lock().ok().and_then(|ends| ends.caught_up_at(id, next, fresh))
    }

    /// The partitions change hands: what the statistics said of them so far is stale.
    fn forget_log_ends(&self, ids: &[PartitionId]) {
        if let Ok(mut ends) = self.log_ends.lock() {
            ends.forget(ids);
        }
    }

    /// Gives revoked partitions back to the group (after the stream thread's commit).
    pub fn release(consumer: &BaseConsumer<Self>, tpl: &TopicPartitionList) -> KafkaResult<()> {
        if matches!(consumer.rebalance_protocol(), RebalanceProtocol::Cooperative) {
            consumer.incremental_unassign(tpl)
        } else {
            consumer.unassign()
        }
    }

    /// Releases every revocation still queued: the stream thread has stopped, and a consumer
    /// that is closing waits for them.
    pub fn release_pending(&self, consumer: &BaseConsumer<Self>) {
        self.closing.store(true, Ordering::SeqCst);
        for event in self.take_events() {
            if let AssignmentEvent::Revoked(_, tpl) = event {
                if let Err(e) = Self::release(consumer, &tpl) {
                    warn!(error = %e, "releasing revoked partitions failed");
                }
            }
        }
    }

    /// Drained by the stream thread after each poll.
    pub fn take_events(&self) -> Vec<AssignmentEvent> {
        self.events.lock().map(|mut q| std::mem::take(&mut *q)).unwrap_or_default()
    }

    /// Sets every partition's fetch position to its local checkpoint (the log start without
    /// one) and reads the audit topic for the SKU partitions among them. Returns those whose
    /// newest snapshot is ahead of the local state (with snapshots on): they are imported off
    /// the callback, assigned paused until then ([`TaskContext::pause`]); their audit read
    /// follows their import.
    pub fn position_at_checkpoints(&self, tpl: &mut TopicPartitionList) -> Vec<PartitionId> {
        let elements: Vec<(String, i32)> =
            tpl.elements().iter().map(|e| (e.topic().to_string(), e.partition())).collect();
        let mut sku_resumed: Vec<(i32, Option<i64>)> = Vec::new();
        let mut importing = Vec::new();
        for (topic, partition) in elements {
            let Some(id) = self.sources.id(&topic, partition) else { continue };
            if self.snapshots.as_ref().is_some_and(|s| s.is_ahead(&self.store, id)) {
                self.lifecycle.note(id, crate::tasks::State::Importing);
                importing.push(id);
            }
            let checkpoint = self.store.checkpoint(id);
            let imported_later = importing.last() == Some(&id);
            if id.source == PartitionId::SKU_REPARTITION && self.recall.is_some() && !imported_later {
                self.lifecycle.note(id, crate::tasks::State::Recalling);
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
        if let Some(recall) = &self.recall {
            recall.before_dispatch(&sku_resumed);
        }
        importing
    }

    /// The list of `ids`' topic partitions.
    pub fn list_of(&self, ids: &[PartitionId]) -> TopicPartitionList {
        let mut tpl = TopicPartitionList::new();
        for id in ids {
            tpl.add_partition(self.sources.topic_of(*id), id.partition);
        }
        tpl
    }

    /// Pauses the fetch of partitions just assigned that wait for their import.
    pub fn pause(&self, consumer: &BaseConsumer<Self>, ids: &[PartitionId]) {
        if ids.is_empty() {
            return;
        }
        if let Err(e) = consumer.pause(&self.list_of(ids)) {
            // Their records are then dropped until the import ends (no task holds them) and
            // read again from the imported checkpoint: slower, never lost.
            warn!(partitions = ?ids, error = %e, "cannot pause partitions waiting for their import");
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
}

impl ClientContext for TaskContext {
    fn error(&self, error: KafkaError, reason: &str) {
        // End of partition is how `--exit-at-end` learns it is done, not a fault.
        if matches!(error, KafkaError::PartitionEOF(_))
            || error.rdkafka_error_code() == Some(RDKafkaErrorCode::PartitionEOF)
        {
            return;
        }
        error!(error = %error, reason, "kafka client error");
    }

    fn stats(&self, statistics: Statistics) {
        let lag: i64 = statistics
            .topics
            .iter()
            .filter(|(name, _)| self.sources.source_of(name).is_some())
            .flat_map(|(_, t)| t.partitions.values())
            .filter(|p| p.partition >= 0 && p.consumer_lag >= 0)
            .map(|p| p.consumer_lag)
            .sum();
        self.stats.lag.store(lag, std::sync::atomic::Ordering::Relaxed);
        let now = crate::kafka::log_ends::written_at(statistics.ts);
        if let Ok(mut ends) = self.log_ends.lock() {
            for (source, name) in self.sources.iter() {
                let Some(topic) = statistics.topics.get(name) else { continue };
                for p in topic.partitions.values().filter(|p| p.partition >= 0) {
                    let id = PartitionId { source, partition: p.partition };
                    ends.observe(id, p.desired && p.fetch_state == "active", p.hi_offset, now);
                }
            }
        }
    }
}

impl ConsumerContext for TaskContext {
    /// Eager groups hand out and take back the whole assignment; cooperative ones
    /// (`cooperative-sticky`, the default) only the partitions that move, so the others keep
    /// running through a rebalance. Either way a revocation is handed to the stream thread,
    /// which commits, then releases the partitions ([`TaskContext::release`]).
    fn rebalance(&self, consumer: &BaseConsumer<Self>, err: RDKafkaRespErr, tpl: &mut TopicPartitionList) {
        let cooperative = matches!(consumer.rebalance_protocol(), RebalanceProtocol::Cooperative);
        let result: KafkaResult<()> = match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                if let Some(standbys) = &self.standbys {
                    standbys.release(&self.ids(tpl));
                }
                let importing = self.position_at_checkpoints(tpl);
                let ids = self.ids(tpl);
                self.forget_log_ends(&ids);
                crate::failpoint::hit("assign.received");
                info!(partitions = ?ids, importing = ?importing, cooperative, "assigned");
                events::rebalanced();
                let applied = if cooperative { consumer.incremental_assign(tpl) } else { consumer.assign(tpl) };
                if applied.is_ok() {
                    self.pause(consumer, &importing);
                }
                self.assigned(ids, importing);
                applied
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                let ids = self.ids(tpl);
                let lost = consumer.assignment_lost();
                self.forget_log_ends(&ids);
                info!(partitions = ?ids, cooperative, lost, "revoked");
                events::rebalanced();
                if self.closing.load(Ordering::SeqCst) {
                    Self::release(consumer, tpl)
                } else {
                    self.push(AssignmentEvent::Revoked(ids, tpl.clone()));
                    Ok(())
                }
            }
            other => {
                error!(error = ?other, "rebalance error");
                Self::release(consumer, tpl)
            }
        };
        if let Err(e) = result {
            error!(error = %e, "applying assignment failed");
        }
    }
}
