//! [`TaskSet`]: the tasks one thread drives, and everything done to them between a poll and a
//! commit. The stream thread (active tasks), the standby thread (standby tasks) and the
//! topology test driver each hold one and differ only in where records come from and where
//! outputs go:
//!
//! - [`TaskSet::ingest`] hands a record to its partition's task (the topic mapped to its
//!   source once, in [`Sources`]; a record without a timestamp takes the partition's latest
//!   append time, from the data, never the clock); [`TaskSet::ingest_all`] hands a poll's
//!   records over together, each task's on one of up to `--threads` threads;
//! - [`TaskSet::skip_control_records`] moves tasks past offsets the consumer stepped over
//!   without handing a record over (transaction markers, aborted records);
//! - [`TaskSet::finish`] stages every task with new records into one batch (the tasks on up
//!   to `--threads` threads, their writes applied in partition order): the upstream tasks
//!   first, then their progress promises ([`TaskSet::marks`], to every SKU partition), then,
//!   with [`TaskSet::set_hand_over`], their lines, snapshots and marks for SKU partitions the
//!   set also holds are handed to those tasks in-process
//!   ([`crate::engine::sku_task::SkuTask::hand_over`]), then the
//!   SKU and combine tasks; it copies the orders tasks' partials to the combine topic
//!   ([`Forwarder`]) and emits the combine marks.
//!
//! A task is owned by the set that holds it: a thread's set is a unit, `Send`, so worker
//! threads can each drive one.

use std::collections::BTreeMap;

use tidemark_state::{DeferredWrites, PartitionId, StateError, StateView, StateWrite};
use tidemark_topology::logical::LogicalTime;

use super::task::{Task, TaskFactory};
use super::Sources;
use crate::engine::derive::Derived;
use crate::engine::forward::Forwarder;
use crate::engine::outbox::OutboxRow;
use crate::engine::{OutputRecord, Sink, SourceRecord, Stats};

/// What a commit made durable for one partition: its next offset, and the dedup horizon to
/// apply once the batch is written (orders tasks only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Finished {
    pub id: PartitionId,
    pub next_offset: i64,
    pub dedup_horizon: Option<i64>,
}

/// A record as the consumer returned it (or a driver log holds it).
#[derive(Clone, Copy, Debug)]
pub struct Polled<'a> {
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    /// The broker's timestamp; absent or negative: none.
    pub timestamp_ms: Option<i64>,
    pub offset: i64,
}

impl<'a> Polled<'a> {
    pub fn of(msg: &'a impl rdkafka::Message) -> Self {
        Polled { key: msg.key(), value: msg.payload(), timestamp_ms: msg.timestamp().to_millis(), offset: msg.offset() }
    }
}

/// What [`TaskSet::ingest`] did with a record.
#[derive(Clone, Copy, Debug)]
pub struct Ingested {
    pub id: PartitionId,
    /// The append time the task saw (the record's, or the partition's latest without one).
    pub append_ms: i64,
    /// False for a record below the task's checkpoint (a re-delivery after a seek) and for a
    /// fence (`tidemark_topology::fence`: a promise, no input record).
    pub counted: bool,
}

/// Upstream partitions: their tasks mark the SKU merge (orders and inventory).
fn is_upstream(id: PartitionId) -> bool {
    id.source == PartitionId::ORDERS || id.source == PartitionId::INVENTORY
}

/// Below this many records a poll's records are ingested on the calling thread alone: a
/// thread costs more than it saves.
const PARALLEL_FROM: usize = 64;

/// One task's records of an [`TaskSet::ingest_all`] and what it made of them.
struct Share<'a> {
    id: PartitionId,
    task: &'a mut Task,
    /// Indexes into the polled records, in order.
    records: Vec<usize>,
    out: Vec<OutputRecord>,
    results: Vec<Option<Ingested>>,
}

