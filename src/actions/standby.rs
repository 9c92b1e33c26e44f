//! Rows derived by standby tasks: recorded, never sent, until their partition is promoted.
//!
//! A standby SKU task derives the same rows as the active one, usually a little later. Each
//! is kept `Pending` in the outbox, its key noted here, until the audit topic, read by the
//! standby's audit tail, shows the active owner settled it; the row is then read back from
//! the store and stored with that outcome. An outcome that arrives first waits in [`Settled`]
//! for its row. Both sides are matched under one lock, so a row and its outcome always meet,
//! whichever comes first.
//!
//! Memory is bounded by configuration, not by the number of pending rows: only the key and
//! partition of a waiting row are held (about 100 bytes), at most [`MAX_WAITING`] of them. A
//! row derived beyond that is left pending in the store untracked
//! (`tidemark_standby_rows_untracked_total`): its outcome then waits in [`Settled`] (kept an
//! hour) for the promoted partition's dispatcher, which checks it before any POST.
//!
//! When the partition is promoted its waiting keys are dropped from here: the new active
//! task's outbox scan finds the rows `Pending` in the store and sends those the audit topic
//! never showed settled (what the old owner had not delivered when it died).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tidemark_state::{codec, PartitionId, Store};
use tracing::warn;

use super::Settled;
use crate::engine::outbox::{OutboxRow, RowState};

/// Waiting rows held at most, over every standby partition: ~25 MB of keys. A one-hour 503
/// storm at 10 actions/s leaves 36,000.
pub const MAX_WAITING: usize = 250_000;

pub struct StandbyRows {
    store: Arc<Store>,
    settled: Arc<Settled>,
    /// The SKU partition of each row waiting for its outcome, by key.
    waiting: Mutex<HashMap<String, PartitionId>>,
    max_waiting: usize,
}

impl StandbyRows {
    pub fn new(store: Arc<Store>, settled: Arc<Settled>) -> Self {
        Self::holding_at_most(store, settled, MAX_WAITING)
    }

    pub fn holding_at_most(store: Arc<Store>, settled: Arc<Settled>, max_waiting: usize) -> Self {
        crate::telemetry::standby::rows_started();
        StandbyRows { store, settled, waiting: Mutex::default(), max_waiting }
    }

    /// A row a standby task committed (or found pending when it adopted its partition).
    pub fn derived(&self, id: PartitionId, row: OutboxRow) {
        if row.state != RowState::Pending {
            return;
        }
        let settled = {
            let Ok(mut waiting) = self.waiting.lock() else { return };
            match self.settled.take(&row.key) {
                Some(outcome) => Some(outcome),
                None if waiting.len() < self.max_waiting || waiting.contains_key(&row.key) => {
                    waiting.insert(row.key.clone(), id);
                    None
                }
                None => {
                    crate::telemetry::standby::row_untracked();
                    None
                }
            }
        };
        if let Some(outcome) = settled {
            self.store_outcome(id, row, outcome);
        }
    }

    /// A final outcome read from the audit topic.
    pub fn outcome(&self, key: String, outcome: RowState) {
        let found = {
            let Ok(mut waiting) = self.waiting.lock() else { return };
            match waiting.remove(&key) {
                Some(id) => Some(id),
                None => {
                    self.settled.insert(key.clone(), outcome);
                    None
                }
            }
        };
        let Some(id) = found else { return };
        // Read back: only keys are held. A row no longer pending was settled meanwhile.
        let row = match self.store.outbox_get(id, &key) {
            Ok(Some(bytes)) => codec::decode::<OutboxRow>("outbox row", &bytes).ok(),
            Ok(None) => None,
            Err(e) => {
                warn!(partition = %id, key = %key, error = %e, "cannot read a standby row to record its outcome; the row stays pending");
                None
            }
        };
        if let Some(row) = row.filter(|r| r.state == RowState::Pending) {
            self.store_outcome(id, row, outcome);
        }
    }

    /// Forgets the waiting rows of SKU partitions handed to the active task: its outbox scan
    /// takes them from the store. Returns how many there were.
    pub fn promoted(&self, partitions: &[i32]) -> usize {
        let Ok(mut waiting) = self.waiting.lock() else { return 0 };
        let before = waiting.len();
        waiting.retain(|_, id| !partitions.contains(&id.partition));
        before - waiting.len()
    }

