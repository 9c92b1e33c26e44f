//! Records on the internal SKU repartition topic, and how SKUs map to its partitions.
//!
//! Upstream tasks (one per `orders` and per `inventory` partition) write three kinds of
//! record, JSON-encoded, to explicit partitions:
//! - `line`: one order line of an applied placed/cancelled event;
//! - `snapshot`: one stock snapshot;
//! - `mark`: a progress promise, sent to every partition: "every record I write from now on
//!   has a logical time of at least `bound`".
//!
//! Logical times use the upstream's *effective* append time, the running maximum of append
//! times in that partition, so they never go backwards even if the broker clock does; the
//! downstream merge can then trust per-upstream order. Each record's `(upstream, offset,
//! index)` identifies it, so replays after a crash are recognised and skipped downstream.

use serde::{Deserialize, Serialize};
use tidemark_topology::logical::LogicalTime;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
// Externally tagged (`{"line":{...}}`): serde_json then decodes without buffering the
// record, which an internally tagged enum must do.
#[serde(rename_all = "snake_case")]
pub enum Derived {
    Line {
        lt: LogicalTime,
        /// Position of the line in its event, to tell lines of one source record apart.
        idx: u32,
        sku: String,
        placed: bool,
        qty: u32,
        event_ms: i64,
        append_ms: i64,
    },
    Snapshot {
        lt: LogicalTime,
        sku: String,
        on_hand: i64,
        as_of_ms: i64,
        append_ms: i64,
    },
    Mark {
        /// The upstream (source, partition) making the promise.
        upstream: (u16, i32),
        bound: LogicalTime,
    },
}

/// The first encoding: internally tagged by `k`.
struct Legacy(Derived);

impl<'de> Deserialize<'de> for Legacy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(tag = "k", rename_all = "snake_case")]
        enum Tagged {
            Line { lt: LogicalTime, idx: u32, sku: String, placed: bool, qty: u32, event_ms: i64, append_ms: i64 },
            Snapshot { lt: LogicalTime, sku: String, on_hand: i64, as_of_ms: i64, append_ms: i64 },
            Mark { upstream: (u16, i32), bound: LogicalTime },
        }
        Ok(Legacy(match Tagged::deserialize(d)? {
            Tagged::Line { lt, idx, sku, placed, qty, event_ms, append_ms } => {
                Derived::Line { lt, idx, sku, placed, qty, event_ms, append_ms }
            }
            Tagged::Snapshot { lt, sku, on_hand, as_of_ms, append_ms } => {
                Derived::Snapshot { lt, sku, on_hand, as_of_ms, append_ms }
            }
            Tagged::Mark { upstream, bound } => Derived::Mark { upstream, bound },
        }))
    }
}

impl Derived {
    pub fn encode(&self) -> Vec<u8> {
        // Plain data with no maps keyed by non-strings: serialisation cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Decodes a record; records written before the encoding became externally tagged
    /// (`{"k":"line",...}`, still in a repartition topic or a merge buffer after an
    /// upgrade) decode too.
    pub fn decode(bytes: &[u8]) -> Result<Derived, serde_json::Error> {
        serde_json::from_slice(bytes).or_else(|e| serde_json::from_slice::<Legacy>(bytes).map(|l| l.0).map_err(|_| e))
    }

    /// The position of a data record within its upstream's sequence.
    pub fn seq(&self) -> Option<(i64, u32)> {
        match self {
            Derived::Line { lt, idx, .. } => Some((lt.offset, *idx)),
            Derived::Snapshot { lt, .. } => Some((lt.offset, 0)),
            Derived::Mark { .. } => None,
        }
    }
}

/// The repartition partition that owns a SKU: FNV-1a 64 of its UTF-8 bytes, modulo the
/// partition count. Stable across processes, versions and platforms.
pub fn sku_partition(sku: &str, partitions: i32) -> i32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in sku.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    i32::try_from(h % u64::from(partitions.max(1).unsigned_abs())).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sku_partition_is_stable_and_in_range() {
        // Published FNV-1a 64 test vectors (`"a"`, `"foobar"`), reduced by hand.
        for (sku, fnv1a) in [("a", 0xaf63_dc4c_8601_ec8c_u64), ("foobar", 0x8594_4171_f739_67e8)] {
            for partitions in [1, 4, 7, 1024, i32::MAX] {
                let expected = i32::try_from(fnv1a % u64::try_from(partitions).expect("positive")).expect("fits");
                assert_eq!(sku_partition(sku, partitions), expected, "{sku} over {partitions}");
            }
        }
        assert!((0..7).contains(&sku_partition("anything", 7)));
        // Pinned: changing the function would move every SKU's state to another partition.
        assert_eq!(sku_partition("SKU-1", 1024), 812);
    }

    /// The line record both encodings below describe.
    fn line() -> Derived {
        Derived::Line {
            lt: LogicalTime::new(5, 0, 1, 9),
            idx: 2,
            sku: "S".into(),
            placed: true,
            qty: 3,
            event_ms: 4,
            append_ms: 5,
        }
    }

    #[test]
    fn derived_records_round_trip() {
        let d = line();
        assert_eq!(Derived::decode(&d.encode()).expect("decode"), d);
        let m = Derived::Mark { upstream: (1, 0), bound: LogicalTime::new(7, 1, 0, 3) };
        assert_eq!(Derived::decode(&m.encode()).expect("decode"), m);
        assert_eq!(String::from_utf8(m.encode()).expect("utf8"), r#"{"mark":{"upstream":[1,0],"bound":[7,1,0,3]}}"#);
    }

    #[test]
    fn records_of_the_first_internally_tagged_encoding_still_decode() {
        let old = br#"{"k":"line","lt":[5,0,1,9],"idx":2,"sku":"S","placed":true,"qty":3,"event_ms":4,"append_ms":5}"#;
        assert_eq!(Derived::decode(old).expect("legacy decodes"), line());
        assert!(Derived::decode(b"{\"k\":\"other\"}").is_err());
    }
}
