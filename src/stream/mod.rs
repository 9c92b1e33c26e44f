//! The stream thread: poll, process per partition, commit; repeat.
//!
//! One OS thread owns the consumer, the tasks and the producer (rdkafka's `BaseConsumer` is
//! several times faster per message than the stream consumer). Blocking here is fine: no
//! async executor runs on this thread. It consumes four topics in one group: `orders`
//! and `inventory` (upstream tasks), the internal SKU repartition topic (SKU tasks) and the
//! internal combine repartition topic (combine tasks, [`combine`]).

mod committer;
mod drain;
mod fence;
mod gap;
mod partitions;
mod rebalance;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, RebalanceProtocol};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::message::BorrowedMessage;
use rdkafka::{Message, Offset, TopicPartitionList};
use tidemark_state::{PartitionId, Store, StoreOptions};
use tidemark_topology::config::Topology;
use tracing::{info, warn};

use crate::engine::outbox::OutboxRow;
use crate::engine::{OutputRecord, Stats};
use crate::kafka::context::TaskContext;
use crate::kafka::sink::{OutputSink, OutputsRefused};
use crate::kafka::KafkaSettings;
use crate::tasks::{
    is_internal, Assignment, Finished, Imports, Ingested, Polled, State, Task, TaskFactory, TaskSet, COMBINE,
    INVENTORY, ORDERS, SKU_REPARTITION,
};
use crate::telemetry::events::Latencies;
use crate::telemetry::Progress;
use committer::{Committer, Job, Shared};
pub use drain::DrainTimeout;
use partitions::check_partition_counts;

pub use crate::actions::RowSender;

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
    /// When set (and once the flag inside is true), stop as soon as the work derived from the
    /// log is done (see [`drain`]): batch-like runs, tests, the demo.
    pub exit_at_end: Option<Arc<AtomicBool>>,
    /// With `exit_at_end`: how long the derived work may take once every assigned input
    /// partition is at its log end; then the stream stops anyway with [`DrainTimeout`].
    pub drain_timeout: Duration,
    /// See `tidemark run --accept-gaps`: continue past records that retention deleted
    /// before they were processed (logged, counted), instead of stopping.
    pub accept_gaps: bool,
    pub progress: Arc<Progress>,
    /// Where committed outbox rows go; `None` keeps them in the outbox only.
    pub rows: Option<RowSender>,
    /// The store, when the caller shares it (with the dispatcher); opened here otherwise.
    pub store: Option<Arc<Store>>,
    /// SKU partitions owned, for the dispatcher's outbox scans.
    pub sku_owned: crate::actions::Owned,
    /// `Some((ordinal, replicas))`: own partition p of every input topic iff
    /// p % replicas == ordinal, with no group rebalancing (see `tidemark run --replicas`).
    pub static_assignment: Option<(i32, i32)>,
    /// Restores assigned partitions from their newest snapshot when it is ahead of the
    /// local state (`tidemark run --snapshot-dir`; see [`crate::snapshot`]).
    pub snapshots: Option<Arc<crate::snapshot::Restorer>>,
    /// Exports revoked partitions right after their last commit, so their next owner
    /// restores them with nothing to replay (with snapshots on).
    pub handover: Option<Arc<crate::snapshot::Handover>>,
    /// The dispatcher's gate: closed for revoked SKU partitions before they are handed over.
    pub gate: Option<Arc<crate::actions::Gate>>,
    /// `session.timeout.ms` of the group (see `tidemark run --session-timeout`).
    pub session_timeout: Duration,
    /// Standby tasks for the partitions this process does not own (`tidemark run
    /// --standbys all`; see [`crate::standby`]).
    pub standbys: Option<Arc<crate::standby::Standbys>>,
    /// With standbys: how long to wait for them to catch up before joining the group.
    pub warmup_timeout: Duration,
    /// The audit read for assigned SKU partitions before their rows are dispatched (see
    /// [`crate::actions::Recall`]); `None` when nothing dispatches.
    pub recall: Option<Arc<crate::actions::Recall>>,
    /// The states of this process's tasks (shared with the standby thread).
    pub lifecycle: Arc<crate::tasks::Lifecycle>,
    /// What the state store's memtables may hold together (`tidemark run --state-memtable-mb`).
    pub memtable_budget_bytes: usize,
    /// Threads the tasks ingest and finish on (`tidemark run --threads`; 1: the stream thread
    /// alone).
    pub threads: usize,
    /// SKU repartition records go out packed (`tidemark run --repartition-packing`, on by
    /// default; see [`crate::engine::pack`]).
    pub repartition_packing: bool,
}

/// The cores this process may use (its CPU quota in a container): `--threads` by default.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

type Consumer_ = BaseConsumer<TaskContext>;

