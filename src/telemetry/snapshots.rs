//! Snapshot metrics (`tidemark_snapshot*`): the snapshot thread's rounds, the hand-over
//! exports of revoked partitions, and the restores of moved or lost partitions.

use std::time::Duration;

use metrics::{counter, gauge, histogram};

use crate::snapshot::Op;

/// The label of a round: `ok` when no partition failed, else `failed`.
fn outcome(failed: bool) -> &'static str {
    if failed {
        "failed"
    } else {
        "ok"
    }
}

/// Makes the series exist (at 0) once the snapshot thread starts, so dashboards and alerts
/// see zeros rather than gaps.
pub fn started() {
    for failed in [false, true] {
        counter!("tidemark_snapshots_total", "outcome" => outcome(failed)).absolute(0);
    }
    counter!("tidemark_snapshot_restores_total").absolute(0);
    gauge!("tidemark_snapshot_last_success_timestamp_seconds").set(0.0);
    gauge!("tidemark_snapshot_bytes").set(0.0);
    for op in Op::ALL {
        counter!("tidemark_snapshot_failures_total", "op" => op.label()).absolute(0);
    }
    counter!("tidemark_snapshot_upload_bytes_total").absolute(0);
    counter!("tidemark_snapshot_reused_bytes_total").absolute(0);
    gauge!("tidemark_snapshot_lag_seconds").set(0.0);
}

/// One failed operation on the snapshot store or the local export (a round, a prune, a
/// restore's listing or download).
pub fn failed(op: Op) {
    counter!("tidemark_snapshot_failures_total", "op" => op.label()).increment(1);
}

/// Bytes uploaded by an export of several partitions (a round or a hand-over), and bytes of
/// the published snapshots' files that were in the store already (incremental snapshots).
pub fn uploaded(bytes: u64, reused: u64) {
    counter!("tidemark_snapshot_upload_bytes_total").increment(bytes);
    counter!("tidemark_snapshot_reused_bytes_total").increment(reused);
}

/// Seconds since the stalest owned partition's newest snapshot was last current (see
/// `snapshot::taker`).
pub fn lag(lag: Duration) {
    gauge!("tidemark_snapshot_lag_seconds").set(lag.as_secs_f64());
}

/// A round of the snapshot thread: how long it took, whether a partition failed, and the
/// bytes of the partitions' newest snapshots.
pub fn round(took: Duration, failed: bool, bytes: u64) {
    histogram!("tidemark_snapshot_duration_seconds").record(took.as_secs_f64());
    handed_over(failed);
    if !failed {
        gauge!("tidemark_snapshot_last_success_timestamp_seconds").set(chrono::Utc::now().timestamp() as f64);
    }
    gauge!("tidemark_snapshot_bytes").set(bytes as f64);
}

/// A round of hand-over exports (revoked partitions, on the stream thread): counted with
/// the snapshot thread's rounds.
pub fn handed_over(failed: bool) {
    counter!("tidemark_snapshots_total", "outcome" => outcome(failed)).increment(1);
}

/// A partition imported from a snapshot.
pub fn restored() {
    counter!("tidemark_snapshot_restores_total").increment(1);
}

/// A snapshot that could not be imported (an older one is tried next).
pub fn restore_failed() {
    counter!("tidemark_snapshot_restore_failures_total").increment(1);
}