/// Runs `each` on every share, on up to `threads` threads (the calling thread is one of them),
/// each share whole on one thread. The shares are dealt by `work`, the largest first onto the
/// least loaded thread: only how fast a step goes depends on the dealing, never what it makes.
fn on_threads<T: Send>(shares: &mut [T], threads: usize, work: impl Fn(&T) -> usize, each: impl Fn(&mut T) + Sync) {
    let threads = threads.min(shares.len()).max(1);
    let mut order: Vec<usize> = (0..shares.len()).collect();
    order.sort_by_key(|i| std::cmp::Reverse(work(&shares[*i])));
    let mut load = vec![0usize; threads];
    let mut lane_of = vec![0usize; shares.len()];
    for i in order {
        let lane = (0..threads).min_by_key(|l| load[*l]).unwrap_or(0);
        load[lane] += work(&shares[i]);
        lane_of[i] = lane;
    }
    let mut lanes: Vec<Vec<&mut T>> = (0..threads).map(|_| Vec::new()).collect();
    for (share, lane) in shares.iter_mut().zip(&lane_of) {
        lanes[*lane].push(share);
    }
    let each = &each;
    std::thread::scope(|scope| {
        let mut lanes = lanes.into_iter();
        let mine = lanes.next();
        for lane in lanes {
            scope.spawn(move || lane.into_iter().for_each(each));
        }
        if let Some(lane) = mine {
            lane.into_iter().for_each(each);
        }
    });
}

/// What a [`TaskSet::finish`] stages into and emits to, and what it finished so far.
struct Staging<'a, S: ?Sized, W> {
    store: &'a S,
    batch: &'a mut W,
    out: &'a mut Vec<OutputRecord>,
    rows: &'a mut Vec<(PartitionId, OutboxRow)>,
    stats: &'a Stats,
    finished: Vec<Finished>,
}

/// One task's finish on a worker thread, and what it made.
struct Finishing<'a> {
    id: PartitionId,
    work: usize,
    task: &'a mut Task,
    writes: DeferredWrites,
    out: Vec<OutputRecord>,
    rows: Vec<(PartitionId, OutboxRow)>,
    result: Result<(), StateError>,
}

/// [`TaskSet::ingest`] for a task at hand.
fn ingest_into(
    task: &mut Task,
    id: PartitionId,
    rec: Polled<'_>,
    out: &mut Vec<OutputRecord>,
    stats: &Stats,
) -> Ingested {
    let append_ms = rec.timestamp_ms.filter(|t| *t >= 0).unwrap_or(task.checkpoint().max_append_ms);
    let counted =
        task.ingest(SourceRecord { key: rec.key, value: rec.value, append_ms, offset: rec.offset }, out, stats);
    Ingested { id, append_ms, counted }
}

pub struct TaskSet {
    factory: TaskFactory,
    sources: Sources,
    tasks: BTreeMap<PartitionId, Task>,
    combine: Forwarder,
    /// The last progress promise sent per upstream partition.
    last_marks: BTreeMap<PartitionId, LogicalTime>,
    /// Threads [`TaskSet::ingest_all`] and [`TaskSet::finish`] may use (`--threads`).
    threads: usize,
    /// Cleared [`DeferredWrites`] of earlier threaded finishes, kept with their capacity.
    spare_writes: Vec<DeferredWrites>,
    /// Whether upstream outputs for SKU partitions held here are handed over in-process.
    hand_over: bool,
    /// Whether the next finish publishes the aggregates' rows ([`TaskSet::set_publishing`]).
    publishing: bool,
}

impl TaskSet {
    pub fn new(factory: TaskFactory, sources: Sources) -> Self {
        let combine = Forwarder::new(factory.counts[usize::from(PartitionId::COMBINE)]);
        TaskSet {
            factory,
            sources,
            tasks: BTreeMap::new(),
            combine,
            last_marks: BTreeMap::new(),
            threads: 1,
            spare_writes: Vec::new(),
            hand_over: false,
            publishing: true,
        }
    }

    /// Whether the next [`TaskSet::finish`] publishes the rows of aggregates that changed
    /// (the default, every finish) or holds them back, staging only their state: the stream
    /// publishes once per `state.publish_interval`, so most commits carry lines and actions
    /// only. A finish that publishes also finishes the tasks with rows held back and no new
    /// records, and only it marks the combine partitions: a mark follows every partial it
    /// covers. Rows of an aggregate that expires go out in any finish.
    pub fn set_publishing(&mut self, on: bool) {
        self.publishing = on;
    }

    /// Hands what upstream tasks emit for SKU partitions this set also holds to those tasks
    /// in the same finish, before the log brings it back
    /// ([`crate::engine::sku_task::SkuTask::hand_over`]): an order
    /// reaches its action in one commit instead of two. For sets whose upstream tasks'
    /// outputs go to the log (the stream thread, the test driver), never for standby tasks,
    /// whose upstream outputs are dropped.
    pub fn set_hand_over(&mut self, on: bool) {
        if on && !self.hand_over {
            // What went to the log alone meanwhile may still be unread there.
            let ids: Vec<PartitionId> = self.ids().collect();
            for id in ids {
                self.forget_hand_over(id);
            }
        }
        self.hand_over = on;
    }