/// How old a reported log end may be for a task to count as caught up (statistics arrive
/// every `STATS_EVERY_MS`): older means the client is stuck, and an idle promise waits.
const LOG_END_FRESH: Duration = Duration::from_millis(1200);
const STATS_EVERY_MS: &str = "100";
/// A log end in the statistics comes from the last fetch response; an idle partition's
/// fetch waits up to `fetch.wait.max.ms` (50 ms) at the broker. This much before the report
/// is when the broker last had nothing more, with 50 ms for the round trip.
const LOG_END_OBSERVED_BEFORE_REPORT_MS: i64 = 100;

struct Runner {
    opts: StreamOptions,
    store: Arc<Store>,
    sink: Arc<OutputSink>,
    committer: Committer,
    /// Partitions of the batch in flight: next offset, dedup horizon once durable.
    in_flight: Vec<Finished>,
    /// The number of the last batch whose outputs were sent (see [`crate::kafka::sink::Batch`]).
    sent_seq: crate::kafka::sink::Batch,
    tasks: TaskSet,
    out: Vec<OutputRecord>,
    rows: Vec<(PartitionId, OutboxRow)>,
    latencies: Latencies,
    /// When the oldest record of the current batch was consumed.
    batch_started: Option<Instant>,
    paused: bool,
    drain: drain::Drain,
    /// When `tidemark_task_entries` was last published.
    held_at: Option<Instant>,
    /// Snapshot imports under way (their partitions assigned, paused, without a task).
    imports: Imports,
    /// With `internal.idle_promise = "fence"`: fences idle upstream partitions.
    fencer: Option<fence::Fencer>,
    /// What became of each record of the last chunk, and when each was polled (reused).
    ingested: Vec<Option<Ingested>>,
    polled_at: Vec<Instant>,
    /// When the last input (orders, inventory) record was applied: the fencer's demand.
    input_at: Option<Instant>,
    /// When the tasks last published their aggregates' rows (`state.publish_interval`).
    published_at: Instant,
}

/// The most records gathered from the queue before they are handed to their tasks together.
const CHUNK: usize = 1024;

/// How often the tasks' entry counts are published (a walk over every SKU state).
const HELD_EVERY: Duration = Duration::from_secs(15);

pub fn open_store(opts: &StreamOptions) -> anyhow::Result<Arc<Store>> {
    open_store_at(&opts.state_dir, store_options(&opts.topology, &opts.group_id, opts.memtable_budget_bytes))
}

/// The store options of the stream of topology `t` in group `group`.
pub fn store_options(t: &Topology, group: &str, memtable_budget_bytes: usize) -> StoreOptions {
    StoreOptions {
        owner: format!("{}/{}", t.name, group),
        dedup_retention_ms: Some(t.dedup_retention_ms),
        memtable_budget_bytes,
        ..StoreOptions::default()
    }
}

/// Opens (or creates) the store in `dir` (`tidemark run` opens it on a thread of its own,
/// beside its broker checks: after a crash the open replays the write-ahead log).
pub fn open_store_at(dir: &std::path::Path, o: StoreOptions) -> anyhow::Result<Arc<Store>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(Arc::new(Store::open(dir, &o)?))
}

/// How long start-up waits out a broker that is still settling: topics created a moment ago
/// whose metadata has not spread, partitions whose leader is being elected.
const SETTLE: Duration = Duration::from_secs(30);

/// Told to stop (SIGTERM) while waiting for the broker: nothing more was processed.
#[derive(Debug, thiserror::Error)]
#[error("stopped while waiting for the broker")]
pub struct StoppedWaiting;

/// `Ok(true)` for a wait for the broker cut short by a stop (a SIGTERM during an outage, while
/// a partition was being restored or its log start read): the loop then ends as on any stop,
/// with the final commit of the tasks it has, and the process exits cleanly.
fn stopped_waiting(result: anyhow::Result<()>) -> anyhow::Result<bool> {
    match result {
        Err(e) if e.is::<StoppedWaiting>() => {
            info!(reason = %format!("{e:#}"), "stopping while waiting for the broker");
            Ok(true)
        }
        other => other.map(|()| false),
    }
}

/// Retries `f` with growing pauses (100 ms doubling to 5 s), warning at once and then every
/// 10 s, until it succeeds, `limit` has passed (then the last error), or a stop is asked for
/// ([`StoppedWaiting`]). With `progress`, liveness is beaten meanwhile: a running process
/// waits out a broker outage of any length (`limit` None) instead of ending.
fn wait_for_broker<T, E: std::fmt::Display>(
    what: &str,
    stop: &AtomicBool,
    limit: Option<Duration>,
    progress: Option<&Progress>,
    mut f: impl FnMut() -> Result<T, E>,
) -> anyhow::Result<T> {
    let started = Instant::now();
    let mut warned: Option<Instant> = None;
    let mut pause = Duration::from_millis(100);
    loop {
        match f() {
            Ok(v) => return Ok(v),
            Err(_) if stop.load(Ordering::Relaxed) => return Err(StoppedWaiting.into()),
            Err(e) if limit.is_some_and(|l| started.elapsed() >= l) => anyhow::bail!("{what}: {e}"),
            Err(e) => {
                if warned.is_none_or(|w| w.elapsed() >= Duration::from_secs(10)) {
                    warned = Some(Instant::now());
                    warn!(error = %e, waited_s = started.elapsed().as_secs(), "{what}: the broker does not answer; retrying");
                }
                if let Some(p) = progress {
                    p.beat();
                }
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_secs(5));
            }
        }
    }
}

