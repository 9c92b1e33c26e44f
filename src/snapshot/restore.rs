//! Restore on assignment: a partition whose newest snapshot is ahead of its local state (none
//! here: a new pod, a moved partition, a wiped volume) is imported from it before its fetch
//! position is set, so only the log after the snapshot is replayed.
//!
//! For SKU partitions (the ones with an outbox) the audit topic is then read from a little
//! before the snapshot was taken: every action it shows settled is listed in
//! [`crate::actions::Settled`], so the replay's re-derived rows for them are recorded, not
//! sent again. What is still re-sent is what was in flight at the loss (SPEC §3's crash
//! window) and outcomes whose audit record was lost with their process.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use metrics::counter;
use rdkafka::Message;
use tidemark_state::{PartitionId, Store};
use tracing::{info, warn};

use super::layout::Found;
use super::SnapshotConfig;
use crate::actions::{outcome_in, Settled};
use crate::engine::outbox::RowState;
use crate::kafka::{reader, KafkaSettings};
use crate::telemetry::Progress;

/// The audit topic is read from this long before a snapshot's wall-clock time: the
/// snapshot's clock and the broker's may disagree by that much.
const AUDIT_MARGIN_MS: i64 = 60_000;
/// Snapshots tried, newest first, before giving up on them for a partition.
const ATTEMPTS: usize = 3;
/// The SKU partitions of one assignment are restored one after another within seconds: one
/// read of the audit topic from the earliest snapshot time serves them all.
const AUDIT_READ_REUSE: Duration = Duration::from_secs(30);

pub struct Restorer {
    cfg: SnapshotConfig,
    settings: KafkaSettings,
    audit_topic: String,
    settled: Arc<Settled>,
    /// The `since` of the last audit read and when it ran.
    last_read: Mutex<Option<(i64, Instant)>>,
    /// An import runs inside the rebalance callback: it marks the process as restoring, so
    /// liveness allows it a restore's silence.
    progress: Arc<Progress>,
    /// A local checkpoint at most this many records behind a snapshot is replayed from the
    /// log instead of importing it (a warm standby copy; see [`Restorer::replaying_within`]).
    replay_within: i64,
}

impl Restorer {
    pub fn new(
        cfg: &SnapshotConfig,
        settings: KafkaSettings,
        audit_topic: String,
        settled: Arc<Settled>,
        progress: Arc<Progress>,
    ) -> Self {
        Restorer {
            cfg: cfg.clone(),
            settings,
            audit_topic,
            settled,
            last_read: Mutex::default(),
            progress,
            replay_within: 0,
        }
    }

    /// With standby tasks, the local state of a partition is usually a commit behind the
    /// snapshot its last owner took as it handed it over: replaying that many records costs
    /// less than importing the whole partition.
    pub fn replaying_within(mut self, records: i64) -> Self {
        self.replay_within = records.max(0);
        self
    }

    /// Imports the newest snapshot of `id` into `store` when it is ahead of what the store
    /// holds. A snapshot that cannot be read or imported is logged and the next older one
    /// tried; without any, the partition goes on from its local state (or from the log
    /// start) as it would without snapshots.
    pub fn restore_if_ahead(&self, store: &Store, id: PartitionId) -> Option<Found> {
        let local = match store.checkpoint(id) {
            Ok(c) => c.map(|c| c.next_offset),
            Err(e) => {
                warn!(partition = %id, error = %e, "cannot read the local checkpoint; not restoring from a snapshot");
                return None;
            }
        };
        let candidates = match self.cfg.layout().list(id) {
            Ok(c) => c,
            Err(e) => {
                warn!(partition = %id, error = %format!("{e:#}"), "cannot list snapshots");
                return None;
            }
        };
        let topic = self.cfg.topic_of(id);
        for found in candidates.into_iter().take(ATTEMPTS) {
            if found.manifest.topic != topic {
                warn!(partition = %id, topic, snapshot = %found.dir.display(), snapshot_topic = %found.manifest.topic, "snapshot of another topic; not imported");
                continue;
            }
            let next = found.manifest.export.checkpoint.next_offset;
            if local.is_some_and(|l| l.saturating_add(self.replay_within) >= next) {
                return None;
            }
            let started = Instant::now();
            self.progress.restoring(true);
            match store.import_partition(id, &found.dir, &found.manifest.export) {
                Ok(()) => {
                    counter!("tidemark_snapshot_restores_total").increment(1);
                    info!(
                        partition = %id,
                        next_offset = next,
                        local_next_offset = ?local,
                        bytes = found.manifest.export.bytes(),
                        taken_by = %found.manifest.taken_by,
                        snapshot = %found.dir.display(),
                        took_ms = started.elapsed().as_millis() as u64,
                        "restored from snapshot"
                    );
                    if id.source == PartitionId::SKU_REPARTITION {
                        self.read_settled(id, found.manifest.taken_at_ms);
                    }
                    return Some(found);
                }
                Err(e) => {
                    warn!(partition = %id, snapshot = %found.dir.display(), error = %e, "snapshot not imported; trying an older one")
                }
            }
        }
        None
    }

