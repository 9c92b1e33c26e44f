//! `--exit-at-end`: when the work derived from the log is done.
//!
//! After each commit, the stream thread stops once all of these hold:
//! 1. every assigned `orders`/`inventory` partition is at its log end (the client's
//!    statistics, as for idle promises); the first time this holds starts the drain timeout;
//! 2. no SKU task holds records for the merge;
//! 3. the action runtime has no row queued or in delivery, and no shadow row whose audit is
//!    unacknowledged (its [`Backlog`](crate::actions::Backlog));
//! 4. the SKU and combine tasks consumed their internal partitions (SKU repartition,
//!    combine repartition) up to a *look* taken at an earlier check: the partitions' high
//!    watermarks, read after the commit in flight completed (so every line, snapshot and
//!    partial derived so far was acknowledged, hence lies below them), together with the
//!    upstream tasks' positions; a combine task's rows are then written and acknowledged
//!    by the commit that consumed them. A look stays valid while those positions
//!    stay the same, i.e. nothing was derived since (upstream positions count the records
//!    applied, so fences a fencing process appends meanwhile do not move them), and a new
//!    one is taken only when it no longer holds. Progress marks appended after the look
//!    are not waited for: with nothing buffered they release nothing, and a caught-up
//!    upstream writes a new one every commit, so a look at the newest would never be reached;
//! 5. no outbox row of an owned SKU partition is still `Pending` (rows a full hand-over
//!    channel left to the runtime's rescan, rows an earlier run left unsent).
//!
//! 3 and 5 apply only when an action runtime takes the rows (`StreamOptions::rows`); without
//! one, committed actions wait in the outbox for the next run. Lines that upstream partitions
//! owned by another process derive are waited for as far as they were in the log at the look.
//!
//! If the drain timeout passes after 1 first held, the stream stops anyway and returns
//! [`DrainTimeout`] with what remains; a later run from the same state continues from its
//! checkpoints (pending actions are sent by its runtime).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::error::{KafkaError, KafkaResult};
use tidemark_state::PartitionId;
use tracing::{debug, info, warn};

use super::{Consumer_, Runner};
use crate::actions;
use crate::tasks::{is_internal, SKU_REPARTITION};

/// What was left when `--drain-timeout` ran out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainTimeout {
    pub timeout: Duration,
    /// Records of assigned partitions not yet consumed (by the last log ends seen).
    pub records: i64,
    /// Records the SKU merge still holds for upstream progress.
    pub buffered: usize,
    /// Outbox rows of owned SKU partitions still `Pending`.
    pub actions: usize,
    /// Shadow rows whose audit records were not yet acknowledged.
    pub shadow: usize,
}

impl fmt::Display for DrainTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "--drain-timeout {} reached with work left: {} record(s) not yet consumed, {} held by the SKU merge, \
             {} action(s) pending, {} shadow audit(s) unsent; a run from the same state continues from there",
            humantime::format_duration(self.timeout),
            self.records,
            self.buffered,
            self.actions,
            self.shadow
        )
    }
}

impl std::error::Error for DrainTimeout {}

pub(super) struct Drain {
    timeout: Duration,
    /// When every assigned input partition was first seen at its log end.
    inputs_at_end: Option<Instant>,
    look: Option<Look>,
    /// Set when the timeout stopped the stream.
    pub(super) timed_out: Option<DrainTimeout>,
}

impl Drain {
    pub(super) fn new(timeout: Duration) -> Self {
        Drain { timeout, inputs_at_end: None, look: None, timed_out: None }
    }
}

/// The owned internal partitions' log ends at one check, and the upstream positions whose
/// derived records they include.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Look {
    ends: BTreeMap<PartitionId, i64>,
    upstream: BTreeMap<PartitionId, i64>,
}

impl Look {
    /// No upstream task moved since the look and the internal partitions are the same, so
    /// nothing was derived after it: its ends are still the whole of what there is to read.
    fn holds(&self, upstream: &BTreeMap<PartitionId, i64>, internal: &BTreeMap<PartitionId, i64>) -> bool {
        self.upstream == *upstream
            && self.ends.len() == internal.len()
            && internal.keys().all(|p| self.ends.contains_key(p))
    }

    /// The look holds and every record it saw was consumed (`internal`: next offset per SKU
    /// and combine partition).
    fn reached(&self, upstream: &BTreeMap<PartitionId, i64>, internal: &BTreeMap<PartitionId, i64>) -> bool {
        self.holds(upstream, internal)
            && internal.iter().all(|(p, next)| self.ends.get(p).is_some_and(|end| next >= end))
    }
}