/// Partition counts of the input topics, read from the broker (they must exist).
pub(crate) fn partition_counts<C: rdkafka::consumer::ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topics: &[&str],
    stop: &AtomicBool,
) -> anyhow::Result<Vec<i32>> {
    wait_for_broker("reading topic metadata", stop, Some(SETTLE), None, || {
        let md = consumer.fetch_metadata(None, Duration::from_secs(10)).map_err(|e| e.to_string())?;
        topics
            .iter()
            .map(|name| {
                md.topics()
                    .iter()
                    .find(|t| t.name() == *name && !t.partitions().is_empty() && t.error().is_none())
                    .map(|t| i32::try_from(t.partitions().len()).unwrap_or(i32::MAX))
                    .ok_or_else(|| {
                        format!("topic {name} does not exist: create it (`tidemark topics`) or pass --create-topics")
                    })
            })
            .collect::<Result<Vec<i32>, String>>()
    })
}

/// Runs until `stop` is set (SIGTERM/SIGINT) or, with `exit_at_end`, the log is drained.
/// Returns after a final commit: nothing processed is lost on a clean stop.
///
/// Outputs the broker refuses for good (ACL, deleted topic, a record larger than the topic
/// allows: [`OutputsRefused`]) do not end the process: their batch is not committed, the
/// stream closes its consumer and starts again from its checkpoints after a pause (1 s,
/// doubling to 60 s or half the session timeout), producing the same records again, as a restart would, while the
/// process stays alive, says why it is not ready and counts the restarts. A record that can
/// never be written holds its partitions until an operator fixes the topic. A consumer that
/// failed for good ([`ConsumerLost`]: a static member fenced after a long broker outage) is
/// replaced the same way.
pub fn run(opts: StreamOptions) -> anyhow::Result<()> {
    crate::telemetry::stream::restarts_started(&["outputs_refused", "consumer_lost"]);
    // Back within the session timeout, a static member gets its partitions back unmoved.
    let longest = RESTART_PAUSE_MAX.min(opts.session_timeout / 2).max(RESTART_PAUSE_FIRST);
    let mut pause = RESTART_PAUSE_FIRST;
    loop {
        let started = Instant::now();
        match run_once(opts.clone()) {
            Err(e) if !opts.stop.load(Ordering::Relaxed) && restart_reason(&e).is_some() => {
                let reason = restart_reason(&e).unwrap_or_default();
                if started.elapsed() > RESTART_PAUSE_RESET_AFTER {
                    pause = RESTART_PAUSE_FIRST;
                }
                let why = format!("{e:#}; the stream starts again from its checkpoint in {} s", pause.as_secs());
                warn!(error = %why, reason, "the stream starts again in this process; nothing is lost");
                crate::telemetry::stream::restarted(reason);
                if reason == "outputs_refused" {
                    opts.progress.outputs_blocked(Some(why));
                }
                let until = Instant::now() + pause;
                while Instant::now() < until && !opts.stop.load(Ordering::Relaxed) {
                    opts.progress.beat();
                    std::thread::sleep(Duration::from_millis(200));
                }
                if opts.stop.load(Ordering::Relaxed) {
                    // Stopped during the pause: the checkpoints are where the stream left them.
                    return Ok(());
                }
                pause = (pause * 2).min(longest);
            }
            other => return other,
        }
    }
}

const RESTART_PAUSE_FIRST: Duration = Duration::from_secs(1);
const RESTART_PAUSE_MAX: Duration = Duration::from_secs(60);
/// A stream that ran this long before it had to start again starts with the first pause.
const RESTART_PAUSE_RESET_AFTER: Duration = Duration::from_secs(600);

/// The consumer failed fatally (librdkafka gives it up for good: a static member fenced
/// after a long broker outage, for one). The stream starts again with a new consumer, from
/// its checkpoints; nothing was committed past them.
#[derive(Debug, thiserror::Error)]
#[error("the consumer failed for good ({0}); a new one is made")]
pub struct ConsumerLost(pub String);

