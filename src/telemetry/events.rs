//! Typed metric events. Names follow Prometheus conventions and are listed in
//! `helm/metric-names.txt`, which the chart's dashboard and alerts are checked against.

use std::sync::atomic::Ordering;
use std::time::Duration;

use metrics::{counter, gauge, histogram, Histogram};
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};
use tidemark_state::PartitionId;
use tidemark_topology::reject::RejectReason;

use super::Progress;
use crate::engine::Stats;

pub const LATENCY: &str = "tidemark_latency_seconds";
pub const CHECKPOINT: &str = "tidemark_checkpoint_duration_seconds";
pub const COMMIT_WAIT: &str = "tidemark_commit_wait_seconds";
pub const COMMIT_PHASE: &str = "tidemark_commit_phase_seconds";
pub const DISPATCH: &str = "tidemark_dispatch_total";
pub const DISPATCH_OUTCOMES: [&str; 4] = ["delivered", "conflict", "retry", "permanent_failure"];

/// Fine between 50 ms and 3 s, where action latencies live, so quantiles interpolated
/// from the buckets are within ~100 ms there (with 1 s / 2.5 s buckets a p99 of 1.2 s read
/// as 2.4 s).
const BUCKETS: [f64; 26] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 2.5,
    3.0, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// Installs the process-wide Prometheus recorder.
pub fn install() -> Result<PrometheusHandle, BuildError> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(LATENCY.into()), &BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(CHECKPOINT.into()), &BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(COMMIT_WAIT.into()), &BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(COMMIT_PHASE.into()), &BUCKETS)?
        .install_recorder()?;
    // Series exist from the start, so dashboards and alerts see zeros rather than gaps.
    for outcome in DISPATCH_OUTCOMES {
        counter!(DISPATCH, "outcome" => outcome).absolute(0);
    }
    gauge!("tidemark_outbox_pending").set(0.0);
    gauge!("tidemark_outbox_oldest_pending_age_seconds").set(0.0);
    counter!("tidemark_rebalances_total").absolute(0);
    gauge!("tidemark_paused").set(0.0);
    counter!("tidemark_dispatch_redeliveries_total").absolute(0);
    counter!("tidemark_outbox_expired_total").absolute(0);
    Ok(handle)
}

/// The segments of the 10 s action budget (SPEC §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Segment {
    AppendToConsume,
    AppendToRelease,
    ConsumeToCommit,
    CommitToDispatch,
    DispatchToAck,
    EndToEnd,
}

impl Segment {
    pub fn as_str(self) -> &'static str {
        match self {
            Segment::AppendToConsume => "append_to_consume",
            Segment::AppendToRelease => "append_to_release",
            Segment::ConsumeToCommit => "consume_to_commit",
            Segment::CommitToDispatch => "commit_to_dispatch",
            Segment::DispatchToAck => "dispatch_to_ack",
            Segment::EndToEnd => "end_to_end",
        }
    }
}

/// Histogram handles resolved once, recorded on the hot path without a registry lookup.
#[derive(Clone)]
pub struct Latencies {
    pub append_to_consume: Histogram,
    pub consume_to_commit: Histogram,
    pub checkpoint: Histogram,
    /// How long the stream thread waited for the previous batch's commit.
    pub commit_wait: Histogram,
    /// The stream thread's part of a commit: every task finishes into the batch and the
    /// marks are made (`phase="finish"`), ...
    pub finish: Histogram,
    /// ... then every output is queued in the producer (`phase="produce"`; it waits when the
    /// producer's queue is full).
    pub produce: Histogram,
    /// The commit thread's wait for every output of the batch to be acknowledged, before
    /// the state write (`phase="outputs"`).
    pub outputs: Histogram,
}

impl Default for Latencies {
    fn default() -> Self {
        let seg = |s: Segment| histogram!(LATENCY, "segment" => s.as_str());
        Latencies {
            append_to_consume: seg(Segment::AppendToConsume),
            consume_to_commit: seg(Segment::ConsumeToCommit),
            checkpoint: histogram!(CHECKPOINT),
            commit_wait: histogram!(COMMIT_WAIT),
            finish: histogram!(COMMIT_PHASE, "phase" => "finish"),
            produce: histogram!(COMMIT_PHASE, "phase" => "produce"),
            outputs: histogram!(COMMIT_PHASE, "phase" => "outputs"),
        }
    }
}

impl Latencies {
    pub fn checkpoint_committed(&self, took: Duration) {
        self.checkpoint.record(took.as_secs_f64());
    }
}

/// A line or snapshot released by a SKU task's merge, `age_ms` after its upstream record's
/// broker append (`segment="append_to_release"`: the first hop, the merge's wait for every
/// upstream's promise, not the SKU commit). The handle is resolved once.
pub fn merge_released(age_ms: i64) {
    static RELEASED: std::sync::OnceLock<Histogram> = std::sync::OnceLock::new();
    RELEASED
        .get_or_init(|| histogram!(LATENCY, "segment" => Segment::AppendToRelease.as_str()))
        .record(age_ms.max(0) as f64 / 1000.0);
}

/// One observation of a latency segment (the dispatcher's segments, off the hot path).
pub fn observe(name: &'static str, segment: Segment, seconds: f64) {
    histogram!(name, "segment" => segment.as_str()).record(seconds);
}

/// `tidemark_build_info{version, commit}` at 1: which build a pod runs (set once, at start).
pub fn build_info(version: &'static str, commit: String) {
    gauge!("tidemark_build_info", "version" => version, "commit" => commit).set(1.0);
}