    /// Lets [`TaskSet::ingest_all`] use up to `threads` threads (1: the caller's alone).
    pub fn set_threads(&mut self, threads: usize) {
        self.threads = threads.max(1);
    }

    pub fn factory(&self) -> &TaskFactory {
        &self.factory
    }

    pub fn sources(&self) -> &Sources {
        &self.sources
    }

    /// The task of `id` built from its checkpoint and state in `store` (not yet held).
    pub fn restore<S: StateView + ?Sized>(&self, store: &S, id: PartitionId) -> Result<Task, StateError> {
        self.factory.restore(store, id)
    }

    pub fn insert(&mut self, id: PartitionId, task: Task) {
        self.forget_hand_over(id);
        self.tasks.insert(id, task);
    }

    /// Lets a task go: its marks start again from its next owner's checkpoint.
    pub fn remove(&mut self, id: PartitionId) -> Option<Task> {
        self.last_marks.remove(&id);
        self.combine.revoked(id);
        self.forget_hand_over(id);
        self.tasks.remove(&id)
    }

    /// Takes a task out for a moment (to check it against its log); its marks stay. Put it
    /// back with [`TaskSet::insert`].
    pub fn take(&mut self, id: PartitionId) -> Option<Task> {
        self.forget_hand_over(id);
        self.tasks.remove(&id)
    }

    /// The task of upstream `id` changes: what the SKU tasks were handed by the one before
    /// gives no promise about what the next one hands over.
    fn forget_hand_over(&mut self, id: PartitionId) {
        if !is_upstream(id) {
            return;
        }
        for task in self.tasks.values_mut() {
            if let Task::Sku(t) = task {
                t.forget_hand_over((id.source, id.partition));
            }
        }
    }

    pub fn clear(&mut self) {
        let ids: Vec<PartitionId> = self.ids().collect();
        for id in ids {
            self.remove(id);
        }
    }

    pub fn get(&self, id: PartitionId) -> Option<&Task> {
        self.tasks.get(&id)
    }

    pub fn get_mut(&mut self, id: PartitionId) -> Option<&mut Task> {
        self.tasks.get_mut(&id)
    }

