//! The stream thread: poll, process per partition, commit; repeat.
//!
//! One OS thread owns the consumer, the tasks and the producer (rdkafka's `BaseConsumer` is
//! several times faster per message than the stream consumer). Blocking here is fine: no
//! async executor runs on this thread.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{Message, Offset, TopicPartitionList};
use tidemark_state::{PartitionId, Store, StoreOptions};
use tidemark_topology::config::Topology;
use tracing::{info, warn};

use crate::engine::{OutputRecord, PartitionTask, SourceRecord, Stats, TaskConfig};
use crate::failpoint;
use crate::kafka::context::{AssignmentEvent, TaskContext};
use crate::kafka::sink::OutputSink;
use crate::kafka::KafkaSettings;
use crate::telemetry::events::Latencies;
use crate::telemetry::Progress;

/// Source index of the orders topic in `PartitionId::source`.
pub const ORDERS_SOURCE: u16 = 0;

#[derive(Clone)]
pub struct StreamOptions {
    pub settings: KafkaSettings,
    pub topology: Topology,
    pub state_dir: PathBuf,
    pub group_id: String,
    /// Static group membership (`group.instance.id`), e.g. the StatefulSet pod name.
    pub instance_id: Option<String>,
    pub stop: Arc<AtomicBool>,
    pub stats: Arc<Stats>,
    /// When set (and once the flag inside is true), stop as soon as every assigned partition
    /// has reached the end of the log (batch-like runs, tests, the demo).
    pub exit_at_end: Option<Arc<AtomicBool>>,
    /// See `tidemark run --allow-partial-rebuild`.
    pub allow_partial_rebuild: bool,
    pub progress: Arc<Progress>,
}

type Consumer_ = BaseConsumer<TaskContext>;

struct Runner {
    opts: StreamOptions,
    store: Arc<Store>,
    sink: OutputSink,
    tasks: BTreeMap<i32, PartitionTask>,
    out: Vec<OutputRecord>,
    task_cfg: TaskConfig,
    at_end: BTreeMap<i32, bool>,
    latencies: Latencies,
    /// When the oldest record of the current batch was consumed.
    batch_started: Option<Instant>,
    paused: bool,
}

/// Runs until `stop` is set (SIGTERM/SIGINT) or, with `exit_at_end`, the log is drained.
/// Returns after a final commit: nothing processed is lost on a clean stop.
pub fn run(opts: StreamOptions) -> anyhow::Result<()> {
    let t = &opts.topology;
    std::fs::create_dir_all(&opts.state_dir).with_context(|| format!("creating {}", opts.state_dir.display()))?;
    let store = Arc::new(Store::open(
        &opts.state_dir,
        &StoreOptions { owner: format!("{}/{}", t.name, opts.group_id), ..StoreOptions::default() },
    )?);
    let context = TaskContext {
        store: Arc::clone(&store),
        sources: vec![t.orders.topic.clone()],
        events: Mutex::new(Vec::new()),
        stats: Arc::clone(&opts.stats),
    };
    let mut cfg = opts.settings.client_config();
    cfg.set("group.id", &opts.group_id)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", "read_committed")
        .set("statistics.interval.ms", "1000")
        .set("enable.partition.eof", if opts.exit_at_end.is_some() { "true" } else { "false" })
        .set("session.timeout.ms", "30000")
        .set("fetch.wait.max.ms", "50");
    if let Some(id) = &opts.instance_id {
        cfg.set("group.instance.id", id);
    }
    let consumer: Consumer_ = cfg.create_with_context(context).context("creating consumer")?;
    consumer.subscribe(&[t.orders.topic.as_str()]).context("subscribing")?;
    info!(kafka = %opts.settings.redacted(), group = %opts.group_id, state = %opts.state_dir.display(), "stream started");
    let sink = OutputSink::new(&opts.settings, t)?;
    let task_cfg = TaskConfig {
        topic: t.orders.topic.clone(),
        window: t.dashboard_window,
        dedup_retention_ms: t.dedup_retention_ms,
    };
    let mut runner = Runner {
        opts,
        store,
        sink,
        tasks: BTreeMap::new(),
        out: Vec::new(),
        task_cfg,
        at_end: BTreeMap::new(),
        latencies: Latencies::default(),
        batch_started: None,
        paused: false,
    };
    runner.run_loop(&consumer)
}

