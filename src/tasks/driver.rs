//! A broker-free topology test driver, in the spirit of Kafka Streams' `TopologyTestDriver`.
//!
//! The driver runs the same tasks as `tidemark run` (orders, inventory, SKU and combine
//! tasks), through the same [`TaskSet`] as the stream and standby threads, against an
//! in-memory store ([`MemStore`]) and in-memory topic logs:
//!
//! - tests pipe raw `orders` and `inventory` records in, each stamped with the broker's
//!   *LogAppendTime*, which the test controls ([`TopologyDriver::advance`]);
//! - [`TopologyDriver::step`] is one turn of the stream loop: every task polls what its log
//!   holds, stages its state into one commit, upstream tasks send their progress marks,
//!   every output is "published" (repartition records are appended to the SKU and combine
//!   partitions' logs at the current broker time) and the commit is applied;
//! - tests then read what the topology produced: dashboard and finance records, dead
//!   letters, late records, committed outbox rows and the actions handed to the dispatcher.
//!
//! What it models and what it does not is written down in `docs/test-driver.md`. In short:
//! one process owning every partition, no rebalances, no Kafka transactions, no HTTP
//! delivery; a crash is modelled as losing everything not committed ([`TopologyDriver::crash`]).
//! No clock is read anywhere: time is the broker time the test sets.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tidemark_state::{codec, DeferredWrites, MemStore, PartitionId, StateError, StateStore};
use tidemark_topology::config::Topology;

use crate::engine::outbox::OutboxRow;
use crate::engine::{OutputRecord, Sink, Stats};
use crate::tasks::{Polled, Sources, Task, TaskFactory, TaskSet};

/// Partition counts of the four logs the engine consumes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Partitions {
    pub orders: i32,
    pub inventory: i32,
    /// The internal SKU repartition topic; 0 turns the inventory path off.
    pub sku: i32,
    /// The internal combine repartition topic; 0 turns the combined outputs off.
    pub combine: i32,
}

/// Everything the driver needs to build its tasks.
#[derive(Clone)]
pub struct DriverConfig {
    /// The recipe `tidemark run` builds its tasks with.
    pub factory: TaskFactory,
    pub sources: Sources,
    pub partitions: Partitions,
    /// How far an idle upstream's promise stays behind the broker time (`idle_skew`).
    pub idle_skew_ms: i64,
    /// Threads a turn's tasks ingest and finish on (`tidemark run --threads`); 1 by default.
    pub threads: usize,
    /// Whether the upstream tasks hand their lines, snapshots and marks to the SKU tasks
    /// in-process, as `tidemark run` does (on by default); off, SKU tasks read everything
    /// from their logs, as when the upstream partitions belong to another process.
    pub hand_over: bool,
}

impl DriverConfig {
    /// The configuration `tidemark run` derives from a topology, for these partition counts.
    pub fn from_topology(t: &Topology, partitions: Partitions) -> DriverConfig {
        let p = partitions;
        DriverConfig {
            factory: TaskFactory::new(t, [p.orders, p.inventory, p.sku, p.combine]),
            sources: Sources::of(t),
            partitions,
            idle_skew_ms: t.idle_skew_ms,
            threads: 1,
            hand_over: true,
        }
    }
}

/// One record in a driver log or output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Produced {
    pub key: Option<Vec<u8>>,
    pub value: Vec<u8>,
    pub headers: Vec<(&'static str, String)>,
    /// The broker time it was appended at (LogAppendTime).
    pub append_ms: i64,
    /// The offset in its partition's log (input and repartition logs only; 0 otherwise).
    pub offset: i64,
}

/// What one [`TopologyDriver::step`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepCounts {
    /// Records handed to tasks (below-checkpoint re-deliveries excluded).
    pub ingested: usize,
    /// Records published to any output or internal log, marks included.
    pub published: usize,
    /// Outbox rows committed.
    pub actions: usize,
}

