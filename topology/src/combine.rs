//! One row per aggregate key (SPEC §6): the sum of the latest partial of every source
//! partition, for consumers that upsert by key and do no arithmetic.
//!
//! Each orders partition writes its dashboard and provisional *partials* (keyed `…|p<n>`,
//! [`crate::dashboard`], [`crate::provisional`]). The runtime re-keys them by aggregate key
//! (window × store × currency; day × store × currency) onto an internal topic, together
//! with each orders partition's progress ([`CombineInput::Mark`]). One task per partition of
//! that topic keeps, per key, the latest partial of every source partition ([`Latest`]) and
//! writes the combined row:
//!
//! - a partial replaces the stored one of its source partition only if its version is
//!   greater: a replayed or duplicated partial changes nothing;
//! - the combined `version` is the sum of the partial versions, so it grows with every
//!   partial taken, and the row is a pure function of the partials taken;
//! - the final row is the sum of the final partials, which are themselves a function of the
//!   log: a replay or crash ends on the same bytes as a clean run;
//! - a key is forgotten once every orders partition's watermark has passed its retention
//!   ([`Progress`]): no partition will ever write a new partial for it, and a replayed one
//!   arriving later is recognised by its expired window and ignored ([`expiry_start_ms`]).

use std::collections::BTreeMap;

use chrono::NaiveDate;
use chrono_tz::Tz;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use crate::dashboard::DashboardRecord;
use crate::figures::{published_row, Events, Figures, Units};
use crate::finance::day_bounds_ms;
use crate::provisional::ProvisionalRecord;
use crate::window::{window_start, WindowPolicy};

/// A record of the internal combine topic: a partial in its public format, or an orders
/// partition's progress. JSON, externally tagged: `{"dashboard":{…}}`, `{"finance":{…}}`,
/// `{"mark":{"source_partition":0,"max_event_ms":…}}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CombineInput {
    Dashboard(DashboardRecord),
    Finance(ProvisionalRecord),
    Mark(Mark),
}

/// "Every partial I write from now on was computed with at least this maximum event time":
/// an orders partition's watermark input, sent to every combine partition after the partials
/// it covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    pub source_partition: i32,
    pub max_event_ms: i64,
}

impl CombineInput {
    /// The internal record of a partial, without parsing it: `{"<kind>":<partial bytes>}`.
    pub fn wrap(kind: &str, partial: &[u8]) -> Vec<u8> {
        let mut v = Vec::with_capacity(partial.len() + kind.len() + 5);
        v.extend_from_slice(b"{\"");
        v.extend_from_slice(kind.as_bytes());
        v.extend_from_slice(b"\":");
        v.extend_from_slice(partial);
        v.push(b'}');
        v
    }

    pub fn mark_bytes(source_partition: i32, max_event_ms: i64) -> Vec<u8> {
        // A struct of two integers always serialises.
        serde_json::to_vec(&CombineInput::Mark(Mark { source_partition, max_event_ms })).unwrap_or_default()
    }
}

/// The combined key of a partial's key: `…|p<n>` without its last field.
pub fn combined_key(partial_key: &[u8]) -> &[u8] {
    match partial_key.iter().rposition(|b| *b == b'|') {
        Some(i) => &partial_key[..i],
        None => partial_key,
    }
}

/// What [`Latest`] needs of a partial record.
pub trait PartialRecord {
    fn source_partition(&self) -> i32;
    fn version(&self) -> u64;
    /// The combined key: the partial's key without `|p<n>`.
    fn combined_key(&self) -> String;
    /// The combined row this partial's key sums into.
    type Combined;
    /// A combined row of this partial's key with nothing added yet.
    fn empty_combined(&self, partitions: usize) -> Self::Combined;
    /// Adds this partial's figures, version and `as_of` to its combined row.
    fn add_to(&self, c: &mut Self::Combined);
}

