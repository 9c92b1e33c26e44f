//! Log end offsets from the client's statistics, kept only while they are known to be fresh.
//!
//! A partition's `hi_offset` in librdkafka's statistics comes from the last fetch response for
//! it. The client keeps reporting it after the partition is revoked, and again after it is
//! assigned back, until a new fetch answers: a report stamped now with an end that is minutes
//! old. Believed, it makes a freshly assigned task look caught up, and its idle promise (the
//! report's time minus `idle_skew`) runs past records appended in between. The SKU merge then
//! applies them late, and actions differ from a run that never moved the partition.
//!
//! So an end counts only from a report in which the partition has been fetching (`fetch_state`
//! "active") since a report at least [`SETTLE`] earlier: long enough for a fetch sent after it
//! became active to have been answered (fetches wait at most 50 ms at the broker). Assigning
//! or revoking a partition forgets what was known of it, and so does resuming it: a paused
//! partition (waiting for its snapshot import, or `POST /pause`) is still "active" in the
//! statistics and keeps the end of its last fetch, possibly from an earlier spell of
//! ownership, so nothing is believed of it while paused, and its settling starts again when it
//! resumes. Reports written before a partition was last forgotten (delivered late) say nothing.
//!
//! A report is dated when librdkafka wrote it ([`written_at`]), not when the application's
//! poll delivered it: reports queue up while the stream thread restores partitions or commits,
//! and one delivered 400 ms late describes the log as it was 400 ms earlier.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use tidemark_state::PartitionId;

/// How long a partition must have been fetching before its reported end is believed.
pub const SETTLE: Duration = Duration::from_millis(300);

#[derive(Default)]
pub struct LogEnds {
    /// The believed end and the report that carried it.
    ends: HashMap<PartitionId, (i64, Instant)>,
    /// Since when each partition has been reported fetching, without a gap.
    fetching_since: HashMap<PartitionId, Instant>,
    /// Partitions paused by the application: whatever their reports say is not believed.
    paused: HashSet<PartitionId>,
    /// When each partition was last forgotten: reports written before then are ignored.
    forgotten_at: HashMap<PartitionId, Instant>,
}

impl LogEnds {
    /// One partition's line of a statistics report taken at `at`.
    pub fn observe(&mut self, id: PartitionId, fetching: bool, hi_offset: i64, at: Instant) {
        if self.forgotten_at.get(&id).is_some_and(|forgotten| at < *forgotten) {
            return;
        }
        if !fetching || hi_offset < 0 || self.paused.contains(&id) {
            self.unsettle(id);
            return;
        }
        let since = *self.fetching_since.entry(id).or_insert(at);
        if at.saturating_duration_since(since) >= SETTLE {
            self.ends.insert(id, (hi_offset, at));
        }
    }

    /// The partitions changed hands: nothing reported so far says anything about them.
    pub fn forget(&mut self, ids: &[PartitionId]) {
        self.forget_at(ids, Instant::now());
    }

    /// [`LogEnds::forget`] as of `at`: reports written before it are ignored when they arrive.
    /// A partition that changes hands, or that the application resumes, is no longer paused
    /// and settles from `at` on.
    pub fn forget_at(&mut self, ids: &[PartitionId], at: Instant) {
        for id in ids {
            self.unsettle(*id);
            self.paused.remove(id);
            self.forgotten_at.insert(*id, at);
        }
    }

    /// The application paused the partitions: their fetch stopped, their reports did not.
    /// Resuming them is [`LogEnds::forget`].
    pub fn pause(&mut self, ids: &[PartitionId]) {
        for id in ids {
            self.unsettle(*id);
            self.paused.insert(*id);
        }
    }

    /// Drops the partition's believed end and its settling.
    fn unsettle(&mut self, id: PartitionId) {
        self.ends.remove(&id);
        self.fetching_since.remove(&id);
    }

    /// When the partition's log end was last reported at or below `next`, if that report is
    /// at most `fresh` old: every record the broker held then has been consumed.
    pub fn caught_up_at(&self, id: PartitionId, next: i64, fresh: Duration) -> Option<Instant> {
        self.ends.get(&id).filter(|(end, at)| at.elapsed() <= fresh && next >= *end).map(|(_, at)| *at)
    }

    /// The believed end of a partition, if any.
    pub fn end(&self, id: PartitionId) -> Option<i64> {
        self.ends.get(&id).map(|(end, _)| *end)
    }
}

