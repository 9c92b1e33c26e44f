//! Property tests of normalisation over arbitrary and mutated input (SPEC §1.3: bad input
//! never crashes, and every record is either accepted or rejected for one known reason).
//!
//! Each property runs `PROPTEST_CASES` cases, 1024 when unset: well under a second in release
//! mode, so it runs with every `cargo test`.

use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::{json, Value};

use tidemark_topology::event::{CanonicalEvent, InventorySnapshot};
use tidemark_topology::normalize::{
    normalize_inventory_with, normalize_order_with, NormalizeLimits, DEFAULT_MAX_IDENTIFIER_BYTES,
};
use tidemark_topology::reject::{RejectReason, Rejection};

/// 2026-11-28T15:00:00Z.
const APPEND: i64 = 1_795_878_000_000;

/// The identifier rule, written out independently of the code under test: printable ASCII,
/// no space first or last, not blank, at most `max` bytes.
fn is_identifier(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes().all(|b| (0x20..=0x7e).contains(&b))
        && !s.starts_with(' ')
        && !s.ends_with(' ')
}

fn config() -> Config {
    // No regression files: a failure prints its minimal input, to be pinned as a unit test.
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(1024);
    Config { cases, failure_persistence: None, ..Config::default() }
}

/// Both properties every outcome must have: a known reason with a detail, and the same
/// answer when asked twice.
fn check_outcome<T: PartialEq + std::fmt::Debug>(first: &Result<T, Rejection>, again: &Result<T, Rejection>) {
    assert_eq!(first, again, "normalisation is not deterministic");
    if let Err(r) = first {
        assert!(RejectReason::ALL.contains(&r.reason), "{r}");
        assert_eq!(RejectReason::from_str_code(r.reason.as_str()), Some(r.reason));
        assert!(!r.detail.is_empty(), "{:?} without detail", r.reason);
    }
}

fn order(bytes: &[u8], limits: NormalizeLimits) -> Result<CanonicalEvent, Rejection> {
    let first = normalize_order_with(Some(bytes), APPEND, limits);
    check_outcome(&first, &normalize_order_with(Some(bytes), APPEND, limits));
    if let Ok(e) = &first {
        let max = limits.max_identifier_bytes;
        assert!(is_identifier(&e.event_id, max), "event_id {:?}", e.event_id);
        assert!(is_identifier(&e.order_id, max), "order_id {:?}", e.order_id);
        assert!(is_identifier(&e.store, max), "store {:?}", e.store);
        for line in &e.lines {
            assert!(is_identifier(&line.sku, max), "sku {:?}", line.sku);
        }
    }
    first
}

fn inventory(bytes: &[u8], limits: NormalizeLimits) -> Result<InventorySnapshot, Rejection> {
    let first = normalize_inventory_with(Some(bytes), limits);
    check_outcome(&first, &normalize_inventory_with(Some(bytes), limits));
    if let Ok(s) = &first {
        assert!(is_identifier(&s.sku, limits.max_identifier_bytes), "sku {:?}", s.sku);
    }
    first
}

fn limits() -> impl Strategy<Value = NormalizeLimits> {
    prop_oneof![
        3 => Just(NormalizeLimits::default()),
        1 => (1usize..40).prop_map(|max_identifier_bytes| NormalizeLimits { max_identifier_bytes }),
    ]
}

/// Bytes that look like JSON often enough to reach past the first syntax error.
fn json_ish() -> impl Strategy<Value = Vec<u8>> {
    const TOKENS: [&[u8]; 20] = [
        b"{",
        b"}",
        b"[",
        b"]",
        b":",
        b",",
        b"\"",
        b"\\",
        b"null",
        b"1",
        b"-0.5",
        b"\"schema_version\":1",
        b"\"schema_version\":2",
        b"\"event_id\"",
        b"\"sku\"",
        b"\"lines\"",
        b"\"items\"",
        b"\"a\x07\"",
        b"\xff",
        b"\xc3",
    ];
    let token = prop::sample::select(&TOKENS[..]);
    proptest::collection::vec(token, 0..64).prop_map(|tokens| tokens.concat())
}