    /// Lists the outcomes the audit topic recorded since `taken_at_ms` (less the margin).
    fn read_settled(&self, id: PartitionId, taken_at_ms: i64) {
        let since = taken_at_ms - AUDIT_MARGIN_MS;
        if let Ok(mut last) = self.last_read.lock() {
            if last.is_some_and(|(s, at)| s <= since && at.elapsed() < AUDIT_READ_REUSE) {
                return;
            }
            *last = Some((since, Instant::now()));
        }
        match reader::read_topic_since(&self.settings, &self.audit_topic, since) {
            Ok(records) => {
                let outcomes: Vec<(String, RowState)> =
                    records.iter().filter_map(|msg| outcome_in(msg.payload()?)).collect();
                info!(partition = %id, audit_records = records.len(), settled = outcomes.len(), "audit topic read since the snapshot");
                self.settled.extend(outcomes);
            }
            Err(e) => warn!(
                partition = %id,
                topic = %self.audit_topic,
                error = %format!("{e:#}"),
                "cannot read the audit topic; actions completed after the snapshot may be sent again"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::export::Exporter;
    use tidemark_state::{Checkpoint, StoreOptions};

    fn config(dir: &std::path::Path, orders_topic: &str) -> SnapshotConfig {
        SnapshotConfig {
            dir: dir.to_path_buf(),
            interval: std::time::Duration::from_secs(60),
            keep: 2,
            topology: "t".into(),
            group: "g".into(),
            topics: vec![orders_topic.into(), "inventory".into(), "sku".into(), "combine".into()],
        }
    }

    fn store(dir: &std::path::Path) -> Store {
        Store::open(dir, &StoreOptions { owner: "t/g".into(), ..StoreOptions::default() }).expect("store")
    }

    #[test]
    fn a_snapshot_is_imported_only_into_a_store_behind_it_and_only_for_the_same_topic() {
        let (snapshots, a_dir, b_dir, c_dir) = (
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
        );
        let p = PartitionId::orders(2);
        let a = store(a_dir.path());
        let mut batch = a.batch();
        batch.put_checkpoint(p, &Checkpoint { next_offset: 42, ..Checkpoint::default() }).unwrap();
        a.commit_staged(batch.stage()).unwrap();
        let cfg = config(snapshots.path(), "shop.orders");
        let who = Exporter { cfg, taken_by: "a".into() };
        assert!(who.export_one(&a, &a.consistent_point(), p, None).unwrap().is_some());

        let restorer = |topic: &str| {
            Restorer::new(
                &config(snapshots.path(), topic),
                KafkaSettings::new("127.0.0.1:1"),
                "audit".into(),
                Arc::default(),
                Arc::default(),
            )
        };
        let b = store(b_dir.path());
        assert!(restorer("other.orders").restore_if_ahead(&b, p).is_none(), "another topic's snapshot");
        assert_eq!(b.checkpoint(p).unwrap(), None);
        assert!(restorer("shop.orders").restore_if_ahead(&b, p).is_some());
        assert_eq!(b.checkpoint(p).unwrap().map(|c| c.next_offset), Some(42));
        assert!(restorer("shop.orders").restore_if_ahead(&b, p).is_none(), "already there");

        let c = store(c_dir.path());
        let mut batch = c.batch();
        batch.put_checkpoint(p, &Checkpoint { next_offset: 50, ..Checkpoint::default() }).unwrap();
        c.commit_staged(batch.stage()).unwrap();
        assert!(restorer("shop.orders").restore_if_ahead(&c, p).is_none(), "local state ahead of the snapshot");
        assert_eq!(c.checkpoint(p).unwrap().map(|c| c.next_offset), Some(50));

        let d_dir = tempfile::tempdir().unwrap();
        let d = store(d_dir.path());
        let mut batch = d.batch();
        batch.put_checkpoint(p, &Checkpoint { next_offset: 40, ..Checkpoint::default() }).unwrap();
        d.commit_staged(batch.stage()).unwrap();
        assert!(restorer("shop.orders").replaying_within(2).restore_if_ahead(&d, p).is_none(), "two behind: replayed");
        assert!(restorer("shop.orders").replaying_within(1).restore_if_ahead(&d, p).is_some(), "further: imported");
    }
}