pub struct TopologyDriver {
    cfg: DriverConfig,
    store: MemStore,
    stats: Arc<Stats>,
    broker_ms: i64,
    /// Input and repartition logs, by the partition that consumes them.
    logs: BTreeMap<PartitionId, Vec<Produced>>,
    /// The next offset each task fetches.
    positions: BTreeMap<PartitionId, i64>,
    tasks: TaskSet,
    /// Upstreams whose consumer is "stuck": they send no idle promise.
    stalled: BTreeSet<PartitionId>,
    outputs: Vec<(Sink, Produced)>,
    actions: Vec<OutboxRow>,
    /// With [`TopologyDriver::set_overlapped`]: the last turn's commit, still being written
    /// while the next turn's tasks finish (as the stream thread's commit thread writes it).
    in_flight: Option<(DeferredWrites, Vec<OutboxRow>)>,
    overlapped: bool,
}

impl TopologyDriver {
    /// A driver for a topology file's configuration, starting at broker time `start_ms`.
    pub fn for_topology(t: &Topology, partitions: Partitions, start_ms: i64) -> Result<Self, StateError> {
        TopologyDriver::new(DriverConfig::from_topology(t, partitions), start_ms)
    }

    pub fn new(cfg: DriverConfig, start_ms: i64) -> Result<Self, StateError> {
        let mut logs = BTreeMap::new();
        let p = cfg.partitions;
        for id in (0..p.orders)
            .map(PartitionId::orders)
            .chain((0..p.inventory).map(PartitionId::inventory))
            .chain((0..p.sku).map(PartitionId::sku))
            .chain((0..p.combine).map(|partition| PartitionId { source: PartitionId::COMBINE, partition }))
        {
            logs.insert(id, Vec::new());
        }
        let mut tasks = TaskSet::new(cfg.factory.clone(), cfg.sources.clone());
        tasks.set_threads(cfg.threads);
        tasks.set_hand_over(cfg.hand_over);
        let mut driver = TopologyDriver {
            cfg,
            store: MemStore::new(),
            stats: Arc::default(),
            broker_ms: start_ms,
            logs,
            positions: BTreeMap::new(),
            tasks,
            stalled: BTreeSet::new(),
            outputs: Vec::new(),
            actions: Vec::new(),
            in_flight: None,
            overlapped: false,
        };
        driver.restore_tasks()?;
        Ok(driver)
    }

    /// Rebuilds every task from the store's last commit and fetches from its checkpoint.
    fn restore_tasks(&mut self) -> Result<(), StateError> {
        self.tasks.clear();
        self.positions.clear();
        let ids: Vec<PartitionId> = self.logs.keys().copied().collect();
        for id in ids {
            let task = self.tasks.restore(&self.store, id)?;
            self.positions.insert(id, task.next_offset());
            self.tasks.insert(id, task);
        }
        Ok(())
    }

    // ---- input and time ----------------------------------------------------------------

    /// From now on each turn's commit is written during the next turn, after its tasks
    /// finished and before its outputs are published, as `tidemark run` does: the tasks
    /// finish while the store does not hold the batch before yet.
    pub fn set_overlapped(&mut self, overlapped: bool) {
        self.overlapped = overlapped;
    }

    /// Ingests and finishes each turn's tasks on `threads` threads from now on (see
    /// [`TaskSet::ingest_all`], [`TaskSet::finish`]).
    pub fn set_threads(&mut self, threads: usize) {
        self.cfg.threads = threads.max(1);
        self.tasks.set_threads(self.cfg.threads);
    }

    /// Turns the in-process hand-over to the SKU tasks on or off from now on (see
    /// [`TaskSet::set_hand_over`]).
    pub fn set_hand_over(&mut self, on: bool) {
        self.cfg.hand_over = on;
        self.tasks.set_hand_over(on);
    }