impl PartialRecord for DashboardRecord {
    type Combined = DashboardCombined;
    fn source_partition(&self) -> i32 {
        self.source_partition
    }
    fn version(&self) -> u64 {
        self.version
    }
    fn combined_key(&self) -> String {
        format!("{}|{}|{}", self.window_start, self.store, self.currency)
    }
    fn empty_combined(&self, partitions: usize) -> DashboardCombined {
        DashboardCombined {
            window_start: self.window_start.clone(),
            window_end: self.window_end.clone(),
            store: self.store.clone(),
            currency: self.currency.clone(),
            partitions,
            figures: Figures::default(),
            net: Decimal::ZERO,
            version: 0,
            as_of: String::new(),
        }
    }
    fn add_to(&self, c: &mut DashboardCombined) {
        c.figures.add(&self.figures);
        c.net += self.net;
        c.version += self.version;
        c.as_of = later(&c.as_of, &self.as_of);
    }
}

impl PartialRecord for ProvisionalRecord {
    type Combined = FinanceCombined;
    fn source_partition(&self) -> i32 {
        self.source_partition
    }
    fn version(&self) -> u64 {
        self.version
    }
    fn combined_key(&self) -> String {
        format!("{}|{}|{}", self.day, self.store, self.currency)
    }
    fn empty_combined(&self, partitions: usize) -> FinanceCombined {
        FinanceCombined {
            day: self.day.clone(),
            store: self.store.clone(),
            currency: self.currency.clone(),
            partitions,
            figures: Figures::default(),
            net: Decimal::ZERO,
            version: 0,
            as_of: String::new(),
        }
    }
    fn add_to(&self, c: &mut FinanceCombined) {
        c.figures.add(&self.figures);
        c.net += self.net;
        c.version += self.version;
        c.as_of = later(&c.as_of, &self.as_of);
    }
}

/// The latest partial of every source partition of one combined key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Latest<R> {
    pub parts: BTreeMap<i32, R>,
}

impl<R> Default for Latest<R> {
    fn default() -> Self {
        Latest { parts: BTreeMap::new() }
    }
}

impl<R: PartialRecord> Latest<R> {
    /// Keeps `r` if its version is greater than the stored partial's of the same source
    /// partition. Returns whether anything changed.
    pub fn offer(&mut self, r: R) -> bool {
        let p = r.source_partition();
        if self.parts.get(&p).is_some_and(|old| old.version() >= r.version()) {
            return false;
        }
        self.parts.insert(p, r);
        true
    }

    /// The sum of the partial versions: grows by at least one with every partial taken.
    pub fn version(&self) -> u64 {
        self.parts.values().map(PartialRecord::version).sum()
    }

    /// The combined row: the sum of the latest partials; `None` before any partial.
    pub fn combined(&self) -> Option<R::Combined> {
        let mut c = self.parts.values().next()?.empty_combined(self.parts.len());
        for r in self.parts.values() {
            r.add_to(&mut c);
        }
        Some(c)
    }
}

published_row! {
    /// A combined dashboard row. Fields in this order, the same as `tidemark query dashboard
    /// --format json` prints, so the two compare byte for byte.
    #[serde(deny_unknown_fields)]
    pub struct DashboardCombined {
        pub window_start: String,
        pub window_end: String,
        pub store: String,
        pub currency: String,
        /// Source partitions with a partial of this key.
        pub partitions: usize,
        ..figures(units: Units),
        pub version: u64,
        pub as_of: String,
    }
}

published_row! {
    /// A combined provisional finance row.
    #[serde(deny_unknown_fields)]
    pub struct FinanceCombined {
        pub day: String,
        pub store: String,
        pub currency: String,
        pub partitions: usize,
        ..figures(events: Events),
        pub version: u64,
        pub as_of: String,
    }
}

/// RFC 3339 UTC strings with fixed precision compare in time order.
fn later(a: &str, b: &str) -> String {
    if b > a { b } else { a }.to_string()
}

