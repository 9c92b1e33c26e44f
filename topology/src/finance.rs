//! Finance definitions (SPEC §2 "Finance"): per business day, store and currency, the
//! gross, cancelled, refunded and net amounts and the order count of deduplicated events.
//!
//! - The *business day* of an event is the calendar date of its event time in the
//!   topology's `finance.time_zone` ([`business_day`]); a cancellation or refund counts on
//!   its own day, not on the day of the order it concerns.
//! - `gross` sums the lines of placed events, `cancelled` the lines of cancelled events,
//!   `refunded` the refund amounts; `net = gross − cancelled − refunded`; `orders` counts
//!   placed events. Shipped events carry no money and touch no row. What one event adds is
//!   [`Figures::apply`], shared with the stream's dashboard and provisional rows.
//! - Money is exact `Decimal` at the currency's scale ([`Currency::canonical`]); amounts in
//!   different currencies are never added.
//! - Records are normalised by [`crate::normalize::normalize_order_with`], the layer every mode shares, and
//!   deduplicated by `event_id` with the stream's rule ([`Dedup`]).
//!
//! [`DayClose`] folds the records of a range into rows and accounts for every record:
//! each ends as exactly one [`Outcome`]. [`validate`] checks rows against that accounting.
//! A change to anything here that changes a result must bump [`DEFINITION_VERSION`]: run ids
//! and published closes name the version they were computed with.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use chrono::{DateTime, NaiveDate, TimeDelta, TimeZone};
use chrono_tz::Tz;
use compact_str::CompactString;

use crate::currency::Currency;
use crate::event::{CanonicalEvent, EventKind};
use crate::figures::{published_row, Events, Figures};
use crate::normalize::{normalize_order_with, NormalizeLimits};
use crate::reject::{RejectReason, Rejection};

/// Version of the definitions in this module, recorded in every close and adjustment.
pub const DEFINITION_VERSION: u32 = 1;

/// The calendar date of `event_time_ms` in `tz`; `None` outside chrono's range.
pub fn business_day(event_time_ms: i64, tz: Tz) -> Option<NaiveDate> {
    DateTime::from_timestamp_millis(event_time_ms).map(|t| t.with_timezone(&tz).date_naive())
}

/// The first instant (UTC epoch ms) whose date in `tz` is `day`.
///
/// A DST gap can swallow local midnight (America/Sao_Paulo skipped 2018-11-04T00:00), so the
/// day then starts at the first local time that exists. Only default input ranges are
/// derived from day bounds; which day an event belongs to is always [`business_day`].
pub fn day_start_ms(day: NaiveDate, tz: Tz) -> Option<i64> {
    let midnight = day.and_hms_opt(0, 0, 0)?;
    (0..24 * 60)
        .filter_map(|m| midnight.checked_add_signed(TimeDelta::try_minutes(m)?))
        .find_map(|local| tz.from_local_datetime(&local).earliest())
        .map(|t| t.timestamp_millis())
}

/// `[start, end)` of `day` in `tz`, as UTC epoch ms.
pub fn day_bounds_ms(day: NaiveDate, tz: Tz) -> Option<(i64, i64)> {
    Some((day_start_ms(day, tz)?, day_start_ms(day.succ_opt()?, tz)?))
}

/// One row of a business day.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FinanceKey {
    pub store: CompactString,
    pub currency: Currency,
}

impl FinanceKey {
    /// The row an event contributes to; `None` when it carries no money (shipped).
    pub fn of(event: &CanonicalEvent) -> Option<FinanceKey> {
        if event.kind == EventKind::Shipped {
            return None;
        }
        Some(FinanceKey { store: event.store.clone(), currency: event.currency? })
    }
}

/// Running totals of one row (persisted by the stream's provisional rows).
pub type FinanceAgg = Figures<Events>;

/// What one deduplicated event adds to the finance rows, the one definition every mode
/// uses: its business day in `tz`, its row (store and currency) and its amounts. `None`
/// when it carries no money (shipped) or its time has no calendar date.
pub fn contribution(event: &CanonicalEvent, tz: Tz) -> Option<(NaiveDate, FinanceKey, FinanceAgg)> {
    let key = FinanceKey::of(event)?;
    let day = business_day(event.event_time_ms, tz)?;
    Some((day, key, FinanceAgg::of(event)?))
}

