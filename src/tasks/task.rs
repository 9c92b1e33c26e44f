//! The task of one input partition ([`Task`], one kind per input topic) and the recipe
//! that builds any of them from the state store ([`TaskFactory`]).

use tidemark_state::{Checkpoint, PartitionId, StateError, StateView, StateWrite};
use tidemark_topology::config::Topology;

use crate::engine::combine::{CombineTask, CombineTaskConfig};
use crate::engine::derive::Derived;
use crate::engine::inventory::InventoryTask;
use crate::engine::outbox::OutboxRow;
use crate::engine::sku_task::{SkuTask, SkuTaskConfig};
use crate::engine::{OrdersTask, OutputRecord, SourceRecord, Stats, TaskConfig};

/// `PartitionId::source` of each input topic (defined beside `PartitionId`).
pub const ORDERS: u16 = PartitionId::ORDERS;
pub const INVENTORY: u16 = PartitionId::INVENTORY;
pub const SKU_REPARTITION: u16 = PartitionId::SKU_REPARTITION;
pub const COMBINE: u16 = PartitionId::COMBINE;

/// Internal topics: written by upstream tasks of this topology, consumed by downstream ones.
pub fn is_internal(source: u16) -> bool {
    source == SKU_REPARTITION || source == COMBINE
}

/// Builds the task of any input partition from its state in the store: one recipe for the
/// active tasks of the stream thread and the standby tasks of [`crate::standby`].
#[derive(Clone)]
pub struct TaskFactory {
    task_cfg: TaskConfig,
    sku_cfg: SkuTaskConfig,
    combine_cfg: CombineTaskConfig,
    inventory_topic: String,
    normalize: tidemark_topology::normalize::NormalizeLimits,
    /// Partitions of the SKU repartition topic.
    pub sku_partitions: i32,
    /// Partition counts of the four input topics, in `PartitionId::source` order.
    pub counts: [i32; 4],
}

impl TaskFactory {
    pub fn new(t: &Topology, counts: [i32; 4]) -> Self {
        let sku_partitions = counts[usize::from(SKU_REPARTITION)];
        let upstreams = (0..counts[usize::from(ORDERS)])
            .map(|p| (ORDERS, p))
            .chain((0..counts[usize::from(INVENTORY)]).map(|p| (INVENTORY, p)))
            .collect();
        TaskFactory {
            task_cfg: TaskConfig::from_topology(t, sku_partitions),
            sku_cfg: SkuTaskConfig {
                topic: t.sku_repartition.topic.clone(),
                upstreams,
                rules: t.rules.clone(),
                window: t.dashboard_window,
            },
            combine_cfg: CombineTaskConfig {
                topic: t.combine_repartition.topic.clone(),
                upstreams: counts[usize::from(ORDERS)],
                window: t.dashboard_window,
                finance_tz: t.finance_time_zone,
            },
            inventory_topic: t.inventory.topic.clone(),
            normalize: t.normalize,
            sku_partitions,
            counts,
        }
    }

    /// Every partition of the four input topics.
    pub fn all_partitions(&self) -> impl Iterator<Item = PartitionId> + '_ {
        [ORDERS, INVENTORY, SKU_REPARTITION, COMBINE].into_iter().flat_map(|source| {
            (0..self.counts[usize::from(source)]).map(move |partition| PartitionId { source, partition })
        })
    }

    /// The task of `id`, resumed from its checkpoint and state in `store`.
    pub fn restore<S: StateView + ?Sized>(&self, store: &S, id: PartitionId) -> Result<Task, StateError> {
        Ok(match id.source {
            ORDERS => Task::Orders(Box::new(OrdersTask::restore(store, id, self.task_cfg.clone())?)),
            INVENTORY => Task::Inventory(InventoryTask::restore(
                store,
                id,
                self.inventory_topic.clone(),
                self.sku_partitions,
                self.normalize,
            )?),
            COMBINE => Task::Combine(Box::new(CombineTask::restore(store, id, self.combine_cfg.clone())?)),
            _ => Task::Sku(Box::new(SkuTask::restore(store, id, self.sku_cfg.clone())?)),
        })
    }
}

pub enum Task {
    /// Orders: normalise, dedup, dashboard, forward lines by SKU.
    Orders(Box<OrdersTask>),
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

    /// Whether its next finish emits the rows it holds back, or holds them (see
    /// [`crate::engine::orders::OrdersTask::publish`]); only orders tasks hold rows back.
    pub fn publish(&mut self, on: bool) {
        if let Task::Orders(t) = self {
            t.publish(on);
        }
    }

    /// Whether a finish that publishes has rows to emit although nothing new came in.
    pub fn has_unpublished(&self) -> bool {
        matches!(self, Task::Orders(t) if t.has_unpublished())
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

    pub fn finish<S: StateView + ?Sized, W: StateWrite>(
        &mut self,
        store: &S,
        batch: &mut W,
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

    /// About how much its next `finish` has to do: the events an orders task holds, the records
    /// a SKU task holds for the merge; 1 for the others. Deals finishes to threads.
    pub fn work(&self) -> usize {
        match self {
            Task::Orders(t) => t.pending().max(1),
            Task::Sku(t) => t.buffered().max(1),
            Task::Inventory(_) | Task::Combine(_) => 1,
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