pub fn rebalanced() {
    counter!("tidemark_rebalances_total").increment(1);
}

/// A task transition the lifecycle does not allow (`tasks::lifecycle`): a defect, logged and
/// counted; the partition goes on.
pub fn transition_refused(refused: &crate::tasks::lifecycle::Refused) {
    tracing::error!(partition = %refused.partition, from = refused.from.name(), to = refused.to.name(), "task transition refused: {refused}");
    counter!("tidemark_task_transitions_refused_total", "from" => refused.from.name(), "to" => refused.to.name())
        .increment(1);
}

/// Copies the engine's counters and the partitions' progress into the registry; called
/// right before each scrape renders.
pub fn publish(stats: &Stats, progress: &Progress) {
    gauge!("tidemark_paused").set(if progress.paused.load(Ordering::Relaxed) { 1.0 } else { 0.0 });
    counter!("tidemark_records_total").absolute(Stats::get(&stats.records));
    counter!("tidemark_events_applied_total").absolute(Stats::get(&stats.events_applied));
    counter!("tidemark_dedup_hits_total").absolute(Stats::get(&stats.dedup_hits));
    counter!("tidemark_late_events_total").absolute(Stats::get(&stats.late));
    counter!("tidemark_sku_late_lines_total").absolute(Stats::get(&stats.sku_late_lines));
    counter!("tidemark_merge_broken_promises_total").absolute(Stats::get(&stats.broken_promises));
    for (reason, n) in RejectReason::ALL.iter().zip(stats.dead_letters_by_reason.iter()) {
        counter!("tidemark_dead_letters_total", "reason" => reason.as_str()).absolute(Stats::get(n));
    }
    let ownership = progress.ownership();
    publish_ownership(&ownership);
    let tracked = progress.snapshot();
    for (id, p) in &tracked {
        partition_backlog(*id, p.backlog_age_s, p.lag());
    }
    // A partition revoked from this pod keeps its series (the registry cannot drop one), at 0:
    // its backlog is its new owner's to report, and a stale age or lag here would fire
    // TidemarkBacklogAgeHigh for a backlog nobody has.
    for (id, _) in ownership.partitions().filter(|(id, owned)| !owned && !tracked.contains_key(id)) {
        partition_backlog(id, 0.0, Some(0));
    }
}

/// `tidemark_backlog_age_seconds` and (once known) `tidemark_consumer_lag_records` of a partition.
fn partition_backlog(id: PartitionId, age_s: f64, lag: Option<i64>) {
    let (source, partition) = (id.role(), id.partition.to_string());
    gauge!("tidemark_backlog_age_seconds", "source" => source, "partition" => partition.clone()).set(age_s);
    if let Some(lag) = lag {
        gauge!("tidemark_consumer_lag_records", "source" => source, "partition" => partition).set(lag as f64);
    }
}

/// Ownership per partition and per source: `tidemark_partition_owned{source,partition}` (1
/// while owned and restored, 0 once revoked), `tidemark_input_partitions{source}` (the
/// topic's partition count) and `tidemark_partitions_restoring{source}`. The chart's
/// `TidemarkPartitionUnowned` compares the owned partitions of every pod with the count.
fn publish_ownership(o: &super::ownership::Ownership) {
    let role = |source: u16| PartitionId { source, partition: 0 }.role();
    for (source, count) in o.counts() {
        gauge!("tidemark_input_partitions", "source" => role(source)).set(f64::from(count));
    }
    for (source, n) in o.restoring_by_source() {
        gauge!("tidemark_partitions_restoring", "source" => role(source)).set(n as f64);
    }
    for (id, owned) in o.partitions() {
        gauge!("tidemark_partition_owned", "source" => id.role(), "partition" => id.partition.to_string())
            .set(if owned { 1.0 } else { 0.0 });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The series of `name` for `orders[1]` on a rendered page.
    fn orders_1(page: &str, name: &str) -> Option<f64> {
        page.lines()
            .find(|l| l.starts_with(name) && l.contains("source=\"orders\"") && l.contains("partition=\"1\""))
            .and_then(|l| l.rsplit_once(' '))
            .and_then(|(_, v)| v.parse().ok())
    }

    #[test]
    fn a_partition_revoked_with_a_backlog_reports_no_backlog_and_no_lag_here_afterwards() {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let (stats, progress) = (Stats::default(), Progress::default());
        let id = PartitionId::orders(1);
        progress.input_partitions([(id.source, 4)]);
        progress.restore_started(&[id]);
        progress.assigned(id, 100);
        progress.high_watermark(id, 250);
        progress.backlog_age(id, 7.5);
        metrics::with_local_recorder(&recorder, || publish(&stats, &progress));
        let page = handle.render();
        assert_eq!(orders_1(&page, "tidemark_consumer_lag_records"), Some(150.0), "{page}");
        assert_eq!(orders_1(&page, "tidemark_backlog_age_seconds"), Some(7.5), "{page}");

        progress.revoked(id);
        metrics::with_local_recorder(&recorder, || publish(&stats, &progress));
        let page = handle.render();
        assert_eq!(orders_1(&page, "tidemark_partition_owned"), Some(0.0), "{page}");
        assert_eq!(orders_1(&page, "tidemark_consumer_lag_records"), Some(0.0), "{page}");
        assert_eq!(orders_1(&page, "tidemark_backlog_age_seconds"), Some(0.0), "{page}");
    }
}