published_row! {
    /// A published row: the value of a `finance_close` record. Field order is fixed and money is
    /// a decimal string at the currency's scale, so equal inputs give byte-identical JSON.
    #[serde(deny_unknown_fields)]
    pub struct FinanceRow {
        /// `YYYY-MM-DD` in the finance time zone.
        pub day: String,
        pub store: String,
        pub currency: String,
        ..figures(events: Events),
    }
}

impl FinanceRow {
    pub fn new(day: NaiveDate, key: &FinanceKey, agg: &FinanceAgg) -> FinanceRow {
        let c = key.currency;
        FinanceRow {
            day: day.to_string(),
            store: key.store.to_string(),
            currency: c.code().to_string(),
            figures: agg.canonical(c),
            net: c.canonical(agg.net()),
        }
    }

    /// The canonical bytes: compact JSON in field order.
    pub fn to_bytes(&self) -> Vec<u8> {
        // A struct of strings, integers and decimals always serialises.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// `<prefix>|<store>|<currency>`: the record key under a run's prefix.
    pub fn key(&self, prefix: &str) -> String {
        format!("{prefix}|{}|{}", self.store, self.currency)
    }
}

/// The dedup rule, the one definition the stream and every batch apply: an `event_id` seen
/// again within `retention_ms` of the append time it was counted at (`first_seen`) has no
/// effect; later it counts again, from the new append time.
pub fn is_duplicate(first_seen: Option<i64>, append_ms: i64, retention_ms: i64) -> bool {
    first_seen.is_some_and(|t| append_ms - t <= retention_ms)
}

/// One dedup scope (the stream deduplicates per source partition), as a fold asks it.
pub trait DedupScope {
    /// True when the event counts; records it as counted at `append_ms`.
    fn first_time(&mut self, event_id: &str, append_ms: i64) -> bool;
}

/// [`is_duplicate`] over every event id in memory: the reference scope of tests. Closes
/// and shadow replays use a disk-backed scope, which stays within bounded memory.
#[derive(Debug, Default)]
pub struct Dedup {
    retention_ms: i64,
    counted_at: HashMap<String, i64>,
}

impl Dedup {
    pub fn new(retention_ms: i64) -> Dedup {
        Dedup { retention_ms, counted_at: HashMap::new() }
    }
}

impl DedupScope for Dedup {
    fn first_time(&mut self, event_id: &str, append_ms: i64) -> bool {
        if is_duplicate(self.counted_at.get(event_id).copied(), append_ms, self.retention_ms) {
            return false;
        }
        self.counted_at.insert(event_id.to_string(), append_ms);
        true
    }
}

/// What became of one source record in a close.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Rejected by normalisation; the stream dead-letters it.
    DeadLetter(RejectReason),
    /// An `event_id` already counted.
    Duplicate,
    /// A valid event of another business day.
    OutOfDay,
    /// A valid event of the day that carries no money (shipped).
    NoMoney,
    /// Added to a row.
    Applied,
}

/// How every record of a range ended. `records` equals the sum of the other counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub records: u64,
    pub applied: u64,
    pub no_money: u64,
    pub duplicates: u64,
    pub out_of_day: u64,
    pub dead_letters: BTreeMap<RejectReason, u64>,
}

impl Tally {
    fn count(&mut self, outcome: Outcome) {
        self.records += 1;
        match outcome {
            Outcome::DeadLetter(r) => *self.dead_letters.entry(r).or_default() += 1,
            Outcome::Duplicate => self.duplicates += 1,
            Outcome::OutOfDay => self.out_of_day += 1,
            Outcome::NoMoney => self.no_money += 1,
            Outcome::Applied => self.applied += 1,
        }
    }

    pub fn dead_letter_total(&self) -> u64 {
        self.dead_letters.values().sum()
    }
}