/// Why the stream may start again in the same process after `e` (the
/// `tidemark_stream_restarts_total` reason), or `None`: the error ends the process.
fn restart_reason(e: &anyhow::Error) -> Option<&'static str> {
    e.chain().find_map(|c| {
        if c.is::<OutputsRefused>() {
            Some("outputs_refused")
        } else if c.is::<ConsumerLost>() {
            Some("consumer_lost")
        } else {
            None
        }
    })
}

fn run_once(opts: StreamOptions) -> anyhow::Result<()> {
    let t = &opts.topology;
    let store = match &opts.store {
        Some(s) => Arc::clone(s),
        None => open_store(&opts)?,
    };
    let sources = crate::tasks::Sources::of(t);
    let assignment = Assignment::new(
        Arc::clone(&store),
        sources.clone(),
        opts.snapshots.clone(),
        opts.standbys.clone(),
        opts.recall.clone(),
        Arc::clone(&opts.lifecycle),
    );
    let context = TaskContext::new(assignment, Arc::clone(&opts.stats));
    let mut cfg = opts.settings.log_reader_config(&opts.group_id);
    cfg.set("statistics.interval.ms", STATS_EVERY_MS)
        .set("session.timeout.ms", opts.session_timeout.as_millis().to_string())
        // A survivor learns of a rebalance from its next heartbeat's answer: librdkafka's 3 s
        // default costs a failover up to 3 s per round with a 6 s session (docs/operations.md).
        .set("heartbeat.interval.ms", rebalance::heartbeat_interval(opts.session_timeout).as_millis().to_string())
        // A hand-over export runs between two polls (right after the rebalance callback);
        // snapshot imports run on their own threads, but a revocation waits for one under way: as long as a restore may take before liveness fails
        // (`MAX_RESTORE_SILENCE_MS`), not the default 5 minutes, or the group takes the
        // member for dead in the middle of it.
        .set("max.poll.interval.ms", crate::telemetry::progress::MAX_RESTORE_SILENCE_MS.to_string())
        // Only the partitions that move are revoked in a rebalance (KIP-429); the others go
        // on. Every member of a group must use it (docs/operations.md, "Scaling").
        .set("partition.assignment.strategy", "cooperative-sticky");
    if let Some(id) = &opts.instance_id {
        cfg.set("group.instance.id", id);
    }
    let consumer: Consumer_ = cfg.create_with_context(context).context("creating consumer")?;
    let topics = sources.names();
    let counts = match partition_counts(&consumer, &topics, &opts.stop) {
        Err(e) if e.is::<StoppedWaiting>() => {
            info!("{e}; nothing was processed");
            return Ok(());
        }
        other => other?,
    };
    check_partition_counts(&store, &topics, &counts)?;
    if let Some(recall) = &opts.recall {
        recall.set_sku_partitions(counts[usize::from(SKU_REPARTITION)]);
    }
    opts.progress
        .input_partitions([ORDERS, INVENTORY, SKU_REPARTITION, COMBINE].into_iter().zip(counts.iter().copied()));
    match opts.static_assignment {
        None => {
            if let Some(standbys) = &opts.standbys {
                standbys.wait_warm(opts.warmup_timeout, &opts.stop, &opts.progress);
            }
            consumer.subscribe(&topics).context("subscribing")?
        }
        Some((ordinal, replicas)) => {
            let mut tpl = TopicPartitionList::new();
            for (topic, count) in topics.iter().zip(&counts) {
                for p in (0..*count).filter(|p| p % replicas == ordinal) {
                    tpl.add_partition(topic, p);
                }
            }
            let assignment = &consumer.context().assignment;
            let importing = assignment.position_at_checkpoints(&mut tpl);
            let ids = assignment.ids(&tpl);
            info!(ordinal, replicas, partitions = ?ids, importing = ?importing, "static assignment");
            consumer.assign(&tpl).context("assigning partitions")?;
            consumer.context().pause(&consumer, &importing);
            assignment.assigned(ids, importing);
        }
    }
    info!(kafka = %opts.settings.redacted(), group = %opts.group_id, state = %opts.state_dir.display(), "stream started");
    let sink = Arc::new(
        OutputSink::new(&opts.settings, t)?.reporting_to(Arc::clone(&opts.progress)).packing(opts.repartition_packing),
    );
    let mut tasks = TaskSet::new(TaskFactory::new(t, [counts[0], counts[1], counts[2], counts[3]]), sources);
    tasks.set_threads(opts.threads);
    tasks.set_hand_over(true);
    let latencies = Latencies::default();
    let committer = Committer::start(Shared {
        store: Arc::clone(&store),
        sink: Arc::clone(&sink),
        rows: opts.rows.clone(),
        stats: Arc::clone(&opts.stats),
        progress: Arc::clone(&opts.progress),
        latencies: latencies.clone(),
    })?;
    let drain = drain::Drain::new(opts.drain_timeout);
    // At 0 in clock mode too: the chart's dashboard shows the series whatever the mode.
    crate::telemetry::stream::fences_started();
    let fencer = match t.idle_promise.fence_every_ms() {
        Some(every_ms) => {
            let every = Duration::from_millis(u64::try_from(every_ms).unwrap_or(0));
            info!(
                every_ms,
                "idle upstream partitions are fenced (internal.idle_promise = \"fence\"): no clock promise"
            );
            Some(fence::Fencer::new(&opts.settings, every)?)
        }
        None => None,
    };
    let mut runner = Runner {
        opts,
        store,
        sink,
        committer,
        in_flight: Vec::new(),
        sent_seq: 0,
        tasks,
        out: Vec::new(),
        rows: Vec::new(),
        latencies,
        batch_started: None,
        paused: false,
        drain,
        held_at: None,
        imports: Imports::default(),
        fencer,
        input_at: None,
        ingested: Vec::new(),
        polled_at: Vec::new(),
        published_at: Instant::now(),
    };
    let result = runner.run_loop(&consumer);
    // No import outlives the stream (it writes the store this run's restart reopens).
    runner.imports.wait_all();
    if result.as_ref().is_err_and(|e| restart_reason(e).is_some()) {
        runner.let_go();
    }
    // From here nothing handles assignment events: a closing consumer waits for its
    // revocations to be released.
    consumer.context().release_pending(&consumer);
    // No active task outlives the stream: a partition assigned in the callback but not yet
    // restored here closes too.
    runner.opts.lifecycle.close_active();
    result
}

