//! Logical time: the coordinates of the source record a result derives from.
//!
//! Every stateful operator orders its inputs by this tuple, never by the processing clock,
//! so that the same log yields the same state whatever the timing (SPEC §2).

use serde::{Deserialize, Serialize};

/// (broker append time, source index, partition, offset), compared in that order.
///
/// `source` is the index of the source in the topology file rather than a topic name, so the
/// type stays `Copy` and compares cheaply on the hot path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LogicalTime {
    pub append_ms: i64,
    pub source: u16,
    pub partition: i32,
    pub offset: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logical_time_orders_by_append_time_before_coordinates() {
        let early = LogicalTime { append_ms: 1, source: 1, partition: 9, offset: 99 };
        let late = LogicalTime { append_ms: 2, source: 0, partition: 0, offset: 0 };
        assert!(early < late);
        let same_ms_lower_partition = LogicalTime { append_ms: 2, source: 0, partition: 0, offset: 5 };
        let same_ms_higher_partition = LogicalTime { append_ms: 2, source: 0, partition: 1, offset: 0 };
        assert!(same_ms_lower_partition < same_ms_higher_partition);
    }
}
