//! Schema v1: RFC 3339 `event_time`, one top-level `currency`, prices as decimal strings in
//! major units.

use std::fmt;

use compact_str::CompactString;
use rust_decimal::Decimal;
use serde::Deserialize;

use super::checks::{bounded, currency, describe, quantity, rfc3339_ms, At, Checks};
use super::json::{nullable, required_list, Json, Obj};
use super::RawOrder;
use crate::currency::Currency;
use crate::event::{CanonicalEvent, EventKind, Line};
use crate::reject::{RejectReason, Rejection};

#[derive(Debug, Default, Deserialize)]
pub(super) struct RawLine<'a> {
    #[serde(borrow, default, deserialize_with = "nullable")]
    pub(super) sku: Option<Json<'a>>,
    #[serde(borrow, default, deserialize_with = "nullable")]
    pub(super) qty: Option<Json<'a>>,
    #[serde(borrow, default, deserialize_with = "nullable")]
    pub(super) unit_price: Option<Json<'a>>,
}

/// Steps 4 onwards of the check order; `checks` holds what the caller found so far.
pub(super) fn normalize(
    raw: RawOrder<'_>,
    event_id: CompactString,
    append_time_ms: i64,
    mut checks: Checks,
) -> Result<CanonicalEvent, Rejection> {
    let kind = match raw.event_type.as_ref().and_then(Json::as_str) {
        Some("order_placed") => EventKind::Placed,
        Some("order_cancelled") => EventKind::Cancelled,
        Some("order_shipped") => EventKind::Shipped,
        Some("order_refunded") => EventKind::Refunded,
        _ => {
            return Err(Rejection::new(
                RejectReason::UnknownEventType,
                describe(&"event_type", raw.event_type.as_ref()),
            ))
        }
    };
    let Some(event_time_ms) = raw.event_time.as_ref().and_then(Json::as_str).and_then(rfc3339_ms) else {
        return Err(Rejection::new(RejectReason::UnparsableTime, describe(&"event_time", raw.event_time.as_ref())));
    };

    let order_id = checks.required_identifier(raw.order_id, &"order_id");
    let store = checks.required_identifier(raw.store, &"store");

    let lines = match kind {
        EventKind::Refunded => Vec::new(),
        _ => checks.ok(required_list(raw.lines, "lines")).unwrap_or_default(),
    };
    // A shipment without prices carries no money, so it needs no currency; canonically its
    // currency is then `None` whether or not the field was sent, as in v2.
    let carries_money =
        kind != EventKind::Shipped || lines.iter().any(|l| matches!(l, Obj::Ok(RawLine { unit_price: Some(_), .. })));
    let declared = match (&raw.currency, carries_money) {
        (None, false) => None,
        (field, _) => checks.ok(currency(field.as_ref(), &"currency")),
    };
    let currency = declared.filter(|_| carries_money);

    let lines = lines
        .into_iter()
        .enumerate()
        .map(|(i, line)| self::line(&mut checks, kind, currency, i, line))
        .collect::<Vec<_>>();
    checks.lines_total(lines.iter().filter_map(|l| l.unit_price.map(|p| (l.qty, p))), "lines");

    let refund_amount = match (kind, raw.amount) {
        (EventKind::Refunded, None) => {
            checks.fail(Rejection::new(RejectReason::InvalidField, "amount missing"));
            None
        }
        (EventKind::Refunded, Some(amount)) => currency.and_then(|c| checks.ok(major(c, &amount, &"amount"))),
        _ => None,
    };

    checks.future(event_time_ms, append_time_ms);
    checks.finish(CanonicalEvent {
        event_id,
        order_id: order_id.unwrap_or_default(),
        kind,
        event_time_ms,
        store: store.unwrap_or_default(),
        currency,
        channel: None,
        lines,
        refund_amount,
        schema_version: 1,
    })
}

fn line(checks: &mut Checks, kind: EventKind, currency: Option<Currency>, i: usize, line: Obj<RawLine<'_>>) -> Line {
    let Obj::Ok(line) = line else {
        checks.fail(Rejection::new(RejectReason::InvalidField, format!("lines[{i}] is not an object")));
        return Line { sku: CompactString::default(), qty: 0, unit_price: None };
    };
    let sku = checks.required_identifier(line.sku, &At("lines", i, "sku"));
    let qty = checks.ok(quantity(line.qty.as_ref(), &At("lines", i, "qty")));
    let unit_price = match line.unit_price {
        None if kind != EventKind::Shipped => {
            checks.fail(Rejection::new(RejectReason::InvalidField, format!("lines[{i}].unit_price missing")));
            None
        }
        None => None,
        // Without a currency the price cannot be read; that failure is already recorded.
        Some(price) => currency.and_then(|c| checks.ok(major(c, &price, &At("lines", i, "unit_price")))),
    };
    Line { sku: sku.unwrap_or_default(), qty: qty.unwrap_or_default(), unit_price }
}

/// A v1 amount: a decimal string in major units.
fn major(currency: Currency, value: &Json<'_>, name: &dyn fmt::Display) -> Result<Decimal, Rejection> {
    let Json::Str(s) = value else {
        return Err(Rejection::new(RejectReason::InvalidAmount, format!("{name} = {value} is not a decimal string")));
    };
    let amount = currency.parse_major(s).ok_or_else(|| {
        Rejection::new(
            RejectReason::InvalidAmount,
            format!("{name} = {value} is not a decimal with at most {} fraction digits", currency.exponent()),
        )
    })?;
    bounded(amount, name, value)
}