impl Runner {
    fn run_loop(&mut self, consumer: &Consumer_) -> anyhow::Result<()> {
        let interval = Duration::from_millis(self.opts.topology.commit_interval_ms);
        let linger = Duration::from_millis(self.opts.topology.commit_linger_ms);
        let max_batch = self.opts.topology.max_batch_records;
        // Records polled and not yet handed to their tasks (see [`Runner::ingest_chunk`]).
        let mut chunk: Vec<(BorrowedMessage<'_>, Instant)> = Vec::with_capacity(CHUNK);
        loop {
            // One clock read per polled record: the wall clock of the append→consume age is
            // derived from the monotonic one read for the deadline.
            let (base, base_wall_ms) = (Instant::now(), chrono::Utc::now().timestamp_millis());
            let deadline = base + interval;
            let mut taken = 0usize;
            let mut turns = 0u32;
            // When this batch first got a record (a fence or a re-delivery too: either moves a
            // task, and so the next mark). It is committed once it has lingered and the commit
            // before it is durable, or at the deadline (`state.commit_linger`).
            let mut moved_at: Option<Instant> = None;
            let clock = (base, base_wall_ms);
            while taken + chunk.len() < max_batch && !self.opts.stop.load(Ordering::Relaxed) {
                if turns.is_multiple_of(256) {
                    self.opts.progress.beat();
                    self.apply_pause(consumer);
                }
                turns = turns.wrapping_add(1);
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                let lingering = moved_at.is_some_and(|at| now.saturating_duration_since(at) >= linger);
                if lingering && self.committer.is_done() {
                    break;
                }
                // With records gathered, take what the queue holds without waiting; while a
                // batch waits for the commit before it, look at the committer often.
                let most = if !chunk.is_empty() {
                    Duration::ZERO
                } else if moved_at.is_some() {
                    Duration::from_millis(1)
                } else {
                    Duration::from_millis(100)
                };
                let polled = consumer.poll((deadline - now).min(most));
                // Records polled before an assignment event reach their tasks before it is
                // handled (a revoked task commits them; an assigned one starts after them).
                if consumer.context().assignment.has_events() {
                    self.ingest_chunk(&mut chunk, clock, &mut moved_at, &mut taken);
                }
                if stopped_waiting(self.handle_assignment(consumer))? {
                    break;
                }
                match polled {
                    None => self.ingest_chunk(&mut chunk, clock, &mut moved_at, &mut taken),
                    Some(Err(e)) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::AutoOffsetReset) => {
                        self.ingest_chunk(&mut chunk, clock, &mut moved_at, &mut taken);
                        // Which partition is not said: look at every task's log start.
                        warn!(error = %e, "a fetch position is outside the log");
                        if stopped_waiting(self.check_gaps(consumer))? {
                            break;
                        }
                    }
                    Some(Err(e @ rdkafka::error::KafkaError::MessageConsumptionFatal(_))) => {
                        // librdkafka gives a fatally failed consumer up for good (e.g. fenced
                        // static membership after a long broker outage): a new one is made.
                        return Err(ConsumerLost(e.to_string()).into());
                    }
                    Some(Err(e)) => warn!(error = %e, "consumer error"),
                    Some(Ok(msg)) => {
                        chunk.push((msg, now));
                        if chunk.len() >= CHUNK {
                            self.ingest_chunk(&mut chunk, clock, &mut moved_at, &mut taken);
                        }
                    }
                }
            }
            self.ingest_chunk(&mut chunk, clock, &mut moved_at, &mut taken);
            self.commit(consumer)?;
            if self.opts.stop.load(Ordering::Relaxed) {
                break;
            }
            let exit_armed = self.opts.exit_at_end.as_ref().is_some_and(|f| f.load(Ordering::Relaxed));
            if exit_armed && self.drained(consumer)? {
                break;
            }
        }
        self.complete(consumer)?;
        consumer.unsubscribe();
        info!("stream stopped after final commit");
        match self.drain.timed_out.take() {
            Some(remaining) => Err(remaining.into()),
            None => Ok(()),
        }
    }

