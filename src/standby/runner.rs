//! The standby thread: poll, ingest, commit state and checkpoints; outputs dropped.
//!
//! It keeps a task for every input partition the active tasks do not hold (`all`), or for
//! those placed here (a count of copies): it reads the group's description every
//! [`PLACE_EVERY`], places the copies ([`super::placement`]), adopts the partitions newly
//! placed here and lets go of those placed elsewhere (after a commit). Its consumer
//! never joins the group: it is assigned the standby partitions at their checkpoints, and
//! reassigned when the set changes (a promotion or a demotion, both rare). It reads the
//! offsets the group's members committed (every 0.5 s) and pauses a partition at that
//! limit: past it, the owner's outputs may not exist yet, and a task promoted from there
//! would skip them. Each commit is one `WriteBatch`
//! of state, outbox rows and checkpoints, as on the stream thread, without the outputs: the
//! active owner wrote them. Nothing here may stop the process: a failed commit drops every
//! standby task and restores them from their last checkpoint a little later; a partition
//! whose checkpoint lies outside its log is left to its active owner (`--accept-gaps`).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::{Message, Offset, TopicPartitionList};
use tidemark_state::{codec, PartitionId, Store};
use tidemark_topology::config::Topology;
use tracing::{info, warn};

use super::group::{self, GroupView};
use super::{audit_tail, placement, Copies, Request, Standbys};
use crate::engine::outbox::OutboxRow;
use crate::engine::{OutputRecord, Stats};
use crate::kafka::client_log::EofIsNotAnError;
use crate::kafka::KafkaSettings;
use crate::tasks::{Polled, State, Task, TaskFactory, TaskSet, SKU_REPARTITION};

/// How often the owners' committed offsets (each standby task's limit) are read.
const LIMITS_EVERY: Duration = Duration::from_millis(500);
/// Limits older than this say nothing about warmth (the group coordinator did not answer).
const LIMITS_FRESH: Duration = Duration::from_secs(5);
/// Pause before restoring every standby task after a failed commit.
const RETRY_AFTER: Duration = Duration::from_secs(5);
/// How often final rows past retention are deleted from standby outboxes.
const EXPIRE_EVERY: Duration = Duration::from_secs(600);
/// How often partitions that could not be adopted (the broker did not answer: topics
/// created a moment ago elect their leaders) and a tail that did not start are tried again.
const RETRY_EVERY: Duration = Duration::from_secs(5);
/// With a count of copies: how often the group's description is read to place them again
/// (off the hot path: one DescribeGroups request).
const PLACE_EVERY: Duration = Duration::from_secs(3);

pub struct StandbyConfig {
    pub settings: KafkaSettings,
    /// The processors' consumer group: its committed offsets bound the standby tasks.
    pub group_id: String,
    pub topology: Topology,
    pub store: Arc<Store>,
    pub standbys: Arc<Standbys>,
    /// Imports a partition's newest snapshot first when it is ahead of the store.
    pub restorer: Option<Arc<crate::snapshot::Restorer>>,
    pub stop: Arc<AtomicBool>,
    /// The process's task states: a standby task claims its partition there first.
    pub lifecycle: Arc<crate::tasks::Lifecycle>,
    /// `all`, or how many copies of each partition the group keeps.
    pub copies: Copies,
    /// This process's name in the group (`--instance-id`), for the placement.
    pub me: String,
}

type Consumer_ = BaseConsumer<EofIsNotAnError>;