/// The window whose expiry ends a combined key: the partial's own window for the dashboard,
/// the day's last window for provisional finance (the orders tasks drop a day's row at that
/// point, [`crate::provisional`]). `None` when the partial's time does not parse.
pub fn expiry_start_ms(input: &CombineInput, tz: Tz, window_size_ms: i64) -> Option<i64> {
    match input {
        CombineInput::Dashboard(r) => {
            chrono::DateTime::parse_from_rfc3339(&r.window_start).ok().map(|t| t.timestamp_millis())
        }
        CombineInput::Finance(r) => {
            let day: NaiveDate = r.day.parse().ok()?;
            let (_, end) = day_bounds_ms(day, tz)?;
            Some(window_start(end - 1, window_size_ms))
        }
        CombineInput::Mark(_) => None,
    }
}

/// What a combine task knows of the orders partitions' progress: the greatest maximum event
/// time each has marked.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    pub max_event_ms: BTreeMap<i32, i64>,
}

impl Progress {
    /// Takes a mark; a lower one (a replay after a crash upstream) changes nothing.
    pub fn observe(&mut self, m: Mark) -> bool {
        let slot = self.max_event_ms.entry(m.source_partition).or_insert(i64::MIN);
        if m.max_event_ms > *slot {
            *slot = m.max_event_ms;
            return true;
        }
        false
    }

    /// The lowest watermark over the orders partitions `0..upstreams`; `None` until each
    /// has marked one. A window expired at this watermark is expired in every partition.
    pub fn watermark(&self, upstreams: i32, allowed_lateness_ms: i64) -> Option<i64> {
        (0..upstreams)
            .map(|p| self.max_event_ms.get(&p).copied())
            .collect::<Option<Vec<i64>>>()?
            .into_iter()
            .min()
            .map(|m| m - allowed_lateness_ms)
    }