/// A string that is hostile as an identifier, or sometimes a fine one.
fn hostile_text() -> impl Strategy<Value = String> {
    let ch = prop_oneof![
        4 => proptest::char::range(' ', '~'),
        1 => proptest::char::range('\u{0}', '\u{1f}'),
        1 => Just('\u{7f}'),
        1 => Just(' '),
        1 => any::<char>(),
    ];
    prop_oneof![
        4 => proptest::collection::vec(ch, 0..24).prop_map(String::from_iter),
        1 => (240usize..300).prop_map(|n| "x".repeat(n)),
        1 => (300usize..5_000).prop_map(|n| "y".repeat(n)),
        1 => "[!-~][ -~]{0,30}[!-~]",
        1 => " ?[!-~]{1,8} ?",
    ]
}

/// A value for any field: hostile text, a wrong type, or deep nesting (spliced in after
/// serialisation, since `Value` itself is recursive).
fn hostile_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        6 => hostile_text().prop_map(Value::from),
        1 => any::<i64>().prop_map(Value::from),
        1 => any::<u64>().prop_map(Value::from),
        1 => any::<f64>().prop_filter("JSON has no NaN or infinity", |f| f.is_finite()).prop_map(Value::from),
        1 => any::<bool>().prop_map(Value::from),
        1 => Just(Value::Null),
        1 => Just(json!([])),
        1 => Just(json!({})),
        1 => Just(json!([{"sku":"SKU-1"}])),
        1 => (100usize..160).prop_map(|n| Value::from(format!("__NEST_{n}__"))),
        1 => Just(Value::from("__NEST_100000__")),
    ]
}

fn v1(kind: &str, lines: usize) -> Value {
    let lines: Vec<Value> =
        (0..lines).map(|i| json!({"sku":format!("SKU-{i}"),"qty":i + 1,"unit_price":"19.80"})).collect();
    json!({"schema_version":1,"event_id":"e-1","order_id":"o-1","event_type":kind,
        "event_time":"2026-11-28T14:59:59.120+09:00","store":"tokyo-01","currency":"USD",
        "lines":lines,"amount":"12.50"})
}

fn v2(kind: &str, lines: usize) -> Value {
    let items: Vec<Value> = (0..lines)
        .map(|i| json!({"sku":format!("SKU-{i}"),"quantity":i + 1,"price":{"amount_minor":1980,"currency":"USD"}}))
        .collect();
    json!({"schema_version":2,"event_id":"e-1","order_id":"o-1","type":kind,
        "occurred_at_ms":1_795_877_999_120_i64,"store_id":"tokyo-01","channel":"web",
        "items":items,"refund":{"amount_minor":1250,"currency":"USD"}})
}

/// A valid event of either version and any kind, with one to three lines.
fn event() -> impl Strategy<Value = Value> {
    let v1_kinds = ["order_placed", "order_cancelled", "order_shipped", "order_refunded"];
    let v2_kinds = ["ORDER_PLACED", "ORDER_CANCELLED", "ORDER_SHIPPED", "ORDER_REFUNDED"];
    (any::<bool>(), 0usize..4, 1usize..4).prop_map(move |(first, kind, lines)| {
        if first {
            v1(v1_kinds[kind], lines)
        } else {
            v2(v2_kinds[kind], lines)
        }
    })
}

/// Where a mutation lands: JSON pointers into either version (absent ones add a top-level
/// field), so identifiers, money, time, structure and unknown fields are all hit.
const FIELDS: [&str; 24] = [
    "/schema_version",
    "/event_id",
    "/order_id",
    "/event_type",
    "/type",
    "/event_time",
    "/occurred_at_ms",
    "/store",
    "/store_id",
    "/currency",
    "/channel",
    "/amount",
    "/refund",
    "/lines",
    "/items",
    "/lines/0",
    "/lines/0/sku",
    "/lines/1/sku",
    "/lines/0/qty",
    "/lines/0/unit_price",
    "/items/0/sku",
    "/items/1/sku",
    "/items/0/price",
    "/coupon",
];

/// A byte-level change after serialisation: none, a byte overwritten, or the tail cut off.
#[derive(Clone, Debug)]
enum ByteEdit {
    None,
    Set(prop::sample::Index, u8),
    Truncate(prop::sample::Index),
}

