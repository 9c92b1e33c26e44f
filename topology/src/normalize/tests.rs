//! Normalisation of v1 and v2 records: accepted forms, each reason and its ranking.

use super::*;
use crate::currency::Currency;
use crate::event::EventKind;
use serde_json::{json, Value};

/// 2026-11-28T15:00:00Z.
const APPEND: i64 = 1_795_878_000_000;

fn run(v: &Value) -> Result<CanonicalEvent, Rejection> {
    normalize_order(&serde_json::to_vec(v).expect("serialise"), APPEND)
}

fn reason(v: &Value) -> RejectReason {
    run(v).expect_err("should be rejected").reason
}

fn v1(kind: &str) -> Value {
    let mut v = json!({"schema_version":1,"event_id":"e-1","order_id":"o-1",
        "event_type":kind,"event_time":"2026-11-28T23:59:59.120+09:00","store":"tokyo-01",
        "currency":"USD","lines":[{"sku":"SKU-1","qty":2,"unit_price":"19.8"},
                                 {"sku":"SKU-2","qty":1,"unit_price":"5"}]});
    if kind == "order_refunded" {
        v["amount"] = json!("12.5");
        v.as_object_mut().map(|o| o.remove("lines"));
    }
    v
}

fn v2(kind: &str) -> Value {
    let mut v = json!({"schema_version":2,"event_id":"e-1","order_id":"o-1","type":kind,
        "occurred_at_ms":1_795_877_999_120_i64,"store_id":"tokyo-01","channel":"web",
        "items":[{"sku":"SKU-1","quantity":2,"price":{"amount_minor":1980,"currency":"USD"}},
                 {"sku":"SKU-2","quantity":1,"price":{"amount_minor":500,"currency":"USD"}}]});
    if kind == "ORDER_REFUNDED" {
        v["refund"] = json!({"amount_minor":1250,"currency":"USD"});
        v.as_object_mut().map(|o| o.remove("items"));
    }
    v
}

#[test]
fn max_amount_constant_matches_its_integer() {
    assert_eq!(MAX_AMOUNT, Decimal::from(MAX_EVENT_AMOUNT));
}

#[test]
fn check_order_ranks_every_reason_exactly_once() {
    for r in RejectReason::ALL {
        assert_eq!(CHECK_ORDER.iter().filter(|x| **x == r).count(), 1, "{r}");
    }
}

#[test]
fn v1_and_v2_encodings_of_the_same_order_are_equal_but_for_version_and_channel() {
    for (k1, k2) in [
        ("order_placed", "ORDER_PLACED"),
        ("order_cancelled", "ORDER_CANCELLED"),
        ("order_shipped", "ORDER_SHIPPED"),
        ("order_refunded", "ORDER_REFUNDED"),
    ] {
        let a = run(&v1(k1)).expect("v1 accepted");
        let mut b = run(&v2(k2)).expect("v2 accepted");
        assert_eq!(b.schema_version, 2);
        assert_eq!(b.channel.as_deref(), Some("web"));
        b.schema_version = 1;
        b.channel = None;
        assert_eq!(a, b, "{k1}");
    }
}

#[test]
fn placed_event_is_canonical() {
    let e = run(&v1("order_placed")).expect("accepted");
    assert_eq!(e.kind, EventKind::Placed);
    assert_eq!(e.event_time_ms, 1_795_877_999_120);
    assert_eq!(e.currency, Currency::from_code("USD"));
    assert_eq!(e.units(), 3);
    assert_eq!(e.lines_amount().to_string(), "44.60");
    assert_eq!(e.refund_amount, None);
}

#[test]
fn malformed_bytes_are_not_json() {
    for bytes in [
        &b""[..],
        b"{",
        b"{\"schema_version\":1} trailing",
        b"[1,2]",
        b"\"a string\"",
        b"null",
        b"{\"event_id\":\"\xff\"}",
        b"{\"event_id\":\"a\",\"event_id\":\"b\"}",
    ] {
        let r = normalize_order(bytes, APPEND).expect_err("rejected");
        assert_eq!(r.reason, RejectReason::NotJson, "{bytes:?}");
    }
}

#[test]
fn schema_version_must_be_the_integer_1_or_2() {
    for sv in [json!(3), json!("1"), json!(1.0), json!(null), json!(-1)] {
        let mut v = v1("order_placed");
        v["schema_version"] = sv.clone();
        assert_eq!(reason(&v), RejectReason::UnknownSchemaVersion, "{sv}");
    }
}