    /// Hands the records gathered in `chunk` to their tasks, on up to `--threads` threads
    /// ([`TaskSet::ingest_all`]), and counts them into the batch: `taken` records, the batch's
    /// first move, the input's latest arrival and its append→consume ages.
    fn ingest_chunk(
        &mut self,
        chunk: &mut Vec<(BorrowedMessage<'_>, Instant)>,
        (base, base_wall_ms): (Instant, i64),
        moved_at: &mut Option<Instant>,
        taken: &mut usize,
    ) {
        if chunk.is_empty() {
            return;
        }
        let mut at = std::mem::take(&mut self.polled_at);
        at.clear();
        let polled: Vec<(PartitionId, Polled<'_>)> = chunk
            .iter()
            .filter_map(|(msg, polled_at)| {
                let id = self.tasks.id_of(msg.topic(), msg.partition())?;
                at.push(*polled_at);
                Some((id, Polled::of(msg)))
            })
            .collect();
        let mut results = std::mem::take(&mut self.ingested);
        self.tasks.ingest_all(&polled, &mut self.out, &mut results, &self.opts.stats);
        for (ingested, now) in results.iter().zip(&at) {
            let Some(ingested) = ingested else { continue };
            moved_at.get_or_insert(*now);
            if ingested.counted {
                *taken += 1;
                if !is_internal(ingested.id.source) {
                    self.input_at = Some(*now);
                    let now_ms = base_wall_ms + i64::try_from((*now - base).as_millis()).unwrap_or(0);
                    let age_ms = now_ms - ingested.append_ms;
                    self.latencies.append_to_consume.record(age_ms.max(0) as f64 / 1000.0);
                }
                self.batch_started.get_or_insert(*now);
            }
        }
        self.ingested = results;
        self.polled_at = at;
        drop(polled);
        chunk.clear();
    }

    /// Applies `POST /pause` and `POST /resume` (admin listener) to the consumer's current
    /// assignment.
    fn apply_pause(&mut self, consumer: &Consumer_) {
        let want = self.opts.progress.paused.load(Ordering::Relaxed);
        if want == self.paused {
            return;
        }
        // Partitions waiting for their import stay paused either way.
        let ids: Vec<PartitionId> = self.tasks.ids().filter(|id| !self.imports.is_importing(*id)).collect();
        let result = if want {
            consumer.context().paused(&self.tasks.ids().collect::<Vec<_>>());
            consumer.assignment().and_then(|all| consumer.pause(&all))
        } else {
            consumer.context().resumed(&ids);
            consumer.resume(&consumer.context().assignment.list_of(&ids))
        };
        match result {
            Ok(()) => {
                self.paused = want;
                let to = if want { State::Suspended } else { State::Running };
                for id in self.tasks.ids() {
                    self.opts.lifecycle.note(id, to);
                }
                info!(paused = want, "consumption {}", if want { "paused" } else { "resumed" });
            }
            Err(e) => warn!(error = %e, "cannot change pause state"),
        }
    }

    /// Caught up: the log end (from statistics at most `LOG_END_FRESH` old) is at the task's
    /// next offset. Never while paused: a paused consumer's statistics go stale.
    fn idle(&self, consumer: &Consumer_, id: PartitionId, task: &Task) -> bool {
        self.caught_up_at(consumer, id, task).is_some()
    }

    fn caught_up_at(&self, consumer: &Consumer_, id: PartitionId, task: &Task) -> Option<Instant> {
        if self.paused {
            return None;
        }
        consumer.context().caught_up_at(id, task.next_offset(), LOG_END_FRESH)
    }

    fn topic_of(&self, id: PartitionId) -> &str {
        self.tasks.sources().topic_of(id)
    }

    /// After the consumer reported a fetch position outside a log: every task is checked
    /// against its log start and end (see [`Runner::check_log_start`]).
    fn check_gaps(&mut self, consumer: &Consumer_) -> anyhow::Result<()> {
        let ids: Vec<PartitionId> = self.tasks.ids().collect();
        let mut tpl = TopicPartitionList::new();
        for id in ids {
            let Some(mut task) = self.tasks.take(id) else { continue };
            let result = self.check_log_start(consumer, id, &mut task);
            let next = task.next_offset();
            self.tasks.insert(id, task);
            result?;
            let _ = tpl.add_partition_offset(self.topic_of(id), id.partition, Offset::Offset(next));
        }
        // The partition that failed stopped fetching ("erroneous state": a seek is refused),
        // and the event does not say which it was: assign every task again at its next
        // offset (records ingested but not committed are past it, so nothing is read twice).
        // In a cooperative group the assignment changes only incrementally: the same
        // partitions out, then in again at the new offsets.
        let reassigned = if matches!(consumer.rebalance_protocol(), RebalanceProtocol::Cooperative) {
            consumer.incremental_unassign(&tpl).and_then(|()| consumer.incremental_assign(&tpl))
        } else {
            consumer.assign(&tpl)
        };
        match reassigned {
            Ok(()) => info!(partitions = tpl.count(), "fetching restarted at every task's next offset"),
            Err(e) => warn!(error = %e, "cannot restart fetching at the checkpoints"),
        }
        Ok(())
    }

    /// Moves each task past offsets the consumer stepped over without handing a record to
    /// the application: transaction commit/abort markers and aborted records (SPEC §1.3).
    /// Everything below the consumer's position was returned by `poll` and ingested, so the
    /// difference between the two carried nothing to apply. Without this, a partition whose
    /// last record is a transaction marker never counts as caught up, and its idle promise
    /// never releases the SKU merge.
    fn skip_control_records(&mut self, consumer: &Consumer_) {
        self.tasks.skip_control_records(consumer);
    }

    /// Progress promises of the upstream tasks, to every SKU partition. A task with new
    /// records promises its effective append time. A caught-up one promises the moment the
    /// broker was last seen with nothing more for it (the statistics report's time, minus
    /// what a fetch response may lag behind it), minus `idle_skew` for the broker's clock
    /// being behind ours: not the current time, so a stale report can never let it promise
    /// past a record already appended. Either is sent at most once per commit and only when it moved:
    /// every idle promise held back delays each SKU release by as much (it was throttled to
    /// one per 500 ms, which added up to 500 ms to every action).
    ///
    /// With `internal.idle_promise = "fence"` ([`fence`]) no clock promise is made: an idle
    /// partition is fenced, and the fence's append time, once read, is its effective append
    /// time.
    ///
    /// Returned as the step [`TaskSet::finish`] runs between the upstream tasks and the
    /// others, so the SKU tasks of this process get the promises in the same finish.
    fn mark_policy<'a>(&self, consumer: &'a Consumer_) -> impl FnOnce(&mut TaskSet, &mut Vec<OutputRecord>) + 'a {
        let fenced = self.fencer.is_some();
        let (now, now_ms) = (Instant::now(), chrono::Utc::now().timestamp_millis());
        let skew = self.opts.topology.idle_skew_ms + LOG_END_OBSERVED_BEFORE_REPORT_MS;
        let paused = self.paused;
        move |tasks: &mut TaskSet, out: &mut Vec<OutputRecord>| {
            let idle_bound = |id: PartitionId, task: &Task| {
                if fenced || paused {
                    return None;
                }
                let at = consumer.context().caught_up_at(id, task.next_offset(), LOG_END_FRESH)?;
                let report_ms = now_ms - i64::try_from((now - at).as_millis()).unwrap_or(i64::MAX / 2);
                Some(report_ms - skew)
            };
            tasks.marks(|_| true, idle_bound, out);
        }
    }

