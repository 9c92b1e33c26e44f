//! Logical time: the coordinates of the source record a result derives from.
//!
//! Every stateful operator orders its inputs by this tuple, never by the processing clock,
//! so that the same log yields the same state whatever the timing (SPEC §2).

use serde::{Deserialize, Serialize};

/// (broker append time, source index, partition, offset), compared in that order.
///
/// `source` is the index of the source in the topology file rather than a topic name, so the
/// type stays `Copy` and compares cheaply on the hot path.
///
/// Serialised as the 4-tuple `(append_ms, source, partition, offset)`: a JSON array on the
/// repartition topic and in merge buffers, and in bincode the same bytes as the tuple the
/// engine persisted before this type was used there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(from = "Tuple", into = "Tuple")]
pub struct LogicalTime {
    pub append_ms: i64,
    pub source: u16,
    pub partition: i32,
    pub offset: i64,
}

/// The wire form of [`LogicalTime`].
type Tuple = (i64, u16, i32, i64);

impl LogicalTime {
    pub fn new(append_ms: i64, source: u16, partition: i32, offset: i64) -> Self {
        LogicalTime { append_ms, source, partition, offset }
    }

    /// The upstream (source, partition) the record was read from.
    pub fn upstream(&self) -> (u16, i32) {
        (self.source, self.partition)
    }
}

impl From<Tuple> for LogicalTime {
    fn from((append_ms, source, partition, offset): Tuple) -> Self {
        LogicalTime { append_ms, source, partition, offset }
    }
}

impl From<LogicalTime> for Tuple {
    fn from(lt: LogicalTime) -> Self {
        (lt.append_ms, lt.source, lt.partition, lt.offset)
    }
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

    #[test]
    fn logical_time_is_encoded_as_the_tuple_it_replaced() {
        let lt = LogicalTime::new(-5, 1, 3, 42);
        let tuple: Tuple = (-5, 1, 3, 42);
        assert_eq!(serde_json::to_string(&lt).expect("json"), "[-5,1,3,42]");
        assert_eq!(serde_json::from_str::<LogicalTime>("[-5,1,3,42]").expect("json"), lt);
        // The state crate's codec: bincode 2, standard configuration.
        let config = bincode::config::standard();
        let old = bincode::serde::encode_to_vec(tuple, config).expect("bincode");
        assert_eq!(bincode::serde::encode_to_vec(lt, config).expect("bincode"), old);
        let (decoded, _): (LogicalTime, usize) =
            bincode::serde::decode_from_slice(&old, config).expect("old value decodes");
        assert_eq!(decoded, lt);
    }
}
