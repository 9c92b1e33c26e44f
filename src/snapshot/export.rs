//! Exporting partitions: one snapshot of one partition, and the hand-over export of the
//! partitions a rebalance takes away.

use std::sync::Arc;
use std::time::Instant;

use metrics::counter;
use tidemark_state::{ConsistentPoint, PartitionId, Store};
use tracing::{info, warn};

use super::layout::{Layout, Manifest, FORMAT};
use super::SnapshotConfig;

/// Who exports, under which configuration.
pub struct Exporter<'a> {
    pub cfg: &'a SnapshotConfig,
    pub taken_by: &'a str,
}

/// Exports `id` as of `point` and publishes it, unless its newest snapshot is already at
/// `committed` (the offset the stream last committed) or beyond what the export holds.
/// `Some(bytes)` when a new snapshot was published.
pub fn export_one(
    layout: &Layout,
    store: &Store,
    point: &ConsistentPoint<'_>,
    id: PartitionId,
    committed: Option<i64>,
    who: &Exporter<'_>,
) -> anyhow::Result<Option<u64>> {
    let newest = layout.latest(id)?.map(|f| f.manifest.export.checkpoint.next_offset);
    if newest.is_some_and(|n| committed.is_some_and(|c| n >= c)) {
        return Ok(None);
    }
    let temp = layout.temp_dir(id)?;
    let result = (|| {
        let Some(export) = store.export_partition(point, id, &temp)? else { return Ok(None) };
        if newest.is_some_and(|n| n >= export.checkpoint.next_offset) {
            return Ok(None);
        }
        let bytes = export.bytes();
        let manifest = Manifest {
            format: FORMAT,
            partition: id.to_string(),
            source: id.source,
            number: id.partition,
            topic: who.cfg.topic_of(id).to_string(),
            taken_at_ms: chrono::Utc::now().timestamp_millis(),
            taken_by: who.taken_by.to_string(),
            export,
        };
        if !layout.publish(&temp, &manifest)? {
            return Ok(None);
        }
        layout.prune(id, who.cfg.keep)?;
        Ok(Some(bytes))
    })();
    if temp.exists() {
        let _ = std::fs::remove_dir_all(&temp);
    }
    result
}

/// The export of partitions a rebalance takes from this process, after their last commit:
/// their next owner restores exactly where this one stopped and replays nothing.
pub struct Handover {
    cfg: SnapshotConfig,
    layout: Layout,
    taken_by: String,
}

impl Handover {
    pub fn new(cfg: &SnapshotConfig, taken_by: String) -> Arc<Self> {
        Arc::new(Handover { cfg: cfg.clone(), layout: cfg.layout(), taken_by })
    }

    /// Exports `ids` now (on the stream thread: the rebalance waits for it), calling `beat`
    /// after each partition. A failure is logged and counted; the next owner then restores
    /// an older snapshot and replays more.
    pub fn export(&self, store: &Store, ids: &[PartitionId], beat: &dyn Fn()) {
        let started = Instant::now();
        let point = store.consistent_point();
        let (mut published, mut bytes) = (0usize, 0u64);
        for id in ids {
            beat();
            let who = Exporter { cfg: &self.cfg, taken_by: &self.taken_by };
            match export_one(&self.layout, store, &point, *id, None, &who) {
                Ok(Some(b)) => {
                    published += 1;
                    bytes += b;
                }
                Ok(None) => {}
                Err(e) => {
                    counter!("tidemark_snapshots_total", "outcome" => "failed").increment(1);
                    warn!(partition = %id, error = %format!("{e:#}"), "hand-over snapshot failed; the next owner restores an older one");
                }
            }
        }
        info!(
            partitions = ids.len(),
            published,
            bytes,
            took_ms = started.elapsed().as_millis() as u64,
            "hand-over snapshots of revoked partitions"
        );
    }
}