fn byte_edit() -> impl Strategy<Value = ByteEdit> {
    prop_oneof![
        6 => Just(ByteEdit::None),
        1 => (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(i, b)| ByteEdit::Set(i, b)),
        1 => any::<prop::sample::Index>().prop_map(ByteEdit::Truncate),
    ]
}

/// Serialises `v`, splices the nesting placeholders and applies `edit`.
fn encode(v: &Value, edit: &ByteEdit) -> Vec<u8> {
    let mut text = serde_json::to_string(v).expect("serialise");
    while let Some(start) = text.find("\"__NEST_") {
        let Some(len) = text[start + 8..].find("__\"") else { break };
        let Ok(levels) = text[start + 8..start + 8 + len].parse::<usize>() else { break };
        let nested = format!("{}0{}", "[".repeat(levels), "]".repeat(levels));
        text.replace_range(start..start + 8 + len + 3, &nested);
    }
    let mut bytes = text.into_bytes();
    match edit {
        ByteEdit::None => {}
        ByteEdit::Set(i, b) => {
            let at = i.index(bytes.len());
            bytes[at] = *b;
        }
        ByteEdit::Truncate(i) => bytes.truncate(i.index(bytes.len())),
    }
    bytes
}

fn mutated(mut v: Value, mutations: &[(usize, Value)]) -> Value {
    for (field, value) in mutations {
        let pointer = FIELDS[*field % FIELDS.len()];
        match v.pointer_mut(pointer) {
            Some(slot) => *slot = value.clone(),
            None => {
                if let Some(obj) = v.as_object_mut() {
                    obj.insert(pointer.trim_start_matches('/').replace('/', "_"), value.clone());
                }
            }
        }
    }
    v
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_bytes_are_accepted_or_rejected_for_one_known_reason(
        bytes in proptest::collection::vec(any::<u8>(), 0..2_048),
        limits in limits(),
    ) {
        let _ = order(&bytes, limits);
        let _ = inventory(&bytes, limits);
    }

    #[test]
    fn json_like_token_soup_is_accepted_or_rejected_for_one_known_reason(
        bytes in json_ish(),
        limits in limits(),
    ) {
        let _ = order(&bytes, limits);
        let _ = inventory(&bytes, limits);
    }

    #[test]
    fn mutated_v1_and_v2_events_never_panic_and_accepted_ones_have_valid_identifiers(
        base in event(),
        mutations in proptest::collection::vec((any::<usize>(), hostile_value()), 0..4),
        edit in byte_edit(),
        limits in limits(),
    ) {
        let unmutated = encode(&base, &ByteEdit::None);
        prop_assert!(order(&unmutated, NormalizeLimits::default()).is_ok(), "the base event is valid");
        let _ = order(&encode(&mutated(base, &mutations), &edit), limits);
    }

    #[test]
    fn mutated_inventory_snapshots_never_panic_and_accepted_skus_are_identifiers(
        sku in prop_oneof![3 => hostile_value(), 1 => Just(Value::from("SKU-1"))],
        on_hand in prop_oneof![Just(json!(120)), hostile_value()],
        extra in hostile_value(),
        edit in byte_edit(),
        limits in limits(),
    ) {
        let v = json!({"sku": sku, "on_hand": on_hand, "as_of": "2026-11-28T14:00:00Z", "note": extra});
        let _ = inventory(&encode(&v, &edit), limits);
    }
}

#[test]
fn the_oracle_agrees_with_the_default_limit() {
    assert!(is_identifier(&"a".repeat(DEFAULT_MAX_IDENTIFIER_BYTES), DEFAULT_MAX_IDENTIFIER_BYTES));
    assert!(!is_identifier(&"a".repeat(DEFAULT_MAX_IDENTIFIER_BYTES + 1), DEFAULT_MAX_IDENTIFIER_BYTES));
    assert!(!is_identifier("SKU-\u{7}", DEFAULT_MAX_IDENTIFIER_BYTES));
    assert!(is_identifier("SKU 1", DEFAULT_MAX_IDENTIFIER_BYTES));
}
