//! Provisional finance in the stream (SPEC §2 "Finance (provisional)"): per business day,
//! store and currency, the same figures as the close ([`crate::finance`]), kept by each source
//! partition as a *partial* and written as versioned upserts to a compacted topic.
//!
//! - The rows apply the events the dashboard applies: deduplicated, valid, not beyond window
//!   retention. An event beyond retention goes to the late output and is counted only by the
//!   batch close; that is the one expected difference between the two (`tidemark shadow`
//!   names it).
//! - `version` is the number of events applied to the row and `as_of` the latest broker
//!   append time among them, both derived from data, so a replay yields the same records.
//! - A late event of a day already written revises that day's row: a new record with a
//!   higher version replaces it.
//! - A reader sums the partials of one day/store/currency over `source_partition`.

use chrono::NaiveDate;
use chrono_tz::Tz;
use compact_str::CompactString;
use serde::{Deserialize, Serialize};

use crate::currency::Currency;
use crate::dashboard::rfc3339_ms;
use crate::event::{CanonicalEvent, EventKind};
use crate::figures::{published_row, Events};
use crate::finance::{day_bounds_ms, FinanceAgg};

/// Identifies one provisional row within a partition; keys sort by day.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ProvKey {
    pub day: NaiveDate,
    pub store: CompactString,
    pub currency: Currency,
}

/// Running totals of one row in one partition (the persisted form): the close's own sums
/// ([`FinanceAgg`], so the two cannot drift apart) and the latest append time applied.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProvAgg {
    pub sums: FinanceAgg,
    pub as_of_ms: i64,
}

impl ProvAgg {
    /// Applies one deduplicated event of this row; shipped events change nothing.
    pub fn apply(&mut self, event: &CanonicalEvent, append_ms: i64) {
        if self.sums.apply(event) {
            self.as_of_ms = self.as_of_ms.max(append_ms);
        }
    }
}

/// Maps event times to business days, remembering the bounds of the last day it saw: events
/// of one partition mostly fall on the same day, so the time-zone conversion runs once per
/// day rather than once per event.
#[derive(Clone, Debug)]
pub struct DayCalendar {
    tz: Tz,
    last: Option<(i64, i64, NaiveDate)>,
}

impl DayCalendar {
    pub fn new(tz: Tz) -> DayCalendar {
        DayCalendar { tz, last: None }
    }

    /// The date of `event_time_ms` in the zone; `None` outside chrono's range.
    pub fn day_of(&mut self, event_time_ms: i64) -> Option<NaiveDate> {
        match self.last {
            Some((start, end, day)) if (start..end).contains(&event_time_ms) => Some(day),
            _ => {
                let day = crate::finance::business_day(event_time_ms, self.tz)?;
                let (start, end) = day_bounds_ms(day, self.tz)?;
                self.last = Some((start, end, day));
                Some(day)
            }
        }
    }

    /// The first instant after `day` (UTC ms).
    pub fn day_end_ms(&self, day: NaiveDate) -> Option<i64> {
        day_bounds_ms(day, self.tz).map(|(_, end)| end)
    }
}

/// The row an event contributes to, or `None` when it carries no money (shipped) or its time
/// has no calendar date.
pub fn key_for(event: &CanonicalEvent, calendar: &mut DayCalendar) -> Option<ProvKey> {
    if event.kind == EventKind::Shipped {
        return None;
    }
    let currency = event.currency?;
    let day = calendar.day_of(event.event_time_ms)?;
    Some(ProvKey { day, store: event.store.clone(), currency })
}

published_row! {
    /// The value of a provisional record. Field order is fixed and money is a decimal string at
    /// the currency's scale, so equal inputs give byte-identical JSON.
    #[serde(deny_unknown_fields)]
    pub struct ProvisionalRecord {
        pub day: String,
        pub store: String,
        pub currency: String,
        pub source_partition: i32,
        ..figures(events: Events),
        pub version: u64,
        pub as_of: String,
    }
}