struct Runner {
    cfg: StandbyConfig,
    consumer: Consumer_,
    active: Arc<Mutex<BTreeSet<PartitionId>>>,
    tasks: TaskSet,
    /// Partitions whose checkpoint lies outside their log: left to the active owner.
    left: BTreeSet<PartitionId>,
    out: Vec<OutputRecord>,
    rows: Vec<(PartitionId, OutboxRow)>,
    stats: Stats,
    pending: VecDeque<Request>,
    expired_at: Instant,
    warned_at: Option<Instant>,
    /// Per standby partition, the offset its active owner last committed (0 when none has):
    /// a standby task never processes past it. Its outputs were dropped, so a promoted task
    /// must resume where the owner's outputs are known to exist.
    limits: BTreeMap<PartitionId, i64>,
    limits_at: Option<Instant>,
    /// Partitions paused at their limit.
    held: BTreeSet<PartitionId>,
    /// Partitions whose adoption failed for want of an answer, tried again every
    /// [`RETRY_EVERY`].
    retry: BTreeSet<PartitionId>,
    retried_at: Instant,
    tail: Option<JoinHandle<()>>,
    tail_started: bool,
    /// With a count of copies: the group as last read, the partitions placed here (`None`
    /// until the group was read once) and when it was read.
    view: Option<GroupView>,
    placed: Option<BTreeSet<PartitionId>>,
    placed_at: Option<Instant>,
    /// The standby partitions the per-partition gauge shows.
    shown: BTreeSet<PartitionId>,
}

/// Starts the standby thread. It first stands by for every partition the active tasks do
/// not hold, then starts the audit tail, then follows `requests`.
pub fn spawn(cfg: StandbyConfig, requests: Receiver<Request>) -> anyhow::Result<JoinHandle<()>> {
    let t = &cfg.topology;
    let sources = crate::tasks::Sources::of(t);
    // The processors' group, to read the offsets its members committed (the limits below).
    // This consumer never subscribes, so it never joins the group, and it never commits.
    let consumer: Consumer_ = cfg
        .settings
        .log_reader_config(&cfg.group_id)
        .create_with_context(EofIsNotAnError)
        .context("creating the standby consumer")?;
    let topics = sources.names();
    let counts = crate::stream::partition_counts(&consumer, &topics, &cfg.stop)?;
    let tasks = TaskSet::new(TaskFactory::new(t, [counts[0], counts[1], counts[2], counts[3]]), sources);
    let active = cfg.standbys.active();
    let runner = Runner {
        cfg,
        consumer,
        active,
        tasks,
        left: BTreeSet::new(),
        out: Vec::new(),
        rows: Vec::new(),
        stats: Stats::default(),
        pending: VecDeque::new(),
        expired_at: Instant::now(),
        warned_at: None,
        limits: BTreeMap::new(),
        limits_at: None,
        held: BTreeSet::new(),
        retry: BTreeSet::new(),
        retried_at: Instant::now(),
        tail: None,
        tail_started: false,
        view: None,
        placed: None,
        placed_at: None,
        shown: BTreeSet::new(),
    };
    std::thread::Builder::new()
        .name("tidemark-standby".into())
        .spawn(move || runner.run(&requests))
        .context("starting the standby thread")
}

impl Runner {
    fn run(mut self, requests: &Receiver<Request>) {
        if self.cfg.copies == Copies::All {
            let everything: Vec<PartitionId> = self.tasks.factory().all_partitions().collect();
            self.adopt(&everything);
        } else {
            self.place();
        }
        self.start_tail();
        let stop = Arc::clone(&self.cfg.stop);
        let interval = Duration::from_millis(self.cfg.topology.commit_interval_ms.max(1));
        while !stop.load(Ordering::Relaxed) {
            while let Some(request) = self.pending.pop_front().or_else(|| requests.try_recv().ok()) {
                match request {
                    Request::Release(ids, ack) => {
                        self.release(&ids);
                        let _ = ack.send(());
                    }
                    Request::Adopt(ids) => self.adopt(&ids),
                }
            }
            self.place();
            self.refresh_limits();
            self.poll_for(interval, requests);
            if let Err(e) = self.commit() {
                warn!(error = %format!("{e:#}"), "standby commit failed; restoring every standby task from its checkpoint");
                self.reset();
            }
            self.publish();
            self.expire();
            self.retry();
        }
        if let Err(e) = self.commit() {
            warn!(error = %format!("{e:#}"), "final standby commit failed");
        }
        if let Some(t) = self.tail.take() {
            let _ = t.join();
        }
        info!("standby tasks stopped");
    }

