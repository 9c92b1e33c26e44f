//! Identifiers and hostile bytes: every case has one defined reason and a detail that names
//! the field or the problem (SPEC §1.3, "Poison input is bad input too").

use serde_json::{json, Value};

use super::json::too_deep;
use super::*;

/// 2026-11-28T15:00:00Z.
const APPEND: i64 = 1_795_878_000_000;

fn v1() -> Value {
    json!({"schema_version":1,"event_id":"e-1","order_id":"o-1","event_type":"order_placed",
        "event_time":"2026-11-28T14:59:59.120Z","store":"tokyo-01","currency":"JPY",
        "lines":[{"sku":"SKU-1","qty":2,"unit_price":"1980"},{"sku":"SKU-2","qty":1,"unit_price":"500"}]})
}

fn v2() -> Value {
    json!({"schema_version":2,"event_id":"e-1","order_id":"o-1","type":"ORDER_PLACED",
        "occurred_at_ms":1_795_877_999_120_i64,"store_id":"tokyo-01","channel":"web",
        "items":[{"sku":"SKU-1","quantity":2,"price":{"amount_minor":1980,"currency":"JPY"}}]})
}

fn order(v: &Value) -> Result<CanonicalEvent, Rejection> {
    normalize_order(&serde_json::to_vec(v).expect("serialise"), APPEND)
}

fn rejected(v: &Value) -> Rejection {
    order(v).expect_err("should be rejected")
}

fn order_bytes(bytes: &[u8]) -> Rejection {
    normalize_order(bytes, APPEND).expect_err("should be rejected")
}

/// `v` serialised with the string `"__NEST__"` replaced by raw JSON text.
fn with_raw(v: &Value, raw: &str) -> Vec<u8> {
    let text = serde_json::to_string(v).expect("serialise");
    assert!(text.contains("\"__NEST__\""), "{text}");
    text.replacen("\"__NEST__\"", raw, 1).into_bytes()
}

/// `levels` nested arrays around `null`.
fn nested(levels: usize) -> String {
    format!("{}null{}", "[".repeat(levels), "]".repeat(levels))
}

#[test]
fn a_control_character_in_a_line_sku_is_invalid_identifier_naming_the_line() {
    let mut v = v1();
    v["lines"][1]["sku"] = json!("SKU\u{7}2");
    let r = rejected(&v);
    assert_eq!(r.reason, RejectReason::InvalidIdentifier);
    assert_eq!(r.detail, "lines[1].sku: contains a control character (0x07) at byte 3");
    let mut v = v2();
    v["items"][0]["sku"] = json!("SKU-1\n");
    assert_eq!(rejected(&v).detail, "items[0].sku: contains a control character (0x0A) at byte 5");
}

#[test]
fn an_event_id_longer_than_the_limit_is_invalid_identifier_with_its_length() {
    let mut v = v2();
    v["event_id"] = json!("e".repeat(300));
    let r = rejected(&v);
    assert_eq!(r.reason, RejectReason::InvalidIdentifier);
    assert_eq!(r.detail, "event_id: 300 bytes, limit 256");
    v["event_id"] = json!("e".repeat(DEFAULT_MAX_IDENTIFIER_BYTES));
    assert!(order(&v).is_ok(), "exactly the limit is accepted");
}

#[test]
fn every_identifier_field_of_both_versions_is_checked() {
    let fields: [(Value, &[&str], &str); 8] = [
        (v1(), &["event_id"], "event_id"),
        (v1(), &["order_id"], "order_id"),
        (v1(), &["store"], "store"),
        (v1(), &["lines", "0", "sku"], "lines[0].sku"),
        (v2(), &["event_id"], "event_id"),
        (v2(), &["order_id"], "order_id"),
        (v2(), &["store_id"], "store_id"),
        (v2(), &["items", "0", "sku"], "items[0].sku"),
    ];
    for (mut v, path, name) in fields {
        let pointer = format!("/{}", path.join("/"));
        *v.pointer_mut(&pointer).expect("field") = json!("a\u{1b}[31mb");
        let r = rejected(&v);
        assert_eq!(r.reason, RejectReason::InvalidIdentifier, "{name}");
        assert_eq!(r.detail, format!("{name}: contains a control character (0x1B) at byte 1"));
    }
}