#[test]
fn event_id_missing_blank_or_not_a_string_is_missing_event_id() {
    for id in [json!(null), json!(""), json!("  \t"), json!(42)] {
        let mut v = v2("ORDER_PLACED");
        v["event_id"] = id.clone();
        assert_eq!(reason(&v), RejectReason::MissingEventId, "{id}");
    }
}

#[test]
fn higher_ranked_reason_wins_whatever_the_field_order() {
    // unknown currency + zero quantity + future time: currency ranks first.
    let mut v = v1("order_placed");
    v["currency"] = json!("XYZ");
    v["lines"][1]["qty"] = json!(0);
    v["event_time"] = json!("2030-01-01T00:00:00Z");
    assert_eq!(reason(&v), RejectReason::UnknownCurrency);
    // zero quantity on a later line beats a bad price on an earlier one.
    let mut v = v1("order_placed");
    v["lines"][0]["unit_price"] = json!("-1");
    v["lines"][1]["qty"] = json!(-3);
    assert_eq!(reason(&v), RejectReason::NonPositiveQuantity);
    // future time beats a missing store.
    let mut v = v2("ORDER_PLACED");
    v["occurred_at_ms"] = json!(APPEND + MAX_FUTURE_SKEW_MS + 1);
    v.as_object_mut().map(|o| o.remove("store_id"));
    assert_eq!(reason(&v), RejectReason::EventTimeInFuture);
    // schema version is judged before event id.
    let mut v = v2("ORDER_PLACED");
    v["schema_version"] = json!(9);
    v["event_id"] = json!("");
    assert_eq!(reason(&v), RejectReason::UnknownSchemaVersion);
}

#[test]
fn reordering_fields_does_not_change_the_rejection() {
    let forward = br#"{"schema_version":1,"event_id":"e","order_id":"o","event_type":"order_placed","event_time":"2026-11-28T14:00:00Z","store":"s","currency":"USD","lines":[{"sku":"a","qty":1,"unit_price":"1.234"},{"sku":"b","qty":0,"unit_price":"1"}]}"#;
    let backward = br#"{"lines":[{"unit_price":"1.234","qty":1,"sku":"a"},{"unit_price":"1","qty":0,"sku":"b"}],"currency":"USD","store":"s","event_time":"2026-11-28T14:00:00Z","event_type":"order_placed","order_id":"o","event_id":"e","schema_version":1}"#;
    let a = normalize_order(forward, APPEND).expect_err("rejected");
    let b = normalize_order(backward, APPEND).expect_err("rejected");
    assert_eq!(a, b);
    assert_eq!(a.reason, RejectReason::NonPositiveQuantity);
    assert_eq!(a.detail, "lines[1].qty = 0");
}

#[test]
fn event_time_up_to_one_hour_after_append_is_accepted() {
    let mut v = v2("ORDER_PLACED");
    v["occurred_at_ms"] = json!(APPEND + MAX_FUTURE_SKEW_MS);
    assert!(run(&v).is_ok());
    v["occurred_at_ms"] = json!(APPEND + MAX_FUTURE_SKEW_MS + 1);
    assert_eq!(reason(&v), RejectReason::EventTimeInFuture);
}

#[test]
fn future_check_uses_append_time_not_the_clock() {
    let mut v = v2("ORDER_PLACED");
    v["occurred_at_ms"] = json!(4_000_000_000_000_i64); // year 2096
    let bytes = serde_json::to_vec(&v).expect("serialise");
    assert!(normalize_order(&bytes, 4_000_000_000_000).is_ok());
    assert!(normalize_order(&bytes, APPEND).is_err());
}

#[test]
fn unknown_fields_are_ignored() {
    let mut v = v1("order_placed");
    v["coupon"] = json!({"code":"X","nested":[1,2,{"a":null}]});
    v["lines"][0]["gift_wrap"] = json!(true);
    v["items"] = json!("v2 field on a v1 event");
    assert_eq!(run(&v).expect("accepted"), run(&v1("order_placed")).expect("accepted"));
}

