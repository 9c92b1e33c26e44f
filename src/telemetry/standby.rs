//! Standby metrics (`tidemark_standby_*`): the standby tasks' size, lag and warmth, their
//! promotions, and the outbox rows a standby holds until the audit topic settles them.

use metrics::{counter, gauge};

/// Makes the promotion series exist (at 0) once standbys run.
pub fn started() {
    counter!("tidemark_standby_promotions_total").absolute(0);
}

/// `partitions` standby tasks promoted to active ones.
pub fn promoted(partitions: usize) {
    counter!("tidemark_standby_promotions_total").increment(partitions as u64);
}

/// The standby thread's tasks, their summed lag behind what the owners committed, and
/// whether every one is warm.
pub fn tasks(partitions: usize, lag_records: i64, warm: bool) {
    gauge!("tidemark_standby_partitions").set(partitions as f64);
    gauge!("tidemark_standby_lag_records").set(lag_records as f64);
    gauge!("tidemark_standby_warm").set(if warm { 1.0 } else { 0.0 });
}

/// Makes the standby rows' series exist (at 0).
pub fn rows_started() {
    counter!("tidemark_standby_rows_settled_total").absolute(0);
    counter!("tidemark_standby_rows_untracked_total").absolute(0);
}

/// A standby row not tracked (the waiting rows are at their limit).
pub fn row_untracked() {
    counter!("tidemark_standby_rows_untracked_total").increment(1);
}

/// A standby row stored with the outcome the audit topic recorded.
pub fn row_settled() {
    counter!("tidemark_standby_rows_settled_total").increment(1);
}

/// The standby rows waiting for their outcome.
pub fn rows_waiting(rows: usize) {
    gauge!("tidemark_standby_rows_waiting").set(rows as f64);
}

/// Which partitions this pod keeps a standby task for:
/// `tidemark_standby_partition{source,partition}` (1 while kept, 0 once let go).
pub fn partitions(changed: impl IntoIterator<Item = (tidemark_state::PartitionId, bool)>) {
    for (id, kept) in changed {
        gauge!("tidemark_standby_partition", "source" => id.role(), "partition" => id.partition.to_string())
            .set(if kept { 1.0 } else { 0.0 });
    }
}

/// Which partitions have state in the local store, as the janitor last read it:
/// `tidemark_state_partition_local{source,partition}` (1 while held, 0 once gone). With
/// `tidemark_partition_owned` and `tidemark_standby_partition` it shows a disk that holds
/// more than it owns or shadows.
pub fn held(
    before: &std::collections::BTreeSet<tidemark_state::PartitionId>,
    now: &std::collections::BTreeSet<tidemark_state::PartitionId>,
) {
    for id in before.difference(now) {
        gauge!("tidemark_state_partition_local", "source" => id.role(), "partition" => id.partition.to_string())
            .set(0.0);
    }
    for id in now {
        gauge!("tidemark_state_partition_local", "source" => id.role(), "partition" => id.partition.to_string())
            .set(1.0);
    }
}

/// Makes the dropped-partitions series exist (at 0).
pub fn drops_started() {
    counter!("tidemark_state_partitions_dropped_total").absolute(0);
}

/// The local state of a partition that moved away (neither owned nor shadowed here for the
/// grace period) was deleted.
pub fn dropped(id: tidemark_state::PartitionId) {
    counter!("tidemark_state_partitions_dropped_total", "source" => id.role()).increment(1);
}
