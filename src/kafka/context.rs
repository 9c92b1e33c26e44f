//! The stream consumer's context: librdkafka's callbacks, passed on.
//!
//! The rebalance callback only notifies [`crate::tasks::Assignment`], which positions newly
//! assigned partitions at their checkpoints and queues the changes for the stream thread
//! (`stream::rebalance`); this file applies the assignment to the consumer and keeps what
//! the client's statistics say (consumer lag, log ends).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::statistics::Statistics;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::TopicPartitionList;
use tidemark_state::PartitionId;
use tracing::{error, info, warn};

use crate::engine::Stats;
use crate::kafka::log_ends::LogEnds;
use crate::tasks::Assignment;
use crate::telemetry::events;

pub struct TaskContext {
    /// What partitions moving means for this process's tasks.
    pub assignment: Assignment,
    pub stats: Arc<Stats>,
    /// Log end offsets from the client's statistics, while they are fresh.
    pub log_ends: Mutex<LogEnds>,
}

impl TaskContext {
    pub fn new(assignment: Assignment, stats: Arc<Stats>) -> Self {
        TaskContext { assignment, stats, log_ends: Mutex::default() }
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

    /// The application paused the partitions' fetch: their reported ends are not believed
    /// until they are resumed ([`TaskContext::resumed`]) and have fetched for a while.
    pub fn paused(&self, ids: &[PartitionId]) {
        if let Ok(mut ends) = self.log_ends.lock() {
            ends.pause(ids);
        }
    }

    /// The application resumed the partitions' fetch (after an import, `POST /resume`): as
    /// after an assignment, nothing reported before says anything about them.
    pub fn resumed(&self, ids: &[PartitionId]) {
        self.forget_log_ends(ids);
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
        for tpl in self.assignment.close() {
            if let Err(e) = Self::release(consumer, &tpl) {
                warn!(error = %e, "releasing revoked partitions failed");
            }
        }
    }

    /// Pauses the fetch of partitions just assigned that wait for their import.
    pub fn pause(&self, consumer: &BaseConsumer<Self>, ids: &[PartitionId]) {
        if ids.is_empty() {
            return;
        }
        self.paused(ids);
        if let Err(e) = consumer.pause(&self.assignment.list_of(ids)) {
            // Their records are then dropped until the import ends (no task holds them) and
            // read again from the imported checkpoint: slower, never lost.
            warn!(partitions = ?ids, error = %e, "cannot pause partitions waiting for their import");
        }
    }
}

impl ClientContext for TaskContext {
    fn error(&self, error: KafkaError, reason: &str) {
        // End of partition is how `--exit-at-end` learns it is done, not a fault.
        crate::kafka::client_log::client_error(&error, reason);
    }

    fn stats(&self, statistics: Statistics) {
        let lag: i64 = statistics
            .topics
            .iter()
            .filter(|(name, _)| self.assignment.sources.source_of(name).is_some())
            .flat_map(|(_, t)| t.partitions.values())
            .filter(|p| p.partition >= 0 && p.consumer_lag >= 0)
            .map(|p| p.consumer_lag)
            .sum();
        self.stats.lag.store(lag, std::sync::atomic::Ordering::Relaxed);
        let now = crate::kafka::log_ends::written_at(statistics.ts);
        if let Ok(mut ends) = self.log_ends.lock() {
            for (source, name) in self.assignment.sources.iter() {
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
                let importing = self.assignment.on_assigned(tpl);
                let ids = self.assignment.ids(tpl);
                self.forget_log_ends(&ids);
                crate::failpoint::hit("assign.received");
                info!(partitions = ?ids, importing = ?importing, cooperative, "assigned");
                events::rebalanced();
                let applied = if cooperative { consumer.incremental_assign(tpl) } else { consumer.assign(tpl) };
                if applied.is_ok() {
                    self.pause(consumer, &importing);
                }
                self.assignment.assigned(ids, importing);
                applied
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                let ids = self.assignment.ids(tpl);
                let lost = consumer.assignment_lost();
                self.forget_log_ends(&ids);
                info!(partitions = ?ids, cooperative, lost, "revoked");
                events::rebalanced();
                if self.assignment.revoked(ids, tpl) {
                    Ok(())
                } else {
                    Self::release(consumer, tpl)
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
