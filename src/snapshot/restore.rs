//! Restore on assignment: a partition whose newest snapshot is ahead of its local state (none
//! here: a new pod, a moved partition, a wiped volume) is imported from it before its fetch
//! position is set, so only the log after the snapshot is replayed.
//!
//! Actions a SKU partition completed after the state it resumes from was written are not in
//! that state; the audit read that keeps them from being sent again runs for every assigned
//! SKU partition, imported or not ([`crate::actions::Recall`]), right after this.
//!
//! The snapshot's files are downloaded into a staging directory on the state volume, then
//! imported. A failed download or import leaves the local state as it was (see
//! `Store::import_partition`); the next older snapshot is then compared with that state,
//! read again.

use std::time::Instant;

use tidemark_state::{PartitionId, Store};
use tracing::{info, warn};

use super::error::{Op, SnapshotError};
use super::layout::Found;
use super::store::staging;
use super::SnapshotConfig;
use crate::telemetry;

/// Snapshots tried, newest first, before giving up on them for a partition.
const ATTEMPTS: usize = 3;

pub struct Restorer {
    cfg: SnapshotConfig,
    /// A local checkpoint at most this many records behind a snapshot is replayed from the
    /// log instead of importing it (a warm standby copy; see [`Restorer::replaying_within`]).
    replay_within: i64,
}

impl Restorer {
    pub fn new(cfg: &SnapshotConfig) -> Self {
        Restorer { cfg: cfg.clone(), replay_within: 0 }
    }

    /// With standby tasks, the local state of a partition is usually a commit behind the
    /// snapshot its last owner took as it handed it over: replaying that many records costs
    /// less than importing the whole partition.
    pub fn replaying_within(mut self, records: i64) -> Self {
        self.replay_within = records.max(0);
        self
    }

    /// The offset the newest snapshot of `id` (of this topic) resumes from, when it is ahead
    /// of what `store` holds by more than the replay allowance: a listing and a checkpoint
    /// read, no import. The rebalance callback asks this and positions the partition there
    /// (the import itself runs off the callback, `tasks::imports`); the state imported later
    /// resumes at or after it (the manifest's checkpoint is read before the export's files).
    pub fn ahead_at(&self, store: &Store, id: PartitionId) -> Option<i64> {
        let local = store.checkpoint(id).map(|c| c.map(|c| c.next_offset)).ok()?;
        let candidates = match self.cfg.layout().list(id, ATTEMPTS) {
            Ok(c) => c,
            Err(e) => {
                telemetry::snapshots::failed(e.op(Op::List));
                warn!(partition = %id, error = %e, "cannot list snapshots; the partition goes on from its local state");
                return None;
            }
        };
        let topic = self.cfg.topic_of(id);
        let next = candidates
            .iter()
            .take(ATTEMPTS)
            .find(|f| f.manifest.topic == topic)?
            .manifest
            .export
            .checkpoint
            .next_offset;
        local.is_none_or(|l| l.saturating_add(self.replay_within) < next).then_some(next)
    }

    /// Imports the newest snapshot of `id` into `store` when it is ahead of what the store
    /// holds. A snapshot that cannot be read or imported is logged and the next older one
    /// tried; without any, the partition goes on from its local state (or from the log
    /// start) as it would without snapshots.
    pub fn restore_if_ahead(&self, store: &Store, id: PartitionId) -> Option<Found> {
        let local_checkpoint = || match store.checkpoint(id) {
            Ok(c) => Ok(c.map(|c| c.next_offset)),
            Err(e) => {
                warn!(partition = %id, error = %e, "cannot read the local checkpoint; not restoring from a snapshot");
                Err(())
            }
        };
        let Ok(mut local) = local_checkpoint() else { return None };
        let layout = self.cfg.layout();
        let candidates = match layout.list(id, ATTEMPTS) {
            Ok(c) => c,
            Err(e) => {
                telemetry::snapshots::failed(e.op(Op::List));
                warn!(partition = %id, error = %e, "cannot list snapshots; the partition goes on from its local state");
                return None;
            }
        };
        let topic = self.cfg.topic_of(id);
        for found in candidates {
            if found.manifest.topic != topic {
                warn!(partition = %id, topic, snapshot = %found.key, snapshot_topic = %found.manifest.topic, "snapshot of another topic; not imported");
                continue;
            }
            let next = found.manifest.export.checkpoint.next_offset;
            if local.is_some_and(|l| l.saturating_add(self.replay_within) >= next) {
                return None;
            }
            let started = Instant::now();
            crate::failpoint::hit(&format!("import.{id}"));
            match self.import(store, id, &found) {
                Ok(()) => {
                    telemetry::snapshots::restored();
                    info!(
                        partition = %id,
                        next_offset = next,
                        local_next_offset = ?local,
                        bytes = found.manifest.export.bytes(),
                        taken_by = %found.manifest.taken_by,
                        snapshot = %found.key,
                        store = layout.location(),
                        took_ms = started.elapsed().as_millis() as u64,
                        "restored from snapshot"
                    );
                    return Some(found);
                }
                Err(e) => {
                    match e {
                        SnapshotError::Store { op, .. } => telemetry::snapshots::failed(op),
                        _ => telemetry::snapshots::restore_failed(),
                    }
                    warn!(partition = %id, snapshot = %found.key, error = %e, "snapshot not imported; trying an older one");
                    // The import leaves the local state as it was; read it again all the same,
                    // so an older snapshot is compared with what the store holds now.
                    let Ok(now) = local_checkpoint() else { return None };
                    local = now;
                }
            }
        }
        None
    }

    /// Downloads `found` into a staging directory beside the state, then imports it.
    fn import(&self, store: &Store, id: PartitionId, found: &Found) -> Result<(), SnapshotError> {
        let dir = staging(store.path(), "download")?;
        self.cfg.layout().download(found, dir.path())?;
        store.import_partition(id, dir.path(), &found.manifest.export)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::export::Exporter;
    use tidemark_state::{Checkpoint, StoreOptions};

    fn config(dir: &std::path::Path, orders_topic: &str) -> SnapshotConfig {
        SnapshotConfig {
            bucket: std::sync::Arc::new(crate::snapshot::Bucket::open(&dir.display().to_string()).unwrap()),
            interval: std::time::Duration::from_secs(60),
            keep: 2,
            topology: "t".into(),
            group: "g".into(),
            topics: crate::tasks::Sources::from_topics(vec![
                orders_topic.into(),
                "inventory".into(),
                "sku".into(),
                "combine".into(),
            ]),
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

        let restorer = |topic: &str| Restorer::new(&config(snapshots.path(), topic));
        let b = store(b_dir.path());
        assert!(restorer("other.orders").restore_if_ahead(&b, p).is_none(), "another topic's snapshot");
        assert_eq!(b.checkpoint(p).unwrap(), None);
        assert_eq!(restorer("shop.orders").ahead_at(&b, p), Some(42), "an empty store is behind");
        assert!(restorer("shop.orders").restore_if_ahead(&b, p).is_some());
        assert_eq!(restorer("shop.orders").ahead_at(&b, p), None, "imported: no longer ahead");
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