    /// Starts the audit tail from where the standby SKU tasks resume (see [`audit_tail`]).
    fn start_tail(&mut self) {
        let since = self.audit_since();
        match self.cfg.standbys.tail.start(since, Arc::clone(&self.cfg.stop)) {
            Ok(t) => {
                self.tail = t;
                self.tail_started = true;
            }
            Err(e) => warn!(
                error = %format!("{e:#}"),
                "the audit tail did not start (tried again in {RETRY_EVERY:?}); until it runs, standby rows stay waiting"
            ),
        }
    }

    /// Adopts again the partitions that could not be adopted, and starts the audit tail if it
    /// did not start.
    fn retry(&mut self) {
        if self.retried_at.elapsed() < RETRY_EVERY {
            return;
        }
        self.retried_at = Instant::now();
        if !self.retry.is_empty() {
            let ids: Vec<PartitionId> =
                std::mem::take(&mut self.retry).into_iter().filter(|id| self.is_placed(*id)).collect();
            self.adopt(&ids);
        }
        if !self.tail_started {
            self.start_tail();
        }
    }

    fn topic_of(&self, id: PartitionId) -> &str {
        self.tasks.sources().topic_of(id)
    }

    /// Gives up the lifecycle claim on `id` if the standby thread holds it (an active task
    /// may then begin); a partition an active task holds is left as it is.
    fn unclaim(&self, id: PartitionId) {
        if self.cfg.lifecycle.state(id) == State::Standby {
            self.cfg.lifecycle.note(id, State::Closed);
        }
    }

    fn is_active(&self, id: PartitionId) -> bool {
        self.active.lock().map(|a| a.contains(&id)).unwrap_or(true)
    }