#[test]
fn non_ascii_identifiers_are_rejected_so_action_keys_stay_header_safe() {
    for (sku, problem) in [
        ("SKU-é", "contains U+00E9, which is not printable ASCII, at byte 4"),
        ("東京-01", "contains U+6771, which is not printable ASCII, at byte 0"),
        ("SKU-\u{202E}1", "contains U+202E, which is not printable ASCII, at byte 4"),
        ("SKU-\u{85}1", "contains a control character (U+0085) at byte 4"),
        ("SKU-\u{7f}", "contains a control character (0x7F) at byte 4"),
    ] {
        let mut v = v1();
        v["lines"][0]["sku"] = json!(sku);
        let r = rejected(&v);
        assert_eq!(r.reason, RejectReason::InvalidIdentifier, "{sku:?}");
        assert_eq!(r.detail, format!("lines[0].sku: {problem}"));
    }
}

#[test]
fn an_identifier_may_hold_inner_spaces_but_not_start_or_end_with_one() {
    let mut v = v1();
    v["store"] = json!("tokyo 01 (east)");
    assert_eq!(order(&v).expect("accepted").store, "tokyo 01 (east)");
    for store in [" tokyo-01", "tokyo-01 "] {
        v["store"] = json!(store);
        let r = rejected(&v);
        assert_eq!(
            (r.reason, r.detail.as_str()),
            (RejectReason::InvalidIdentifier, "store: starts or ends with a space")
        );
    }
}

#[test]
fn blank_or_missing_identifiers_keep_their_older_reasons() {
    let mut v = v1();
    v["event_id"] = json!("\t");
    assert_eq!(rejected(&v).reason, RejectReason::MissingEventId);
    let mut v = v1();
    v["lines"][0]["sku"] = json!("");
    assert_eq!(rejected(&v).reason, RejectReason::InvalidField);
    let mut v = v2();
    v["store_id"] = json!(null);
    assert_eq!(rejected(&v).detail, "store_id missing", "a null field counts as missing");
    v["store_id"] = json!(["tokyo-01"]);
    assert_eq!(rejected(&v).reason, RejectReason::InvalidField);
}

#[test]
fn the_identifier_limit_comes_from_the_normalize_limits() {
    let limits = NormalizeLimits { max_identifier_bytes: 8 };
    let mut v = v2();
    v["items"][0]["sku"] = json!("SKU-1234");
    let bytes = serde_json::to_vec(&v).expect("serialise");
    assert!(normalize_order_with(Some(&bytes), APPEND, limits).is_ok());
    v["items"][0]["sku"] = json!("SKU-12345");
    let bytes = serde_json::to_vec(&v).expect("serialise");
    let r = normalize_order_with(Some(&bytes), APPEND, limits).expect_err("rejected");
    assert_eq!(r.detail, "items[0].sku: 9 bytes, limit 8");
    assert!(normalize_order(&bytes, APPEND).is_ok(), "the default limit is 256");
}

#[test]
fn invalid_identifier_ranks_below_the_reading_checks_and_above_all_others() {
    // Above: unknown currency, zero quantity, bad price, future time, missing order_id.
    let mut v = v1();
    v["lines"][1]["sku"] = json!("SKU\u{0}");
    v["currency"] = json!("XYZ");
    v["lines"][0]["qty"] = json!(0);
    v["lines"][0]["unit_price"] = json!("-1");
    v["event_time"] = json!("2030-01-01T00:00:00Z");
    v.as_object_mut().map(|o| o.remove("order_id"));
    assert_eq!(rejected(&v).reason, RejectReason::InvalidIdentifier);
    // Below: schema version, blank event_id, event type, time.
    for (field, value, expected) in [
        ("schema_version", json!(7), RejectReason::UnknownSchemaVersion),
        ("event_id", json!(" "), RejectReason::MissingEventId),
        ("event_type", json!("order_lost"), RejectReason::UnknownEventType),
        ("event_time", json!("tomorrow"), RejectReason::UnparsableTime),
    ] {
        let mut v = v1();
        v["store"] = json!("tokyo\r\n01");
        v[field] = value;
        assert_eq!(rejected(&v).reason, expected, "{field}");
    }
    assert_eq!(CHECK_ORDER[5], RejectReason::InvalidIdentifier);
}

