//! The consumer context: positions every newly assigned partition at its own checkpoint.
//!
//! The group's committed offsets are written for lag tools only. What a partition has
//! processed is what its RocksDB checkpoint says, so on assignment the context overrides the
//! fetch position with `checkpoint.next_offset` (or the log start when the partition has no
//! state here), before librdkafka starts fetching. With snapshots on, a partition whose
//! newest snapshot is ahead of the store is imported from it first (see [`crate::snapshot`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::statistics::Statistics;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{Offset, TopicPartitionList};
use tidemark_state::{PartitionId, Store};
use tracing::{error, info, warn};

use crate::engine::Stats;
use crate::telemetry::events;

/// Assignment changes for the stream thread to act on after `poll` returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AssignmentEvent {
    Assigned(Vec<PartitionId>),
    Revoked(Vec<PartitionId>),
}

pub struct TaskContext {
    pub store: Arc<Store>,
    /// Source topics in topology order; the index is the `PartitionId::source`.
    pub sources: Vec<String>,
    pub events: Mutex<Vec<AssignmentEvent>>,
    pub stats: Arc<Stats>,
    /// Log end offsets from the client's statistics, with when they were reported.
    pub log_ends: Mutex<HashMap<PartitionId, (i64, Instant)>>,
    /// Restores a partition from its newest snapshot first, when that is ahead of the store.
    pub snapshots: Option<Arc<crate::snapshot::Restorer>>,
}

impl TaskContext {
    pub fn ids(&self, tpl: &TopicPartitionList) -> Vec<PartitionId> {
        tpl.elements()
            .iter()
            .filter_map(|e| {
                let source = self.sources.iter().position(|s| s == e.topic())?;
                Some(PartitionId { source: u16::try_from(source).ok()?, partition: e.partition() })
            })
            .collect()
    }

    pub fn push(&self, event: AssignmentEvent) {
        if let Ok(mut q) = self.events.lock() {
            q.push(event);
        }
    }

    /// When the partition's log end was last reported at or below `next`, if that report is
    /// at most `fresh` old: every record the broker held then has been consumed.
    pub fn caught_up_at(&self, id: PartitionId, next: i64, fresh: Duration) -> Option<Instant> {
        self.log_ends
            .lock()
            .ok()
            .and_then(|ends| ends.get(&id).copied())
            .filter(|(end, at)| at.elapsed() <= fresh && next >= *end)
            .map(|(_, at)| at)
    }

    /// Drained by the stream thread after each poll.
    pub fn take_events(&self) -> Vec<AssignmentEvent> {
        self.events.lock().map(|mut q| std::mem::take(&mut *q)).unwrap_or_default()
    }

    pub fn position_at_checkpoints(&self, tpl: &mut TopicPartitionList) {
        let elements: Vec<(String, i32)> =
            tpl.elements().iter().map(|e| (e.topic().to_string(), e.partition())).collect();
        for (topic, partition) in elements {
            let Some(source) = self.sources.iter().position(|s| *s == topic) else { continue };
            let id = PartitionId { source: u16::try_from(source).unwrap_or(u16::MAX), partition };
            if let Some(snapshots) = &self.snapshots {
                snapshots.restore_if_ahead(&self.store, id);
            }
            let offset = match self.store.checkpoint(id) {
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
            .filter(|(name, _)| self.sources.iter().any(|s| s == *name))
            .flat_map(|(_, t)| t.partitions.values())
            .filter(|p| p.partition >= 0 && p.consumer_lag >= 0)
            .map(|p| p.consumer_lag)
            .sum();
        self.stats.lag.store(lag, std::sync::atomic::Ordering::Relaxed);
        let now = Instant::now();
        if let Ok(mut ends) = self.log_ends.lock() {
            for (source, name) in self.sources.iter().enumerate() {
                let Some(topic) = statistics.topics.get(name) else { continue };
                for p in topic.partitions.values().filter(|p| p.partition >= 0 && p.hi_offset >= 0) {
                    let id = PartitionId { source: u16::try_from(source).unwrap_or(u16::MAX), partition: p.partition };
                    ends.insert(id, (p.hi_offset, now));
                }
            }
        }
    }
}

impl ConsumerContext for TaskContext {
    fn rebalance(&self, consumer: &BaseConsumer<Self>, err: RDKafkaRespErr, tpl: &mut TopicPartitionList) {
        let result: KafkaResult<()> = match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                self.position_at_checkpoints(tpl);
                let ids = self.ids(tpl);
                info!(partitions = ?ids, "assigned");
                self.push(AssignmentEvent::Assigned(ids));
                events::rebalanced();
                consumer.assign(tpl)
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                let ids = self.ids(tpl);
                info!(partitions = ?ids, "revoked");
                self.push(AssignmentEvent::Revoked(ids));
                events::rebalanced();
                consumer.unassign()
            }
            other => {
                error!(error = ?other, "rebalance error");
                consumer.unassign()
            }
        };
        if let Err(e) = result {
            error!(error = %e, "applying assignment failed");
        }
    }
}