impl Runner {
    fn run_loop(&mut self, consumer: &Consumer_) -> anyhow::Result<()> {
        let interval = Duration::from_millis(self.opts.topology.commit_interval_ms);
        let max_batch = self.opts.topology.max_batch_records;
        loop {
            let deadline = Instant::now() + interval;
            let mut taken = 0usize;
            while taken < max_batch && !self.opts.stop.load(Ordering::Relaxed) {
                self.opts.progress.beat();
                self.apply_pause(consumer);
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                let polled = consumer.poll((deadline - now).min(Duration::from_millis(100)));
                self.handle_assignment(consumer)?;
                match polled {
                    None => {}
                    Some(Err(rdkafka::error::KafkaError::PartitionEOF(p))) => {
                        self.at_end.insert(p, true);
                    }
                    Some(Err(e)) => warn!(error = %e, "consumer error"),
                    Some(Ok(msg)) => {
                        let p = msg.partition();
                        self.at_end.insert(p, false);
                        let Some(task) = self.tasks.get_mut(&p) else { continue };
                        let append_ms = msg.timestamp().to_millis().unwrap_or(0);
                        let rec =
                            SourceRecord { key: msg.key(), value: msg.payload(), append_ms, offset: msg.offset() };
                        if task.ingest(rec, &mut self.out, &self.opts.stats) {
                            taken += 1;
                            let age_ms = chrono::Utc::now().timestamp_millis() - append_ms;
                            self.latencies.append_to_consume.record(age_ms.max(0) as f64 / 1000.0);
                            self.batch_started.get_or_insert_with(Instant::now);
                        }
                    }
                }
            }
            self.commit(consumer)?;
            if self.opts.stop.load(Ordering::Relaxed) {
                break;
            }
            let exit_armed = self.opts.exit_at_end.as_ref().is_some_and(|f| f.load(Ordering::Relaxed));
            if exit_armed && self.drained() {
                info!("every assigned partition is at the end of the log");
                break;
            }
        }
        consumer.unsubscribe();
        info!("stream stopped after final commit");
        Ok(())
    }

    /// Applies `POST /pause` and `POST /resume` to the consumer's current assignment.
    fn apply_pause(&mut self, consumer: &Consumer_) {
        let want = self.opts.progress.paused.load(Ordering::Relaxed);
        if want == self.paused {
            return;
        }
        let Ok(assignment) = consumer.assignment() else { return };
        let result = if want { consumer.pause(&assignment) } else { consumer.resume(&assignment) };
        match result {
            Ok(()) => {
                self.paused = want;
                info!(paused = want, "consumption {}", if want { "paused" } else { "resumed" });
            }
            Err(e) => warn!(error = %e, "cannot change pause state"),
        }
    }

    fn drained(&self) -> bool {
        !self.tasks.is_empty() && self.tasks.keys().all(|p| self.at_end.get(p).copied().unwrap_or(false))
    }

    fn handle_assignment(&mut self, consumer: &Consumer_) -> anyhow::Result<()> {
        for event in consumer.context().take_events() {
            match event {
                AssignmentEvent::Revoked(ids) => {
                    // Keep the work done so far: commit, then let the partitions go.
                    self.commit(consumer)?;
                    for id in ids {
                        self.tasks.remove(&id.partition);
                        self.at_end.remove(&id.partition);
                        self.opts.progress.revoked(id.partition);
                    }
                    self.opts.stats.assigned.store(self.tasks.len() as i64, Ordering::Relaxed);
                }
                AssignmentEvent::Assigned(ids) => {
                    for id in ids {
                        failpoint::hit("restore.mid");
                        let task = PartitionTask::restore(&self.store, id, self.task_cfg.clone())
                            .with_context(|| format!("restoring partition {id}"))?;
                        if task.checkpoint().records == 0 {
                            self.check_full_log(consumer, id)?;
                        }
                        info!(partition = %id, next_offset = task.next_offset(), "restored");
                        self.opts.progress.assigned(id.partition, task.next_offset());
                        self.tasks.insert(id.partition, task);
                    }
                    self.opts.stats.assigned.store(self.tasks.len() as i64, Ordering::Relaxed);
                    // A fresh assignment is unpaused; the loop re-applies a pause in force.
                    self.paused = false;
                }
            }
        }
        Ok(())
    }

