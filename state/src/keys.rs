//! Partitions and the namespaces of aggregate state. A partition's state is a column family
//! of its own (`crate::parts`); the 6-byte [`PartitionId::prefix`] was the key prefix of the
//! layout before it, and is read only when an older store is moved (`crate::migrate`).

use std::fmt;

/// A source partition: the index of the source in the topology and the partition number.
///
/// Displayed the way operators name partitions: `orders[3]`, `inventory[0]`,
/// `sku-repartition[7]` (the role, not the configured topic name, which logs give once at
/// start).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartitionId {
    pub source: u16,
    pub partition: i32,
}

impl PartitionId {
    pub const PREFIX_LEN: usize = 6;
    /// `source` of the `orders` topic's partitions.
    pub const ORDERS: u16 = 0;
    /// `source` of the `inventory` topic's partitions.
    pub const INVENTORY: u16 = 1;
    /// `source` of the internal SKU repartition topic's partitions.
    pub const SKU_REPARTITION: u16 = 2;
    /// `source` of the internal combine repartition topic's partitions.
    pub const COMBINE: u16 = 3;

    pub fn orders(partition: i32) -> Self {
        PartitionId { source: Self::ORDERS, partition }
    }

    pub fn inventory(partition: i32) -> Self {
        PartitionId { source: Self::INVENTORY, partition }
    }

    pub fn sku(partition: i32) -> Self {
        PartitionId { source: Self::SKU_REPARTITION, partition }
    }

    /// The role of the source: `orders`, `inventory`, `sku-repartition` or
    /// `combine-repartition`.
    pub fn role(&self) -> &'static str {
        match self.source {
            Self::ORDERS => "orders",
            Self::INVENTORY => "inventory",
            Self::SKU_REPARTITION => "sku-repartition",
            Self::COMBINE => "combine-repartition",
            _ => "source",
        }
    }

    pub fn prefix(&self) -> [u8; Self::PREFIX_LEN] {
        let mut p = [0u8; Self::PREFIX_LEN];
        p[..2].copy_from_slice(&self.source.to_be_bytes());
        p[2..].copy_from_slice(&self.partition.to_be_bytes());
        p
    }

    /// The first key after this partition's range (for range deletes).
    pub fn prefix_end(&self) -> Vec<u8> {
        let mut end = self.prefix().to_vec();
        for byte in end.iter_mut().rev() {
            if *byte == u8::MAX {
                *byte = 0;
            } else {
                *byte += 1;
                return end;
            }
        }
        vec![u8::MAX; Self::PREFIX_LEN + 1]
    }

    pub fn key(&self, suffix: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(Self::PREFIX_LEN + suffix.len());
        k.extend_from_slice(&self.prefix());
        k.extend_from_slice(suffix);
        k
    }
}

impl fmt::Display for PartitionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.source {
            Self::ORDERS | Self::INVENTORY | Self::SKU_REPARTITION | Self::COMBINE => {
                write!(f, "{}[{}]", self.role(), self.partition)
            }
            other => write!(f, "source{other}[{}]", self.partition),
        }
    }
}

/// Logs and `{:?}` in lists read the same as `Display`: `[orders[0], orders[1]]`.
impl fmt::Debug for PartitionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Kinds of keyed aggregate state in a partition's column family; the byte follows the
/// aggregate tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Namespace {
    Dashboard = 1,
    /// Per-SKU inventory, window and fired-rule state.
    Sku = 2,
    /// Repartitioned records waiting for every upstream's progress to pass them.
    MergeBuffer = 3,
    /// A SKU task's own bookkeeping (per-upstream progress and last applied record).
    SkuMeta = 4,
    /// Provisional finance rows per business day, store and currency.
    Finance = 5,
    /// Per-SKU order lines, one row per (SKU, event-time millisecond).
    SkuLines = 6,
    /// The latest partial of every source partition per combined key, and the combine
    /// task's record of each orders partition's progress.
    Combine = 7,
    /// Per-SKU window counts and fired window rules of the rules that read no stock, which
    /// a SKU task applies ahead of the stock rules (no line rows: they read no stock).
    SkuWindows = 8,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_are_named_the_way_operators_name_them() {
        assert_eq!(PartitionId::orders(0).to_string(), "orders[0]");
        assert_eq!(
            format!("{:?}", [PartitionId::inventory(1), PartitionId::sku(3)]),
            "[inventory[1], sku-repartition[3]]"
        );
        assert_eq!(PartitionId { source: 9, partition: 2 }.to_string(), "source9[2]");
    }

    #[test]
    fn prefix_end_is_the_first_key_after_the_partition() {
        let p = PartitionId { source: 0, partition: 3 };
        let end = p.prefix_end();
        assert!(p.key(&[0xff, 0xff, 0xff]) < end);
        assert_eq!(end, PartitionId { source: 0, partition: 4 }.prefix().to_vec());
    }
}
