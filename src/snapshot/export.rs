//! Exporting partitions: one snapshot of one partition, a set of them from one consistent
//! point (a periodic round, or the hand-over of partitions a rebalance takes away).

use std::sync::Arc;
use std::time::Instant;

use tidemark_state::{ConsistentPoint, PartitionId, Store};
use tracing::{debug, info, warn};

use super::error::{Op, SnapshotError};
use super::layout::{Manifest, Published, FORMAT};
use super::store::staging;
use super::SnapshotConfig;
use crate::telemetry;

/// Store failures in a row after which a round gives up on its other partitions.
const STORE_DOWN_AFTER: usize = 2;

/// Who exports, under which configuration.
pub struct Exporter {
    pub cfg: SnapshotConfig,
    pub taken_by: String,
}

/// What one export of several partitions did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Round {
    pub published: usize,
    pub unchanged: usize,
    pub failed: usize,
    /// Bytes uploaded (the new files and the manifests of the snapshots published).
    pub bytes: u64,
    /// Bytes of the published snapshots' files that earlier rounds had uploaded.
    pub reused_bytes: u64,
    /// Partitions whose newest snapshot holds their state as of this round's point.
    pub current: Vec<PartitionId>,
}

impl Exporter {
    /// Exports `id` as of `point` and publishes it, unless its newest snapshot is already at
    /// `committed` (the offset the stream last committed) or beyond what the export holds.
    /// `Some(what was uploaded)` when a new snapshot was published: only the files no
    /// earlier snapshot of the partition holds. The export is written to a
    /// staging directory on the state volume first, then uploaded; old snapshots are pruned
    /// after a publication (a failed prune is counted, the snapshot stands).
    pub fn export_one(
        &self,
        store: &Store,
        point: &ConsistentPoint<'_>,
        id: PartitionId,
        committed: Option<i64>,
    ) -> Result<Option<Published>, SnapshotError> {
        let layout = self.cfg.layout();
        // One listing serves the skip below and the publication (which files are stored).
        let listing = layout.listing(id)?;
        let newest = listing.published().next();
        if newest.is_some_and(|n| committed.is_some_and(|c| n >= c)) {
            return Ok(None);
        }
        let staging = staging(store.path(), "export")?;
        // RocksDB creates the export's directory itself and refuses one that exists.
        let dir = staging.path().join("sst");
        let Some(export) = store.export_partition(point, id, &dir)? else { return Ok(None) };
        if newest.is_some_and(|n| n >= export.checkpoint.next_offset) {
            return Ok(None);
        }
        let manifest = Manifest {
            format: FORMAT,
            partition: id.to_string(),
            source: id.source,
            number: id.partition,
            topic: self.cfg.topic_of(id).to_string(),
            // The time of the state, not of the export: a round exports many partitions
            // from one point, and what happens meanwhile is not in this snapshot.
            taken_at_ms: point.taken_at_ms(),
            taken_by: self.taken_by.clone(),
            export,
        };
        let store_id = store.identity()?;
        let Some(published) = layout.publish(&dir, &manifest, &store_id, &listing)? else { return Ok(None) };
        debug!(
            partition = %id,
            next_offset = manifest.export.checkpoint.next_offset,
            uploaded_bytes = published.uploaded,
            uploaded_files = published.uploaded_files,
            reused_bytes = published.reused,
            reused_files = published.reused_files,
            "snapshot published"
        );
        if let Err(e) = layout.prune(id, self.cfg.keep) {
            telemetry::snapshots::failed(e.op(Op::Prune));
            warn!(partition = %id, error = %e, "old snapshots not pruned; tried again after the next snapshot");
        }
        Ok(Some(published))
    }