#[cfg(test)]
mod tests {
    use crate::currency::Currency;
    use crate::event::{CanonicalEvent, EventKind};
    use crate::normalize::normalize_order;
    use crate::reject::{RejectReason, Rejection};
    use serde_json::{json, Value};

    /// 2026-11-28T15:00:00Z.
    const APPEND: i64 = 1_795_878_000_000;

    fn placed() -> Value {
        json!({"schema_version":1,"event_id":"e-1","order_id":"o-1","event_type":"order_placed",
            "event_time":"2026-11-28T14:59:59.120Z","store":"tokyo-01","currency":"JPY",
            "lines":[{"sku":"SKU-1","qty":2,"unit_price":"1980"}]})
    }

    fn run(v: &Value) -> Result<CanonicalEvent, Rejection> {
        normalize_order(&serde_json::to_vec(v).expect("serialise"), APPEND)
    }

    fn reason(v: &Value) -> RejectReason {
        run(v).expect_err("should be rejected").reason
    }

    #[test]
    fn v1_event_time_with_an_offset_is_converted_to_utc_millis() {
        let mut v = placed();
        let utc = run(&v).expect("accepted").event_time_ms;
        v["event_time"] = json!("2026-11-28T23:59:59.120+09:00");
        assert_eq!(run(&v).expect("accepted").event_time_ms, utc);
        v["event_time"] = json!("2026-11-28T09:59:59.120-05:00");
        assert_eq!(run(&v).expect("accepted").event_time_ms, utc);
    }

    #[test]
    fn v1_sub_millisecond_time_is_truncated_toward_negative_infinity() {
        let mut v = placed();
        v["event_time"] = json!("2026-11-28T14:59:59.120999Z");
        assert_eq!(run(&v).expect("accepted").event_time_ms, 1_795_877_999_120);
        v["event_time"] = json!("1969-12-31T23:59:59.9995Z");
        assert_eq!(run(&v).expect("accepted").event_time_ms, -1);
    }

    #[test]
    fn v1_time_without_offset_or_not_a_string_is_unparsable() {
        for t in [json!("2026-11-28T14:59:59"), json!("2026-11-28"), json!(1_795_877_999_120_i64), json!(null)] {
            let mut v = placed();
            v["event_time"] = t.clone();
            assert_eq!(reason(&v), RejectReason::UnparsableTime, "{t}");
        }
    }

    #[test]
    fn v1_event_type_is_case_sensitive() {
        let mut v = placed();
        v["event_type"] = json!("ORDER_PLACED");
        assert_eq!(reason(&v), RejectReason::UnknownEventType);
    }

    #[test]
    fn v1_jpy_price_with_a_fraction_is_invalid_amount() {
        let mut v = placed();
        v["lines"][0]["unit_price"] = json!("1980.5");
        assert_eq!(reason(&v), RejectReason::InvalidAmount);
    }

    #[test]
    fn v1_price_must_be_a_non_negative_decimal_string() {
        for p in [json!(1980), json!("-1"), json!("1e3"), json!("")] {
            let mut v = placed();
            v["lines"][0]["unit_price"] = p.clone();
            assert_eq!(reason(&v), RejectReason::InvalidAmount, "{p}");
        }
        let mut v = placed();
        v["lines"][0]["unit_price"] = json!("0");
        assert!(run(&v).is_ok(), "free items are allowed");
    }

    #[test]
    fn v1_prices_are_rescaled_to_the_currency_exponent() {
        let mut v = placed();
        v["currency"] = json!("USD");
        v["lines"][0]["unit_price"] = json!("19.8");
        let e = run(&v).expect("accepted");
        assert_eq!(e.lines[0].unit_price.map(|p| p.to_string()).as_deref(), Some("19.80"));
    }

    #[test]
    fn v1_currency_must_be_a_known_upper_case_code() {
        for c in [json!("jpy"), json!("XYZ"), json!(392), json!(null)] {
            let mut v = placed();
            v["currency"] = c.clone();
            assert_eq!(reason(&v), RejectReason::UnknownCurrency, "{c}");
        }
    }

    #[test]
    fn v1_placed_line_without_a_price_is_invalid_field() {
        let mut v = placed();
        v["lines"][0].as_object_mut().map(|o| o.remove("unit_price"));
        assert_eq!(reason(&v), RejectReason::InvalidField);
    }

    #[test]
    fn v1_shipped_without_prices_needs_no_currency_and_has_none() {
        let mut v = placed();
        v["event_type"] = json!("order_shipped");
        v["lines"][0].as_object_mut().map(|o| o.remove("unit_price"));
        let e = run(&v).expect("accepted");
        assert_eq!((e.kind, e.currency, e.lines[0].unit_price), (EventKind::Shipped, None, None));
        v.as_object_mut().map(|o| o.remove("currency"));
        assert_eq!(run(&v).expect("accepted").currency, None);
    }

    #[test]
    fn v1_shipped_with_prices_keeps_its_currency() {
        let mut v = placed();
        v["event_type"] = json!("order_shipped");
        let e = run(&v).expect("accepted");
        assert_eq!(e.currency, Currency::from_code("JPY"));
        assert_eq!(e.lines_amount().to_string(), "3960");
    }

    #[test]
    fn v1_refund_reads_amount_and_ignores_lines() {
        let mut v = placed();
        v["event_type"] = json!("order_refunded");
        v["currency"] = json!("EUR");
        v["amount"] = json!("12.5");
        let e = run(&v).expect("accepted");
        assert_eq!(e.refund_amount.map(|d| d.to_string()).as_deref(), Some("12.50"));
        assert!(e.lines.is_empty());
        v.as_object_mut().map(|o| o.remove("amount"));
        assert_eq!(reason(&v), RejectReason::InvalidField);
    }
}