    /// A partition with no state here is rebuilt from the start of the log; refuse when the
    /// log no longer starts at offset 0, since the rebuilt state would silently miss records.
    fn check_full_log(&self, consumer: &Consumer_, id: PartitionId) -> anyhow::Result<()> {
        let topic = &self.opts.topology.orders.topic;
        let (low, _) = consumer
            .fetch_watermarks(topic, id.partition, Duration::from_secs(30))
            .with_context(|| format!("reading the log start of {topic}/{}", id.partition))?;
        if low > 0 && !self.opts.allow_partial_rebuild {
            anyhow::bail!(
                "{topic}/{} has no state in {} and its log starts at offset {low}, not 0: a rebuild would miss records. \
                 Restore the state directory, or pass --allow-partial-rebuild to accept it",
                id.partition,
                self.opts.state_dir.display()
            );
        }
        Ok(())
    }

    /// Makes everything processed so far durable, in this order:
    /// 1. each task stages its dedup entries, aggregates, expiries and checkpoint into one
    ///    `WriteBatch` and emits its changed aggregates;
    /// 2. every output record is produced and acknowledged by the broker;
    /// 3. the batch is written with fsync: state and input offsets move together;
    /// 4. the group's committed offsets follow (for lag tools; tidemark never reads them).
    ///
    /// A crash before 3 replays from the previous checkpoint and reproduces the same
    /// outputs; a crash after 3 resumes after it. Either way no output is lost.
    fn commit(&mut self, consumer: &Consumer_) -> anyhow::Result<()> {
        let mut batch = self.store.batch();
        let mut progressed = Vec::new();
        for task in self.tasks.values_mut().filter(|t| t.has_uncommitted()) {
            task.finish(&self.store, &mut batch, &mut self.out, &self.opts.stats)?;
            progressed.push((task.id(), task.next_offset()));
        }
        Stats::add(&self.opts.stats.outputs, self.out.len() as u64);
        self.sink.send_all(&mut self.out)?;
        failpoint::hit("commit.before_outputs_flushed");
        let progress = Arc::clone(&self.opts.progress);
        self.sink.flush(&move || progress.beat())?;
        failpoint::hit("commit.after_outputs_before_state");
        if batch.is_empty() {
            return Ok(());
        }
        let fsync_started = Instant::now();
        batch.commit()?;
        self.latencies.checkpoint_committed(fsync_started.elapsed());
        if let Some(started) = self.batch_started.take() {
            self.latencies.consume_to_commit.record(started.elapsed().as_secs_f64());
        }
        Stats::add(&self.opts.stats.commits, 1);
        failpoint::hit("commit.after_state_before_group");
        let mut tpl = TopicPartitionList::new();
        for (id, next) in &progressed {
            if let Some(task) = self.tasks.get(&id.partition) {
                task.committed(&self.store);
            }
            self.opts.progress.committed(id.partition, *next);
            if id.source == ORDERS_SOURCE {
                let _ = tpl.add_partition_offset(&self.opts.topology.orders.topic, id.partition, Offset::Offset(*next));
            }
        }
        if tpl.count() > 0 {
            if let Err(e) = consumer.commit(&tpl, CommitMode::Async) {
                warn!(error = %e, "group offset commit failed (lag tools only; state is committed)");
            }
        }
        Ok(())
    }
}
