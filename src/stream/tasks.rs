//! The tasks one process may own, one per assigned source partition.

use tidemark_state::{Checkpoint, CommitBatch, PartitionId, StateError, Store};

use crate::engine::combine::CombineTask;
use crate::engine::derive::Derived;
use crate::engine::inventory::InventoryTask;
use crate::engine::outbox::OutboxRow;
use crate::engine::sku_task::SkuTask;
use crate::engine::{OutputRecord, PartitionTask, SourceRecord, Stats};

/// `PartitionId::source` of each input topic (defined beside `PartitionId`).
pub const ORDERS: u16 = PartitionId::ORDERS;
pub const INVENTORY: u16 = PartitionId::INVENTORY;
pub const SKU_REPARTITION: u16 = PartitionId::SKU_REPARTITION;
pub const COMBINE: u16 = PartitionId::COMBINE;

/// Internal topics: written by upstream tasks of this topology, consumed by downstream ones.
pub fn is_internal(source: u16) -> bool {
    source == SKU_REPARTITION || source == COMBINE
}

pub enum Task {
    /// Orders: normalise, dedup, dashboard, forward lines by SKU.
    Orders(Box<PartitionTask>),
    /// Inventory: validate, forward snapshots by SKU.
    Inventory(InventoryTask),
    /// SKU repartition: merge in logical-time order, rules, outbox.
    Sku(Box<SkuTask>),
    /// Combine repartition: latest partial per source partition, one row per key.
    Combine(Box<CombineTask>),
}

impl Task {
    pub fn checkpoint(&self) -> &Checkpoint {
        match self {
            Task::Orders(t) => t.checkpoint(),
            Task::Inventory(t) => t.checkpoint(),
            Task::Sku(t) => t.checkpoint(),
            Task::Combine(t) => t.checkpoint(),
        }
    }

    /// Adds what the task holds in memory to `held`; inventory tasks hold nothing.
    pub fn held(&self, held: &mut crate::engine::held::Held) {
        match self {
            Task::Orders(t) => t.held(held),
            Task::Inventory(_) => {}
            Task::Sku(t) => t.held(held),
            Task::Combine(t) => t.held(held),
        }
    }

    pub fn next_offset(&self) -> i64 {
        self.checkpoint().next_offset
    }

    pub fn has_uncommitted(&self) -> bool {
        match self {
            Task::Orders(t) => t.has_uncommitted(),
            Task::Inventory(t) => t.has_uncommitted(),
            Task::Sku(t) => t.has_uncommitted(),
            Task::Combine(t) => t.has_uncommitted(),
        }
    }

    /// See [`tidemark_state::Checkpoint::skip_to`].
    pub fn skip_to(&mut self, offset: i64) {
        match self {
            Task::Orders(t) => t.skip_to(offset),
            Task::Inventory(t) => t.skip_to(offset),
            Task::Sku(t) => t.skip_to(offset),
            Task::Combine(t) => t.skip_to(offset),
        }
    }

    pub fn ingest(&mut self, rec: SourceRecord<'_>, out: &mut Vec<OutputRecord>, stats: &Stats) -> bool {
        match self {
            Task::Orders(t) => t.ingest(rec, out, stats),
            Task::Inventory(t) => t.ingest(rec, out, stats),
            Task::Sku(t) => t.ingest(rec, out, stats),
            Task::Combine(t) => t.ingest(rec, out, stats),
        }
    }

    pub fn finish(
        &mut self,
        store: &Store,
        batch: &mut CommitBatch<'_>,
        out: &mut Vec<OutputRecord>,
        rows: &mut Vec<(PartitionId, OutboxRow)>,
        stats: &Stats,
    ) -> Result<(), StateError> {
        match self {
            Task::Orders(t) => t.finish(store, batch, out, stats),
            Task::Inventory(t) => t.finish(batch),
            Task::Sku(t) => t.finish(store, batch, rows, stats),
            Task::Combine(t) => t.finish(batch, out),
        }
    }

    /// The dedup horizon to apply once the batch just finished is durable (orders only).
    pub fn dedup_horizon(&self) -> Option<i64> {
        match self {
            Task::Orders(t) => Some(t.dedup_horizon()),
            _ => None,
        }
    }

    /// The progress promise of an upstream task; `None` for SKU and combine tasks.
    pub fn mark(&self, idle_bound_ms: Option<i64>) -> Option<Derived> {
        match self {
            Task::Orders(t) => Some(t.mark(idle_bound_ms)),
            Task::Inventory(t) => Some(t.mark(idle_bound_ms)),
            Task::Sku(_) | Task::Combine(_) => None,
        }
    }

    /// Records a SKU task still holds for the merge.
    pub fn buffered(&self) -> usize {
        match self {
            Task::Sku(t) => t.buffered(),
            _ => 0,
        }
    }
}
