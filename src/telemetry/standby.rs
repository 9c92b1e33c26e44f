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