    /// Whether the next turns publish the aggregates' rows (the default) or hold them back
    /// until a turn that does, as the stream does between two `state.publish_interval`
    /// ticks (see [`TaskSet::set_publishing`]).
    pub fn set_publishing(&mut self, on: bool) {
        self.tasks.set_publishing(on);
    }

    /// The broker's clock: the append time of the next record piped in.
    pub fn now_ms(&self) -> i64 {
        self.broker_ms
    }

    /// Moves the broker clock forward (or back, as a leader change with a slower clock may).
    pub fn advance(&mut self, ms: i64) {
        self.broker_ms += ms;
    }

    pub fn set_time(&mut self, ms: i64) {
        self.broker_ms = ms;
    }

    /// Appends a record to `orders[partition]` at the current broker time; returns its offset.
    pub fn pipe_order(&mut self, partition: i32, key: Option<&[u8]>, value: &[u8]) -> i64 {
        self.append(PartitionId::orders(partition), key, value)
    }

    /// Appends a record to `inventory[partition]` at the current broker time.
    pub fn pipe_inventory(&mut self, partition: i32, key: Option<&[u8]>, value: &[u8]) -> i64 {
        self.append(PartitionId::inventory(partition), key, value)
    }

    fn append(&mut self, id: PartitionId, key: Option<&[u8]>, value: &[u8]) -> i64 {
        let append_ms = self.broker_ms;
        let log = self.logs.entry(id).or_default();
        let offset = i64::try_from(log.len()).unwrap_or(i64::MAX);
        log.push(Produced {
            key: key.map(<[u8]>::to_vec),
            value: value.to_vec(),
            headers: Vec::new(),
            append_ms,
            offset,
        });
        offset
    }

    /// An upstream whose consumer stops reporting its log end: it keeps sending the marks its
    /// records justify but no idle promise (as a client with stale statistics).
    pub fn stall(&mut self, id: PartitionId) {
        self.stalled.insert(id);
    }

    pub fn unstall(&mut self, id: PartitionId) {
        self.stalled.remove(&id);
    }

    // ---- running -----------------------------------------------------------------------

    /// One turn of the stream loop over every partition: poll, finish, marks, publish, commit.
    pub fn step(&mut self) -> Result<StepCounts, StateError> {
        let all: Vec<PartitionId> = self.tasks.ids().collect();
        self.step_partitions(&all, usize::MAX, true)
    }

    /// One turn in which only `ids` poll (the others are slower processes, or paused), each
    /// at most `max_records` records. Only tasks that polled send marks.
    pub fn step_only(&mut self, ids: &[PartitionId], max_records: usize) -> Result<StepCounts, StateError> {
        self.step_partitions(ids, max_records, true)
    }

    /// A turn whose outputs reach the logs but whose state commit is lost: the process died
    /// between the flush and the write (the at-least-once window). Tasks restart from the
    /// previous commit.
    pub fn step_then_crash(&mut self) -> Result<StepCounts, StateError> {
        let all: Vec<PartitionId> = self.tasks.ids().collect();
        let counts = self.step_partitions(&all, usize::MAX, false)?;
        self.crash()?;
        Ok(counts)
    }

    /// [`TopologyDriver::step_then_crash`] for `ids` only: their outputs reach the logs, their
    /// commit is lost; every other task keeps what it committed.
    pub fn step_only_then_crash(&mut self, ids: &[PartitionId], max_records: usize) -> Result<StepCounts, StateError> {
        let counts = self.step_partitions(ids, max_records, false)?;
        self.crash()?;
        Ok(counts)
    }

    /// Steps until a turn ingests and publishes nothing; returns how many turns ran. Broker
    /// time does not move, so idle promises stop moving and this ends.
    pub fn run_until_quiet(&mut self) -> Result<usize, StateError> {
        const MAX_TURNS: usize = 10_000;
        for turn in 1..=MAX_TURNS {
            let c = self.step()?;
            if c.ingested == 0 && c.published == 0 {
                if let Some((writes, rows)) = self.in_flight.take() {
                    self.write(&writes, rows)?;
                }
                return Ok(turn);
            }
        }
        Err(StateError::Decode { what: "topology driver", detail: format!("still busy after {MAX_TURNS} turns") })
    }

