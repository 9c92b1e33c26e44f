//! The canonical order event every mode works on, and the inventory snapshot.
//!
//! Both schema versions normalise into these types (see [`crate::normalize`]), so windows,
//! rules, dashboard and finance never see which encoding an event arrived in.

use compact_str::CompactString;
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
    pub sku: CompactString,
    /// Always ≥ 1.
    pub qty: u32,
    /// Major units at the event currency's canonical scale; `None` only on shipped lines.
    pub unit_price: Option<Decimal>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CanonicalEvent {
    pub event_id: CompactString,
    pub order_id: CompactString,
    pub kind: EventKind,
    /// UTC epoch milliseconds; sub-millisecond precision is truncated toward −∞.
    pub event_time_ms: i64,
    pub store: CompactString,
    /// `None` only for a shipped event that carries no money.
    pub currency: Option<Currency>,
    /// Sales channel; only schema v2 carries it.
    pub channel: Option<CompactString>,
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
        currency.canonical(exact_lines_sum(&self.lines).unwrap_or_else(|| saturating_lines_sum(&self.lines)))
    }
}

/// The sum of `qty × unit_price` in integers, for lines whose prices share one scale (as
/// normalised ones do) and whose sum fits a `Decimal`: the same value as
/// [`saturating_lines_sum`] gives then (a sum of zeros may carry another scale, which the
/// currency's rescale removes), at a fraction of its cost (it runs for every event, twice).
/// `None` for anything else.
fn exact_lines_sum(lines: &[Line]) -> Option<Decimal> {
    let mut scale = None;
    let mut sum: i128 = 0;
    for line in lines {
        let Some(price) = line.unit_price else { continue };
        if *scale.get_or_insert(price.scale()) != price.scale() || price.is_sign_negative() {
            return None;
        }
        sum = sum.checked_add(price.mantissa().checked_mul(i128::from(line.qty))?)?;
    }
    match scale {
        None => Some(Decimal::ZERO),
        Some(scale) => Decimal::try_from_i128_with_scale(sum, scale).ok(),
    }
}

/// The sum of `qty × unit_price` in `Decimal` arithmetic, saturating.
fn saturating_lines_sum(lines: &[Line]) -> Decimal {
    lines
        .iter()
        .filter_map(|l| l.unit_price.map(|p| p.saturating_mul(Decimal::from(l.qty))))
        .fold(Decimal::ZERO, Decimal::saturating_add)
}

/// The warehouse's stock for one sku as of a point in time (the `inventory` table row).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InventorySnapshot {
    pub sku: CompactString,
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
    fn the_integer_sum_of_lines_equals_the_decimal_sum_at_every_canonical_scale() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let mut answered = 0;
        for _ in 0..20_000 {
            let scale = rng.gen_range(0..4u32);
            let lines: Vec<Line> = (0..rng.gen_range(0..6))
                .map(|_| {
                    let mantissa: i64 = match rng.gen_range(0..10) {
                        0 => 0,
                        1 => -rng.gen_range(1..1_000),
                        2 => rng.gen_range(0..i64::MAX),
                        _ => rng.gen_range(1..1_000_000),
                    };
                    let s = if rng.gen_range(0..10) == 0 { rng.gen_range(0..4) } else { scale };
                    let price = (rng.gen_range(0..8) != 0).then(|| Decimal::new(mantissa, s));
                    let qty = if rng.gen_range(0..10) == 0 { u32::MAX } else { rng.gen_range(1..50) };
                    Line { sku: "S".into(), qty, unit_price: price }
                })
                .collect();
            let slow = saturating_lines_sum(&lines);
            if let Some(fast) = exact_lines_sum(&lines) {
                answered += 1;
                assert_eq!(fast, slow, "{lines:?}");
                // What lines_amount returns: rescaled to the currency's exponent (a sum of
                // zeros may differ in scale before that: `0` against `0.000`).
                for exponent in 0..5 {
                    let (mut f, mut s) = (fast, slow);
                    f.rescale(exponent);
                    s.rescale(exponent);
                    assert_eq!(f.to_string(), s.to_string(), "{lines:?} at {exponent} fraction digits");
                }
            }
        }
        assert!(answered > 10_000, "the integer sum answered only {answered} of 20,000");
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