impl ProvisionalRecord {
    pub fn new(key: &ProvKey, partition: i32, agg: &ProvAgg) -> ProvisionalRecord {
        let (c, sums) = (key.currency, &agg.sums);
        ProvisionalRecord {
            day: key.day.to_string(),
            store: key.store.to_string(),
            currency: c.code().to_string(),
            source_partition: partition,
            figures: sums.canonical(c),
            net: c.canonical(sums.net()),
            version: sums.events(),
            as_of: rfc3339_ms(agg.as_of_ms),
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        // A struct of strings, integers and decimals always serialises.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// Compacted-topic key: `day|store|currency|p<partition>`.
pub fn record_key(key: &ProvKey, partition: i32) -> String {
    format!("{}|{}|{}|p{}", key.day, key.store, key.currency.code(), partition)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::test_event;
    use rust_decimal::Decimal;

    fn ev(kind: EventKind, t: &str, lines: Vec<(u32, &str)>, refund: Option<&str>) -> CanonicalEvent {
        let t_ms = chrono::DateTime::parse_from_rfc3339(t).expect("time").timestamp_millis();
        test_event(kind, t_ms, lines, refund)
    }

    #[test]
    fn the_business_day_is_the_date_in_the_configured_zone_not_in_utc() {
        let mut cal = DayCalendar::new(chrono_tz::Asia::Tokyo);
        // 15:30 UTC on the 28th is 00:30 on the 29th in Tokyo.
        let late_evening = ev(EventKind::Placed, "2026-11-28T15:30:00Z", vec![(1, "100")], None);
        assert_eq!(key_for(&late_evening, &mut cal).map(|k| k.day.to_string()), Some("2026-11-29".into()));
        let before = ev(EventKind::Placed, "2026-11-28T14:59:59.999Z", vec![(1, "100")], None);
        assert_eq!(key_for(&before, &mut cal).map(|k| k.day.to_string()), Some("2026-11-28".into()));
        let day = NaiveDate::from_ymd_opt(2026, 11, 28).expect("date");
        assert_eq!(cal.day_end_ms(day), Some(before.event_time_ms + 1));
    }

    #[test]
    fn net_is_gross_minus_cancelled_minus_refunded_and_version_counts_applied_events() {
        let mut agg = ProvAgg::default();
        agg.apply(&ev(EventKind::Placed, "2026-11-29T01:00:00Z", vec![(2, "1980"), (1, "500")], None), 10);
        agg.apply(&ev(EventKind::Cancelled, "2026-11-29T01:01:00Z", vec![(1, "500")], None), 30);
        agg.apply(&ev(EventKind::Refunded, "2026-11-29T01:02:00Z", vec![], Some("100")), 20);
        agg.apply(&ev(EventKind::Shipped, "2026-11-29T01:03:00Z", vec![(1, "500")], None), 40);
        assert_eq!((agg.sums.orders, agg.sums.events(), agg.as_of_ms), (1, 3, 30));
        assert_eq!(agg.sums.net(), Decimal::from(4460 - 500 - 100));
    }

    #[test]
    fn record_bytes_are_stable_and_keyed_by_day_store_currency_and_partition() {
        let mut cal = DayCalendar::new(chrono_tz::Asia::Tokyo);
        let e = ev(EventKind::Placed, "2026-11-29T01:00:00Z", vec![(2, "1980")], None);
        let key = key_for(&e, &mut cal).expect("key");
        let mut agg = ProvAgg::default();
        agg.apply(&e, 1_764_378_000_000);
        assert_eq!(record_key(&key, 2), "2026-11-29|tokyo-01|JPY|p2");
        assert_eq!(
            String::from_utf8(ProvisionalRecord::new(&key, 2, &agg).to_bytes()).expect("utf8"),
            r#"{"day":"2026-11-29","store":"tokyo-01","currency":"JPY","source_partition":2,"orders":1,"events":1,"gross":"3960","cancelled":"0","refunded":"0","net":"3960","version":1,"as_of":"2025-11-29T01:00:00.000Z"}"#
        );
    }
}