/// When a statistics report was written, from its `ts`: librdkafka's clock, microseconds of
/// `CLOCK_MONOTONIC` (rd_clock), the clock `Instant` reads on Linux. A report from the future
/// or from before the process counts as written now.
pub fn written_at(ts_us: i64) -> Instant {
    let now = Instant::now();
    let clock = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let now_us = clock.tv_sec.saturating_mul(1_000_000).saturating_add(clock.tv_nsec / 1_000);
    let age = u64::try_from(now_us.saturating_sub(ts_us)).unwrap_or(0);
    now.checked_sub(Duration::from_micros(age)).unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: PartitionId = PartitionId { source: 1, partition: 3 };

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_report_is_dated_by_the_clock_librdkafka_stamped_it_with() {
        let clock = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        let now_us = clock.tv_sec * 1_000_000 + clock.tv_nsec / 1_000;
        let age = written_at(now_us - 400_000).elapsed();
        assert!(age >= ms(400) && age < ms(1_400), "a report written 400 ms ago is {age:?} old");
        assert!(written_at(now_us + 60_000_000).elapsed() < ms(1_000), "a report from the future counts as now");
    }

    #[test]
    fn an_end_reported_before_the_partition_has_fetched_for_a_while_is_not_believed() {
        let t0 = Instant::now();
        let mut ends = LogEnds::default();
        ends.observe(P, true, 19, t0);
        ends.observe(P, true, 19, t0 + ms(100));
        assert_eq!(ends.end(P), None);
        ends.observe(P, true, 40, t0 + SETTLE);
        assert_eq!(ends.end(P), Some(40));
    }

    #[test]
    fn a_partition_that_stops_fetching_loses_its_end_and_starts_settling_again() {
        let t0 = Instant::now();
        let mut ends = LogEnds::default();
        ends.observe(P, true, 19, t0);
        ends.observe(P, true, 19, t0 + SETTLE);
        ends.observe(P, false, 19, t0 + SETTLE + ms(100));
        assert_eq!(ends.end(P), None);
        ends.observe(P, true, 19, t0 + SETTLE + ms(200));
        assert_eq!(ends.end(P), None, "a stale end right after fetching resumes");
    }

    #[test]
    fn an_assignment_change_forgets_the_end_even_if_the_client_still_reports_fetching() {
        let t0 = Instant::now();
        let mut ends = LogEnds::default();
        ends.observe(P, true, 19, t0);
        ends.observe(P, true, 19, t0 + SETTLE);
        ends.forget(&[P]);
        assert_eq!(ends.caught_up_at(P, 19, Duration::from_secs(60)), None);
        ends.observe(P, true, 19, t0 + SETTLE + ms(100));
        assert_eq!(ends.end(P), None);
    }

    #[test]
    fn a_paused_partition_is_not_caught_up_on_the_end_its_last_fetch_left_until_it_has_fetched_again() {
        // Assigned back and paused for its import: librdkafka still calls it "active" and
        // reports the end of a fetch from an earlier spell of ownership (19), while the log
        // has grown. Believed, the restored task would promise past records it never read.
        let t0 = Instant::now();
        let mut ends = LogEnds::default();
        ends.forget_at(&[P], t0);
        ends.pause(&[P]);
        for k in 0..10 {
            ends.observe(P, true, 19, t0 + ms(100) * k);
        }
        assert_eq!(ends.caught_up_at(P, 25, Duration::from_secs(60)), None, "believed while paused");
        let resumed = t0 + ms(1_000);
        ends.forget_at(&[P], resumed);
        ends.observe(P, true, 19, resumed - ms(10));
        ends.observe(P, true, 19, resumed + ms(10));
        ends.observe(P, true, 19, resumed + ms(10) + SETTLE - ms(1));
        assert_eq!(ends.end(P), None, "a report written before the resume counted towards settling");
        ends.observe(P, true, 60, resumed + ms(10) + SETTLE);
        assert_eq!(ends.end(P), Some(60), "after fetching for SETTLE since the resume");
    }

    #[test]
    fn a_partition_revoked_while_paused_and_assigned_back_is_believed_again() {
        let t0 = Instant::now();
        let mut ends = LogEnds::default();
        ends.pause(&[P]);
        ends.forget_at(&[P], t0);
        ends.observe(P, true, 19, t0 + ms(10));
        ends.observe(P, true, 19, t0 + ms(10) + SETTLE);
        assert_eq!(ends.end(P), Some(19), "still taken for paused after it changed hands");
    }

    #[test]
    fn a_report_written_before_the_assignment_but_delivered_after_says_nothing() {
        let t0 = Instant::now();
        let mut ends = LogEnds::default();
        ends.forget_at(&[P], t0 + ms(500));
        ends.observe(P, true, 19, t0);
        ends.observe(P, true, 19, t0 + ms(500) + SETTLE - ms(1));
        assert_eq!(ends.end(P), None, "the early report started the settling");
    }

    #[test]
    fn caught_up_needs_a_fresh_end_at_or_below_the_next_offset() {
        let t0 = Instant::now().checked_sub(Duration::from_secs(10)).expect("a clock ten seconds old");
        let mut ends = LogEnds::default();
        ends.observe(P, true, 19, t0);
        ends.observe(P, true, 19, t0 + SETTLE);
        assert!(ends.caught_up_at(P, 19, Duration::from_secs(60)).is_some());
        assert!(ends.caught_up_at(P, 18, Duration::from_secs(60)).is_none());
        assert!(ends.caught_up_at(P, 19, Duration::from_secs(1)).is_none(), "a report ten seconds old is stale");
    }
}
