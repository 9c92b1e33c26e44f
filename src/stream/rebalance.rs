//! The stream thread's side of partitions moving (the callback's side is
//! [`crate::tasks::Assignment`], which queues what happened for the thread to act on here,
//! after `poll` returns):
//!
//! - assigned: each partition's task is built from the store and runs (`restoring` →
//!   `running`, [`Runner::start_task`]); one whose snapshot is ahead is imported on its own
//!   thread first (`tasks::imports`) while the others run, then started and resumed;
//! - revoked: the work done so far is committed and durable, the dispatcher's attempts for
//!   its SKU partitions end, the state is exported (with snapshots on), the partitions are
//!   released and their standby tasks take over ([`Runner::hand_over`]);
//! - refused outputs: every task is given up at once, as a revocation without its commit
//!   ([`Runner::let_go`]).
//!
//! A task's log start is checked here too (SPEC §1.4, [`Runner::check_log_start`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rdkafka::consumer::Consumer;
use rdkafka::Offset;
use tidemark_state::PartitionId;
use tracing::{info, warn};

use super::{gap, wait_for_broker, Consumer_, Runner};
use crate::failpoint;
use crate::kafka::context::TaskContext;
use crate::tasks::{AssignmentEvent, ImportContext, State, Task, ORDERS, SKU_REPARTITION};

impl Runner {
    fn restore(&self, consumer: &Consumer_, id: PartitionId) -> anyhow::Result<Task> {
        let mut task = self.tasks.restore(self.store.as_ref(), id)?;
        self.check_log_start(consumer, id, &mut task)?;
        Ok(task)
    }

    /// Everything a revocation needs before the partitions go: the work done so far committed
    /// and durable, actions under way recorded, the state exported (see docs/tasks.md).
    fn hand_over(&mut self, consumer: &Consumer_, ids: &[PartitionId]) -> anyhow::Result<()> {
        self.commit(consumer)?;
        self.complete(consumer)?;
        // Liveness allows the hand-over a restore's silence: the export of a large state
        // takes minutes, with a beat per partition.
        self.opts.progress.restoring(true);
        self.quiesce_actions(ids);
        if let Some(handover) = &self.opts.handover {
            let progress = Arc::clone(&self.opts.progress);
            handover.export(&self.store, ids, &|| progress.beat());
        }
        self.opts.progress.restoring(false);
        Ok(())
    }

    /// Stops the dispatcher's attempts for revoked SKU partitions and waits for those under
    /// way to store their outcome (at most one endpoint timeout and a little more), so the
    /// state handed over records every acknowledged action.
    fn quiesce_actions(&self, ids: &[PartitionId]) {
        let Some(gate) = &self.opts.gate else { return };
        let sku: Vec<i32> = ids.iter().filter(|id| id.source == SKU_REPARTITION).map(|id| id.partition).collect();
        if sku.is_empty() {
            return;
        }
        let limit = Duration::from_millis(u64::try_from(self.opts.topology.endpoints.timeout_ms).unwrap_or(5_000))
            + Duration::from_secs(2);
        let busy = gate.release(&sku, limit);
        if !busy.is_empty() {
            warn!(partitions = ?busy, "actions still under way after {limit:?}; the next owner may send them again");
        }
    }

    /// Gives every task up before the stream starts again after refused outputs, as a
    /// revocation would without its commit (the batch is not durable): the dispatcher stops
    /// for the SKU partitions (attempts under way store their outcome), the standby thread
    /// keeps the partitions from their last commit, the progress report shows them unowned.
    pub(super) fn let_go(&mut self) {
        let ids: Vec<PartitionId> = self.tasks.ids().collect();
        self.quiesce_actions(&ids);
        for id in &ids {
            self.opts.lifecycle.note(*id, State::Closed);
            self.opts.progress.revoked(*id);
            if id.source == SKU_REPARTITION {
                if let Ok(mut o) = self.opts.sku_owned.lock() {
                    o.remove(&id.partition);
                }
            }
        }
        self.tasks.clear();
        if let Some(standbys) = &self.opts.standbys {
            standbys.adopt(&ids);
        }
        self.opts.stats.assigned.store(0, Ordering::Relaxed);
    }