    /// With fences: appends a fence to each idle upstream partition that needs one ([`fence`]).
    fn tick_fences(&mut self) {
        let Some(fencer) = &mut self.fencer else { return };
        if self.paused {
            return;
        }
        let now = Instant::now();
        let demand = self.input_at.is_some_and(|at| now.saturating_duration_since(at) < fence::DEMAND_WINDOW)
            || self.tasks.tasks().any(|t| t.buffered() > 0);
        fencer.tick(self.tasks.upstreams(), demand, now);
    }

    /// Publishes `tidemark_task_entries{kind}` (see [`crate::engine::held`]) every
    /// [`HELD_EVERY`].
    fn publish_held(&mut self) {
        if self.held_at.is_some_and(|at| at.elapsed() < HELD_EVERY) {
            return;
        }
        self.held_at = Some(Instant::now());
        let mut held = crate::engine::held::Held::default();
        self.tasks.held(&mut held);
        for (kind, n) in held.counts() {
            crate::telemetry::stream::task_entries(kind, n);
        }
    }

    /// Makes everything processed so far durable, in this order:
    /// 1. each task stages its state changes (dedup entries, aggregates, SKU state, merge
    ///    buffer, outbox rows, combine partials) and its checkpoint into one `WriteBatch`
    ///    (on up to `--threads` threads), and emits outputs ([`TaskSet::finish`]): the
    ///    upstream tasks first, then their progress marks (SKU merge and combine expiry),
    ///    then what they emitted for SKU partitions of this process is handed to those tasks,
    ///    which finish next, so an order's action row can be written in the batch that read
    ///    the order. The partials are copied to the combine topic by aggregate key. This runs
    ///    while the commit thread still writes the batch before: the tasks remember what that
    ///    batch wrote that they would read back (its dedup ids, its outbox keys), and nothing
    ///    else they read from the store is in it;
    /// 2. every output record is queued in the producer, numbered with the batch: they go
    ///    out while the batch before is still being written, and a crash before that write
    ///    replays them anyway;
    /// 3. the batch before is waited for (batches become durable in order);
    /// 4. on the commit thread ([`committer`]): every output of this batch and the ones before
    ///    is acknowledged by the broker, then the batch is written with fsync (state, outbox
    ///    rows and input offsets move together) and the new outbox rows go to the dispatcher;
    /// 5. at the next commit, the group's committed offsets follow (for lag tools; tidemark
    ///    never reads them).
    ///
    /// A crash before the write replays from the previous checkpoint and reproduces the same
    /// outputs and rows; a crash after it resumes after it. Either way no output is lost and
    /// no action key is produced twice. An action row written from a handed-over line is
    /// durable only with the batch that holds the line's order and after the line itself is
    /// in the log.
    fn commit(&mut self, consumer: &Consumer_) -> anyhow::Result<()> {
        self.publish_held();
        self.skip_control_records(consumer);
        // The tasks finish while the commit thread still writes the batch before: what they
        // read from the store, that batch's writes aside, is current, and they remember what
        // that batch wrote that they would read (its dedup ids, its outbox keys).
        let finishing = Instant::now();
        let store = Arc::clone(&self.store);
        let mut batch = store.batch();
        self.tick_fences();
        let publish = self.publish_due();
        self.tasks.set_publishing(publish);
        let marks = self.mark_policy(consumer);
        let progressed =
            self.tasks.finish(store.as_ref(), &mut batch, &mut self.out, &mut self.rows, &self.opts.stats, marks)?;
        self.latencies.finish.record(finishing.elapsed().as_secs_f64());
        let sent = !self.out.is_empty();
        if sent {
            let producing = Instant::now();
            self.sent_seq = self.sent_seq.wrapping_add(1);
            Stats::add(&self.opts.stats.outputs, self.out.len() as u64);
            self.sink.send_all(&mut self.out, self.sent_seq)?;
            self.latencies.produce.record(producing.elapsed().as_secs_f64());
        }
        // This batch's state is written only once the one before it is durable: batches
        // become durable in order, each after its own outputs (and those before them).
        self.complete(consumer)?;
        if batch.is_empty() && !sent {
            return Ok(());
        }
        self.committer.submit(Job {
            seq: self.sent_seq,
            batch: batch.stage(),
            rows: std::mem::take(&mut self.rows),
            consumed_since: self.batch_started.take(),
        })?;
        self.in_flight = progressed;
        Ok(())
    }