    /// Loses everything not committed and restarts every task from the store, as a process
    /// killed and restarted on the same state directory. Logs and published outputs stay.
    pub fn crash(&mut self) -> Result<(), StateError> {
        self.in_flight = None;
        self.restore_tasks()
    }

    fn step_partitions(
        &mut self,
        ids: &[PartitionId],
        max_records: usize,
        commit: bool,
    ) -> Result<StepCounts, StateError> {
        let mut counts = StepCounts::default();
        let mut out = Vec::new();
        let polled: BTreeSet<PartitionId> = ids.iter().copied().collect();
        // 1. Poll: every record from the task's position to its log end (or the limit),
        //    handed to the tasks together as the stream thread hands a poll's records over.
        let mut records = Vec::new();
        for id in &polled {
            let (Some(log), Some(pos)) = (self.logs.get(id), self.positions.get(id)) else { continue };
            let from = usize::try_from(*pos).unwrap_or(0);
            records.extend(log.iter().skip(from).take(max_records).map(|r| {
                let rec = Polled {
                    key: r.key.as_deref(),
                    value: Some(&r.value),
                    timestamp_ms: Some(r.append_ms),
                    offset: r.offset,
                };
                (*id, rec)
            }));
        }
        let mut results = Vec::new();
        self.tasks.ingest_all(&records, &mut out, &mut results, &self.stats);
        for ((id, rec), ingested) in records.iter().zip(&results) {
            let (Some(ingested), Some(pos)) = (ingested, self.positions.get_mut(id)) else { continue };
            counts.ingested += usize::from(ingested.counted);
            *pos = rec.offset + 1;
        }
        drop(records);
        // 2. Finish: every task with new records stages into one batch; partials go on to
        //    the combine topic.
        //    Between the upstream tasks and the others: marks of the upstreams that polled (a
        //    caught-up one promises broker time − skew), then the hand-over of what the
        //    upstreams emitted to the SKU tasks (when on).
        let mut batch = DeferredWrites::default();
        let mut rows = Vec::new();
        let (positions, logs, stalled) = (&self.positions, &self.logs, &self.stalled);
        let idle_at = self.broker_ms - self.cfg.idle_skew_ms;
        let idle_bound = |id: PartitionId, _: &Task| {
            let caught_up = positions.get(&id).copied() == logs.get(&id).map(|l| l.len() as i64);
            (caught_up && !stalled.contains(&id)).then_some(idle_at)
        };
        let marks = |tasks: &mut TaskSet, out: &mut Vec<OutputRecord>| {
            tasks.marks(|id| polled.contains(&id), idle_bound, out);
        };
        self.tasks.finish(&self.store, &mut batch, &mut out, &mut rows, &self.stats, marks)?;
        // 4. Overlapped: the turn before is durable before these outputs go out.
        if let Some((writes, rows)) = self.in_flight.take() {
            counts.actions += self.write(&writes, rows)?;
        }
        // 5. Publish, at the current broker time.
        counts.published = out.len();
        for r in out {
            self.publish(r);
        }
        // 6. Commit state, offsets and outbox rows together (overlapped: during the next
        //    turn); rows go to the dispatcher.
        let rows: Vec<OutboxRow> = rows.into_iter().map(|(_, row)| row).collect();
        if commit && self.overlapped {
            self.in_flight = Some((batch, rows));
        } else if commit {
            counts.actions += self.write(&batch, rows)?;
        }
        Ok(counts)
    }

