//! The snapshot thread: every interval, each owned partition that moved since its last
//! snapshot is exported and published; once more after the stream's final commit.
//!
//! All partitions of a round are read through one RocksDB snapshot (a commit boundary). The
//! thread never blocks the stream thread (RocksDB snapshots are cheap and reads run beside
//! writes), and a failed round is logged and counted, never fatal: the previous snapshot
//! stays, and only the replay after a restore grows. An outage of the snapshot store fails
//! the rounds (counted by operation) and the next round tries again.
//!
//! The upload lag (`tidemark_snapshot_lag_seconds`) is that of the stalest owned partition:
//! seconds since the start of the last round after which its newest snapshot held all it had
//! committed (or since it was first seen here, before any such round).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tidemark_state::{PartitionId, Store};
use tracing::{info, warn};

use super::export::{Exporter, Round};
use super::SnapshotConfig;
use crate::telemetry::{self, Progress};

pub struct Taker {
    exporter: Exporter,
    store: Arc<Store>,
    progress: Arc<Progress>,
    /// Partitions owned at the last round: the final round includes them even if the
    /// shutdown already revoked them.
    seen: BTreeSet<PartitionId>,
    /// Per owned partition: when (ms since the epoch) its newest snapshot was last current.
    current_at: BTreeMap<PartitionId, i64>,
}

impl Taker {
    pub fn new(cfg: SnapshotConfig, store: Arc<Store>, progress: Arc<Progress>, taken_by: String) -> Self {
        // Series exist from the start, so dashboards and alerts see zeros rather than gaps.
        telemetry::snapshots::started();
        super::store::remove_stale_staging(store.path());
        Taker {
            exporter: Exporter { cfg, taken_by },
            store,
            progress,
            seen: BTreeSet::new(),
            current_at: BTreeMap::new(),
        }
    }

    /// Runs rounds every interval until `stop`; the caller runs [`Taker::round`] once more
    /// after the stream's final commit (see [`spawn`]).
    fn run(mut self, stop: Arc<AtomicBool>) -> Self {
        let interval = self.exporter.cfg.interval;
        let mut next = Instant::now() + interval;
        while !stop.load(Ordering::Relaxed) {
            if Instant::now() >= next {
                self.round();
                next = Instant::now() + interval;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        self
    }

    /// Exports every owned partition whose committed offset moved past its newest snapshot.
    pub fn round(&mut self) -> Round {
        let started = Instant::now();
        let owned = self.progress.snapshot();
        let ids: BTreeSet<PartitionId> = owned.keys().copied().chain(self.seen.iter().copied()).collect();
        self.seen = owned.keys().copied().collect();
        let committed = |id: PartitionId| owned.get(&id).map(|p| p.committed_next);
        let started_ms = chrono::Utc::now().timestamp_millis();
        let round = self.exporter.export_all(&self.store, ids, committed, &|| {});
        let took = started.elapsed();
        telemetry::snapshots::round(took, round.failed > 0, round.bytes);
        self.current_at.retain(|id, _| owned.contains_key(id));
        for id in owned.keys() {
            self.current_at.entry(*id).or_insert(started_ms);
        }
        for id in &round.current {
            if let Some(at) = self.current_at.get_mut(id) {
                *at = started_ms;
            }
        }
        let now_ms = chrono::Utc::now().timestamp_millis();
        let lag_ms = self.current_at.values().map(|at| now_ms.saturating_sub(*at)).max().unwrap_or(0);
        telemetry::snapshots::lag(Duration::from_millis(lag_ms.max(0) as u64));
        if round.published > 0 || round.failed > 0 {
            info!(
                published = round.published,
                unchanged = round.unchanged,
                failed = round.failed,
                bytes = round.bytes,
                took_ms = took.as_millis() as u64,
                "snapshot round"
            );
        }
        round
    }
}

/// The running snapshot thread.
pub struct Running {
    handle: JoinHandle<Taker>,
}

impl Running {
    /// Waits for the thread (`stop` must be set) and takes the final round: after the
    /// stream's last commit, so a pod that leaves on SIGTERM hands over its partitions with
    /// nothing to replay.
    pub fn finish(self) {
        match self.handle.join() {
            Ok(mut taker) => {
                let round = taker.round();
                info!(published = round.published, failed = round.failed, "final snapshot round");
            }
            Err(_) => warn!("snapshot thread panicked; no final snapshot"),
        }
    }
}

pub fn spawn(taker: Taker, stop: Arc<AtomicBool>) -> anyhow::Result<Running> {
    let handle = std::thread::Builder::new().name("tidemark-snapshot".into()).spawn(move || taker.run(stop))?;
    Ok(Running { handle })
}
