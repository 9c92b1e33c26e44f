//! Schema v2: `occurred_at_ms` epoch milliseconds, a currency on every price, amounts as
//! integers of minor units. The event currency is the one all its prices share.

use std::fmt;

use chrono::DateTime;
use compact_str::CompactString;
use rust_decimal::Decimal;
use serde::Deserialize;

use super::checks::{bounded, currency, describe, quantity, At, Checks};
use super::json::{nullable, required_list, Json, Obj};
use super::RawOrder;
use crate::currency::Currency;
use crate::event::{CanonicalEvent, EventKind, Line};
use crate::reject::{RejectReason, Rejection};

#[derive(Debug, Default, Deserialize)]
pub(super) struct RawItem<'a> {
    #[serde(borrow, default, deserialize_with = "nullable")]
    pub(super) sku: Option<Json<'a>>,
    #[serde(borrow, default, deserialize_with = "nullable")]
    pub(super) quantity: Option<Json<'a>>,
    #[serde(borrow)]
    pub(super) price: Option<Obj<RawMoney<'a>>>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct RawMoney<'a> {
    #[serde(borrow, default, deserialize_with = "nullable")]
    pub(super) amount_minor: Option<Json<'a>>,
    #[serde(borrow, default, deserialize_with = "nullable")]
    pub(super) currency: Option<Json<'a>>,
}

/// Steps 4 onwards of the check order; `checks` holds what the caller found so far.
pub(super) fn normalize(
    raw: RawOrder<'_>,
    event_id: CompactString,
    append_time_ms: i64,
    mut checks: Checks,
) -> Result<CanonicalEvent, Rejection> {
    let kind = match raw.type_.as_ref().and_then(Json::as_str) {
        Some("ORDER_PLACED") => EventKind::Placed,
        Some("ORDER_CANCELLED") => EventKind::Cancelled,
        Some("ORDER_SHIPPED") => EventKind::Shipped,
        Some("ORDER_REFUNDED") => EventKind::Refunded,
        _ => return Err(Rejection::new(RejectReason::UnknownEventType, describe(&"type", raw.type_.as_ref()))),
    };
    // Integers only: a float or string would mean a producer with a different idea of units.
    let event_time_ms = match &raw.occurred_at_ms {
        Some(Json::Int(ms)) => Some(*ms).filter(|ms| DateTime::from_timestamp_millis(*ms).is_some()),
        _ => None,
    };
    let Some(event_time_ms) = event_time_ms else {
        return Err(Rejection::new(
            RejectReason::UnparsableTime,
            describe(&"occurred_at_ms", raw.occurred_at_ms.as_ref()),
        ));
    };

    let order_id = checks.required_identifier(raw.order_id, &"order_id");
    let store = checks.required_identifier(raw.store_id, &"store_id");
    let channel = match raw.channel {
        None => None,
        Some(Json::Str(s)) => Some(CompactString::from(s)),
        Some(other) => {
            checks.fail(Rejection::new(RejectReason::InvalidField, format!("channel = {other} is not a string")));
            None
        }
    };

    let mut money = EventCurrency::default();
    let (lines, refund_amount) = if kind == EventKind::Refunded {
        let amount = match raw.refund {
            None => {
                checks.fail(Rejection::new(RejectReason::InvalidField, "refund missing"));
                None
            }
            Some(refund) => price(&mut checks, &mut money, refund, MoneyAt::Refund),
        };
        (Vec::new(), amount)
    } else {
        let items = checks.ok(required_list(raw.items, "items")).unwrap_or_default();
        let lines = items
            .into_iter()
            .enumerate()
            .map(|(i, item)| line(&mut checks, &mut money, kind, i, item))
            .collect::<Vec<_>>();
        checks.lines_total(lines.iter().filter_map(|l| l.unit_price.map(|p| (l.qty, p))), "items");
        (lines, None)
    };

    checks.future(event_time_ms, append_time_ms);
    checks.finish(CanonicalEvent {
        event_id,
        order_id: order_id.unwrap_or_default(),
        kind,
        event_time_ms,
        store: store.unwrap_or_default(),
        currency: money.first.map(|(c, _)| c),
        channel,
        lines,
        refund_amount,
        schema_version: 2,
    })
}

/// Where a money object sits, for rejection details.
#[derive(Clone, Copy)]
enum MoneyAt {
    Item(usize),
    Refund,
}