    /// Writes a turn's commit to the store; its rows go to the dispatcher. Returns how many.
    fn write(&mut self, writes: &DeferredWrites, rows: Vec<OutboxRow>) -> Result<usize, StateError> {
        let mut batch = self.store.batch();
        writes.apply_to(&mut batch)?;
        self.store.commit(batch)?;
        let n = rows.len();
        self.actions.extend(rows);
        Ok(n)
    }

    fn publish(&mut self, r: OutputRecord) {
        let append_ms = self.broker_ms;
        let internal = match (r.sink, r.partition) {
            (Sink::Repartition, Some(p)) => Some(PartitionId::sku(p)),
            (Sink::Combine, Some(p)) => Some(PartitionId { source: PartitionId::COMBINE, partition: p }),
            _ => None,
        };
        if let Some(id) = internal {
            let log = self.logs.entry(id).or_default();
            let offset = i64::try_from(log.len()).unwrap_or(i64::MAX);
            log.push(Produced { key: r.key, value: r.value, headers: r.headers, append_ms, offset });
            return;
        }
        let offset = i64::try_from(self.outputs.iter().filter(|(s, _)| *s == r.sink).count()).unwrap_or(0);
        self.outputs.push((r.sink, Produced { key: r.key, value: r.value, headers: r.headers, append_ms, offset }));
    }

    // ---- reading what happened -----------------------------------------------------------

    /// Every record published to `sink`, in publish order (repartition records: see
    /// [`TopologyDriver::log`]).
    pub fn records(&self, sink: Sink) -> Vec<&Produced> {
        self.outputs.iter().filter(|(s, _)| *s == sink).map(|(_, r)| r).collect()
    }

    pub fn dashboard(&self) -> Vec<&Produced> {
        self.records(Sink::Dashboard)
    }

    /// Provisional finance rows.
    pub fn finance(&self) -> Vec<&Produced> {
        self.records(Sink::Finance)
    }

    /// Combined dashboard rows (one per window, store and currency over every orders
    /// partition), as the combine tasks publish them.
    pub fn dashboard_combined(&self) -> Vec<&Produced> {
        self.records(Sink::DashboardCombined)
    }

    /// Combined provisional finance rows.
    pub fn finance_combined(&self) -> Vec<&Produced> {
        self.records(Sink::FinanceCombined)
    }

    pub fn dead_letters(&self) -> Vec<&Produced> {
        self.records(Sink::DeadLetter)
    }

    pub fn late(&self) -> Vec<&Produced> {
        self.records(Sink::Late)
    }

    /// The last value per key of an upsert sink, as a compacted topic ends up.
    pub fn compacted(&self, sink: Sink) -> BTreeMap<Vec<u8>, Vec<u8>> {
        self.records(sink).into_iter().filter_map(|r| Some((r.key.clone()?, r.value.clone()))).collect()
    }

    /// An input or repartition log (SKU or combine).
    pub fn log(&self, id: PartitionId) -> &[Produced] {
        self.logs.get(&id).map_or(&[], Vec::as_slice)
    }

    /// Outbox rows handed to the dispatcher after their commit, in commit order.
    pub fn actions(&self) -> &[OutboxRow] {
        &self.actions
    }

    /// Every committed outbox row, by SKU partition and key.
    pub fn outbox(&self) -> Result<Vec<(PartitionId, OutboxRow)>, StateError> {
        self.store.outbox_all().into_iter().map(|(p, _, row, _)| Ok((p, codec::decode("outbox row", &row)?))).collect()
    }

    /// Records a SKU task holds in its merge buffer.
    pub fn buffered(&self, partition: i32) -> usize {
        self.tasks.get(PartitionId::sku(partition)).map_or(0, Task::buffered)
    }

    /// Every partition the driver runs a task for, in order.
    pub fn partitions(&self) -> Vec<PartitionId> {
        self.tasks.ids().collect()
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    pub fn store(&self) -> &MemStore {
        &self.store
    }

    pub fn config(&self) -> &DriverConfig {
        &self.cfg
    }
}