/// The fold of one business day over source records.
///
/// The caller feeds each source partition's records in offset order with that partition's
/// [`Dedup`], as the stream does; the rows do not depend on the order of partitions.
pub struct DayClose {
    day: NaiveDate,
    tz: Tz,
    limits: NormalizeLimits,
    aggs: BTreeMap<FinanceKey, FinanceAgg>,
    tally: Tally,
}

impl DayClose {
    pub fn new(day: NaiveDate, tz: Tz) -> DayClose {
        DayClose { day, tz, limits: NormalizeLimits::default(), aggs: BTreeMap::new(), tally: Tally::default() }
    }

    /// The topology's normalisation limits, so the close accepts exactly what the stream does.
    pub fn with_limits(mut self, limits: NormalizeLimits) -> DayClose {
        self.limits = limits;
        self
    }

    pub fn day(&self) -> NaiveDate {
        self.day
    }

    /// Marks the event ids of a record as seen without counting the record: the records
    /// before an adjustment's range, which the original close already counted.
    pub fn prime(&self, dedup: &mut dyn DedupScope, value: &[u8], append_ms: i64) {
        self.prime_normalized(dedup, &self.normalize(value, append_ms), append_ms);
    }

    /// [`DayClose::prime`] of a record already normalised by [`DayClose::normalize`].
    pub fn prime_normalized(
        &self,
        dedup: &mut dyn DedupScope,
        event: &Result<CanonicalEvent, Rejection>,
        append_ms: i64,
    ) {
        if let Ok(event) = event {
            dedup.first_time(&event.event_id, append_ms);
        }
    }

    /// The record as the close sees it: normalised with the topology's limits.
    pub fn normalize(&self, value: &[u8], append_ms: i64) -> Result<CanonicalEvent, Rejection> {
        normalize_order_with(Some(value), append_ms, self.limits)
    }

    /// Folds one source record (value bytes and broker append time).
    pub fn observe(&mut self, dedup: &mut dyn DedupScope, value: &[u8], append_ms: i64) -> Outcome {
        let event = self.normalize(value, append_ms);
        self.observe_normalized(dedup, &event, append_ms)
    }

    /// [`DayClose::observe`] of a record already normalised by [`DayClose::normalize`], for
    /// callers that look a chunk's event ids up at once before folding it.
    pub fn observe_normalized(
        &mut self,
        dedup: &mut dyn DedupScope,
        event: &Result<CanonicalEvent, Rejection>,
        append_ms: i64,
    ) -> Outcome {
        let outcome = self.classify(dedup, event, append_ms);
        self.tally.count(outcome);
        outcome
    }

    fn classify(
        &mut self,
        dedup: &mut dyn DedupScope,
        event: &Result<CanonicalEvent, Rejection>,
        append_ms: i64,
    ) -> Outcome {
        let event = match event {
            Ok(event) => event,
            Err(rejection) => return Outcome::DeadLetter(rejection.reason),
        };
        if !dedup.first_time(&event.event_id, append_ms) {
            return Outcome::Duplicate;
        }
        match contribution(event, self.tz) {
            Some((day, key, agg)) if day == self.day => {
                self.aggs.entry(key).or_default().add(&agg);
                Outcome::Applied
            }
            None if business_day(event.event_time_ms, self.tz) == Some(self.day) => Outcome::NoMoney,
            _ => Outcome::OutOfDay,
        }
    }

    pub fn tally(&self) -> &Tally {
        &self.tally
    }

    /// The rows of the day, one per store and currency that had an applied event.
    pub fn rows(&self) -> Vec<FinanceRow> {
        self.aggs.iter().map(|(k, a)| FinanceRow::new(self.day, k, a)).collect()
    }
}

