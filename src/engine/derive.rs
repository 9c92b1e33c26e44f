//! Records on the internal SKU repartition topic, and how SKUs map to its partitions.
//!
//! Upstream tasks (one per `orders` and per `inventory` partition) write three kinds of
//! record, in the versioned binary codec of the state store (`tidemark_state::codec`: a
//! version byte, then bincode), to explicit partitions:
//! - `line`: one order line of an applied placed/cancelled event;
//! - `snapshot`: one stock snapshot;
//! - `mark`: a progress promise, sent to every partition: "every record I write from now on
//!   has a logical time of at least `bound`".
//!
//! Logical times use the upstream's *effective* append time, the running maximum of append
//! times in that partition, so they never go backwards even if the broker clock does; the
//! downstream merge can then trust per-upstream order. Each record's `(upstream, offset,
//! index)` identifies it, so replays after a crash are recognised and skipped downstream.
//!
//! Versions before the codec wrote JSON (`{"line":{...}}`, and before that `{"k":"line",...}`);
//! such records, still in the topic or a merge buffer after an upgrade, decode too: a JSON
//! object starts with `{`, a codec value with [`codec::VERSION`].

use compact_str::CompactString;
use serde::{Deserialize, Serialize};
use tidemark_state::{codec, Checkpoint, PartitionId, StateError};
use tidemark_topology::logical::LogicalTime;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
// Externally tagged: the codec (bincode) cannot write an internally tagged enum, and the JSON
// of the previous version (`{"line":{...}}`) decodes through this same derive.
#[serde(rename_all = "snake_case")]
pub enum Derived {
    Line {
        lt: LogicalTime,
        /// Position of the line in its event, to tell lines of one source record apart.
        idx: u32,
        sku: CompactString,
        placed: bool,
        qty: u32,
        event_ms: i64,
        append_ms: i64,
    },
    Snapshot {
        lt: LogicalTime,
        sku: CompactString,
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

/// The first JSON encoding: internally tagged by `k`.
struct Legacy(Derived);

impl<'de> Deserialize<'de> for Legacy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        type Sku = CompactString;
        #[derive(Deserialize)]
        #[serde(tag = "k", rename_all = "snake_case")]
        enum Tagged {
            Line { lt: LogicalTime, idx: u32, sku: Sku, placed: bool, qty: u32, event_ms: i64, append_ms: i64 },
            Snapshot { lt: LogicalTime, sku: Sku, on_hand: i64, as_of_ms: i64, append_ms: i64 },
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
    /// The SKU processor's input for a line or a snapshot; `None` for a mark.
    pub fn sku_input(&self) -> Option<tidemark_topology::sku::SkuInput> {
        use tidemark_topology::sku::{LineKind, SkuInput};
        match self {
            Derived::Line { sku, placed, qty, event_ms, append_ms, .. } => Some(SkuInput::Line {
                sku: sku.clone(),
                kind: if *placed { LineKind::Placed } else { LineKind::Cancelled },
                qty: *qty,
                event_time_ms: *event_ms,
                append_ms: *append_ms,
            }),
            Derived::Snapshot { sku, on_hand, as_of_ms, append_ms, .. } => Some(SkuInput::Snapshot {
                sku: sku.clone(),
                on_hand: *on_hand,
                as_of_ms: *as_of_ms,
                append_ms: *append_ms,
            }),
            Derived::Mark { .. } => None,
        }
    }

    /// The versioned codec encoding. Plain data with no maps or unsized sequences: bincode
    /// cannot fail on it (`every_kind_of_record_encodes` checks each variant), so no error.
    pub fn encode(&self) -> Vec<u8> {
        codec::encode(self).unwrap_or_default()
    }

    /// Decodes a record of any version: the codec, or the JSON that earlier versions wrote
    /// (externally tagged `{"line":{...}}`, or the first, internally tagged `{"k":"line",...}`).
    /// A codec record of another version is [`StateError::Version`].
    pub fn decode(bytes: &[u8]) -> Result<Derived, StateError> {
        if bytes.first() == Some(&b'{') {
            return decode_json(bytes)
                .map_err(|e| StateError::Decode { what: "repartition record (JSON)", detail: e.to_string() });
        }
        codec::decode("repartition record", bytes)
    }

    /// The leading fields of a codec record, without decoding the rest: the SKU task reads
    /// most repartition records only to learn they were handed over in-process already, and
    /// this tells it so without allocating the SKU. `None` for the JSON of earlier versions
    /// or a record cut short or of another version (decode it whole to learn which).
    pub fn head_of(bytes: &[u8]) -> Option<Head> {
        if bytes.first() != Some(&codec::VERSION) {
            return None;
        }
        codec::decode("repartition record head", bytes).ok()
    }

    /// The head [`Derived::head_of`] reads from this record's encoding.
    pub fn head(&self) -> Head {
        match self {
            Derived::Line { lt, idx, .. } => Head::Line { lt: *lt, idx: *idx },
            Derived::Snapshot { lt, .. } => Head::Snapshot { lt: *lt },
            Derived::Mark { upstream, bound } => Head::Mark { upstream: *upstream, bound: *bound },
        }
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

/// What [`Derived::head_of`] reads: the leading fields of each variant of [`Derived`], in its
/// order (bincode writes the variant's index, then its fields in order, and a decode may end
/// before the input does). A record's identity and position, never its payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum Head {
    Line { lt: LogicalTime, idx: u32 },
    Snapshot { lt: LogicalTime },
    Mark { upstream: (u16, i32), bound: LogicalTime },
}

impl Head {
    /// The upstream that wrote the record, and its position there (a source offset).
    pub fn position(&self) -> ((u16, i32), i64) {
        match self {
            Head::Mark { upstream, bound } => (*upstream, bound.offset),
            Head::Line { lt, .. } | Head::Snapshot { lt } => (lt.upstream(), lt.offset),
        }
    }
}

// A JSON object starts with `{`, never the version byte: that is how the two are told apart.
const _: () = assert!(codec::VERSION != b'{', "the version byte must tell codec values from JSON");

fn decode_json(bytes: &[u8]) -> Result<Derived, serde_json::Error> {
    serde_json::from_slice(bytes).or_else(|e| serde_json::from_slice::<Legacy>(bytes).map(|l| l.0).map_err(|_| e))
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

/// "Every record I write from now on has a logical time of at least this": the effective
/// append time so far (later records cannot be lower) and the next offset. A caught-up
/// upstream may promise more, `idle_bound_ms` (clock minus the configured skew).
pub fn mark(id: PartitionId, checkpoint: &Checkpoint, idle_bound_ms: Option<i64>) -> Derived {
    let append = checkpoint.max_append_ms.max(idle_bound_ms.unwrap_or(i64::MIN));
    Derived::Mark {
        upstream: (id.source, id.partition),
        bound: LogicalTime::new(append, id.source, id.partition, checkpoint.next_offset),
    }
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

    fn snapshot() -> Derived {
        Derived::Snapshot {
            lt: LogicalTime::new(-1, 1, 3, 0),
            sku: "S-é".into(),
            on_hand: -4,
            as_of_ms: 6,
            append_ms: 7,
        }
    }

    fn mark() -> Derived {
        Derived::Mark { upstream: (1, 0), bound: LogicalTime::new(7, 1, 0, 3) }
    }

    #[test]
    fn every_kind_of_record_round_trips_through_the_versioned_codec() {
        for d in [line(), snapshot(), mark()] {
            let bytes = d.encode();
            assert_eq!(bytes.first(), Some(&codec::VERSION), "{d:?} is a codec value");
            assert_eq!(Derived::decode(&bytes).expect("decode"), d);
        }
        // Pinned: records already in a repartition topic must keep decoding after a change.
        // Version 1, variant 2 (mark), upstream (1, 0), bound (7, 1, 0, 3), zigzag varints.
        assert_eq!(mark().encode(), [1, 2, 1, 0, 14, 1, 0, 6]);
    }

    #[test]
    fn the_head_of_a_record_is_its_identity_and_position_without_its_payload() {
        for d in [line(), snapshot(), mark()] {
            assert_eq!(Derived::head_of(&d.encode()), Some(d.head()), "{d:?}");
        }
        assert_eq!(line().head(), Head::Line { lt: LogicalTime::new(5, 0, 1, 9), idx: 2 });
        assert_eq!(snapshot().head(), Head::Snapshot { lt: LogicalTime::new(-1, 1, 3, 0) });
        assert_eq!(line().head().position(), ((0, 1), 9));
        assert_eq!(mark().head().position(), ((1, 0), 3));
        assert_eq!(Derived::head_of(br#"{"mark":{"upstream":[1,0],"bound":[7,1,0,3]}}"#), None, "JSON: decoded whole");
        let mut newer = line().encode();
        newer[0] = 99;
        assert_eq!(Derived::head_of(&newer), None, "another version");
        assert_eq!(Derived::head_of(&line().encode()[..3]), None, "cut short");
    }

    #[test]
    fn records_of_the_json_encoding_before_the_codec_still_decode() {
        let line_json =
            br#"{"line":{"lt":[5,0,1,9],"idx":2,"sku":"S","placed":true,"qty":3,"event_ms":4,"append_ms":5}}"#;
        assert_eq!(Derived::decode(line_json).expect("JSON line decodes"), line());
        let mark_json = br#"{"mark":{"upstream":[1,0],"bound":[7,1,0,3]}}"#;
        assert_eq!(Derived::decode(mark_json).expect("JSON mark decodes"), mark());
        let snapshot_json =
            r#"{"snapshot":{"lt":[-1,1,3,0],"sku":"S-é","on_hand":-4,"as_of_ms":6,"append_ms":7}}"#.as_bytes();
        assert_eq!(Derived::decode(snapshot_json).expect("JSON snapshot decodes"), snapshot());
    }

    #[test]
    fn records_of_the_first_internally_tagged_encoding_still_decode() {
        let old = br#"{"k":"line","lt":[5,0,1,9],"idx":2,"sku":"S","placed":true,"qty":3,"event_ms":4,"append_ms":5}"#;
        assert_eq!(Derived::decode(old).expect("legacy decodes"), line());
        assert!(Derived::decode(b"{\"k\":\"other\"}").is_err());
    }

    #[test]
    fn a_record_of_an_unknown_version_or_cut_short_is_an_error_not_a_panic() {
        let mut newer = line().encode();
        newer[0] = 99;
        assert!(
            matches!(Derived::decode(&newer), Err(StateError::Version { found: 99, .. })),
            "{:?}",
            Derived::decode(&newer)
        );
        let bytes = line().encode();
        for cut in 0..bytes.len() {
            assert!(Derived::decode(&bytes[..cut]).is_err(), "{cut} of {} bytes", bytes.len());
        }
        assert!(matches!(Derived::decode(b"{\"line\":"), Err(StateError::Decode { .. })));
    }
}
