//! Per-partition progress shared by the stream thread (committed offsets), the consumer's
//! statistics callback (high watermarks), the backlog prober (backlog age) and `/metrics`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PartitionProgress {
    /// Next offset after the last committed checkpoint.
    pub committed_next: i64,
    /// Log end offset, from the consumer's statistics (`None` until first reported).
    pub high_watermark: Option<i64>,
    /// Seconds since the broker appended the oldest record not yet committed (0 when
    /// caught up); measured by the prober.
    pub backlog_age_s: f64,
}

impl PartitionProgress {
    pub fn lag(&self) -> Option<i64> {
        self.high_watermark.map(|h| (h - self.committed_next).max(0))
    }
}

pub struct Progress {
    started: Instant,
    partitions: Mutex<BTreeMap<i32, PartitionProgress>>,
    /// Milliseconds since start at the stream loop's last turn (liveness).
    heartbeat_ms: AtomicI64,
    /// Set by `POST /pause`, cleared by `POST /resume`.
    pub paused: AtomicBool,
}

impl Default for Progress {
    fn default() -> Self {
        Progress {
            started: Instant::now(),
            partitions: Mutex::default(),
            heartbeat_ms: AtomicI64::new(0),
            paused: AtomicBool::new(false),
        }
    }
}

impl Progress {
    fn with<R>(&self, f: impl FnOnce(&mut BTreeMap<i32, PartitionProgress>) -> R) -> R {
        match self.partitions.lock() {
            Ok(mut g) => f(&mut g),
            Err(poisoned) => f(&mut poisoned.into_inner()),
        }
    }

    pub fn assigned(&self, partition: i32, committed_next: i64) {
        self.with(|m| m.entry(partition).or_default().committed_next = committed_next);
    }

    pub fn revoked(&self, partition: i32) {
        self.with(|m| m.remove(&partition));
    }

    pub fn committed(&self, partition: i32, next: i64) {
        self.with(|m| {
            if let Some(p) = m.get_mut(&partition) {
                p.committed_next = next;
            }
        });
    }

    pub fn high_watermark(&self, partition: i32, high: i64) {
        self.with(|m| {
            if let Some(p) = m.get_mut(&partition) {
                p.high_watermark = Some(high);
            }
        });
    }

    pub fn backlog_age(&self, partition: i32, seconds: f64) {
        self.with(|m| {
            if let Some(p) = m.get_mut(&partition) {
                p.backlog_age_s = seconds;
            }
        });
    }

    pub fn snapshot(&self) -> BTreeMap<i32, PartitionProgress> {
        self.with(|m| m.clone())
    }

    pub fn beat(&self) {
        let ms = i64::try_from(self.started.elapsed().as_millis()).unwrap_or(i64::MAX);
        self.heartbeat_ms.store(ms, Ordering::Relaxed);
    }

    /// Milliseconds since the stream loop last turned.
    pub fn since_heartbeat_ms(&self) -> i64 {
        let now = i64::try_from(self.started.elapsed().as_millis()).unwrap_or(i64::MAX);
        now - self.heartbeat_ms.load(Ordering::Relaxed)
    }

    /// Ready: partitions assigned and restored, and the lag of each is known.
    pub fn readiness(&self) -> Result<(), String> {
        let parts = self.snapshot();
        if parts.is_empty() {
            return Err("no partitions assigned".into());
        }
        let unknown: Vec<i32> = parts.iter().filter(|(_, p)| p.high_watermark.is_none()).map(|(k, _)| *k).collect();
        if unknown.is_empty() {
            Ok(())
        } else {
            Err(format!("lag not yet known for partitions {unknown:?}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_waits_for_assignment_and_known_lag() {
        let p = Progress::default();
        assert!(p.readiness().is_err());
        p.assigned(0, 5);
        assert!(p.readiness().is_err());
        p.high_watermark(0, 9);
        assert_eq!(p.readiness(), Ok(()));
        assert_eq!(p.snapshot()[&0].lag(), Some(4));
        p.revoked(0);
        assert!(p.readiness().is_err());
    }
}
