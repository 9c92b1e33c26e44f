//! Per-partition progress of every source (orders, inventory, the SKU repartition topic)
//! shared by the stream thread (committed offsets), the backlog prober (log end offsets and
//! backlog age) and `/metrics`,
//! and the start-up, liveness and readiness decisions the probes answer with.
//!
//! ```text
//!  opening store ──store_opened()──▶ waiting for partitions ──restoring(true)──▶ started
//!   (startup 503)                     (startup 503)                              (startup 200)
//! ```
//! Once started, liveness asks for a heartbeat within [`MAX_SILENCE_MS`], or within
//! [`MAX_RESTORE_SILENCE_MS`] while partitions are being restored (the restore beats once
//! per partition); readiness asks for assigned partitions with a known lag and, when a bound
//! is set, a backlog age within it.
//!
//! It also holds which partitions this process owns and restores ([`Ownership`]), for the
//! ownership gauges.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use tidemark_state::PartitionId;

use super::ownership::Ownership;

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

/// Loop turns can be as far apart as a broker outage's flush wait; liveness only fails when
/// the loop is truly wedged.
pub const MAX_SILENCE_MS: i64 = 60_000;
/// One partition's restore reads its whole state from the store between two beats.
pub const MAX_RESTORE_SILENCE_MS: i64 = 15 * 60_000;

pub struct Progress {
    started: Instant,
    /// The state store is open.
    store_open: AtomicBool,
    /// The first assignment arrived and its restore started.
    restore_begun: AtomicBool,
    /// A restore is in progress (liveness then allows longer silences).
    restoring: AtomicBool,
    /// Readiness bound on every partition's backlog age, seconds (`None`: no bound).
    ready_max_backlog_s: Option<f64>,
    partitions: Mutex<BTreeMap<PartitionId, PartitionProgress>>,
    ownership: Mutex<Ownership>,
    /// Milliseconds since start at the stream loop's last turn (liveness).
    heartbeat_ms: AtomicI64,
    /// Set by `POST /pause`, cleared by `POST /resume`.
    pub paused: AtomicBool,
    /// Why outputs cannot be written now (a side output the broker refuses), if they cannot:
    /// the process is then not ready (its commits wait for them).
    outputs_blocked: Mutex<Option<String>>,
}

impl Default for Progress {
    fn default() -> Self {
        Progress {
            started: Instant::now(),
            store_open: AtomicBool::new(false),
            restore_begun: AtomicBool::new(false),
            restoring: AtomicBool::new(false),
            ready_max_backlog_s: None,
            partitions: Mutex::default(),
            ownership: Mutex::default(),
            heartbeat_ms: AtomicI64::new(0),
            paused: AtomicBool::new(false),
            outputs_blocked: Mutex::default(),
        }
    }
}

impl Progress {
    /// Readiness also asks for every partition's backlog age to be at most `seconds`.
    pub fn with_ready_bound(mut self, seconds: Option<f64>) -> Self {
        self.ready_max_backlog_s = seconds.filter(|s| *s > 0.0);
        self
    }

    pub fn store_opened(&self) {
        self.store_open.store(true, Ordering::Relaxed);
    }

    /// Called by the stream around the restore of an assignment; the first call marks the
    /// start-up as done.
    pub fn restoring(&self, on: bool) {
        if on {
            self.restore_begun.store(true, Ordering::Relaxed);
        }
        self.restoring.store(on, Ordering::Relaxed);
        self.beat();
    }

    /// For a process with nothing to restore (micro-batch): started once the store is open.
    pub fn nothing_to_restore(&self) {
        self.restore_begun.store(true, Ordering::Relaxed);
        self.beat();
    }

    /// Started: the store is open and restore has begun.
    pub fn startup(&self) -> Result<(), String> {
        if !self.store_open.load(Ordering::Relaxed) {
            return Err("starting: the state store is not open yet".into());
        }
        if !self.restore_begun.load(Ordering::Relaxed) {
            return Err("starting: waiting for the first partition assignment".into());
        }
        Ok(())
    }

    /// Alive: started, and the stream loop (or the restore) beat recently enough.
    pub fn liveness(&self) -> Result<(), String> {
        self.startup()?;
        let silent = self.since_heartbeat_ms();
        let restoring = self.restoring.load(Ordering::Relaxed);
        let limit = if restoring { MAX_RESTORE_SILENCE_MS } else { MAX_SILENCE_MS };
        if silent <= limit {
            Ok(())
        } else {
            let what = if restoring { "restore" } else { "stream loop" };
            Err(format!("{what} silent for {silent} ms (limit {limit} ms)"))
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut BTreeMap<PartitionId, PartitionProgress>) -> R) -> R {
        match self.partitions.lock() {
            Ok(mut g) => f(&mut g),
            Err(poisoned) => f(&mut poisoned.into_inner()),
        }
    }

    fn owning<R>(&self, f: impl FnOnce(&mut Ownership) -> R) -> R {
        match self.ownership.lock() {
            Ok(mut g) => f(&mut g),
            Err(poisoned) => f(&mut poisoned.into_inner()),
        }
    }

    /// The partition count of each consumed source (`PartitionId::source`, count).
    pub fn input_partitions(&self, counts: impl IntoIterator<Item = (u16, i32)>) {
        self.owning(|o| o.input_partitions(counts));
    }

    /// An assignment's partitions are about to be restored (see [`Ownership`]).
    pub fn restore_started(&self, ids: &[PartitionId]) {
        self.owning(|o| o.restore_started(ids));
    }