    fn poll_for(&mut self, interval: Duration, requests: &Receiver<Request>) {
        let deadline = Instant::now() + interval;
        let max_batch = self.cfg.topology.max_batch_records;
        let mut taken = 0usize;
        while taken < max_batch && !self.cfg.stop.load(Ordering::Relaxed) {
            if let Ok(r) = requests.try_recv() {
                self.pending.push_back(r);
                return;
            }
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            match self.consumer.poll((deadline - now).min(Duration::from_millis(100))) {
                None => {}
                Some(Err(e)) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::AutoOffsetReset) => {
                    warn!(error = %e, "standby: a fetch position is outside the log");
                    self.check_logs();
                    self.reassign();
                }
                Some(Err(e)) if self.warned_at.is_none_or(|at| at.elapsed() >= Duration::from_secs(60)) => {
                    warn!(error = %e, "standby consumer error");
                    self.warned_at = Some(Instant::now());
                }
                Some(Err(_)) => {}
                Some(Ok(msg)) => {
                    let Some(id) = self.tasks.id_of(msg.topic(), msg.partition()) else { continue };
                    if msg.offset() >= self.limits.get(&id).copied().unwrap_or(0) {
                        // Records already fetched past the limit still arrive after the
                        // pause; the first one rewound the partition, the rest are dropped.
                        if !self.held.contains(&id) {
                            self.hold(id, msg.offset());
                        }
                        continue;
                    }
                    if self.tasks.ingest(id, Polled::of(&msg), &mut self.out, &self.stats).is_some_and(|i| i.counted) {
                        taken += 1;
                    }
                    // The active owner writes the outputs.
                    self.out.clear();
                }
            }
        }
    }

    /// Stands by for `ids` (those the active tasks do not hold): each is imported from its
    /// newest snapshot when that is ahead of the store, then resumed from its checkpoint.
    fn adopt(&mut self, ids: &[PartitionId]) {
        let started = Instant::now();
        let mut adopted = 0usize;
        for &id in ids {
            if self.tasks.contains(id) || self.is_active(id) || !self.is_placed(id) {
                continue;
            }
            // Claimed first, so the import below never lands on an active task's state.
            if let Err(refused) = self.cfg.lifecycle.enter(id, State::Standby) {
                warn!(partition = %id, error = %refused, "not standing by: the partition is active here");
                continue;
            }
            if let Some(r) = &self.cfg.restorer {
                r.restore_if_ahead(&self.cfg.store, id);
            }
            let task = match self.tasks.restore(self.cfg.store.as_ref(), id) {
                Ok(task) => task,
                Err(e) => {
                    warn!(partition = %id, error = %e, "standby task not restored; tried again later");
                    self.retry.insert(id);
                    self.unclaim(id);
                    continue;
                }
            };
            if !self.within_log(id, task.next_offset()) {
                self.unclaim(id);
                continue;
            }
            if id.source == SKU_REPARTITION {
                self.hold_pending_rows(id);
            }
            self.left.remove(&id);
            self.tasks.insert(id, task);
            adopted += 1;
        }
        if adopted > 0 {
            info!(
                adopted,
                standing_by = self.tasks.len(),
                took_ms = started.elapsed().as_millis() as u64,
                "standby tasks adopted"
            );
            self.reassign();
        }
    }

    /// Rows pending in a newly adopted outbox (left by an earlier spell as active or
    /// standby) wait for their outcome like the rows the task derives.
    fn hold_pending_rows(&self, id: PartitionId) {
        match self.cfg.store.outbox_pending(id) {
            Ok(rows) => {
                for (_, bytes) in rows {
                    if let Ok(row) = codec::decode::<OutboxRow>("outbox row", &bytes) {
                        self.cfg.standbys.rows.derived(id, row);
                    }
                }
            }
            Err(e) => warn!(partition = %id, error = %e, "cannot read the pending rows of a standby outbox"),
        }
    }

    /// Whether `next` lies within the partition's log; otherwise the partition is left to its
    /// active owner, which stops on a gap or skips it with `--accept-gaps` (SPEC §1.4).
    fn within_log(&mut self, id: PartitionId, next: i64) -> bool {
        let topic = self.topic_of(id).to_string();
        match self.consumer.fetch_watermarks(&topic, id.partition, Duration::from_secs(10)) {
            Ok((low, high)) if next >= low && next <= high => true,
            Ok((low, high)) => {
                if self.left.insert(id) {
                    warn!(partition = %id, next_offset = next, log_start = low, log_end = high, "no standby: the checkpoint lies outside the log; left to the active owner");
                }
                false
            }
            Err(e) => {
                warn!(partition = %id, error = %e, "cannot read the log bounds; standing by for it is tried again later");
                self.retry.insert(id);
                false
            }
        }
    }

    /// After a fetch position fell outside a log: drops the standby tasks whose checkpoint is
    /// no longer within it.
    fn check_logs(&mut self) {
        let ids: Vec<(PartitionId, i64)> = self.tasks.iter().map(|(id, t)| (*id, t.next_offset())).collect();
        for (id, next) in ids {
            if !self.within_log(id, next) {
                self.tasks.remove(id);
                self.unclaim(id);
            }
        }
    }

    /// Pauses a partition that reached its limit, at `offset` (the record not processed).
    fn hold(&mut self, id: PartitionId, offset: i64) {
        let topic = self.topic_of(id).to_string();
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&topic, id.partition);
        if let Err(e) = self.consumer.pause(&tpl) {
            warn!(partition = %id, error = %e, "cannot pause a standby partition");
        }
        if let Err(e) = self.consumer.seek(&topic, id.partition, Offset::Offset(offset), Duration::from_secs(1)) {
            warn!(partition = %id, error = %e, "cannot rewind a standby partition; fetching it again");
            self.reassign();
            return;
        }
        self.held.insert(id);
    }

    /// Reads the offsets the active owners committed, every [`LIMITS_EVERY`], and resumes
    /// held partitions whose limit moved past them.
    fn refresh_limits(&mut self) {
        if self.limits_at.is_some_and(|at| at.elapsed() < LIMITS_EVERY) || self.tasks.is_empty() {
            return;
        }
        let mut tpl = TopicPartitionList::new();
        for id in self.tasks.ids() {
            tpl.add_partition(self.topic_of(id), id.partition);
        }
        let committed = match self.consumer.committed_offsets(tpl, Duration::from_secs(5)) {
            Ok(c) => c,
            Err(e) => {
                if self.warned_at.is_none_or(|at| at.elapsed() >= Duration::from_secs(60)) {
                    warn!(error = %e, "cannot read the group's committed offsets; standby tasks wait");
                    self.warned_at = Some(Instant::now());
                }
                return;
            }
        };
        self.limits_at = Some(Instant::now());
        let mut resume = TopicPartitionList::new();
        for e in committed.elements() {
            let Some(id) = self.tasks.id_of(e.topic(), e.partition()) else { continue };
            let limit = match e.offset() {
                Offset::Offset(o) => o,
                _ => 0,
            };
            self.limits.insert(id, limit);
            let next = self.tasks.get(id).map_or(i64::MAX, Task::next_offset);
            if self.held.contains(&id) && limit > next {
                self.held.remove(&id);
                resume.add_partition(e.topic(), e.partition());
            }
        }
        if resume.count() > 0 {
            if let Err(e) = self.consumer.resume(&resume) {
                warn!(error = %e, "cannot resume standby partitions");
            }
        }
    }

    /// Fetches every standby partition from its task's next offset.
    fn reassign(&mut self) {
        self.held.clear();
        let mut tpl = TopicPartitionList::new();
        for (id, task) in self.tasks.iter() {
            let _ = tpl.add_partition_offset(self.topic_of(*id), id.partition, Offset::Offset(task.next_offset()));
        }
        if let Err(e) = self.consumer.assign(&tpl) {
            warn!(error = %e, "cannot assign the standby partitions");
        }
        // librdkafka keeps a partition paused across assignments until it is resumed: one held
        // at its limit before this would never be fetched again.
        if let Err(e) = self.consumer.resume(&tpl) {
            warn!(error = %e, "cannot resume the standby partitions");
        }
    }

    /// Commits, then lets `ids` go to the active tasks.
    fn release(&mut self, ids: &[PartitionId]) {
        if let Err(e) = self.commit() {
            warn!(error = %format!("{e:#}"), "standby commit before a promotion failed; the active task replays from the last one");
        }
        if self.hand_over(ids) {
            self.reassign();
        }
    }

    /// Drops the tasks of `ids`, taken by the active tasks: they resume from this thread's
    /// last commit. Whether any was held.
    fn hand_over(&mut self, ids: &[PartitionId]) -> bool {
        let held: Vec<PartitionId> = ids.iter().copied().filter(|id| self.tasks.contains(*id)).collect();
        for id in ids {
            self.tasks.remove(*id);
            self.unclaim(*id);
            self.retry.remove(id);
        }
        if !held.is_empty() {
            info!(partitions = %names(&held), "standby copies promoted: their active tasks resume from the standby's last commit");
        }
        !held.is_empty()
    }

    /// Drops every task and restores them from the store (after a failed commit).
    fn reset(&mut self) {
        let ids: Vec<PartitionId> = self.tasks.ids().collect();
        self.tasks.clear();
        self.rows.clear();
        self.out.clear();
        std::thread::sleep(RETRY_AFTER);
        self.adopt(&ids);
    }

    /// Moves tasks past transaction markers and aborted records (as the stream thread does).
    fn skip_control_records(&mut self) {
        self.tasks.skip_control_records(&self.consumer);
    }

    /// One `WriteBatch` of every standby task's state, outbox rows and checkpoint (a
    /// partition the active tasks took meanwhile is dropped first, never written).
    fn commit(&mut self) -> anyhow::Result<()> {
        let taken: Vec<PartitionId> = self.tasks.ids().filter(|id| self.is_active(*id)).collect();
        self.hand_over(&taken);
        self.skip_control_records();
        let store = Arc::clone(&self.cfg.store);
        let mut batch = store.batch();
        let finished =
            self.tasks.finish(store.as_ref(), &mut batch, &mut self.out, &mut self.rows, &self.stats, |_, _| {})?;
        // The active owner writes the outputs.
        self.out.clear();
        if batch.is_empty() {
            return Ok(());
        }
        store.commit_staged(batch.stage())?;
        for f in finished {
            if let Some(h) = f.dedup_horizon {
                store.set_dedup_horizon(f.id, h);
            }
        }
        for (id, row) in self.rows.drain(..) {
            self.cfg.standbys.rows.derived(id, row);
        }
        Ok(())
    }

    /// Lag and warmth, against the limits: warm once every standby task is at most one
    /// commit's worth of records behind what its owner committed (freshly read).
    fn publish(&mut self) {
        let fresh = self.limits_at.is_some_and(|at| at.elapsed() <= LIMITS_FRESH);
        let mut lag = 0i64;
        let placed = self.cfg.copies != Copies::All && self.placed.is_none();
        let mut warm = (fresh || self.tasks.is_empty()) && self.retry.is_empty() && !placed;
        let slack = i64::try_from(self.cfg.topology.max_batch_records).unwrap_or(i64::MAX);
        for (id, task) in self.tasks.iter() {
            let behind = (self.limits.get(id).copied().unwrap_or(0) - task.next_offset()).max(0);
            lag += behind;
            warm &= behind <= slack;
        }
        self.cfg.standbys.warm.store(warm, Ordering::Relaxed);
        crate::telemetry::standby::tasks(self.tasks.len(), lag, warm);
        let now: BTreeSet<PartitionId> = self.tasks.ids().collect();
        if now != self.shown {
            let changed = now.symmetric_difference(&self.shown).map(|id| (*id, now.contains(id)));
            crate::telemetry::standby::partitions(changed.collect::<Vec<_>>());
            self.shown = now;
        }
        self.cfg.standbys.rows.publish();
    }

    /// Whether a standby task for `id` belongs here: any partition with `all`, the placed
    /// ones with a count (none before the group was read).
    fn is_placed(&self, id: PartitionId) -> bool {
        match self.cfg.copies {
            Copies::Count(_) => self.placed.as_ref().is_some_and(|p| p.contains(&id)),
            _ => true,
        }
    }

    /// With a count of copies, every [`PLACE_EVERY`]: reads the group, places the copies,
    /// lets go of the partitions placed elsewhere now and adopts those newly placed here.
    fn place(&mut self) {
        let Copies::Count(n) = self.cfg.copies else { return };
        if self.placed_at.is_some_and(|at| at.elapsed() < PLACE_EVERY) {
            return;
        }
        self.placed_at = Some(Instant::now());
        let view =
            match group::describe(&self.consumer, &self.cfg.group_id, self.tasks.sources(), Duration::from_secs(5)) {
                Ok(v) => v,
                Err(e) => {
                    if self.warned_at.is_none_or(|at| at.elapsed() >= Duration::from_secs(60)) {
                        warn!(error = %e, "cannot read the group's members; standby placement kept as it is");
                        self.warned_at = Some(Instant::now());
                    }
                    return;
                }
            };
        // Mid-rebalance the assignments are empty or stale: the placement waits for the
        // result rather than moving copies twice (the first one is made whatever the state).
        if self.placed.is_some() && (!view.stable || self.view.as_ref() == Some(&view)) {
            return;
        }
        let all: Vec<PartitionId> = self.tasks.factory().all_partitions().collect();
        let placed = placement::standby_placement(&all, &view.owners, &view.members, usize::from(n), &self.cfg.me);
        // A copy the group just gave to this process stays until the rebalance callback
        // promotes it (the broker can describe the new assignment before the callback runs).
        let mine = |id: &PartitionId| view.owners.get(id).is_some_and(|o| *o == self.cfg.me);
        let gone: Vec<PartitionId> = self.tasks.ids().filter(|id| !placed.contains(id) && !mine(id)).collect();
        let new: Vec<PartitionId> = placed.iter().copied().filter(|id| !self.tasks.contains(*id)).collect();
        if self.placed.as_ref() != Some(&placed) {
            info!(
                copies = n,
                members = ?view.members,
                placed_here = %names(&placed),
                "standby copies placed"
            );
        }
        self.view = Some(view);
        self.cfg.standbys.set_placed(placed.clone());
        self.placed = Some(placed);
        self.retry.retain(|id| self.placed.as_ref().is_some_and(|p| p.contains(id)));
        if !gone.is_empty() {
            self.let_go(&gone);
        }
        self.adopt(&new);
    }

    /// Stops standing by for `ids`, placed elsewhere now, after a commit: their state stays in
    /// the store (the janitor deletes it after `--drop-moved-after`, unless they come back).
    fn let_go(&mut self, ids: &[PartitionId]) {
        if let Err(e) = self.commit() {
            warn!(error = %format!("{e:#}"), "standby commit before letting partitions go failed; they keep their last commit");
        }
        for id in ids {
            self.tasks.remove(*id);
            self.unclaim(*id);
            self.held.remove(id);
            self.limits.remove(id);
        }
        let sku: Vec<i32> = ids.iter().filter(|id| id.source == SKU_REPARTITION).map(|id| id.partition).collect();
        // Their rows stay pending in the store; a later adoption holds them again.
        self.cfg.standbys.rows.promoted(&sku);
        info!(partitions = %names(ids), "standby tasks let go: their copies are placed on other members now");
        self.reassign();
    }

    /// Final rows past retention leave standby outboxes as they leave active ones.
    fn expire(&mut self) {
        if self.expired_at.elapsed() < EXPIRE_EVERY {
            return;
        }
        self.expired_at = Instant::now();
        let retention = self.cfg.topology.dedup_retention_ms;
        for id in self.tasks.ids().filter(|id| id.source == SKU_REPARTITION) {
            if let Err(e) = self.cfg.store.outbox_expire(id, retention, 10_000) {
                warn!(partition = %id, error = %e, "cannot expire standby outbox rows");
            }
        }
    }

    /// Where the audit tail starts: a margin before the oldest append time a standby SKU
    /// task resumes from (its checkpoint, or a row still pending); the topic's start when
    /// one has no state yet.
    fn audit_since(&self) -> Option<i64> {
        let mut since: Option<i64> = None;
        for (id, task) in self.tasks.iter().filter(|(id, _)| id.source == SKU_REPARTITION) {
            let c = task.checkpoint();
            if c.next_offset == 0 {
                return None;
            }
            let mut oldest = c.max_append_ms;
            if let Ok(rows) = self.cfg.store.outbox_pending(*id) {
                for (_, bytes) in rows {
                    if let Ok(row) = codec::decode::<OutboxRow>("outbox row", &bytes) {
                        oldest = oldest.min(row.source_append_ms);
                    }
                }
            }
            since = Some(since.map_or(oldest, |s: i64| s.min(oldest)));
        }
        since.map(|s| s - audit_tail::MARGIN_MS)
    }
}

/// `orders[3], sku-repartition[7]`: partitions as operators name them.
fn names<'a>(ids: impl IntoIterator<Item = &'a PartitionId>) -> String {
    ids.into_iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}