    pub(super) fn handle_assignment(&mut self, consumer: &Consumer_) -> anyhow::Result<()> {
        for event in consumer.context().assignment.take_events() {
            match event {
                AssignmentEvent::Revoked(ids, tpl) => {
                    // An import under way ends first: nothing writes a partition once it went.
                    let mut imported = Vec::new();
                    for id in &ids {
                        if self.imports.wait(*id) {
                            imported.push(*id);
                        } else {
                            self.opts.lifecycle.note(*id, State::HandingOver);
                        }
                    }
                    // Keep the work done so far: commit, make it durable, hand the state
                    // over (with snapshots on), then let the partitions go. They go even if
                    // the commit failed (the process then stops with that error): a closing
                    // consumer would wait for them forever.
                    let handed = self.hand_over(consumer, &ids);
                    if let Err(e) = TaskContext::release(consumer, &tpl) {
                        warn!(error = %e, partitions = ?ids, "releasing revoked partitions failed");
                    }
                    handed?;
                    for id in ids.iter().copied() {
                        self.opts.lifecycle.note(id, State::Closed);
                        self.tasks.remove(id);
                        self.opts.progress.revoked(id);
                        if id.source == SKU_REPARTITION {
                            if let Ok(mut o) = self.opts.sku_owned.lock() {
                                o.remove(&id.partition);
                            }
                        }
                    }
                    // Committed and released: the standby thread goes on from that commit.
                    if let Some(standbys) = &self.opts.standbys {
                        standbys.adopt(&ids);
                    }
                }
                AssignmentEvent::Assigned(ids) => {
                    // Liveness allows a restore long silences, and start-up passes from here.
                    self.opts.progress.restoring(true);
                    self.opts.progress.restore_started(&ids);
                    for id in ids {
                        self.start_task(consumer, id)?;
                    }
                    self.opts.progress.restoring(false);
                    // A fresh assignment is unpaused; the loop re-applies a pause in force.
                    self.paused = false;
                }
                AssignmentEvent::Importing(ids) => {
                    self.opts.progress.restore_started(&ids);
                    let assignment = &consumer.context().assignment;
                    let Some(restorer) = &assignment.snapshots else { continue };
                    let import = ImportContext {
                        store: Arc::clone(&self.store),
                        restorer: Arc::clone(restorer),
                        recall: assignment.recall.clone(),
                        lifecycle: Arc::clone(&self.opts.lifecycle),
                    };
                    for id in ids {
                        info!(partition = %id, "importing a snapshot; the other partitions go on");
                        self.imports.start(&import, id);
                    }
                }
            }
            self.count_assigned();
        }
        let imported = self.imports.finished();
        if !imported.is_empty() {
            for id in imported {
                self.start_task(consumer, id)?;
                self.seek_to_checkpoint(consumer, id);
                if !self.paused {
                    consumer.context().resumed(&[id]);
                    if let Err(e) = consumer.resume(&consumer.context().assignment.list_of(&[id])) {
                        warn!(partition = %id, error = %e, "cannot resume a partition after its import");
                    }
                }
            }
            self.count_assigned();
        }
        Ok(())
    }

    fn count_assigned(&self) {
        let orders = self.tasks.ids().filter(|id| id.source == ORDERS).count();
        self.opts.stats.assigned.store(orders as i64, Ordering::Relaxed);
    }

    /// Builds the task of `id` from the store and runs it (`restoring` → `running`).
    fn start_task(&mut self, consumer: &Consumer_, id: PartitionId) -> anyhow::Result<()> {
        self.opts.progress.beat();
        self.opts.lifecycle.note(id, State::Restoring);
        failpoint::hit("restore.mid");
        let restoring = Instant::now();
        let task = self.restore(consumer, id).with_context(|| format!("restoring {id}"))?;
        info!(
            partition = %id,
            next_offset = task.next_offset(),
            took_ms = restoring.elapsed().as_millis() as u64,
            "restored"
        );
        self.opts.progress.assigned(id, task.next_offset());
        if id.source == SKU_REPARTITION {
            // Its rows are dispatched from here on: what the audit topic says of them first.
            consumer.context().assignment.recalled();
            if let Ok(mut o) = self.opts.sku_owned.lock() {
                o.insert(id.partition);
            }
            // Its pending rows (restored, or left by an earlier spell of ownership) are found
            // by a scan of every owned outbox: the dispatcher's own record of scanned
            // partitions cannot tell a partition that left and came back between two of its
            // ticks.
            self.opts.stats.outbox_rescan.store(true, Ordering::Relaxed);
            if let Some(rows) = &self.opts.rows {
                rows.scan_now();
            }
        }
        self.tasks.insert(id, task);
        self.opts.lifecycle.note(id, State::Running);
        Ok(())
    }

