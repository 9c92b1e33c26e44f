//! Dashboard aggregates (SPEC §2): per 1-min event-time window, store and currency.
//!
//! Money is kept per currency because summing yen and dollars has no meaning. Each source
//! partition aggregates its own events (a *partial*); the output key names the partition and
//! a reader sums partials of one window/store/currency (`tidemark query dashboard` does).
//! `version` counts the events applied and `as_of` is the latest broker append time among
//! them, so both are derived from data and replay identically.

use chrono::{DateTime, SecondsFormat, Utc};
use compact_str::CompactString;
use serde::{Deserialize, Serialize};

use crate::currency::Currency;
use crate::event::{CanonicalEvent, EventKind};
use crate::figures::{published_row, Figures, Units};
use crate::window::window_start;

/// Identifies one aggregate within a partition.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct DashKey {
    pub window_start_ms: i64,
    pub store: CompactString,
    pub currency: Currency,
}

/// Running totals of one window/store/currency in one partition.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DashAgg {
    pub figures: Figures<Units>,
    /// Number of events applied: strictly increases with every contribution.
    pub version: u64,
    /// Latest broker append time among the applied events.
    pub as_of_ms: i64,
}

/// The aggregate an event contributes to, or `None` when it carries no money (shipped).
pub fn key_for(event: &CanonicalEvent, window_size_ms: i64) -> Option<DashKey> {
    if event.kind == EventKind::Shipped {
        return None;
    }
    let currency = event.currency?;
    Some(DashKey {
        window_start_ms: window_start(event.event_time_ms, window_size_ms),
        store: event.store.clone(),
        currency,
    })
}

/// Applies one deduplicated event; the caller found the key with [`key_for`].
pub fn apply(agg: &mut DashAgg, event: &CanonicalEvent, append_ms: i64) {
    if agg.figures.apply(event) {
        agg.version += 1;
        agg.as_of_ms = agg.as_of_ms.max(append_ms);
    }
}

published_row! {
    /// The record written to the dashboard topic. Field order is fixed so equal inputs give
    /// byte-identical JSON.
    pub struct DashboardRecord {
        pub window_start: String,
        pub window_end: String,
        pub store: String,
        pub currency: String,
        pub source_partition: i32,
        ..figures(units: Units),
        pub version: u64,
        pub as_of: String,
    }
}

pub fn rfc3339_ms(t_ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(t_ms)
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
        .unwrap_or_else(|| format!("@{t_ms}ms"))
}

/// Compacted-topic key: `window_start|store|currency|p<partition>`.
pub fn record_key(key: &DashKey, partition: i32) -> String {
    format!("{}|{}|{}|p{}", rfc3339_ms(key.window_start_ms), key.store, key.currency.code(), partition)
}

pub fn record(key: &DashKey, partition: i32, agg: &DashAgg, window_size_ms: i64) -> DashboardRecord {
    let c = key.currency;
    DashboardRecord {
        window_start: rfc3339_ms(key.window_start_ms),
        window_end: rfc3339_ms(key.window_start_ms + window_size_ms),
        store: key.store.to_string(),
        currency: c.code().to_string(),
        source_partition: partition,
        figures: agg.figures.canonical(c),
        net: c.canonical(agg.figures.net()),
        version: agg.version,
        as_of: rfc3339_ms(agg.as_of_ms),
    }
}

pub fn record_bytes(key: &DashKey, partition: i32, agg: &DashAgg, window_size_ms: i64) -> Vec<u8> {
    // Serialising a struct of strings, integers and decimals cannot fail.
    serde_json::to_vec(&record(key, partition, agg, window_size_ms)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::test_event as ev;
    use rust_decimal::Decimal;

    /// State keys written before the store was a `CompactString` must still be found.
    #[test]
    fn a_key_encodes_and_decodes_as_it_did_with_a_string_store() {
        #[derive(Serialize, Deserialize, PartialEq, Debug)]
        struct Before {
            window_start_ms: i64,
            store: String,
            currency: Currency,
        }
        let config = bincode::config::standard();
        let currency: Currency = serde_json::from_str("\"JPY\"").expect("currency");
        for store in ["tokyo-01", "a-store-name-longer-than-twenty-four-bytes"] {
            let key = DashKey { window_start_ms: 1_764_300_000_000, store: store.into(), currency };
            let before = Before { window_start_ms: key.window_start_ms, store: store.to_string(), currency };
            let bytes = bincode::serde::encode_to_vec(&before, config).expect("encode");
            assert_eq!(bincode::serde::encode_to_vec(&key, config).expect("encode"), bytes);
            let (back, _): (DashKey, usize) = bincode::serde::decode_from_slice(&bytes, config).expect("decode");
            assert_eq!(back, key);
        }
    }

    #[test]
    fn net_is_gross_minus_cancelled_minus_refunded_and_version_counts_events() {
        let mut agg = DashAgg::default();
        let placed = ev(EventKind::Placed, 61_000, vec![(2, "1980"), (1, "500")], None);
        let cancelled = ev(EventKind::Cancelled, 62_000, vec![(1, "500")], None);
        let refunded = ev(EventKind::Refunded, 63_000, vec![], Some("100"));
        apply(&mut agg, &placed, 10);
        apply(&mut agg, &cancelled, 30);
        apply(&mut agg, &refunded, 20);
        assert_eq!((agg.figures.orders, agg.figures.units(), agg.version, agg.as_of_ms), (1, 3, 3, 30));
        assert_eq!(agg.figures.net(), Decimal::from(4460 - 500 - 100));
    }

    #[test]
    fn shipped_events_do_not_touch_the_dashboard() {
        assert_eq!(key_for(&ev(EventKind::Shipped, 0, vec![(1, "1")], None), 60_000), None);
    }

    #[test]
    fn record_bytes_are_stable_for_equal_inputs() {
        let mut agg = DashAgg::default();
        apply(&mut agg, &ev(EventKind::Placed, 61_000, vec![(2, "1980")], None), 70_000);
        let key = key_for(&ev(EventKind::Placed, 61_000, vec![], None), 60_000).expect("key");
        let a = record_bytes(&key, 3, &agg, 60_000);
        assert_eq!(a, record_bytes(&key, 3, &agg.clone(), 60_000));
        let text = String::from_utf8(a).expect("utf8");
        assert_eq!(
            text,
            r#"{"window_start":"1970-01-01T00:01:00.000Z","window_end":"1970-01-01T00:02:00.000Z","store":"tokyo-01","currency":"JPY","source_partition":3,"orders":1,"units":2,"gross":"3960","cancelled":"0","refunded":"0","net":"3960","version":1,"as_of":"1970-01-01T00:01:10.000Z"}"#
        );
        assert_eq!(record_key(&key, 3), "1970-01-01T00:01:00.000Z|tokyo-01|JPY|p3");
    }
}
