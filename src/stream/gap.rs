//! Records deleted from a log before they were processed (SPEC §1.4): never skipped
//! silently.
//!
//! A partition's checkpoint says which offset it processes next. When the broker's log for
//! that partition now starts later (retention or `deleteRecords` removed the head), the
//! records in between can never be read: the state would silently miss them. tidemark
//! stops with the lost range, unless the operator accepted gaps (`--accept-gaps`), in which
//! case the partition continues at the log start and the loss is logged, counted in
//! `tidemark_skipped_records_total{source,partition}` and shown on the dashboard.

use std::path::Path;

use tidemark_state::PartitionId;
use tracing::warn;

/// Judges a checkpoint against the log's `[low, high)`. `Ok(None)`: nothing lost.
/// `Ok(Some(n))`: `n` records were lost and gaps are accepted. `Err`: stop, with what was
/// lost and what to do.
pub fn judge(
    id: PartitionId,
    topic: &str,
    next: i64,
    low: i64,
    high: i64,
    accept_gaps: bool,
    state_dir: &Path,
) -> anyhow::Result<Option<i64>> {
    if next > high {
        anyhow::bail!(
            "{id} ({topic}): the state in {} continues at offset {next} but the log ends at {high}: \
             the topic was deleted and recreated, or the state belongs to another cluster. \
             Point --state-dir at this log's state, or start from an empty state directory",
            state_dir.display()
        );
    }
    if next >= low {
        return Ok(None);
    }
    let lost = low - next;
    if !accept_gaps {
        anyhow::bail!(
            "{id} ({topic}): records [{next}, {low}) ({lost} records) were deleted from the log \
             before this state processed them (the log now starts at {low}). Processing on \
             would silently miss them. Restore the state from a copy that is further along, or \
             pass --accept-gaps to continue at offset {low} and record the loss"
        );
    }
    Ok(Some(lost))
}

/// Makes the partition's series exist (at 0) from its assignment on, so dashboards and
/// `absent()`-style checks see it before anything is lost.
pub fn register(id: PartitionId) {
    crate::telemetry::stream::records_skipped(id, 0);
}

/// Logs and counts an accepted gap.
pub fn record_skip(id: PartitionId, topic: &str, from: i64, to: i64, lost: i64) {
    warn!(
        partition = %id,
        %topic,
        lost_from = from,
        lost_to = to,
        lost,
        "records deleted before they were processed; continuing at the log start (--accept-gaps)"
    );
    crate::telemetry::stream::records_skipped(id, u64::try_from(lost).unwrap_or(0));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judge_(next: i64, low: i64, high: i64, accept: bool) -> anyhow::Result<Option<i64>> {
        judge(PartitionId::orders(3), "orders", next, low, high, accept, Path::new("/state"))
    }

    #[test]
    fn a_checkpoint_inside_the_log_loses_nothing() {
        assert_eq!(judge_(5, 0, 10, false).ok(), Some(None));
        assert_eq!(judge_(10, 10, 10, false).ok(), Some(None));
    }

    #[test]
    fn a_checkpoint_below_the_log_start_stops_with_the_lost_range_unless_gaps_are_accepted() {
        let err = judge_(2, 7, 10, false).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("orders[3]") && err.contains("[2, 7)") && err.contains("--accept-gaps"), "{err}");
        assert_eq!(judge_(2, 7, 10, true).ok(), Some(Some(5)));
    }

    #[test]
    fn a_checkpoint_beyond_the_log_end_always_stops() {
        assert!(judge_(12, 0, 10, true).is_err());
    }
}