#[test]
fn escaped_strings_are_decoded() {
    let bytes = br#"{"schema_version":2,"event_id":"e-\u0031","order_id":"o-\"1\"","type":"ORDER_SHIPPED","occurred_at_ms":0,"store_id":"s","items":[{"sku":"SKU-\u0041","quantity":1}]}"#;
    let e = normalize_order(bytes, APPEND).expect("accepted");
    assert_eq!(e.event_id, "e-1");
    assert_eq!(e.order_id, "o-\"1\"");
    assert_eq!(e.lines[0].sku, "SKU-A");
}

#[test]
fn missing_structure_is_invalid_field() {
    for field in ["order_id", "store", "lines"] {
        let mut v = v1("order_placed");
        v.as_object_mut().map(|o| o.remove(field));
        assert_eq!(reason(&v), RejectReason::InvalidField, "{field}");
    }
    let mut v = v1("order_placed");
    v["lines"] = json!([]);
    assert_eq!(reason(&v), RejectReason::InvalidField);
    v["lines"] = json!(["SKU-1"]);
    assert_eq!(reason(&v), RejectReason::InvalidField);
}

#[test]
fn quantity_that_is_not_a_u32_is_invalid_field() {
    for q in [json!(1.5), json!("2"), json!(4_294_967_296_u64), json!(null)] {
        let mut v = v2("ORDER_PLACED");
        v["items"][0]["quantity"] = q.clone();
        assert_eq!(reason(&v), RejectReason::InvalidField, "{q}");
    }
    for q in [json!(0), json!(-1), json!(-0.5)] {
        let mut v = v2("ORDER_PLACED");
        v["items"][0]["quantity"] = q.clone();
        assert_eq!(reason(&v), RejectReason::NonPositiveQuantity, "{q}");
    }
}

#[test]
fn event_money_above_the_maximum_is_invalid_amount() {
    let mut v = v1("order_placed");
    v["lines"][0]["unit_price"] = json!("499999999999990");
    assert!(run(&v).is_ok());
    v["lines"][0]["qty"] = json!(3);
    assert_eq!(reason(&v), RejectReason::InvalidAmount);
    let mut v = v2("ORDER_PLACED");
    v["items"][0]["quantity"] = json!(u32::MAX);
    v["items"][0]["price"]["amount_minor"] = json!(i64::MAX);
    assert_eq!(reason(&v), RejectReason::InvalidAmount);
}

#[test]
fn rejection_detail_names_the_field_and_cuts_long_values() {
    let mut v = v1("order_placed");
    v["event_type"] = json!("x".repeat(10_000));
    let r = run(&v).expect_err("rejected");
    assert_eq!(r.reason, RejectReason::UnknownEventType);
    assert!(r.detail.starts_with("event_type = \"xxx"));
    assert!(r.detail.len() < 80, "{}", r.detail);
}

#[test]
fn inventory_snapshot_is_parsed_with_any_offset() {
    let s =
        normalize_inventory(br#"{"sku":"SKU-1","on_hand":120,"as_of":"2026-11-28T23:00:00+09:00"}"#).expect("accepted");
    assert_eq!(s, InventorySnapshot { sku: "SKU-1".into(), on_hand: 120, as_of_ms: 1_795_874_400_000 });
}

#[test]
fn inventory_snapshot_rejections() {
    let cases: [(&[u8], RejectReason); 7] = [
        (b"nope", RejectReason::NotJson),
        (br#"{"sku":"SKU-1","on_hand":1}"#, RejectReason::UnparsableTime),
        (br#"{"sku":"SKU-1","on_hand":1,"as_of":"yesterday"}"#, RejectReason::UnparsableTime),
        (br#"{"sku":"","on_hand":1,"as_of":"2026-11-28T14:00:00Z"}"#, RejectReason::InvalidField),
        (br#"{"sku":"SKU-1","on_hand":-1,"as_of":"2026-11-28T14:00:00Z"}"#, RejectReason::InvalidField),
        (br#"{"sku":"SKU-1","on_hand":1.5,"as_of":"2026-11-28T14:00:00Z"}"#, RejectReason::InvalidField),
        (br#"{"sku":"SKU-1","as_of":"2026-11-28T14:00:00Z"}"#, RejectReason::InvalidField),
    ];
    for (bytes, expected) in cases {
        let r = normalize_inventory(bytes).expect_err("rejected");
        assert_eq!(r.reason, expected, "{}", String::from_utf8_lossy(bytes));
    }
}