#[test]
fn among_several_bad_identifiers_the_first_checked_is_reported_whatever_the_field_order() {
    let forward = br#"{"schema_version":2,"event_id":"e\u0001","order_id":"o","type":"ORDER_SHIPPED","occurred_at_ms":0,"store_id":"s\u0002","items":[{"sku":"a\u0003","quantity":1}]}"#;
    let backward = br#"{"items":[{"quantity":1,"sku":"a\u0003"}],"store_id":"s\u0002","occurred_at_ms":0,"type":"ORDER_SHIPPED","order_id":"o","event_id":"e\u0001","schema_version":2}"#;
    let a = order_bytes(forward);
    assert_eq!(a, order_bytes(backward));
    assert_eq!(a.detail, "event_id: contains a control character (0x01) at byte 1");
}

#[test]
fn an_inventory_sku_that_is_not_an_identifier_is_invalid_identifier() {
    let snapshot = |sku: &str| {
        let v = json!({"sku": sku, "on_hand": 3, "as_of": "2026-11-28T14:00:00Z"});
        serde_json::to_vec(&v).expect("serialise")
    };
    let r = normalize_inventory(&snapshot("SKU\u{7}")).expect_err("rejected");
    assert_eq!(
        (r.reason, r.detail.as_str()),
        (RejectReason::InvalidIdentifier, "sku: contains a control character (0x07) at byte 3")
    );
    let r = normalize_inventory(&snapshot(&"S".repeat(257))).expect_err("rejected");
    assert_eq!(r.detail, "sku: 257 bytes, limit 256");
    let r = normalize_inventory_with(Some(&snapshot("SKU-10")), NormalizeLimits { max_identifier_bytes: 5 });
    assert_eq!(r.expect_err("rejected").detail, "sku: 6 bytes, limit 5");
    // Ranked below an unreadable as_of, above a negative on_hand.
    let r = normalize_inventory(br#"{"sku":"SKU\u0007","on_hand":-1,"as_of":"2026-11-28T14:00:00Z"}"#);
    assert_eq!(r.expect_err("rejected").reason, RejectReason::InvalidIdentifier);
    let r = normalize_inventory(br#"{"sku":"SKU\u0007","on_hand":1,"as_of":"soon"}"#);
    assert_eq!(r.expect_err("rejected").reason, RejectReason::UnparsableTime);
}

#[test]
fn a_tombstone_is_not_json_and_says_so() {
    let r = normalize_order_with(None, APPEND, NormalizeLimits::default()).expect_err("rejected");
    assert_eq!((r.reason, r.detail.as_str()), (RejectReason::NotJson, "no value (a tombstone)"));
    let r = normalize_inventory_with(None, NormalizeLimits::default()).expect_err("rejected");
    assert_eq!((r.reason, r.detail.as_str()), (RejectReason::NotJson, "no value (a tombstone)"));
}

#[test]
fn an_empty_value_is_not_json_and_says_so() {
    let r = order_bytes(b"");
    assert_eq!((r.reason, r.detail.as_str()), (RejectReason::NotJson, "empty value"));
    let r = normalize_inventory(b"").expect_err("rejected");
    assert_eq!((r.reason, r.detail.as_str()), (RejectReason::NotJson, "empty value"));
    assert_eq!(order_bytes(b" \n").reason, RejectReason::NotJson, "whitespace only");
}

#[test]
fn a_json_null_value_is_not_json_and_says_so() {
    for bytes in [&b"null"[..], b" null\n"] {
        let r = order_bytes(bytes);
        assert_eq!((r.reason, r.detail.as_str()), (RejectReason::NotJson, "top level is null, not an object"));
        let r = normalize_inventory(bytes).expect_err("rejected");
        assert_eq!(r.detail, "top level is null, not an object");
    }
    assert_eq!(order_bytes(b"[]").detail, "top level is an array, not an object");
    assert_eq!(order_bytes(b"7").detail, "top level is a number, not an object");
}

#[test]
fn invalid_utf8_outside_strings_is_not_json() {
    let r = order_bytes(b"{\"schema_version\":1,\xff}");
    assert_eq!((r.reason, r.detail.as_str()), (RejectReason::NotJson, "invalid UTF-8 at byte 20"));
}

#[test]
fn invalid_utf8_inside_a_string_is_not_json() {
    let r = order_bytes(b"{\"schema_version\":1,\"event_id\":\"e-\xc3\x28\"}");
    assert_eq!((r.reason, r.detail.as_str()), (RejectReason::NotJson, "invalid UTF-8 at byte 34"));
    let r = normalize_inventory(b"{\"sku\":\"\xed\xa0\x80\",\"on_hand\":1,\"as_of\":\"2026-11-28T14:00:00Z\"}");
    assert_eq!(r.expect_err("rejected").detail, "invalid UTF-8 at byte 8", "a UTF-8 encoded surrogate");
}

#[test]
fn invalid_utf8_inside_an_ignored_field_is_not_json() {
    // serde_json skips unknown fields without validating their strings.
    let good = serde_json::to_string(&v1()).expect("serialise");
    assert!(normalize_order(good.as_bytes(), APPEND).is_ok());
    let mut bytes = good.into_bytes();
    bytes.pop();
    bytes.extend_from_slice(b",\"coupon\":\"\xff\xfe\"}");
    assert_eq!(order_bytes(&bytes).reason, RejectReason::NotJson);
}

#[test]
fn a_hundred_thousand_nested_arrays_are_not_json_wherever_they_are_without_overflowing_the_stack() {
    let deep = nested(100_000);
    let mut places = vec![deep.clone().into_bytes(), format!("{{\"a\":{deep}}}").into_bytes()];
    for path in ["/event_id", "/lines/0", "/lines/1/unit_price", "/coupon"] {
        let mut v = v1();
        match v.pointer_mut(path) {
            Some(slot) => *slot = json!("__NEST__"),
            None => v["coupon"] = json!("__NEST__"),
        }
        places.push(with_raw(&v, &deep));
    }
    let mut v = v2();
    v["items"][0]["price"] = json!("__NEST__");
    places.push(with_raw(&v, &deep));
    places.push("[".repeat(100_000).into_bytes());
    for bytes in places {
        let r = order_bytes(&bytes);
        assert_eq!(r.reason, RejectReason::NotJson);
        assert!(r.detail.starts_with("nested deeper than 128 levels at byte "), "{}", r.detail);
        let r = normalize_inventory(&bytes).expect_err("rejected");
        assert_eq!(r.reason, RejectReason::NotJson);
    }
}

#[test]
fn nesting_up_to_the_limit_is_judged_like_any_other_value() {
    // The event object is one level, so 127 arrays inside it reach the limit exactly.
    let mut v = v1();
    v["coupon"] = json!("__NEST__");
    assert!(normalize_order(&with_raw(&v, &nested(MAX_NESTING_DEPTH - 1)), APPEND).is_ok());
    let r = order_bytes(&with_raw(&v, &nested(MAX_NESTING_DEPTH)));
    assert_eq!(r.reason, RejectReason::NotJson);
    let mut v = v1();
    v["event_id"] = json!("__NEST__");
    let r = order_bytes(&with_raw(&v, &nested(MAX_NESTING_DEPTH - 1)));
    assert_eq!(r.reason, RejectReason::MissingEventId, "{}", r.detail);
}

#[test]
fn brackets_inside_strings_do_not_count_as_nesting() {
    let mut v = v1();
    v["coupon"] = json!(format!("\"\\{}", "[{".repeat(1_000)));
    assert!(order(&v).is_ok());
    // An escaped backslash ends right before the closing quote: the scan must leave the string.
    let bytes = format!("{{\"a\":\"\\\\\",\"b\":{}}}", nested(MAX_NESTING_DEPTH));
    assert_eq!(too_deep(bytes.as_bytes()), Some(r#"{"a":"\\","b":"#.len() + MAX_NESTING_DEPTH - 1));
}