impl Runner {
    /// Whether the stream may stop now (see the module doc). Called after a commit while
    /// `exit_at_end` is armed. Also true when the drain timeout has passed; then
    /// `drain.timed_out` holds what remains.
    pub(super) fn drained(&mut self, consumer: &Consumer_) -> anyhow::Result<bool> {
        // A partition still importing has no task yet: its records are all ahead.
        if self.tasks.is_empty() || !self.imports.is_empty() {
            return Ok(false);
        }
        let inputs_at_end =
            self.tasks.iter().filter(|(id, _)| !is_internal(id.source)).all(|(id, t)| self.idle(consumer, *id, t));
        if inputs_at_end {
            self.drain.inputs_at_end.get_or_insert_with(Instant::now);
            if self.derived_work_done(consumer)? {
                info!("every assigned partition is at the end of the log and the work derived from it is done");
                return Ok(true);
            }
        }
        match self.drain.inputs_at_end {
            Some(since) if since.elapsed() >= self.drain.timeout => {
                let left = self.remaining(consumer);
                warn!(
                    records = left.records,
                    buffered = left.buffered,
                    actions = left.actions,
                    shadow = left.shadow,
                    "drain timeout reached: stopping with work left"
                );
                self.drain.timed_out = Some(left);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Steps 2–5 of the module doc; step 1 holds.
    fn derived_work_done(&mut self, consumer: &Consumer_) -> anyhow::Result<bool> {
        if self.tasks.tasks().any(|t| t.buffered() > 0) {
            return Ok(false);
        }
        let backlog = self.opts.rows.as_ref().map(|r| Arc::clone(r.backlog()));
        if backlog.as_ref().is_some_and(|b| !b.is_empty()) {
            return Ok(false);
        }
        // The batch in flight: then its outputs are acknowledged and its rows handed over.
        self.complete(consumer)?;
        let (upstream, internal) = self.positions();
        match &self.drain.look {
            Some(l) if l.reached(&upstream, &internal) => {}
            // Still behind a look that holds: wait for the tasks to read up to it. A new look
            // costs a round trip to the broker per internal partition, on the stream thread:
            // taken at every commit, it held the commits ~400 ms apart while the SKU
            // partitions were read behind the orders (a drain's last ~25 s of 34).
            Some(l) if l.holds(&upstream, &internal) => return Ok(false),
            _ => {
                self.drain.look = self.look(consumer, upstream, &internal);
                return Ok(false);
            }
        }
        let Some(backlog) = backlog else { return Ok(true) };
        // Empty before and after the scan: a row settling meanwhile was counted throughout.
        if !backlog.is_empty() || self.pending_actions()? > 0 {
            return Ok(false);
        }
        Ok(backlog.is_empty())
    }

    /// Records applied by the upstream tasks (fences, which derive nothing, do not count: a
    /// fencing process beside this one would otherwise move them at every commit and no look
    /// would ever be reached), and next offsets of the internal (SKU, combine) tasks.
    fn positions(&self) -> (BTreeMap<PartitionId, i64>, BTreeMap<PartitionId, i64>) {
        let mut upstream = BTreeMap::new();
        let mut internal = BTreeMap::new();
        for (id, t) in self.tasks.iter() {
            if is_internal(id.source) {
                internal.insert(*id, t.next_offset());
            } else {
                upstream.insert(*id, i64::try_from(t.checkpoint().records).unwrap_or(i64::MAX));
            }
        }
        (upstream, internal)
    }

    /// Reads the owned internal partitions' high watermarks; `None` when the broker did not
    /// answer (the next check tries again).
    ///
    /// All at once, one thread per partition: the broker answers a connection's requests in
    /// order, so each query waits behind the consumer's fetch in purgatory (up to
    /// `fetch.wait.max.ms`, 50 ms): one after the other, 8 partitions took ~400 ms of the
    /// stream thread at the end of every drain.
    fn look(
        &self,
        consumer: &Consumer_,
        upstream: BTreeMap<PartitionId, i64>,
        internal: &BTreeMap<PartitionId, i64>,
    ) -> Option<Look> {
        let started = Instant::now();
        let queries: Vec<(PartitionId, &str)> = internal.keys().map(|id| (*id, self.topic_of(*id))).collect();
        let answers: Vec<(PartitionId, KafkaResult<(i64, i64)>)> = std::thread::scope(|scope| {
            let running: Vec<_> = queries
                .iter()
                .map(|(id, topic)| {
                    (*id, scope.spawn(move || consumer.fetch_watermarks(topic, id.partition, Duration::from_secs(5))))
                })
                .collect();
            running
                .into_iter()
                .map(|(id, h)| {
                    let answer = h.join().unwrap_or_else(|_| Err(KafkaError::Canceled));
                    (id, answer)
                })
                .collect()
        });
        let mut ends = BTreeMap::new();
        for (id, answer) in answers {
            match answer {
                Ok((_, high)) => {
                    ends.insert(id, high);
                }
                Err(e) => {
                    debug!(partition = %id, error = %e, "cannot read the log end");
                    return None;
                }
            }
        }
        debug!(
            partitions = ends.len(),
            took_ms = started.elapsed().as_millis(),
            "looked at the internal partitions' ends"
        );
        Some(Look { ends, upstream })
    }

    /// `Pending` outbox rows of the owned SKU partitions.
    fn pending_actions(&self) -> anyhow::Result<usize> {
        let mut n = 0;
        for id in self.tasks.ids().filter(|id| id.source == SKU_REPARTITION) {
            n += actions::pending_in_outbox(&self.store, id)?;
        }
        Ok(n)
    }

    fn remaining(&self, consumer: &Consumer_) -> DrainTimeout {
        let records = consumer.context().log_ends.lock().map_or(0, |ends| {
            self.tasks.iter().filter_map(|(id, t)| ends.end(*id).map(|end| (end - t.next_offset()).max(0))).sum()
        });
        let actions = self.pending_actions().unwrap_or_else(|e| {
            warn!(error = %e, "cannot count pending outbox rows");
            0
        });
        DrainTimeout {
            timeout: self.drain.timeout,
            records,
            buffered: self.tasks.tasks().map(|t| t.buffered()).sum(),
            actions,
            shadow: self.opts.rows.as_ref().map_or(0, |r| r.backlog().shadow()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up(entries: &[(i32, i64)]) -> BTreeMap<PartitionId, i64> {
        entries.iter().map(|(p, o)| (PartitionId { source: 0, partition: *p }, *o)).collect()
    }

    fn sku(entries: &[(i32, i64)]) -> BTreeMap<PartitionId, i64> {
        entries.iter().map(|(p, o)| (PartitionId::sku(*p), *o)).collect()
    }

    fn look() -> Look {
        let mut ends = sku(&[(0, 10), (1, 4)]);
        ends.insert(PartitionId { source: PartitionId::COMBINE, partition: 0 }, 20);
        Look { ends, upstream: up(&[(0, 100), (1, 50)]) }
    }

    fn with_combine(mut positions: BTreeMap<PartitionId, i64>, next: i64) -> BTreeMap<PartitionId, i64> {
        positions.insert(PartitionId { source: PartitionId::COMBINE, partition: 0 }, next);
        positions
    }

    #[test]
    fn a_look_is_reached_once_every_internal_partition_consumed_its_log_end_and_no_upstream_moved() {
        let l = look();
        assert!(l.reached(&up(&[(0, 100), (1, 50)]), &with_combine(sku(&[(0, 10), (1, 7)]), 20)));
        assert!(
            !l.reached(&up(&[(0, 100), (1, 50)]), &with_combine(sku(&[(0, 9), (1, 7)]), 20)),
            "SKU partition 0 short of its end"
        );
        assert!(
            !l.reached(&up(&[(0, 100), (1, 50)]), &with_combine(sku(&[(0, 10), (1, 7)]), 19)),
            "the combine partition short of its end"
        );
    }

    #[test]
    fn a_look_still_holds_while_the_tasks_read_up_to_it_and_no_upstream_moved() {
        let l = look();
        let behind = with_combine(sku(&[(0, 3), (1, 0)]), 5);
        assert!(l.holds(&up(&[(0, 100), (1, 50)]), &behind), "behind it: kept, no new look");
        assert!(!l.reached(&up(&[(0, 100), (1, 50)]), &behind));
        assert!(!l.holds(&up(&[(0, 100), (1, 51)]), &behind), "upstream derived more since: a new look");
        assert!(!l.holds(&up(&[(0, 100), (1, 50)]), &sku(&[(0, 3), (1, 0)])), "the combine partition went away");
        assert!(
            !l.holds(&up(&[(0, 100), (1, 50)]), &with_combine(sku(&[(0, 3), (2, 0)]), 5)),
            "another SKU partition instead of partition 1"
        );
    }

    #[test]
    fn a_look_taken_before_an_upstream_moved_or_the_assignment_changed_is_not_reached() {
        let l = look();
        let internal = with_combine(sku(&[(0, 10), (1, 4)]), 20);
        assert!(!l.reached(&up(&[(0, 101), (1, 50)]), &internal), "upstream derived more since");
        assert!(!l.reached(&up(&[(0, 100)]), &internal), "an upstream partition went away");
        assert!(
            !l.reached(&up(&[(0, 100), (1, 50)]), &with_combine(sku(&[(0, 10), (1, 4), (2, 0)]), 20)),
            "a SKU partition came"
        );
    }
}