    /// The partition is restored (when its restore was started) and reports its progress.
    pub fn assigned(&self, id: PartitionId, committed_next: i64) {
        self.with(|m| m.entry(id).or_default().committed_next = committed_next);
        self.owning(|o| o.restored(id));
    }

    pub fn revoked(&self, id: PartitionId) {
        self.with(|m| m.remove(&id));
        self.owning(|o| o.revoked(id));
    }

    pub fn ownership(&self) -> Ownership {
        self.owning(|o| o.clone())
    }

    pub fn committed(&self, id: PartitionId, next: i64) {
        self.with(|m| {
            if let Some(p) = m.get_mut(&id) {
                p.committed_next = next;
            }
        });
    }

    pub fn high_watermark(&self, id: PartitionId, high: i64) {
        self.with(|m| {
            if let Some(p) = m.get_mut(&id) {
                p.high_watermark = Some(high);
            }
        });
    }

    pub fn backlog_age(&self, id: PartitionId, seconds: f64) {
        self.with(|m| {
            if let Some(p) = m.get_mut(&id) {
                p.backlog_age_s = seconds;
            }
        });
    }

    pub fn snapshot(&self) -> BTreeMap<PartitionId, PartitionProgress> {
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

    /// Ready: started, partitions assigned and restored, the lag of each known, and (with
    /// a bound) each caught up to within the bound's backlog age.
    /// Outputs cannot be written (`Some(why)`) or can again (`None`).
    pub fn outputs_blocked(&self, why: Option<String>) {
        if let Ok(mut b) = self.outputs_blocked.lock() {
            *b = why;
        }
    }

    pub fn readiness(&self) -> Result<(), String> {
        self.startup()?;
        if let Some(why) = self.outputs_blocked.lock().ok().and_then(|b| b.clone()) {
            return Err(why);
        }
        let parts = self.snapshot();
        if parts.is_empty() {
            return Err("no partitions assigned".into());
        }
        let unknown: Vec<String> =
            parts.iter().filter(|(_, p)| p.high_watermark.is_none()).map(|(k, _)| k.to_string()).collect();
        if !unknown.is_empty() {
            return Err(format!("lag not yet known for {}", unknown.join(", ")));
        }
        if let Some(bound) = self.ready_max_backlog_s {
            let behind: Vec<String> = parts
                .iter()
                .filter(|(_, p)| p.backlog_age_s > bound)
                .map(|(k, p)| format!("{k} ({:.0} s)", p.backlog_age_s))
                .collect();
            if !behind.is_empty() {
                return Err(format!("not caught up: backlog age above {bound} s on {}", behind.join(", ")));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const O0: PartitionId = PartitionId { source: PartitionId::ORDERS, partition: 0 };

    fn started(p: Progress) -> Progress {
        p.store_opened();
        p.restoring(true);
        p.restoring(false);
        p
    }

    #[test]
    fn startup_passes_once_the_store_is_open_and_restore_has_begun() {
        let p = Progress::default();
        assert!(p.startup().is_err());
        assert!(p.liveness().is_err(), "liveness never passes before start-up");
        p.store_opened();
        assert!(p.startup().unwrap_err().contains("assignment"));
        p.restoring(true);
        assert_eq!(p.startup(), Ok(()));
        assert_eq!(p.liveness(), Ok(()));
    }

    #[test]
    fn a_process_whose_outputs_are_refused_is_not_ready_until_they_are_written() {
        let p = started(Progress::default());
        p.assigned(O0, 5);
        p.high_watermark(O0, 5);
        assert_eq!(p.readiness(), Ok(()));
        p.outputs_blocked(Some("side outputs to dl refused".into()));
        assert_eq!(p.readiness(), Err("side outputs to dl refused".into()));
        p.outputs_blocked(None);
        assert_eq!(p.readiness(), Ok(()));
    }

    #[test]
    fn readiness_waits_for_assignment_and_known_lag() {
        let p = Progress::default();
        p.assigned(O0, 5);
        p.high_watermark(O0, 9);
        assert!(p.readiness().unwrap_err().contains("starting"));
        let p = started(Progress::default());
        assert!(p.readiness().is_err());
        p.assigned(O0, 5);
        assert!(p.readiness().is_err());
        p.high_watermark(O0, 9);
        assert_eq!(p.readiness(), Ok(()));
        assert_eq!(p.snapshot()[&O0].lag(), Some(4));
        p.assigned(PartitionId::sku(2), 0);
        assert!(p.readiness().unwrap_err().contains("sku-repartition[2]"), "every topic's lag counts");
        p.high_watermark(PartitionId::sku(2), 0);
        assert_eq!(p.readiness(), Ok(()));
        p.revoked(O0);
        p.revoked(PartitionId::sku(2));
        assert!(p.readiness().is_err());
    }

    #[test]
    fn readiness_with_a_bound_means_caught_up_within_it() {
        let p = started(Progress::default().with_ready_bound(Some(30.0)));
        let inv = PartitionId::inventory(1);
        p.assigned(O0, 5);
        p.assigned(inv, 5);
        p.high_watermark(O0, 9);
        p.high_watermark(inv, 9);
        p.backlog_age(inv, 31.0);
        let why = p.readiness().unwrap_err();
        assert!(why.contains("not caught up") && why.contains("inventory[1] (31 s)"), "{why}");
        p.backlog_age(inv, 29.5);
        assert_eq!(p.readiness(), Ok(()));
        let unbounded = started(Progress::default().with_ready_bound(Some(0.0)));
        unbounded.assigned(O0, 0);
        unbounded.high_watermark(O0, 1);
        unbounded.backlog_age(O0, 1e6);
        assert_eq!(unbounded.readiness(), Ok(()), "a zero bound means no bound");
    }
}
