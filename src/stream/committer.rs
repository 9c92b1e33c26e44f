//! The commit pipeline: while the stream thread polls and normalises batch N+1, this thread
//! waits for batch N's outputs to be acknowledged, then writes batch N's state, outbox rows
//! and offsets (one `WriteBatch`, fsync) and hands the new rows to the dispatcher.
//!
//! Two rules keep it as safe as a synchronous commit:
//! - a batch's state is written only after every output of it and of the batches before it
//!   is acknowledged (records carry their batch's number; the next batch's outputs may be
//!   in flight already, sent while this one is written);
//! - at most one batch is in flight, and the stream thread waits for it before it finishes
//!   the next one, so the reads a finish makes (dedup lookups, outbox rows) see every
//!   earlier commit. Ingesting (parsing, windowing in memory) never reads the store.
//!
//! A crash at any instant therefore leaves the store at some commit N, with the outputs of
//! N and possibly of N+1 in the log: a replay from N reproduces N+1's outputs byte for byte
//! and the downstream upserts and the SKU merge's sequence check absorb them, as they absorb
//! a crash between flush and write in the synchronous order.

use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use anyhow::Context as _;
use tidemark_state::{PartitionId, StagedBatch, Store};

use super::RowSender;
use crate::engine::outbox::OutboxRow;
use crate::engine::Stats;
use crate::failpoint;
use crate::kafka::sink::OutputSink;
use crate::telemetry::events::Latencies;
use crate::telemetry::Progress;

/// One finished batch: its outputs are already queued in the producer.
pub struct Job {
    /// The number its outputs were sent with ([`crate::kafka::sink::Batch`]).
    pub seq: crate::kafka::sink::Batch,
    pub batch: StagedBatch,
    /// New outbox rows, each beside the SKU partition whose outbox holds it.
    pub rows: Vec<(PartitionId, OutboxRow)>,
    /// When the oldest record of the batch was consumed (for the latency histogram).
    pub consumed_since: Option<Instant>,
}

/// What the commit thread needs besides the job.
pub struct Shared {
    pub store: Arc<Store>,
    pub sink: Arc<OutputSink>,
    pub rows: Option<RowSender>,
    pub stats: Arc<Stats>,
    pub progress: Arc<Progress>,
    pub latencies: Latencies,
}

pub struct Committer {
    jobs: Option<SyncSender<Job>>,
    done: Receiver<anyhow::Result<bool>>,
    busy: bool,
    /// The result of the job in flight, once [`Committer::is_done`] found it.
    result: Option<anyhow::Result<bool>>,
    thread: Option<JoinHandle<()>>,
}

impl Committer {
    pub fn start(shared: Shared) -> anyhow::Result<Self> {
        let (jobs, inbox) = mpsc::sync_channel::<Job>(1);
        let (report, done) = mpsc::sync_channel(1);
        let thread = std::thread::Builder::new()
            .name("tidemark-commit".into())
            .spawn(move || {
                for job in inbox {
                    if report.send(commit(&shared, job)).is_err() {
                        break;
                    }
                }
            })
            .context("starting the commit thread")?;
        Ok(Committer { jobs: Some(jobs), done, busy: false, result: None, thread: Some(thread) })
    }

    /// Starts committing `job`. The previous job must have been waited for.
    pub fn submit(&mut self, job: Job) -> anyhow::Result<()> {
        anyhow::ensure!(!self.busy, "a commit is already in flight");
        let jobs = self.jobs.as_ref().context("commit thread stopped")?;
        jobs.send(job).map_err(|_| anyhow::anyhow!("commit thread stopped"))?;
        self.busy = true;
        Ok(())
    }

    /// Waits for the job in flight, if any. `Ok(true)`: a batch with state was written.
    /// An error means that batch is not durable: the process must stop and replay.
    pub fn wait(&mut self) -> anyhow::Result<bool> {
        if !self.busy {
            return Ok(false);
        }
        self.busy = false;
        match self.result.take() {
            Some(result) => result,
            None => self.done.recv().map_err(|_| anyhow::anyhow!("commit thread stopped"))?,
        }
    }

    /// Whether no job is in flight or the one in flight has ended (then [`Committer::wait`]
    /// returns at once), without waiting.
    pub fn is_done(&mut self) -> bool {
        if !self.busy || self.result.is_some() {
            return true;
        }
        match self.done.try_recv() {
            Ok(result) => {
                self.result = Some(result);
                true
            }
            Err(TryRecvError::Empty) => false,
            // Stopped: `wait` says so.
            Err(TryRecvError::Disconnected) => true,
        }
    }
}

impl Drop for Committer {
    fn drop(&mut self) {
        self.jobs.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn commit(shared: &Shared, job: Job) -> anyhow::Result<bool> {
    failpoint::hit("commit.before_outputs_flushed");
    let progress = Arc::clone(&shared.progress);
    let flushing = Instant::now();
    shared.sink.flush_through(job.seq, &move || progress.beat())?;
    shared.latencies.outputs.record(flushing.elapsed().as_secs_f64());
    failpoint::hit("commit.after_outputs_before_state");
    if job.batch.is_empty() {
        return Ok(false);
    }
    let started = Instant::now();
    shared.store.commit_staged(job.batch)?;
    shared.latencies.checkpoint_committed(started.elapsed());
    if let Some(since) = job.consumed_since {
        shared.latencies.consume_to_commit.record(since.elapsed().as_secs_f64());
    }
    Stats::add(&shared.stats.commits, 1);
    failpoint::hit("commit.after_state_before_group");
    hand_over(shared, job.rows);
    Ok(true)
}

/// Committed rows go to the dispatcher at once, not at the next loop turn.
fn hand_over(shared: &Shared, rows: Vec<(PartitionId, OutboxRow)>) {
    let Some(tx) = &shared.rows else { return };
    let now = chrono::Utc::now().timestamp_millis();
    for (id, mut row) in rows {
        row.committed_wall_ms = now;
        if tx.try_send((id, row)).is_err() {
            // Durable already: the dispatcher picks it up on its next outbox scan.
            shared.stats.outbox_rescan.store(true, Ordering::Relaxed);
        }
    }
}