impl fmt::Display for MoneyAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MoneyAt::Item(i) => write!(f, "items[{i}].price"),
            MoneyAt::Refund => f.write_str("refund"),
        }
    }
}

/// The currency of the first price seen, with its place for the mixed-currency detail.
#[derive(Default)]
struct EventCurrency {
    first: Option<(Currency, MoneyAt)>,
}

impl EventCurrency {
    fn see(&mut self, checks: &mut Checks, c: Currency, at: MoneyAt) {
        match self.first {
            None => self.first = Some((c, at)),
            Some((first, first_at)) if first != c => checks.fail(Rejection::new(
                RejectReason::MixedCurrencies,
                format!("{at}.currency = {c} but {first_at}.currency = {first}"),
            )),
            Some(_) => {}
        }
    }
}

fn line(checks: &mut Checks, money: &mut EventCurrency, kind: EventKind, i: usize, item: Obj<RawItem<'_>>) -> Line {
    let Obj::Ok(item) = item else {
        checks.fail(Rejection::new(RejectReason::InvalidField, format!("items[{i}] is not an object")));
        return Line { sku: CompactString::default(), qty: 0, unit_price: None };
    };
    let sku = checks.required_identifier(item.sku, &At("items", i, "sku"));
    let qty = checks.ok(quantity(item.quantity.as_ref(), &At("items", i, "quantity")));
    let unit_price = match item.price {
        None if kind != EventKind::Shipped => {
            checks.fail(Rejection::new(RejectReason::InvalidField, format!("items[{i}].price missing")));
            None
        }
        None => None,
        Some(p) => price(checks, money, p, MoneyAt::Item(i)),
    };
    Line { sku: sku.unwrap_or_default(), qty: qty.unwrap_or_default(), unit_price }
}

/// A v2 money object `{"amount_minor": <int>, "currency": "<code>"}` in major units.
fn price(checks: &mut Checks, money: &mut EventCurrency, value: Obj<RawMoney<'_>>, name: MoneyAt) -> Option<Decimal> {
    let Obj::Ok(value) = value else {
        checks.fail(Rejection::new(RejectReason::InvalidAmount, format!("{name} is not an object")));
        return None;
    };
    let c = checks.ok(currency(value.currency.as_ref(), &format_args!("{name}.currency")))?;
    money.see(checks, c, name);
    checks.ok(minor(c, value.amount_minor.as_ref(), &format_args!("{name}.amount_minor")))
}