    /// Whether a key whose expiry window starts at `start_ms` can no longer change.
    pub fn expired(&self, upstreams: i32, policy: &WindowPolicy, start_ms: i64) -> bool {
        policy.expired(start_ms, self.watermark(upstreams, policy.allowed_lateness_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dash(p: i32, orders: u64, gross: &str, version: u64, as_of: &str) -> DashboardRecord {
        DashboardRecord {
            window_start: "2026-11-28T14:59:00.000Z".into(),
            window_end: "2026-11-28T15:00:00.000Z".into(),
            store: "tokyo-01".into(),
            currency: "JPY".into(),
            source_partition: p,
            figures: Figures::new(orders, orders * 2, gross.parse().expect("decimal"), Decimal::ZERO, Decimal::ZERO),
            net: gross.parse().expect("decimal"),
            version,
            as_of: as_of.into(),
        }
    }

    fn policy() -> WindowPolicy {
        WindowPolicy { size_ms: 60_000, allowed_lateness_ms: 0, grace_ms: 120_000, retention_ms: 420 * 60_000 }
    }

    #[test]
    fn the_combined_row_is_the_sum_of_the_latest_partial_of_each_source_partition() {
        let mut l = Latest::default();
        assert!(l.offer(dash(0, 1, "100", 1, "2026-11-28T14:59:01.000Z")));
        assert!(l.offer(dash(1, 2, "250", 2, "2026-11-28T14:59:03.000Z")));
        assert!(l.offer(dash(0, 3, "400", 4, "2026-11-28T14:59:02.000Z")), "a newer partial replaces p0's");
        let c = l.combined().expect("row");
        assert_eq!((c.partitions, c.figures.orders, c.figures.units(), c.version), (2, 5, 10, 6));
        assert_eq!((c.figures.gross.to_string(), c.net.to_string()), ("650".into(), "650".into()));
        assert_eq!(c.as_of, "2026-11-28T14:59:03.000Z");
        assert_eq!(
            String::from_utf8(serde_json::to_vec(&c).expect("json")).expect("utf8"),
            r#"{"window_start":"2026-11-28T14:59:00.000Z","window_end":"2026-11-28T15:00:00.000Z","store":"tokyo-01","currency":"JPY","partitions":2,"orders":5,"units":10,"gross":"650","cancelled":"0","refunded":"0","net":"650","version":6,"as_of":"2026-11-28T14:59:03.000Z"}"#
        );
    }

    #[test]
    fn a_replayed_or_duplicated_partial_changes_nothing() {
        let mut l = Latest::default();
        assert!(l.offer(dash(0, 3, "400", 4, "2026-11-28T14:59:02.000Z")));
        let before = l.clone();
        assert!(!l.offer(dash(0, 3, "400", 4, "2026-11-28T14:59:02.000Z")), "the same version again");
        assert!(!l.offer(dash(0, 1, "100", 1, "2026-11-28T14:59:01.000Z")), "an older version (a replay)");
        assert_eq!(l, before);
        assert_eq!(l.version(), 4);
    }

    #[test]
    fn the_final_row_does_not_depend_on_the_order_partials_arrive_in() {
        let a = [dash(0, 1, "100", 1, "t1"), dash(1, 1, "5", 1, "t2"), dash(0, 2, "300", 3, "t3")];
        let mut forward = Latest::default();
        a.iter().cloned().for_each(|r| {
            forward.offer(r);
        });
        let mut shuffled = Latest::default();
        for i in [2, 1, 0, 0, 2] {
            shuffled.offer(a[i].clone());
        }
        assert_eq!(forward.combined(), shuffled.combined());
    }

    #[test]
    fn internal_records_wrap_the_partial_bytes_and_parse_back() {
        let r = dash(3, 1, "100", 1, "2026-11-28T14:59:01.000Z");
        let bytes = CombineInput::wrap("dashboard", &serde_json::to_vec(&r).expect("json"));
        assert_eq!(serde_json::from_slice::<CombineInput>(&bytes).expect("parse"), CombineInput::Dashboard(r));
        let m = CombineInput::mark_bytes(2, 99);
        assert_eq!(String::from_utf8(m.clone()).expect("utf8"), r#"{"mark":{"source_partition":2,"max_event_ms":99}}"#);
        assert_eq!(
            serde_json::from_slice::<CombineInput>(&m).expect("parse"),
            CombineInput::Mark(Mark { source_partition: 2, max_event_ms: 99 })
        );
        assert_eq!(combined_key(b"2026-11-28T14:59:00.000Z|tokyo-01|JPY|p3"), b"2026-11-28T14:59:00.000Z|tokyo-01|JPY");
        assert_eq!(dash(3, 1, "1", 1, "").combined_key(), "2026-11-28T14:59:00.000Z|tokyo-01|JPY");
    }

    #[test]
    fn a_key_expires_only_once_every_orders_partition_has_passed_its_retention() {
        let start = chrono::DateTime::parse_from_rfc3339("2026-11-28T14:59:00Z").expect("t").timestamp_millis();
        let past = start + 60_000 + 420 * 60_000;
        let mut p = Progress::default();
        assert!(p.observe(Mark { source_partition: 0, max_event_ms: past }));
        assert!(!p.expired(2, &policy(), start), "partition 1 has not marked yet");
        assert!(p.observe(Mark { source_partition: 1, max_event_ms: past - 1 }));
        assert!(!p.expired(2, &policy(), start), "partition 1 is one ms short");
        assert!(!p.observe(Mark { source_partition: 1, max_event_ms: 0 }), "a lower mark (a replay) is ignored");
        assert!(p.observe(Mark { source_partition: 1, max_event_ms: past }));
        assert!(p.expired(2, &policy(), start));
    }

    #[test]
    fn a_finance_key_expires_with_its_days_last_window_in_the_zone() {
        let r = ProvisionalRecord {
            day: "2026-11-29".into(),
            store: "s".into(),
            currency: "JPY".into(),
            source_partition: 0,
            figures: Figures::new(1, 1, Decimal::ONE, Decimal::ZERO, Decimal::ZERO),
            net: Decimal::ONE,
            version: 1,
            as_of: String::new(),
        };
        let start = expiry_start_ms(&CombineInput::Finance(r), chrono_tz::Asia::Tokyo, 60_000).expect("start");
        // 2026-11-29 ends at 15:00 UTC in Tokyo; its last window starts at 14:59.
        let expected = chrono::DateTime::parse_from_rfc3339("2026-11-29T14:59:00Z").expect("t").timestamp_millis();
        assert_eq!(start, expected);
    }
}
