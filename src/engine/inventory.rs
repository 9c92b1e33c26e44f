//! The upstream task of one `inventory` partition: validates stock snapshots and forwards
//! them, with their logical time, to the SKU that owns them. It keeps no state but its
//! checkpoint: which snapshot is current is decided downstream, in logical-time order.

use tidemark_state::{Checkpoint, PartitionId, StateError, StateView, StateWrite};
use tidemark_topology::logical::LogicalTime;
use tidemark_topology::normalize::{normalize_inventory_with, NormalizeLimits};

use super::derive::{mark, sku_partition, Derived};
use super::output::{OutputRecord, Sink};
use super::record::SourceRecord;
use super::stats::Stats;

pub struct InventoryTask {
    id: PartitionId,
    topic: String,
    sku_partitions: i32,
    limits: NormalizeLimits,
    checkpoint: Checkpoint,
    uncommitted: bool,
}

impl InventoryTask {
    pub fn restore<S: StateView + ?Sized>(
        store: &S,
        id: PartitionId,
        topic: String,
        sku_partitions: i32,
        limits: NormalizeLimits,
    ) -> Result<Self, StateError> {
        let checkpoint = store.checkpoint(id)?.unwrap_or_default();
        Ok(InventoryTask { id, topic, sku_partitions, limits, checkpoint, uncommitted: false })
    }

    pub fn checkpoint(&self) -> &Checkpoint {
        &self.checkpoint
    }

    pub fn has_uncommitted(&self) -> bool {
        self.uncommitted
    }

    /// Moves the checkpoint past offsets that carried nothing to apply (see
    /// [`Checkpoint::skip_to`]); the next commit persists it.
    pub fn skip_to(&mut self, offset: i64) {
        if self.checkpoint.skip_to(offset) {
            self.uncommitted = true;
        }
    }

    /// Validates one snapshot and forwards it (or dead-letters it) at once: snapshots carry
    /// no state here, so there is nothing to stage.
    pub fn ingest(&mut self, rec: SourceRecord<'_>, out: &mut Vec<OutputRecord>, stats: &Stats) -> bool {
        if tidemark_topology::fence::is_fence(rec.value) {
            // No event: only the promise its append time carries (the next mark). The
            // checkpoint moves past it, so lag and backlog age (measured from the committed
            // checkpoint) do not count fences as records waiting.
            if self.checkpoint.pass_fence(rec.offset, rec.append_ms) {
                self.uncommitted = true;
            }
            return false;
        }
        if !self.checkpoint.advance(rec.offset, rec.append_ms) {
            return false;
        }
        self.uncommitted = true;
        Stats::add(&stats.records, 1);
        let value = rec.value.unwrap_or_default();
        match normalize_inventory_with(rec.value, self.limits) {
            Ok(s) => {
                let partition = sku_partition(&s.sku, self.sku_partitions);
                let d = Derived::Snapshot {
                    lt: LogicalTime::new(self.checkpoint.max_append_ms, self.id.source, self.id.partition, rec.offset),
                    sku: s.sku,
                    on_hand: s.on_hand,
                    as_of_ms: s.as_of_ms,
                    append_ms: rec.append_ms,
                };
                out.push(OutputRecord::derived(d, partition));
            }
            Err(rejection) => {
                stats.dead_lettered(rejection.reason);
                out.push(OutputRecord::side_output(
                    Sink::DeadLetter,
                    (self.topic.as_str(), self.id.partition, rec.offset, rec.append_ms),
                    rec.key,
                    value,
                    rejection.reason.as_str(),
                    rejection.detail,
                ));
            }
        }
        true
    }

    pub fn finish<W: StateWrite>(&mut self, batch: &mut W) -> Result<(), StateError> {
        self.uncommitted = false;
        batch.put_checkpoint(self.id, &self.checkpoint)
    }

    pub fn mark(&self, idle_bound_ms: Option<i64>) -> Derived {
        mark(self.id, &self.checkpoint, idle_bound_ms)
    }
}
