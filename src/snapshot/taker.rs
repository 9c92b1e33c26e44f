//! The snapshot thread: every interval, each owned partition that moved since its last
//! snapshot is exported and published; once more after the stream's final commit.
//!
//! All partitions of a round are read through one RocksDB snapshot (a commit boundary). The
//! thread never blocks the stream thread (RocksDB snapshots are cheap and reads run beside
//! writes), and a failed round is logged and counted, never fatal: the previous snapshot
//! stays, and only the replay after a restore grows.

use std::collections::BTreeSet;
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
}

impl Taker {
    pub fn new(cfg: SnapshotConfig, store: Arc<Store>, progress: Arc<Progress>, taken_by: String) -> Self {
        // Series exist from the start, so dashboards and alerts see zeros rather than gaps.
        telemetry::snapshots::started();
        Taker { exporter: Exporter { cfg, taken_by }, store, progress, seen: BTreeSet::new() }
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
        let round = self.exporter.export_all(&self.store, ids, committed, &|| {});
        let took = started.elapsed();
        telemetry::snapshots::round(took, round.failed > 0, round.bytes);
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
