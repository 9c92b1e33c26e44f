//! The canonical order event every mode works on, and the inventory snapshot.
//!
//! Both schema versions normalise into these types (see [`crate::normalize`]), so windows,
//! rules, dashboard and finance never see which encoding an event arrived in.

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use crate::currency::Currency;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    Placed,
    Cancelled,
    /// Carries lines but no money and no inventory effect.
    Shipped,
    /// Carries an amount and no lines.
    Refunded,
}

impl EventKind {
    /// The serialised name (`"placed"`, ...), for metric labels and keys.
    pub fn as_str(&self) -> &'static str {
        match self {
            EventKind::Placed => "placed",
            EventKind::Cancelled => "cancelled",
            EventKind::Shipped => "shipped",
            EventKind::Refunded => "refunded",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Line {
    pub sku: String,
    /// Always ≥ 1.
    pub qty: u32,
    /// Major units at the event currency's canonical scale; `None` only on shipped lines.
    pub unit_price: Option<Decimal>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CanonicalEvent {
    pub event_id: String,
    pub order_id: String,
    pub kind: EventKind,
    /// UTC epoch milliseconds; sub-millisecond precision is truncated toward −∞.
    pub event_time_ms: i64,
    pub store: String,
    /// `None` only for a shipped event that carries no money.
    pub currency: Option<Currency>,
    /// Sales channel; only schema v2 carries it.
    pub channel: Option<String>,
    /// Empty for refunded events.
    pub lines: Vec<Line>,
    /// `Some` only for refunded events, at canonical scale.
    pub refund_amount: Option<Decimal>,
    /// The source encoding, kept for diagnostics only: no result may depend on it.
    pub schema_version: u8,
}

impl CanonicalEvent {
    /// Sum of line quantities.
    pub fn units(&self) -> u64 {
        self.lines.iter().map(|l| u64::from(l.qty)).sum()
    }

    /// Sum of `qty × unit_price` at the currency's canonical scale; zero when nothing is
    /// priced.
    ///
    /// Normalisation bounds every event's total (see [`crate::normalize::MAX_EVENT_AMOUNT`]),
    /// so the saturating arithmetic only matters for hand-built events and keeps this
    /// infallible and panic-free.
    pub fn lines_amount(&self) -> Decimal {
        let Some(currency) = self.currency else {
            return Decimal::ZERO;
        };
        let sum = self
            .lines
            .iter()
            .filter_map(|l| l.unit_price.map(|p| p.saturating_mul(Decimal::from(l.qty))))
            .fold(Decimal::ZERO, Decimal::saturating_add);
        currency.canonical(sum)
    }
}

/// The warehouse's stock for one sku as of a point in time (the `inventory` table row).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InventorySnapshot {
    pub sku: String,
    /// Never negative.
    pub on_hand: i64,
    /// UTC epoch milliseconds.
    pub as_of_ms: i64,
}

/// A hand-built event of store `tokyo-01` in JPY, lines of `SKU-1` as `(qty, unit price)`.
#[cfg(test)]
pub(crate) fn test_event(kind: EventKind, t_ms: i64, lines: Vec<(u32, &str)>, refund: Option<&str>) -> CanonicalEvent {
    use std::str::FromStr;
    CanonicalEvent {
        event_id: "e".into(),
        order_id: "o".into(),
        kind,
        event_time_ms: t_ms,
        store: "tokyo-01".into(),
        currency: Currency::from_code("JPY"),
        channel: None,
        lines: lines
            .into_iter()
            .map(|(qty, p)| Line { sku: "SKU-1".into(), qty, unit_price: Decimal::from_str(p).ok() })
            .collect(),
        refund_amount: refund.and_then(|r| Decimal::from_str(r).ok()),
        schema_version: 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn dec(s: &str) -> Decimal {
        Decimal::from_str(s).expect("decimal literal")
    }

    fn event(currency: &str, lines: Vec<Line>) -> CanonicalEvent {
        CanonicalEvent {
            event_id: "e-1".into(),
            order_id: "o-1".into(),
            kind: EventKind::Placed,
            event_time_ms: 0,
            store: "tokyo-01".into(),
            currency: Currency::from_code(currency),
            channel: None,
            lines,
            refund_amount: None,
            schema_version: 1,
        }
    }

    fn line(qty: u32, price: Option<&str>) -> Line {
        Line { sku: "SKU-1".into(), qty, unit_price: price.map(dec) }
    }

    #[test]
    fn units_sum_line_quantities() {
        let e = event("USD", vec![line(2, Some("1.00")), line(3, Some("2.00"))]);
        assert_eq!(e.units(), 5);
    }

    #[test]
    fn lines_amount_is_at_canonical_scale() {
        let e = event("USD", vec![line(2, Some("19.80")), line(1, Some("0.40"))]);
        assert_eq!(e.lines_amount().to_string(), "40.00");
        let jpy = event("JPY", vec![line(3, Some("1980"))]);
        assert_eq!(jpy.lines_amount().to_string(), "5940");
    }

    #[test]
    fn lines_amount_is_zero_when_nothing_is_priced() {
        let mut e = event("USD", vec![line(2, None)]);
        assert_eq!(e.lines_amount().to_string(), "0.00");
        e.currency = None;
        assert_eq!(e.lines_amount(), Decimal::ZERO);
    }

    #[test]
    fn lines_amount_saturates_instead_of_panicking() {
        let e = event("USD", vec![line(u32::MAX, Some("79228162514264337593543950.33"))]);
        assert_eq!(e.lines_amount(), Decimal::MAX);
    }

    #[test]
    fn serialises_money_as_strings_and_kind_in_snake_case() {
        let e = event("USD", vec![line(1, Some("19.80"))]);
        let json = serde_json::to_value(&e).expect("serialise");
        assert_eq!(json["kind"], "placed");
        assert_eq!(json["currency"], "USD");
        assert_eq!(json["lines"][0]["unit_price"], "19.80");
        let back: CanonicalEvent = serde_json::from_value(json).expect("deserialise");
        assert_eq!(back, e);
    }
}