    pub fn waiting(&self) -> usize {
        self.waiting.lock().map(|w| w.len()).unwrap_or(0)
    }

    pub fn publish(&self) {
        crate::telemetry::standby::rows_waiting(self.waiting());
    }

    fn store_outcome(&self, id: PartitionId, mut row: OutboxRow, outcome: RowState) {
        row.state = outcome;
        let written = codec::encode(&row).and_then(|bytes| self.store.outbox_update(id, &row.key, &bytes, row.index()));
        match written {
            Ok(()) => crate::telemetry::standby::row_settled(),
            Err(e) => {
                warn!(partition = %id, key = %row.key, error = %e, "cannot record a standby row's outcome; the row stays pending")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemark_state::StoreOptions;

    fn row(key: &str) -> OutboxRow {
        OutboxRow::sample(key)
    }

    fn fixture() -> (tempfile::TempDir, Arc<Store>, StandbyRows) {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path(), &StoreOptions::default()).unwrap());
        let rows = StandbyRows::new(Arc::clone(&store), Arc::default());
        (dir, store, rows)
    }

    fn pending(store: &Store, id: PartitionId) -> Vec<String> {
        store
            .outbox_pending(id)
            .unwrap()
            .into_iter()
            .map(|(_, v)| codec::decode::<OutboxRow>("row", &v).unwrap())
            .filter(|r| r.state == RowState::Pending)
            .map(|r| r.key)
            .collect()
    }

    fn put(store: &Store, id: PartitionId, r: &OutboxRow) {
        store.outbox_update(id, &r.key, &codec::encode(r).unwrap(), r.index()).unwrap();
    }

    #[test]
    fn a_row_and_its_outcome_meet_whichever_comes_first() {
        let (_dir, store, rows) = fixture();
        let id = PartitionId::sku(1);
        for key in ["row-first", "outcome-first", "never-settled"] {
            put(&store, id, &row(key));
        }
        rows.derived(id, row("row-first"));
        rows.outcome("row-first".into(), RowState::Delivered { status: 200 });
        rows.outcome("outcome-first".into(), RowState::Conflict);
        rows.derived(id, row("outcome-first"));
        rows.derived(id, row("never-settled"));
        assert_eq!(pending(&store, id), vec!["never-settled".to_string()]);
        assert_eq!(rows.waiting(), 1);
    }

    #[test]
    fn a_promoted_partition_leaves_its_waiting_rows_to_the_active_scan() {
        let (_dir, store, rows) = fixture();
        let (a, b) = (PartitionId::sku(1), PartitionId::sku(2));
        put(&store, a, &row("a"));
        put(&store, b, &row("b"));
        rows.derived(a, row("a"));
        rows.derived(b, row("b"));
        assert_eq!(rows.promoted(&[1]), 1);
        // Its outcome arrives after the promotion: kept for the active dispatcher's check.
        rows.outcome("a".into(), RowState::Delivered { status: 200 });
        assert_eq!(pending(&store, a), vec!["a".to_string()], "left to the active task");
        assert_eq!(rows.waiting(), 1);
    }

    #[test]
    fn beyond_its_cap_a_row_stays_pending_untracked_and_its_outcome_waits_for_the_dispatcher() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path(), &StoreOptions::default()).unwrap());
        let settled: Arc<Settled> = Arc::default();
        let rows = StandbyRows::holding_at_most(Arc::clone(&store), Arc::clone(&settled), 2);
        let id = PartitionId::sku(0);
        for key in ["a", "b", "c"] {
            put(&store, id, &row(key));
            rows.derived(id, row(key));
        }
        assert_eq!(rows.waiting(), 2, "held at most 2");
        for key in ["a", "b", "c"] {
            rows.outcome(key.into(), RowState::Delivered { status: 200 });
        }
        // The tracked rows are settled from the store; the untracked one stays pending, its
        // outcome kept for the dispatcher's check at promotion.
        assert_eq!(pending(&store, id), vec!["c".to_string()]);
        assert_eq!(settled.take("c"), Some(RowState::Delivered { status: 200 }));
        assert_eq!(rows.waiting(), 0);
    }
}
