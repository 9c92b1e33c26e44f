//! Rows derived by standby tasks: recorded, never sent, until their partition is promoted.
//!
//! A standby SKU task derives the same rows as the active one, usually a little later. Each
//! is kept here (and `Pending` in the outbox) until the audit topic, read by the standby's
//! audit tail, shows the active owner settled it; the row is then stored with that outcome.
//! An outcome that arrives first waits in [`Settled`] for its row. Both sides are matched
//! under one lock, so a row and its outcome always meet, whichever comes first.
//!
//! When the partition is promoted its waiting rows are dropped from here: the new active
//! task's outbox scan finds them `Pending` in the store and sends those the audit topic
//! never showed settled (what the old owner had not delivered when it died).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use metrics::{counter, gauge};
use tidemark_state::{codec, PartitionId, Store};
use tracing::warn;

use super::Settled;
use crate::engine::outbox::{OutboxRow, RowState};

pub struct StandbyRows {
    store: Arc<Store>,
    settled: Arc<Settled>,
    /// Rows waiting for their outcome, by key.
    waiting: Mutex<HashMap<String, (PartitionId, OutboxRow)>>,
}

impl StandbyRows {
    pub fn new(store: Arc<Store>, settled: Arc<Settled>) -> Self {
        counter!("tidemark_standby_rows_settled_total").absolute(0);
        StandbyRows { store, settled, waiting: Mutex::default() }
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
                None => {
                    waiting.insert(row.key.clone(), (id, row.clone()));
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
                Some(found) => Some(found),
                None => {
                    self.settled.insert(key, outcome);
                    None
                }
            }
        };
        if let Some((id, row)) = found {
            self.store_outcome(id, row, outcome);
        }
    }

    /// Forgets the waiting rows of SKU partitions handed to the active task: its outbox scan
    /// takes them from the store. Returns how many there were.
    pub fn promoted(&self, partitions: &[i32]) -> usize {
        let Ok(mut waiting) = self.waiting.lock() else { return 0 };
        let before = waiting.len();
        waiting.retain(|_, (id, _)| !partitions.contains(&id.partition));
        before - waiting.len()
    }

    pub fn waiting(&self) -> usize {
        self.waiting.lock().map(|w| w.len()).unwrap_or(0)
    }

    pub fn publish(&self) {
        gauge!("tidemark_standby_rows_waiting").set(self.waiting() as f64);
    }

    fn store_outcome(&self, id: PartitionId, mut row: OutboxRow, outcome: RowState) {
        row.state = outcome;
        let written = codec::encode(&row).and_then(|bytes| self.store.outbox_update(id, &row.key, &bytes, row.index()));
        match written {
            Ok(()) => counter!("tidemark_standby_rows_settled_total").increment(1),
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
}
