//! Event-time window arithmetic and the per-partition watermark.
//!
//! Windows are tumbling and half-open, `[start, start + size)`, aligned to the Unix epoch.
//! The watermark is a pure function of the events a partition has applied, so lateness
//! decisions replay identically.

use serde::{Deserialize, Serialize};

/// Start of the tumbling window of `size_ms` that contains `t_ms` (floor division, so
/// instants before the epoch land in the right window too).
pub fn window_start(t_ms: i64, size_ms: i64) -> i64 {
    t_ms.div_euclid(size_ms) * size_ms
}

/// Tracks `max event time seen − allowed lateness` for one partition.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Watermark {
    max_event_ms: Option<i64>,
}

impl Watermark {
    pub fn from_max_event(max_event_ms: Option<i64>) -> Self {
        Watermark { max_event_ms }
    }

    pub fn max_event_ms(&self) -> Option<i64> {
        self.max_event_ms
    }

    /// The watermark itself; `None` before the first event.
    pub fn value(&self, allowed_lateness_ms: i64) -> Option<i64> {
        self.max_event_ms.map(|m| m - allowed_lateness_ms)
    }

    pub fn observe(&mut self, event_ms: i64) {
        self.max_event_ms = Some(self.max_event_ms.map_or(event_ms, |m| m.max(event_ms)));
    }
}

/// Window timing policy: when a window stops firing actions and when it stops accepting data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowPolicy {
    pub size_ms: i64,
    pub allowed_lateness_ms: i64,
    pub grace_ms: i64,
    pub retention_ms: i64,
}

impl WindowPolicy {
    /// A window is closed for actions once the watermark passes `end + grace`.
    pub fn closed_for_actions(&self, start_ms: i64, watermark: Option<i64>) -> bool {
        watermark.is_some_and(|w| w >= start_ms + self.size_ms + self.grace_ms)
    }

    /// A window is expired (data for it goes to the late side output) once the watermark
    /// passes `end + retention`.
    pub fn expired(&self, start_ms: i64, watermark: Option<i64>) -> bool {
        watermark.is_some_and(|w| w >= start_ms + self.size_ms + self.retention_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000;

    #[test]
    fn window_start_floors_negative_instants_into_the_earlier_window() {
        assert_eq!(window_start(-1, MIN), -MIN);
        assert_eq!(window_start(0, MIN), 0);
        assert_eq!(window_start(MIN - 1, MIN), 0);
        assert_eq!(window_start(MIN, MIN), MIN);
    }

    #[test]
    fn watermark_only_moves_forward() {
        let mut w = Watermark::default();
        assert_eq!(w.value(10), None);
        w.observe(100);
        w.observe(50);
        assert_eq!(w.value(10), Some(90));
    }

    #[test]
    fn window_expires_exactly_when_watermark_reaches_end_plus_retention() {
        let p = WindowPolicy { size_ms: MIN, allowed_lateness_ms: 0, grace_ms: 2 * MIN, retention_ms: 7 * 60 * MIN };
        let end = MIN;
        assert!(!p.expired(0, Some(end + p.retention_ms - 1)));
        assert!(p.expired(0, Some(end + p.retention_ms)));
        assert!(!p.closed_for_actions(0, Some(end + p.grace_ms - 1)));
        assert!(p.closed_for_actions(0, Some(end + p.grace_ms)));
        assert!(!p.expired(0, None));
    }
}