    pub fn contains(&self, id: PartitionId) -> bool {
        self.tasks.contains_key(&id)
    }

    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    pub fn ids(&self) -> impl Iterator<Item = PartitionId> + '_ {
        self.tasks.keys().copied()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&PartitionId, &Task)> {
        self.tasks.iter()
    }

    /// The upstream tasks (those that mark the SKU merge: orders and inventory), each with its
    /// topic and next offset.
    pub fn upstreams(&self) -> impl Iterator<Item = (PartitionId, &str, i64)> + '_ {
        self.tasks
            .iter()
            .filter(|(_, task)| matches!(task, Task::Orders(_) | Task::Inventory(_)))
            .map(|(id, task)| (*id, self.sources.topic_of(*id), task.next_offset()))
    }

    pub fn tasks(&self) -> impl Iterator<Item = &Task> {
        self.tasks.values()
    }

    /// The partition a record of `topic` belongs to, if the topic is an input of this set.
    pub fn id_of(&self, topic: &str, partition: i32) -> Option<PartitionId> {
        self.sources.id(topic, partition)
    }

    /// Hands a record of `id` to its task; `None` when no task of the set holds `id`. A
    /// record without a timestamp (possible only on a CreateTime topic accepted with
    /// --allow-create-time) takes the partition's latest append time: from the data, never
    /// the clock or zero.
    pub fn ingest(
        &mut self,
        id: PartitionId,
        rec: Polled<'_>,
        out: &mut Vec<OutputRecord>,
        stats: &Stats,
    ) -> Option<Ingested> {
        let task = self.tasks.get_mut(&id)?;
        Some(ingest_into(task, id, rec, out, stats))
    }

    /// Hands every record of `polled` to its partition's task, like [`TaskSet::ingest`] one by
    /// one, on up to [`TaskSet::set_threads`] threads: each task takes its own records in their order on one
    /// thread, so what a task holds afterwards does not depend on the thread count. `results[i]`
    /// says what became of `polled[i]`. Outputs go to `out` task by task in partition order
    /// (the order across partitions is the poll's anyway, which no output depends on: the SKU
    /// merge orders by logical time).
    pub fn ingest_all(
        &mut self,
        polled: &[(PartitionId, Polled<'_>)],
        out: &mut Vec<OutputRecord>,
        results: &mut Vec<Option<Ingested>>,
        stats: &Stats,
    ) {
        results.clear();
        let threads = self.threads;
        let parallel = threads > 1 && polled.len() >= PARALLEL_FROM && polled.windows(2).any(|w| w[0].0 != w[1].0);
        if !parallel {
            results.extend(polled.iter().map(|(id, rec)| self.ingest(*id, *rec, out, stats)));
            return;
        }
        results.resize(polled.len(), None);
        // One share per task with records here, in partition order.
        let mut shares: Vec<Share<'_>> = Vec::new();
        for (id, task) in self.tasks.iter_mut() {
            shares.push(Share { id: *id, task, records: Vec::new(), out: Vec::new(), results: Vec::new() });
        }
        for (i, (id, _)) in polled.iter().enumerate() {
            if let Ok(at) = shares.binary_search_by_key(id, |s| s.id) {
                shares[at].records.push(i);
            }
        }
        shares.retain(|s| !s.records.is_empty());
        on_threads(
            &mut shares,
            threads,
            |s| s.records.len(),
            |share| {
                for i in &share.records {
                    let (id, rec) = polled[*i];
                    share.results.push(Some(ingest_into(share.task, id, rec, &mut share.out, stats)));
                }
            },
        );
        for share in shares {
            out.extend(share.out);
            for (i, r) in share.records.into_iter().zip(share.results) {
                results[i] = r;
            }
        }
    }

    /// Moves each task past offsets the consumer stepped over without handing a record to the
    /// application (transaction markers, aborted records): everything below the consumer's
    /// position was returned by `poll` and ingested. Without it, a partition whose last record
    /// is a transaction marker never counts as caught up, and its idle promise never releases
    /// the SKU merge.
    pub fn skip_control_records<C: rdkafka::consumer::ConsumerContext>(
        &mut self,
        consumer: &rdkafka::consumer::BaseConsumer<C>,
    ) {
        use rdkafka::consumer::Consumer as _;
        let Ok(positions) = consumer.position() else { return };
        for e in positions.elements() {
            let rdkafka::Offset::Offset(position) = e.offset() else { continue };
            let Some(id) = self.sources.id(e.topic(), e.partition()) else { continue };
            if let Some(task) = self.tasks.get_mut(&id) {
                task.skip_to(position);
            }
        }
    }

    /// Stages every task with new records into `batch` (state, outbox rows, checkpoint) and
    /// emits their outputs into `out` and their new outbox rows into `rows`, in this order:
    /// 1. the upstream tasks (orders, inventory) finish: their lines, snapshots and partials;
    /// 2. `marks` emits their progress promises (the caller's [`TaskSet::marks`]);
    /// 3. with [`TaskSet::set_hand_over`], every line, snapshot and mark in `out` (which must
    ///    hold everything the tasks emitted since the last finish: an inventory task emits its
    ///    snapshots while it ingests) for SKU partitions this set holds is handed to its task;
    /// 4. the SKU and combine tasks finish (a SKU task releases what the promises allow);
    /// 5. the partials the orders tasks emitted are copied to the combine topic by aggregate
    ///    key, and the orders tasks whose maximum event time moved mark every combine
    ///    partition.
    ///
    /// Returns what the batch holds per partition.
    ///
    /// On up to [`TaskSet::set_threads`] threads each task of a step finishes on one thread
    /// into writes of its own ([`DeferredWrites`]); then, in partition order as the loop on
    /// one thread goes, its writes are applied to `batch` and its outputs and rows appended:
    /// the batch, the outputs and the rows are the same whatever the thread count.
    pub fn finish<S: StateView + Sync + ?Sized, W: StateWrite>(
        &mut self,
        store: &S,
        batch: &mut W,
        out: &mut Vec<OutputRecord>,
        rows: &mut Vec<(PartitionId, OutboxRow)>,
        stats: &Stats,
        marks: impl FnOnce(&mut TaskSet, &mut Vec<OutputRecord>),
    ) -> Result<Vec<Finished>, StateError> {
        let from = out.len();
        let publishing = self.publishing;
        for task in self.tasks.values_mut() {
            task.publish(publishing);
        }
        let mut st = Staging { store, batch, out, rows, stats, finished: Vec::new() };
        self.finish_step(&mut st, true)?;
        marks(self, st.out);
        if self.hand_over {
            // All of `out`: an inventory task emits its snapshots while it ingests, and a
            // mark must never reach a SKU task ahead of a record its upstream sent before it.
            self.hand_over(&mut st.out[..]);
        }
        self.finish_step(&mut st, false)?;
        self.combine.forward(st.out, from);
        if publishing {
            self.combine.marks(self.tasks.iter().map(|(id, t)| (id, t.checkpoint())), st.out);
        }
        Ok(st.finished)
    }

    /// Hands every repartition record in `outputs` whose SKU partition has a task here to it
    /// (the record its upstream made, [`OutputRecord::handed`]; the log gets the encoding).
    fn hand_over(&mut self, outputs: &mut [OutputRecord]) {
        for r in outputs {
            let (Sink::Repartition, Some(p)) = (r.sink, r.partition) else { continue };
            let Some(Task::Sku(task)) = self.tasks.get_mut(&PartitionId::sku(p)) else { continue };
            match r.handed.take() {
                Some(derived) => task.hand_over(derived),
                // Only tidemark writes these; one it cannot read goes by the log, where the
                // SKU task dead-letters it.
                None => {
                    if let Ok(derived) = Derived::decode(&r.value) {
                        task.hand_over(derived);
                    }
                }
            }
        }
    }

    /// One step of [`TaskSet::finish`]: the tasks with new records that are upstream tasks
    /// (`upstream`) or the others.
    fn finish_step<S: StateView + Sync + ?Sized, W: StateWrite>(
        &mut self,
        st: &mut Staging<'_, S, W>,
        upstream: bool,
    ) -> Result<(), StateError> {
        let Staging { store, batch, out, rows, stats, finished } = st;
        let (store, stats, batch, out, rows) = (*store, *stats, &mut **batch, &mut **out, &mut **rows);
        let publishing = self.publishing;
        let due = |id: &PartitionId, t: &Task| {
            is_upstream(*id) == upstream && (t.has_uncommitted() || (publishing && t.has_unpublished()))
        };
        let busy = self.tasks.iter().filter(|(id, t)| due(id, t)).count();
        let finished_now = |id: PartitionId, task: &Task| Finished {
            id,
            next_offset: task.next_offset(),
            dedup_horizon: task.dedup_horizon(),
        };
        if self.threads > 1 && busy > 1 {
            let spare = &mut self.spare_writes;
            let mut shares: Vec<Finishing<'_>> = self
                .tasks
                .iter_mut()
                .filter(|(id, t)| due(id, t))
                .map(|(id, task)| Finishing {
                    id: *id,
                    work: task.work(),
                    task,
                    writes: spare.pop().unwrap_or_default(),
                    out: Vec::new(),
                    rows: Vec::new(),
                    result: Ok(()),
                })
                .collect();
            on_threads(
                &mut shares,
                self.threads,
                |s| s.work,
                |share| {
                    share.result = share.task.finish(store, &mut share.writes, &mut share.out, &mut share.rows, stats);
                },
            );
            for mut share in shares {
                share.result?;
                share.writes.apply_to(batch)?;
                out.extend(share.out);
                rows.extend(share.rows);
                finished.push(finished_now(share.id, share.task));
                share.writes.clear();
                self.spare_writes.push(share.writes);
            }
        } else {
            for (id, task) in self.tasks.iter_mut().filter(|(id, t)| due(id, t)) {
                task.finish(store, batch, out, rows, stats)?;
                finished.push(finished_now(*id, task));
            }
        }
        Ok(())
    }

    /// Progress promises of the upstream tasks `include` selects, to every SKU partition. A
    /// task with new records promises its effective append time; one that `idle_bound` says is
    /// caught up promises that bound (when the broker was last seen with nothing more for it,
    /// less its clock skew). Each is sent only when it moved.
    pub fn marks(
        &mut self,
        include: impl Fn(PartitionId) -> bool,
        idle_bound: impl Fn(PartitionId, &Task) -> Option<i64>,
        out: &mut Vec<OutputRecord>,
    ) {
        let sku_partitions = self.factory.sku_partitions;
        if sku_partitions == 0 {
            return;
        }
        for (id, task) in self.tasks.iter().filter(|(id, _)| include(**id)) {
            let Some(mark) = task.mark(idle_bound(*id, task)) else { continue };
            let Derived::Mark { bound, .. } = &mark else { continue };
            if self.last_marks.get(id).is_some_and(|last| *bound <= *last) {
                continue;
            }
            self.last_marks.insert(*id, *bound);
            for p in 0..sku_partitions {
                out.push(OutputRecord::derived(mark.clone(), p));
            }
        }
    }

    /// Adds what the tasks hold in memory to `held`.
    pub fn held(&self, held: &mut crate::engine::held::Held) {
        for task in self.tasks.values() {
            task.held(held);
        }
    }
}
