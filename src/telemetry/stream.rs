//! Stream thread metrics: its restarts in the process (`tidemark_stream_restarts_total`), the
//! records lost to gaps in a log (`tidemark_skipped_records_total`) and what the tasks hold
//! (`tidemark_task_entries`).

use metrics::{counter, gauge};
use tidemark_state::PartitionId;

/// Makes the restart series of each reason exist (at 0).
pub fn restarts_started(reasons: &[&'static str]) {
    for &reason in reasons {
        counter!("tidemark_stream_restarts_total", "reason" => reason).increment(0);
    }
}

/// The stream started again in this process, for `reason`.
pub fn restarted(reason: &'static str) {
    counter!("tidemark_stream_restarts_total", "reason" => reason).increment(1);
}

/// Records lost before they were processed: `lost` of partition `id` (0 makes its series
/// exist from its assignment on).
pub fn records_skipped(id: PartitionId, lost: u64) {
    counter!("tidemark_skipped_records_total", "source" => id.role(), "partition" => id.partition.to_string())
        .increment(lost);
}

/// The entries the tasks hold of one `kind` (`engine::held`).
pub fn task_entries(kind: &'static str, entries: usize) {
    gauge!("tidemark_task_entries", "kind" => kind).set(entries as f64);
}

/// Makes both outcome series of `tidemark_fences_total` exist (at 0).
pub fn fences_started() {
    for outcome in ["appended", "failed"] {
        counter!("tidemark_fences_total", "outcome" => outcome).increment(0);
    }
}

/// A fence appended to an idle input partition (`appended`), or one that failed.
pub fn fence(appended: bool) {
    counter!("tidemark_fences_total", "outcome" => if appended { "appended" } else { "failed" }).increment(1);
}