/// A v2 amount: a non-negative integer of minor units.
fn minor(currency: Currency, value: Option<&Json<'_>>, name: &dyn fmt::Display) -> Result<Decimal, Rejection> {
    let invalid =
        |problem: &str| Rejection::new(RejectReason::InvalidAmount, format!("{}{problem}", describe(name, value)));
    match value {
        Some(v @ Json::Int(n)) => bounded(currency.from_minor(*n), name, v),
        Some(Json::BigInt(_)) => Err(invalid(" exceeds the per-event maximum")),
        Some(_) => Err(invalid(" is not an integer")),
        None => Err(invalid("")),
    }
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
        json!({"schema_version":2,"event_id":"e-1","order_id":"o-1","type":"ORDER_PLACED",
            "occurred_at_ms":1_795_877_999_120_i64,"store_id":"tokyo-01","channel":"web",
            "items":[{"sku":"SKU-1","quantity":2,"price":{"amount_minor":198_000,"currency":"USD"}}]})
    }

    fn run(v: &Value) -> Result<CanonicalEvent, Rejection> {
        normalize_order(&serde_json::to_vec(v).expect("serialise"), APPEND)
    }

    fn reason(v: &Value) -> RejectReason {
        run(v).expect_err("should be rejected").reason
    }

    #[test]
    fn v2_amount_minor_is_converted_to_major_units() {
        let e = run(&placed()).expect("accepted");
        assert_eq!(e.lines[0].unit_price.map(|p| p.to_string()).as_deref(), Some("1980.00"));
        assert_eq!(e.currency, Currency::from_code("USD"));
        assert_eq!(e.channel.as_deref(), Some("web"));
        assert_eq!(e.store, "tokyo-01");
    }

    #[test]
    fn v2_amount_minor_in_jpy_has_no_fraction_digits() {
        let mut v = placed();
        v["items"][0]["price"] = json!({"amount_minor":1980,"currency":"JPY"});
        let e = run(&v).expect("accepted");
        assert_eq!(e.lines[0].unit_price.map(|p| p.to_string()).as_deref(), Some("1980"));
    }

    #[test]
    fn v2_amount_minor_must_be_a_non_negative_integer() {
        for a in [json!(-1), json!(19.8), json!("1980"), json!(null)] {
            let mut v = placed();
            v["items"][0]["price"]["amount_minor"] = a.clone();
            assert_eq!(reason(&v), RejectReason::InvalidAmount, "{a}");
        }
    }

    #[test]
    fn v2_prices_in_two_currencies_are_mixed_currencies() {
        let mut v = placed();
        v["items"] = json!([v["items"][0],
            {"sku":"SKU-2","quantity":1,"price":{"amount_minor":100,"currency":"EUR"}}]);
        let r = run(&v).expect_err("rejected");
        assert_eq!(r.reason, RejectReason::MixedCurrencies);
        assert_eq!(r.detail, "items[1].price.currency = EUR but items[0].price.currency = USD");
    }

    #[test]
    fn v2_price_without_a_known_currency_is_unknown_currency() {
        for c in [json!(null), json!("usd"), json!("ZZZ")] {
            let mut v = placed();
            v["items"][0]["price"]["currency"] = c.clone();
            assert_eq!(reason(&v), RejectReason::UnknownCurrency, "{c}");
        }
    }

    #[test]
    fn v2_time_must_be_an_integer_in_calendar_range() {
        for t in [json!(1.764e12), json!("1795877999120"), json!(null), json!(i64::MAX), json!(u64::MAX)] {
            let mut v = placed();
            v["occurred_at_ms"] = t.clone();
            assert_eq!(reason(&v), RejectReason::UnparsableTime, "{t}");
        }
    }

    #[test]
    fn v2_type_must_be_upper_case() {
        let mut v = placed();
        v["type"] = json!("order_placed");
        assert_eq!(reason(&v), RejectReason::UnknownEventType);
    }

    #[test]
    fn v2_shipped_items_may_omit_price_and_then_carry_no_currency() {
        let mut v = placed();
        v["type"] = json!("ORDER_SHIPPED");
        v["items"][0].as_object_mut().map(|o| o.remove("price"));
        let e = run(&v).expect("accepted");
        assert_eq!((e.kind, e.currency, e.lines[0].unit_price), (EventKind::Shipped, None, None));
        assert_eq!(e.lines_amount().to_string(), "0");
    }

    #[test]
    fn v2_shipped_currency_comes_from_any_priced_item() {
        let mut v = placed();
        v["type"] = json!("ORDER_SHIPPED");
        v["items"] = json!([{"sku":"SKU-0","quantity":1},
            {"sku":"SKU-1","quantity":2,"price":{"amount_minor":1980,"currency":"JPY"}}]);
        let e = run(&v).expect("accepted");
        assert_eq!(e.currency, Currency::from_code("JPY"));
        assert_eq!(e.lines[0].unit_price, None);
    }

    #[test]
    fn v2_placed_item_without_price_is_invalid_field() {
        let mut v = placed();
        v["items"][0].as_object_mut().map(|o| o.remove("price"));
        assert_eq!(reason(&v), RejectReason::InvalidField);
    }

    #[test]
    fn v2_refund_currency_becomes_the_event_currency() {
        let mut v = placed();
        v["type"] = json!("ORDER_REFUNDED");
        v["refund"] = json!({"amount_minor":1250,"currency":"EUR"});
        let e = run(&v).expect("accepted");
        assert_eq!(e.currency, Currency::from_code("EUR"));
        assert_eq!(e.refund_amount.map(|d| d.to_string()).as_deref(), Some("12.50"));
        assert!(e.lines.is_empty(), "items of a refund are ignored");
        v.as_object_mut().map(|o| o.remove("refund"));
        assert_eq!(reason(&v), RejectReason::InvalidField);
    }

    #[test]
    fn v2_channel_is_optional_but_must_be_a_string() {
        let mut v = placed();
        v.as_object_mut().map(|o| o.remove("channel"));
        assert_eq!(run(&v).expect("accepted").channel, None);
        v["channel"] = json!(7);
        assert_eq!(reason(&v), RejectReason::InvalidField);
    }
}