    /// Exports `ids` from one consistent point, calling `beat` before each; `committed`
    /// gives each one's last committed offset when known. Failures are logged and counted
    /// in the result and in `tidemark_snapshot_failures_total`: the previous snapshot of such
    /// a partition stays, and the next round tries again. After [`STORE_DOWN_AFTER`] store
    /// failures in a row the rest of the round is skipped (counted as failed): each request
    /// to a store that is down waits for its retries, and a hand-over holds a rebalance.
    pub fn export_all(
        &self,
        store: &Store,
        ids: impl IntoIterator<Item = PartitionId>,
        committed: impl Fn(PartitionId) -> Option<i64>,
        beat: &dyn Fn(),
    ) -> Round {
        let point = store.consistent_point();
        let mut round = Round::default();
        let (mut in_a_row, mut skipped) = (0, 0);
        for id in ids {
            beat();
            if in_a_row >= STORE_DOWN_AFTER {
                skipped += 1;
                continue;
            }
            match self.export_one(store, &point, id, committed(id)) {
                Ok(Some(published)) => {
                    in_a_row = 0;
                    round.published += 1;
                    round.bytes += published.uploaded;
                    round.reused_bytes += published.reused;
                    round.current.push(id);
                }
                Ok(None) => {
                    in_a_row = 0;
                    round.unchanged += 1;
                    round.current.push(id);
                }
                Err(e) => {
                    round.failed += 1;
                    if matches!(e, SnapshotError::Store { .. }) {
                        in_a_row += 1;
                    }
                    telemetry::snapshots::failed(e.op(Op::Export));
                    warn!(partition = %id, error = %e, "snapshot failed; the previous one stays");
                }
            }
        }
        if skipped > 0 {
            round.failed += skipped;
            warn!(skipped, "snapshot store failing: the round's other partitions are tried again next round");
        }
        telemetry::snapshots::uploaded(round.bytes, round.reused_bytes);
        round
    }
}

/// The export of partitions a rebalance takes from this process, after their last commit:
/// their next owner restores exactly where this one stopped and replays nothing.
pub struct Handover {
    exporter: Exporter,
}

impl Handover {
    pub fn new(cfg: &SnapshotConfig, taken_by: String) -> Arc<Self> {
        Arc::new(Handover { exporter: Exporter { cfg: cfg.clone(), taken_by } })
    }

    /// Exports `ids` now (on the stream thread: the rebalance waits for it), calling `beat`
    /// before each partition. A failure is logged and counted as a failed round; the next
    /// owner then restores an older snapshot and replays more.
    pub fn export(&self, store: &Store, ids: &[PartitionId], beat: &dyn Fn()) {
        let started = Instant::now();
        let round = self.exporter.export_all(store, ids.iter().copied(), |_| None, beat);
        telemetry::snapshots::handed_over(round.failed > 0);
        info!(
            partitions = ids.len(),
            published = round.published,
            failed = round.failed,
            bytes = round.bytes,
            took_ms = started.elapsed().as_millis() as u64,
            "hand-over snapshots of revoked partitions"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::layout::Layout;
    use tidemark_state::{Checkpoint, StoreOptions};

    #[test]
    fn a_snapshot_is_stamped_with_the_time_of_its_state_not_of_the_end_of_its_export() {
        let (snapshots, dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let store = Store::open(dir.path(), &StoreOptions { owner: "t/g".into(), ..StoreOptions::default() }).unwrap();
        let p = PartitionId::sku(1);
        let mut batch = store.batch();
        batch.put_checkpoint(p, &Checkpoint { next_offset: 7, ..Checkpoint::default() }).unwrap();
        store.commit_staged(batch.stage()).unwrap();
        let cfg = SnapshotConfig {
            bucket: std::sync::Arc::new(
                crate::snapshot::Bucket::open(&snapshots.path().display().to_string()).unwrap(),
            ),
            interval: std::time::Duration::from_secs(60),
            keep: 2,
            topology: "t".into(),
            group: "g".into(),
            topics: crate::tasks::Sources::from_topics(vec![
                "orders".into(),
                "inventory".into(),
                "sku".into(),
                "combine".into(),
            ]),
        };
        let point = store.consistent_point();
        let before_export = chrono::Utc::now().timestamp_millis();
        // Other partitions of the round are exported first: this one's export comes later.
        std::thread::sleep(std::time::Duration::from_millis(300));
        let exporter = Exporter { cfg: cfg.clone(), taken_by: "a".into() };
        assert!(exporter.export_one(&store, &point, p, None).unwrap().is_some());
        let found = Layout::new(std::sync::Arc::clone(&cfg.bucket), "t", "g").latest(p).unwrap().expect("published");
        assert!(
            found.manifest.taken_at_ms <= before_export,
            "stamped {} ms after the state was read",
            found.manifest.taken_at_ms - before_export
        );
    }
}