/// Checks rows (as a reader will parse them) against the accounting of the range they came
/// from. Returns every problem found; empty means valid.
///
/// 1. Every record ended as exactly one outcome: `records = applied + no_money + duplicates
///    + out_of_day + dead letters`.
/// 2. The rows hold exactly the applied events: `Σ events = applied`.
/// 3. Per row: the day is `day`; the currency is known and every amount is at its scale;
///    `gross`, `cancelled`, `refunded` are not negative; `net = gross − cancelled − refunded`;
///    `1 ≤ events` and `orders ≤ events`.
/// 4. No two rows share a store and currency.
/// 5. At least one row, unless `allow_empty`.
pub fn validate(day: NaiveDate, rows: &[FinanceRow], tally: &Tally, allow_empty: bool) -> Vec<String> {
    let mut problems = Vec::new();
    let outcomes = tally.applied + tally.no_money + tally.duplicates + tally.out_of_day + tally.dead_letter_total();
    if outcomes != tally.records {
        problems.push(format!("{} records read but {outcomes} accounted for", tally.records));
    }
    let events: u64 = rows.iter().map(|r| r.figures.events()).sum();
    if events != tally.applied {
        problems.push(format!("rows hold {events} events but {} were applied", tally.applied));
    }
    let day = day.to_string();
    let mut keys = BTreeSet::new();
    for r in rows {
        let at = format!("row {}|{}", r.store, r.currency);
        if r.day != day {
            problems.push(format!("{at}: day {} is not {day}", r.day));
        }
        if !keys.insert((r.store.as_str(), r.currency.as_str())) {
            problems.push(format!("{at}: appears twice"));
        }
        let f = &r.figures;
        match Currency::from_code(&r.currency) {
            None => problems.push(format!("{at}: unknown currency")),
            Some(c) => {
                for (name, v) in
                    [("gross", f.gross), ("cancelled", f.cancelled), ("refunded", f.refunded), ("net", r.net)]
                {
                    if v.scale() != c.exponent() {
                        problems.push(format!("{at}: {name} {v} is not at {}'s scale {}", c.code(), c.exponent()));
                    }
                }
            }
        }
        for (name, v) in [("gross", f.gross), ("cancelled", f.cancelled), ("refunded", f.refunded)] {
            if v.is_sign_negative() && !v.is_zero() {
                problems.push(format!("{at}: {name} {v} is negative"));
            }
        }
        if r.net != f.net() {
            problems.push(format!(
                "{at}: net {} ≠ gross {} − cancelled {} − refunded {}",
                r.net, f.gross, f.cancelled, f.refunded
            ));
        }
        if f.events() == 0 {
            problems.push(format!("{at}: no events"));
        }
        if f.orders > f.events() {
            problems.push(format!("{at}: {} orders from {} events", f.orders, f.events()));
        }
    }
    if rows.is_empty() && !allow_empty {
        problems
            .push("no rows: nothing of this day in the range (pass --allow-empty to publish an empty close)".into());
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use rust_decimal::Decimal;
    use std::str::FromStr;

    const DAY_MS: i64 = 86_400_000;

    fn ms(rfc3339: &str) -> i64 {
        DateTime::parse_from_rfc3339(rfc3339).expect("time").timestamp_millis()
    }

    fn date(s: &str) -> NaiveDate {
        NaiveDate::from_str(s).expect("date")
    }

    fn v1(id: &str, kind: &str, time: &str, body: &str) -> Vec<u8> {
        format!(
            r#"{{"schema_version":1,"event_id":"{id}","order_id":"o-{id}","event_type":"{kind}","event_time":"{time}","store":"tokyo-01","currency":"JPY",{body}}}"#
        )
        .into_bytes()
    }

    fn placed(id: &str, time: &str, price: &str) -> Vec<u8> {
        v1(id, "order_placed", time, &format!(r#""lines":[{{"sku":"SKU-1","qty":2,"unit_price":"{price}"}}]"#))
    }

    fn tokyo() -> Tz {
        chrono_tz::Asia::Tokyo
    }

    #[test]
    fn a_tokyo_business_day_ends_at_fifteen_hundred_utc() {
        assert_eq!(business_day(ms("2026-11-28T14:59:59.999Z"), tokyo()), Some(date("2026-11-28")));
        assert_eq!(business_day(ms("2026-11-28T15:00:00Z"), tokyo()), Some(date("2026-11-29")));
        assert_eq!(business_day(ms("2026-11-27T15:00:00Z"), tokyo()), Some(date("2026-11-28")));
        let (start, end) = day_bounds_ms(date("2026-11-28"), tokyo()).expect("bounds");
        assert_eq!((start, end), (ms("2026-11-27T15:00:00Z"), ms("2026-11-28T15:00:00Z")));
    }

    #[test]
    fn a_day_whose_midnight_falls_in_a_dst_gap_starts_at_the_first_existing_local_time() {
        let tz = chrono_tz::America::Sao_Paulo;
        let (start, end) = day_bounds_ms(date("2018-11-04"), tz).expect("bounds");
        // 00:00 −03:00 did not exist; 01:00 −02:00 is 03:00Z. The day has 23 hours.
        assert_eq!(start, ms("2018-11-04T03:00:00Z"));
        assert_eq!(end - start, DAY_MS - 3_600_000);
        assert_eq!(business_day(start - 1, tz), Some(date("2018-11-03")));
        assert_eq!(business_day(start, tz), Some(date("2018-11-04")));
    }

    #[test]
    fn events_at_fourteen_fifty_nine_and_fifteen_hundred_utc_close_on_different_tokyo_days() {
        let append = ms("2026-11-28T16:00:00Z");
        let mut close = DayClose::new(date("2026-11-28"), tokyo());
        let mut dedup = Dedup::new(7 * DAY_MS);
        let before = placed("a", "2026-11-28T14:59:59Z", "100");
        let after = placed("b", "2026-11-28T15:00:00Z", "100");
        let same_instant_in_jst = placed("c", "2026-11-28T23:59:59+09:00", "1");
        assert_eq!(close.observe(&mut dedup, &before, append), Outcome::Applied);
        assert_eq!(close.observe(&mut dedup, &after, append), Outcome::OutOfDay);
        assert_eq!(close.observe(&mut dedup, &same_instant_in_jst, append), Outcome::Applied);
        let rows = close.rows();
        assert_eq!(rows.len(), 1);
        assert_eq!((rows[0].figures.orders, rows[0].figures.gross), (2, Decimal::from(202)));
    }

    #[test]
    fn net_is_gross_minus_cancelled_minus_refunded_and_duplicates_count_once() {
        let append = ms("2026-11-28T10:00:00Z");
        let t = "2026-11-28T09:00:00Z";
        let mut close = DayClose::new(date("2026-11-28"), tokyo());
        let mut dedup = Dedup::new(7 * DAY_MS);
        let records = [
            placed("p1", t, "1980"),
            placed("p1", t, "1980"),
            placed("p2", t, "500"),
            v1("c1", "order_cancelled", t, r#""lines":[{"sku":"SKU-1","qty":1,"unit_price":"500"}]"#),
            v1("r1", "order_refunded", t, r#""amount":"100""#),
            v1("s1", "order_shipped", t, r#""lines":[{"sku":"SKU-1","qty":2}]"#),
            b"not json".to_vec(),
        ];
        for r in &records {
            close.observe(&mut dedup, r, append);
        }
        let rows = close.rows();
        assert_eq!(
            String::from_utf8(rows[0].to_bytes()).expect("utf8"),
            r#"{"day":"2026-11-28","store":"tokyo-01","currency":"JPY","orders":2,"events":4,"gross":"4960","cancelled":"500","refunded":"100","net":"4360"}"#
        );
        assert_eq!(rows[0].key("r1|2026-11-28"), "r1|2026-11-28|tokyo-01|JPY");
        let tally = close.tally();
        assert_eq!((tally.records, tally.applied, tally.duplicates, tally.no_money), (7, 4, 1, 1));
        assert_eq!(tally.dead_letters.get(&RejectReason::NotJson), Some(&1));
        assert!(validate(close.day(), &rows, tally, false).is_empty());
    }

    #[test]
    fn money_is_kept_at_the_currency_scale() {
        let append = ms("2026-11-28T10:00:00Z");
        let usd = br#"{"schema_version":2,"event_id":"u1","order_id":"o-u1","type":"ORDER_PLACED","occurred_at_ms":1795856400000,"store_id":"nyc-01","items":[{"sku":"S","quantity":3,"price":{"amount_minor":1990,"currency":"USD"}}]}"#;
        let mut close = DayClose::new(date("2026-11-28"), tokyo());
        close.observe(&mut Dedup::new(DAY_MS), usd, append);
        let row = &close.rows()[0];
        assert_eq!(
            (row.currency.as_str(), row.figures.gross.to_string(), row.net.to_string()),
            ("USD", "59.70".into(), "59.70".into())
        );
    }

    #[test]
    fn an_event_contributes_its_amounts_to_the_row_of_its_business_day_and_shipped_to_none() {
        let event = |bytes: &[u8]| {
            normalize_order_with(Some(bytes), ms("2026-11-29T00:00:00Z"), NormalizeLimits::default()).expect("valid")
        };
        let cancelled =
            v1("c1", "order_cancelled", "2026-11-28T15:00:00Z", r#""lines":[{"sku":"S","qty":2,"unit_price":"7"}]"#);
        let (day, key, agg) = contribution(&event(&cancelled), tokyo()).expect("money");
        assert_eq!((day, key.store.as_str(), key.currency.code()), (date("2026-11-29"), "tokyo-01", "JPY"));
        assert_eq!((agg.orders, agg.events(), agg.gross, agg.cancelled), (0, 1, Decimal::ZERO, Decimal::from(14)));
        let shipped = v1("s1", "order_shipped", "2026-11-28T09:00:00Z", r#""lines":[{"sku":"S","qty":2}]"#);
        assert_eq!(contribution(&event(&shipped), tokyo()), None);
    }

    #[test]
    fn an_event_id_counts_again_only_after_the_dedup_retention() {
        let mut dedup = Dedup::new(1_000);
        assert!(dedup.first_time("e", 0));
        assert!(!dedup.first_time("e", 1_000));
        assert!(dedup.first_time("e", 1_001));
        assert!(!dedup.first_time("e", 2_001));
    }

    #[test]
    fn priming_marks_ids_seen_without_counting_them() {
        let append = ms("2026-11-28T10:00:00Z");
        let record = placed("p1", "2026-11-28T09:00:00Z", "10");
        let mut dedup = Dedup::new(DAY_MS);
        let mut close = DayClose::new(date("2026-11-28"), tokyo());
        close.prime(&mut dedup, &record, append);
        assert_eq!(close.observe(&mut dedup, &record, append + 1), Outcome::Duplicate);
        assert!(close.rows().is_empty());
        assert_eq!(close.tally().records, 1);
    }

    #[test]
    fn validation_reports_every_broken_row_and_an_unbalanced_accounting() {
        let row = FinanceRow {
            day: "2026-11-28".into(),
            store: "s".into(),
            currency: "USD".into(),
            figures: Figures::new(3, 2, Decimal::new(1000, 2), Decimal::new(-100, 2), Decimal::new(0, 2)),
            net: Decimal::new(1000, 2),
        };
        let mut other_day = row.clone();
        other_day.day = "2026-11-29".into();
        other_day.store = "t".into();
        other_day.figures.gross = Decimal::new(10, 0);
        other_day.net = Decimal::new(10, 0);
        other_day.figures.cancelled = Decimal::ZERO;
        let tally = Tally { records: 5, applied: 4, ..Tally::default() };
        let problems = validate(date("2026-11-28"), &[row.clone(), row, other_day], &tally, false);
        let text = problems.join("\n");
        for needle in [
            "5 records read but 4 accounted for",
            "rows hold 6 events but 4 were applied",
            "cancelled -1.00 is negative",
            "net 10.00 ≠ gross",
            "appears twice",
            "3 orders from 2 events",
            "day 2026-11-29 is not 2026-11-28",
            "gross 10 is not at USD's scale 2",
        ] {
            assert!(text.contains(needle), "missing `{needle}` in:\n{text}");
        }
    }

    #[test]
    fn an_empty_close_is_invalid_unless_allowed() {
        let tally = Tally::default();
        assert_eq!(validate(date("2026-11-28"), &[], &tally, false).len(), 1);
        assert!(validate(date("2026-11-28"), &[], &tally, true).is_empty());
    }
}
