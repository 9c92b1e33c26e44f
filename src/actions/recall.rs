//! Outcomes recalled from the audit topic when SKU partitions are assigned, before any of
//! their rows is dispatched (SPEC §3: no completed action is sent again after a move).
//!
//! Whatever state a newly assigned SKU partition resumes from — a snapshot just imported, the
//! process's own older copy (the partition went A → B → A and B delivered in between), a
//! standby copy, or nothing at all (a wiped volume without snapshots) — the actions that
//! reached an outcome after that state was written are not in it, and the replay re-derives
//! them. Every such outcome was audited after its partition's last record in that state was
//! appended: the row was derived from that record or a later one, or was pending then and
//! settled later. So the audit topic is read from the checkpoint's greatest append time less
//! [`CLOCK_MARGIN_MS`] (the broker stamps both times; the margin covers a leader change to a
//! broker whose clock is behind), or from its start when there is no state. The outcomes of
//! the assigned partitions go to [`Settled`]; a re-derived or rescanned row with such a key is
//! stored with its outcome and audited `settled`, never sent.
//!
//! The read runs in the rebalance callback, before the stream thread adds the partitions to
//! the dispatcher's owned set, so no row of theirs can be dispatched before it ends.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::Message;
use tidemark_state::Checkpoint;
use tracing::{error, info, warn};

use super::settled::{audit_event_in, AuditEvent};
use super::Settled;
use crate::engine::derive::sku_partition;
use crate::engine::outbox::RowState;
use crate::kafka::{reader, KafkaSettings};

/// How far before a checkpoint's greatest append time the audit topic is read.
pub const CLOCK_MARGIN_MS: i64 = 60_000;
/// Reads tried before giving up on one recall (the broker may be briefly unreachable).
const ATTEMPTS: u32 = 5;
const RETRY_AFTER: Duration = Duration::from_secs(2);

/// Where the audit read for a partition resuming from `checkpoint` starts (broker time in
/// ms); `None`: from the topic's start (no state: everything will be re-derived).
pub fn recall_since(checkpoint: Option<&Checkpoint>) -> Option<i64> {
    checkpoint.map(|c| c.max_append_ms.saturating_sub(CLOCK_MARGIN_MS)).filter(|ms| *ms > 0)
}

/// The audit topic's outcomes for SKU partitions as they are assigned.
pub struct Recall {
    settings: KafkaSettings,
    topic: String,
    settled: Arc<Settled>,
    /// The SKU repartition topic's partition count (known once the consumer has read the
    /// metadata; 0 before: then no outcome is filtered out).
    sku_partitions: AtomicI32,
    /// The process's stop flag: a recall under way when it is set is abandoned (nothing is
    /// dispatched once it is set, so no outcome is needed any more).
    stop: Arc<AtomicBool>,
}

impl Recall {
    pub fn new(settings: KafkaSettings, topic: String, settled: Arc<Settled>, stop: Arc<AtomicBool>) -> Self {
        crate::telemetry::actions::recalls_started();
        Recall { settings, topic, settled, sku_partitions: AtomicI32::new(0), stop }
    }

    pub fn set_sku_partitions(&self, n: i32) {
        self.sku_partitions.store(n, Ordering::Relaxed);
    }

    /// Lists in [`Settled`] the outcomes of `resumed` SKU partitions (number, and where its
    /// read starts: [`recall_since`]) the audit topic holds, in one read from the earliest.
    /// Blocking. Returns the outcomes listed; a read that fails after retries is logged as
    /// an error and counted: those partitions' completed actions may then be sent again.
    /// Once the stop flag is set the read ends within about a second and lists nothing: the
    /// dispatcher starts no attempt after a stop, so a SIGTERM during a broker outage is not
    /// held up by the recall's retries.
    pub fn before_dispatch(&self, resumed: &[(i32, Option<i64>)]) -> usize {
        if resumed.is_empty() {
            return 0;
        }
        let partitions: BTreeSet<i32> = resumed.iter().map(|(p, _)| *p).collect();
        let since = resumed.iter().map(|(_, s)| *s).min().flatten();
        let n = self.sku_partitions.load(Ordering::Relaxed);
        let wanted = |sku: &str| n <= 0 || partitions.contains(&sku_partition(sku, n));
        let started = Instant::now();
        for attempt in 1..=ATTEMPTS {
            if self.stop.load(Ordering::Relaxed) {
                info!(partitions = ?partitions, "stopping: the audit topic read before dispatching is abandoned");
                return 0;
            }
            // A key's records share an audit partition, in order: an operator's `resend`
            // (`tidemark actions resend`) after a failure makes the row pending again, and
            // undoes the outcome before it.
            let mut outcomes: HashMap<String, RowState> = HashMap::new();
            let read = reader::scan_topic(&self.settings, &self.topic, since, &self.stop, |msg| {
                match msg.payload().and_then(audit_event_in) {
                    Some(AuditEvent::Outcome(o)) if wanted(&o.sku) => {
                        outcomes.insert(o.key, o.state);
                    }
                    Some(AuditEvent::Resend { key }) => {
                        outcomes.remove(&key);
                    }
                    _ => {}
                }
            });
            match read {
                Ok(records) => {
                    let listed = outcomes.len();
                    self.settled.extend(outcomes);
                    crate::telemetry::actions::recalled(true);
                    info!(
                        partitions = ?partitions,
                        since_ms = ?since,
                        audit_records = records,
                        settled = listed,
                        took_ms = started.elapsed().as_millis() as u64,
                        "audit topic read before dispatching the assigned SKU partitions"
                    );
                    return listed;
                }
                Err(e) if e.is::<reader::Stopped>() => {
                    info!(partitions = ?partitions, "stopping: the audit topic read before dispatching is abandoned");
                    return 0;
                }
                Err(e) if attempt < ATTEMPTS => {
                    warn!(topic = %self.topic, attempt, error = %format!("{e:#}"), "cannot read the audit topic; retrying");
                    let waiting = Instant::now();
                    while waiting.elapsed() < RETRY_AFTER && !self.stop.load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
                Err(e) => {
                    crate::telemetry::actions::recalled(false);
                    error!(
                        topic = %self.topic,
                        partitions = ?partitions,
                        error = %format!("{e:#}"),
                        "cannot read the audit topic: actions these partitions completed elsewhere may be sent again"
                    );
                }
            }
        }
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_read_starts_a_margin_before_the_checkpoints_last_append_or_at_the_start_without_state() {
        let c = Checkpoint { next_offset: 9, max_append_ms: 1_795_860_000_000, ..Checkpoint::default() };
        assert_eq!(recall_since(Some(&c)), Some(1_795_860_000_000 - CLOCK_MARGIN_MS));
        assert_eq!(recall_since(None), None, "no state: everything is re-derived, so everything is read");
        let young = Checkpoint { max_append_ms: 10, ..Checkpoint::default() };
        assert_eq!(recall_since(Some(&young)), None, "never a time before the epoch (a sentinel to the broker)");
    }
}