    /// After an import: the partition was assigned (paused) at the snapshot's offset, its
    /// task starts at the imported checkpoint: the same or a little later (the files hold at
    /// least what the manifest says), earlier only when the import failed and an older
    /// snapshot or the local state was kept. The fetch position is an absolute offset here,
    /// so the seek is applied as asked (see `Assignment::position_at_checkpoints`).
    fn seek_to_checkpoint(&self, consumer: &Consumer_, id: PartitionId) {
        let Some(next) = self.tasks.get(id).map(Task::next_offset) else { return };
        let offset = if next > 0 { Offset::Offset(next) } else { Offset::Beginning };
        if let Err(e) = consumer.seek(self.topic_of(id), id.partition, offset, Duration::from_secs(10)) {
            warn!(partition = %id, error = %e, next_offset = next, "cannot move the fetch position to the imported checkpoint; the records before it are read and dropped");
        }
    }

    /// SPEC §1.4: a partition whose checkpoint lies below its log start (retention deleted
    /// records it never processed: a fresh state over an expired head, or a task that fell
    /// behind retention) never skips them silently. Without `--accept-gaps` this stops the
    /// process with the lost range; with it, the task moves to the log start and the skipped
    /// count is logged and counted (`tidemark_skipped_records_total`). A checkpoint beyond
    /// the log end (a topic deleted and recreated) always stops: the state is not this log's.
    pub(super) fn check_log_start(&self, consumer: &Consumer_, id: PartitionId, task: &mut Task) -> anyhow::Result<()> {
        let topic = self.topic_of(id);
        // Running already: a broker that is down (SPEC §6: a 10-minute outage) is waited
        // for, alive and reported, never a reason to exit.
        let (low, high) = wait_for_broker(
            &format!("reading the log start of {id} ({topic})"),
            &self.opts.stop,
            None,
            Some(&self.opts.progress),
            || consumer.fetch_watermarks(topic, id.partition, Duration::from_secs(10)),
        )?;
        let next = task.next_offset();
        gap::register(id);
        let verdict = gap::judge(id, topic, next, low, high, self.opts.accept_gaps, &self.opts.state_dir)?;
        if let Some(skipped) = verdict {
            task.skip_to(low);
            gap::record_skip(id, topic, next, low, skipped);
            // No seek here: the consumer's fetch at the old offset fails with an offset-reset
            // error, and `check_gaps` then restarts every task at its next offset (one path
            // for gaps found at assignment and gaps opened while running).
        }
        Ok(())
    }
}

/// The consumer's `heartbeat.interval.ms` for a session timeout: a tenth of it, between
/// 100 ms and librdkafka's default 3 s. After a member dies, the broker ends its session and
/// starts a rebalance, and each survivor hears of it only in the answer to its next
/// heartbeat; every round of a failover (a cooperative rebalance that moves partitions
/// between survivors takes two) waits for the slowest survivor's heartbeat. With the 3 s
/// default and a 6 s session that was up to half the session again per round.
pub(super) fn heartbeat_interval(session_timeout: Duration) -> Duration {
    (session_timeout / 10).clamp(Duration::from_millis(100), Duration::from_secs(3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_session_heartbeats_ten_times_within_it() {
        assert_eq!(heartbeat_interval(Duration::from_secs(6)), Duration::from_millis(600));
    }

    #[test]
    fn the_default_session_keeps_librdkafkas_three_second_heartbeat() {
        assert_eq!(heartbeat_interval(Duration::from_secs(30)), Duration::from_secs(3));
        assert_eq!(heartbeat_interval(Duration::from_secs(1800)), Duration::from_secs(3));
    }

    #[test]
    fn a_tiny_session_still_heartbeats_no_more_often_than_every_100_ms() {
        assert_eq!(heartbeat_interval(Duration::from_millis(500)), Duration::from_millis(100));
    }
}
