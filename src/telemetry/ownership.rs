//! Which partitions this process owns and which it is still restoring, for the
//! ownership gauges (issue 14: a partition without a running owner stops every SKU's actions,
//! and with `--replicas` no rebalance counter shows it).
//!
//! ```text
//!  (not here) ──restore_started──▶ restoring ──restored──▶ owned
//!      ▲                               │                     │
//!      └───────────revoked─────────────┴─────────────────────┘
//! ```
//! Only a partition that went through `restore_started` becomes owned: the micro-batch
//! process reports progress on orders partitions too, but never processes them as their
//! owner. A partition once owned keeps its series, at 0 after it is revoked, so the page
//! says it left rather than dropping the line.

use std::collections::{BTreeMap, BTreeSet};

use tidemark_state::PartitionId;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ownership {
    /// Partition count of each consumed source (by `PartitionId::source`), from the
    /// broker's metadata at start.
    counts: BTreeMap<u16, i32>,
    /// Assigned, restore not finished: not processing yet.
    restoring: BTreeSet<PartitionId>,
    /// Assigned and restored: processing.
    owned: BTreeSet<PartitionId>,
    /// Every partition owned at some point by this process.
    seen: BTreeSet<PartitionId>,
}

impl Ownership {
    pub fn input_partitions(&mut self, counts: impl IntoIterator<Item = (u16, i32)>) {
        self.counts = counts.into_iter().collect();
    }

    /// An assignment arrived; its partitions restore one after the other.
    pub fn restore_started(&mut self, ids: &[PartitionId]) {
        self.restoring.extend(ids.iter().copied());
    }

    /// The partition's task is restored and processing.
    pub fn restored(&mut self, id: PartitionId) {
        if self.restoring.remove(&id) {
            self.owned.insert(id);
            self.seen.insert(id);
        }
    }

    pub fn revoked(&mut self, id: PartitionId) {
        self.restoring.remove(&id);
        self.owned.remove(&id);
    }

    /// `(source, partition count)` of every consumed source.
    pub fn counts(&self) -> impl Iterator<Item = (u16, i32)> + '_ {
        self.counts.iter().map(|(s, n)| (*s, *n))
    }

    /// Every partition owned now or before, with whether it is owned now.
    pub fn partitions(&self) -> impl Iterator<Item = (PartitionId, bool)> + '_ {
        self.seen.iter().map(|id| (*id, self.owned.contains(id)))
    }

    /// Partitions being restored, per source: every counted source, 0 included.
    pub fn restoring_by_source(&self) -> BTreeMap<u16, usize> {
        let mut by: BTreeMap<u16, usize> = self.counts.keys().map(|s| (*s, 0)).collect();
        for id in &self.restoring {
            *by.entry(id.source).or_default() += 1;
        }
        by
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(o: &Ownership) -> Vec<(PartitionId, bool)> {
        o.partitions().collect()
    }

    #[test]
    fn a_partition_is_owned_once_restored_and_reads_zero_after_its_revoke() {
        let mut o = Ownership::default();
        o.input_partitions([(PartitionId::ORDERS, 4), (PartitionId::INVENTORY, 2)]);
        let (o1, o3, i0) = (PartitionId::orders(1), PartitionId::orders(3), PartitionId::inventory(0));
        o.restore_started(&[o1, o3, i0]);
        assert_eq!(owned(&o), [], "nothing is owned while restoring");
        assert_eq!(o.restoring_by_source(), BTreeMap::from([(PartitionId::ORDERS, 2), (PartitionId::INVENTORY, 1)]));
        o.restored(o1);
        assert_eq!(owned(&o), [(o1, true)]);
        o.restored(o3);
        o.restored(i0);
        assert_eq!(o.restoring_by_source(), BTreeMap::from([(PartitionId::ORDERS, 0), (PartitionId::INVENTORY, 0)]));
        o.revoked(o3);
        assert_eq!(owned(&o), [(o1, true), (o3, false), (i0, true)], "a revoked partition stays, at 0");
        o.restore_started(&[o3]);
        o.restored(o3);
        assert_eq!(owned(&o), [(o1, true), (o3, true), (i0, true)]);
        assert_eq!(o.counts().collect::<Vec<_>>(), [(PartitionId::ORDERS, 4), (PartitionId::INVENTORY, 2)]);
    }

    #[test]
    fn a_revoke_during_the_restore_leaves_the_partition_unowned() {
        let mut o = Ownership::default();
        let o2 = PartitionId::orders(2);
        o.restore_started(&[o2]);
        o.revoked(o2);
        o.restored(o2);
        assert_eq!(owned(&o), []);
        assert_eq!(o.restoring_by_source(), BTreeMap::new());
    }

    #[test]
    fn progress_reported_without_a_restore_is_not_ownership() {
        let mut o = Ownership::default();
        o.restored(PartitionId::orders(0));
        assert_eq!(owned(&o), [], "the micro-batch process reports progress, not ownership");
    }
}