    /// Whether this commit publishes the aggregates' rows that changed: once per
    /// `state.publish_interval`, and at every commit of a stream that is stopping or exits
    /// at the end of its input (what it committed is published before it ends).
    fn publish_due(&mut self) -> bool {
        let every = Duration::from_millis(self.opts.topology.publish_interval_ms);
        let ending = self.opts.stop.load(Ordering::Relaxed)
            || self.opts.exit_at_end.as_ref().is_some_and(|f| f.load(Ordering::Relaxed));
        let due = ending || self.published_at.elapsed() >= every;
        if due {
            self.published_at = Instant::now();
        }
        due
    }

    /// Waits for the batch in flight; once it is durable, lets compaction drop dedup entries
    /// it made unreachable and moves the group's offsets and the progress report.
    fn complete(&mut self, consumer: &Consumer_) -> anyhow::Result<()> {
        let waiting = Instant::now();
        let written = self.committer.wait()?;
        self.latencies.commit_wait.record(waiting.elapsed().as_secs_f64());
        let progressed = std::mem::take(&mut self.in_flight);
        if !written {
            return Ok(());
        }
        let mut tpl = TopicPartitionList::new();
        for Finished { id, next_offset: next, dedup_horizon } in progressed {
            if let Some(h) = dedup_horizon {
                self.store.set_dedup_horizon(id, h);
            }
            self.opts.progress.committed(id, next);
            let _ = tpl.add_partition_offset(self.topic_of(id), id.partition, Offset::Offset(next));
        }
        if tpl.count() > 0 {
            if let Err(e) = consumer.commit(&tpl, CommitMode::Async) {
                warn!(error = %e, "group offset commit failed (lag tools only; state is committed)");
            }
        }
        Ok(())
    }
}
